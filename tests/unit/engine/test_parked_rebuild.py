"""A process without a run's version rebuilds its partition: the run is parked, not quarantined.

On the in-memory adapter (the same on the real broker: tests/integration/test_parking.py).
A ``gated`` v2 run waits; a process holding only v1 takes the partition over, with or
without a checkpoint to start from. It must hold the run (it cannot fold its history
without the definition), park its commands with the reason, never checkpoint a state it
did not fold, and leave the history so a process with v2 folds it, decides the parked
commands and finishes the run on v2's path.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.client.dead_letters import Letter, LetterKind
from orchestrator.domain.lifecycle.missing_versions import is_parked, parked_version
from orchestrator.domain.model.messages import StartWorkflow, WorkflowNeedsAttention
from orchestrator.domain.model.vocabulary import WorkflowStatus
from orchestrator.engine.parked_redrive import parked_to_redrive
from orchestrator.engine.recovery import CHECKPOINT_KEY
from orchestrator.io.partitioning import partition_for
from orchestrator.payload_schemas.codec import Codec
from tests.integration import versions_app
from tests.unit.memory_rig import MemoryRig

codec = Codec()


def _start(rig: MemoryRig, wf: str, version: int) -> None:
    rig.send(wf, StartWorkflow("gated", version, json.dumps({"order": 1})), f"start-{wf}")


def _takeover(rig: MemoryRig, app: Any) -> None:
    rig.app = app
    rig.orch = rig.new_orchestrator()
    rig.orch.step()  # assignment: the partitions are rebuilt


def _parked_letters(rig: MemoryRig) -> list[Any]:
    return [e for e in rig.letters() if e.payload.reason.startswith("parked: ")]


@pytest.mark.parametrize("checkpointed", [False, True], ids=["from-events", "from-checkpoint"])
def test_a_v1_process_parks_a_v2_run_and_a_v2_process_finishes_it(
    tmp_path, checkpointed: bool
) -> None:
    rig = MemoryRig(tmp_path, app=versions_app.app)
    _start(rig, "g-2", 2)
    _start(rig, "g-1", 1)
    rig.run()
    waiting = rig.orch.partitions[partition_for(b"g-2", 4)].get("g-2")
    assert waiting is not None and waiting.status == "waiting"
    if checkpointed:
        rig.orch.checkpoint()
    recorded = len(rig.events("g-2"))

    _takeover(rig, versions_app.app_v1)
    p = partition_for(b"g-2", 4)
    ps = rig.orch.partitions[p]
    assert ps.quarantined == {}
    rig.signal("g-2", "go", {})
    rig.signal("g-1", "go", {})
    rig.run()
    # the v1 run goes on; the v2 run records once why it waits, and its command is kept
    other = rig.orch.partitions[partition_for(b"g-1", 4)].get("g-1")
    assert other is not None and other.status == "completed"
    events = rig.events("g-2")
    assert len(events) == recorded + 1
    need = events[-1].payload
    assert isinstance(need, WorkflowNeedsAttention)
    assert need.reason == (
        f"version missing: workflow 'g-2' runs 'gated' v2 (digest "
        f"{versions_app.GATED_V2.digest[:12]}), which this process does not have; deploy it, "
        "then `keel dlq redrive` the run's parked commands"
    )
    [letter] = _parked_letters(rig)
    assert parked_version(letter.payload.reason) == ("gated", 2)
    # a second command is kept too, and records nothing; no quarantine, no crash
    rig.signal("g-2", "go", {})
    rig.run()
    assert len(rig.events("g-2")) == recorded + 1 and len(_parked_letters(rig)) == 2
    assert rig.orch.partitions[p].quarantined == {}

    # a checkpoint does not write what this process could not fold, nor pass its events
    rig.orch.checkpoint()
    snaps = [codec.decode(r.value or b"") for r in rig.broker.records(rig.topics.snapshots)]
    if not checkpointed:
        assert "g-2" not in {s.workflow_id for s in snaps}
        first = min(r.offset for r in rig.broker.records(rig.topics.events) if r.key == b"g-2")
        marker = [s for s in snaps if s.workflow_id == CHECKPOINT_KEY and s.seq == 0]
        assert marker[-1].payload.events_offset <= first

    _takeover(rig, versions_app.app_v1)  # the v1 process restarts: still parked
    held = rig.orch.partitions[p].get("g-2")
    assert held is not None and is_parked(held)
    assert rig.orch.partitions[p].quarantined == {}

    _takeover(rig, versions_app.app)  # a process with v2 joins and folds the real history
    state = rig.orch.partitions[p].get("g-2")
    assert state is not None and is_parked(state) and state.unfolded_from is None
    assert state.seq == recorded + 1 and state.status == WorkflowStatus.NEEDS_ATTENTION
    for letter in _parked_letters(rig):  # what the redrive sends: the command, again
        rig.broker.produce(rig.topics.commands, value=letter.payload.value, key=b"g-2")
    rig.run()
    final = rig.orch.partitions[p].get("g-2")
    assert final is not None and final.status == WorkflowStatus.COMPLETED
    assert json.loads(final.output_json or "") == {"path": "v2", "order": 1}


def _letter(reason: str, partition: int, kind: str = LetterKind.RECORD) -> Letter:
    return Letter("id", kind, "wf", 0, reason, "mem.commands", partition, 3, None, None, b"")


def test_only_open_parked_letters_of_owned_partitions_and_known_versions_are_redriven() -> None:
    parked = (
        "parked: workflow 'a' runs 'gated' v2 (digest 0123456789ab), which this process "
        "does not have; deploy it, then `keel dlq redrive` the run's parked commands; "
        "signal 'go' kept"
    )
    letters = [
        _letter(parked, 1),
        _letter(parked, 2),  # another partition
        _letter(parked.replace("v2", "v3"), 1),  # a version this process lacks too
        _letter("rejected: workflow 'a' does not exist", 1),
        _letter(parked, 1, LetterKind.ACTIVITY),
    ]
    due = parked_to_redrive(letters, {("gated", 1), ("gated", 2)}, {1}, "mem.commands")
    assert due == [letters[0]]
    assert parked_version("rejected: workflow 'x' runs 'gated' v2 (digest 01), which") is None
