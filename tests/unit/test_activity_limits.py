"""Per-type limits declared with ``@app.activity`` (docs/limits.md, "Per-type limits"):
what is accepted, and the exact ``AppError`` for what is not."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator import KeelApp, RateLimit
from orchestrator.application.activity_limits import ActivityLimits, LimitDeclarationError
from orchestrator.application.app import AppError


def _declare(**limits: Any) -> ActivityLimits | None:
    app = KeelApp("limits")

    @app.activity("llm.call", **limits)
    def call(payload: dict) -> dict:
        return payload

    return app.handlers["llm.call"].limits


def test_limits_are_kept_on_the_handler() -> None:
    assert _declare() is None
    assert _declare(max_concurrent=4) == ActivityLimits(4, None)
    assert _declare(rate_limit=RateLimit(10, per=60)) == ActivityLimits(None, RateLimit(10, 60))
    both = _declare(max_concurrent=2, rate_limit="20/min")
    assert both == ActivityLimits(2, RateLimit(20, 60))
    assert str(both) == "max_concurrent=2, rate_limit=20/min"


@pytest.mark.parametrize(
    ("text", "limit"),
    [
        ("10/min", RateLimit(10, 60)),
        ("5/s", RateLimit(5, 1)),
        ("5/sec", RateLimit(5, 1)),
        ("100/h", RateLimit(100, 3600)),
        ("100/hour", RateLimit(100, 3600)),
        (" 1000/day ", RateLimit(1000, 86_400)),
    ],
)
def test_a_rate_limit_text_is_parsed_strictly(text: str, limit: RateLimit) -> None:
    assert RateLimit.parse(text) == limit


def test_a_rate_limit_prints_in_its_own_words() -> None:
    limits = [RateLimit(10, 60), RateLimit(3, 3600), RateLimit(7, 20), RateLimit(3, 1)]
    assert [str(limit) for limit in limits] == ["10/min", "3/h", "7/20s", "3/s"]


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (
            {"max_concurrent": 0},
            "activity 'llm.call': max_concurrent must be a whole number from 1 to 100,000; got 0",
        ),
        (
            {"max_concurrent": True},
            "activity 'llm.call': max_concurrent must be a whole number from 1 to 100,000; "
            "got True",
        ),
        (
            {"max_concurrent": 2.5},
            "activity 'llm.call': max_concurrent must be a whole number from 1 to 100,000; got 2.5",
        ),
        (
            {"rate_limit": "10 per minute"},
            "activity 'llm.call': rate limit '10 per minute' is not COUNT/UNIT with UNIT one of "
            "s, sec, min, h, hour, day (e.g. '10/min')",
        ),
        (
            {"rate_limit": "0/min"},
            "activity 'llm.call': RateLimit count must be a whole number from 1 to 1,000,000; "
            "got 0",
        ),
        (
            {"rate_limit": 10},
            "activity 'llm.call': rate_limit must be a RateLimit or a text like '10/min'; got int",
        ),
    ],
)
def test_a_bad_limit_is_an_app_error_saying_what(limits: dict[str, Any], message: str) -> None:
    with pytest.raises(AppError) as exc:
        _declare(**limits)
    assert str(exc.value) == message


def test_a_rate_limit_refuses_what_cannot_be_enforced() -> None:
    with pytest.raises(LimitDeclarationError) as exc:
        RateLimit(10, per=0)
    assert str(exc.value) == "RateLimit per must be a whole number from 1 to 86,400; got 0"
    with pytest.raises(LimitDeclarationError):
        RateLimit(10, per=1.5)  # type: ignore[arg-type]
