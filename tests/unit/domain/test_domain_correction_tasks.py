"""Correction tasks in the pure domain: ``HumanTask(correction=Model)``.

The opened task records the model's JSON schema; an approval must carry data valid
against the model (refused with the exact validation error otherwise), which
``HumanTaskDecided`` records in canonical form and later states read as
``ctx.human_tasks[name]["correction"]``; a rejection carries none.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.domain import (
    CommandRejected,
    DefinitionError,
    HumanTask,
    State,
    WorkflowDefinition,
)
from orchestrator.domain.model.messages import (
    HumanTaskDecided,
    StartWorkflow,
    StateEntered,
    WorkflowCompleted,
    WorkflowFailed,
)
from orchestrator.trust.sealing import Sensitive
from tests.unit.domain.test_domain_human_tasks import T0, Harness


class Doc(BaseModel):
    document: str


class Fields(BaseModel):
    model_config = ConfigDict(extra="forbid")
    vendor: str = Field(min_length=1)
    total: float = Field(ge=0)


def _corrected(ctx: Any) -> dict[str, Any]:
    task = ctx.human_tasks["fix"]
    return {"fields": task["correction"], "by": task["actor"]}


def _rejected(ctx: Any) -> dict[str, Any]:
    return {"fields": ctx.human_tasks["fix"]["correction"], "status": "rejected"}


def correction_flow(**overrides: Any) -> WorkflowDefinition:
    task: dict[str, Any] = {
        "role": "approver",
        "operation": lambda ctx: {"resource": "doc.correct", "arguments": ctx.input_dict},
        "evidence": lambda ctx: {"raw": ctx.input_dict["document"]},
        "on_approve": "done",
        "on_reject": "rejected",
        "expires": timedelta(days=1),
        "correction": Fields,
    }
    task.update(overrides)
    return WorkflowDefinition(
        "approval",  # the harness starts "approval"
        1,
        Doc,
        [
            State("ask", wait=HumanTask("fix", **task)),
            State("done", complete=_corrected),
            State("rejected", complete=_rejected),
        ],
    )


def started() -> Harness:
    h = Harness(correction_flow())
    h.send(StartWorkflow("approval", None, '{"document": "{vendor: ACME"}'), at=T0, mid="run-1")
    return h


def test_the_opened_task_records_the_models_json_schema() -> None:
    h = started()
    assert json.loads(h.task.correction_schema_json) == Fields.model_json_schema()
    assert json.loads(h.task.evidence_json) == {"raw": "{vendor: ACME"}


def test_a_valid_correction_is_recorded_canonically_and_read_by_later_states() -> None:
    h = started()
    events = h.decide("approve", T0 + 5, correction_json='{"total": 12, "vendor": "ACME"}')
    decided = events[0]
    assert isinstance(decided, HumanTaskDecided)
    assert decided.correction_json == '{"total":12.0,"vendor":"ACME"}'
    assert isinstance(events[1], StateEntered) and events[1].state == "done"
    done = events[-1]
    assert isinstance(done, WorkflowCompleted)
    assert json.loads(done.output_json) == {
        "fields": {"vendor": "ACME", "total": 12.0},
        "by": "alice",
    }


def test_an_invalid_correction_is_refused_with_the_exact_validation_error() -> None:
    h = started()
    tid = h.task.task_id
    what = f"approve of human task '{tid}' by 'alice'"
    with pytest.raises(CommandRejected) as exc:
        h.decide("approve", T0 + 5, correction_json='{"vendor": "", "total": -1, "x": 1}')
    assert str(exc.value) == (
        f"the correction of human task '{tid}' is not a valid Fields: field 'total': Input "
        "should be greater than or equal to 0; field 'vendor': String should have at least "
        f"1 character; field 'x': Extra inputs are not permitted; {what} refused"
    )
    with pytest.raises(CommandRejected) as exc:
        h.decide("approve", T0 + 5, correction_json="{vendor")
    assert str(exc.value).startswith(
        f"the correction of human task '{tid}' is not JSON (Expecting property name"
    )
    with pytest.raises(CommandRejected) as exc:
        h.decide("approve", T0 + 5)
    assert str(exc.value) == (
        f"human task '{tid}' is a correction task: an approval carries the corrected data "
        f"(JSON of Fields); {what} refused"
    )
    # nothing was recorded: a valid correction still decides it
    assert h.state is not None and h.state.human_tasks[tid].is_open
    assert isinstance(h.decide("approve", T0 + 6, correction_json='{"vendor":"A","total":1}')[0],
                      HumanTaskDecided)  # fmt: skip


def test_a_rejection_needs_no_correction_and_may_carry_none() -> None:
    h = started()
    tid = h.task.task_id
    with pytest.raises(CommandRejected) as exc:
        h.decide("reject", T0 + 5, correction_json='{"vendor":"A","total":1}')
    assert str(exc.value) == (
        f"a rejection carries no correction; reject of human task '{tid}' by 'alice' refused"
    )
    events = h.decide("reject", T0 + 5)
    assert events[0].correction_json == ""
    assert json.loads(events[-1].output_json) == {"fields": None, "status": "rejected"}


def test_a_plain_task_refuses_a_correction() -> None:
    h = Harness(correction_flow(correction=None))
    h.send(StartWorkflow("approval", None, '{"document": "d"}'), at=T0, mid="run-1")
    assert h.task.correction_schema_json == ""
    tid = h.task.task_id
    with pytest.raises(CommandRejected) as exc:
        h.decide("approve", T0 + 5, correction_json="{}")
    assert str(exc.value) == (
        f"human task '{tid}' carries no correction; approve of human task '{tid}' by 'alice' "
        "refused"
    )
    events = h.decide("approve", T0 + 5)
    assert json.loads(events[-1].output_json) == {"fields": None, "by": "alice"}


def test_the_correction_model_is_part_of_the_definition_digest() -> None:
    class Other(BaseModel):
        vendor: str

    plain = correction_flow(correction=None).digest
    assert correction_flow().digest != plain
    assert correction_flow(correction=Other).digest != correction_flow().digest


def test_a_correction_must_be_a_model_without_sensitive_fields() -> None:
    with pytest.raises(DefinitionError, match="correction must be a pydantic model"):
        correction_flow(correction=dict)

    class Secret(BaseModel):
        api_key: Sensitive[str]

    with pytest.raises(DefinitionError) as exc:
        correction_flow(correction=Secret)
    assert str(exc.value) == (
        "workflow 'approval' v1: state 'ask': human task 'fix': correction model Secret has a "
        "sensitive field; a correction is recorded in the clear"
    )


def test_a_rejected_correction_without_on_reject_fails_the_run() -> None:
    h = Harness(correction_flow(on_reject=None))
    h.send(StartWorkflow("approval", None, '{"document": "d"}'), at=T0, mid="run-1")
    events = h.decide("reject", T0 + 5)
    assert isinstance(events[-1], WorkflowFailed)
