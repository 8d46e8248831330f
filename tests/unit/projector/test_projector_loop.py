"""The projector loop on the in-memory adapter: fold, write, skip poison, hold a failed batch.

The events come from a real orchestrator loop on the same in-memory broker
(``tests.unit.memory_rig.MemoryRig``). The same behaviour on Kafka and Redis:
tests/integration/test_read_model.py and test_projector_outage.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.domain.model.errors import UnavailableError
from orchestrator.domain.model.messages import WorkflowStarted
from orchestrator.io.memory import MemoryGroupIntake, MemoryReadModel
from orchestrator.io.partitioning import partition_for
from orchestrator.io.ports import ConsumerReset, Stopping
from orchestrator.projector.projector import HEALTH_EVERY_S, Projector
from orchestrator.records.clock import ManualClock
from orchestrator.records.envelopes import runtime_envelope
from tests.unit.memory_rig import MemoryRig, codec

GROUP = "mem.projector"


class Rig:
    def __init__(self, tmp_path, clock: ManualClock | None = None) -> None:
        self.orch = MemoryRig(tmp_path)
        self.broker = self.orch.broker
        self.events = self.orch.topics.events
        self.feed = MemoryGroupIntake(self.broker, self.events, GROUP)
        self.store = MemoryReadModel(self.broker)
        self.projector = Projector(
            self.orch.settings,
            self.orch.app,
            adapters=(self.feed, self.store),
            **({"clock": clock} if clock is not None else {}),
        )
        self.projector.subscribe()

    def committed(self, wf: str) -> int | None:
        return self.broker.committed.get((GROUP, self.events, partition_for(wf.encode(), 4)))

    def end_of(self, wf: str) -> int:
        return len(self.broker.log(self.events)[partition_for(wf.encode(), 4)])

    def raw_event(self, wf: str, seq: int, payload: Any) -> None:
        env = runtime_envelope(f"{wf}/raw/{seq}", wf, "run-x", payload, 1, seq=seq)
        key = wf.encode()
        self.broker.produce(self.events, codec.encode(env), key)


def test_events_are_folded_written_and_their_offsets_committed(tmp_path):
    rig = Rig(tmp_path)
    rig.orch.start("wf-1", "three_step", {"n": 2})
    rig.orch.start("wf-2", "three_step", {"n": 3})
    rig.orch.run()
    applied = rig.projector.step()
    assert applied == len(rig.orch.events())
    assert rig.store.status("wf-1") == "completed"
    assert json.loads(rig.store.get("wf-1")["output_json"]) == {"n": 36}
    assert [h["seq"] for h in rig.store.history("wf-1")] == [e.seq for e in rig.orch.events("wf-1")]
    assert rig.store.counts() == {"completed": 2}
    assert rig.committed("wf-1") == rig.end_of("wf-1")
    assert rig.projector.last_applied_at is not None
    assert rig.store.health[rig.projector.health_key]  # published for projections status


def test_a_replayed_batch_changes_nothing(tmp_path):
    rig = Rig(tmp_path)
    rig.orch.start("wf-1", "three_step", {"n": 2})
    rig.orch.run()
    rig.projector.step()
    history = rig.store.history("wf-1")
    rig.feed.rewind(partition_for(b"wf-1", 4), 0)  # e.g. a crash before the commit
    assert rig.projector.step() == 0
    assert rig.store.history("wf-1") == history


def test_a_poison_event_is_skipped_for_its_workflow_and_the_batch_goes_on(tmp_path):
    rig = Rig(tmp_path)
    rig.orch.start("wf-1", "three_step", {"n": 1})
    rig.orch.start("wf-2", "three_step", {"n": 1})
    rig.orch.run()
    seq = len(rig.orch.events("wf-1"))
    rig.raw_event("wf-1", seq + 5, WorkflowStarted("three_step", 1, "", "{}"))
    rig.broker.produce(rig.events, b"not an envelope at all", b"wf-1")
    rig.projector.step()
    assert rig.store.status("wf-2") == "completed"
    assert rig.store.status("wf-1") == "completed"  # what came before the poison stays
    assert rig.store.get("wf-1")["projection_error"] == (
        f"event seq {seq + 5} (WorkflowStarted) skipped: "
        f"workflow 'wf-1': event seq {seq + 5} after {seq} (gap)"
    )
    assert rig.projector.skipped == 2
    assert rig.committed("wf-1") == rig.end_of("wf-1")  # the feed went past both


def test_a_failed_write_commits_nothing_keeps_the_cache_and_reads_the_batch_again(tmp_path):
    rig = Rig(tmp_path)
    rig.orch.start("wf-1", "document_review", {"document": "a"})
    rig.orch.run()
    rig.projector.step()
    before = rig.projector._cache["wf-1"]
    committed = rig.committed("wf-1")
    rig.orch.signal("wf-1", "documents_added", {"document": "b"})
    rig.orch.run()
    rig.broker.inject("write", UnavailableError("injected: Redis did not answer"))
    with pytest.raises(UnavailableError, match="injected: Redis did not answer"):
        rig.projector.step()
    assert rig.committed("wf-1") == committed
    assert rig.projector._cache["wf-1"] is before  # the cache holds only what Redis has
    assert rig.store.get("wf-1")["seq"] == before.seq
    assert rig.projector.step() > 0  # the same batch again
    assert rig.store.get("wf-1")["seq"] == len(rig.orch.events("wf-1"))
    assert rig.committed("wf-1") == rig.end_of("wf-1")
    assert rig.projector._cache["wf-1"].seq == len(rig.orch.events("wf-1"))


def test_a_rebuilt_read_model_drops_the_cache_and_reloads(tmp_path):
    rig = Rig(tmp_path)
    rig.orch.start("wf-1", "document_review", {"document": "a"})
    rig.orch.run()
    rig.projector.step()
    rig.store.epoch = "after-a-rebuild"
    rig.orch.signal("wf-1", "documents_added", {"document": "b"})
    rig.orch.run()
    assert rig.projector.step() > 0
    assert rig.projector._epoch == "after-a-rebuild"
    assert [h["seq"] for h in rig.store.history("wf-1")] == [e.seq for e in rig.orch.events("wf-1")]


def test_a_running_rebuild_holds_the_batch_until_stop(tmp_path):
    rig = Rig(tmp_path)
    rig.orch.start("wf-1", "three_step", {"n": 2})
    rig.orch.run()
    rig.store.rebuilding = True
    rig.projector.stop()
    rig.projector.run()  # waits for the rebuild, sees the stop at once
    assert rig.committed("wf-1") is None
    assert rig.store.status("wf-1") is None


def test_a_fatal_consumer_is_recreated_and_the_cache_dropped(tmp_path):
    rig = Rig(tmp_path)
    rig.orch.start("wf-1", "three_step", {"n": 2})
    rig.orch.run()
    rig.projector.step()
    assert "wf-1" in rig.projector._cache
    rig.broker.inject("poll", ConsumerReset("injected: fatal consumer error"))
    assert rig.projector.step() == 0
    assert rig.feed.recreated == 1 and dict(rig.projector._cache) == {}
    rig.orch.start("wf-2", "three_step", {"n": 1})
    rig.orch.run()
    rig.projector.step()
    assert rig.store.status("wf-2") == "completed"


def test_a_run_after_a_failure_publishes_its_health_on_its_first_pass(tmp_path):
    """Not HEALTH_EVERY_S later: ``keel projections status`` would meanwhile show the
    health published before the outage (alive, no restart) as if nothing had happened."""
    clock = ManualClock()
    rig = Rig(tmp_path, clock)
    rig.orch.start("wf-1", "document_review", {"document": "a"})
    rig.orch.run()
    rig.projector.step()
    published = json.loads(rig.store.health[rig.projector.health_key])
    assert published["updated_at"] == clock.now_ms()
    rig.orch.signal("wf-1", "documents_added", {"document": "b"})
    rig.orch.run()
    rig.broker.inject("write", UnavailableError("injected: Redis did not answer"))
    with pytest.raises(UnavailableError, match="injected: Redis did not answer"):
        rig.projector.run()
    clock.advance(HEALTH_EVERY_S / 5)  # the supervisor's backoff: well inside the interval
    rig.broker.inject("poll", Stopping("stopped while waiting for poll"))
    rig.projector.run()
    published = json.loads(rig.store.health[rig.projector.health_key])
    assert published["updated_at"] == clock.now_ms()


def test_run_stops_on_a_stop_seen_inside_a_broker_call(tmp_path):
    rig = Rig(tmp_path)
    rig.orch.start("wf-1", "three_step", {"n": 2})
    rig.orch.run()
    rig.broker.inject("poll", Stopping("stopped while waiting for poll"))
    rig.projector.run()  # returns: a stop seen by the adapter ends the loop
    assert rig.committed("wf-1") is None
    assert rig.store.status("wf-1") is None
