"""The retry budget paces retries per activity type and refills on its own."""

from __future__ import annotations

import pytest

from orchestrator.runtime.budget import RetryBudget


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
