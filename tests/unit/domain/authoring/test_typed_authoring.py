"""Typed authoring: steps that name their activity by its handler function, typed reads.

A step given a registered function is the step given its type's name (the same digest, the
same decisions on recorded runs); ``ctx.result(fn)`` reads a result as the activity's output
model, upgraded from an older schema version; a mistake is refused with a message naming it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from orchestrator.application.app import AppError, KeelApp
from orchestrator.client.history_io import read_history_file
from orchestrator.domain.authoring.activity_refs import ActivityRef, activity_ref
from orchestrator.domain.authoring.definitions import (
    Compensation,
    Context,
    DefinitionError,
    State,
    Step,
    WorkflowDefinition,
)
from orchestrator.domain.history.replay import replay_history
from orchestrator.domain.lifecycle.decider import Decider
from orchestrator.domain.model.messages import (
    ActivityScheduled,
    CompleteActivity,
    Envelope,
    FailActivity,
    StartWorkflow,
    WorkflowCompleted,
    WorkflowFailed,
    WorkflowNeedsAttention,
)
from orchestrator.examples import travel, typed_travel

TRAVEL_RUNS = Path(__file__).resolve().parents[3] / "histories" / "travel.jsonl"

app = KeelApp("typed")


class Order(BaseModel):
    sku: str
    quantity: int


class Reservation(BaseModel):
    reservation_id: str
    quantity: int


class Price(BaseModel):
    """Version 2 of a result first recorded as ``{"amount": 12.5}`` (euros)."""

    schema_version: ClassVar[int] = 2
    cents: int

    @staticmethod
    def upcast_from_1(data: dict[str, Any]) -> dict[str, Any]:
        return {"cents": round(data["amount"] * 100)}


@app.activity
async def reserve_stock(order: Order) -> Reservation:
    return Reservation(reservation_id=f"r-{order.sku}", quantity=order.quantity)


@app.activity("price_item")
def price(order: Order) -> Price:
    return Price(cents=100 * order.quantity)


@app.activity
def release(reservation: dict[str, Any]) -> dict[str, Any]:
    return {"released": reservation["reservation_id"]}


@app.activity
def reservation_status(query: dict[str, Any]) -> dict[str, Any]:
    return {"found": False}


def never_registered(order: Order) -> Reservation:
    return Reservation(reservation_id="-", quantity=0)


def the_order(ctx: Context[Order]) -> Order:
    return Order(sku=ctx.input.sku, quantity=ctx.input.quantity)


def summary(ctx: Context[Order]) -> dict[str, Any]:
    reserved = ctx.result(reserve_stock)
    return {
        "reserved": [type(reserved).__name__, reserved.reservation_id],
        "cents": ctx.result(price).cents,
        "as_model": ctx.result(Reservation, step="reserve").quantity,
    }


def shop(reserve: Any, priced: Any, undo: Any, query: Any) -> WorkflowDefinition:
    return WorkflowDefinition.dag(
        "shop",
        1,
        Order,
        [
            Step("reserve", reserve, input=the_order, status_query=query, compensation=undo),
            Step("price", priced, after="reserve", input=the_order),
        ],
        output=summary,
    )


def _cmd(payload: Any, n: int) -> Envelope[Any]:
    return Envelope(
        f"cmd-{n}", "wf-1", "", 0, type(payload).__name__, 1_700_000_000_000 + n, payload
    )


def run(defn: WorkflowDefinition, answer: Any, order: dict[str, Any]) -> list[Any]:
    """Every event of a run of ``defn`` whose activities ``answer(scheduled)`` reports:
    ``(result, schema_version)`` completes one, an exception's text fails it for good."""
    decider = Decider([defn])
    start = StartWorkflow(defn.name, defn.version, json.dumps(order))
    state, envs = decider.handle(None, _cmd(start, 0), 0)
    events = [e.payload for e in envs]
    pending = [e for e in events if isinstance(e, ActivityScheduled)]
    while pending:
        sched = pending.pop(0)
        try:
            result, version = answer(sched)
            report: Any = CompleteActivity(sched.activity_id, 1, json.dumps(result), version)
        except ValueError as exc:
            report = FailActivity(sched.activity_id, 1, "permanent", "ValueError", str(exc))
        state, envs = decider.handle(state, _cmd(report, len(events)), len(events))
        new = [e.payload for e in envs]
        events += new
        pending += [e for e in new if isinstance(e, ActivityScheduled)]
    return events


