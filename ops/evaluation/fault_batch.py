"""One batch of ``keel evaluate``: one variant of the invoice process under one fault
class, on a topic prefix and fakes of its own (docs/evaluation.md).

The batch starts the fakes (with the class's switches, the model scripted for both
variants), an orchestrator and a worker. The backbone (``invoice_pipeline``) gets the
connector too: the invoices go through its signed webhook source, and people are played
at its task API. The all-agent variant (``invoice_agent``) has no person to ask: its runs
are started with the client. Then the fault is injected, the batch waits until every run
ended (or its time is up), and every run's history and the fakes' books are read back.
Every process it started is stopped by PID; Kafka and Redis stay up.
"""

from __future__ import annotations

import secrets
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.console import Console

from ops.demo_job import fresh_prefix
from ops.evaluation.fault_plans import FaultClass, FaultPlan, Variant
from ops.evaluation.lag_sampler import LagSampler
from ops.evaluation.run_evidence import RunEvidence, evidence_of
from ops.fakes.ledger import LedgerClient
from ops.fakes.payables import PayablesClient
from ops.faults.service_faults import SeededBug, hooks_of
from ops.invoices.agent_script import agent_input, both_scripts
from ops.invoices.invoice_demo import Desk, fakes_running, pipeline_stack, upload, write_people
from ops.invoices.invoice_report import Books
from ops.invoices.invoice_samples import Sample, Scenario, samples
from orchestrator.cli.output import styled
from orchestrator.config.settings import Settings
from orchestrator.domain.model.state import TERMINAL_STATUSES

if TYPE_CHECKING:
    from orchestrator.application.app import KeelApp

__all__ = [
    "BatchResult",
    "deploy",
    "deployable",
    "evaluation_items",
    "evidence",
    "kill_in_flight",
    "migrate_waiting",
    "run_batch",
]

#: One of each scenario that ends on its own, then clean small invoices. (An expiring
#: approval takes its SLA's seconds; a second file of one invoice must wait for the first.)
_SCENARIOS = (
    Scenario.PAYMENT_FAILS,
    Scenario.APPROVE,
    Scenario.REJECT,
    Scenario.STALE,
    Scenario.REPAIR,
    Scenario.CORRECT,
    Scenario.UNSURE,
    Scenario.BAD_TOTALS,
    Scenario.UNKNOWN_SUPPLIER,
)
#: Every model answer takes a quarter of a second, as a hosted model's would (at least):
#: an agent's run of several calls is in flight long enough for a fault to find it.
MODEL_LATENCY = {"latency_s": 0.25, "latency_count": 1_000_000}


def evaluation_items(runs: int) -> list[Sample]:
    """``runs`` sample invoices: the scenarios above first (as many as fit), then clean ones."""
    pool = samples(extra=runs)
    chosen: list[Sample] = []
    for scenario in _SCENARIOS:
        found = next((s for s in pool if s.scenario is scenario), None)
        if found is not None and len(chosen) < runs:
            chosen.append(found)
    chosen += [s for s in pool if s.scenario is Scenario.AUTO][: runs - len(chosen)]
    return chosen


@dataclass
class BatchResult:
    """What one batch did, and what its histories and the fakes' books show."""

    fault: FaultClass
    #: The design evaluated (``backbone``, ``agent``; ``own``: a workflow of ``--app``),
    #: its workflow and the application the processes ran.
    variant: str
    workflow: str
    app: str
    plan: FaultPlan
    prefix: str
    log_dir: str
    #: Each run's sample scenario (or input number) and the outcome it should end in.
    scenarios: dict[str, str]
    expected: dict[str, str]
    evidence: dict[str, RunEvidence]
    #: The fakes' own books (None: the workflow's external systems are not Keel's fakes).
    books: Books | None
    #: Each delivery of an upload: (workflow id, wall-clock ms, the connector's status).
    deliveries: list[tuple[str, int, int]] = field(default_factory=list)
    decisions_sent: int = 0
    decisions_repeated: int = 0
    #: Answers Keel refused: the task desk's (a decision), the connector's (a delivery).
    desk_problems: list[str] = field(default_factory=list)
    #: A workflow of your own: the waits its driver answered, by how (signal, webhook,
    #: human_task).
    driver_actions: dict[str, int] = field(default_factory=dict)
    killed_ms: int | None = None
    #: Answers the ledger dropped after committing (its fault switch, spent).
    answers_dropped: int = 0
    #: The ledger's outage: (its first request, back up), wall-clock ms.
    outage_ms: tuple[int, int] | None = None
    #: Reversals refused by a compensation's handler (``compensation_failure`` of
    #: ``--app``; the ledger's books count the invoice pipeline's).
    compensations_refused: int = 0
    #: From the handlers' book of a workflow of your own (``ops/evaluation/fault_app.py``):
    #: effects made twice (``@side_effect`` handlers that returned twice for one key) and
    #: every call that returned again under one key (None: the fakes' books apply).
    effects_twice: int | None = None
    calls_repeated: int | None = None
    #: When the next version was deployed (old_schema), the version runs were started on
    #: before it, and the migrations' answers by outcome.
    deployed_ms: int | None = None
    from_version: int = 1
    migrations: dict[str, int] = field(default_factory=dict)
    took_s: float = 0.0
    #: Each run's fault-free run of the same input, where its workflow id differs (a
    #: workflow of your own: every batch's ids are new to your systems).
    baseline_ids: dict[str, str] = field(default_factory=dict)
    #: Kafka's consumer lag over the batch: (wall-clock ms, {topic <- group: records}).
    kafka_lag: list[tuple[int, dict[str, int]]] = field(default_factory=list)

    def baseline_id(self, wf: str) -> str:
        """The workflow id of the fault-free run of ``wf``'s input."""
        return self.baseline_ids.get(wf, wf)


