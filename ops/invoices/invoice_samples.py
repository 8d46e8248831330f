"""The invoice pipeline's sample data: invoice files, what each should end in, and the
scripted model's answers (docs/invoice-pipeline.md, "Sample data").

``python -m ops.invoices.invoice_samples --out ops/demo_data/invoices`` writes them: one text file
per invoice, ``manifest.json`` (per file: its scenario, the fields it holds and the
outcome it must reach) and ``model_script.json`` (the answers of
``ops/fakes/openai_server.py``, matched by invoice number: valid extractions, malformed
output that repairs, output that stays malformed, a low-confidence answer). The files
are committed; ``tests/unit/ops/test_invoice_samples.py`` checks they are this module's
output, so a change goes through here.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

__all__ = ["Sample", "Scenario", "corrected", "samples", "write"]


class Scenario(StrEnum):
    """What a sample exercises; the demo's approver acts on the approval ones."""

    AUTO = "auto"  # small, clean: posted without a person
    APPROVE = "approve"  # above the threshold: approved
    REJECT = "reject"  # above the threshold: rejected
    STALE = "stale"  # approved from a stale page first (refused), then from a fresh one
    EXPIRE = "expire"  # nobody answers: escalated, then expired (rejected)
    REPAIR = "repair"  # malformed model output once, repaired
    CORRECT = "correct"  # malformed past the repairs: a clerk corrects it
    UNSURE = "unsure"  # low confidence: a clerk confirms the fields
    BAD_TOTALS = "bad_totals"  # lines do not add up: a clerk corrects them
    UNKNOWN_SUPPLIER = "unknown_supplier"  # a clerk rejects it
    DUPLICATE = "duplicate"  # another file of an invoice already received
    PAYMENT_FAILS = "payment_fails"  # payment refused for good: the posting is reversed


@dataclass(frozen=True)
class Sample:
    scenario: Scenario
    supplier: str
    number: str
    date: str
    currency: str
    lines: tuple[tuple[str, float], ...]
    tax_rate: float = 0.2
    #: A document that states the lines wrongly (their sum is not the net it prints).
    net_override: float | None = None
    note: str = ""
    expected: str = "posted"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def net(self) -> float:
        if self.net_override is not None:
            return self.net_override
        return round(sum(a for _, a in self.lines), 2)

    @property
    def tax(self) -> float:
        return round(self.net * self.tax_rate, 2)

    @property
    def total(self) -> float:
        return round(self.net + self.tax, 2)

    @property
    def file_name(self) -> str:
        return f"{self.number.lower()}-{self.scenario.value.replace('_', '-')}.txt"

    def document(self) -> str:
        rows = [f"  {d:<34} {a:>10.2f}" for d, a in self.lines]
        return "\n".join(
            [
                "INVOICE",
                f"Supplier: {self.supplier}",
                f"Invoice number: {self.number}",
                f"Date: {self.date}",
                f"Currency: {self.currency}",
                "",
                "Items:",
                *rows,
                f"Net: {self.net:.2f}",
                f"VAT {self.tax_rate * 100:.0f}%: {self.tax:.2f}",
                f"Total: {self.total:.2f}",
                *([f"Note: {self.note}"] if self.note else []),
                "",
            ]
        )

    def fields(self, confidence: float = 0.97) -> dict[str, Any]:
        return {
            "supplier": self.supplier,
            "invoice_number": self.number,
            "date": self.date,
            "currency": self.currency,
            "net": self.net,
            "tax": self.tax,
            "total": self.total,
            "line_items": [{"description": d, "amount": a} for d, a in self.lines],
            "confidence": confidence,
        }


_SMALL = [
    ("ACME Office Supplies", "EUR", [("Printer paper, 20 boxes", 180.0), ("Toner", 240.0)]),
    ("Blue Harbor Logistics", "USD", [("Pallet freight Rotterdam", 310.5)]),
    ("Cobalt Cloud Services", "USD", [("Compute, November", 412.75), ("Storage", 88.25)]),
    ("Delta Catering", "EUR", [("Team lunch, 14 people", 266.0)]),
    ("Evergreen Facilities", "GBP", [("Window cleaning", 150.0), ("Plant care", 95.0)]),
    ("ACME Office Supplies", "EUR", [("Desk chairs, 2", 398.0)]),
    ("Blue Harbor Logistics", "EUR", [("Courier, 12 parcels", 144.0)]),
    ("Cobalt Cloud Services", "EUR", [("Support plan", 199.0)]),
    ("Delta Catering", "CHF", [("Board meeting catering", 520.0)]),
    ("Evergreen Facilities", "EUR", [("HVAC inspection", 640.0)]),
    ("ACME Office Supplies", "USD", [("Whiteboard markers", 42.5), ("Notebooks", 61.0)]),
    ("Blue Harbor Logistics", "GBP", [("Customs handling", 275.0)]),
    ("Cobalt Cloud Services", "USD", [("Backup service", 96.0)]),
    ("Delta Catering", "EUR", [("Coffee service, monthly", 330.0)]),
    ("Evergreen Facilities", "USD", [("Pest control", 180.0), ("Gutter cleaning", 120.0)]),
    ("ACME Office Supplies", "GBP", [("Filing cabinets, 3", 510.0)]),
]
_LARGE = [
    ("Blue Harbor Logistics", "EUR", [("Warehouse lease, December", 1500.0)]),
    ("Cobalt Cloud Services", "USD", [("Reserved instances, 1 year", 4200.0)]),
    ("Evergreen Facilities", "EUR", [("Office deep clean", 980.0), ("Carpet", 720.0)]),
    ("Blue Harbor Logistics", "USD", [("Container, Shanghai-Hamburg", 2875.0)]),
    ("ACME Office Supplies", "EUR", [("Standing desks, 6", 2340.0)]),
    ("Delta Catering", "GBP", [("Annual party", 3100.0)]),
]


