"""``keel evaluate --app M:A --workflow W --inputs FILE``: a workflow of your own under
every fault class that can strike it (docs/evaluation.md, "Your own workflow").

Its runs are started with the client from the inputs (a JSON array, or one JSON value a
line), one run per input, each under a workflow id new to your systems in every batch
(``_run_id``), and compared with the fault-free run of the same input. Keel cannot fake
your external systems: ``crash`` (the orchestrator and the worker SIGKILLed during a call
the worker holds for it, of a run with a call behind it) and ``duplicate_callbacks``
(every start sent three times, out of order, and every answer of the driver twice)
strike Keel itself, and so does ``old_schema`` (half the runs start on your latest
version N, with no worker yet; then N+1, its states with a migration from N at every
wait, is deployed: the orchestrator restarts on it and the worker starts, the runs
waiting migrate, the rest start on N+1); ``response_loss``, ``queue_full`` and
``compensation_failure`` are injected at your handlers by the worker's application,
``ops/evaluation/fault_app.py``, which also keeps the book of their calls. A run should
end as the fault-free run of its input did (a compensated one, under
``compensation_failure``, ``compensation_failed``). A run that waits for a signal, a
webhook or a person is answered by the user's driver (``--driver``,
``ops/evaluation/driving.py``), which also plays the model; one no rule answers stops
the batch, naming it.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from rich.console import Console

from ops.demo_job import fresh_prefix
from ops.evaluation.driving import DriverAgent, webhook_secrets
from ops.evaluation.fault_app import (
    APP_VARIABLE,
    BOOK_VARIABLE,
    DEPLOYED_VARIABLE,
    FAULT_VARIABLE,
    WORKFLOW_VARIABLE,
    FaultBook,
    Roles,
    roles_of,
)
from ops.evaluation.fault_batch import (
    BatchResult,
    deploy,
    deployable,
    evidence,
    kill_in_flight,
    migrate_waiting,
)
from ops.evaluation.fault_plans import OUTAGE_RETRY_AFTER_S, OUTAGE_S, FaultClass, FaultPlan
from ops.evaluation.lag_sampler import LagSampler
from ops.evaluation.next_version import deployed
from ops.invoices.invoice_demo import Stack
from orchestrator.application.driver_rules import Driver
from orchestrator.cli.output import styled
from orchestrator.config.settings import Settings
from orchestrator.domain.model.errors import InvalidInputError
from orchestrator.domain.model.state import TERMINAL_STATUSES

__all__ = [
    "OWN_FAULTS",
    "OWN_VARIANT",
    "load_inputs",
    "own_plan",
    "run_app_batch",
    "striking_faults",
]

#: The classes a workflow of your own is evaluated under, in order.
OWN_FAULTS = (
    FaultClass.NONE,
    FaultClass.CRASH,
    FaultClass.RESPONSE_LOSS,
    FaultClass.DUPLICATE_CALLBACKS,
    FaultClass.COMPENSATION_FAILURE,
    FaultClass.QUEUE_FULL,
    FaultClass.OLD_SCHEMA,
)
OWN_VARIANT = "own"
#: The application the batch's processes run: yours, its handlers wrapped.
FAULT_APP = "ops.evaluation.fault_app:app"

_OWN_WHAT = {
    FaultClass.CRASH: "the orchestrator and the worker SIGKILLed (and restarted) during a call "
    "of a run with a call behind it (without activities: once half the runs are in flight)",
    FaultClass.RESPONSE_LOSS: "every third first attempt of a write (a step with a status query, "
    "on_unknown=retry, or a @side_effect handler) returns, then its answer is lost",
    FaultClass.QUEUE_FULL: f"every write fails as a downstream down for {OUTAGE_S:.0f} s from "
    f"the first write (503, Retry-After {OUTAGE_RETRY_AFTER_S} s), paced by its retries",
    FaultClass.COMPENSATION_FAILURE: "every compensation keeps failing, past its retries",
    FaultClass.DUPLICATE_CALLBACKS: "every start sent three times: at once, in reverse order "
    "and interleaved; every answer of the driver (signal, webhook, decision) sent twice",
    FaultClass.OLD_SCHEMA: "half the runs start on your latest version, with no worker yet; "
    "then the next (its states, with a migration at every wait) is deployed: the "
    "orchestrator restarts on it and the worker starts, the runs waiting there migrate, "
    "the rest start on it",
}


def striking_faults(roles: Roles) -> dict[FaultClass, str]:
    """Each fault class, and why it cannot strike a workflow of these ``roles`` ("": it can)."""
    return {
        FaultClass.NONE: "",
        FaultClass.CRASH: "",
        FaultClass.DUPLICATE_CALLBACKS: "",
        FaultClass.RESPONSE_LOSS: "" if roles.writes else _NO_WRITE,
        FaultClass.QUEUE_FULL: "" if roles.writes else _NO_WRITE,
        FaultClass.COMPENSATION_FAILURE: ""
        if roles.compensations
        else "no step declares a compensation",
        FaultClass.OLD_SCHEMA: "",
    }


_NO_WRITE = (
    "no write: no step declares a status query or on_unknown=retry, and no handler is @side_effect"
)


def own_plan(plan: FaultPlan) -> FaultPlan:
    """``plan`` as injected into a workflow of your own (what it says it does)."""
    what = _OWN_WHAT.get(plan.fault)
    if what is None:
        return plan
    return replace(plan, what=what)


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


def _run_id(workflow: str, batch: str, i: int, value: Any) -> str:
    """A run's id: new to your systems in every batch (``batch``), so the idempotency keys
    its activities send them are too; the input's place and digest say which it ran."""
    digest = hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:12]
    return f"eval-{workflow}-{batch}-{i:04d}-{digest}"