def run_batch(
    settings: Settings,
    plan: FaultPlan,
    variant: Variant,
    items: list[Sample],
    console: Console,
    max_s: float,
    seeded_bug: SeededBug | None = None,
) -> BatchResult:
    """Run ``items`` through ``variant`` under ``plan`` (with a ``seeded_bug`` in the
    processes, for the evaluation's own test); the evidence and the books."""
    from orchestrator.examples.invoice_pipeline.pipeline_models import file_digest

    began = time.monotonic()
    stem = f"eval-{variant}-{plan.fault}".replace("_", "-")
    settings, log_dir = fresh_prefix(settings, stem)
    tokens = write_people(log_dir)
    hook_secret = secrets.token_hex(24)
    by_wf = {file_digest(s.document()): s for s in items}
    expected = {wf: plan.expected.get(s.scenario, s.expected) for wf, s in by_wf.items()}
    console.print(
        styled(
            (f"{variant} / {plan.fault}", "bold"),
            f": {plan.what} ({len(items)} invoices, prefix ",
            (settings.topic_prefix, "cyan"),
            ")",
        ),
        soft_wrap=True,
    )
    script = both_scripts(items)
    with fakes_running(
        items, plan.ledger_faults, plan.payables_faults, script, MODEL_LATENCY
    ) as urls:
        stack = pipeline_stack(settings, log_dir, urls, hook_secret, variant.app)
        if seeded_bug is not None:
            stack.env["KEEL_ADAPTER_HOOKS"] = hooks_of(seeded_bug)
        try:
            with LagSampler(settings) as lag:
                stack.start("orchestrator")
                stack.start("worker")
                if variant is Variant.BACKBONE:
                    stack.start_connector()
                ledger = LedgerClient(urls.ledger)
                deadline = began + max_s
                seen = _drive(stack, plan, variant, by_wf, hook_secret, tokens, ledger, deadline)
            books = Books(ledger.ledger(), PayablesClient(urls.payables).books())
            left = ledger.faults()
            seen["answers_dropped"] = (
                plan.ledger_faults.get("drop_after_commit", 0) - left["drop_after_commit"]
            )
            seen["kafka_lag"] = lag.samples
        finally:
            stack.stop_all()
    result = BatchResult(
        plan.fault,
        str(variant),
        variant.workflow,
        variant.app,
        plan,
        settings.topic_prefix,
        str(log_dir),
        {wf: str(s.scenario) for wf, s in by_wf.items()},
        expected,
        evidence(settings, list(by_wf), variant.app),
        books,
        **seen,
    )
    result.took_s = time.monotonic() - began
    return result


