"""``keel bench --scale`` (ops/bench_scale.py): the stall it reports, and its wiring."""

from __future__ import annotations

from typer.testing import CliRunner

from ops.bench_scale import longest_stall_ms


def test_the_longest_stall_is_the_longest_gap_without_an_ending_inside_the_window():
    ended = [50.0, 100.0, 180.0, 900.0, 950.0, 2000.0]
    # from 0: 50, 50, 80, 720 (180 -> 900), 50, then 950 -> the end of the window, 1000
    assert longest_stall_ms(ended, since=0.0, until=1950.0) == 1000.0
    assert longest_stall_ms(ended, since=0.0, until=1000.0) == 720.0
    assert longest_stall_ms([], since=10.0, until=25.0) == 15.0  # nothing ended at all
    assert longest_stall_ms([5.0, 30.0], since=10.0, until=25.0) == 15.0  # outside it


def test_keel_bench_offers_the_scale_mode():
    from orchestrator.cli import app

    result = CliRunner().invoke(app, ["bench", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "--scale" in result.output
