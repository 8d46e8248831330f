"""Kafka's consumer lag in ``keel evaluate``'s report (``ops/evaluation/lag_sampler.py``,
``evaluation_report``): samples named by topic and group without the batch's prefix, a
peak per name and a series from the first run's start on, every name in every point."""

from __future__ import annotations

from types import SimpleNamespace


def test_lag_is_named_without_the_prefix_and_reported_from_the_first_start() -> None:
    from ops.evaluation.evaluation_report import _kafka_lag
    from ops.evaluation.lag_sampler import lag_name

    prefix = "eval-own-crash-20261204-1"
    assert lag_name(prefix, f"{prefix}.commands", f"{prefix}.orchestrator") == (
        "commands <- orchestrator"
    )
    samples = [
        (900, {"commands <- orchestrator": 7}),  # before the first run started: left out
        (1000, {"commands <- orchestrator": 2}),
        (2500, {"commands <- orchestrator": 0, "tasks <- worker": 4}),
    ]
    batch = SimpleNamespace(kafka_lag=samples)
    assert _kafka_lag(batch, 1000) == {  # type: ignore[arg-type]
        "peak": {"commands <- orchestrator": 2, "tasks <- worker": 4},
        "series": [
            [0.0, {"commands <- orchestrator": 2, "tasks <- worker": 0}],
            [1.5, {"commands <- orchestrator": 0, "tasks <- worker": 4}],
        ],
    }
    assert _kafka_lag(SimpleNamespace(kafka_lag=[]), 0) == {"peak": {}, "series": []}  # type: ignore[arg-type]
