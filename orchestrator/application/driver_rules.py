"""A driver: the outside world a waiting run needs, written as rules (docs/evaluation.md,
"A workflow that waits").

A run that waits for a signal, a webhook or a person cannot end on its own, so a tool
that runs many of them (``keel evaluate --app ... --driver M:D``) must answer for the
people and systems around it. A :class:`Driver` holds those answers as rules, in order:
when a run waits, the first rule whose kind, name and filters match, and whose ``when``
holds for the run, answers it. Each rule reads the run as the workflow's own functions
do, through its :class:`~orchestrator.domain.authoring.run_context.Context`, so a payload
or a decision can depend on the input, the results so far and the signals received::

    driver = Driver()
    driver.human_task("approve_order", lambda ctx: "approve" if ctx.input_dict["total"] < 500
                      else "reject")
    driver.signal("shipped", {"carrier": "DHL"})
    driver.webhook("payment_settled", source="payments",
                   body=lambda ctx: {"id": f"evt-{ctx.workflow_id}", "order": ctx.workflow_id})
    driver.llm(match="Classify", json={"label": "ok"})

This module is pure: it says *what* answers a wait (:meth:`Driver.answer`); the tool
that runs the batch does the sending, through Keel's real paths (a signal command, the
connector's signed webhook path, a signed human-task decision, the scripted LLM provider).
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from orchestrator.domain.authoring.run_context import Context
from orchestrator.domain.authoring.waits import HumanTask
from orchestrator.domain.model.errors import InvalidInputError
from orchestrator.domain.model.state import WorkflowState
from orchestrator.domain.model.vocabulary import (
    HumanDecision,
    HumanTaskStatus,
    HumanTimer,
    PurposeKind,
    TimerPurpose,
    WaitKind,
    WorkflowStatus,
)

if TYPE_CHECKING:
    from orchestrator.application.app import KeelApp

__all__ = [
    "ActionKind",
    "Driver",
    "LlmAnswer",
    "SignalRule",
    "TaskRule",
    "Waiting",
    "WebhookRule",
    "load_driver",
    "unanswered_message",
    "waiting_of",
]

#: A value given as is, or computed from the waiting run's context.
Computed = Any
#: Where the docs explain the rules (named in every error about them).
DOCS = 'docs/evaluation.md, "A workflow that waits"'


class ActionKind(StrEnum):
    """What a driver did to answer a wait (the report counts each)."""

    SIGNAL = "signal"
    WEBHOOK = "webhook"
    HUMAN_TASK = "human_task"


@dataclass(frozen=True)
class Waiting:
    """What a waiting run waits for: a signal (``kind`` SIGNAL, ``waits_for`` its name) or
    a person (HUMAN, the task's name), in ``state`` on its ``visit``-th entry of it."""

    workflow_id: str
    run_id: str
    workflow: str
    version: int
    state: str
    visit: int
    kind: WaitKind
    waits_for: str
    correlation: str | None = None
    task_id: str | None = None
    roles: tuple[str, ...] = ()
    #: When the run's own timers end the wait undriven (a signal's timeout, a task's
    #: expiry), epoch ms; None: only an answer ends it.
    ends_alone_at: int | None = None

    @property
    def key(self) -> tuple[str, str, str, int]:
        """One wait: answered once, however often it is seen."""
        return (self.workflow_id, self.run_id, self.state, self.visit)

    @property
    def what(self) -> str:
        noun = "human task" if self.kind is WaitKind.HUMAN else "signal"
        return f"{noun} '{self.waits_for}'"


def waiting_of(state: WorkflowState) -> Waiting | None:
    """What ``state``'s run waits for now, or None (running, ended, asleep on a timer, or
    its wait already satisfied)."""
    w = state.wait
    if state.status != WorkflowStatus.WAITING or w is None or w.satisfied:
        return None
    if w.kind is WaitKind.SIGNAL and w.signal_name:
        ends = _deadline(state, lambda p: p.kind is PurposeKind.SIGNAL_TIMEOUT)
        return _waiting(state, WaitKind.SIGNAL, w.signal_name, ends, correlation=w.correlation)
    task = state.open_human_task()
    if w.kind is WaitKind.HUMAN and task is not None and task.status is HumanTaskStatus.OPEN:
        ends = _deadline(state, lambda p: p.human is HumanTimer.EXPIRE)
        return _waiting(
            state, WaitKind.HUMAN, task.task_name, ends, task_id=task.task_id, roles=task.roles
        )
    return None


def _waiting(
    state: WorkflowState, kind: WaitKind, name: str, ends: int | None, **extra: Any
) -> Waiting:
    return Waiting(
        state.workflow_id,
        state.run_id,
        state.name,
        state.version,
        state.current_state or "",
        state.visit,
        kind,
        name,
        ends_alone_at=ends,
        **extra,
    )


def _deadline(state: WorkflowState, ends: Callable[[TimerPurpose], bool]) -> int | None:
    times = [t.fire_at for t in state.timers.values() if ends(TimerPurpose.parse(t.purpose))]
    return min(times) if times else None


@dataclass(frozen=True)
class _Rule:
    """What every rule filters on: the workflow and state (None: any) and ``when``."""

    name: str
    workflow: str | None
    state: str | None
    when: Callable[[Context], bool] | None

    def matches(self, waiting: Waiting, ctx: Context) -> bool:
        return (
            self.name == waiting.waits_for
            and self.workflow in (None, waiting.workflow)
            and self.state in (None, waiting.state)
            and (self.when is None or bool(self.when(ctx)))
        )


@dataclass(frozen=True)
class SignalRule(_Rule):
    """Send signal ``name`` with ``payload`` (a JSON value, or a function of the run's
    context) to a run waiting for it."""

    payload: Computed = None

    def payload_of(self, ctx: Context) -> Any:
        return _computed(self.payload, ctx)


@dataclass(frozen=True)
class WebhookRule(_Rule):
    """Answer a run waiting for signal ``name`` with a delivery of webhook ``source``:
    ``body`` (a JSON object, or a function of the context) is signed with the source's
    scheme and posted to the connector, whose route turns it into the signal. Under the
    schemes that carry the event id and type in headers (``standard-webhooks``, ``github``)
    ``event_id`` and ``event_type`` give them. ``source`` None: the app declares no
    webhook source, and the body is delivered as the signal's payload."""

    source: str | None
    body: Computed
    event_id: Callable[[Context], str] | None = None
    event_type: str = ""

    def body_of(self, ctx: Context) -> Any:
        return _computed(self.body, ctx)


@dataclass(frozen=True)
class TaskRule(_Rule):
    """Decide human task ``name`` as ``actor`` (holding the task's roles): ``decision``
    (approve or reject, or a function of the context giving one), with ``correction``
    (a correction task's data) and ``reason``. It goes through the real decision path:
    signed, checked by the orchestrator against the operation's digest."""

    decision: HumanDecision | str | Callable[[Context], HumanDecision | str]
    correction: Computed = None
    actor: str = "keel-evaluate"
    reason: str = "decided by the evaluation's driver"

    def decision_of(self, ctx: Context) -> HumanDecision:
        value = _computed(self.decision, ctx)
        try:
            return HumanDecision(value)
        except ValueError:
            raise InvalidInputError(
                f"the driver's rule for human task '{self.name}' decided {value!r}; "
                "a decision is 'approve' or 'reject'"
            ) from None

    def correction_of(self, ctx: Context) -> Any:
        return _computed(self.correction, ctx)


Rule = SignalRule | WebhookRule | TaskRule


@dataclass(frozen=True)
class LlmAnswer:
    """One answer of the scripted model (docs/llm-nodes.md): to every request whose
    messages contain ``match`` (None: any request no other answer matches), ``json`` or
    ``content`` or ``tool_calls``. Unlike a script's own entries, it answers every
    matching call, not only the first: a batch runs many runs of one prompt."""

    match: str | None = None
    json: Any = None
    content: str | None = None
    tool_calls: Sequence[dict[str, Any]] = ()
    prompt_tokens: int = 10
    completion_tokens: int = 10

    def entry(self) -> dict[str, Any]:
        """The scripted provider's entry (``keep``: not used up by one call)."""
        out: dict[str, Any] = {"keep": True, "prompt_tokens": self.prompt_tokens}
        out["completion_tokens"] = self.completion_tokens
        if self.match is not None:
            out["match"] = self.match
        if self.json is not None:
            out["json"] = self.json
        if self.content is not None:
            out["content"] = self.content
        if self.tool_calls:
            out["tool_calls"] = list(self.tool_calls)
        return out


class Driver:
    """The rules that answer waiting runs, first match wins (module doc)."""

    def __init__(self, name: str = "driver") -> None:
        self.name = name
        self.rules: list[Rule] = []
        self.llm_answers: list[LlmAnswer] = []

    def signal(
        self,
        name: str,
        payload: Computed = None,
        *,
        workflow: str | None = None,
        state: str | None = None,
        when: Callable[[Context], bool] | None = None,
    ) -> SignalRule:
        """Answer a wait for signal ``name`` by sending it with ``payload``."""
        return self._add(SignalRule(name, workflow, state, when, payload))

    def webhook(
        self,
        name: str,
        *,
        source: str | None,
        body: Computed,
        event_id: Callable[[Context], str] | None = None,
        event_type: str = "",
        workflow: str | None = None,
        state: str | None = None,
        when: Callable[[Context], bool] | None = None,
    ) -> WebhookRule:
        """Answer a wait for signal ``name`` with a signed delivery of ``source``."""
        rule = WebhookRule(name, workflow, state, when, source, body, event_id, event_type)
        return self._add(rule)

    def human_task(
        self,
        name: str,
        decision: HumanDecision | str | Callable[[Context], HumanDecision | str],
        *,
        correction: Computed = None,
        actor: str = "keel-evaluate",
        reason: str = "decided by the evaluation's driver",
        workflow: str | None = None,
        state: str | None = None,
        when: Callable[[Context], bool] | None = None,
    ) -> TaskRule:
        """Decide human task ``name``: ``decision`` is approve or reject (or computes one)."""
        if not callable(decision) and decision not in set(HumanDecision):
            raise InvalidInputError(  # a typo is refused here, not mid-batch
                f"human task '{name}': a decision is 'approve' or 'reject', not {decision!r}"
            )
        rule = TaskRule(name, workflow, state, when, decision, correction, actor, reason)
        return self._add(rule)

    def llm(
        self,
        match: str | None = None,
        *,
        json: Any = None,
        content: str | None = None,
        tool_calls: Sequence[dict[str, Any]] = (),
    ) -> LlmAnswer:
        """Play the model: answer each request containing ``match`` (module doc)."""
        if (json is None) == (content is None) and not tool_calls:
            raise InvalidInputError("an LLM answer gives one of json=, content= or tool_calls=")
        answer = LlmAnswer(match, json, content, tuple(tool_calls))
        self.llm_answers.append(answer)
        return answer

    def _add(self, rule: Any) -> Any:
        self.rules.append(rule)
        return rule

    def answer(self, waiting: Waiting, ctx: Context) -> Rule | None:
        """The first rule that answers ``waiting`` (``ctx``: its run's context), or None."""
        wanted = TaskRule if waiting.kind is WaitKind.HUMAN else (SignalRule, WebhookRule)
        for rule in self.rules:
            if isinstance(rule, wanted) and rule.matches(waiting, ctx):
                return rule
        return None

    def llm_script(self) -> dict[str, Any]:
        """The scripted provider's file: the answers that match, then the default."""
        entries = [a.entry() for a in self.llm_answers if a.match is not None]
        default = next((a.entry() for a in self.llm_answers if a.match is None), None)
        return {"responses": entries, "default": default}

    def check(self, app: KeelApp, workflow: str) -> None:
        """Refuse, before any run starts, a rule that can never answer ``workflow`` of
        ``app``: an unknown signal or human task, a webhook source the app does not
        declare."""
        definitions = [d for (n, _), d in app.definitions.items() if n == workflow]
        signals = {s for d in definitions for s in d.signal_names}
        tasks = {
            st.wait.name
            for d in definitions
            for st in d.states.values()
            if isinstance(st.wait, HumanTask)
        }
        problems = []
        for rule in self.rules:
            if rule.workflow not in (None, workflow):
                continue
            task = isinstance(rule, TaskRule)
            known, noun = (tasks, "human task") if task else (signals, "signal")
            if rule.name not in known:
                have = ", ".join(sorted(known)) or "none"
                problems.append(f"{workflow} waits for no {noun} '{rule.name}' ({noun}s: {have})")
            source = rule.source if isinstance(rule, WebhookRule) else None
            if source is not None and source not in app.webhooks:
                have = ", ".join(sorted(app.webhooks)) or "none"
                problems.append(
                    f"the application declares no webhook source '{source}' (sources: {have})"
                )
        if problems:
            raise InvalidInputError(f"driver '{self.name}': {'; '.join(problems)} ({DOCS})")


def _computed(value: Any, ctx: Context) -> Any:
    return value(ctx) if callable(value) else value


def unanswered_message(waiting: Sequence[Waiting], driver: str | None) -> str:
    """The error of runs that wait with no rule to answer them (``driver``: its
    ``--driver`` spec; None: none was given), naming each run, state and wait."""
    parts = []
    for w in waiting[:3]:
        head = f"run '{w.workflow_id}' ({w.workflow} v{w.version}) waits in state '{w.state}'"
        parts.append(f"{head} for {w.what}")
    more = f" (and {len(waiting) - 3} more)" if len(waiting) > 3 else ""
    first = waiting[0]
    method = "human_task" if first.kind is WaitKind.HUMAN else "signal"
    hint = f'driver.{method}("{first.waits_for}", ...)'
    it = "it" if len(waiting) == 1 else "them"
    if driver is None:
        tail = f"and no driver answers {it}: give --driver MODULE:ATTR, a Driver with {hint}"
    else:
        tail = f"and no rule of the driver {driver} answers {it}: add {hint}"
    return f"{'; '.join(parts)}{more}, {tail} ({DOCS})"


def load_driver(spec: str) -> Driver:
    """Import ``module:attr`` and return the :class:`Driver` it names."""
    if ":" not in spec:
        raise InvalidInputError(f"--driver must look like 'module:attr', got {spec!r}")
    try:
        obj = pkgutil.resolve_name(spec)
    except (ImportError, AttributeError, ValueError) as exc:
        raise InvalidInputError(f"cannot load the driver '{spec}': {exc}") from None
    if not isinstance(obj, Driver):
        raise InvalidInputError(f"'{spec}' is a {type(obj).__name__}, not a Driver")
    return obj