def shop_answer(sched: ActivityScheduled) -> tuple[Any, int]:
    if sched.activity_type == "price_item":
        return {"amount": 12.5}, 1  # recorded under version 1 of Price
    return {"reservation_id": "r-7", "quantity": json.loads(sched.input_json)["quantity"]}, 0


def test_registering_records_the_type_and_defaults_the_models_from_the_annotations() -> None:
    handler = app.handlers["reserve_stock"]
    assert (handler.input_model, handler.output_model, handler.is_async) == (
        Order,
        Reservation,
        True,
    )
    assert (app.handlers["price_item"].input_model, app.handlers["price_item"].output_model) == (
        Order,
        Price,
    )
    assert app.handlers["release"].input_model is None  # a dict: the handler gets JSON
    assert activity_ref(price) == ActivityRef(("price_item",), Price)
    assert activity_ref(never_registered) is None


def test_a_handler_without_a_name_needs_the_type_named() -> None:
    with pytest.raises(AppError) as exc:
        KeelApp("x").activity()(lambda req: req)
    assert str(exc.value) == (
        "activity handler 'test_a_handler_without_a_name_needs_the_type_named.<locals>.<lambda>' "
        "has no name to be its type: @app.activity('type_name')"
    )
    assert KeelApp("x").activity("echo")(lambda req: req)("same") == "same"


def test_a_step_given_functions_is_the_step_given_names_digest_and_decisions() -> None:
    typed = shop(reserve_stock, price, release, reservation_status)
    named = shop("reserve_stock", "price_item", "release", "reservation_status")
    assert typed.digest == named.digest
    assert typed.steps_by_name["reserve"] == named.steps_by_name["reserve"]
    assert typed.steps_by_name["reserve"].activity == "reserve_stock"
    assert Compensation(release, status_query=reservation_status) == Compensation(
        "release", status_query="reservation_status"
    )
    order = {"sku": "A", "quantity": 3}
    assert run(typed, shop_answer, order) == run(named, shop_answer, order)


def test_typed_reads_decode_through_the_output_model_and_upcast_old_versions() -> None:
    events = run(
        shop(reserve_stock, price, release, reservation_status),
        shop_answer,
        {"sku": "A", "quantity": 3},
    )
    assert json.loads(events[-1].output_json) == {
        "reserved": ["Reservation", "r-7"],
        "cents": 1250,  # {"amount": 12.5} of version 1, upgraded to version 2
        "as_model": 3,
    }


def test_a_recorded_result_the_model_cannot_read_stops_the_run_for_attention() -> None:
    def misfit(sched: ActivityScheduled) -> tuple[Any, int]:
        if sched.activity_type == "price_item":
            return {"cents": "many"}, 2
        return shop_answer(sched)

    events = run(
        shop(reserve_stock, price, release, reservation_status), misfit, {"sku": "A", "quantity": 1}
    )
    assert events[-1] == WorkflowNeedsAttention(
        "",
        "state 'run': the result of step 'price' does not match Price: "
        "field 'cents': Input should be a valid integer, unable to parse string as an integer",
    )


def test_the_typed_travel_example_decides_as_travel_booking_on_its_recorded_runs() -> None:
    typed = typed_travel.travel_booking_typed
    as_v1 = WorkflowDefinition("travel_booking", 1, typed.input_model, list(typed.states.values()))
    reports = replay_history(Decider([as_v1]), read_history_file(TRAVEL_RUNS))
    assert len(reports) == 3
    assert all(r.ok and r.digest_changed and r.folded_only == 0 for r in reports)
    # the bundled travel_booking names its activities by function, and keeps its digest
    assert not any(
        r.digest_changed
        for r in replay_history(Decider([travel.travel_booking]), read_history_file(TRAVEL_RUNS))
    )


def test_a_function_never_registered_is_refused_naming_it() -> None:
    message = (
        "step 'reserve': function 'never_registered' is not a registered activity "
        "(decorate it with @app.activity, or name the activity type as a string)"
    )
    with pytest.raises(DefinitionError) as exc:
        Step("reserve", never_registered)
    assert str(exc.value) == message
    with pytest.raises(DefinitionError) as exc:
        Step("reserve", "reserve_stock", status_query=never_registered)
    assert str(exc.value) == message.replace("'reserve':", "'reserve': status_query:")
    with pytest.raises(DefinitionError) as exc:
        Step("reserve", "reserve_stock", compensation=never_registered)
    assert str(exc.value) == message.replace("'reserve':", "'reserve': compensation:")


