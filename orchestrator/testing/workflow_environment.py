"""The in-process test environment: the real engine and worker on the in-memory adapter,
driven by a manual clock that skips time whenever nothing else can happen.

What runs is what runs in a deployment: :class:`~orchestrator.engine.orchestrator.Orchestrator`
decides every command with the application's decider and commits its events, timers and
tasks; :class:`~handlers.worker.Worker` runs each task through ``handlers.execution``
(input and output models, the ``@side_effect`` claim, failure classes, status queries).
Only the adapters differ: the in-memory broker for Kafka, dicts for the Redis records
(``memory_stores``), and a :class:`~orchestrator.records.clock.ManualClock` given to both
processes through their constructors. Nothing runs in the background: each call of the
environment steps the engine and the worker in the test's thread until no command, task
or due timer is left (*idle*), so a test reads a settled state and a failure's traceback
is the test's own.

Time moves only when told: :meth:`WorkflowEnvironment.sleep` advances the clock, firing
every timer on the way; waiting for a run's outcome (``RunHandle.result``) skips straight
to the next armed timer each time the environment is idle, so a 30-day approval that
expires ends in milliseconds.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from handlers.attempt_runner import AttemptRunner
from handlers.llm.llm_settings import LlmSettings, ProviderKind
from handlers.llm.providers import ScriptedProvider
from handlers.llm.runtime import LlmRuntime, LlmRuntimes
from handlers.worker import Worker
from orchestrator.application.app import KeelApp
from orchestrator.client.json_args import input_value
from orchestrator.config.settings import Settings
from orchestrator.domain.history.invariants import check_histories
from orchestrator.domain.model.errors import WorkflowIdConflictError
from orchestrator.domain.model.messages import Envelope, StartWorkflow
from orchestrator.domain.model.state import WorkflowState
from orchestrator.engine.orchestrator import Orchestrator
from orchestrator.engine.runtime_context import Topics
from orchestrator.io.memory import (
    MemoryBroker,
    MemoryCommandIntake,
    MemoryEventLog,
    MemoryGroupIntake,
    MemoryOutcomeSink,
)
from orchestrator.io.partitioning import partition_for
from orchestrator.payload_schemas.codec import codec_for
from orchestrator.records.clock import ManualClock
from orchestrator.records.envelopes import command_envelope
from orchestrator.testing.activity_stubs import (
    ActivityRef,
    FailurePlan,
    ScriptedFailure,
    activity_type_of,
    stubbed_app,
)
from orchestrator.testing.kit_errors import HistoryInvariantError, RunBlockedError
from orchestrator.testing.memory_stores import MemoryCallStore, MemoryEffectBook
from orchestrator.testing.run_handles import RunHandle
from orchestrator.testing.webhook_deliveries import WebhookDesk, WebhookReceipt
from orchestrator.trust.decision_proofs import DecisionProofs, load_proof_key, proof_matches
from orchestrator.trust.human_task_tokens import TaskTokens, load_task_tokens
from orchestrator.trust.sealing import SealKeySource

__all__ = ["DEFAULT_START", "WorkflowEnvironment"]

#: Where the manual clock starts unless told: a fixed instant keeps recorded times, and so
#: histories, the same on every run of a test.
DEFAULT_START = datetime(2030, 1, 1, tzinfo=UTC)
#: Engine and worker rounds before the environment gives up settling (a run that loops
#: without waiting: a bug in the definition, reported rather than hung on).
MAX_ROUNDS = 10_000
#: The test deployment's task-token key: tokens, and the proofs of decisions, are real.
_TEST_SECRET = "keel-test-kit-task-token-key-0123456789abcdef"


def _ms(when: datetime) -> int:
    if when.tzinfo is None:
        raise ValueError("start_time must be timezone-aware (e.g. datetime(..., tzinfo=UTC))")
    return int(when.timestamp() * 1000)


class WorkflowEnvironment:
    """The application ``app`` run in process, with ``activities`` stubbed (activity type
    or handler function -> a function taking the same input), from ``start_time``.

    A context manager: leaving it stops the engine and the worker and checks every history
    the environment recorded against Keel's invariants (``check_history``).
    ``webhook_secrets``: a source's secret (its ``secret_env`` otherwise, else one made up
    for the test). LLM steps answer from :meth:`script_llm`; the LLM runtime is per process,
    so one environment with LLM steps at a time.
    """

    def __init__(
        self,
        app: KeelApp,
        *,
        activities: Mapping[ActivityRef, Callable[..., Any]] | None = None,
        start_time: datetime = DEFAULT_START,
        partitions: int = 1,
        webhook_secrets: Mapping[str, str] | None = None,
    ) -> None:
        self._home = tempfile.TemporaryDirectory(prefix="keel-test-")
        self.clock = ManualClock(_ms(start_time))
        self.settings = Settings(
            topic_prefix="keel-test",
            partitions=partitions,
            home=Path(self._home.name),
            bootstrap_servers="127.0.0.1:1",  # never dialled: the adapters are in memory
            redis_url="redis://127.0.0.1:1/0",
            task_token_secret=SecretStr(_TEST_SECRET),
            task_token_secret_file=None,
            adapter_hooks="",  # no faults or tracing hooks from the environment
        )
        self.user_app = app
        self.failures = FailurePlan()
        self.app = stubbed_app(app, activities or {}, self.failures)
        self.codec = codec_for(self.settings)
        self.topics = Topics.for_prefix(self.settings.topic)
        self.broker = MemoryBroker(partitions)
        self.effects = MemoryEffectBook()
        self.llm_store = MemoryCallStore()
        self._llm: ScriptedProvider | None = None
        #: What the LLM steps of this environment call: the scripted model.
        self._llm_runtimes = LlmRuntimes(lambda: self._scripted_runtime())
        self.script_llm([])
        # one activity-attempt runner for the engine's local steps and the worker
        attempts = AttemptRunner(
            self.app,
            seal_keys=SealKeySource(self.settings),
            clock=self.clock,
            llm=self._llm_runtimes,
        )
        intake = MemoryCommandIntake(self.broker, self.topics.commands, "keel-test.orchestrator")
        self.orchestrator = Orchestrator(
            self.settings,
            self.app,
            adapters=(intake, MemoryEventLog(self.broker, "keel-test.orchestrator.kit", intake)),
            hard_exit_on_stall=False,
            clock=self.clock,
            codec=self.codec,
            local_effects=self.effects,
            attempts=attempts,
        )
        self._commands = intake
        self._tasks = MemoryGroupIntake(
            self.broker, self.topics.activity_tasks, "keel-test.workers"
        )
        self.worker = Worker(
            self.settings,
            self.app,
            adapters=(self._tasks, MemoryOutcomeSink(self.broker)),
            effects=self.effects,
            hard_exit_on_stall=False,
            clock=self.clock,
            codec=self.codec,
            attempts=attempts,
        )
        self.tokens: TaskTokens = load_task_tokens(self.settings, create=False)
        self.proofs = DecisionProofs.from_tokens(self.tokens)
        self.webhooks = WebhookDesk(self, dict(webhook_secrets or {}))
        self._decoded: dict[tuple[int, int], Envelope[Any]] = {}
        self._closed = False
        self.orchestrator.subscribe()
        self.worker.subscribe()
        self._step()  # both join their (in-memory) groups

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> WorkflowEnvironment:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close(check=exc_type is None)

    def close(self, *, check: bool = True) -> None:
        """Stop the engine (its final checkpoint) and the worker; with ``check``, first
        check every recorded history (``HistoryInvariantError``)."""
        if self._closed:
            return
        self._closed = True
        try:
            if check:
                self.check_history()
        finally:
            for process in (self.orchestrator, self.worker):
                process.stop()
                process.run()  # stopped already: it only closes its clients, as on SIGTERM
            self._home.cleanup()

    # ------------------------------------------------------------------ time
    def now(self) -> datetime:
        """The environment's time: the manual clock every decision records."""
        return datetime.fromtimestamp(self.clock.now_ms() / 1000, UTC)

    def sleep(self, duration: timedelta) -> None:
        """Let ``duration`` pass: every timer due on the way fires at its time, in order,
        and what it starts runs to idle before the clock moves on."""
        if duration < timedelta(0):
            raise ValueError(f"time does not go back ({duration})")
        until = self.clock.now_ms() + int(duration.total_seconds() * 1000)
        self.run_until_idle()
        while True:
            nxt = self.next_timer_at()
            if nxt is None or nxt > until:
                break
            self._advance_to(nxt)
            self.run_until_idle()
        self._advance_to(until)
        self.run_until_idle()

    def next_timer_at(self) -> int | None:
        """Epoch ms of the earliest timer a live run holds (None: no run waits on one)."""
        due = [
            fire_at for ps in self.orchestrator.partitions.values() for _, _, fire_at in ps.timers()
        ]
        return min(due) if due else None

    def skip_to_next_timer(self, limit_ms: int | None = None) -> bool:
        """Move the clock to the next armed timer (not past ``limit_ms``) and run to idle;
        False when there is none to move to."""
        nxt = self.next_timer_at()
        if nxt is None or (limit_ms is not None and nxt > limit_ms):
            return False
        self._advance_to(nxt)
        self.run_until_idle()
        return True

    def _advance_to(self, when_ms: int) -> None:
        ahead = when_ms - self.clock.now_ms()
        if ahead > 0:
            self.clock.advance_ms(ahead)

    # ------------------------------------------------------------------ driving
    def run_until_idle(self) -> None:
        """Step the engine and the worker until no command, task or due timer is left."""
        for _ in range(MAX_ROUNDS):
            if not self._has_work():
                return
            self._step()
        raise RunBlockedError(
            f"the environment did not settle within {MAX_ROUNDS} rounds of the engine and "
            "the worker: a run keeps scheduling work without waiting (a loop in its definition?)"
        )

    def _step(self) -> None:
        self.orchestrator.step()
        self.worker.step()

    def _has_work(self) -> bool:
        if _behind(self._commands, self.broker.log(self.topics.commands)):
            return True
        if _behind(self._tasks, self.broker.log(self.topics.activity_tasks)):
            return True
        due = self.orchestrator.timers.next_due_in_ms(self.clock.now_ms())
        return due is not None and due == 0

    # ------------------------------------------------------------------ commands
    def send(self, workflow_id: str, payload: Any, message_id: str | None = None) -> str:
        """Put one command on the commands topic as a client does; its message id."""
        mid = message_id or uuid.uuid4().hex
        env = command_envelope(
            mid, workflow_id, payload, self.clock.now_ms(), correlation_id=workflow_id
        )
        self.broker.produce(self.topics.commands, self.codec.encode(env), workflow_id.encode())
        return mid

    def start(
        self,
        workflow: str,
        input: Any,
        *,
        workflow_id: str | None = None,
        version: int | None = None,
    ) -> RunHandle:
        """Start a run of ``workflow`` (latest version unless ``version``) with ``input``
        (a model, a dict or JSON text), checked as the client checks it; runs it to idle.
        An id that has a run of the same workflow and input joins that run; of another
        workflow or input it is a :class:`WorkflowIdConflictError` (docs/workflows.md)."""
        value = input_value(input, f"input for {workflow}")
        definition = self.app.validate_start(workflow, version, value)
        wf = workflow_id or f"{definition.name}-{uuid.uuid4().hex[:12]}"
        text = json.dumps(value, separators=(",", ":"), sort_keys=True)
        existing = self.state(wf)
        if existing is not None:
            same_input = not existing.input_json or json.loads(existing.input_json) == value
            if existing.name == definition.name and same_input:
                return RunHandle(self, wf)  # a join: the run that holds the id
            raise WorkflowIdConflictError(
                wf,
                existing.run_id,
                existing.name,
                existing.version,
                str(existing.status),
                existing.started_at,
                "workflow" if existing.name != definition.name else "input",
                definition.name,
            )
        self.send(wf, StartWorkflow(definition.name, definition.version, text))
        self.run_until_idle()
        return RunHandle(self, wf)

    def handle(self, workflow_id: str) -> RunHandle:
        """The run of ``workflow_id`` (started by a webhook, a saga or a parent)."""
        return RunHandle(self, workflow_id)

    def deliver_webhook(
        self,
        source: str,
        body: bytes | Mapping[str, Any],
        headers: Mapping[str, str] | None = None,
    ) -> WebhookReceipt:
        """A delivery to webhook ``source`` as the connector takes it: its signature checked
        (the kit signs it under the ``keel`` scheme when ``headers`` is None), routed, a
        repeat of an event id answered as a duplicate; the command then runs to idle."""
        receipt = self.webhooks.deliver(source, body, headers)
        self.run_until_idle()
        return receipt

    def sign_webhook(self, source: str, body: bytes) -> dict[str, str]:
        """The headers a ``keel``-scheme sender puts on ``body`` (at the environment's now)."""
        return self.webhooks.sign(source, body)

    # ------------------------------------------------------------------ activities
    def fail(
        self,
        activity: ActivityRef,
        error: BaseException,
        *,
        times: int = 1,
        after_call: bool = False,
    ) -> None:
        """Make the next ``times`` calls of ``activity`` raise ``error`` (a
        ``TransientError``, ``PermanentError``, ``OutcomeUnknownError`` or any exception,
        classified as the worker classifies it); with ``after_call``, raised once the
        handler returned (the write happened and its answer was lost)."""
        if times < 1:
            raise ValueError("times must be at least 1")
        self.failures.add(
            activity_type_of(self.app, activity), ScriptedFailure(error, after_call), times
        )

    def calls(self, activity: ActivityRef) -> int:
        """How many times ``activity``'s handler (or stub) was called, failures included."""
        return self.failures.calls.get(activity_type_of(self.app, activity), 0)

    def script_llm(
        self, responses: list[dict[str, Any]], default: dict[str, Any] | None = None
    ) -> None:
        """What the model answers LLM steps from now on: the scripted provider's entries
        (``{"json": value}``, ``{"content": text}``, ``{"tool_calls": [...]}``, optionally
        ``"match"``, or ``{"status": 503}`` to play a failure; docs/llm-nodes.md)."""
        self._llm = ScriptedProvider({"responses": list(responses), "default": default})
        self._llm_runtimes.use(self._scripted_runtime())

    def _scripted_runtime(self) -> LlmRuntime:
        settings = LlmSettings(provider=ProviderKind.SCRIPTED, model="scripted")
        assert self._llm is not None
        return LlmRuntime(settings, self.llm_store, self._llm)

    @property
    def llm_calls(self) -> int:
        """Calls the scripted model answered (or refused) since the last :meth:`script_llm`."""
        return 0 if self._llm is None else self._llm.calls

    # ------------------------------------------------------------------ reading
    def state(self, workflow_id: str) -> WorkflowState | None:
        """The run's state as the engine holds it (None: no run has this id)."""
        ps = self.orchestrator.partitions.get(self._partition(workflow_id))
        return None if ps is None else ps.get(workflow_id)

    def events(self, workflow_id: str | None = None) -> list[Envelope[Any]]:
        """Recorded events (typed envelopes) of ``workflow_id``, or of every workflow,
        in log order."""
        log = self.broker.log(self.topics.events)
        parts = range(len(log)) if workflow_id is None else [self._partition(workflow_id)]
        out = []
        for p in parts:
            for rec in log[p]:
                env = self._decoded.get((p, rec.offset))
                if env is None:
                    env = self._decoded[(p, rec.offset)] = self.codec.decode(rec.value or b"")
                if workflow_id is None or env.workflow_id == workflow_id:
                    out.append(env)
        return out

    def dead_letters(self) -> list[Envelope[Any]]:
        """What the engine and the worker dead-lettered (``keel.dlq``)."""
        return [self.codec.decode(r.value or b"") for r in self.broker.records(self.topics.dlq)]

    def check_history(self) -> None:
        """Check every recorded history against Keel's invariants (``keel workflow verify``:
        sequence, run scope, activities, idempotency keys, decision proofs, timers...)."""
        key = load_proof_key(self.settings)
        violations = check_histories(
            self.events(), lambda wf, decided: proof_matches(key, wf, decided)
        )
        if violations:
            shown = "\n".join(f"  {v}" for v in violations[:20])
            raise HistoryInvariantError(
                f"{len(violations)} invariant violation(s) in the recorded histories:\n{shown}",
                list(violations),
            )

    def _partition(self, workflow_id: str) -> int:
        return partition_for(workflow_id.encode(), self.settings.partitions)


def _behind(intake: MemoryCommandIntake, log: list[list[Any]]) -> bool:
    """Whether ``intake`` has records of ``log`` it has not read (or not joined yet)."""
    if not intake.positions:
        return any(log)
    return any(pos < len(log[p]) for p, pos in intake.positions.items())
