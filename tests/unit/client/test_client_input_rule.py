"""The client refuses what is not standard JSON before anything is sent (docs/limits.md),
and tells a join from a conflict on a reused workflow id (docs/workflows.md, "Reusing a
workflow id") from the recorded start alone. No broker, no Redis."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from orchestrator import InvalidInputError, WorkflowIdConflictError, WorkflowStatus
from orchestrator.client.workflow_id_reuse import RecordedStart, id_conflict, input_digest
from tests.unit.client.test_client_producers import _client

START = "input for workflow 'three_step_local' v1"
SIGNAL = "payload of signal 'documents_added'"


#: (value as the caller passes it, what follows "<what> is not valid JSON: <what> ")
NOT_STANDARD: list[tuple[Any, str]] = [
    ({"n": float("nan")}, "holds NaN, which is not standard JSON (RFC 8259)"),
    ({"n": float("inf")}, "holds Infinity, which is not standard JSON (RFC 8259)"),
    ({"n": 1, "s": "\ud800"}, "holds a lone surrogate (U+D800), which is not valid Unicode"),
    (b'{"n": 1e400}', "holds the number 1e400, which overflows a double"),
    (b'{"n": NaN}', "holds NaN, which is not standard JSON (RFC 8259)"),
    (b'{"n": 1, "s": "\\ud800"}', "holds a lone surrogate (U+D800), which is not valid Unicode"),
    (b'{"n": 1, "s": "\xff"}', "is not valid UTF-8 (byte 15: invalid start byte)"),
]


@pytest.mark.parametrize("value, why", NOT_STANDARD)
def test_start_and_start_many_refuse_what_is_not_standard_json(value: Any, why: str) -> None:
    client, single, bulk = _client()
    with pytest.raises(InvalidInputError) as one:
        client.start("three_step_local", value, "wf-1")
    assert str(one.value) == f"{START} is not valid JSON: {START} {why}"
    with pytest.raises(InvalidInputError) as many:
        client.start_many("three_step_local", [("wf-0", {"n": 0}), ("wf-1", value)])
    assert str(many.value) == str(one.value)
    assert single.keys == [] and bulk.keys == [], "nothing was sent"


@pytest.mark.parametrize("value, why", NOT_STANDARD)
def test_a_signal_refuses_what_is_not_standard_json_before_reading_anything(
    value: Any, why: str
) -> None:
    client, single, _ = _client()  # Redis is unreachable: the refusal comes first
    with pytest.raises(InvalidInputError) as refused:
        client.signal("wf-1", "documents_added", value)
    assert str(refused.value) == f"{SIGNAL} is not valid JSON: {SIGNAL} {why}"
    assert single.keys == []


def test_a_start_input_given_as_json_text_is_sent_as_its_value() -> None:
    client, _, bulk = _client()
    sent: list[bytes] = []
    bulk.produce = lambda topic, key, value, **_: sent.append(value)  # type: ignore[method-assign]
    client.start_many("three_step_local", [("wf-t", '{"n": 2}'), ("wf-b", b'{"n": 3}')])
    envelopes = [client.codec.decode(v) for v in sent]
    assert [e.payload.input_json for e in envelopes] == ['{"n": 2}', '{"n": 3}']


def test_one_id_twice_in_a_batch_must_carry_one_input() -> None:
    client, _, bulk = _client()
    client.start_many("three_step_local", [("wf-d", {"n": 1}), ("wf-d", '{ "n" : 1 }')])
    assert bulk.keys == [b"wf-d", b"wf-d"]  # the orchestrator starts the first, joins none
    with pytest.raises(InvalidInputError) as refused:
        client.start_many("three_step_local", [("wf-e", {"n": 1}), ("wf-e", {"n": 2})])
    assert (
        str(refused.value) == "workflow 'wf-e' is given twice with different inputs; start refused"
    )
    assert bulk.keys == [b"wf-d", b"wf-d"]


def _recorded(name: str = "parallel_checks", value: Any = None) -> RecordedStart:
    row = {
        "workflow_id": "order-7",
        "run_id": "5f0c",
        "name": name,
        "version": 1,
        "status": "completed",
        "started_at": 1_796_306_096_789,  # 2026-12-03T13:54:56.789Z
    }
    return RecordedStart(row, name, {"n": 3, "tags": ["a"]} if value is None else value)


def _unopened(value: Any) -> Any:
    raise AssertionError("nothing here is sealed")


def test_the_same_workflow_and_input_join_whatever_the_key_order() -> None:
    digest = input_digest({"tags": ["a"], "n": 3}, _unopened)
    assert id_conflict(_recorded(), "parallel_checks", digest, _unopened) is None


RUN = (
    "workflow id 'order-7' is taken by run 5f0c of workflow 'parallel_checks' v1 "
    "(completed, started 2026-12-03T13:54:56.789Z)"
)


@pytest.mark.parametrize(
    "name, value, differs, message",
    [
        (
            "parallel_checks",
            {"n": 4, "tags": ["a"]},
            "input",
            f"{RUN} with a different input; start refused (the same input joins that run, "
            "another id starts a new one)",
        ),
        (
            "document_review",
            {"n": 3, "tags": ["a"]},
            "workflow",
            f"{RUN}, not of 'document_review'; start refused (another id starts a new run)",
        ),
    ],
)
def test_another_input_or_workflow_is_a_conflict_naming_the_run(
    name: str, value: Any, differs: str, message: str
) -> None:
    conflict = id_conflict(_recorded(), name, input_digest(value, _unopened), _unopened)
    assert isinstance(conflict, WorkflowIdConflictError)
    assert str(conflict) == message
    fields = (conflict.workflow_id, conflict.run_id, conflict.name, conflict.version)
    assert fields == ("order-7", "5f0c", "parallel_checks", 1)
    assert conflict.status is WorkflowStatus.COMPLETED
    assert (conflict.started_at_ms, conflict.started_at) == (
        1_796_306_096_789,
        "2026-12-03T13:54:56.789Z",
    )
    assert (conflict.differs, conflict.requested) == (differs, name)
    again = pickle.loads(pickle.dumps(conflict))
    assert str(again) == message and again.run_id == "5f0c"


def test_sealed_values_are_compared_opened() -> None:
    sealed = {"$keel_sealed": "token", "kid": "k1"}

    def opened(value: Any) -> Any:
        return {**value, "card": "4242"} if value.get("card") == sealed else value

    recorded = _recorded(value={"n": 3, "card": sealed})
    same = input_digest({"n": 3, "card": "4242"}, opened)
    assert id_conflict(recorded, "parallel_checks", same, opened) is None
    other = input_digest({"n": 3, "card": "4000"}, opened)
    assert id_conflict(recorded, "parallel_checks", other, opened) is not None
