"""Schema evolution of recorded inputs and results (docs/schema-evolution.md).

The same workflow (``pricing`` v1) is shown at three moments of its code: its step's
result model ``Price`` at schema version 1, 2 and 3. Results recorded under v1 and v2
(and unversioned ones) read as v3 through the chain of upcasters; histories recorded by
the older code replay identically with the newest code; what cannot be read stops the
run in ``needs_attention`` with the reason; a missing upcaster is refused when the
definition (or the handler) is declared.
"""

from __future__ import annotations

import dataclasses
import io
import json
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from handlers.worker import Worker
from orchestrator.application.app import KeelApp
from orchestrator.client.history_io import envelope_from_dict, envelope_to_dict, write_history
from orchestrator.config.settings import Settings
from orchestrator.domain.authoring.definitions import State, Step, Transition, WorkflowDefinition
from orchestrator.domain.authoring.run_context import Context
from orchestrator.domain.authoring.upcasting import SchemaUnreadable, check_upcasters, upcast
from orchestrator.domain.history import replay
from orchestrator.domain.lifecycle.decider import Decider
from orchestrator.domain.model.errors import DefinitionError
from orchestrator.domain.model.messages import (
    ActivityCompleted,
    ActivityScheduled,
    ActivityTask,
    CompleteActivity,
    Envelope,
    StartWorkflow,
    WorkflowStarted,
)
from orchestrator.domain.model.state import WorkflowState
from orchestrator.domain.model.vocabulary import WorkflowStatus
from orchestrator.io.memory import MemoryBroker, MemoryGroupIntake, MemoryOutcomeSink
from orchestrator.payload_schemas.codec import Codec

T0 = 1_750_000_000_000


# -- the result model at three moments of the code ------------------------------------------


class PriceV1(BaseModel):
    schema_version: ClassVar[int] = 1
    amount: float


class PriceV2(BaseModel):
    schema_version: ClassVar[int] = 2
    amount: float
    currency: str

    @staticmethod
    def upcast_from_1(data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "currency": "EUR"}  # v1 prices were all in euros


class PriceV3(BaseModel):
    schema_version: ClassVar[int] = 3
    cents: int
    currency: str

    @staticmethod
    def upcast_from_1(data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "currency": "EUR"}

    @staticmethod
    def upcast_from_2(data: dict[str, Any]) -> dict[str, Any]:
        return {"cents": round(data["amount"] * 100), "currency": data["currency"]}


class Quote(BaseModel):
    item: str


def _pricing(price: type[BaseModel], cents: Any) -> WorkflowDefinition:
    """``pricing`` v1 as the code of one moment reads its result (``cents(result)``)."""

    def big(ctx: Any) -> bool:
        return bool(cents(ctx.results["price"]) >= 10_000)

    def label(ctx: Any) -> dict[str, Any]:
        r = ctx.results["price"]
        return {"label": f"{cents(r) / 100:.2f} {r.get('currency', 'EUR')}"}

    return WorkflowDefinition(
        "pricing",
        1,
        Quote,
        [
            State(
                "quote",
                steps=[Step("price", "price", output=price)],
                transitions=[Transition("big", when=big), Transition("small")],
            ),
            State("big", complete=label),
            State("small", complete=label),
        ],
    )


ERA1 = _pricing(PriceV1, lambda r: round(r["amount"] * 100))
ERA2 = _pricing(PriceV2, lambda r: round(r["amount"] * 100))
ERA3 = _pricing(PriceV3, lambda r: r["cents"])


def _cmd(payload: Any, n: int, wf: str = "wf-1") -> Envelope[Any]:
    return Envelope(f"cmd-{n}", wf, "", 0, type(payload).__name__, T0 + n, payload)


def _run(defn: WorkflowDefinition, result: dict[str, Any], version: int, wf: str = "wf-1") -> Any:
    """One run of ``defn`` whose step reports ``result`` under schema ``version``."""
    decider = Decider([defn])
    state, events = decider.handle(
        None, _cmd(StartWorkflow("pricing", 1, '{"item":"x"}'), 1, wf), T0
    )
    [sched] = [e.payload for e in events if isinstance(e.payload, ActivityScheduled)]
    done = CompleteActivity(sched.activity_id, 1, json.dumps(result), version)
    state, more = decider.handle(state, _cmd(done, 2, wf), T0 + 10)
    return state, events + more


# -- the pure chain -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("recorded", "data"),
    [
        (0, {"amount": 12.5}),  # unversioned: read as version 1
        (1, {"amount": 12.5}),
        (2, {"amount": 12.5, "currency": "EUR"}),
        (3, {"cents": 1250, "currency": "EUR"}),
    ],
)
def test_every_old_version_reads_as_the_current_one(recorded: int, data: dict[str, Any]) -> None:
    assert upcast(PriceV3, recorded, data, "it") == {"cents": 1250, "currency": "EUR"}
    PriceV3.model_validate(upcast(PriceV3, recorded, data, "it"))