def test_a_function_registered_under_two_types_must_be_named_by_type() -> None:
    def twice(order: Order) -> Order:
        return order

    KeelApp("a").activity("first_type")(twice)
    KeelApp("b").activity("second_type")(twice)
    with pytest.raises(DefinitionError) as exc:
        Step("s", twice)
    assert str(exc.value) == (
        f"step 's': function '{twice.__qualname__}' is registered as activity types "
        "'first_type', 'second_type'; name the one meant as a string"
    )


def _reading(output: Any, *steps: Step) -> WorkflowDefinition:
    return WorkflowDefinition("reads", 1, Order, [State("run", steps=steps, complete=output)])


def _failure(defn: WorkflowDefinition, answer: Any = shop_answer) -> str:
    last = run(defn, answer, {"sku": "A", "quantity": 2})[-1]
    assert isinstance(last, WorkflowFailed), last
    return last.reason


def test_ctx_result_of_an_activity_two_steps_run_needs_the_step() -> None:
    def ambiguous(ctx: Context[Order]) -> int:
        return ctx.result(reserve_stock).quantity

    def chosen(ctx: Context[Order]) -> int:
        return ctx.result(reserve_stock, step="second").quantity

    steps = (
        Step("first", reserve_stock, input=the_order),
        Step("second", reserve_stock, input=the_order),
    )
    assert _failure(_reading(ambiguous, *steps)) == (
        "state 'run': output raised DefinitionError: workflow 'reads' v1: ctx.result: "
        "activity 'reserve_stock' runs in steps first, second; say which with step="
    )
    done = run(_reading(chosen, *steps), shop_answer, {"sku": "A", "quantity": 2})[-1]
    assert isinstance(done, WorkflowCompleted) and done.output_json == "2"


def test_misdirected_typed_reads_are_refused_with_the_fix() -> None:
    def absent(ctx: Context[Order]) -> Any:
        return ctx.result(price)

    def wrong_step(ctx: Context[Order]) -> Any:
        return ctx.result(reserve_stock, step="nope")

    def no_step(ctx: Context[Order]) -> Any:
        return ctx.result(Reservation)

    def fan_out_read(ctx: Context[Order]) -> Any:
        return ctx.result(reserve_stock)

    one = Step("only", reserve_stock, input=the_order)
    prefix = "state 'run': output raised DefinitionError: workflow 'reads' v1: ctx.result"
    assert _failure(_reading(absent, one)) == f"{prefix}: no step runs activity 'price_item'"
    assert _failure(_reading(wrong_step, one)) == (
        f"{prefix}: step 'nope' does not run 'reserve_stock'"
    )
    assert _failure(_reading(no_step, one)) == f"{prefix}(Reservation): needs step="
    each = Step("each", reserve_stock, for_each=lambda ctx: [ctx.input_dict, ctx.input_dict])
    assert _failure(_reading(fan_out_read, each)) == (
        f"{prefix}: step 'each' is a fan-out (its result is a list): read it with ctx.item_results"
    )


def test_item_results_are_typed_in_input_order_with_none_for_failed_items() -> None:
    def items(ctx: Context[Order]) -> list[Order]:
        return [Order(sku=s, quantity=n) for n, s in enumerate("ABC", 1)]

    def output(ctx: Context[Order]) -> list[Any]:
        return [
            None if r is None else [type(r).__name__, r.quantity]
            for r in ctx.item_results(reserve_stock)
        ]

    def answer(sched: ActivityScheduled) -> tuple[Any, int]:
        item = json.loads(sched.input_json)
        if item["sku"] == "B":
            raise ValueError("out of stock")
        return {"reservation_id": item["sku"], "quantity": item["quantity"]}, 0

    each = Step("each", reserve_stock, for_each=items, on_item_failure="collect")
    done = run(_reading(output, each), answer, {"sku": "-", "quantity": 0})[-1]
    assert json.loads(done.output_json) == [["Reservation", 1], None, ["Reservation", 3]]
