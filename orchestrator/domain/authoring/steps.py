"""Steps: the activities of a state's DAG, each with its failure policy (docs/workflows.md).

A :class:`Step` is data plus pure functions of the run's context; :func:`validate_step`
refuses at definition time what could never run (a timeout of zero, a status query on
a step that retries unknown outcomes blindly, a fan-out without a list, ...).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from orchestrator.domain.authoring.activity_refs import ActivityFunction, activity_type_of
from orchestrator.domain.authoring.policies import DEFAULT_RETRY, Compensation, RetryPolicy
from orchestrator.domain.authoring.run_context import Context
from orchestrator.domain.authoring.upcasting import (
    check_upcasters,
    describe_model,
    schema_version_of,
)
from orchestrator.domain.authoring.waits import Duration, duration_ms
from orchestrator.domain.model.errors import DefinitionError
from orchestrator.domain.model.fingerprint import callable_fingerprint
from orchestrator.domain.model.keys import CHILD_ACTIVITY_PREFIX
from orchestrator.domain.model.limits import MAX_FAN_OUT_ITEMS
from orchestrator.domain.model.vocabulary import (
    ItemFailurePolicy,
    OnExhausted,
    OnUnknown,
    ParentClosePolicy,
    TimeoutKind,
)

__all__ = [
    "ITEM_FAILURE_POLICIES",
    "ON_EXHAUSTED",
    "ON_UNKNOWN",
    "PARENT_CLOSE_POLICIES",
    "TIMEOUT_KINDS",
    "Step",
    "compensation_step",
    "validate_step",
]

_WORKFLOW_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")

#: The activity timeouts a step may declare (docs/activities.md), in the order they can fire.
TIMEOUT_KINDS: tuple[TimeoutKind, ...] = tuple(TimeoutKind)
#: What a step does once a transient failure has no retries left.
ON_EXHAUSTED: tuple[OnExhausted, ...] = tuple(OnExhausted)
ON_UNKNOWN: tuple[OnUnknown, ...] = tuple(OnUnknown)


@dataclass(frozen=True)
class Step:
    """One activity in a state's DAG.

    ``activity`` names the activity type, or is its handler function (registered with
    ``@app.activity``; the step then holds the type's name, so both forms are the same
    step with the same digest). ``status_query`` and ``compensation`` may name theirs
    the same ways.

    ``input`` maps the context to the activity input (default: the workflow input);
    ``after`` names steps of the same state that must complete first; ``retry`` bounds
    the retries of transient failures.

    Timeouts (seconds or ``timedelta``; None: none) are enforced by durable timers:
    ``schedule_to_start`` from dispatch to the worker's first heartbeat,
    ``start_to_close`` from the start (the first heartbeat when the worker reports it,
    else the dispatch) to the report, ``heartbeat`` between heartbeats.

    ``status_query`` names an activity type that tells whether an attempt whose outcome
    is unknown took effect (input ``{"idempotency_key": K, "input": <input>}``, result
    ``{"found": true, "result": <result>}`` or ``{"found": false}``); with it, a
    start-to-close or heartbeat timeout means "outcome unknown" rather than "transient".
    Without one, an unknown outcome needs an operator (``on_unknown="attention"``) unless
    ``on_unknown="retry"`` says the remote side deduplicates by the idempotency key.
    ``on_exhausted`` is ``"dead_letter"`` (park for an operator's redrive) or ``"fail"``
    (the state's ``on_failure`` path, or the run fails) once retries are used up.
    ``local`` runs it inside the orchestrator, its result recorded with the next decision.

    ``compensation`` (a :class:`Compensation` or an activity type) undoes the step's
    effect when the run fails or is cancelled after the step completed; ``irreversible``
    marks a step that cannot be undone (docs/sagas.md).

    ``output`` is the pydantic model the step's result is read as: a result recorded
    under an older ``schema_version`` of it is upgraded by its upcasters when read
    (``ctx.results``; docs/schema-evolution.md).

    :meth:`child` makes it a child-workflow step (docs/child-workflows.md): it starts a run
    of another workflow and completes with that run's output, or fails with its failure.

    ``for_each`` makes it a fan-out (docs/fan-out.md): a function of the context
    returning the list of inputs, one logical activity per item (its own idempotency
    key), at most ``max_concurrency`` in flight, the step's result the list of item
    results in input order. ``on_item_failure`` says what an item that fails for good
    does: fail the step (``fail_fast``), or count as ``null`` in the results (``collect``;
    ``tolerate``: up to ``tolerate`` items, then the step fails).
    """

    name: str
    activity: str | ActivityFunction
    after: Sequence[str] = ()
    input: Callable[[Context], Any] | None = None
    retry: RetryPolicy | None = None
    schedule_to_start: Duration | None = None
    start_to_close: Duration | None = None
    heartbeat: Duration | None = None
    status_query: str | ActivityFunction | None = None
    on_exhausted: OnExhausted | str = OnExhausted.DEAD_LETTER
    on_unknown: OnUnknown | str = OnUnknown.ATTENTION
    local: bool = False
    compensation: Compensation | str | ActivityFunction | None = None
    irreversible: bool = False
    output: type[BaseModel] | None = None
    for_each: Callable[[Context], Sequence[Any]] | None = None
    max_concurrency: int | None = None
    on_item_failure: ItemFailurePolicy | str = ItemFailurePolicy.FAIL_FAST
    tolerate: int = 0
    child_version: int | None = None
    parent_close: ParentClosePolicy | str = ParentClosePolicy.CANCEL
    child_id: Callable[[Context], str] | None = None

    @classmethod
    def child(
        cls,
        name: str,
        workflow: str,
        *,
        version: int | None = None,
        input: Callable[[Context], Any] | None = None,
        workflow_id: Callable[[Context], str] | None = None,
        parent_close: ParentClosePolicy | str = ParentClosePolicy.CANCEL,
        **options: Any,
    ) -> Step:
        """A step running a child run of ``workflow`` (latest ``version`` when None) with
        ``input`` (default: the parent's input), as workflow id ``workflow_id(ctx)`` or
        one derived from the parent's; ``parent_close`` says what a child still going
        gets when the parent stops awaiting it. ``options``: ``after``, ``output`` and
        the fan-out options (one child per item)."""
        return cls(
            name,
            CHILD_ACTIVITY_PREFIX + workflow,
            input=input,
            child_version=version,
            child_id=workflow_id,
            parent_close=parent_close,
            **options,
        )

    @property
    def activity_type(self) -> str:
        """The activity type's name (a handler function given is resolved when built)."""
        return self.activity if isinstance(self.activity, str) else ""

    @property
    def status_query_type(self) -> str | None:
        """The status query's activity type (None: none)."""
        query = self.status_query
        return query if isinstance(query, str) or query is None else ""

    @property
    def child_workflow(self) -> str | None:
        """The workflow a child-workflow step starts (None: an activity step)."""
        if not self.activity_type.startswith(CHILD_ACTIVITY_PREFIX):
            return None
        return self.activity_type[len(CHILD_ACTIVITY_PREFIX) :]

    def __post_init__(self) -> None:
        after = (self.after,) if isinstance(self.after, str) else tuple(self.after)
        object.__setattr__(self, "after", after)
        what = f"step '{self.name}'"
        if callable(self.activity):
            object.__setattr__(self, "activity", activity_type_of(self.activity, what))
        if callable(self.status_query):
            named = activity_type_of(self.status_query, f"{what}: status_query")
            object.__setattr__(self, "status_query", named)
        comp = self.compensation
        if isinstance(comp, str) or (callable(comp) and not isinstance(comp, Compensation)):
            named = activity_type_of(comp, f"{what}: compensation")
            object.__setattr__(self, "compensation", Compensation(named))

    @property
    def undo(self) -> Compensation | None:
        """The step's compensation (None: nothing to undo, or irreversible)."""
        comp = self.compensation
        return comp if isinstance(comp, Compensation) else None

    @property
    def retry_policy(self) -> RetryPolicy:
        return self.retry or DEFAULT_RETRY

    def timeout_ms(self, kind: str) -> int | None:
        """The ``kind`` timeout (one of :data:`TIMEOUT_KINDS`) in ms, None when not set."""
        value = getattr(self, kind)
        return None if value is None else duration_ms(value)

    @property
    def report_start(self) -> bool:
        """The worker reports an attempt's start (a first heartbeat) for these timeouts."""
        return self.schedule_to_start is not None or self.heartbeat is not None

    @property
    def heartbeat_ms(self) -> int:
        return self.timeout_ms(TimeoutKind.HEARTBEAT) or 0

    def describe(self) -> dict[str, Any]:
        """The digest's view (newer fields only when set, so old digests hold)."""
        out: dict[str, Any] = {
            "name": self.name,
            "activity": self.activity_type,
            "after": list(self.after),
            "input": callable_fingerprint(self.input),
            "retry": None if self.retry is None else self.retry.describe(),
        }
        timeouts = {k: self.timeout_ms(k) for k in TIMEOUT_KINDS if getattr(self, k) is not None}
        if timeouts:
            out["timeouts"] = timeouts
        if self.status_query is not None:
            out["status_query"] = self.status_query
        if self.on_exhausted != OnExhausted.DEAD_LETTER:
            out["on_exhausted"] = self.on_exhausted
        if self.on_unknown != OnUnknown.ATTENTION:
            out["on_unknown"] = self.on_unknown
        if self.local:
            out["local"] = True
        if self.undo is not None:
            out["compensation"] = self.undo.describe()
        if self.irreversible:
            out["irreversible"] = True
        if self.output is not None:
            out["output"] = describe_model(self.output)
        if self.child_workflow is not None:
            out["child"] = {
                "version": self.child_version,
                "parent_close": str(self.parent_close),
                "workflow_id": callable_fingerprint(self.child_id),
            }
        if self.for_each is not None:
            out["for_each"] = {
                "items": callable_fingerprint(self.for_each),
                "max_concurrency": self.max_concurrency,
                "on_item_failure": str(self.on_item_failure),
                "tolerate": self.tolerate,
            }
        return out

    @property
    def output_schema_version(self) -> int:
        """The version results of this step are read as (0: unversioned)."""
        return schema_version_of(self.output)


def compensation_step(comp: Compensation, step: str) -> Step:
    """The step whose policy governs the compensation of step ``step``."""
    return Step(
        step,
        comp.activity_type,
        retry=comp.retry,
        start_to_close=comp.start_to_close,
        status_query=comp.status_query,
        on_exhausted=OnExhausted.FAIL,
    )


def validate_step(where: str, step: Step) -> None:
    """Refuse a step whose options cannot work, with the reason (``where``: its place)."""
    what = f"{where}: step '{step.name}'"
    for kind in TIMEOUT_KINDS:
        value = getattr(step, kind)
        if value is None:
            continue
        try:
            ms = duration_ms(value)
        except (TypeError, ValueError) as exc:
            raise DefinitionError(f"{what}: {kind}: {exc}") from None
        if ms <= 0:
            raise DefinitionError(f"{what}: {kind} must be > 0 seconds, got {value!r}")
    if step.status_query is not None and (
        not isinstance(step.status_query, str) or not step.status_query
    ):
        raise DefinitionError(f"{what}: status_query must name an activity type")
    if step.on_exhausted not in ON_EXHAUSTED:
        raise DefinitionError(
            f"{what}: on_exhausted must be one of {', '.join(ON_EXHAUSTED)}; "
            f"got {step.on_exhausted!r}"
        )
    if step.on_unknown not in ON_UNKNOWN:
        raise DefinitionError(f"{what}: on_unknown must be one of {', '.join(ON_UNKNOWN)}")
    if step.on_unknown == OnUnknown.RETRY and step.status_query is not None:
        raise DefinitionError(
            f"{what}: on_unknown='retry' contradicts status_query '{step.status_query}' "
            "(an unknown outcome is asked about, never retried blindly): drop one"
        )
    if step.retry is not None and not isinstance(step.retry, RetryPolicy):
        raise DefinitionError(f"{what}: retry must be a RetryPolicy")
    if step.output is not None:
        if not (isinstance(step.output, type) and issubclass(step.output, BaseModel)):
            raise DefinitionError(f"{what}: output must be a pydantic BaseModel class")
        check_upcasters(step.output, f"{what}: output")
    if step.for_each is not None or step.max_concurrency is not None:
        validate_fan_out(what, step)
    if step.child_workflow is not None:
        validate_child(what, step)
    elif step.child_id is not None or step.child_version is not None:
        raise DefinitionError(f"{what}: workflow_id and version are for Step.child steps")


#: What a fan-out's item that fails for good may lead to.
ITEM_FAILURE_POLICIES: tuple[ItemFailurePolicy, ...] = tuple(ItemFailurePolicy)


def validate_fan_out(what: str, step: Step) -> None:
    """A fan-out needs its list function, a usable concurrency and a failure policy that
    fits ``tolerate``; its items are its inputs, and it runs on workers."""
    if step.for_each is None:
        raise DefinitionError(f"{what}: max_concurrency without for_each (only a fan-out has it)")
    if not callable(step.for_each):
        raise DefinitionError(f"{what}: for_each must be a function of the context")
    if step.input is not None:
        raise DefinitionError(
            f"{what}: a fan-out takes no input= (each item for_each returns is an input)"
        )
    if step.local:
        raise DefinitionError(f"{what}: a fan-out runs on workers; it cannot be local")
    if step.output is not None:
        raise DefinitionError(
            f"{what}: a fan-out's result is a list; output= models are not supported on it"
        )
    mc = step.max_concurrency
    if mc is not None and (
        isinstance(mc, bool) or not isinstance(mc, int) or not 1 <= mc <= MAX_FAN_OUT_ITEMS
    ):
        raise DefinitionError(
            f"{what}: max_concurrency must be an int from 1 to {MAX_FAN_OUT_ITEMS}; got {mc!r}"
        )
    if step.on_item_failure not in ITEM_FAILURE_POLICIES:
        raise DefinitionError(
            f"{what}: on_item_failure must be one of {', '.join(ITEM_FAILURE_POLICIES)}; "
            f"got {step.on_item_failure!r}"
        )
    n = step.tolerate
    tolerating = step.on_item_failure == ItemFailurePolicy.TOLERATE
    if isinstance(n, bool) or not isinstance(n, int) or n < 0 or (tolerating and n < 1):
        raise DefinitionError(f"{what}: tolerate must be an int >= 1; got {n!r}")
    if n and not tolerating:
        raise DefinitionError(f"{what}: tolerate={n} needs on_item_failure='tolerate'")


#: What a child run still going may get when its parent stops awaiting it.
PARENT_CLOSE_POLICIES: tuple[ParentClosePolicy, ...] = tuple(ParentClosePolicy)


def validate_child(what: str, step: Step) -> None:
    """A child run is one attempt the child's own definition governs: no retries,
    timeouts, status query or compensation of its own in the parent."""
    name = step.child_workflow or ""
    if not _WORKFLOW_NAME.fullmatch(name):
        raise DefinitionError(f"{what}: invalid child workflow name {name!r}")
    own = {
        "retry": step.retry is not None,
        "timeouts": any(getattr(step, k) is not None for k in TIMEOUT_KINDS),
        "status_query": step.status_query is not None,
        "compensation": step.compensation is not None,
        "local": step.local,
    }
    given = [k for k, v in own.items() if v]
    if given:
        raise DefinitionError(
            f"{what}: a child workflow step takes no {', '.join(given)} (the child's "
            "definition governs its run; docs/child-workflows.md)"
        )
    if step.parent_close not in PARENT_CLOSE_POLICIES:
        raise DefinitionError(
            f"{what}: parent_close must be one of {', '.join(PARENT_CLOSE_POLICIES)}; "
            f"got {step.parent_close!r}"
        )
    if step.child_id is not None and (step.for_each is not None or not callable(step.child_id)):
        raise DefinitionError(
            f"{what}: workflow_id must be a function of the context, and a fan-out's "
            "children take derived ids"
        )