def samples(extra: int = 0) -> list[Sample]:
    """The sample invoices, in a fixed order with fixed numbers, and ``extra`` more clean
    small ones after them (``keel demo --size``)."""
    out: list[Sample] = []

    def add(scenario: Scenario, supplier: str, currency: str, lines: Any, **kw: Any) -> None:
        n = len(out) + 1
        number = f"INV-2026-{n:04d}"
        date = f"2026-11-{(n % 28) + 1:02d}"
        out.append(Sample(scenario, supplier, number, date, currency, tuple(lines), **kw))

    for supplier, currency, lines in _SMALL:
        add(Scenario.AUTO, supplier, currency, lines)
    approvals = [Scenario.APPROVE, Scenario.APPROVE, Scenario.APPROVE, Scenario.REJECT]
    approvals += [Scenario.STALE, Scenario.EXPIRE]
    for scenario, (supplier, currency, lines) in zip(approvals, _LARGE, strict=True):
        expected = "rejected" if scenario in (Scenario.REJECT, Scenario.EXPIRE) else "posted"
        add(scenario, supplier, currency, lines, expected=expected)
    add(Scenario.REPAIR, "ACME Office Supplies", "EUR", [("Label printer", 189.0)])
    add(Scenario.REPAIR, "Delta Catering", "EUR", [("Workshop lunch", 212.0)])
    add(Scenario.CORRECT, "Evergreen Facilities", "EUR", [("Lift maintenance", 455.0)])
    add(Scenario.UNSURE, "Blue Harbor Logistics", "EUR", [("Storage, 3 pallets", 87.0)])
    add(
        Scenario.BAD_TOTALS,
        "Cobalt Cloud Services",
        "EUR",
        [("Licences", 120.0), ("Setup", 80.0)],
        net_override=220.0,
    )
    add(
        Scenario.UNKNOWN_SUPPLIER,
        "Globex Consulting",
        "EUR",
        [("Strategy workshop", 700.0)],
        expected="rejected",
    )
    add(Scenario.PAYMENT_FAILS, "Fjord Legal Partners", "EUR", [("Notary fees", 310.0)])
    first = out[1]  # a second file of invoice 2: another scan, the same invoice
    out.append(
        Sample(
            Scenario.DUPLICATE,
            first.supplier,
            first.number,
            first.date,
            first.currency,
            first.lines,
            note="second copy, sent by post",
            expected="duplicate",
        )
    )
    for sample in out:
        if sample.scenario is Scenario.PAYMENT_FAILS:
            object.__setattr__(sample, "expected", "compensated")
    for i in range(extra):
        supplier, currency, lines = _SMALL[i % len(_SMALL)]
        add(Scenario.AUTO, supplier, currency, [(d, a + i % 7) for d, a in lines])
    return out


MALFORMED = "Sure! Here is the invoice: {supplier: "


def model_script(items: list[Sample]) -> dict[str, Any]:
    """The scripted model's answers (``POST /script`` of the OpenAI fake)."""
    responses: list[dict[str, Any]] = []
    for s in items:
        tokens = {"prompt_tokens": 180 + len(s.lines) * 12, "completion_tokens": 95}
        if s.scenario is Scenario.DUPLICATE:
            continue  # answered by its original's entry (repeat 2)
        if s.scenario is Scenario.REPAIR:
            responses.append({"match": s.number, "content": MALFORMED, **tokens})
        if s.scenario is Scenario.CORRECT:
            responses.append({"match": s.number, "content": MALFORMED, "repeat": 3, **tokens})
            continue
        confidence = 0.55 if s.scenario is Scenario.UNSURE else 0.97
        repeat = (
            2
            if any(d.scenario is Scenario.DUPLICATE and d.number == s.number for d in items)
            else 1
        )
        responses.append(
            {"match": s.number, "json": s.fields(confidence), "repeat": repeat, **tokens}
        )
    return {"responses": responses}


def corrected(s: Sample) -> dict[str, Any]:
    """What a clerk enters for ``s``: its fields, amounts recomputed from its lines."""
    net = round(sum(a for _, a in s.lines), 2)
    tax = round(net * s.tax_rate, 2)
    fields = {k: v for k, v in s.fields().items() if k != "confidence"}
    return fields | {"net": net, "tax": tax, "total": round(net + tax, 2)}


def manifest(items: list[Sample]) -> list[dict[str, Any]]:
    return [
        {
            "file": s.file_name,
            "scenario": s.scenario.value,
            "expected": s.expected,
            "supplier": s.supplier,
            "invoice_number": s.number,
            "total": s.total,
            "currency": s.currency,
            "correction": corrected(s)
            if s.scenario in (Scenario.CORRECT, Scenario.UNSURE, Scenario.BAD_TOTALS)
            else None,
        }
        for s in items
    ]


def write(out: Path) -> list[Path]:
    """Write the files into ``out``; returns their paths."""
    items = samples()
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.txt"):  # a renamed sample leaves no file behind
        stale.unlink()
    paths = []
    for s in items:
        path = out / s.file_name
        path.write_text(s.document(), encoding="utf-8")
        paths.append(path)
    for name, data in (
        ("manifest.json", manifest(items)),
        ("model_script.json", model_script(items)),
    ):
        path = out / name
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("ops/demo_data/invoices"))
    args = parser.parse_args(argv)
    print(f"{len(write(args.out))} files written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
