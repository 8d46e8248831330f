"""Restate's side of the invoice-lite workload: a Restate workflow whose three steps are
journaled ``ctx.run`` blocks calling the same functions as Keel's activities, and the same
check in the handler. ``ops/peers/side_by_side.py`` serves it with hypercorn from the peer
virtual environment (``hypercorn 'ops.peers.restate_invoice:create_app()'``); the Restate
SDK is imported only there, so Keel's own environment can import this module without it.
"""

from __future__ import annotations

import importlib
from typing import Any

from ops.peers import invoice_steps

__all__ = ["create_app"]

#: The Restate workflow's name: its ingress path is ``/InvoiceLite/<id>/run``.
WORKFLOW = "InvoiceLite"


async def run(ctx: Any, inp: dict[str, Any]) -> dict[str, Any]:
    """The workflow's main handler: three journaled steps, then the check."""
    cents = await ctx.run("extract", lambda: invoice_steps.extract(inp))
    priced = await ctx.run("price", lambda: invoice_steps.price(cents))
    posted = await ctx.run("post", lambda: invoice_steps.post(priced))
    return invoice_steps.check(inp["lines"], posted)


def create_app() -> Any:
    """The ASGI app of the invoice-lite workflow (needs ``restate-sdk``)."""
    restate = importlib.import_module("restate")
    workflow = restate.Workflow(WORKFLOW)
    workflow.main(name="run")(run)
    return restate.app(services=[workflow])
