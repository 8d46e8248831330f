"""Declaring versioned workflows as data plus pure functions (docs/workflows.md).

A :class:`WorkflowDefinition` is a state machine. Each :class:`State` runs, in order:

1. a DAG of :class:`Step` s (``after=[...]`` gives parallel fan-out and joins),
2. then an optional wait (:class:`TimerWait` or :class:`SignalWait`),
3. then the first :class:`Transition` whose ``when`` holds (loops allowed), or else its
   terminal outcome (``complete=`` an output function, or ``fail=`` a reason).

Every callable receives a :class:`~orchestrator.domain.authoring.run_context.Context` and must be
pure: the decider calls them while deciding, and replay calls them again and must get
the same answer. A definition is validated when it is built, and carries a ``digest``
that changes whenever its structure or the code of any of its functions changes, so a
recorded run can tell it was started by a different definition.

Durations are seconds (``int``/``float``) or :class:`datetime.timedelta`, at most
``MAX_DURATION_MS`` (docs/limits.md): constants are checked when the definition is
built, computed ones when the decider computes them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from orchestrator.domain.authoring.irreversible import validate_compensations
from orchestrator.domain.authoring.migrations import Migration, validate_migrations
from orchestrator.domain.authoring.policies import DEFAULT_RETRY, Compensation, RetryPolicy
from orchestrator.domain.authoring.queries import Query, index_queries
from orchestrator.domain.authoring.run_context import Context
from orchestrator.domain.authoring.search_attributes import (
    SearchAttribute,
    index_search_attributes,
)
from orchestrator.domain.authoring.steps import (
    ON_EXHAUSTED,
    ON_UNKNOWN,
    TIMEOUT_KINDS,
    Step,
    compensation_step,
    validate_step,
)
from orchestrator.domain.authoring.upcasting import (
    check_upcasters,
    describe_model,
    schema_version_of,
)
from orchestrator.domain.authoring.waits import (
    Duration,
    Escalation,
    HumanTask,
    SignalWait,
    TimerWait,
    describe_wait,
    duration_ms,
    validate_wait,
)
from orchestrator.domain.model.errors import (
    DefinitionError,
    InvalidInputError,
    UnknownWorkflowError,
    format_validation_error,
)
from orchestrator.domain.model.fingerprint import callable_fingerprint, canonical_json
from orchestrator.domain.model.keys import is_compensation
from orchestrator.domain.model.limits import BUILTIN_PREFIX, MAX_DURATION_MS
from orchestrator.domain.model.vocabulary import OnCancel

__all__ = [
    "DEFAULT_RETRY",
    "ON_EXHAUSTED",
    "ON_UNKNOWN",
    "TIMEOUT_KINDS",
    "Compensation",
    "Context",
    "DefinitionError",
    "Duration",
    "Escalation",
    "HumanTask",
    "InvalidInputError",
    "Migration",
    "RetryPolicy",
    "SignalWait",
    "State",
    "Step",
    "TimerWait",
    "Transition",
    "UnknownWorkflowError",
    "WorkflowDefinition",
    "callable_fingerprint",
    "canonical_json",
    "compensation_step",
    "duration_ms",
    "index_definitions",
    "resolve_definition",
]

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_MAX_DAYS = MAX_DURATION_MS // (24 * 3600 * 1000)


@dataclass(frozen=True)
class Transition:
    """Go to state ``to`` when ``when(ctx)`` holds (always, if ``when`` is None)."""

    to: str
    when: Callable[[Context], bool] | None = None


@dataclass(frozen=True)
class State:
    """A workflow state: steps, then a wait, then transitions or a terminal outcome.

    ``on_failure`` names the state to enter when a step fails for good (permanent
    failure or retries exhausted); without it the workflow fails. A state whose wait
    is a :class:`HumanTask` goes where the decision leads and needs no transition.
    ``continue_as_new`` (a function of the context returning the next run's input)
    is a terminal outcome that ends this run and starts a fresh one of the same
    workflow with that input (docs/workflows.md).
    """

    name: str
    steps: Sequence[Step] = ()
    wait: TimerWait | SignalWait | HumanTask | None = None
    transitions: Sequence[Transition] = ()
    complete: Callable[[Context], Any] | None = None
    fail: str | Callable[[Context], str] | None = None
    on_failure: str | None = None
    continue_as_new: Callable[[Context], Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))
        object.__setattr__(self, "transitions", tuple(self.transitions))

    @property
    def is_terminal_capable(self) -> bool:
        return (
            self.complete is not None or self.fail is not None or self.continue_as_new is not None
        )


class WorkflowDefinition:
    """A versioned workflow: states (the first is initial unless ``initial`` says otherwise)."""

    def __init__(
        self,
        name: str,
        version: int,
        input_model: type[BaseModel],
        states: Sequence[State],
        *,
        initial: str | None = None,
        output_model: type[BaseModel] | None = None,
        description: str = "",
        on_cancel: OnCancel | str = OnCancel.COMPENSATE,
        compensation_after_irreversible: bool = False,
        compensation_role: str = "operator",
        migrations: Sequence[Migration] = (),
        queries: Sequence[Query] = (),
        search_attributes: Sequence[SearchAttribute] = (),
    ) -> None:
        """``on_cancel``: whether cancelling a run with committed effects compensates
        them; ``compensation_after_irreversible``: accept compensable steps that may run
        after an irreversible one; ``compensation_role``: who is given the human task
        of a compensation that failed (docs/sagas.md); ``migrations``: how runs of
        older versions move to this one (docs/versioning.md); ``queries``: read-only
        questions about a run, outside the digest (``queries.py``); ``search_attributes``:
        business keys runs are found by, outside the digest (``search_attributes.py``)."""
        self.name = name
        self.version = version
        self.input_model = input_model
        self.output_model = output_model
        self.description = description
        self.on_cancel = on_cancel
        self.compensation_after_irreversible = compensation_after_irreversible
        self.compensation_role = compensation_role
        self.states: dict[str, State] = {}
        self._validate_header(states)
        for st in states:
            if st.name in self.states:
                raise DefinitionError(f"{self.label}: duplicate state '{st.name}'")
            self.states[st.name] = st
        self.initial = initial if initial is not None else states[0].name
        self._validate_states()
        #: Steps of each state in a deterministic scheduling order (a topological order
        #: that keeps the declaration order where dependencies allow).
        self.step_order: dict[str, tuple[Step, ...]] = {
            st.name: self._topological(st) for st in self.states.values()
        }
        self.steps_by_name: dict[str, Step] = {
            step.name: step for st in self.states.values() for step in st.steps
        }
        #: The step governing each step's compensation, by step name.
        self.compensation_steps: dict[str, Step] = {
            name: compensation_step(step.undo, name)
            for name, step in self.steps_by_name.items()
            if step.undo is not None
        }
        self._validate_compensations()
        #: The declared migrations to this version, by the version they migrate from.
        self.migrations: dict[int, Migration] = validate_migrations(
            self.label, version, self.states, migrations
        )
        signal_waits = [st.wait for st in self.states.values() if isinstance(st.wait, SignalWait)]
        self.signal_names: frozenset[str] = frozenset(w.name for w in signal_waits)
        #: Signals whose waits carry a correlation (every wait of such a name does).
        self.correlated_signals: frozenset[str] = frozenset(
            w.name for w in signal_waits if w.correlation is not None
        )
        for w in signal_waits:
            if w.correlation is None and w.name in self.correlated_signals:
                raise DefinitionError(
                    f"{self.label}: signal '{w.name}' is waited for with and without a "
                    "correlation (all its waits must agree)"
                )
        self.queries: dict[str, Query] = index_queries(self.label, queries)
        self.search_attributes: dict[str, SearchAttribute] = index_search_attributes(
            self.label, search_attributes
        )
        self.digest = hashlib.sha256(canonical_json(self.describe()).encode()).hexdigest()

    @classmethod
    def dag(
        cls,
        name: str,
        version: int,
        input_model: type[BaseModel],
        steps: Sequence[Step],
        *,
        output: Callable[[Context], Any],
        output_model: type[BaseModel] | None = None,
        description: str = "",
        **options: Any,
    ) -> WorkflowDefinition:
        """A pure DAG workflow: one state running ``steps`` then completing with ``output``
        (``options``: the compensation options of ``__init__``)."""
        return cls(
            name,
            version,
            input_model,
            [State("run", steps=steps, complete=output)],
            output_model=output_model,
            description=description,
            **options,
        )

    @property
    def label(self) -> str:
        return f"workflow '{self.name}' v{self.version}"

    @property
    def input_schema_version(self) -> int:
        """The version a new run's input is recorded under (0: unversioned)."""
        return schema_version_of(self.input_model)

    @property
    def activity_types(self) -> frozenset[str]:
        """Every activity type the definition dispatches (steps and their status queries)."""
        steps = (*self.steps_by_name.values(), *self.compensation_steps.values())
        queries = (s.status_query_type for s in steps if s.status_query_type is not None)
        return frozenset((*(s.activity_type for s in steps), *queries))

    def step_for(self, activity_id: str, step: str) -> Step | None:
        """The step whose policy governs activity ``activity_id`` of step ``step``: the
        step itself, or its compensation's for a compensation."""
        if is_compensation(activity_id):
            return self.compensation_steps.get(step)
        return self.steps_by_name.get(step)

    # -- validation -----------------------------------------------------------------

    def _validate_header(self, states: Sequence[State]) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise DefinitionError(f"invalid workflow name {self.name!r} (letters, digits, _.-)")
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 1:
            raise DefinitionError(f"workflow '{self.name}': version must be an int >= 1")
        for model, what in ((self.input_model, "input_model"), (self.output_model, "output_model")):
            if model is None and what == "output_model":
                continue
            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                raise DefinitionError(f"{self.label}: {what} must be a pydantic BaseModel class")
        if not states:
            raise DefinitionError(f"{self.label}: needs at least one state")
        check_upcasters(self.input_model, f"{self.label}: input_model")

    def _check_target(self, state: str, target: str | None, what: str) -> None:
        if target is not None and target not in self.states:
            raise DefinitionError(
                f"{self.label}: state '{state}': {what} targets unknown state '{target}'"
            )

    def _validate_states(self) -> None:
        if self.initial not in self.states:
            raise DefinitionError(f"{self.label}: initial state '{self.initial}' is not defined")
        seen_steps: dict[str, str] = {}
        for st in self.states.values():
            where = f"{self.label}: state '{st.name}'"
            if not _NAME_RE.match(st.name):
                raise DefinitionError(f"{self.label}: invalid state name {st.name!r}")
            names = set()
            for step in st.steps:
                if not _NAME_RE.match(step.name):
                    raise DefinitionError(f"{where}: invalid step name {step.name!r}")
                if step.name in seen_steps:
                    raise DefinitionError(
                        f"{where}: step '{step.name}' already defined in state "
                        f"'{seen_steps[step.name]}' (step names are unique per workflow)"
                    )
                if not step.activity or not isinstance(step.activity, str):
                    raise DefinitionError(f"{where}: step '{step.name}' has no activity type")
                validate_step(where, step)
                seen_steps[step.name] = st.name
                names.add(step.name)
            for step in st.steps:
                for dep in step.after:
                    if dep not in names:
                        raise DefinitionError(
                            f"{where}: step '{step.name}' depends on unknown step '{dep}'"
                        )
            outcomes = [x for x in (st.complete, st.fail, st.continue_as_new) if x is not None]
            if len(outcomes) > 1:
                raise DefinitionError(
                    f"{where}: has more than one of complete=, fail= and continue_as_new="
                    if st.continue_as_new is not None
                    else f"{where}: has both complete= and fail="
                )
            if isinstance(st.wait, HumanTask):
                if st.transitions or outcomes:
                    raise DefinitionError(
                        f"{where}: a human task decides where the run goes; it takes no "
                        "transitions or terminal outcome (use on_approve/on_reject)"
                    )
            elif not st.transitions and not st.is_terminal_capable:
                raise DefinitionError(f"{where}: has no transition and no terminal outcome")
            for tr in st.transitions:
                self._check_target(st.name, tr.to, "transition")
            self._check_target(st.name, st.on_failure, "on_failure")
            if st.on_failure is not None and not st.steps:
                raise DefinitionError(f"{where}: on_failure without steps")
            validate_wait(where, st.wait, self.states, lambda n: bool(_NAME_RE.match(n)))

    def _validate_compensations(self) -> None:
        for st in self.states.values():
            for step in st.steps:
                comp = step.compensation
                if comp is not None and isinstance(comp, Compensation):
                    what = f"{self.label}: state '{st.name}': step '{step.name}': compensation"
                    validate_step(what, compensation_step(comp, step.name))
        validate_compensations(self, Compensation)

    def _topological(self, st: State) -> tuple[Step, ...]:
        done: list[Step] = []
        placed: set[str] = set()
        pending = list(st.steps)
        while pending:
            ready = [s for s in pending if all(d in placed for d in s.after)]
            if not ready:
                raise DefinitionError(
                    f"{self.label}: state '{st.name}': cycle in steps: {self._cycle(pending)}"
                )
            for s in ready:
                done.append(s)
                placed.add(s.name)
            pending = [s for s in pending if s.name not in placed]
        return tuple(done)

    @staticmethod
    def _cycle(pending: list[Step]) -> str:
        by_name = {s.name: s for s in pending}
        path: list[str] = []
        node = pending[0].name
        while node not in path:
            path.append(node)
            node = next(d for d in by_name[node].after if d in by_name)
        cycle = [*path[path.index(node) :], node]
        return " -> ".join(cycle)

    # -- use ------------------------------------------------------------------------

    def parse_input(self, raw: str | bytes | Mapping[str, Any] | BaseModel) -> BaseModel:
        """Validate ``raw`` (JSON text, a mapping or a model) against the input model."""
        try:
            if isinstance(raw, str | bytes):
                return self.input_model.model_validate_json(raw)
            if isinstance(raw, BaseModel):
                raw = raw.model_dump(mode="json")
            return self.input_model.model_validate(raw)
        except ValidationError as exc:
            raise InvalidInputError(
                f"invalid input for {self.label}: {format_validation_error(exc)}"
            ) from None

    def describe(self) -> dict[str, Any]:
        """The canonical description the digest is computed from."""
        states = []
        for st in self.states.values():
            desc: dict[str, Any] = {
                "name": st.name,
                "steps": [s.describe() for s in st.steps],
                "wait": describe_wait(st.wait),
                "transitions": [
                    {"to": t.to, "when": callable_fingerprint(t.when)} for t in st.transitions
                ],
                "complete": callable_fingerprint(st.complete),
                "fail": st.fail if isinstance(st.fail, str) else callable_fingerprint(st.fail),
                "on_failure": st.on_failure,
            }
            if st.continue_as_new is not None:  # only when set, so old digests hold
                desc["continue_as_new"] = callable_fingerprint(st.continue_as_new)
            states.append(desc)
        out = {
            "name": self.name,
            "version": self.version,
            "initial": self.initial,
            "input_model": describe_model(self.input_model),
            "output_model": describe_model(self.output_model, versioned=False),
            "states": states,
        }
        # newer options only when they differ from the default, so old digests hold
        if self.on_cancel != OnCancel.COMPENSATE:
            out["on_cancel"] = str(self.on_cancel)
        if self.compensation_after_irreversible:
            out["compensation_after_irreversible"] = True
        if self.compensation_role != "operator":
            out["compensation_role"] = self.compensation_role
        if self.migrations:
            out["migrations"] = [m.describe() for _, m in sorted(self.migrations.items())]
        return out

    def __repr__(self) -> str:
        return f"<WorkflowDefinition {self.name} v{self.version} {self.digest[:12]}>"


def resolve_definition(
    definitions: Mapping[tuple[str, int], WorkflowDefinition], name: str, version: int | None
) -> WorkflowDefinition:
    """The definition ``name`` at ``version`` (latest when None), or a clear error."""
    versions = sorted(v for (n, v) in definitions if n == name)
    if not versions:
        mine = {n for (n, _) in definitions if not n.startswith(BUILTIN_PREFIX)}
        known = ", ".join(sorted(mine)) or "(none)"
        raise UnknownWorkflowError(f"unknown workflow '{name}'; known workflows: {known}")
    if version is None:
        return definitions[(name, versions[-1])]
    found = definitions.get((name, version))
    if found is None:
        listed = ", ".join(str(v) for v in versions)
        raise UnknownWorkflowError(
            f"unknown version {version} of workflow '{name}'; known versions: {listed}"
        )
    return found


def index_definitions(
    definitions: Iterable[WorkflowDefinition],
) -> dict[tuple[str, int], WorkflowDefinition]:
    """Definitions keyed by (name, version); a duplicate key with another digest is an error."""
    out: dict[tuple[str, int], WorkflowDefinition] = {}
    for d in definitions:
        key = (d.name, d.version)
        if key in out and out[key].digest != d.digest:
            raise DefinitionError(f"{d.label} is registered twice with different contents")
        out[key] = d
    return out
