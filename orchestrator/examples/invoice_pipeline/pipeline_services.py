"""The pipeline's activities: the ledger (``KEEL_LEDGER_URL``, ``ops/fakes/ledger.py``),
accounts payable (``KEEL_PAYABLES_URL``, ``ops/fakes/payables.py``) and the read model's
duplicate lookup.

HTTP outcomes map onto Keel's failure classes as in ``orchestrator/examples/invoices.py``:
429/5xx/refused connection are transient (nothing was written), other 4xx permanent, and
a timeout or a connection lost after a write was sent is *unknown*: the posting's status
query asks the ledger before anything is repeated. Each write carries an idempotency key
the service deduplicates by: the posting its business key (supplier and invoice number,
so two files of one invoice can never post twice), the payment and the notification the
posting's id.
"""

from __future__ import annotations

import os
from typing import Any

from orchestrator import (
    KeelClient,
    OutcomeUnknownError,
    PermanentError,
    RunFilter,
    TransientError,
    load_settings,
    side_effect,
)
from orchestrator.examples.invoice_pipeline.pipeline_app import app
from orchestrator.examples.invoice_pipeline.pipeline_models import (
    DuplicateAnswer,
    DuplicateQuery,
    PaymentRequest,
    Posting,
    PostingRequest,
    Reconciliation,
)

__all__ = ["ledger_url", "payables_url"]

TIMEOUT_S = 2.0
#: A status query's answer key (``StatusQuery`` in docs/activities.md).
_FOUND = "found"


def ledger_url() -> str:
    return os.environ.get("KEEL_LEDGER_URL", "http://127.0.0.1:8765").rstrip("/")


def payables_url() -> str:
    return os.environ.get("KEEL_PAYABLES_URL", "http://127.0.0.1:8767").rstrip("/")


async def _call(
    method: str, url: str, body: dict[str, Any] | None = None, key: str | None = None
) -> tuple[int, Any]:
    """One request; what went wrong as a Keel failure class (a write's lost answer is
    unknown, a read's transient)."""
    import aiohttp  # on use: the orchestrator loads this app without calling it

    headers = {} if key is None else {"Idempotency-Key": key}
    write = method != "GET"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as session,
            session.request(method, url, json=body, headers=headers) as resp,
        ):
            data = await resp.json(content_type=None) if resp.status < 500 else None
            if resp.status == 429 or resp.status >= 500:  # asks again after its Retry-After
                raise TransientError(
                    f"{method} {url} answered {resp.status}", _retry_after(resp.headers)
                )
            return resp.status, data
    except aiohttp.ClientConnectorError as exc:
        raise TransientError(f"cannot connect to {url}: {exc}") from None
    except (TimeoutError, aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError) as exc:
        if write:
            raise OutcomeUnknownError(
                f"no answer to {method} {url} after sending it ({type(exc).__name__})"
            ) from None
        raise TransientError(f"{method} {url} failed: {exc!r}") from None


def _retry_after(headers: Any) -> float | None:
    """An answer's ``Retry-After`` in seconds (its number form), else None."""
    value = headers.get("Retry-After", "")
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def _refused(what: str, status: int, data: Any) -> PermanentError:
    return PermanentError(f"{what} refused ({status}): {data}")


@app.activity("post_invoice", input=PostingRequest, output=Posting)
@side_effect
async def post_invoice(req: PostingRequest) -> Posting:
    body = {
        "account": req.supplier,
        "amount": req.amount,
        "invoice_id": req.invoice_id,
        "invoice_number": req.invoice_number,
        "currency": req.currency,
    }
    status, data = await _call("POST", f"{ledger_url()}/postings", body, req.ledger_key)
    if status not in (200, 201):
        raise _refused("the ledger posting", status, data)
    return Posting(posting_id=data["posting_id"], ledger_key=req.ledger_key)