def test_a_model_without_a_version_reads_everything_as_it_is() -> None:
    assert upcast(Quote, 7, {"anything": 1}, "it") == {"anything": 1}
    assert upcast(None, 2, [1], "it") == [1]


def test_what_cannot_be_read_is_a_clear_error() -> None:
    with pytest.raises(SchemaUnreadable) as newer:
        upcast(PriceV2, 3, {}, "the result of step 'price'")
    assert str(newer.value) == (
        "the result of step 'price' was written under schema version 3 of PriceV2, newer "
        "than this code's version 2; deploy code that reads it"
    )
    with pytest.raises(SchemaUnreadable, match=r"PriceV3.upcast_from_2 raised KeyError: 'amount'"):
        upcast(PriceV3, 2, {"currency": "EUR"}, "it")


def test_a_missing_upcaster_is_refused_where_the_model_is_declared() -> None:
    class Gap(BaseModel):
        schema_version: ClassVar[int] = 3
        n: int

        @staticmethod
        def upcast_from_2(data: dict[str, Any]) -> dict[str, Any]:
            return data

    expected = (
        "workflow 'gap' v1: state 'run': step 's': output: "
        "test_a_missing_upcaster_is_refused_where_the_model_is_declared.<locals>.Gap is at "
        "schema version 3 but declares no upcast_from_1; results recorded under those "
        "versions could not be read"
    )
    with pytest.raises(DefinitionError) as at_definition:
        WorkflowDefinition.dag("gap", 1, Quote, [Step("s", "s", output=Gap)], output=lambda c: 1)
    assert str(at_definition.value) == expected
    with pytest.raises(DefinitionError, match=r"input_model: .*declares no upcast_from_1"):
        WorkflowDefinition.dag("gap", 1, Gap, [Step("s", "s")], output=lambda c: 1)
    with pytest.raises(DefinitionError, match=r"activity 's': output: .*declares no upcast_from_1"):
        KeelApp("gap").activity("s", output=Gap)(lambda x: x)
    with pytest.raises(DefinitionError, match="upcast_from_3 reads a version it cannot have"):
        check_upcasters(type("Odd", (PriceV2,), {"upcast_from_3": staticmethod(dict)}), "x")


# -- through the decider ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "version"),
    [({"amount": 250.0}, 1), ({"amount": 250.0, "currency": "EUR"}, 2), ({"amount": 250.0}, 0)],
)
def test_the_newest_code_decides_on_results_recorded_under_old_versions(
    result: dict[str, Any], version: int
) -> None:
    state, events = _run(ERA3, result, version)
    done = [e.payload for e in events if isinstance(e.payload, ActivityCompleted)]
    assert done[0].schema_version == version  # recorded as the handler wrote it
    assert state.result_versions == ({"price": version} if version else {})
    assert state.current_state == "big"
    assert json.loads(state.output_json) == {"label": "250.00 EUR"}
    assert Context(ERA3, state).results["price"] == {"cents": 25_000, "currency": "EUR"}


def test_histories_recorded_under_v1_and_v2_replay_identically_with_v3_code() -> None:
    h1 = _run(ERA1, {"amount": 12.5}, 1, "era-1")[1]
    h2 = _run(ERA2, {"amount": 120.0, "currency": "EUR"}, 2, "era-2")[1]
    # through the export format, as `keel workflow export` writes and replay-check reads
    out = io.StringIO()
    write_history(h1 + h2, out)
    recorded = [envelope_from_dict(json.loads(line)) for line in out.getvalue().splitlines()]
    assert recorded == [envelope_from_dict(envelope_to_dict(e)) for e in h1 + h2]
    reports = replay.replay_history(Decider([ERA3]), recorded)
    assert [(r.workflow_id, r.ok, r.digest_changed) for r in reports] == [
        ("era-1", True, True),
        ("era-2", True, True),
    ]
    era1 = Decider([ERA3]).fold([e for e in recorded if e.workflow_id == "era-1"])
    assert era1 is not None
    assert Context(ERA3, era1).results["price"] == {"cents": 1250, "currency": "EUR"}


def test_a_result_newer_than_the_code_stops_the_run_in_needs_attention() -> None:
    state, _ = _run(ERA2, {"cents": 1, "currency": "EUR"}, 3)
    assert state.status == WorkflowStatus.NEEDS_ATTENTION
    assert state.attention_reason == (
        "state 'quote': the result of step 'price' was written under schema version 3 of "
        "PriceV2, newer than this code's version 2; deploy code that reads it"
    )


