"""Fan-out steps on exact event sequences (docs/fan-out.md).

Items dispatched in input order up to ``max_concurrency``, each its own logical
activity and idempotency key; results in input order whatever order items end in; the
three item-failure policies; a list that changes between decisions; the item limit;
and the definition errors.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from pydantic import BaseModel

from orchestrator.domain import Decider, DefinitionError, WorkflowState, idempotency_key
from orchestrator.domain.authoring.definitions import (
    RetryPolicy,
    State,
    Step,
    WorkflowDefinition,
)
from orchestrator.domain.history.invariants import check_history
from orchestrator.domain.model.limits import MAX_FAN_OUT_ITEMS
from orchestrator.domain.model.messages import (
    ActivityScheduled,
    CompleteActivity,
    Envelope,
    FailActivity,
    FanOutItemFailed,
    FanOutStarted,
    StartWorkflow,
    WorkflowCompleted,
    WorkflowFailed,
)
from orchestrator.domain.model.vocabulary import ItemFailurePolicy

T0 = 1_700_000_000_000


class Batch(BaseModel):
    pages: list[int]


def _pages(ctx: Any) -> list[dict[str, int]]:
    return [{"page": p} for p in ctx.input.pages]


def _flow(name: str, **fan: Any) -> WorkflowDefinition:
    """Split, OCR every page (the fan-out), then sum: the step after the fan-out reads
    its results in input order."""
    return WorkflowDefinition(
        name,
        1,
        Batch,
        [
            State(
                "run",
                steps=[
                    Step("ocr", "ocr", for_each=_pages, retry=RetryPolicy(max_attempts=1), **fan),
                    Step("sum", "sum", after=["ocr"], input=lambda ctx: ctx.results["ocr"]),
                ],
                complete=lambda ctx: {
                    "ocr": ctx.results["ocr"],
                    "failures": ctx.item_failures.get("ocr", {}),
                },
            )
        ],
    )


def _changing(ctx: Any) -> list[int]:
    return [1, 2, 3] if "probe" not in ctx.results else [1, 2, 3, 4]


changing = WorkflowDefinition(
    "changing",
    1,
    Batch,
    [
        State(
            "run",
            steps=[
                Step("probe", "probe"),
                Step("ocr", "ocr", for_each=_changing, max_concurrency=1),
            ],
            complete=lambda ctx: ctx.results["ocr"],
        )
    ],
)

DECIDER = Decider(
    [
        _flow("fast", max_concurrency=2),
        _flow("collect", on_item_failure=ItemFailurePolicy.COLLECT),
        _flow("tolerate", on_item_failure="tolerate", tolerate=1),
        changing,
    ]
)


class Harness:
    def __init__(self) -> None:
        self.state: WorkflowState | None = None
        self.history: list[Envelope[Any]] = []
        self.n = 0

    def send(self, payload: Any) -> list[Any]:
        self.n += 1
        env = Envelope(f"cmd-{self.n}", "wf-1", "", 0, type(payload).__name__, T0 + self.n, payload)
        self.state, events = DECIDER.handle(self.state, env, now_ms=T0 + self.n)
        self.history.extend(events)
        assert DECIDER.fold(self.history) == self.state
        assert WorkflowState.from_json(self.state.to_json()) == self.state
        return [e.payload for e in events]

    def start(self, name: str, pages: list[int]) -> list[Any]:
        return self.send(StartWorkflow(name, 1, json.dumps({"pages": pages})))

    def ok(self, index: int, result: Any) -> list[Any]:
        return self.send(CompleteActivity(f"run#1/ocr[{index}]", 1, json.dumps(result)))

    def fail(self, index: int) -> list[Any]:
        aid = f"run#1/ocr[{index}]"
        return self.send(FailActivity(aid, 1, "permanent", "Unreadable", f"page {index} blank"))

    @property
    def s(self) -> WorkflowState:
        assert self.state is not None
        return self.state

    def scheduled(self) -> list[str]:
        return [
            e.payload.activity_id for e in self.history if isinstance(e.payload, ActivityScheduled)
        ]


def _digest(items: list[Any]) -> str:
    text = json.dumps(items, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def test_items_run_at_most_max_concurrency_at_a_time_and_results_keep_input_order() -> None:
    h = Harness()
    events = h.start("fast", [10, 20, 30, 40, 50])
    started = next(e for e in events if isinstance(e, FanOutStarted))
    assert started == FanOutStarted("ocr", 5, _digest([{"page": p} for p in (10, 20, 30, 40, 50)]))
    assert h.scheduled() == ["run#1/ocr[0]", "run#1/ocr[1]"]
    first = [e for e in h.history if isinstance(e.payload, ActivityScheduled)]
    assert [e.payload.input_json for e in first] == ['{"page":10}', '{"page":20}']
    # the second item ends first: the third goes out, no more than two in flight
    assert [e.activity_id for e in h.ok(1, "b") if isinstance(e, ActivityScheduled)] == [
        "run#1/ocr[2]"
    ]
    h.ok(0, "a")
    h.ok(3, "d")
    assert h.scheduled()[-1] == "run#1/ocr[4]"
    h.ok(4, "e")
    assert h.s.steps_remaining == {"ocr", "sum"}
    events = h.ok(2, "c")
    (sum_step,) = [e for e in events if isinstance(e, ActivityScheduled)]
    assert sum_step.activity_id == "run#1/sum"
    assert sum_step.input_json == '["a","b","c","d","e"]'
    keys = {
        e.payload.idempotency_key for e in h.history if isinstance(e.payload, ActivityScheduled)
    }
    assert keys == {idempotency_key("wf-1", "ocr", n) for n in range(1, 6)} | {
        idempotency_key("wf-1", "sum", 1)
    }
    events = h.send(CompleteActivity("run#1/sum", 1, "15"))
    assert events[-1] == WorkflowCompleted('{"failures":{},"ocr":["a","b","c","d","e"]}')
    assert check_history(h.history) == []


def test_a_fan_out_over_no_items_completes_at_once() -> None:
    h = Harness()
    events = h.start("fast", [])
    assert FanOutStarted("ocr", 0, _digest([])) in events
    assert [e.activity_id for e in events if isinstance(e, ActivityScheduled)] == ["run#1/sum"]
    assert json.loads(events[-1].input_json) == []


def test_fail_fast_fails_the_step_with_the_item_and_its_reason() -> None:
    h = Harness()
    h.start("fast", [1, 2, 3])
    events = h.fail(1)
    assert events[-1] == WorkflowFailed(
        "step 'ocr[1]' (ocr) failed permanently: Unreadable: page 1 blank "
        "(item 1 of 3; the fan-out fails fast)"
    )
    assert check_history(h.history) == []


def test_collect_records_each_failed_item_as_null_and_goes_on() -> None:
    h = Harness()
    h.start("collect", [1, 2, 3])
    assert h.scheduled() == ["run#1/ocr[0]", "run#1/ocr[1]", "run#1/ocr[2]"]
    events = h.fail(0)
    assert (
        FanOutItemFailed(
            "run#1/ocr[0]",
            0,
            "step 'ocr[0]' (ocr) failed permanently: Unreadable: page 0 blank",
        )
        in events
    )
    h.fail(2)
    events = h.ok(1, {"text": "b"})
    assert events[-1].input_json == '[null,{"text":"b"},null]'
    events = h.send(CompleteActivity("run#1/sum", 1, "1"))
    output = json.loads(events[-1].output_json)
    assert output["ocr"] == [None, {"text": "b"}, None]
    assert output["failures"] == {
        "0": {"failure_class": "permanent", "error_type": "Unreadable", "message": "page 0 blank"},
        "2": {"failure_class": "permanent", "error_type": "Unreadable", "message": "page 2 blank"},
    }
    assert check_history(h.history) == []


def test_tolerate_goes_on_past_n_failed_items_and_fails_the_step_at_the_next() -> None:
    h = Harness()
    h.start("tolerate", [1, 2, 3])
    assert isinstance(h.fail(0)[-1], FanOutItemFailed)
    events = h.fail(1)
    assert events[-1] == WorkflowFailed(
        "step 'ocr[1]' (ocr) failed permanently: Unreadable: page 1 blank "
        "(item 1 of 3; more than the 1 failed items it tolerates)"
    )


def test_a_list_that_changes_between_decisions_fails_the_run() -> None:
    h = Harness()
    h.start("changing", [])
    assert h.scheduled() == ["run#1/probe", "run#1/ocr[0]"]
    h.send(CompleteActivity("run#1/probe", 1, "{}"))  # for_each now returns four items
    events = h.ok(0, 1)
    assert events[-1] == WorkflowFailed(
        "state 'run': for_each of step 'ocr' returned a different list than when the fan-out "
        "began (4 items, recorded 3): it may read only the input and the results of the steps "
        "it runs after"
    )


def test_more_items_than_the_limit_fail_the_run_with_the_way_out() -> None:
    h = Harness()
    events = h.start("fast", list(range(MAX_FAN_OUT_ITEMS + 1)))
    assert events[-1] == WorkflowFailed(
        "state 'run': for_each of step 'ocr' returned 1,001 items; a fan-out maps at most "
        "1,000 per state visit (split the list across continue-as-new runs: docs/fan-out.md)"
    )


@pytest.mark.parametrize(
    ("step", "message"),
    [
        (
            Step("s", "a", for_each=_pages, input=_pages),
            "a fan-out takes no input= (each item for_each returns is an input)",
        ),
        (
            Step("s", "a", max_concurrency=2),
            "max_concurrency without for_each (only a fan-out has it)",
        ),
        (
            Step("s", "a", for_each=_pages, local=True),
            "a fan-out runs on workers; it cannot be local",
        ),
        (
            Step("s", "a", for_each=_pages, max_concurrency=0),
            "max_concurrency must be an int from 1 to 1000; got 0",
        ),
        (
            Step("s", "a", for_each=_pages, on_item_failure="ignore"),
            "on_item_failure must be one of fail_fast, collect, tolerate; got 'ignore'",
        ),
        (
            Step("s", "a", for_each=_pages, on_item_failure="tolerate"),
            "tolerate must be an int >= 1; got 0",
        ),
        (
            Step("s", "a", for_each=_pages, tolerate=2),
            "tolerate=2 needs on_item_failure='tolerate'",
        ),
        (
            Step("s", "a", for_each=_pages, output=Batch),
            "a fan-out's result is a list; output= models are not supported on it",
        ),
    ],
)
def test_a_fan_out_that_cannot_work_is_refused_when_defined(step: Step, message: str) -> None:
    with pytest.raises(DefinitionError) as exc:
        WorkflowDefinition("bad", 1, Batch, [State("run", steps=[step], complete=_pages)])
    assert str(exc.value) == f"workflow 'bad' v1: state 'run': step 's': {message}"


def test_the_fan_out_options_are_part_of_the_digest() -> None:
    assert _flow("d", max_concurrency=2).digest != _flow("d", max_concurrency=3).digest
    assert _flow("d").digest != _flow("d", on_item_failure="collect").digest
