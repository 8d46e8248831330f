"""A remote run's hops, from the records the bench's probe noted: they add up to the
client-observed time, and a run with a record missing is left out, not guessed."""

from __future__ import annotations

from ops.bench_probes import HOPS, run_hops, summarize

SENT = 1_000.0


def _seen() -> list[tuple[str, str, int, float]]:
    """One run of two activities, as the probe notes them: (kind, activity, recorded_at,
    readable here); a batch's events share their recorded_at (its decision time)."""
    return [
        ("started", "", 1_001, 1_006.0),
        ("scheduled", "a", 1_001, 1_006.0),
        ("task", "a", 1_001, 1_006.5),
        ("report", "a", 1_007, 1_008.0),
        ("completed", "a", 1_009, 1_014.0),
        ("scheduled", "b", 1_009, 1_014.0),
        ("task", "b", 1_009, 1_015.0),
        ("report", "b", 1_016, 1_017.5),
        ("completed", "b", 1_018, 1_023.0),
        ("terminal", "", 1_018, 1_023.0),
    ]


def test_the_hops_add_up_to_the_client_observed_time() -> None:
    hops = run_hops(_seen(), SENT, 1_024.0)
    assert hops == {
        "client_to_decision": 1.0,
        "orchestrator_txn": 5.5 + 6.0,
        "worker_fetch_and_run": 0.5 + 1.0,
        "report_produce": 1.0 + 1.5,
        "report_intake": 1.0 + 0.5,
        "final_txn": 5.0,
        "read_model_wake": 1.0,
    }
    assert sum(hops.values()) == 1_024.0 - SENT


def test_a_run_with_a_record_missing_is_left_out() -> None:
    for gone in ("started", "task", "report", "completed", "terminal"):
        seen = [r for r in _seen() if not (r[0] == gone and r[1] in ("", "b"))]
        assert run_hops(seen, SENT, 1_024.0) is None, gone


def test_the_summary_is_the_median_per_hop_and_names_the_slowest_runs() -> None:
    fast = dict.fromkeys(HOPS, 1.0)
    slow = fast | {"orchestrator_txn": 100.0}
    out = summarize([fast, fast, slow])
    assert out["orchestrator_txn"] == 1.0
    assert out["sum_of_medians"] == len(HOPS)
    assert out["runs"] == 3
    assert out["slowest"][0] == {"total_ms": 106.0, **slow}
    assert summarize([]) == {"runs": 0}
