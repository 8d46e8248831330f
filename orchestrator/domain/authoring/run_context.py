"""What a definition's functions may read about a run: recorded data only.

Guards, step inputs, durations and outputs receive a :class:`Context`. It reads the
folded :class:`~orchestrator.domain.model.state.WorkflowState` (never the clock or the
outside world), so replaying a history makes the same decisions.

``Context[Order]`` is generic in the workflow's input model, and ``ctx.result(fn)`` reads a
step's result as the output model of the activity ``fn`` it ran, so mypy checks what a
definition reads (docs/workflows.md, "Typed steps").
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Generic, Protocol, TypeVar, overload

from pydantic import BaseModel, ValidationError

from orchestrator.domain.authoring.activity_refs import activity_ref, activity_type_of
from orchestrator.domain.authoring.upcasting import SchemaUnreadable, schema_version_of, upcast
from orchestrator.domain.model.errors import DefinitionError, format_validation_error
from orchestrator.domain.model.limits import parse_json
from orchestrator.domain.model.state import WorkflowState
from orchestrator.domain.model.vocabulary import ActivityStatus

__all__ = ["Context"]

InputT = TypeVar("InputT", bound=BaseModel, covariant=True)
M = TypeVar("M", bound=BaseModel)
R = TypeVar("R")


class _HasInputModel(Protocol):
    """The part of a workflow definition a context needs (its input model)."""

    @property
    def input_model(self) -> type[BaseModel]: ...

    @property
    def steps_by_name(self) -> Mapping[str, Any]: ...

    @property
    def label(self) -> str: ...


class _Results(Mapping[str, Any]):
    """Step results, each decoded and upgraded to its step's ``output`` model's current
    schema version when first read (docs/schema-evolution.md)."""

    __slots__ = ("_cache", "_defn", "_state")

    def __init__(self, definition: _HasInputModel, state: WorkflowState) -> None:
        self._defn = definition
        self._state = state
        self._cache: dict[str, Any] = {}

    def __getitem__(self, step: str) -> Any:
        if step in self._cache:
            return self._cache[step]
        value = parse_json(self._state.step_results[step])
        declared = self._defn.steps_by_name.get(step)
        model = getattr(declared, "output", None)
        if schema_version_of(model):
            recorded = self._state.result_versions.get(step, 0)
            value = upcast(model, recorded, value, f"the result of step '{step}'")
        self._cache[step] = value
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._state.step_results)

    def __len__(self) -> int:
        return len(self._state.step_results)

    def __contains__(self, step: object) -> bool:
        return step in self._state.step_results


def _as_model(model: type[M], data: Any, what: str) -> M:
    """``data`` as ``model``; a recorded value that does not fit is the code's problem, so
    the run waits in ``needs_attention`` for a fixed deploy (as with any unreadable record)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SchemaUnreadable(
            f"{what} does not match {model.__name__}: {format_validation_error(exc)}"
        ) from None


