"""The worker's half of the test-only seeded bug ``reexecute_on_recovery``
(docs/evaluation.md, "A seeded bug"), on the in-memory adapter: off, a worker runs each
task once; on, a starting worker's first batch sends it back to the start of its
partitions, so a task an earlier worker ran and committed runs and is reported again."""

from __future__ import annotations

from handlers.worker import Worker
from orchestrator.domain.model.messages import CompleteActivity
from orchestrator.io.memory import MemoryOutcomeSink
from orchestrator.settings import SeededBug
from tests.unit.handlers.test_worker_loop import Rig, app


def test_a_restarted_worker_with_the_seeded_bug_runs_committed_tasks_again(tmp_path):
    rig = Rig(tmp_path)
    rig.task("wf-1", "add_one", {"n": 1})
    assert rig.worker.step()
    assert [e.payload for e in rig.reports("wf-1")] == [
        CompleteActivity("run#1/step", 1, '{"n": 2}')
    ]
    assert rig.committed("wf-1") == 1

    rig.task("wf-1", "add_one", {"n": 10})
    assert rig.worker.step()  # the bug is off: the new task only
    assert len(rig.reports("wf-1")) == 2

    buggy = rig.settings.model_copy(update={"test_seeded_bug": SeededBug.REEXECUTE_ON_RECOVERY})
    restarted = Worker(
        buggy, app, adapters=(rig.new_intake(), MemoryOutcomeSink(rig.broker)), effects=rig.effects
    )
    restarted.subscribe()
    rig.task("wf-1", "add_one", {"n": 100})
    assert restarted.step()  # its first batch: back to the start, nothing run yet
    assert len(rig.reports("wf-1")) == 2
    for _ in range(20):
        if len(rig.reports("wf-1")) >= 5:
            break
        assert restarted.step()
    results = [e.payload.result_json for e in rig.reports("wf-1")]
    assert results == ['{"n": 2}', '{"n": 11}', '{"n": 2}', '{"n": 11}', '{"n": 101}']
