"""The retry budget paces retries per activity type and refills on its own."""

from __future__ import annotations

import pytest

from orchestrator.engine.budget import RetryBudget


def test_burst_then_rate_per_activity_type():
    b = RetryBudget(rate_per_s=2, burst=3)
    assert [b.take("ledger", 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert b.take("ledger", 0.0) == pytest.approx(0.5)
    assert b.take("email", 0.0) == 0.0  # another type has its own bucket
    assert b.take("ledger", 0.5) == 0.0  # one token refilled after 1/rate s
    assert b.take("ledger", 0.5) == pytest.approx(0.5)
    assert b.deferred == 2


def test_refills_to_burst_not_beyond():
    b = RetryBudget(rate_per_s=10, burst=2)
    b.take("x", 0.0)
    b.take("x", 0.0)
    granted = [b.take("x", 100.0) for _ in range(3)]
    assert granted[:2] == [0.0, 0.0] and granted[2] > 0


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="rate_per_s > 0 and burst >= 1"):
        RetryBudget(0, 1)


def test_the_budget_is_global_each_process_takes_its_partition_share():
    """N orchestrators together never grant more than the stated rate and burst."""
    procs = [RetryBudget(rate_per_s=10, burst=4) for _ in range(4)]
    for b in procs:
        b.set_share(owned=3, total=12)  # four processes, three partitions each
    granted = 0
    for t in range(0, 1001):  # 10 s in 10 ms steps, every process retrying flat out
        for b in procs:
            while b.take("ledger", t / 100) == 0.0:
                granted += 1
    # 10/s for 10 s plus the burst, whatever the number of processes
    assert granted <= 10 * 10 + 4
    assert granted >= 10 * 10 - 4


def test_a_process_owning_every_partition_gets_the_whole_budget():
    b = RetryBudget(rate_per_s=2, burst=3)
    b.set_share(owned=12, total=12)
    assert (b.rate, b.burst) == (2, 3)
    b.set_share(owned=6, total=12)
    assert (b.rate, b.burst) == (1, 1.5)


def test_the_orchestrator_rescales_its_share_on_every_rebalance(tmp_path):
    from tests.unit.memory_rig import MemoryRig

    rig = MemoryRig(tmp_path)
    rig.orch.step()  # owns all 4 partitions
    assert rig.orch.retry_budget.rate == rig.settings.retry_budget_per_s
    rig.orch.ctx.intake.assign([0, 1])  # type: ignore[attr-defined]
    rig.orch.step()
    assert sorted(rig.orch.partitions) == [0, 1]
    assert rig.orch.retry_budget.rate == rig.settings.retry_budget_per_s / 2
