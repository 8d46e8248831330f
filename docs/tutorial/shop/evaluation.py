"""Who answers the shop's waits when ``keel evaluate`` runs it (docs/evaluation.md, "A
workflow that waits"): a sales manager approves every order up to 2,000.00, and Stripe
confirms every payment, by a webhook signed as Stripe signs it."""

from typing import Any

from orchestrator.client import Driver
from orchestrator.workflow import Context

driver = Driver("shop")


def manager(ctx: Context[Any]) -> str:
    total = sum(line["quantity"] * line["unit_cents"] for line in ctx.input_dict["lines"])
    return "approve" if total <= 200_000 else "reject"


def payment_succeeded(ctx: Context[Any]) -> dict[str, Any]:
    return {
        "id": f"evt_{ctx.workflow_id}",
        "type": "payment_intent.succeeded",
        "data": {
            "object": {"id": f"pi_{ctx.workflow_id}", "metadata": {"workflow_id": ctx.workflow_id}}
        },
    }


driver.human_task("approve_order", manager)
driver.webhook("payment_succeeded", source="stripe", body=payment_succeeded)