def test_results_recorded_by_the_handler_carry_its_version_through_the_codec() -> None:
    codec = Codec()
    env = _cmd(CompleteActivity("quote#1/price", 1, "{}", 3), 1)
    assert codec.decode(codec.encode(env)).payload.schema_version == 3


# -- the input ------------------------------------------------------------------------------------


class OrderV1(BaseModel):
    schema_version: ClassVar[int] = 1
    qty: int


class OrderV2(BaseModel):
    schema_version: ClassVar[int] = 2
    quantity: int

    @staticmethod
    def upcast_from_1(data: dict[str, Any]) -> dict[str, Any]:
        return {"quantity": data["qty"]}


def _ordering(model: type[BaseModel], read: Any) -> WorkflowDefinition:
    return WorkflowDefinition.dag(
        "ordering", 1, model, [Step("pick", "pick")], output=lambda ctx: {"n": read(ctx.input)}
    )


def test_an_input_recorded_under_an_old_version_reads_as_the_current_one() -> None:
    old = Decider([_ordering(OrderV1, lambda i: i.qty)])
    state, events = old.handle(None, _cmd(StartWorkflow("ordering", 1, '{"qty":4}'), 1), T0)
    assert isinstance(events[0].payload, WorkflowStarted)
    assert events[0].payload.input_schema_version == 1
    assert state is not None and state.input_schema_version == 1
    new_defn = _ordering(OrderV2, lambda i: i.quantity)
    [sched] = [e.payload for e in events if isinstance(e.payload, ActivityScheduled)]
    done, _ = Decider([new_defn]).handle(
        state, _cmd(CompleteActivity(sched.activity_id, 1, "{}"), 2), T0
    )
    assert done is not None and json.loads(done.output_json or "") == {"n": 4}
    assert Context(new_defn, done).input_dict == {"qty": 4}  # as recorded
    fresh, _ = Decider([new_defn]).handle(
        None, _cmd(StartWorkflow("ordering", 1, '{"quantity":2}'), 3), T0
    )
    assert fresh is not None and fresh.input_schema_version == 2


# -- snapshots -------------------------------------------------------------------------------------


def test_versions_survive_a_snapshot_and_old_snapshots_still_load() -> None:
    state, _ = _run(ERA3, {"amount": 1.0}, 1)
    mid = dataclasses.replace(state, input_schema_version=2)
    loaded = WorkflowState.from_json(mid.to_json())
    assert (loaded.input_schema_version, loaded.result_versions) == (2, {"price": 1})
    old = json.loads(mid.to_json())
    del old["input_schema_version"], old["result_versions"]  # a snapshot written before
    before = WorkflowState.from_dict(old)
    assert (before.input_schema_version, before.result_versions) == (0, {})
    assert "result_versions" not in WorkflowState.from_dict(old).to_dict()


# -- the worker stamps its handler's version ----------------------------------------------------


def test_the_worker_reports_the_version_of_its_handlers_output_model(tmp_path) -> None:
    from tests.unit.handlers.test_worker_loop import MemoryEffects

    app = KeelApp("priced")

    @app.activity("price", output=PriceV3)
    def price(inp: dict[str, Any]) -> PriceV3:
        return PriceV3(cents=5, currency="EUR")

    @app.activity("plain")
    def plain(inp: dict[str, Any]) -> dict[str, Any]:
        return {}

    settings = Settings(
        topic_prefix="mem",
        partitions=1,
        home=tmp_path,
        bootstrap_servers="127.0.0.1:1",
        redis_url="redis://127.0.0.1:1/0",
    )
    broker = MemoryBroker(1)
    intake = MemoryGroupIntake(broker, settings.topic("activity-tasks"), "g")
    worker = Worker(
        settings, app, adapters=(intake, MemoryOutcomeSink(broker)), effects=MemoryEffects()
    )
    worker.subscribe()
    codec = Codec()
    for activity in ("price", "plain"):
        task = ActivityTask(f"run#1/{activity}", activity, activity, "{}", 1, 1, f"k-{activity}")
        env: Envelope[Any] = Envelope(f"t-{activity}", "wf-1", "r", 0, "ActivityTask", 1, task)
        broker.produce(settings.topic("activity-tasks"), codec.encode(env), b"wf-1")
    assert worker.step()
    reports = [
        codec.decode(r.value or b"").payload for r in broker.records(settings.topic("commands"))
    ]
    assert [(r.activity_id, r.schema_version) for r in reports] == [
        ("run#1/price", 3),
        ("run#1/plain", 0),
    ]
