"""A rolling restart of every orchestrator and worker under load (issue 47 item 2).

``keel bench --scale`` at small size on the three-broker cluster: two orchestrators and
two workers over 12 partitions with three replicas, ``ledger_step`` runs (a side effect
whose ledger counts calls per key) started at 5 a second while each process in turn is
stopped with SIGTERM and started again under its identity, as a deploy does. Every start
must complete, the ledger must hold each run's post exactly once, and the prefix's
histories must pass the invariant checker.
"""

from __future__ import annotations

from ops import scratch
from ops.bench_scale import ScaleRig, rolling_restart
from tests.history_check import verify_after_test


def test_a_rolling_restart_of_two_orchestrators_and_two_workers_loses_and_repeats_nothing(
    cluster_settings, request
):
    rig = ScaleRig(cluster_settings, lambda message: None, orchestrators=2, workers=2)
    try:
        result = rolling_restart(rig, rate=5.0, settle_s=1.0)
    finally:
        rig.close(drop=False)
    verify_after_test(request, rig.settings)  # the rig's own prefix
    scratch.drop(rig.settings)
    print(f"rolling restart: {result}")
    assert result["restarts"] == 4
    assert (result["refused_starts"], result["runs_not_ended"], result["runs_not_completed"]) == (
        [],
        [],
        [],
    )
    assert result["failed_starts"] == 0
    assert (result["duplicate_effects"], result["effects_missing"]) == (0, 0)
    assert result["runs"] >= 5 * result["restart_window_s"] * 0.8
