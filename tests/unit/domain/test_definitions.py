"""Definitions are validated when built, digests track code, and the app resolves them."""

from __future__ import annotations

import json
import sys
import types
from datetime import timedelta

import pytest
from pydantic import BaseModel

from orchestrator.application.app import (
    AppLoadError,
    InvalidInputError,
    KeelApp,
    UnknownActivityError,
    UnknownWorkflowError,
    decider_of,
    load_app,
)
from orchestrator.domain.authoring.definitions import (
    DefinitionError,
    RetryPolicy,
    SignalWait,
    State,
    Step,
    TimerWait,
    Transition,
    WorkflowDefinition,
    duration_ms,
)
from orchestrator.examples import app as example_app


class Inp(BaseModel):
    n: int


def make(states: list[State], name: str = "w") -> WorkflowDefinition:
    return WorkflowDefinition(name, 1, Inp, states)


def done() -> State:
    return State("done", complete=lambda ctx: {})


@pytest.mark.parametrize(
    ("states", "message"),
    [
        (
            [State("s", steps=[Step("a", "x", after=["zz"])], transitions=[Transition("s")])],
            "workflow 'w' v1: state 's': step 'a' depends on unknown step 'zz'",
        ),
        (
            [
                State(
                    "s",
                    steps=[
                        Step("a", "x", after=["c"]),
                        Step("b", "x", after=["a"]),
                        Step("c", "x", after=["b"]),
                        Step("d", "x"),
                    ],
                    complete=lambda ctx: {},
                )
            ],
            "workflow 'w' v1: state 's': cycle in steps: a -> c -> b -> a",
        ),
        (
            [State("s", transitions=[Transition("nowhere")])],
            "workflow 'w' v1: state 's': transition targets unknown state 'nowhere'",
        ),
        (
            [State("s", steps=[Step("a", "x")], on_failure="gone", complete=lambda c: 1)],
            "workflow 'w' v1: state 's': on_failure targets unknown state 'gone'",
        ),
        (
            [
                State("s", wait=SignalWait("go", timeout=1, on_timeout="late"), complete=print),
            ],
            "workflow 'w' v1: state 's': on_timeout targets unknown state 'late'",
        ),
        (
            [State("s", wait=SignalWait("go", on_timeout="done"), complete=print), done()],
            "workflow 'w' v1: state 's': on_timeout without a timeout",
        ),
        ([State("s")], "workflow 'w' v1: state 's': has no transition and no terminal outcome"),
        (
            [State("s", complete=print, fail="x")],
            "workflow 'w' v1: state 's': has both complete= and fail=",
        ),
        ([done(), done()], "workflow 'w' v1: duplicate state 'done'"),
        (
            [
                State("s", steps=[Step("a", "x")], transitions=[Transition("t")]),
                State("t", steps=[Step("a", "y")], complete=print),
            ],
            "workflow 'w' v1: state 't': step 'a' already defined in state 's' "
            "(step names are unique per workflow)",
        ),
        ([State("s/1", complete=print)], "workflow 'w' v1: invalid state name 's/1'"),
        (
            [State("s", steps=[Step("a#b", "x")], complete=print)],
            "workflow 'w' v1: state 's': invalid step name 'a#b'",
        ),
        ([], "workflow 'w' v1: needs at least one state"),
        (
            [State("s", wait=TimerWait(-1), complete=print)],
            "workflow 'w' v1: state 's': a duration must be >= 0 seconds, got -1",
        ),
        (
            [State("s", steps=[Step("a", "x", start_to_close=0)], complete=print)],
            "workflow 'w' v1: state 's': step 'a': start_to_close must be > 0 seconds, got 0",
        ),
        (
            [State("s", steps=[Step("a", "x", heartbeat="5")], complete=print)],  # type: ignore[arg-type]
            "workflow 'w' v1: state 's': step 'a': heartbeat: a duration must be seconds or a "
            "timedelta, got '5'",
        ),
        (
            [State("s", steps=[Step("a", "x", on_exhausted="retry")], complete=print)],
            "workflow 'w' v1: state 's': step 'a': on_exhausted must be one of dead_letter, "
            "fail; got 'retry'",
        ),
        (
            [State("s", steps=[Step("a", "x", status_query="")], complete=print)],
            "workflow 'w' v1: state 's': step 'a': status_query must name an activity type",
        ),
    ],
)
def test_invalid_definitions(states: list[State], message: str) -> None:
    with pytest.raises(DefinitionError) as exc:
        make(states)
    assert str(exc.value) == message


