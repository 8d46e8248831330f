"""The invoice agent's tools: what the one agent may do, against the same systems the
pipeline's activities call (``orchestrator/examples/invoice_pipeline/pipeline_services.py``).

* ``check_supplier``: is the supplier on the vendor list the pipeline's rules use?
* ``find_duplicate``: has the ledger already got a posting of this supplier's invoice
  number from another run? (The ledger's status route, not the pipeline's read model.)
* ``request_approval``: the approvals desk, asked synchronously (an agent cannot wait
  days for a person): a fixed rule, each supplier's approval limit (``APPROVAL_LIMITS``).
* ``post_invoice``: the ledger posting, with the pipeline's business key as the
  idempotency key (``invoice/<supplier>|<number>``) and this run's id as the invoice id.
* ``schedule_payment``: accounts payable, for the posting the ledger holds under that
  key (keyed ``pay/<posting id>``, like the pipeline's payment).
* ``reverse_posting``: the ledger reverses the posting under that key.

Every result carries a one-line ``summary`` naming the invoice number: what the model
reads to decide its next step. A failure the service reports for good is a result
(``"posted": false`` ...); a lost answer, a refused connection or a 5xx raises, and the
agent loop tells the model the error (``handlers/llm/agent.py``). Nothing here queries a
status after a lost answer or binds an approval to what is posted: the agent decides
what to do next.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from orchestrator import OutcomeUnknownError, Tool, TransientError, activity
from orchestrator.examples.invoice_pipeline import pipeline_rules as rules
from orchestrator.examples.invoice_pipeline.pipeline_services import ledger_url, payables_url

__all__ = ["APPROVAL_LIMITS", "TOOLS", "ledger_key"]

TIMEOUT_S = 2.0
#: The approvals desk's rule: the largest total (in the invoice's currency) it approves
#: per supplier; above it, or for a supplier it does not know, it refuses. It stands in
#: for the people the pipeline waits for; on the sample invoices it decides as the demo's
#: scripted approvers do (docs/invoice-pipeline.md, "The all-agent variant").
APPROVAL_LIMITS: dict[str, float] = {
    "ACME Office Supplies": 3000.0,
    "Blue Harbor Logistics": 2500.0,
    "Cobalt Cloud Services": 6000.0,
    "Delta Catering": 2500.0,
    "Evergreen Facilities": 2500.0,
    "Fjord Legal Partners": 2500.0,
}
DESK = "approvals-desk"


class SupplierQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")
    supplier: str = Field(min_length=1)
    invoice_number: str = Field(min_length=1)


class Invoice(SupplierQuery):
    """An invoice as the agent read it from the document."""

    currency: str = Field(pattern=r"^[A-Z]{3}$")
    amount: float


def ledger_key(supplier: str, invoice_number: str) -> str:
    """The pipeline's business key of an invoice, as the ledger's idempotency key."""
    return f"invoice/{rules.invoice_key({'supplier': supplier, 'invoice_number': invoice_number})}"


async def _request(
    method: str, url: str, body: dict[str, Any] | None = None, key: str | None = None
) -> tuple[int, Any]:
    import aiohttp  # on use: the orchestrator loads this app without calling it

    headers = {} if key is None else {"Idempotency-Key": key}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as session,
            session.request(method, url, json=body, headers=headers) as resp,
        ):
            data = await resp.json(content_type=None) if resp.status < 500 else None
            if resp.status == 429 or resp.status >= 500:
                raise TransientError(f"{method} {url} answered {resp.status}")
            return resp.status, data
    except aiohttp.ClientConnectorError as exc:
        raise TransientError(f"cannot connect to {url}: {exc}") from None
    except (TimeoutError, aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError) as exc:
        if method != "GET":
            raise OutcomeUnknownError(
                f"no answer to {method} {url} after sending it ({type(exc).__name__})"
            ) from None
        raise TransientError(f"{method} {url} failed: {exc!r}") from None


async def _posting(q: SupplierQuery) -> dict[str, Any] | None:
    key = quote(ledger_key(q.supplier, q.invoice_number), safe="")
    status, data = await _request("GET", f"{ledger_url()}/postings/{key}")
    if status == 404:
        return None
    if status != 200:
        raise TransientError(f"{q.invoice_number}: the ledger's lookup answered {status}")
    return data  # type: ignore[no-any-return]


def check_supplier(q: SupplierQuery) -> dict[str, Any]:
    known = q.supplier in rules.KNOWN_SUPPLIERS
    what = "is a known supplier" if known else "is not a known supplier"
    return {"known": known, "summary": f"{q.invoice_number}: supplier {q.supplier} {what}"}


async def find_duplicate(q: SupplierQuery) -> dict[str, Any]:
    found = await _posting(q)
    run = activity.context().workflow_id
    other = None if found is None else found["extra"].get("invoice_id")
    if found is None or other == run:
        said = "not posted yet" if found is None else f"posted by this run as {found['posting_id']}"
        return {"duplicate_of": None, "summary": f"{q.invoice_number}: {said}"}
    return {
        "duplicate_of": other,
        "summary": f"{q.invoice_number}: already posted by invoice run {other}",
    }


def request_approval(inv: Invoice) -> dict[str, Any]:
    limit = APPROVAL_LIMITS.get(inv.supplier)
    if limit is not None and inv.amount <= limit:
        return {
            "approved": True,
            "approver": DESK,
            "summary": f"{inv.invoice_number}: approved by {DESK}",
        }
    why = "no approval limit" if limit is None else f"above the limit of {limit:.2f}"
    return {
        "approved": False,
        "approver": DESK,
        "summary": f"{inv.invoice_number}: approval refused by {DESK} ({why})",
    }


async def post_invoice(inv: Invoice) -> dict[str, Any]:
    key = ledger_key(inv.supplier, inv.invoice_number)
    body = {
        "account": inv.supplier,
        "amount": inv.amount,
        "invoice_id": activity.context().workflow_id,
        "invoice_number": inv.invoice_number,
        "currency": inv.currency,
    }
    status, data = await _request("POST", f"{ledger_url()}/postings", body, key)
    if status not in (200, 201):
        return {
            "posted": False,
            "summary": f"{inv.invoice_number}: the ledger refused the posting ({status}): {data}",
        }
    return {
        "posted": True,
        "posting_id": data["posting_id"],
        "ledger_key": key,
        "summary": f"{inv.invoice_number}: posted as {data['posting_id']}",
    }


async def schedule_payment(inv: Invoice) -> dict[str, Any]:
    found = await _posting(inv)
    if found is None or found.get("reversed"):
        state = "no posting" if found is None else "a reversed posting"
        return {"scheduled": False, "summary": f"{inv.invoice_number}: {state} to pay"}
    body = {
        "posting_id": found["posting_id"],
        "supplier": inv.supplier,
        "currency": inv.currency,
        "amount": inv.amount,
    }
    key = f"pay/{found['posting_id']}"
    status, data = await _request("POST", f"{payables_url()}/payments", body, key)
    if status not in (200, 201):
        error = (data or {}).get("error", data) if isinstance(data, dict) else data
        return {
            "scheduled": False,
            "summary": f"{inv.invoice_number}: payment refused ({status}): {error}",
        }
    return {
        "scheduled": True,
        "payment_id": data["id"],
        "summary": f"{inv.invoice_number}: payment scheduled as {data['id']}",
    }


async def reverse_posting(q: SupplierQuery) -> dict[str, Any]:
    key = ledger_key(q.supplier, q.invoice_number)
    status, data = await _request("POST", f"{ledger_url()}/reversals", {"key": key})
    if status != 200:
        return {
            "reversed": False,
            "summary": f"{q.invoice_number}: the reversal was refused ({status}): {data}",
        }
    return {
        "reversed": True,
        "posting_id": data["posting_id"],
        "summary": f"{q.invoice_number}: posting {data['posting_id']} reversed",
    }


TOOLS = (
    Tool(
        "check_supplier",
        "1",
        check_supplier,
        "Is the supplier on the company's vendor list?",
        input=SupplierQuery,
    ),
    Tool(
        "find_duplicate",
        "1",
        find_duplicate,
        "Has the ledger already got this supplier's invoice number from another file?",
        input=SupplierQuery,
    ),
    Tool(
        "request_approval",
        "1",
        request_approval,
        "Ask the approvals desk to approve posting an invoice above the approval threshold.",
        input=Invoice,
    ),
    Tool(
        "post_invoice",
        "1",
        post_invoice,
        "Post the invoice to the ledger (once per supplier and invoice number).",
        input=Invoice,
    ),
    Tool(
        "schedule_payment",
        "1",
        schedule_payment,
        "Schedule the supplier's payment of a posted invoice with accounts payable.",
        input=Invoice,
    ),
    Tool(
        "reverse_posting",
        "1",
        reverse_posting,
        "Reverse the ledger posting of an invoice (when its payment cannot be made).",
        input=SupplierQuery,
    ),
)
