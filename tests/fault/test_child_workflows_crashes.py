"""A parent awaiting 40 child runs while the orchestrator is SIGKILLed (docs/child-workflows.md):
every child runs once (one WorkflowStarted per child id, each naming its parent) and the
parent completes with all 40 outputs in order."""

from __future__ import annotations

from tests.support import assert_sound_history, histories, wait_until

#: 5 at a time: eight waves, so the kill lands mid-way even on a warm, fast stack (with 20,
#: every child had completed by the first poll that saw 4 of them).
CHILDREN = 40


def _done(client) -> int:
    return sum(
        (client.projection.get(f"batch-k:run.1.checks.{i}") or {}).get("status") == "completed"
        for i in range(CHILDREN)
    )


def test_a_parent_gets_all_its_childrens_results_through_an_orchestrator_sigkill(
    settings, services, client
):
    orchestrator = services.start("orchestrator")
    services.start("worker")
    numbers = list(range(CHILDREN))
    client.start("checks_batch", {"numbers": numbers}, workflow_id="batch-k")
    wait_until(
        lambda: _done(client) >= 4, 120, "4 children completed before the kill", interval_s=0.02
    )
    assert _done(client) < CHILDREN, "the orchestrator is killed mid-way"
    services.kill(orchestrator)
    services.start("orchestrator")
    row = client.wait("batch-k", 300)
    assert row.status == "completed", row
    assert row.output == {"results": [{"result": (n + 1) + 2 * n + n * n} for n in numbers]}
    by_wf = histories(settings)
    for i in range(CHILDREN):
        wf = f"batch-k:run.1.checks.{i}"
        starts = [e.payload for e in by_wf[wf] if e.type == "WorkflowStarted"]
        assert [(s.parent_workflow_id, s.parent_activity_id) for s in starts] == [
            ("batch-k", f"run#1/checks[{i}]")
        ]
        assert_sound_history(wf, by_wf[wf])
    assert_sound_history("batch-k", by_wf["batch-k"])
    assert len(by_wf) == CHILDREN + 1
