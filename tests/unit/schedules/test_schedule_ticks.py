"""One tick of a schedule: controls, due ticks, catch-up and overlap (docs/schedules.md)."""

from __future__ import annotations

from typing import Any

from orchestrator.client.schedule_client import build_spec
from orchestrator.schedules.planning import (
    PAUSED_WAKE_MS,
    TickInput,
    TickOutcome,
    TickResult,
    run_tick,
)

S = 1000


class Runs:
    """A fake of the starts and the read model: ids started once, ended when told."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.running: set[str] = set()

    def start(self, tick_ms: int, run_id: str) -> tuple[TickOutcome, str | None]:
        if run_id in self.started:
            return TickOutcome.JOINED, None
        self.started.append(run_id)
        self.running.add(run_id)
        return TickOutcome.STARTED, None

    def ended(self, run_id: str) -> bool:
        return run_id not in self.running


def tick(
    runs: Runs, now: int, before: TickResult | None = None, controls=(), **spec: Any
) -> TickResult:
    inp = TickInput(
        spec=build_spec("s", "w", **{"every": "2s", **spec}),
        carry=before.carry if before else None,
        controls=[{"op": c} for c in controls],
    )
    return run_tick(inp, now, runs.ended, runs.start)


def outcomes(r: TickResult) -> list[tuple[str, str]]:
    return [(h.tick[-6:], str(h.outcome)) for h in r.handled]


def test_the_first_tick_fires_nothing_and_sleeps_until_the_next_fire_time() -> None:
    runs = Runs()
    r = tick(runs, 100_500)
    assert r.handled == [] and runs.started == []
    assert (r.next_fire_ms, r.wake_in_ms) == (102_000, 1500)


def test_each_due_tick_starts_its_run_by_id_once() -> None:
    runs = Runs()
    r = tick(runs, 100_500, overlap="allow_all")
    r = tick(runs, 102_010, r, overlap="allow_all")
    r = tick(runs, 104_003, r, overlap="allow_all")
    assert runs.started == ["s:1970-01-01T00:01:42Z", "s:1970-01-01T00:01:44Z"]
    assert r.carry.started == 2 and r.carry.last_run == "s:1970-01-01T00:01:44Z"


def test_a_tick_run_again_joins_the_runs_it_started() -> None:
    runs = Runs()
    first = tick(runs, 100_500, overlap="allow_all")
    once = tick(runs, 104_100, first, overlap="allow_all")
    again = tick(runs, 104_900, first, overlap="allow_all")  # the same input, a later clock
    assert [str(h.outcome) for h in once.handled] == ["started", "started"]
    assert [str(h.outcome) for h in again.handled] == ["joined", "joined"]
    assert len(runs.started) == 2


def test_ticks_late_within_the_catch_up_window_fire_and_older_ones_are_missed() -> None:
    runs = Runs()
    r = tick(runs, 100_500, overlap="allow_all", catchup_window_s=5)
    r = tick(runs, 112_300, r, overlap="allow_all", catchup_window_s=5)  # down for ~12 s
    assert outcomes(r) == [
        ("01:42Z", "missed"),
        ("01:44Z", "missed"),
        ("01:46Z", "missed"),
        ("01:48Z", "started"),
        ("01:50Z", "started"),
        ("01:52Z", "started"),
    ]
    assert (r.carry.started, r.carry.skipped) == (3, 3)
    assert r.next_fire_ms == 114_000


def test_a_tick_retried_past_the_window_records_its_first_attempts_runs_as_joined() -> None:
    runs = Runs()
    first = tick(runs, 100_500, overlap="allow_all", catchup_window_s=5)
    tick(runs, 104_100, first, overlap="allow_all", catchup_window_s=5)  # its result is lost
    inp = TickInput(
        spec=build_spec("s", "w", every="2s", overlap="allow_all", catchup_window_s=5),
        carry=first.carry,
    )
    again = run_tick(inp, 120_000, runs.ended, runs.start, lambda wf: wf in runs.started)
    assert outcomes(again)[:4] == [
        ("01:42Z", "joined"),
        ("01:44Z", "joined"),
        ("01:46Z", "missed"),
        ("01:48Z", "missed"),
    ]
    assert len(runs.started) == 5  # 01:42, 01:44, then the three ticks within the window
    assert (again.carry.started, again.carry.skipped) == (5, 5)


def test_after_a_long_downtime_a_retried_tick_finds_its_first_attempts_runs() -> None:
    runs = Runs()
    first = tick(runs, 0, overlap="allow_all", catchup_window_s=5)
    tick(runs, 3600 * S, first, overlap="allow_all", catchup_window_s=5)  # its result is lost
    inp = TickInput(
        spec=build_spec("s", "w", every="2s", overlap="allow_all", catchup_window_s=5),
        carry=first.carry,
    )
    again = run_tick(inp, 3700 * S, runs.ended, runs.start, lambda wf: wf in runs.started)
    joined = [h.tick for h in again.handled if h.outcome == TickOutcome.JOINED]
    assert joined == ["1970-01-01T00:59:56Z", "1970-01-01T00:59:58Z", "1970-01-01T01:00:00Z"]
    assert [str(h.outcome) for h in again.handled][:4] == ["missed", "joined", "joined", "joined"]
    assert again.carry.skipped == 1847 - 3


def test_a_long_downtime_is_counted_not_listed() -> None:
    runs = Runs()
    r = tick(runs, 0, catchup_window_s=1)
    r = tick(runs, 3600 * S, r, catchup_window_s=1)
    assert [str(h.outcome) for h in r.handled] == ["missed", "started"]
    assert r.handled[0].detail is not None and r.handled[0].detail.startswith("1799 ticks")
    assert r.carry.skipped == 1799


def test_skip_records_a_tick_whose_previous_run_has_not_ended() -> None:
    runs = Runs()
    r = tick(runs, 100_500)
    r = tick(runs, 102_001, r)
    r = tick(runs, 104_001, r)
    assert outcomes(r) == [("01:44Z", "skipped_overlap")]
    runs.running.clear()
    r = tick(runs, 106_001, r)
    assert outcomes(r) == [("01:46Z", "started")]
    assert len(runs.started) == 2


def test_buffer_one_holds_one_tick_until_the_previous_run_ends() -> None:
    runs = Runs()
    r = tick(runs, 100_500, overlap="buffer_one")
    r = tick(runs, 102_001, r, overlap="buffer_one")
    r = tick(runs, 106_001, r, overlap="buffer_one")
    assert outcomes(r) == [("01:44Z", "buffered"), ("01:46Z", "skipped_overlap")]
    assert r.wake_in_ms == 1000  # a quarter of the interval, at least 1 s: it looks again soon
    runs.running.clear()
    r = tick(runs, 106_600, r, overlap="buffer_one")
    assert outcomes(r) == [("01:44Z", "started")]
    assert r.carry.buffered_ms is None
    assert runs.started[-1] == "s:1970-01-01T00:01:44Z"


def test_pause_fires_nothing_and_resume_never_fires_the_ticks_of_the_pause() -> None:
    runs = Runs()
    r = tick(runs, 100_500, overlap="allow_all")
    r = tick(runs, 101_000, r, ["pause"], overlap="allow_all")
    assert r.carry.paused and r.wake_in_ms == PAUSED_WAKE_MS and r.next_fire_ms is None
    r = tick(runs, 110_100, r, ["resume"], overlap="allow_all")
    assert not r.carry.paused and r.handled == [] and runs.started == []
    assert r.next_fire_ms == 112_000


def test_delete_ends_the_schedule_without_firing() -> None:
    runs = Runs()
    r = tick(runs, 100_500)
    r = tick(runs, 104_100, r, ["delete"])
    assert r.carry.deleted and r.handled == [] and runs.started == []