class Context(Generic[InputT]):
    """What a definition's functions may read: recorded data only, never the outside world.

    Generic in the workflow's input model (``Context[Order]``): ``input`` is typed, and
    :meth:`result` / :meth:`item_results` read a step's result as the model of the
    activity that produced it.

    ``input`` is the validated input model instance (an input recorded under an older
    schema version upgraded by the model's upcasters), ``input_dict`` the input as
    recorded; ``results`` maps step name to its latest result (upgraded to the step's
    ``output`` model's version); ``signals`` maps signal name to
    every payload received so far (arrival order); ``visits`` counts entries per state;
    ``failures`` maps step name to its latest final failure (``failure_class``,
    ``error_type``, ``message``); ``item_failures`` maps a fan-out step's name to its
    failed items, by index, each such a failure (docs/fan-out.md); ``human_tasks`` maps
    human task name to its latest task (``status``, ``decision``, ``actor``,
    ``decided_at``, ``owner``, ``level``, and ``correction``: a correction task's
    approved data, else None).
    """

    __slots__ = ("_defn", "_results", "_signals", "_state")

    def __init__(self, definition: _HasInputModel, state: WorkflowState) -> None:
        self._defn = definition
        self._state = state
        self._results: _Results | None = None
        self._signals: dict[str, list[Any]] | None = None

    @property
    def workflow_id(self) -> str:
        return self._state.workflow_id

    @property
    def state(self) -> str | None:
        return self._state.current_state

    @property
    def input(self) -> InputT:
        memo = self._state.memo
        model = memo.get("input")
        if model is None:
            cls = self._defn.input_model
            recorded = self._state.input_schema_version
            if schema_version_of(cls) and recorded != schema_version_of(cls):
                data = upcast(cls, recorded, json.loads(self._state.input_json), "the input")
                model = cls.model_validate(data)
            else:
                model = cls.model_validate_json(self._state.input_json)
            memo["input"] = model
        return model  # type: ignore[no-any-return,return-value]

    @property
    def input_dict(self) -> dict[str, Any]:
        memo = self._state.memo
        data = memo.get("input_dict")
        if data is None:
            data = parse_json(self._state.input_json)
            memo["input_dict"] = data
        return data  # type: ignore[no-any-return]

    @property
    def results(self) -> Mapping[str, Any]:
        if self._results is None:
            self._results = _Results(self._defn, self._state)
        return self._results

    @overload
    def result(self, of: type[M], *, step: str) -> M: ...
    @overload
    def result(self, of: Callable[..., Awaitable[R]], *, step: str | None = None) -> R: ...
    @overload
    def result(self, of: Callable[..., R], *, step: str | None = None) -> R: ...
    def result(self, of: Any, *, step: str | None = None) -> Any:
        """The latest result of the step that ran activity ``of`` (its registered handler
        function; ``step`` names the step when several run it), typed as the activity's
        output: an instance of its output model (a result recorded under an older schema
        version upgraded first), else the decoded JSON. ``ctx.result(Model, step="s")``
        reads step ``s`` (a child workflow's, say) as ``Model``. ``KeyError`` while the
        step has no result, as ``ctx.results[name]``."""
        name, model = self._typed_step(of, step, fan_out=False)
        if model is None:
            return self.results[name]
        return _as_model(model, self._read_as(name, model), f"the result of step '{name}'")

    @overload
    def item_results(self, of: type[M], *, step: str) -> list[M | None]: ...
    @overload
    def item_results(
        self, of: Callable[..., Awaitable[R]], *, step: str | None = None
    ) -> list[R | None]: ...
    @overload
    def item_results(self, of: Callable[..., R], *, step: str | None = None) -> list[R | None]: ...
    def item_results(self, of: Any, *, step: str | None = None) -> list[Any]:
        """A fan-out's item results in input order, each typed as :meth:`result` types a
        result (``None``: an item that failed for good under ``collect``/``tolerate``)."""
        name, model = self._typed_step(of, step, fan_out=True)
        items: list[Any] = self.results[name]
        if model is None:
            return list(items)
        return [
            None if item is None else _as_model(model, item, f"item {i} of step '{name}'")
            for i, item in enumerate(items)
        ]

    def _typed_step(
        self, of: Any, step: str | None, *, fan_out: bool
    ) -> tuple[str, type[BaseModel] | None]:
        """The step a typed read names and the model its result is read as."""
        where = f"{self._defn.label}: ctx.{'item_results' if fan_out else 'result'}"
        steps = self._defn.steps_by_name
        model: type[BaseModel] | None
        if isinstance(of, type) and issubclass(of, BaseModel):
            if step is None or step not in steps:
                named = "needs step=" if step is None else f"has no step '{step}'"
                raise DefinitionError(f"{where}({of.__name__}): {named}")
            name, model = step, of
        else:
            activity = activity_type_of(of, where)
            running = [s.name for s in steps.values() if s.activity_type == activity]
            if step is not None and step not in running:
                raise DefinitionError(f"{where}: step '{step}' does not run '{activity}'")
            if step is None and len(running) != 1:
                raise DefinitionError(
                    f"{where}: no step runs activity '{activity}'"
                    if not running
                    else f"{where}: activity '{activity}' runs in steps "
                    f"{', '.join(running)}; say which with step="
                )
            name = step or running[0]
            ref = activity_ref(of)
            declared: type[BaseModel] | None = steps[name].output
            model = declared or (ref.output if ref is not None else None)
        if (steps[name].for_each is not None) != fan_out:
            raise DefinitionError(
                f"{where}: step '{name}' is a fan-out (its result is a list): "
                "read it with ctx.item_results"
                if not fan_out
                else f"{where}: step '{name}' is not a fan-out: read it with ctx.result"
            )
        return name, model

    def _read_as(self, step: str, model: type[BaseModel]) -> Any:
        """Step ``step``'s result as JSON data of ``model``'s current schema version."""
        declared = getattr(self._defn.steps_by_name.get(step), "output", None)
        if declared is model or not schema_version_of(model):
            return self.results[step]
        recorded = self._state.result_versions.get(step, 0)
        value = parse_json(self._state.step_results[step])
        return upcast(model, recorded, value, f"the result of step '{step}'")

    @property
    def signals(self) -> Mapping[str, list[Any]]:
        if self._signals is None:
            self._signals = {k: [json.loads(p) for p in v] for k, v in self._state.signals.items()}
        return self._signals

    @property
    def visits(self) -> Mapping[str, int]:
        return self._state.visits

    @property
    def human_tasks(self) -> Mapping[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for task in self._state.human_tasks.values():  # oldest first: the latest wins
            out[task.task_name] = {
                "status": str(task.status),
                "decision": task.decision,
                "actor": task.actor,
                "decided_at": task.decided_at,
                "owner": task.owner,
                "level": task.level,
                "correction": json.loads(task.correction_json) if task.correction_json else None,
            }
        return out

    @property
    def failures(self) -> Mapping[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for act in self._state.activities.values():
            if (
                act.status == ActivityStatus.FAILED
                and act.error_type is not None
                and act.parent is None
            ):
                out[act.step] = {
                    "failure_class": act.failure_class or "",
                    "error_type": act.error_type,
                    "message": act.error_message or "",
                }
        return out

    @property
    def item_failures(self) -> Mapping[str, dict[int, dict[str, str]]]:
        out: dict[str, dict[int, dict[str, str]]] = {}
        for step, fo in self._state.fan_outs.items():
            failed: dict[int, dict[str, str]] = {}
            for index in fo.failures:
                act = self._state.activities[fo.item_id(index)]
                failed[index] = {
                    "failure_class": act.failure_class or "",
                    "error_type": act.error_type or "",
                    "message": act.error_message or "",
                }
            out[step] = failed
        return out
