"""The invoice-lite workload Keel runs beside Restate (ops/peers/): remote and local
steps give the same checked result, the one the plain steps give."""

from __future__ import annotations

from ops.peers import invoice_steps
from ops.peers.keel_invoice import LOCAL, REMOTE, app
from orchestrator.testing import WorkflowEnvironment


def test_both_keel_variants_post_the_checked_total() -> None:
    inp = invoice_steps.invoice_for(12)
    assert inp["lines"] == [6, 4, 3]
    posted = invoice_steps.post(invoice_steps.price(invoice_steps.extract(inp)))
    assert posted["posted"] == 1_560  # 1,300 cents and 20 % tax
    with WorkflowEnvironment(app) as env:
        for name in (REMOTE, LOCAL):
            run = env.start(name, inp, workflow_id=f"{name}-12")
            assert run.result() == {"receipt": "R-INV-12", "ok": True}


def test_the_check_fails_a_wrong_total() -> None:
    posted = {"invoice": "INV-1", "posted": 1, "receipt": "R-INV-1"}
    assert invoice_steps.check([1, 2, 3], posted) == {"receipt": "R-INV-1", "ok": False}
