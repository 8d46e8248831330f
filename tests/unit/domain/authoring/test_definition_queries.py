"""Queries declared on a definition: checked when built, outside the digest, answered over
a state they can read but never change (orchestrator/domain/authoring/queries.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from orchestrator.domain.authoring.definitions import (
    DefinitionError,
    SignalWait,
    State,
    Step,
    Transition,
    WorkflowDefinition,
)
from orchestrator.domain.authoring.queries import (
    Query,
    QueryContext,
    QueryError,
    ReadOnlyDict,
    ReadOnlyList,
    frozen,
    run_query,
)
from orchestrator.domain.model.errors import InvalidInputError, KeelError
from orchestrator.domain.model.limits import MAX_PAYLOAD_BYTES
from orchestrator.domain.model.state import WorkflowState


class Inp(BaseModel):
    n: int
    tags: list[str] = []


class Pick(BaseModel):
    step: str


class Answer(BaseModel):
    n: int


def _states() -> list[State]:
    return [
        State("s", steps=[Step("a", "act")], wait=SignalWait("go"), transitions=[Transition("d")]),
        State("d", complete=lambda ctx: ctx.results["a"]),
    ]


def _defn(*queries: Query) -> WorkflowDefinition:
    return WorkflowDefinition("w", 1, Inp, _states(), queries=queries)


def _state(**over: Any) -> WorkflowState:
    base: dict[str, Any] = {
        "workflow_id": "wf-1",
        "run_id": "r1",
        "name": "w",
        "version": 1,
        "digest": "d",
        "input_json": '{"n": 2, "tags": ["x"]}',
        "seq": 5,
        "current_state": "s",
        "step_results": {"a": '{"total": 30, "lines": [1, 2]}'},
        "signals": {"go": ('{"by": "alice"}',)},
        "visits": {"s": 1},
    }
    return WorkflowState(**{**base, **over})


# -- declaring ------------------------------------------------------------------------


def test_queries_are_indexed_by_name() -> None:
    q = Query("progress", lambda ctx: ctx.state)
    assert _defn(q).queries == {"progress": q}
    assert _defn().queries == {}


async def _async_query(ctx: QueryContext) -> int:
    return 1


@pytest.mark.parametrize(
    ("queries", "message"),
    [
        ([Query("bad name", lambda ctx: 1)], "workflow 'w' v1: query 'bad name': invalid name"),
        (
            [Query("p", lambda ctx: 1), Query("p", lambda ctx: 2)],
            "workflow 'w' v1: duplicate query 'p'",
        ),
        (
            [Query("p", lambda ctx: 1, args=dict)],  # type: ignore[arg-type]
            "workflow 'w' v1: query 'p': args must be a pydantic BaseModel class",
        ),
        ([Query("p", lambda: 1)], "workflow 'w' v1: query 'p': fn must take (ctx)"),
        (
            [Query("p", lambda ctx: 1, args=Pick)],
            "workflow 'w' v1: query 'p': fn must take (ctx, args)",
        ),
        ([Query("p", _async_query)], "workflow 'w' v1: query 'p': fn must be a plain function"),
        (["p"], "workflow 'w' v1: queries must be Query objects, got 'p'"),
    ],
)
def test_a_malformed_query_is_a_definition_error(queries: list[Any], message: str) -> None:
    with pytest.raises(DefinitionError) as err:
        WorkflowDefinition("w", 1, Inp, _states(), queries=queries)
    assert str(err.value).startswith(message)


def test_queries_are_outside_the_digest_so_adding_one_changes_no_replay() -> None:
    plain = _defn()
    assert _defn(Query("progress", lambda ctx: ctx.state)).digest == plain.digest
    assert set(plain.describe()) == set(_defn(Query("p", lambda ctx: 1)).describe())


def test_the_dag_shorthand_takes_queries() -> None:
    q = Query("n", lambda ctx: ctx.input.n)
    d = WorkflowDefinition.dag("w", 1, Inp, [Step("a", "act")], output=lambda c: 1, queries=[q])
    assert d.queries == {"n": q}


# -- answering ------------------------------------------------------------------------


def test_a_query_reads_the_run_through_its_context() -> None:
    def progress(ctx: QueryContext) -> dict[str, Any]:
        return {
            "id": ctx.workflow_id,
            "run": ctx.run_id,
            "status": ctx.status,
            "state": ctx.state,
            "n": ctx.input.n,  # type: ignore[attr-defined]
            "tags": ctx.input_dict["tags"],
            "total": ctx.results["a"]["total"],
            "by": [s["by"] for s in ctx.signals["go"]],
            "visits": ctx.visits,
            "output": ctx.output,
            "failures": ctx.failures,
            "tasks": ctx.human_tasks,
        }

    answer = run_query(_defn(Query("progress", progress)), _state(), "progress")
    assert answer == {
        "id": "wf-1",
        "run": "r1",
        "status": "running",
        "state": "s",
        "n": 2,
        "tags": ["x"],
        "total": 30,
        "by": ["alice"],
        "visits": {"s": 1},
        "output": None,
        "failures": {},
        "tasks": {},
    }
    assert type(answer) is dict and type(answer["tags"]) is list  # plain JSON values


def test_a_finished_run_shows_its_output_and_a_model_answer_is_dumped() -> None:
    d = _defn(Query("out", lambda ctx: ctx.output), Query("model", lambda ctx: Answer(n=7)))
    done = _state(status="completed", current_state="d", output_json='{"total": 30}')
    assert run_query(d, done, "out") == {"total": 30}
    assert run_query(d, done, "model") == {"n": 7}
    nested = _defn(Query("m", lambda ctx: {"m": Answer(n=1), "input": ctx.input}))
    assert run_query(nested, done, "m") == {"m": {"n": 1}, "input": {"n": 2, "tags": ["x"]}}


def test_args_are_validated_by_the_declared_model() -> None:
    d = _defn(Query("result", lambda ctx, a: ctx.results[a.step], args=Pick))
    assert run_query(d, _state(), "result", {"step": "a"}) == {"total": 30, "lines": [1, 2]}
    assert run_query(d, _state(), "result", Pick(step="a"))["total"] == 30
    with pytest.raises(InvalidInputError) as err:
        run_query(d, _state(), "result")
    assert str(err.value) == (
        "invalid args for query 'result' of workflow 'w' v1: field 'step': Field required"
    )
    with pytest.raises(InvalidInputError) as err:
        run_query(d, _state(), "result", {"step": 3})
    assert str(err.value) == (
        "invalid args for query 'result' of workflow 'w' v1: field 'step': Input should be a "
        "valid string"
    )


def test_args_to_a_query_that_declares_none_are_refused() -> None:
    d = _defn(Query("state", lambda ctx: ctx.state))
    with pytest.raises(InvalidInputError) as err:
        run_query(d, _state(), "state", {"x": 1})
    assert str(err.value) == "query 'state' of workflow 'w' v1 takes no args"


def test_an_unknown_query_names_the_declared_ones() -> None:
    d = _defn(Query("state", lambda ctx: ctx.state), Query("n", lambda ctx: ctx.input.n))
    with pytest.raises(InvalidInputError) as err:
        run_query(d, _state(), "nope")
    assert str(err.value) == "workflow 'w' v1 has no query 'nope' (declared: 'n', 'state')"
    with pytest.raises(InvalidInputError) as err:
        run_query(_defn(), _state(), "nope")
    assert str(err.value) == "workflow 'w' v1 has no query 'nope' (declared: none)"


def _set_result(ctx: QueryContext) -> None:
    ctx.results["a"]["total"] = 0


def _append_signal(ctx: QueryContext) -> None:
    ctx.signals["go"].append({"by": "mallory"})


def _set_input(ctx: QueryContext) -> None:
    ctx.input.n = 3  # type: ignore[attr-defined]


def _append_input(ctx: QueryContext) -> None:
    ctx.input.tags.append("y")  # type: ignore[attr-defined]


def _bump_visits(ctx: QueryContext) -> None:
    ctx.visits["s"] += 1  # type: ignore[index]


def _set_ctx(ctx: QueryContext) -> None:
    ctx.status = "completed"  # type: ignore[misc]


def _replace_result(ctx: QueryContext) -> None:
    ctx.results["a"] = {}  # type: ignore[index]


def _clear_input_dict(ctx: QueryContext) -> None:
    ctx.input_dict.clear()


@pytest.mark.parametrize(
    ("fn", "what"),
    [
        (_set_result, "x[k] = v on a mapping"),
        (_append_signal, ".append() on a list"),
        (_set_input, "setting field 'n' of a model it read"),
        (_append_input, ".append() on a list"),
        (_bump_visits, "x[k] = v on a mapping"),
        (_set_ctx, "setting ctx.status"),
        (_replace_result, "x[k] = v on a mapping"),
        (_clear_input_dict, ".clear() on a mapping"),
    ],
)
def test_a_query_that_tries_to_change_the_state_fails_and_changes_nothing(fn, what) -> None:
    state = _state()
    before = state.to_json()
    with pytest.raises(QueryError) as err:
        run_query(_defn(Query("q", fn)), state, "q")
    assert str(err.value) == (
        f"query 'q' of workflow 'wf-1' tried to change the run's state ({what}); "
        "a query is read-only"
    )
    assert state.to_json() == before


def test_a_query_that_raises_is_a_query_error_naming_the_exception() -> None:
    d = _defn(Query("broken", lambda ctx: ctx.results["missing"]))
    with pytest.raises(QueryError) as err:
        run_query(d, _state(), "broken")
    assert str(err.value) == "query 'broken' of workflow 'wf-1' failed: KeyError: 'missing'"
    assert isinstance(err.value, KeelError)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ({1, 2}, "Object of type set is not JSON serializable"),
        (float("nan"), "Out of range float values are not JSON compliant"),
        (object(), "Object of type object is not JSON serializable"),
    ],
)
def test_an_answer_that_is_not_json_is_a_query_error(value: Any, why: str) -> None:
    with pytest.raises(QueryError) as err:
        run_query(_defn(Query("q", lambda ctx: value)), _state(), "q")
    assert str(err.value).startswith(  # the interpreter's words may grow (": nan")
        f"query 'q' of workflow 'wf-1' answered with a value that is not JSON: {why}"
    )


def test_an_answer_past_the_payload_limit_is_a_query_error() -> None:
    d = _defn(Query("big", lambda ctx: "x" * MAX_PAYLOAD_BYTES))
    with pytest.raises(QueryError) as err:
        run_query(d, _state(), "big")
    assert str(err.value).startswith(
        f"the answer of query 'big' of workflow 'wf-1' is {MAX_PAYLOAD_BYTES + 2:,} bytes; "
        f"the limit is {MAX_PAYLOAD_BYTES:,} bytes"
    )


def test_frozen_views_keep_their_types_and_dump_as_json() -> None:
    view = frozen({"a": [1, {"b": 2}], "m": Inp(n=1, tags=["t"]), "t": (1, [2])})
    assert isinstance(view, ReadOnlyDict) and isinstance(view["a"], ReadOnlyList)
    assert isinstance(view["m"], Inp) and isinstance(view["m"].tags, ReadOnlyList)
    assert isinstance(view["t"][1], ReadOnlyList)
    assert json.loads(json.dumps(view["a"])) == [1, {"b": 2}]
    assert view["m"].model_dump() == {"n": 1, "tags": ["t"]}
    assert frozen(view) is view
    with pytest.raises(QueryError):
        view["a"][1]["c"] = 3
    with pytest.raises(QueryError):
        view.update(x=1)
