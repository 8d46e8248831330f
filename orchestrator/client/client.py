"""The client side of Keel: publish commands, read the workflow read model.

Every check that can be made before writing is made here, so bad input writes
nothing to Kafka: an unknown workflow, input that fails its schema, a signal to a
finished workflow. The orchestrator checks again (it is the authority); these
checks exist so the operator gets a clear answer at once.
"""

from __future__ import annotations

import json
import uuid
import warnings
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from orchestrator.application.app import KeelApp
from orchestrator.client.awaiting import await_answer, send_and_await
from orchestrator.client.dead_letters import DeadLetters
from orchestrator.client.human_task_decisions import DEFAULT_WAIT_S, TaskDesk
from orchestrator.client.json_args import input_value, parse_json, payload_json
from orchestrator.client.migration_requests import Migrations
from orchestrator.client.query_answers import QueryAnswer, answer_query
from orchestrator.client.row_look import WATCHED_POLL_S, RowLook
from orchestrator.client.run_links import children_of, parent_of
from orchestrator.client.run_search import RunFilter, RunPage, counts_by_status, search_runs
from orchestrator.client.run_views import RunSummary, RunView
from orchestrator.client.schedule_client import ScheduleClient
from orchestrator.client.workflow_id_reuse import id_conflict, input_digest, read_recorded_start
from orchestrator.config.redaction import clip
from orchestrator.config.settings import Settings, redact
from orchestrator.domain.authoring.definitions import WorkflowDefinition
from orchestrator.domain.model.errors import (
    CommandRejected,
    InvalidInputError,
    NotFoundError,
    UnavailableError,
    WaitTimeoutError,
)
from orchestrator.domain.model.ids import check_workflow_id
from orchestrator.domain.model.messages import (
    CancelWorkflow,
    ResolveActivity,
    SignalWithStart,
    SignalWorkflow,
    StartWorkflow,
    TerminateWorkflow,
)
from orchestrator.domain.model.state import TERMINAL_STATUSES
from orchestrator.domain.model.vocabulary import WorkflowStatus
from orchestrator.io.kafka.clients import ClientProducer, plain_producer
from orchestrator.io.redis.human_task_inbox import TasksView
from orchestrator.io.redis.read_model import Projection
from orchestrator.io.redis.row_watch import RowWatch
from orchestrator.payload_schemas.codec import Codec, codec_for
from orchestrator.records.clock import SYSTEM_CLOCK, Clock
from orchestrator.records.envelopes import command_envelope
from orchestrator.telemetry import tracing
from orchestrator.trust.sealing import SealKeys, load_seal_keys, sensitive_paths


@dataclass
class StartResult:
    """The run a start ended in: ``existed`` when the id already had a run of the same
    workflow and input (it is kept, and this start joined it)."""

    workflow_id: str
    run_id: str
    existed: bool
    confirmed: bool = True


#: A keyword not given (``None`` is a value some callers mean).
_UNSET: Any = object()


def _renamed(value: Any, old_value: Any, method: str, old: str, new: str) -> Any:
    """The value of a parameter given by its name or, with a ``DeprecationWarning``, by
    the name it had before; a ``TypeError`` as Python's when both or neither is given."""
    if old_value is _UNSET:
        if value is _UNSET:
            raise TypeError(f"{method}() missing 1 required argument: '{new}'")
        return value
    if value is not _UNSET:
        raise TypeError(f"{method}() got '{new}' and its old name '{old}'; give '{new}' only")
    warnings.warn(
        f"{method}({old}=...) is deprecated: use {method}({new}=...)",
        DeprecationWarning,
        stacklevel=3,
    )
    return old_value


