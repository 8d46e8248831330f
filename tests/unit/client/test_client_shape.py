"""The client's one shape (issue 45, item 4): typed run views, one send-and-await loop,
the documented parameter names (old keywords warn). No broker, no Redis."""

from __future__ import annotations

import json
import warnings

import pytest

from orchestrator.client.awaiting import await_answer, send_and_await
from orchestrator.client.run_views import RunSummary, RunView
from orchestrator.domain.model.errors import InvalidInputError
from orchestrator.domain.model.vocabulary import WorkflowStatus
from orchestrator.records.read_model_rows import row_view
from tests.unit.client.test_client_producers import _client

STORED = {
    "run_id": "r1",
    "name": "three_step_local",
    "version": "1",
    "status": "completed",
    "state": "",
    "output_json": '{"result": 19}',
    "failure_reason": "",
    "seq": "7",
    "started_at": "1000",
    "updated_at": "2000",
    "run_base_seq": "0",
    "human_tasks_json": "[]",
}
#: The keys ``keel workflow show --json`` printed, in order, when ``show`` returned a dict.
SHOW_KEYS = [
    "workflow_id", "name", "version", "status", "state", "output", "failure_reason", "run_id",
    "projection_error", "attention_reason", "continued_as_new", "human_tasks", "history", "llm",
    "parent", "children",
]  # fmt: skip


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def pause(self, left: float) -> None:
        self.now += min(left, 1.0)


def test_a_summary_is_the_row_typed_and_prints_as_the_row() -> None:
    row = row_view("wf-1", STORED)
    run = RunSummary.from_row(row)
    assert run.status is WorkflowStatus.COMPLETED and run.output == {"result": 19}
    assert (run.version, run.seq, run.state, run.reason) == (1, 7, None, None)
    assert run.as_dict() == row
    assert json.dumps(run.as_dict()) == json.dumps(row)


def test_reading_a_view_like_a_dict_still_works_but_warns() -> None:
    run = RunSummary.from_row(row_view("wf-1", STORED))
    with pytest.warns(DeprecationWarning) as caught:
        assert run["status"] == "completed" and run.get("output") == {"result": 19}
    assert str(caught[0].message) == (
        "reading a RunSummary like a dict is deprecated: use .status instead of ['status']"
    )


def test_a_run_view_prints_the_keys_show_json_printed_in_their_order() -> None:
    view = RunView(
        "wf-1", "a", 1, WorkflowStatus.RUNNING, "s", None, None, "r1", None, None, False,
        [], [], {"nodes": 0}, None, [],
    )  # fmt: skip
    assert list(view.as_dict()) == SHOW_KEYS
    assert json.dumps(view.as_dict()).startswith(
        '{"workflow_id": "wf-1", "name": "a", "version": 1, "status": "running"'
    )


def test_the_answer_is_looked_for_first_then_after_each_pause_until_the_time_is_up() -> None:
    clock, looks = _Clock(), []

    def answer() -> str | None:
        looks.append(clock.now)
        return "decided" if clock.now >= 3 else None

    assert await_answer(answer, clock.pause, 10, clock) == "decided"
    assert looks == [0, 1, 2, 3]
    clock.now, looks[:] = 0.0, []
    assert await_answer(lambda: None, clock.pause, 2.5, clock) is None
    assert clock.now == 2.5


def test_send_and_await_sends_once_and_asks_with_what_was_sent() -> None:
    clock, sent = _Clock(), []
    mid, answer = send_and_await(
        lambda: sent.append("m1") or "m1",
        lambda m: f"answer to {m}" if clock.now >= 1 else None,
        clock.pause,
        5,
        clock,
    )
    assert (mid, answer, sent) == ("m1", "answer to m1", ["m1"])


def test_start_takes_input_and_its_old_name_warns() -> None:
    client, single, _ = _client()
    nan = {"n": float("nan")}
    with pytest.raises(InvalidInputError), warnings.catch_warnings():
        warnings.simplefilter("error")
        client.start("three_step_local", input=nan, workflow_id="wf-1")
    with (
        pytest.warns(
            DeprecationWarning,
            match=r"start\(input_obj=\.\.\.\) is deprecated: use start\(input=\.\.\.\)",
        ),
        pytest.raises(InvalidInputError),
    ):
        client.start("three_step_local", input_obj=nan, workflow_id="wf-1")
    with pytest.raises(TypeError, match="got 'input' and its old name 'input_obj'"):
        client.start("three_step_local", input={}, input_obj={})
    assert single.keys == []


def test_signal_with_start_names_the_signal_as_signal_does_and_old_keywords_warn() -> None:
    client, single, _ = _client()
    sent: list[bytes] = []
    single.produce = lambda topic, key, value, **_: sent.append(value)
    doc = {"document": "cv"}
    client.signal_with_start("sws-1", "documents_added", {"document": "x"}, "document_review", doc)
    client.signal_with_start(
        "sws-1",
        name="documents_added",
        payload={"document": "x"},
        workflow="document_review",
        input=doc,
    )
    with pytest.warns(DeprecationWarning, match="signal_with_start\\(signal=...\\) is deprecated"):
        client.signal_with_start(
            "sws-1",
            signal="documents_added",
            payload={"document": "x"},
            name="document_review",
            input=doc,
        )
    commands = [client.codec.decode(v).payload for v in sent]
    assert len(commands) == 3 and len(set(map(repr, commands))) == 1
    assert (commands[0].signal_name, commands[0].name) == ("documents_added", "document_review")
