"""Restate's side of the invoice-lite workload: a Restate workflow whose three steps are
journaled ``ctx.run`` blocks calling the same functions as Keel's activities, and the same
check in the handler. Served by hypercorn from the peer virtual environment
(``ops/peers/side_by_side.py`` starts it); Keel never imports it.
"""

from __future__ import annotations

from typing import Any

import restate  # type: ignore[import-not-found]

from ops.peers import invoice_steps

invoice_lite = restate.Workflow("InvoiceLite")


@invoice_lite.main()
async def run(ctx: Any, inp: dict[str, Any]) -> dict[str, Any]:
    cents = await ctx.run("extract", lambda: invoice_steps.extract(inp))
    priced = await ctx.run("price", lambda: invoice_steps.price(cents))
    posted = await ctx.run("post", lambda: invoice_steps.post(priced))
    return invoice_steps.check(inp["lines"], posted)


app = restate.app(services=[invoice_lite])
