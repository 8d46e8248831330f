"""What a definition's functions may read about a run: recorded data only.

Guards, step inputs, durations and outputs receive a :class:`Context`. It reads the
folded :class:`~orchestrator.domain.model.state.WorkflowState` (never the clock or the
outside world), so replaying a history makes the same decisions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from pydantic import BaseModel

from orchestrator.domain.authoring.upcasting import schema_version_of, upcast
from orchestrator.domain.model.limits import parse_json
from orchestrator.domain.model.state import WorkflowState
from orchestrator.domain.model.vocabulary import ActivityStatus

__all__ = ["Context"]


class _HasInputModel(Protocol):
    """The part of a workflow definition a context needs (its input model)."""

    @property
    def input_model(self) -> type[BaseModel]: ...

    @property
    def steps_by_name(self) -> Mapping[str, Any]: ...


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


class Context:
    """What a definition's functions may read: recorded data only, never the outside world.

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
    def input(self) -> BaseModel:
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
        return model  # type: ignore[no-any-return]

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
