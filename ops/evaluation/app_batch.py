"""``keel evaluate --app M:A --workflow W --inputs FILE``: a workflow of your own under the
fault classes that need nothing of it but its application (docs/evaluation.md, "Your own
workflow").

Its runs are started with the client from the inputs (a JSON array, or one JSON value a
line), one run per input, each under a workflow id derived from the input and its place,
so a run in a fault batch has the same id as the fault-free run of the same input. Keel
cannot fake your external systems or play your people, so the classes are the ones that
strike Keel itself: ``crash`` (the orchestrator and the worker SIGKILLed with runs in
flight) and ``duplicate_callbacks`` (every start sent three times, out of order). A run
should end as the fault-free run of its input did; a run waiting for a person is not
answered, and fails the batch by not ending.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from ops.demo_job import fresh_prefix
from ops.evaluation.fault_batch import BatchResult, evidence, kill_in_flight
from ops.evaluation.fault_plans import FaultClass, FaultPlan
from ops.invoices.invoice_demo import Stack
from orchestrator.domain.model.errors import InvalidInputError
from orchestrator.domain.model.state import TERMINAL_STATUSES
from orchestrator.settings import Settings

__all__ = ["OWN_FAULTS", "OWN_VARIANT", "load_inputs", "run_app_batch"]

#: The classes a workflow of your own is evaluated under.
OWN_FAULTS = (FaultClass.NONE, FaultClass.CRASH, FaultClass.DUPLICATE_CALLBACKS)
OWN_VARIANT = "own"


def load_inputs(path: Path, runs: int) -> list[Any]:
    """The inputs in ``path`` (a JSON array, or JSON lines), repeated in order up to
    ``runs`` when there are fewer; a file that is not JSON is refused naming the line."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidInputError(f"cannot read the inputs {path}: {exc.strerror}") from None
    if text.lstrip().startswith("["):
        try:
            inputs = json.loads(text)
        except ValueError as exc:
            raise InvalidInputError(f"{path} is not a JSON array: {exc}") from None
    else:
        inputs = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    inputs.append(json.loads(line))
                except ValueError as exc:
                    raise InvalidInputError(f"{path} line {n} is not JSON: {exc}") from None
    if not inputs:
        raise InvalidInputError(f"{path} holds no input")
    return [inputs[i % len(inputs)] for i in range(max(runs, len(inputs)))]


def _run_id(workflow: str, i: int, value: Any) -> str:
    digest = hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]
    return f"eval-{workflow}-{i:04d}-{digest}"


def run_app_batch(
    settings: Settings,
    plan: FaultPlan,
    spec: str,
    workflow: str,
    inputs: list[Any],
    expected: dict[str, str] | None,
    console: Console,
    max_s: float,
) -> BatchResult:
    """Run ``workflow`` of the application ``spec`` over ``inputs`` under ``plan``.
    ``expected``: each run's outcome in the fault-free batch (None: this is that batch)."""
    from orchestrator.application.app import load_app
    from orchestrator.client.client import KeelClient

    if plan.fault not in OWN_FAULTS:
        raise InvalidInputError(
            f"fault class {plan.fault} needs Keel's fakes of the invoice pipeline; a workflow "
            f"of your own is evaluated under {', '.join(OWN_FAULTS)}"
        )
    began = time.monotonic()
    settings, log_dir = fresh_prefix(settings, f"eval-own-{plan.fault}".replace("_", "-"))
    ids = [_run_id(workflow, i, v) for i, v in enumerate(inputs)]
    console.print(
        f"[bold]{workflow} / {plan.fault}[/bold]: {plan.what} ({len(ids)} runs, prefix "
        f"[cyan]{settings.topic_prefix}[/cyan])",
        soft_wrap=True,
    )
    stack = Stack(settings, log_dir, settings.child_environment(KEEL_APP=spec))
    client = KeelClient(settings, load_app(spec))
    deliveries: list[tuple[str, int, int]] = []
    killed_ms: int | None = None
    rounds = [list(zip(ids, inputs, strict=True))]
    if plan.deliveries > 1:  # the same starts again, in reverse order, then once more
        rounds += [rounds[0][::-1], rounds[0][1::2] + rounds[0][0::2]]
    try:
        stack.start("orchestrator")
        stack.start("worker")
        ended: set[str] = set()
        for n, batch in enumerate(rounds):
            for wf, value in batch:
                client.start(workflow, value, wf, confirm_timeout_s=None)
                deliveries.append((wf, int(time.time() * 1000), 202))
                if killed_ms is None and plan.kill_at is not None:
                    rows = client.projection.statuses(ids)
                    killed_ms = kill_in_flight(stack, rows, plan.kill_at, False)
            if n == 0:
                time.sleep(0.2)  # the repeats arrive while the first starts are in flight
        while len(ended) < len(ids) and time.monotonic() < began + max_s:
            rows = client.projection.statuses(ids)
            if killed_ms is None and plan.kill_at is not None:
                killed_ms = kill_in_flight(stack, rows, plan.kill_at, False)
            ended = {wf for wf, st in zip(ids, rows, strict=True) if st in TERMINAL_STATUSES}
            time.sleep(0.2)
    finally:
        client.close()
        stack.stop_all()
    runs = evidence(settings, ids, spec)
    own = {wf: ev.outcome if ev.ended else "ended" for wf, ev in runs.items()}
    result = BatchResult(
        plan.fault,
        OWN_VARIANT,
        workflow,
        spec,
        plan,
        settings.topic_prefix,
        str(log_dir),
        {wf: f"input {i + 1}" for i, wf in enumerate(ids)},
        dict(own if expected is None else expected),
        runs,
        None,
        deliveries=deliveries,
        killed_ms=killed_ms,
    )
    result.took_s = time.monotonic() - began
    return result