def _drive(
    stack: Any,
    plan: FaultPlan,
    variant: Variant,
    by_wf: dict[str, Sample],
    secret: str,
    tokens: dict[str, str],
    ledger: LedgerClient,
    deadline: float,
) -> dict[str, Any]:
    """Deliver, act like people, inject; what the batch itself sent and saw."""
    from orchestrator.application.app import load_app
    from orchestrator.client.client import KeelClient

    client = KeelClient(stack.settings, load_app(variant.app))
    desk = Desk(stack.connector_url, tokens, by_wf)
    #: Who starts the agent's runs: the client of the deployment the services run.
    starters = {variant.app: client}

    def deliver(wf: str, s: Sample, event_id: str) -> None:
        if variant is Variant.BACKBONE:
            status = upload(stack.connector_url, secret, event_id, s)
        else:  # the same id again joins its run, as a repeated upload does
            spec = stack.env["KEEL_APP"]
            if spec not in starters:
                starters[spec] = KeelClient(stack.settings, load_app(spec))
            starters[spec].start(variant.workflow, agent_input(s), wf, confirm_timeout_s=None)
            status = 202
        deliveries.append((wf, _ms(), status))

    deliveries: list[tuple[str, int, int]] = []
    order = list(by_wf.items())
    ids = list(by_wf)
    rounds = [[(wf, s, f"upload-{i}") for i, (wf, s) in enumerate(order)]]
    later: list[tuple[str, Sample, str]] = []  # old_schema: delivered once v2 is deployed
    if plan.deploy_at is not None:
        cut = max(1, int(len(order) * plan.deploy_at))
        rounds[0], later = rounds[0][:cut], rounds[0][cut:]
    deployed_ms: int | None = None
    migrations: dict[str, int] = {}
    if plan.deliveries > 1:  # then out of order: a redelivery, and a re-upload (a new id)
        rounds.append([(wf, s, f"upload-{i}") for i, (wf, s) in reversed(list(enumerate(order)))])
        rounds.append([(wf, s, f"again-{i}") for i, (wf, s) in enumerate(order)][1::2])
        rounds[-1] += [(wf, s, f"again-{i}") for i, (wf, s) in enumerate(order)][0::2]
    killed_ms: int | None = None
    people = variant is Variant.BACKBONE  # the agent asks nobody
    outage: tuple[int, int] | None = None  # (first request, ledger up again), ms
    outage_end_ms: int | None = None
    repeated = 0
    try:
        for wf, s, event_id in rounds[0]:
            deliver(wf, s, event_id)
            if killed_ms is None and plan.kill_at is not None:
                rows = client.projection.statuses(ids)
                killed_ms = kill_in_flight(stack, rows, plan.kill_at, people)
        pending = rounds[1:]
        if pending:  # a redelivery of every upload at once, in reverse order
            for wf, s, event_id in pending.pop(0):
                deliver(wf, s, event_id)
        ended: set[str] = set()
        while (len(ended) < len(ids) or pending) and time.monotonic() < deadline:
            rows = client.projection.statuses(ids)
            if killed_ms is None and plan.kill_at is not None:
                killed_ms = kill_in_flight(stack, rows, plan.kill_at, people)
            if plan.outage_s is not None and outage_end_ms is None:
                outage = _outage(ledger, plan.outage_s, outage)
                outage_end_ms = outage[1] if outage is not None and outage[1] else None
            if plan.deploy_at is not None and deployed_ms is None:
                first = rows[: len(rounds[0])]  # the deployment strikes what they started
                if deployable(first, people):
                    deployed_ms = deploy(stack, {"KEEL_APP": variant.next_app})
                    desk.url = stack.connector_url
                    for wf, s, event_id in later:
                        deliver(wf, s, event_id)
                    next_app = load_app(variant.next_app)
                    migrations = migrate_waiting(stack.settings, next_app, variant.workflow, 1)
            ended = {wf for wf, st in zip(ids, rows, strict=True) if st in TERMINAL_STATUSES}
            # People answer only after a crash or a deployment has struck: their runs wait
            # in flight for it.
            struck = (plan.kill_at is None or killed_ms is not None) and (
                plan.deploy_at is None or deployed_ms is not None
            )
            if people and struck:
                desk.act()
            if plan.deliveries > 1:
                for who, path, body in desk.sent[repeated:]:
                    desk.repeat(who, path, body)
                repeated = len(desk.sent)
            if pending:  # the next round of deliveries, while runs are in flight
                for wf, s, event_id in pending.pop(0):
                    deliver(wf, s, event_id)
            time.sleep(0.2)
    finally:
        for starter in starters.values():
            starter.close()
    return {
        "deliveries": deliveries,
        "decisions_sent": len(desk.sent),
        "decisions_repeated": repeated if plan.deliveries > 1 else 0,
        "desk_problems": desk.refusals,
        "killed_ms": killed_ms,
        "outage_ms": outage,
        "deployed_ms": deployed_ms,
        "migrations": migrations,
    }


