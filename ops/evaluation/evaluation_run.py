"""``keel evaluate``: the invoice process under each fault class, as the backbone
(``invoice_pipeline``) and as one agent (``invoice_agent``), then the report
(docs/evaluation.md).

Each variant's fault-free batch runs first: its other batches' runs are compared with its
run of the same input (the workflow id is the invoice file's SHA-256, so it is the same id
on each batch's topic prefix). Exit 0 only when every class passes for the backbone: the
agent is evaluated beside it, for comparison.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ops.evaluation.app_batch import OWN_FAULTS, OWN_VARIANT, run_app_batch, striking_faults
from ops.evaluation.evaluation_report import class_metrics, write_report
from ops.evaluation.fault_app import roles_of
from ops.evaluation.fault_batch import BatchResult, evaluation_items, run_batch
from ops.evaluation.fault_plans import FaultClass, Variant, plan_for
from ops.faults.service_faults import SeededBug
from orchestrator.cli.output import styled
from orchestrator.config.settings import Settings
from orchestrator.domain.model.errors import InvalidInputError, iso_utc

__all__ = ["WORKFLOWS", "run_evaluation", "run_own_evaluation"]

#: The workflows ``keel evaluate`` knows how to feed, fake and judge.
WORKFLOWS = ("invoice_pipeline",)


def run_evaluation(
    settings: Settings,
    workflow: str,
    runs: int,
    faults: list[FaultClass],
    variants: list[Variant],
    out: Path,
    console: Console,
    batch_s: float = 240.0,
    seeded_bug: SeededBug | None = None,
) -> int:
    """Run every variant's batch of every class, write the report to ``out``; 0 when
    every class passed for the backbone (or for the only variant run)."""
    if workflow not in WORKFLOWS:
        raise InvalidInputError(
            f"keel evaluate knows the workflow(s) {', '.join(WORKFLOWS)}, not {workflow!r}; "
            "for a workflow of your own give --app and --inputs"
        )
    began, started = time.monotonic(), iso_utc(int(time.time() * 1000))
    if seeded_bug is not None:
        console.print(styled((f"TEST ONLY: the seeded bug {seeded_bug} is on", "red")))
    items = evaluation_items(runs)
    classes = []
    for variant in variants:
        batches: list[BatchResult] = []
        for fault in faults:
            plan = plan_for(fault, len(items))
            batches.append(run_batch(settings, plan, variant, items, console, batch_s, seeded_bug))
        baseline = next((b for b in batches if b.fault is FaultClass.NONE), None)
        classes += [class_metrics(b, baseline) for b in batches]
    judged = str(variants[0] if len(variants) == 1 else Variant.BACKBONE)
    meta = {"variants": [str(v) for v in variants], "runs": len(items), "judged": judged}
    return _finish(out, console, workflow, classes, meta, faults, began, started, seeded_bug)


def run_own_evaluation(
    settings: Settings,
    spec: str,
    workflow: str,
    inputs: list[Any],
    faults: list[FaultClass] | None,
    out: Path,
    console: Console,
    batch_s: float = 240.0,
    driver_spec: str | None = None,
) -> int:
    """``--app``: the workflow of the application ``spec`` over ``inputs``, under
    ``faults`` (None: every class of ``OWN_FAULTS`` that can strike it), the fault-free
    batch first (it sets each run's expected outcome); the report in ``out``; 0 when
    every class passed. A class that cannot strike the workflow is refused, saying why.
    ``driver_spec`` (``module:attr``) names the Driver that answers the runs that wait."""
    from orchestrator.application.app import load_app
    from orchestrator.application.driver_rules import load_driver

    user_app = load_app(spec)
    user_app.get(workflow)  # an unknown app or workflow is refused before any batch
    driver = None if driver_spec is None else load_driver(driver_spec)
    if driver is not None:
        driver.check(user_app, workflow)  # a rule that can never answer: refused now
    strikes = striking_faults(roles_of(user_app, workflow))
    if faults is None:
        faults = [f for f in OWN_FAULTS if not strikes[f]]
    unusable = [f"{f} ({strikes[f]})" for f in faults if strikes[f]]
    if unusable:
        raise InvalidInputError(f"fault class(es) cannot strike {workflow}: {'; '.join(unusable)}")
    began, started = time.monotonic(), iso_utc(int(time.time() * 1000))
    batches: list[BatchResult] = []
    for fault in faults:
        baseline = batches[0] if batches else None
        plan = plan_for(fault, len(inputs))
        batches.append(
            run_app_batch(
                settings,
                plan,
                spec,
                workflow,
                inputs,
                baseline,
                console,
                batch_s,
                driver,
                driver_spec,
            )
        )
    classes = [class_metrics(b, batches[0]) for b in batches]
    meta = {"variants": [OWN_VARIANT], "runs": len(inputs), "judged": OWN_VARIANT, "app": spec}
    meta["driver"] = driver_spec
    return _finish(out, console, workflow, classes, meta, faults, began, started, None)


def _finish(
    out: Path,
    console: Console,
    workflow: str,
    classes: list[dict[str, Any]],
    meta: dict[str, Any],
    faults: list[FaultClass],
    began: float,
    started: str,
    seeded_bug: SeededBug | None,
) -> int:
    """Write the report, print the summary; 0 when the judged variant passed every class."""
    judged = meta["judged"]
    meta = {
        **meta,
        "workflow": workflow,
        "started": started,
        "took_s": round(time.monotonic() - began, 1),
        "faults": [str(f) for f in faults],
        "seeded_bug": None if seeded_bug is None else str(seeded_bug),
    }
    html = write_report(out, classes, meta)
    _summary(console, classes)
    console.print(f"report: {html} (and report.json, the plots, beside it)", soft_wrap=True)
    mine = [c for c in classes if c["variant"] == judged]
    return 0 if all(c["verdict"] == "pass" for c in mine) else 1


def _summary(console: Console, classes: list[dict]) -> None:
    table = Table(title="keel evaluate", title_justify="left")
    for col in (
        "variant",
        "fault",
        "runs",
        "ok",
        "dup. effects",
        "re-run",
        "unknown",
        "hits",
        "verdict",
    ):
        table.add_column(col)
    for c in classes:
        table.add_row(
            c["variant"],
            c["fault"],
            str(c["runs"]),
            str(c["succeeded"]),
            "n/a" if c["duplicate_effects"] is None else str(c["duplicate_effects"]),
            str(c["re_executed_activities"]),
            str(c["unknown_outcomes"]),
            str(c["fault_hits"]),
            c["verdict"],
        )
    console.print(table)
    driven = [c for c in classes if c.get("driver_actions")]
    if driven:  # a workflow of your own that waits: what its driver answered
        answers = (
            f"{c['fault']}: " + ", ".join(f"{k} {n}" for k, n in c["driver_actions"].items())
            for c in driven
        )
        console.print("driver answered: " + "; ".join(answers), soft_wrap=True)
    for c in classes:
        for reason in c["verdict_reasons"]:
            console.print(
                styled((f"{c['variant']} / {c['fault']}:", "red"), f" {reason}"), highlight=False
            )
