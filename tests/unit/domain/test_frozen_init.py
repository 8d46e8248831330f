"""``fast_init`` builds the same frozen objects as the dataclass-generated ``__init__``,
takes the same arguments, and refuses every class it cannot serve exactly; its
``replace`` gives what ``dataclasses.replace`` gives."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from orchestrator.domain.model import state_parts
from orchestrator.domain.model.frozen_init import fast_init, replace
from orchestrator.domain.model.messages import PAYLOAD_TYPES, ActivityScheduled, Envelope
from orchestrator.engine.command_loop import Out
from orchestrator.engine.local_activities import LocalRun
from orchestrator.io.handoff.committed_channel import CommittedEvent
from orchestrator.io.ports import Record

FAST = [
    *PAYLOAD_TYPES.values(),
    Envelope,
    state_parts.ActivityState,
    state_parts.HumanTaskState,
    state_parts.CompensationState,
    state_parts.TimerState,
    state_parts.WaitState,
    Record,
    Out,
    CommittedEvent,
    LocalRun,
]


def _twin(cls: type) -> type:
    """The same class as ``dataclasses`` alone makes it (the reference ``__init__``)."""
    annotations = {f.name: f.type for f in dataclasses.fields(cls)}
    namespace: dict[str, Any] = {"__annotations__": annotations, "__module__": cls.__module__}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            namespace[f.name] = dataclasses.field(default=f.default, compare=f.compare)
    return dataclasses.dataclass(frozen=True, slots=True)(type(cls.__name__, (), namespace))


def _arguments(cls: type) -> list[Any]:
    """One distinct value per required field (types do not matter to ``__init__``)."""
    return [f"{f.name}-value" for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]


@pytest.mark.parametrize("cls", FAST, ids=lambda c: c.__name__)
def test_the_fast_init_builds_what_the_generated_one_builds(cls: type) -> None:
    twin = _twin(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    assert f"_set_{names[0]}" in cls.__init__.__code__.co_names  # the fast one is in place
    assert inspect.signature(cls) == inspect.signature(twin)
    args = _arguments(cls)
    fast, slow = cls(*args), twin(*args)
    assert [getattr(fast, n) for n in names] == [getattr(slow, n) for n in names]
    by_name = cls(**dict(zip([n for n in names], args, strict=False)))
    assert by_name == fast
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(fast, names[0], "changed")
    assert copy.copy(fast) == fast and copy.deepcopy(fast) == fast


@pytest.mark.parametrize("cls", FAST, ids=lambda c: c.__name__)
def test_its_replace_gives_what_dataclasses_replace_gives(cls: type) -> None:
    names = [f.name for f in dataclasses.fields(cls)]
    assert "_set_" + names[-1] in replace.__globals__["_REPLACERS"][cls].__code__.co_names
    obj = cls(*_arguments(cls))
    for k in range(len(names) + 1):  # none, the first, the first two, ... every field
        changes = {n: f"{n}-changed" for n in names[:k]}
        fast, slow = replace(obj, **changes), dataclasses.replace(obj, **changes)
        assert type(fast) is cls
        assert [getattr(fast, n) for n in names] == [getattr(slow, n) for n in names]
    assert [getattr(replace(obj), n) for n in names] == [getattr(obj, n) for n in names]


def test_its_replace_refuses_and_falls_back_as_dataclasses_replace_does() -> None:
    act = state_parts.ActivityState("a1", "t", "s", "st", 1, "{}", 1, 1, "k")
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        replace(act, nope=1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        replace(act, attempt=2, nope=1)
    assert replace(_Plain(1), x=2) == _Plain(2)  # not fast_init: dataclasses.replace
    with pytest.raises(TypeError, match="replace\\(\\) should be called on dataclass instances"):
        replace(object(), x=1)


@dataclasses.dataclass(frozen=True)
class _Plain:
    x: int


def test_defaults_replace_and_pickle_behave_as_before() -> None:
    payload = ActivityScheduled("a1", "add_one", "one", '{"n": 3}', 1, 1, "k")
    env = Envelope("m1", "wf", "run", 3, "ActivityScheduled", 7, payload)
    assert (env.causation_id, env.correlation_id, env.traceparent) == (None, None, None)
    later = dataclasses.replace(env, seq=4, traceparent="tp")
    assert (later.seq, later.traceparent, later.payload) == (4, "tp", payload)
    assert later != env and dataclasses.replace(later, seq=3) == env  # traceparent: no compare
    assert pickle.loads(pickle.dumps(env)) == env
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        Envelope("m1", "wf", "run", 3, "T", 7, payload, nope=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'payload'"):
        Envelope("m1", "wf", "run", 3, "T", 7)  # type: ignore[call-arg]


@dataclasses.dataclass(frozen=True)
class _NoSlots:
    x: int


@dataclasses.dataclass(slots=True)
class _NotFrozen:
    x: int


@dataclasses.dataclass(frozen=True, slots=True)
class _Factory:
    x: tuple[int, ...] = dataclasses.field(default_factory=tuple)


@dataclasses.dataclass(frozen=True, slots=True)
class _KeywordOnly:
    x: int = dataclasses.field(kw_only=True)


@dataclasses.dataclass(frozen=True, slots=True)
class _PostInit:
    x: int

    def __post_init__(self) -> None:
        pass


@dataclasses.dataclass(frozen=True, slots=True)
class _InitVar:
    x: int
    y: dataclasses.InitVar[int] = 0


@pytest.mark.parametrize(
    ("cls", "why"),
    [
        (_NoSlots, "is not a frozen dataclass with slots"),
        (_NotFrozen, "is not a frozen dataclass with slots"),
        (_Factory, "_Factory.x is not a plain positional field"),
        (_KeywordOnly, "_KeywordOnly.x is not a plain positional field"),
        (_PostInit, "has __post_init__"),
        (_InitVar, "the generated __init__ takes other arguments"),
    ],
)
def test_a_class_it_cannot_serve_exactly_is_refused(cls: type, why: str) -> None:
    before = cls.__init__
    with pytest.raises(TypeError, match=why):
        fast_init(cls)
    assert cls.__init__ is before