async def _posting_of(key: str) -> dict[str, Any] | None:
    from urllib.parse import quote

    status, data = await _call("GET", f"{ledger_url()}/postings/{quote(key, safe='')}")
    if status == 404:
        return None
    if status != 200:
        raise TransientError(f"ledger status query answered {status}")
    return data  # type: ignore[no-any-return]


@app.activity("invoice_posting_status")
async def invoice_posting_status(query: dict[str, Any]) -> dict[str, Any]:
    """The status query of ``post_invoice``: did the ledger commit this posting?"""
    key = query["input"]["ledger_key"]
    found = await _posting_of(key)
    if found is None:
        return {_FOUND: False}
    return {_FOUND: True, "result": {"posting_id": found["posting_id"], "ledger_key": key}}


@app.activity("reverse_posting")
async def reverse_posting(reversal: dict[str, Any]) -> dict[str, Any]:
    """The posting's compensation: the ledger reverses it (once, however often asked)."""
    status, data = await _call(
        "POST", f"{ledger_url()}/reversals", {"key": reversal["ledger_key"]}, None
    )
    if status != 200:
        raise _refused("the reversal", status, data)
    return {"reversed": data["posting_id"]}


@app.activity("schedule_payment", input=PaymentRequest)
@side_effect
async def schedule_payment(req: PaymentRequest) -> dict[str, Any]:
    status, data = await _call(
        "POST", f"{payables_url()}/payments", req.model_dump(), f"pay/{req.posting_id}"
    )
    if status not in (200, 201):
        raise _refused("the payment", status, data)
    return {"payment_id": data["id"]}


@app.activity("notify_supplier")
@side_effect
async def notify_supplier(notice: dict[str, Any]) -> dict[str, Any]:
    key = f"notify/{notice['posting_id']}"
    status, data = await _call("POST", f"{payables_url()}/notifications", notice, key)
    if status not in (200, 201):
        raise _refused("the notification", status, data)
    return {"notification_id": data["id"]}


@app.activity("reconcile_posting", output=Reconciliation)
async def reconcile_posting(check: dict[str, Any]) -> Reconciliation:
    """The ledger's own record of the posting, checked against what the run posted."""
    want = check["posting"]
    found = await _posting_of(want["ledger_key"])
    if found is None:
        return Reconciliation(matches=False, problems=["the ledger has no such posting"])
    problems = []
    if found["posting_id"] != check["posting_id"]:
        problems.append(f"posting id {found['posting_id']} is not {check['posting_id']}")
    if abs(found["amount"] - want["amount"]) > 0.005:
        problems.append(f"the ledger holds {found['amount']}, the invoice {want['amount']}")
    if found["account"] != want["supplier"]:
        problems.append(f"the ledger's supplier is {found['account']!r}")
    if found["extra"].get("invoice_id") != want["invoice_id"]:
        problems.append(f"the posting belongs to invoice run {found['extra'].get('invoice_id')}")
    if found.get("reversed"):
        problems.append("the posting was reversed")
    return Reconciliation(matches=not problems, problems=problems)


@app.activity("find_duplicate_invoice", input=DuplicateQuery, output=DuplicateAnswer)
def find_duplicate_invoice(query: DuplicateQuery) -> DuplicateAnswer:
    """The oldest other run of the same supplier's invoice number, from the read model's
    search index. Its answer is recorded, so a replay decides on the same answer."""
    client = KeelClient(load_settings(), app)
    try:
        page = client.list_runs(
            RunFilter(
                name="invoice_pipeline",
                attributes=[f"invoice_key={query.invoice_key}"],
                newest_first=False,
                limit=10,
            )
        )
    finally:
        client.close()
    me = next((r for r in page.rows if r.workflow_id == query.workflow_id), None)
    for row in page.rows:
        if row.workflow_id != query.workflow_id and (me is None or row.started_at <= me.started_at):
            return DuplicateAnswer(duplicate_of=row.workflow_id)
    return DuplicateAnswer(duplicate_of=None)
