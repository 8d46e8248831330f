"""A test application: activity types with per-type limits, calling a fake service.

Run by real orchestrator and worker processes with ``--app
tests.integration.limits_app:app``; the fake's URL is ``KEEL_LIMITS_FAKE_URL``. Each
step allows one attempt only: a throttled attempt that spent a retry would fail its run.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel

from orchestrator import (
    Context,
    KeelApp,
    RateLimit,
    RetryPolicy,
    Step,
    WorkflowDefinition,
    side_effect,
)

APP = "tests.integration.limits_app:app"

app = KeelApp("keel-limits-tests")


class Item(BaseModel):
    n: int
    hold_ms: int = 0


async def _call(item: Item) -> dict[str, Any]:
    import aiohttp  # on use: the orchestrator loads this app without calling it

    url = os.environ["KEEL_LIMITS_FAKE_URL"] + "/call"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json=item.model_dump()) as resp,
    ):
        resp.raise_for_status()
        answer: dict[str, Any] = await resp.json()
        return answer


@app.activity("ten_a_minute", input=Item, rate_limit=RateLimit(10, per=60))
async def ten_a_minute(item: Item) -> dict[str, Any]:
    return await _call(item)


@app.activity("ten_per_5s", input=Item, rate_limit=RateLimit(10, per=5))
@side_effect
async def ten_per_5s(item: Item) -> dict[str, Any]:
    """A side effect: its key is claimed between the grant and the call."""
    return await _call(item)


@app.activity("two_at_a_time", input=Item, max_concurrent=2)
async def two_at_a_time(item: Item) -> dict[str, Any]:
    return await _call(item)


def _item(ctx: Context) -> dict[str, Any]:
    return dict(ctx.input_dict)


for _name, _activity in (
    ("rate_limited", "ten_a_minute"),
    ("concurrency_limited", "two_at_a_time"),
    ("burst_limited", "ten_per_5s"),
):
    app.workflow(
        WorkflowDefinition.dag(
            _name,
            1,
            Item,
            [Step("call", _activity, input=_item, retry=RetryPolicy(max_attempts=1))],
            output=lambda ctx: ctx.results["call"],
            description=f"One call of {_activity}, an activity type with a per-type limit.",
        )
    )
