"""mypy checks what a definition reads: a result field its activity's output model lacks,
or an input field the workflow's input model lacks, is a type error, not a run-time
surprise in production (docs/workflows.md, "Typed steps").

Runs ``mypy --strict`` (``mypy.api``) on two snippets written against the public face:
the right one passes, the wrong one fails with exactly the two expected errors.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from mypy import api

REPO = Path(__file__).resolve().parents[4]

SHOP = """\
from __future__ import annotations

from pydantic import BaseModel

from orchestrator import KeelApp
from orchestrator.workflow import Context, Step, WorkflowDefinition

app = KeelApp("shop")


class Order(BaseModel):
    sku: str
    quantity: int


class Reservation(BaseModel):
    reservation_id: str


class Receipt(BaseModel):
    reservation_id: str
    sku: str


@app.activity
async def reserve_stock(order: Order) -> Reservation:
    return Reservation(reservation_id=f"r-{{order.sku}}")


def receipt(ctx: Context[Order]) -> Receipt:
    reserved = ctx.result(reserve_stock)
    return Receipt(reservation_id=reserved.{result_field}, sku=ctx.input.{input_field})


shop = app.workflow(
    WorkflowDefinition.dag("shop", 1, Order, [Step("reserve", reserve_stock)], output=receipt)
)
"""


def test_mypy_rejects_reading_a_field_the_models_lack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    right = tmp_path / "right_shop.py"
    right.write_text(SHOP.format(result_field="reservation_id", input_field="sku"))
    wrong = tmp_path / "wrong_shop.py"
    wrong.write_text(SHOP.format(result_field="reservation", input_field="skus"))
    monkeypatch.chdir(REPO)  # mypy finds this checkout's `orchestrator` first
    out, err, status = api.run(
        [
            "--strict",
            "--follow-imports=silent",
            "--no-incremental",
            "--cache-dir=/dev/null",
            "--no-error-summary",
            str(right),
            str(wrong),
        ]
    )
    assert err == ""
    assert status == 1
    line = SHOP.splitlines().index(
        "    return Receipt(reservation_id=reserved.{result_field}, sku=ctx.input.{input_field})"
    )
    assert out.splitlines() == [
        f'{wrong}:{line + 1}: error: "Reservation" has no attribute "reservation"; '
        'maybe "reservation_id"?  [attr-defined]',
        f'{wrong}:{line + 1}: error: "Order" has no attribute "skus"; maybe "sku"?  [attr-defined]',
    ], textwrap.indent(out, "  ")
