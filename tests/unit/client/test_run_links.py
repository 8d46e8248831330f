"""A run's children as ``keel workflow show`` lists them (orchestrator/client/run_links.py):
a child whose start was refused shows the refusal, never the status of the run its id
names (issue 44, item 3)."""

from __future__ import annotations

from orchestrator.client.run_links import children_of

REFUSAL = (
    "child workflow id 'kid-fixed' of activity 'run#1/kid' names a run of workflow 'other' "
    "v1 (completed), not a child of this step; the child start is refused"
)


def _scheduled(aid: str, child: str) -> dict:
    data = {"activity_id": aid, "activity_type": "keel.child:kid", "idempotency_key": child}
    return {"type": "ActivityScheduled", "data": {**data, "attempt": 1}}


def test_a_refused_child_start_shows_the_refusal_not_the_other_runs_status() -> None:
    history = [
        _scheduled("run#1/kid", "kid-fixed"),
        _scheduled("run#1/own", "p-1:run.1.own"),
        {
            "type": "ActivityFailed",
            "data": {
                "activity_id": "run#1/kid",
                "error_type": "ChildWorkflowIdInUse",
                "message": REFUSAL,
            },
        },
    ]
    statuses = {"kid-fixed": "completed", "p-1:run.1.own": "running"}
    children = children_of(history, lambda ids: [statuses[i] for i in ids])
    assert [(c["workflow_id"], c["workflow"], c["status"]) for c in children] == [
        ("kid-fixed", "kid", f"start refused: {REFUSAL}"),
        ("p-1:run.1.own", "kid", "running"),
    ]
