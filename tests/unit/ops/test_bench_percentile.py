"""The bench's quantile is the nearest-rank one: its p99 of 100 runs is not their worst."""

from __future__ import annotations

import math

from ops.bench import _percentile


def test_nearest_rank_quantiles():
    hundred = [float(v) for v in range(100, 0, -1)]  # 100.0 … 1.0, unsorted on purpose
    assert _percentile(hundred, 0.99) == 99.0
    assert _percentile(hundred, 0.5) == 50.0
    assert _percentile(hundred, 1.0) == 100.0
    assert _percentile([7.0] * 3 + [40.0], 0.99) == 40.0  # too few values: the largest
    assert _percentile([3.0], 0.01) == 3.0
    assert math.isnan(_percentile([], 0.99))