def _outage(
    ledger: LedgerClient, outage_s: float, outage: tuple[int, int] | None
) -> tuple[int, int] | None:
    """The ledger's outage so far: (its first request, when it came back; 0 while it is
    down), ending it ``outage_s`` after that first request."""
    if outage is None:
        if not ledger.ledger()["requests"]:
            return None
        outage = (_ms(), 0)
    if _ms() - outage[0] >= outage_s * 1000:
        ledger.set_faults(down=False)
        return (outage[0], _ms())
    return outage


def _progress(rows: list[str | None]) -> tuple[int, int]:
    """How many of the runs (their read-model statuses) have started, and ended."""
    return sum(st is not None for st in rows), sum(st in TERMINAL_STATUSES for st in rows)


def deployable(rows: list[str | None], people: bool) -> bool:
    """Deploy the next version once a run of the first half is in flight (and, with
    people, one has ended), or once all of them have ended."""
    started, ended = _progress(rows)
    in_flight = started > ended and (ended > 0 or not people)
    return in_flight or ended == len(rows)


def deploy(stack: Any, env: dict[str, str]) -> int:
    """Stop the services (SIGTERM, as a deployment does) and start them again with
    ``env`` (the next deployment's application); when it began."""
    at = _ms()
    roles = sorted({name.rsplit("-", 1)[0] for name, p in stack.procs.items() if p.poll() is None})
    for proc in stack.procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in stack.procs.values():
        proc.wait(timeout=60)
    stack.env.update(env)
    for role in roles:
        if role == "connector":
            stack.start_connector()
        else:
            stack.start(role)
    return at


def migrate_waiting(
    settings: Settings, app: KeelApp, workflow: str, from_version: int
) -> dict[str, int]:
    """Migrate the runs of ``from_version`` waiting where ``app``'s latest version of
    ``workflow`` maps them, as an operator would (``keel workflow migrate --name W
    --from-version N --to-version N+1 --state S``); the answers by outcome."""
    from orchestrator.client.client import KeelClient

    target = app.get(workflow)
    migration = target.migrations.get(from_version)
    if migration is None:
        return {}
    client = KeelClient(settings, app)
    try:
        ids = sorted(
            {
                wf
                for state in migration.states
                for wf in client.migrations.select(workflow, from_version, state)
            }
        )
        outcomes = client.migrations.send(
            ids,
            target.version,
            "keel evaluate",
            "the next version deployed mid-flight",
            60.0,
        )
    finally:
        client.close()
    return dict(Counter(str(o.outcome) for o in outcomes))


def kill_in_flight(
    stack: Any, rows: list[str | None], share: float, need_ended: bool
) -> int | None:
    """SIGKILL (and restart) the orchestrator and the worker once ``share`` of the runs
    (``rows``: their read-model statuses) have started and one has not ended, and
    (``need_ended``) one has: the crash then finds runs in flight with work behind them,
    completed activities a recovery must not run again. The time of the kill, else None."""
    started, ended = _progress(rows)
    if started == ended or (need_ended and not ended) or started < len(rows) * share:
        return None
    at = _ms()
    for role in ("orchestrator", "worker"):
        stack.kill(role)
    return at


#: How long the history may lag the read model after a batch: a SIGKILLed orchestrator's
#: open transaction holds ``read_committed`` readers at it until the broker aborts it
#: (``transaction.timeout.ms``, 10 s; a restart under a new instance id cannot fence it).
SETTLE_S = 20.0


def evidence(settings: Settings, ids: list[str], app: str) -> dict[str, RunEvidence]:
    """Each run's evidence from ``keel.events``, read once the history shows every run
    the read model saw end (at most ``SETTLE_S``)."""
    from orchestrator.application.app import load_app
    from orchestrator.client.client import KeelClient
    from orchestrator.client.history_io import read_topic_history

    client = KeelClient(settings, load_app(app))
    try:
        rows = client.projection.statuses(ids)
    finally:
        client.close()
    seen_ended = {wf for wf, st in zip(ids, rows, strict=True) if st in TERMINAL_STATUSES}
    deadline = time.monotonic() + SETTLE_S
    while True:
        envelopes: dict[str, list[Any]] = {wf: [] for wf in ids}
        for env in read_topic_history(settings, ids, commands=False):
            envelopes[env.workflow_id].append(env)
        runs = {wf: evidence_of(wf, envs) for wf, envs in envelopes.items()}
        if all(runs[wf].ended for wf in seen_ended) or time.monotonic() > deadline:
            return runs
        time.sleep(1.0)


def _ms() -> int:
    return int(time.time() * 1000)