def test_header_validation() -> None:
    with pytest.raises(DefinitionError, match="invalid workflow name 'a b'"):
        WorkflowDefinition("a b", 1, Inp, [done()])
    with pytest.raises(DefinitionError, match="version must be an int >= 1"):
        WorkflowDefinition("a", 0, Inp, [done()])
    with pytest.raises(DefinitionError, match="input_model must be a pydantic BaseModel class"):
        WorkflowDefinition("a", 1, dict, [done()])  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match="initial state 'zz' is not defined"):
        WorkflowDefinition("a", 1, Inp, [done()], initial="zz")
    with pytest.raises(DefinitionError, match="max_attempts must be >= 1"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(DefinitionError, match="max_elapsed: a duration must be >= 0 seconds"):
        RetryPolicy(max_elapsed=-1)
    with pytest.raises(DefinitionError, match="non_retryable must hold error_type names"):
        RetryPolicy(non_retryable=frozenset({""}))


def test_failure_policy_fields() -> None:
    policy = RetryPolicy(max_elapsed=timedelta(minutes=2), non_retryable="CardDeclined")  # type: ignore[arg-type]
    assert policy.max_elapsed_ms == 120_000
    assert policy.non_retryable == frozenset({"CardDeclined"})
    assert RetryPolicy(non_retryable=["A", "B"]).non_retryable == frozenset({"A", "B"})  # type: ignore[arg-type]
    assert RetryPolicy().max_elapsed_ms is None
    step = Step("a", "x", schedule_to_start=1.5, heartbeat=timedelta(seconds=10))
    assert step.timeout_ms("schedule_to_start") == 1500
    assert step.timeout_ms("start_to_close") is None
    assert (step.heartbeat_ms, step.report_start, step.on_exhausted) == (
        10_000,
        True,
        "dead_letter",
    )
    assert Step("a", "x", start_to_close=3).report_start is False
    assert Step("a", "x").heartbeat_ms == 0
    d = make([State("s", steps=[Step("a", "x", status_query="x_status")], complete=print)])
    assert d.activity_types == frozenset({"x", "x_status"})


def test_step_order_is_topological_and_stable() -> None:
    d = make(
        [
            State(
                "s",
                steps=[
                    Step("join", "x", after=["a", "b"]),
                    Step("a", "x"),
                    Step("b", "x", after="a"),
                    Step("c", "x"),
                ],
                complete=print,
            )
        ]
    )
    assert [s.name for s in d.step_order["s"]] == ["a", "c", "b", "join"]
    assert d.activity_types == frozenset({"x"})


def test_dag_helper_and_signal_names() -> None:
    d = WorkflowDefinition.dag("p", 2, Inp, [Step("a", "x")], output=lambda ctx: 1)
    assert list(d.states) == ["run"] and d.initial == "run" and d.version == 2
    assert example_app.get("document_review").signal_names == frozenset({"documents_added"})


def _def_with(fn: object, retry: RetryPolicy | None = None) -> WorkflowDefinition:
    return make([State("s", steps=[Step("a", "x", input=fn, retry=retry)], complete=print)])  # type: ignore[arg-type]


def test_digest_is_stable_and_tracks_code() -> None:
    base = _def_with(lambda ctx: {"n": ctx.input.n})
    same = _def_with(lambda ctx: {"n": ctx.input.n})
    assert base.digest == same.digest
    assert len(base.digest) == 64
    assert _def_with(lambda ctx: {"n": ctx.input.n + 1}).digest != base.digest  # constant
    assert _def_with(lambda ctx: {"n": ctx.input.m}).digest != base.digest  # attribute
    assert _def_with(lambda ctx: {"m": ctx.input.n}).digest != base.digest  # key
    assert _def_with(base.states["s"].steps[0].input, RetryPolicy(5)).digest != base.digest

    def closure(k: int) -> object:
        return lambda ctx: k

    assert _def_with(closure(1)).digest == _def_with(closure(1)).digest
    assert _def_with(closure(1)).digest != _def_with(closure(2)).digest


def test_digest_keeps_old_definitions_and_tracks_failure_policy() -> None:
    def one(step: Step) -> WorkflowDefinition:
        return make([State("s", steps=[step], complete=print)])

    base = one(Step("a", "x", retry=RetryPolicy(5)))
    # a definition that uses none of the newer fields describes itself as before
    assert base.describe()["states"][0]["steps"][0] == {
        "name": "a",
        "activity": "x",
        "after": [],
        "input": None,
        "retry": [5, 1000, 2.0, 60000],
    }
    assert one(Step("a", "x", retry=RetryPolicy(5), on_exhausted="dead_letter")).digest == (
        base.digest
    )
    variants = [
        Step("a", "x", retry=RetryPolicy(5, max_elapsed=60)),
        Step("a", "x", retry=RetryPolicy(5, non_retryable=frozenset({"E"}))),
        Step("a", "x", retry=RetryPolicy(5), schedule_to_start=1),
        Step("a", "x", retry=RetryPolicy(5), start_to_close=1),
        Step("a", "x", retry=RetryPolicy(5), heartbeat=1),
        Step("a", "x", retry=RetryPolicy(5), status_query="q"),
        Step("a", "x", retry=RetryPolicy(5), on_exhausted="fail"),
    ]
    digests = {one(v).digest for v in variants}
    assert len(digests) == len(variants) and base.digest not in digests


def test_digest_tracks_structure_and_schema() -> None:
    a = make([State("s", steps=[Step("a", "x")], complete=print)])
    b = make([State("s", steps=[Step("a", "y")], complete=print)])
    assert a.digest != b.digest

    class Inp2(BaseModel):
        n: str

    c = WorkflowDefinition("w", 1, Inp2, [State("s", steps=[Step("a", "x")], complete=print)])
    assert c.digest != a.digest
    assert example_app.get("document_review").describe()["states"][1]["wait"] == {
        "signal": "documents_added",
        "timeout": 7 * 86_400_000,
        "on_timeout": "rejected",
    }


def test_durations() -> None:
    assert duration_ms(1.5) == 1500
    assert duration_ms(timedelta(minutes=1)) == 60_000
    with pytest.raises(TypeError):
        duration_ms("5")  # type: ignore[arg-type]


def test_parse_input_names_the_field() -> None:
    d = make([done()])
    assert d.parse_input('{"n": 3}') == Inp(n=3)
    assert d.parse_input({"n": 3}) == Inp(n=3)
    with pytest.raises(InvalidInputError) as exc:
        d.parse_input({"n": [1]})
    assert (
        str(exc.value)
        == "invalid input for workflow 'w' v1: field 'n': Input should be a valid integer"
    )


# ---------------------------------------------------------------------------
# KeelApp
# ---------------------------------------------------------------------------


def test_app_registry_and_lookup() -> None:
    app = KeelApp("t")

    @app.activity("x", input=Inp, output=Inp)
    def handler(inp: Inp) -> Inp:
        return inp

    @app.activity("y")
    async def async_handler(inp: dict) -> dict:
        return inp

    d1 = app.workflow(make([State("s", steps=[Step("a", "x")], complete=print)]))
    d2 = app.workflow(
        WorkflowDefinition("w", 2, Inp, [State("s", steps=[Step("a", "y")], complete=print)])
    )
    assert app.latest("w") is d2
    assert app.get("w", 1) is d1
    assert app.handler("x").fn is handler and not app.handler("x").is_async
    assert app.handler("y").is_async and app.handler("y").input_model is None
    assert app.validate_start("w", None, {"n": 1}) is d2
    assert app.validate_start("w", 1, '{"n": 1}') is d1
    assert decider_of(app).definitions == {("w", 1): d1, ("w", 2): d2}


def test_app_errors_are_clear() -> None:
    app = example_app
    with pytest.raises(UnknownWorkflowError) as exc:
        app.validate_start("nope", None, {})
    assert str(exc.value) == (
        "unknown workflow 'nope'; known workflows: checks_batch, document_review, invoice_batch, "
        "invoice_posting, invoice_posting_patient, parallel_checks, payment_approval, slow_step, "
        "summaries_batch, three_step, timer_demo, timers_batch, travel_booking"
    )
    # Keel's built-ins (keel.schedule) are left out of the list: they are not started by name
    from orchestrator.domain.authoring.definitions import resolve_definition

    with_builtin = {("keel.schedule", 1): app.get("three_step", 1), **app.definitions}
    with pytest.raises(UnknownWorkflowError) as exc:
        resolve_definition(with_builtin, "nope", None)
    assert "keel.schedule" not in str(exc.value)
    assert str(exc.value).endswith("three_step, timer_demo, timers_batch, travel_booking")
    with pytest.raises(UnknownWorkflowError) as exc:
        app.validate_start("three_step", 2, {})
    assert str(exc.value) == "unknown version 2 of workflow 'three_step'; known versions: 1"
    with pytest.raises(InvalidInputError) as bad:
        app.validate_start("document_review", None, {"documnt": "x"})
    assert str(bad.value) == (
        "invalid input for workflow 'document_review' v1: field 'document': Field required; "
        "field 'documnt': Extra inputs are not permitted"
    )
    with pytest.raises(InvalidInputError) as bad:
        app.validate_start("three_step", None, "{n: 1}")
    assert str(bad.value).startswith("input for workflow 'three_step' v1 is not valid JSON: ")
    assert isinstance(bad.value, ValueError)


def test_app_checks_activity_handlers() -> None:
    app = KeelApp("t")
    app.workflow(make([State("s", steps=[Step("a", "remote_thing")], complete=print)]))
    with pytest.raises(UnknownActivityError) as exc:
        decider_of(app)
    assert str(exc.value) == (
        "workflow 'w' v1: step 'a' uses activity 'remote_thing', which has no handler and is "
        "not declared (use @app.activity or app.declare_activity)"
    )
    app.declare_activity("remote_thing")
    decider_of(app)
    app.workflow(
        make(
            [State("s", steps=[Step("a", "remote_thing", status_query="lookup")], complete=print)],
            name="w2",
        )
    )
    with pytest.raises(UnknownActivityError) as exc:
        app.check()
    assert str(exc.value) == (
        "workflow 'w2' v1: step 'a' uses status query 'lookup', which has no handler and is "
        "not declared (use @app.activity or app.declare_activity)"
    )
    app.declare_activity("lookup")
    app.check()
    with pytest.raises(UnknownActivityError, match="no handler for activity 'remote_thing'"):
        app.handler("remote_thing")


def test_same_version_other_contents_is_refused() -> None:
    app = KeelApp("t")
    app.workflow(make([State("s", complete=lambda ctx: 1)]))
    app.workflow(make([State("s", complete=lambda ctx: 1)]))  # identical: fine
    with pytest.raises(DefinitionError, match="already registered with other contents"):
        app.workflow(make([State("s", complete=lambda ctx: 2)]))


def test_load_app() -> None:
    assert load_app("orchestrator.examples:app") is example_app
    module = types.ModuleType("keel_test_fake_app")
    module.thing = 42  # type: ignore[attr-defined]
    sys.modules["keel_test_fake_app"] = module
    try:
        cases = {
            "orchestrator.examples": (
                "--app must look like 'module:attr', got 'orchestrator.examples'"
            ),
            "no_such_module_xyz:app": "cannot import module 'no_such_module_xyz': "
            "No module named 'no_such_module_xyz'",
            "keel_test_fake_app:app": "module 'keel_test_fake_app' has no attribute 'app'",
            "keel_test_fake_app:thing": "'keel_test_fake_app:thing' is a int, not a KeelApp",
        }
        for spec, message in cases.items():
            with pytest.raises(AppLoadError) as exc:
                load_app(spec)
            assert str(exc.value) == message
    finally:
        del sys.modules["keel_test_fake_app"]


def test_examples_handlers() -> None:
    h = example_app.handler
    review = h("review_document")
    assert review.fn(review.input_model(documents=["a"])).decision == "needs_documents"  # type: ignore[misc]
    assert review.fn(review.input_model(documents=["a", "b", "c"])).decision == "approved"  # type: ignore[misc]
    assert review.fn(review.input_model(documents=["a", "Fraud", "c"])).decision == "rejected"  # type: ignore[misc]
    three = [h(t).fn(h(t).input_model(n=3)).model_dump() for t in ("add_one", "double", "square")]  # type: ignore[misc]
    assert three == [{"n": 4}, {"n": 6}, {"n": 9}]
    combine = h("combine_checks")
    assert combine.fn(combine.input_model(a=1, b=2, c=3)).value == 6  # type: ignore[misc]
    assert json.loads(
        example_app.get("timer_demo").parse_input('{"seconds": 0.5}').model_dump_json()
    ) == {"seconds": 0.5}
