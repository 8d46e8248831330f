"""The orchestrator writes a workflow's data typed (envelope v8), the run's own knowledge
included: an activity's result by its type, a run's output by its definition."""

from __future__ import annotations

import json

from orchestrator.payload_schemas.codec import TYPED_FIELDS, Codec
from tests.unit.memory_rig import MemoryRig


def test_every_value_with_a_published_schema_is_written_typed(tmp_path) -> None:
    rig = MemoryRig(tmp_path)
    rig.start("checks-1", "parallel_checks", {"n": 2})
    rig.start("review-1", "document_review", {"document": "fraud memo"})
    rig.run()
    codec = Codec()
    typed: dict[tuple[str, str], set[str | None]] = {}
    for rec in rig.broker.records(rig.topics.events):
        value = rec.value or b""
        env, values = codec.decode(value), codec.typed_values(value)
        if env.type not in TYPED_FIELDS:
            assert values == {}
            continue
        field = TYPED_FIELDS[env.type][1]
        if values:
            assert values[field].value == json.loads(getattr(env.payload, field))
        name = values[field].fullname if values else None
        typed.setdefault((env.workflow_id, env.type), set()).add(name)
    activity = "keel.payload.activity."
    assert typed == {
        ("checks-1", "WorkflowStarted"): {"keel.payload.workflow.parallel_checks.v1.Input"},
        ("checks-1", "ActivityScheduled"): {f"{activity}check_{c}.Input" for c in "abc"}
        | {f"{activity}combine_checks.Input"},
        ("checks-1", "ActivityCompleted"): {f"{activity}check_{c}.Result" for c in "abc"}
        | {f"{activity}combine_checks.Result"},
        ("checks-1", "WorkflowCompleted"): {None},  # parallel_checks declares no output model
        ("review-1", "WorkflowStarted"): {"keel.payload.workflow.document_review.v1.Input"},
        ("review-1", "ActivityScheduled"): {f"{activity}review_document.Input"},
        ("review-1", "ActivityCompleted"): {f"{activity}review_document.Result"},
        ("review-1", "WorkflowCompleted"): {"keel.payload.workflow.document_review.v1.Output"},
    }