class KeelClient:
    def __init__(
        self,
        settings: Settings,
        app: KeelApp,
        clock: Clock = SYSTEM_CLOCK,
        codec: Codec | None = None,
    ) -> None:
        self.settings = settings
        self.app = app
        #: Commands' recorded times and the deadlines of every wait for an answer.
        self.clock = clock
        self.codec = codec or codec_for(settings)
        self.projection = Projection.from_url(settings.redis, settings.topic_prefix)
        self._producer: ClientProducer | None = None
        self._bulk_producer: ClientProducer | None = None
        self._errors: list[str] = []
        self._tracer = tracing.tracer()
        self._seal_keys: SealKeys | None = None
        #: The row changes the projector announces (``start`` and ``wait`` listen there).
        self.watch = RowWatch(self.projection)
        #: The row the last confirmed start read, so a ``wait`` right after needs no read.
        self._last_row: tuple[str, dict[str, Any]] | None = None

    def human_tasks(self, wait_s: float = DEFAULT_WAIT_S) -> TaskDesk:
        """Human tasks found by token or id and decided for an actor, each decision signed
        with the deployment's key and answered within ``wait_s`` (docs/human-tasks.md;
        what ``keel human-tasks decide`` and the connector use)."""
        view = TasksView(self.projection.r, self.settings.topic_prefix)
        return TaskDesk(self.settings, view, self.send_as, wait_s=wait_s, codec=self.codec)

    @property
    def migrations(self) -> Migrations:
        """Moving live runs to another version: ``select``, a dry-run ``plan``, ``send``
        (docs/versioning.md, "Migrate")."""
        return Migrations(self)

    @property
    def dead_letters(self) -> DeadLetters:
        """The deployment's dead letters: listed, redriven, discarded (docs/activities.md,
        "Dead letters"); they share this client's settings and codec."""
        return DeadLetters(self.settings, self.codec)

    @property
    def seal_keys(self) -> SealKeys:
        """The sealing keys, loaded on first need (docs/secrets.md)."""
        if self._seal_keys is None:
            self._seal_keys = load_seal_keys(self.settings, create=True)
        return self._seal_keys

    def sealed_input(self, model: Any, input_obj: Any) -> Any:
        """``input_obj`` with every sensitive field of ``model`` sealed (unchanged if none).

        Called after validation and before anything is produced, so no command, event,
        task or read-model row ever holds the clear value.
        """
        if not sensitive_paths(model):
            return input_obj
        if isinstance(input_obj, BaseModel):
            input_obj = input_obj.model_dump(mode="json")
        elif isinstance(input_obj, str | bytes):
            text = input_obj.decode("utf-8") if isinstance(input_obj, bytes) else input_obj
            input_obj = parse_json(text, "input")
        return self.seal_keys.seal_fields(model, input_obj)

    @property
    def producer(self) -> ClientProducer:
        if self._producer is None:
            # No linger: a command is sent the moment it is produced, so what the caller
            # does until the flush (e.g. subscribing on Redis) overlaps Kafka's round trip.
            self._producer = plain_producer(self.settings, **{"linger.ms": 0})
        return self._producer

    @property
    def bulk_producer(self) -> ClientProducer:
        """``start_many``'s producer: it lingers, so a batch goes out in a few requests.

        One request per few commands (what no linger gives a loop of produces) costs the
        broker a produce and wakes the orchestrator's fetch each time; the flush that
        ends every batch sends what lingers at once (docs/performance.md).
        """
        if self._bulk_producer is None:
            self._bulk_producer = plain_producer(
                self.settings, **{"linger.ms": self.settings.batched_linger_ms}
            )
        return self._bulk_producer

    def send(self, workflow_id: str, payload: Any) -> str:
        """Publish one command as is (operator commands; the orchestrator validates it)."""
        return self._send(workflow_id, payload)

    def send_as(self, workflow_id: str, payload: Any, message_id: str) -> str:
        """Publish one command under ``message_id`` and wait for Kafka's acknowledgement.

        A deterministic id makes a repeat of the same request one command: the
        orchestrator ignores a message id it has seen (e.g. a human-task decision).
        """
        return self._send(workflow_id, payload, message_id=message_id)

    def _send(
        self,
        workflow_id: str,
        payload: Any,
        flush: bool = True,
        message_id: str | None = None,
        producer: ClientProducer | None = None,
    ) -> str:
        if producer is None:  # not "or": a producer with an empty queue is falsy (len 0)
            producer = self.producer
        mid = message_id or uuid.uuid4().hex
        with self._tracer.start_as_current_span(f"keel.client {type(payload).__name__}"):
            traceparent = tracing.current_traceparent()
            env = command_envelope(
                mid,
                workflow_id,
                payload,
                self.clock.now_ms(),
                correlation_id=workflow_id,
                traceparent=traceparent,
            )
            headers: list[tuple[str, str | bytes | None]] | None = (
                [("traceparent", traceparent.encode())] if traceparent else None
            )
            while True:
                try:
                    producer.produce(
                        self.settings.topic("commands"),
                        key=workflow_id.encode(),
                        value=self.codec.encode(env),
                        headers=headers,
                        on_delivery=self._on_delivery,
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
        if flush:
            self._flush(producer)
        return mid

    def _on_delivery(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self._errors.append(str(err))

    def _flush(self, producer: ClientProducer | None = None) -> None:
        """Return only once Kafka acknowledged every command sent so far."""
        if producer is None:
            producer = self.producer
        if producer.flush(self.settings.admin_timeout_s) != 0:
            raise UnavailableError(
                f"Kafka at {redact(self.settings.kafka_servers)} did not acknowledge the "
                f"command within {self.settings.admin_timeout_s:g}s"
            )
        if self._errors:
            first, self._errors = self._errors[0], []
            raise UnavailableError(redact(f"Kafka refused the command: {first}"))

    # ------------------------------------------------------------------ commands
    def start(
        self,
        name: str,
        input: Any = _UNSET,
        workflow_id: str | None = None,
        version: int | None = None,
        confirm_timeout_s: float | None = 60.0,
        *,
        input_obj: Any = _UNSET,
    ) -> StartResult:
        """Start ``name`` with ``input``; an id that already has a run keeps it and no new
        run is recorded (``input_obj=``, its old name, still works with a warning).

        The orchestrator makes the StartWorkflow command's message id the run id of a new
        run and ignores a start for an id it knows, so after sending, the client waits (up
        to ``confirm_timeout_s``) until the read model shows the workflow: the run id it
        holds is the true run, and it is new exactly when it is this command's id. When it
        is another's, the recorded start must be of ``name`` with the same input (a join,
        ``existed=True``), else :class:`WorkflowIdConflictError` names that run
        (``workflow_id_reuse.py``; docs/workflows.md, "Reusing a workflow id").

        The command goes out first; the subscription to the row's changes is asked for
        while Kafka acknowledges it, and the row is read only once the subscription is
        active, so the projector's announcement of the new row wakes the client
        (``row_watch.py``) and nothing sits between the call and the send but validation.
        ``confirm_timeout_s=None`` returns at once with ``confirmed=False``: the read model
        is then looked at before sending, and the run id is this command's id unless it
        already showed the workflow (then joined or refused as above, nothing sent).
        """
        input_obj = _renamed(input, input_obj, "start", "input_obj", "input")
        wf = check_workflow_id(workflow_id) if workflow_id is not None else None
        definition, value, input_json = self._start_input(name, version, input_obj)
        wf = wf or f"{name}-{uuid.uuid4().hex[:12]}"
        command = StartWorkflow(definition.name, definition.version, input_json)
        if confirm_timeout_s is None:
            existing = self.projection.get(wf)
            if existing is not None:
                self._join(wf, definition.name, value)
                return StartResult(wf, existing["run_id"], existed=True)
            return StartResult(wf, self._send(wf, command), existed=False, confirmed=False)

        def send() -> str:
            mid = self._send(wf, command, flush=False)
            watching = self.watch.begin(wf)  # on Redis while Kafka acknowledges the command
            self._flush()
            if watching:
                self.watch.confirm(self.settings.admin_timeout_s)
            return mid

        # The row is read first (once the subscription is active, so a row created after
        # that read is announced), then on each announcement or every 50 ms.
        look = RowLook(self.projection, self.watch, wf, None, WATCHED_POLL_S)
        mid, row = send_and_await(
            send, lambda _: look.answer(), look.pause, confirm_timeout_s, self.clock.monotonic
        )
        if row is None:
            raise UnavailableError(
                f"start of '{wf}' was sent (command {mid}) but the read model did not show "
                f"the workflow within {confirm_timeout_s:g}s; is an orchestrator running? "
                f"`keel workflow show {wf}` tells when it does"
            )
        self._last_row = (wf, row)
        run_id = str(row["run_id"])
        if run_id != mid:
            run_id = self._join(wf, definition.name, value)
        return StartResult(wf, run_id, existed=run_id != mid)

    def _start_input(
        self, name: str, version: int | None, input_obj: Any
    ) -> tuple[WorkflowDefinition, Any, str]:
        """The definition a start names, its checked input value, and the JSON sent
        (sensitive fields sealed)."""
        value = input_value(input_obj, f"input for {self.app.get(name, version).label}")
        definition = self.app.validate_start(name, version, value)
        sealed = self.sealed_input(definition.input_model, value)
        return definition, value, json.dumps(sealed, separators=(",", ":"), sort_keys=True)

    def _join(self, workflow_id: str, name: str, value: Any) -> str:
        """The run id of ``workflow_id`` when its recorded start is one of ``name`` with
        this input (a join); else :class:`WorkflowIdConflictError` naming the run
        (docs/workflows.md, "Reusing a workflow id")."""
        recorded = await_answer(
            lambda: read_recorded_start(self.projection, workflow_id),
            lambda left: self.clock.sleep(min(left, WATCHED_POLL_S)),
            self.settings.admin_timeout_s,
            self.clock.monotonic,
        )
        if recorded is None:  # the row went (a rebuild clears it): say so
            raise UnavailableError(
                f"workflow '{workflow_id}' has a run, but the read model did not show how "
                "it started; is a rebuild running? `keel projections status` tells"
            )
        conflict = id_conflict(recorded, name, input_digest(value, self._opened), self._opened)
        if conflict is not None:
            raise conflict
        return str(recorded.row["run_id"])

    def _opened(self, value: Any) -> Any:
        """``value`` with every sealed value opened with this deployment's keys."""
        return self.seal_keys.unseal_tree(value)

    def start_many(self, name: str, runs: list[tuple[str, Any]]) -> list[str]:
        """Start many workflows ``(workflow_id, input)`` with one flush (tests, benchmarks).

        Each id and input is validated first, so a bad one writes nothing at all; an id
        twice with different inputs is refused the same way. Nothing is confirmed: an id
        that already has a run is left to the orchestrator, which keeps that run and writes
        nothing (``start`` tells a join from a conflict; docs/workflows.md, "Reusing a
        workflow id"). Returns the command ids, each the run id of the run it starts.
        """
        definition = self.app.latest(name)
        values: list[tuple[str, Any]] = []
        first: dict[str, Any] = {}
        for wf, input_obj in runs:
            check_workflow_id(wf)
            value = input_value(input_obj, f"input for {definition.label}")
            self.app.validate_start(name, definition.version, value)
            if wf in first and self._digest(first[wf]) != self._digest(value):
                raise InvalidInputError(
                    f"workflow '{wf}' is given twice with different inputs; start refused"
                )
            first.setdefault(wf, value)
            values.append((wf, value))
        ids = []
        for wf, value in values:
            sealed = self.sealed_input(definition.input_model, value)
            payload = StartWorkflow(definition.name, definition.version, json.dumps(sealed))
            ids.append(self._send(wf, payload, flush=False, producer=self.bulk_producer))
        self._flush(self.bulk_producer)
        return ids

    def _digest(self, value: Any) -> str:
        return input_digest(value, self._opened)

    def _require_running(self, workflow_id: str, what: str) -> dict[str, Any]:
        check_workflow_id(workflow_id)
        found = self.projection.get(workflow_id)
        if found is None:
            raise NotFoundError(f"workflow '{clip(workflow_id)}' does not exist; {what} refused")
        if found["status"] in TERMINAL_STATUSES:
            raise CommandRejected(f"workflow '{workflow_id}' is {found['status']}; {what} refused")
        return found

    def signal(
        self, workflow_id: str, name: str, payload: Any, sensitive: tuple[str, ...] = ()
    ) -> str:
        """Send signal ``name``; the top-level fields named in ``sensitive`` are sealed.

        ``payload`` is a JSON value (``bytes``: JSON text), checked by :func:`payload_json`
        before anything else.
        """
        what = f"payload of signal '{name}'"
        if isinstance(payload, bytes):
            payload = parse_json(payload, what)
        text = payload_json(payload, what)
        found = self._require_running(workflow_id, f"signal '{name}'")
        _check_signal(self.app.get(found["name"], found["version"]), name)
        if sensitive:
            if not isinstance(payload, dict):
                raise InvalidInputError(
                    f"signal '{name}': sensitive fields need a JSON object payload; signal refused"
                )
            missing = sorted(set(sensitive) - set(payload))
            if missing:
                raise InvalidInputError(
                    f"signal '{name}': the payload has no field {', '.join(missing)} to "
                    "seal; signal refused"
                )
            payload = {
                k: self.seal_keys.seal(v) if k in sensitive else v for k, v in payload.items()
            }
            text = json.dumps(payload)
        return self._send(workflow_id, SignalWorkflow(name, text))

    def signal_with_start(
        self,
        workflow_id: str,
        name: Any = _UNSET,
        payload: Any = _UNSET,
        workflow: Any = _UNSET,
        input: Any = _UNSET,
        version: int | None = None,
        *,
        signal: Any = _UNSET,
        input_obj: Any = _UNSET,
    ) -> str:
        """Deliver signal ``name`` to ``workflow_id``, first starting a run of ``workflow``
        with ``input`` when the workflow has none, as one command (docs/workflows.md,
        "Signal-with-start"); its message id is returned (the run's id, if it starts one).

        ``name`` is the signal's, as in :meth:`signal`. The old keywords still work with a
        warning: ``signal=`` for the signal and then ``name=`` for the workflow, and
        ``input_obj=``.
        """
        if signal is not _UNSET:  # the old keywords: signal=SIGNAL, name=WORKFLOW
            if workflow is _UNSET:
                workflow, name = name, _UNSET
            name = _renamed(name, signal, "signal_with_start", "signal", "name")
        input_obj = _renamed(input, input_obj, "signal_with_start", "input_obj", "input")
        for value, what in ((name, "name"), (payload, "payload"), (workflow, "workflow")):
            if value is _UNSET:
                raise TypeError(f"signal_with_start() missing 1 required argument: '{what}'")
        wf = check_workflow_id(workflow_id)
        definition, _, input_json = self._start_input(workflow, version, input_obj)
        _check_signal(definition, name)
        what = f"payload of signal '{name}'"
        text = payload_json(
            parse_json(payload, what) if isinstance(payload, bytes) else payload, what
        )
        command = SignalWithStart(definition.name, input_json, name, text, definition.version)
        return self._send(wf, command)

    def cancel(self, workflow_id: str, reason: str = "cancelled by operator") -> str:
        self._require_running(workflow_id, "cancel")
        return self._send(workflow_id, CancelWorkflow(reason))

    def terminate(self, workflow_id: str, reason: str = "terminated by operator") -> str:
        """Stop a run at once, compensating nothing (docs/workflows.md, "Cancel and terminate")."""
        self._require_running(workflow_id, "terminate")
        return self._send(workflow_id, TerminateWorkflow(reason))

    def resolve(
        self, workflow_id: str, activity_id: str, resolution: str, result: Any, reason: str
    ) -> str:
        """Settle an activity whose outcome stayed unknown (``needs_attention``)."""
        check_workflow_id(workflow_id)
        found = self.projection.get(workflow_id)
        if found is None:
            raise NotFoundError(f"workflow '{clip(workflow_id)}' does not exist; resolve refused")
        if found["status"] != "needs_attention":
            raise CommandRejected(
                f"workflow '{workflow_id}' is {found['status']}, not needs_attention; "
                "resolve refused"
            )
        result_json = payload_json(result, f"result of the resolution of '{activity_id}'")
        payload = ResolveActivity(activity_id, resolution, result_json, reason)
        return self._send(workflow_id, payload)

    # ------------------------------------------------------------------ reads
    def show(self, workflow_id: str) -> RunView:
        """The run with its history, human tasks, LLM usage, parent and children."""
        found = self.projection.get(workflow_id)
        if found is None:
            raise NotFoundError(f"workflow '{clip(workflow_id)}' does not exist")
        history = self.projection.history(workflow_id)
        return RunView(
            workflow_id=workflow_id,
            name=found["name"],
            version=found["version"],
            status=WorkflowStatus(found["status"]),
            state=found["state"],
            output=found["output"],
            failure_reason=found["failure_reason"],
            run_id=found["run_id"],
            projection_error=found["projection_error"],
            attention_reason=found["attention_reason"],
            continued_as_new=found["run_base_seq"] > 0,
            human_tasks=found["human_tasks"],
            history=history,
            llm=self.projection.llm_usage(workflow_id),
            parent=parent_of(history),
            children=children_of(history, self.projection.statuses),
        )

    def list_runs(self, run_filter: RunFilter | None = None) -> RunPage:
        """A page of the runs ``run_filter`` finds (``run_search.py`` is the contract)."""
        return search_runs(self.projection, self.app.definitions, run_filter or RunFilter())

    def counts_by_status(self) -> dict[str, int]:
        """How many runs are in each status now."""
        return counts_by_status(self.projection)

    @property
    def schedules(self) -> ScheduleClient:
        """The schedules of this topic prefix (docs/schedules.md)."""
        return ScheduleClient(self)

    def query(self, workflow_id: str, name: str, args: Any = None) -> QueryAnswer:
        """Answer query ``name`` of run ``workflow_id`` (``args``: a JSON value or a model)
        from the state the read model holds; writes nothing (``query_answers.py``)."""
        return answer_query(self.projection, self.app, workflow_id, name, args)

    def wait(
        self,
        workflow_id: str,
        timeout_s: float,
        poll_s: float = 0.005,
        stop_on_attention: bool = False,
    ) -> RunSummary:
        """Block until the workflow ends; its row then, or :class:`WaitTimeoutError` after
        ``timeout_s`` (the run goes on).

        With ``stop_on_attention`` it also returns when the run needs an operator. It
        reads the row after subscribing to its changes (``row_watch.py``), then takes each
        announced change and reads at least every ``max(poll_s, 50 ms)``; without
        announcements it polls, every 2 ms at first, then backing off to ``poll_s``
        (``row_look.py``).
        """
        stops = TERMINAL_STATUSES | ({"needs_attention"} if stop_on_attention else set())
        last, self._last_row = self._last_row, None
        if last is not None and last[0] != workflow_id:
            last = None
        if last is not None and last[1]["status"] in stops:
            return RunSummary.from_row(last[1])  # the start that confirmed it read it over
        watch = self.watch
        if not watch.watching(workflow_id):
            last = None  # seen before this subscription: changes since may be unannounced
            found = self.projection.get(workflow_id)
            if found is not None and found["status"] in stops:
                return RunSummary.from_row(found)  # already over: no subscription needed
            if watch.begin(workflow_id):
                watch.confirm(min(timeout_s, self.settings.admin_timeout_s))
        # A row seen since the subscription became active (by the start) need not be read
        # again: each later change is announced.
        seen = last[1] if last is not None else None
        look = RowLook(self.projection, watch, workflow_id, stops, poll_s, seen)
        try:
            row = await_answer(look.answer, look.pause, timeout_s, self.clock.monotonic)
        finally:
            watch.end()
        if row is None:
            status = look.last["status"] if look.last else "not started yet"
            raise WaitTimeoutError(
                f"workflow '{workflow_id}' did not finish within {timeout_s:g}s (status: {status})"
            )
        return RunSummary.from_row(row)

    def close(self) -> None:
        self.watch.close()
        for producer in (self._producer, self._bulk_producer):
            if producer is not None:
                producer.flush(5)


def _check_signal(definition: WorkflowDefinition, name: str) -> None:
    """Refuse a signal the definition never waits for, naming the ones it does."""
    if name not in definition.signal_names:
        known = ", ".join(f"'{n}'" for n in sorted(definition.signal_names)) or "none"
        raise InvalidInputError(
            f"{definition.label} has no signal '{name}' (known: {known}); signal refused"
        )