def run_app_batch(
    settings: Settings,
    plan: FaultPlan,
    spec: str,
    workflow: str,
    inputs: list[Any],
    baseline: BatchResult | None,
    console: Console,
    max_s: float,
    driver: Driver | None = None,
    driver_spec: str | None = None,
) -> BatchResult:
    """Run ``workflow`` of the application ``spec`` over ``inputs`` under ``plan``, each
    run compared with ``baseline``'s run of its input (None: this is the fault-free batch);
    ``driver`` (loaded from ``driver_spec``) answers the runs that wait."""
    from orchestrator.application.app import load_app
    from orchestrator.client.client import KeelClient

    if plan.fault not in OWN_FAULTS:
        raise InvalidInputError(f"fault class {plan.fault} cannot strike a workflow of your own")
    plan = own_plan(plan)
    began = time.monotonic()
    settings, log_dir = fresh_prefix(settings, f"eval-own-{plan.fault}".replace("_", "-"))
    tag = secrets.token_hex(3)
    ids = [_run_id(workflow, tag, i, v) for i, v in enumerate(inputs)]
    console.print(
        styled(
            (f"{workflow} / {plan.fault}", "bold"),
            f": {plan.what} ({len(ids)} runs, prefix ",
            (settings.topic_prefix, "cyan"),
            ")",
        ),
        soft_wrap=True,
    )
    user_app = load_app(spec)
    book_key = f"keel-eval:{settings.topic_prefix}"
    settings, driven = _driven(settings, log_dir, driver)
    hooks = webhook_secrets(user_app, driver)
    env = settings.child_environment(  # the batch's own values win over yours
        **{
            **_app_environment(settings),
            "KEEL_APP": FAULT_APP,
            APP_VARIABLE: spec,
            WORKFLOW_VARIABLE: workflow,
            FAULT_VARIABLE: str(plan.fault),
            BOOK_VARIABLE: book_key,
            **driven,
            **hooks,
        }
    )
    stack = Stack(settings, log_dir, env)
    client = KeelClient(settings, user_app)
    agent = DriverAgent(
        settings,
        user_app,
        client,
        driver,
        driver_spec,
        lambda: stack.connector_url,
        hooks,
        repeat=plan.deliveries > 1,
    )
    deadline_ms = int((time.time() + max_s - (time.monotonic() - began)) * 1000)
    from_version = user_app.get(workflow).version
    deliveries: list[tuple[str, int, int]] = []
    killed_ms: int | None = None
    deployed_ms: int | None = None
    migrations: dict[str, int] = {}
    rounds = [list(zip(ids, inputs, strict=True))]
    later: list[tuple[str, Any]] = []  # old_schema: started once the next version is deployed
    if plan.deploy_at is not None:
        cut = max(1, int(len(ids) * plan.deploy_at))
        rounds[0], later = rounds[0][:cut], rounds[0][cut:]
    if plan.deliveries > 1:  # the same starts again, in reverse order, then once more
        rounds += [rounds[0][::-1], rounds[0][1::2] + rounds[0][0::2]]

    book = FaultBook(settings.redis, book_key)
    # crash: with activities, when a call is held (fault_app); else once runs are in flight
    steps = any(d.steps_by_name for (n, _), d in user_app.definitions.items() if n == workflow)

    def strike(rows: list[str | None]) -> None:
        nonlocal killed_ms
        if killed_ms is None and plan.kill_at is not None and (not steps or book.held()):
            killed_ms = kill_in_flight(stack, rows, 0.0 if steps else plan.kill_at, False)

    def start(batch: list[tuple[str, Any]]) -> None:
        for wf, value in batch:
            client.start(workflow, value, wf, confirm_timeout_s=None)
            deliveries.append((wf, int(time.time() * 1000), 202))
            strike(client.projection.statuses(ids))

    try:
        with LagSampler(settings) as lag:
            stack.start("orchestrator")
            if hooks:  # the driver delivers webhooks through the connector's signed path
                stack.start_connector()
            if plan.deploy_at is None:
                stack.start("worker")
            # else the worker comes with the deployment: the first runs' activities wait
            # for it, so they are in flight on version N however fast your steps are
            ended: set[str] = set()
            for n, batch in enumerate(rounds):
                start(batch)
                if n == 0:
                    time.sleep(0.2)  # the repeats arrive while the first starts are in flight
            while (len(ended) < len(ids) or later) and time.monotonic() < began + max_s:
                rows = client.projection.statuses(ids)
                strike(rows)
                agent.answer(ids, deadline_ms)
                if later and deployable(rows[: len(rounds[0])], False):
                    deployed_ms = deploy(stack, {DEPLOYED_VARIABLE: "1"})
                    stack.start("worker")
                    next_app = deployed(user_app, workflow)
                    client.close()
                    client = KeelClient(settings, next_app)
                    agent.use(client, next_app)
                    start(later)
                    later = []
                    migrations = migrate_waiting(settings, next_app, workflow, from_version)
                ended = {wf for wf, st in zip(ids, rows, strict=True) if st in TERMINAL_STATUSES}
                time.sleep(0.2)
    finally:
        client.close()
        stack.stop_all()
    runs = evidence(settings, ids, spec)
    labels = {wf: f"input {i + 1}" for i, wf in enumerate(ids)}
    expected = {wf: ev.outcome if ev.ended else "ended" for wf, ev in runs.items()}
    same_input: dict[str, str] = {}
    if baseline is not None:
        first = {label: wf for wf, label in baseline.scenarios.items()}
        same_input = {wf: first[label] for wf, label in labels.items()}
        expected = {wf: baseline.expected[same_input[wf]] for wf in ids}
        if plan.fault is FaultClass.COMPENSATION_FAILURE:
            expected = {wf: _UNDONE.get(e, e) for wf, e in expected.items()}
    result = BatchResult(
        plan.fault,
        OWN_VARIANT,
        workflow,
        spec,
        plan,
        settings.topic_prefix,
        str(log_dir),
        labels,
        expected,
        runs,
        None,
        deliveries=deliveries,
        killed_ms=killed_ms,
        baseline_ids=same_input,
        kafka_lag=lag.samples,
        deployed_ms=deployed_ms,
        from_version=from_version,
        migrations=migrations,
        desk_problems=agent.refusals,
        driver_actions=agent.counts(),
        # duplicate_callbacks: every answer of the driver was sent a second time
        decisions_repeated=len(agent.answered) if agent.repeat else 0,
    )
    _read_book(result, book, roles_of(user_app, workflow))
    result.took_s = time.monotonic() - began
    return result


