"""Example workflows that write to an external system: postings to a finance ledger.

``post_to_ledger`` is a real side effect (an HTTP POST to the ledger service in
``ops/fakes/ledger.py``, at ``KEEL_LEDGER_URL``) carrying the activity's idempotency
key; ``ledger_posting_status`` is its status query. HTTP outcomes map onto Keel's
failure classes: 429/5xx/refused connection are transient (nothing was written), other
4xx are permanent, and a timeout or a connection lost after the request was sent is
*unknown* — the orchestrator then asks the ledger before anything is repeated.

* ``invoice_posting`` v1: post one invoice (4 attempts, 2 s to answer).
* ``invoice_posting_patient`` v1: the same with 30 attempts, for outage drills.
* ``slow_step`` v1: a sleeping activity with schedule-to-start, start-to-close and
  heartbeat timeouts, for timeout drills.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from orchestrator import (
    Context,
    OutcomeUnknownError,
    PermanentError,
    RetryPolicy,
    SearchAttribute,
    SearchKind,
    Step,
    TransientError,
    WorkflowDefinition,
    activity,
    side_effect,
)
from orchestrator.examples.registry import app

LEDGER_TIMEOUT_S = 2.0


def ledger_url() -> str:
    return os.environ.get("KEEL_LEDGER_URL", "http://127.0.0.1:8765").rstrip("/")


class Invoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    invoice_id: str
    account: str
    amount: float


class Posting(BaseModel):
    posting_id: str
    key: str


class StatusQuery(BaseModel):
    idempotency_key: str
    input: dict[str, Any]


@app.activity("post_to_ledger", input=Invoice, output=Posting)
@side_effect
async def post_to_ledger(invoice: Invoice) -> Posting:
    """POST the posting with the activity's idempotency key; classify what went wrong."""
    import aiohttp  # on use: the orchestrator loads this app without calling it

    key = activity.context().idempotency_key
    body = invoice.model_dump()
    timeout = aiohttp.ClientTimeout(total=LEDGER_TIMEOUT_S)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(
                f"{ledger_url()}/postings", json=body, headers={"Idempotency-Key": key}
            ) as resp,
        ):
            if resp.status in (200, 201):
                data = await resp.json()
                return Posting(posting_id=data["posting_id"], key=key)
            text = (await resp.text())[:200]
            if resp.status == 429 or resp.status >= 500:
                raise TransientError(f"ledger answered {resp.status}: {text}")
            raise PermanentError(f"ledger refused the posting ({resp.status}): {text}")
    except aiohttp.ClientConnectorError as exc:
        raise TransientError(f"cannot connect to the ledger: {exc}") from None
    except TimeoutError:
        raise OutcomeUnknownError(
            f"no answer from the ledger within {LEDGER_TIMEOUT_S:g}s after sending the posting"
        ) from None
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError):
        raise OutcomeUnknownError(
            "connection to the ledger lost after sending the posting"
        ) from None


@app.activity("ledger_posting_status", input=StatusQuery)
async def ledger_posting_status(query: StatusQuery) -> dict[str, Any]:
    """The status query of ``post_to_ledger``: did the posting with this key happen?"""
    import aiohttp  # on use: the orchestrator loads this app without calling it

    url = f"{ledger_url()}/postings/{quote(query.idempotency_key, safe='')}"
    timeout = aiohttp.ClientTimeout(total=LEDGER_TIMEOUT_S)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as resp:
            if resp.status == 200:
                data = await resp.json()
                return {
                    "found": True,
                    "result": {"posting_id": data["posting_id"], "key": query.idempotency_key},
                }
            if resp.status == 404:
                return {"found": False}
            raise TransientError(f"ledger status query answered {resp.status}")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise TransientError(f"ledger status query failed: {exc!r}") from None


def _posting(ctx: Context[Invoice]) -> dict[str, Any]:
    return {"posting_id": ctx.results["post"]["posting_id"]}


def _invoice(ctx: Context[Invoice]) -> dict[str, Any]:
    return dict(ctx.input_dict)


def _posted_id(ctx: Context[Invoice]) -> str | None:
    """The ledger's posting id, once the posting step has one."""
    return ctx.results["post"]["posting_id"] if "post" in ctx.results else None


#: How an operator finds a posting (docs/run-search.md): read-side only, in no event.
POSTING_SEARCH = (
    SearchAttribute("invoice_id", SearchKind.KEYWORD, lambda ctx: ctx.input_dict["invoice_id"]),
    SearchAttribute("account", SearchKind.KEYWORD, lambda ctx: ctx.input_dict["account"]),
    SearchAttribute("amount", SearchKind.NUMBER, lambda ctx: ctx.input_dict["amount"]),
    SearchAttribute("posting_id", SearchKind.KEYWORD, _posted_id),
)


def _posting_workflow(name: str, retry: RetryPolicy, description: str) -> WorkflowDefinition:
    """Post one invoice: a side effect with a status query and a start-to-close timeout."""
    return app.workflow(
        WorkflowDefinition.dag(
            name,
            1,
            Invoice,
            [
                Step(
                    "post",
                    post_to_ledger,
                    input=_invoice,
                    retry=retry,
                    start_to_close=timedelta(seconds=5),
                    status_query=ledger_posting_status,
                )
            ],
            output=_posting,
            description=description,
            search_attributes=POSTING_SEARCH,
        )
    )


invoice_posting = _posting_workflow(
    "invoice_posting",
    RetryPolicy(
        max_attempts=4, initial_interval_ms=200, backoff_coefficient=2.0, max_interval_ms=2000
    ),
    "Post an invoice to the ledger exactly once.",
)
invoice_posting_patient = _posting_workflow(
    "invoice_posting_patient",
    RetryPolicy(
        max_attempts=30, initial_interval_ms=100, backoff_coefficient=2.0, max_interval_ms=400
    ),
    "Post an invoice, retrying through a long outage.",
)


class Sleep(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seconds: float = Field(ge=0, le=60)
    heartbeat: bool = False


@app.activity("sleep", input=Sleep)
async def sleep(req: Sleep) -> dict[str, Any]:
    """Sleep, heartbeating every 0.1 s when asked to."""
    ctx = activity.context()
    remaining = req.seconds
    while remaining > 0:
        step = min(0.1, remaining)
        await asyncio.sleep(step)
        remaining -= step
        if req.heartbeat:
            ctx.heartbeat({"remaining": round(remaining, 2)})
    return {"slept": req.seconds}


slow_step = app.workflow(
    WorkflowDefinition.dag(
        "slow_step",
        1,
        Sleep,
        [
            Step(
                "sleep",
                sleep,
                input=lambda ctx: dict(ctx.input_dict),
                retry=RetryPolicy(max_attempts=1),
                schedule_to_start=timedelta(seconds=2),
                start_to_close=timedelta(seconds=2),
                heartbeat=timedelta(seconds=0.6),
                on_exhausted="fail",
            )
        ],
        output=lambda ctx: ctx.results["sleep"],
        description="Sleep in an activity with every kind of timeout set.",
    )
)
