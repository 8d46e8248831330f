"""``keel schemas export`` as an application's team uses it: its own schemas and the
envelope's, new versions when a model changes, nothing ever rewritten."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app as keel

SHOP = """
from pydantic import BaseModel
from orchestrator import KeelApp, State, Step, WorkflowDefinition

app = KeelApp("shop")

class Order(BaseModel):
    order_id: str
    total: float
{extra}

class Receipt(BaseModel):
    receipt_id: str

@app.activity("issue-receipt", input=Order, output=Receipt)
def issue(order: Order) -> Receipt:
    return Receipt(receipt_id="r-" + order.order_id)

def done(ctx):
    return dict()

app.workflow(
    WorkflowDefinition(
        "shop.checkout", 1, Order, [State("s", steps=[Step("issue", "issue-receipt")], complete=done)]
    )
)
"""


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "shop_v1.py").write_text(SHOP.format(extra=""))
    (tmp_path / "shop_v2.py").write_text(SHOP.format(extra="    note: str | None = None"))
    (tmp_path / "shop_v3.py").write_text(SHOP.format(extra="    currency: str"))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path / "schemas"


def _export(out: Path, module: str, *more: str) -> tuple[int, str]:
    done = CliRunner().invoke(
        keel, ["schemas", "export", "--app", f"{module}:app", "--out", str(out), *more]
    )
    error = "" if isinstance(done.exception, SystemExit | None) else f"error: {done.exception}"
    return done.exit_code, done.output + error  # (keel's main prints a KeelError as one line)


def _files(out: Path) -> set[str]:
    return {p.relative_to(out).as_posix() for p in out.rglob("*.avsc")}


def test_an_application_exports_its_own_schemas_and_the_envelopes(shop: Path) -> None:
    code, output = _export(shop, "shop_v1")
    assert code == 0, output
    payloads = {f for f in _files(shop) if f.startswith("payloads/")}
    assert payloads == {
        "payloads/activity/issue_receipt/keel.payload.activity.issue_receipt.Input.v1.avsc",
        "payloads/activity/issue_receipt/keel.payload.activity.issue_receipt.Result.v1.avsc",
        "payloads/workflow/shop.checkout/keel.payload.workflow.shop.checkout.v1.Input.v1.avsc",
    }  # not the bundled examples'
    assert "keel.Envelope.v8.avsc" in _files(shop) and "keel.Envelope.v1.avsc" in _files(shop)
    assert output.count("new version: ") == 3
    assert _export(shop, "shop_v1", "--check")[0] == 0
    again = _export(shop, "shop_v1")
    assert again[0] == 0 and "0 written" in again[1]


def test_a_changed_model_gets_its_next_version_and_nothing_is_rewritten(shop: Path) -> None:
    assert _export(shop, "shop_v1")[0] == 0
    before = {p: p.read_bytes() for p in shop.rglob("*.avsc")}
    code, output = _export(shop, "shop_v2", "--check")
    assert code == 1 and output.count("unpublished: ") == 2  # Order is both inputs
    code, output = _export(shop, "shop_v2")
    assert code == 0, output
    new = _files(shop) - {p.relative_to(shop).as_posix() for p in before}
    assert new == {
        "payloads/activity/issue_receipt/keel.payload.activity.issue_receipt.Input.v2.avsc",
        "payloads/workflow/shop.checkout/keel.payload.workflow.shop.checkout.v1.Input.v2.avsc",
    }
    assert all(p.read_bytes() == data for p, data in before.items())
    assert _export(shop, "shop_v2", "--check")[0] == 0


def test_a_model_change_old_values_could_not_be_read_with_is_refused(shop: Path) -> None:
    assert _export(shop, "shop_v1")[0] == 0
    before = _files(shop)
    code, output = _export(shop, "shop_v3")
    assert code == 1 and before == _files(shop)
    assert "could not read what v1 wrote: currency: new field without a default" in output