#: Under ``compensation_failure`` a run the fault-free batch compensated cannot be undone.
_UNDONE = {"compensated": "compensation_failed"}


def _read_book(result: BatchResult, book: FaultBook, roles: Roles) -> None:
    """What the handlers' book says: effects made twice (``@side_effect`` handlers that
    returned twice for one key), calls your systems saw again under one key, how often
    the fault fired and, under ``queue_full``, the outage."""
    try:
        calls = book.calls_returned()
        fired = book.times_fired()
        outage = book.outage_ms()
    finally:
        book.close()
    again = {(kind, key): n for (kind, key), n in calls.items() if n > 1}
    result.effects_twice = sum(
        n - 1 for (kind, _), n in again.items() if kind in roles.side_effects
    )
    result.calls_repeated = sum(n - 1 for (kind, _), n in again.items())
    match result.fault:
        case FaultClass.RESPONSE_LOSS:
            result.answers_dropped = fired
        case FaultClass.COMPENSATION_FAILURE:
            result.compensations_refused = fired
        case FaultClass.QUEUE_FULL:
            result.outage_ms = outage


def _driven(
    settings: Settings, log_dir: Path, driver: Driver | None
) -> tuple[Settings, dict[str, str]]:
    """What the batch's processes need for the driver to answer them: the task-token
    secret its decisions are signed under (the user's, else one made for the batch) and
    the scripted model's answers; the settings that sign."""
    secret = settings.task_token_secret
    if secret is None:
        secret = SecretStr(secrets.token_hex(32))
        settings = settings.model_copy(update={"task_token_secret": secret})
    env = {"KEEL_TASK_TOKEN_SECRET": secret.get_secret_value()}
    if driver is not None and driver.llm_answers:
        script = log_dir / "llm-script.json"
        script.write_text(json.dumps(driver.llm_script()))
        env.update(KEEL_LLM_PROVIDER="scripted", KEEL_LLM_SCRIPT=str(script))
    return settings, env


def _app_environment(settings: Settings) -> dict[str, str]:
    """Your application's own ``KEEL_*`` variables (``KEEL_BOOKING_URL``, say): passed on
    to the batch's processes, which get no other ``KEEL_*`` of this one's but their
    settings' (``Settings.child_environment``)."""
    mine = {f"KEEL_{name.upper()}" for name in type(settings).model_fields}
    return {k: v for k, v in os.environ.items() if k.startswith("KEEL_") and k not in mine}
