"""The projector fed in-process by the orchestrator's committed events (``committed.py``).

On the in-memory adapter: events are folded once, as soon as their transaction commits,
and the topic's records for them are skipped undecoded; a gap or a partition another
projector holds is left to the topic; the result equals a read model built from the
topic alone. The same path on Kafka and Redis runs in every ``keel orchestrator``
(tests/integration/test_read_model.py, test_in_process_read_model.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.io.handoff.committed_channel import CommittedEvent, CommittedEvents, channel
from orchestrator.io.memory import MemoryGroupIntake, MemoryReadModel
from orchestrator.io.partitioning import partition_for
from orchestrator.projector.projector import Projector
from tests.integration import local_app
from tests.unit.memory_rig import MemoryRig

GROUP = "mem.projector"


class OwnedFeed(MemoryGroupIntake):
    """The memory feed with the Kafka feed's ``assignment`` (the partitions it holds)."""

    @property
    def assignment(self) -> set[int]:
        return set(self.positions)


class CountingCodec:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.decoded = 0

    def decode(self, data: bytes) -> Any:
        self.decoded += 1
        return self.inner.decode(data)


class Rig:
    def __init__(self, tmp_path, committed: CommittedEvents | None = None, app: Any = None) -> None:
        self.committed = committed if committed is not None else CommittedEvents()
        kw: dict[str, Any] = {} if app is None else {"app": app}
        self.orch = MemoryRig(tmp_path, committed=self.committed, **kw)
        self.broker = self.orch.broker
        self.events = self.orch.topics.events
        self.feed = OwnedFeed(self.broker, self.events, GROUP)
        self.store = MemoryReadModel(self.broker)
        self.projector = self.new_projector(self.feed, self.store, self.committed)
        self.codec = CountingCodec(self.projector.codec)
        self.projector.codec = self.codec  # type: ignore[assignment]
        self.committed.open_publisher()

    def new_projector(self, feed: Any, store: Any, committed: Any) -> Projector:
        p = Projector(
            self.orch.settings, self.orch.app, adapters=(feed, store), committed=committed
        )
        p.subscribe()
        p.step()  # joins the group: every partition assigned
        return p

    def history_seqs(self, wf: str) -> list[int]:
        return [h["seq"] for h in self.store.history(wf)]

    def end_of(self, wf: str) -> int:
        return len(self.broker.log(self.events)[partition_for(wf.encode(), 4)])

    def committed_offset(self, wf: str) -> int | None:
        return self.broker.committed.get((GROUP, self.events, partition_for(wf.encode(), 4)))


def _from_the_topic(rig: Rig) -> tuple[Projector, MemoryReadModel]:
    """A second projector, of its own group, that folds the topic alone to its end."""
    store = MemoryReadModel(rig.broker)
    other = Projector(
        rig.orch.orch.settings,
        rig.orch.app,
        adapters=(OwnedFeed(rig.broker, rig.events, "mem.other"), store),
    )
    other.subscribe()
    while other.step():
        pass
    return other, store


def test_committed_events_are_folded_in_process_and_skipped_undecoded_on_the_topic(tmp_path):
    rig = Rig(tmp_path)
    rig.orch.start("wf-1", "three_step", {"n": 2})
    rig.orch.orch.step()  # the start is decided and committed: its events are handed over
    handed = rig.committed.take(0)
    assert [e.envelope.type for e in handed][:2] == ["WorkflowStarted", "StateEntered"]
    assert all(e.offset >= 0 for e in handed)
    assert rig.projector.apply_committed(handed) == len(handed)
    assert rig.store.status("wf-1") == "running"  # before the projector read the topic
    rig.orch.run()  # the rest of the run, each transaction handed over as it commits
    while rig.projector.step():
        pass
    events = rig.orch.events("wf-1")
    assert rig.store.status("wf-1") == "completed"
    row = rig.store.get("wf-1")
    assert row is not None and json.loads(row["output_json"]) == {"n": 36}
    assert rig.history_seqs("wf-1") == [e.seq for e in events]  # each event exactly once
    assert rig.projector.applied_in_process == len(events)
    assert rig.codec.decoded == 0  # the topic's records were skipped, not decoded again
    assert rig.committed_offset("wf-1") == rig.end_of("wf-1")  # and their offsets committed


class LateChannel(CommittedEvents):
    """A channel whose next ``late`` takes find nothing, as when a transaction commits
    just after the projector took the channel and before it read the topic."""

    late = 0

    def take(self, timeout_s: float) -> list[CommittedEvent]:
        if self.late:
            self.late -= 1
            return []
        return super().take(timeout_s)


def test_a_transaction_that_commits_while_the_topic_is_read_is_still_folded_in_process(
    tmp_path,
):
    channel_ = LateChannel()
    rig = Rig(tmp_path, committed=channel_)
    rig.orch.start("wf-1", "three_step", {"n": 2})
    rig.orch.orch.step()  # committed: on the topic and in the channel
    channel_.late = 1  # ... but only after the projector's first look at the channel

    applied = rig.projector.step()

    started = rig.orch.events("wf-1")
    assert applied == len(started) == rig.projector.applied_in_process
    assert rig.codec.decoded == 0  # the topic's copies were skipped, not decoded and folded
    assert rig.history_seqs("wf-1") == [e.seq for e in started]
    assert rig.committed_offset("wf-1") == rig.end_of("wf-1")


def test_a_gap_in_process_is_left_to_the_topic_which_fills_it_once(tmp_path):
    rig = Rig(tmp_path)
    rig.orch.start("wf-1", "three_step", {"n": 2})
    rig.orch.orch.step()
    rig.committed.take(0)  # lost on the way (e.g. dropped by a full channel)
    rig.orch.work()
    rig.orch.orch.step()  # the first report: its events do not follow on from the read model
    later = rig.committed.take(0)
    assert later and rig.projector.apply_committed(later) == 0
    assert rig.store.get("wf-1") is None
    rig.orch.run()
    while rig.projector.step():
        pass
    events = rig.orch.events("wf-1")
    assert rig.store.status("wf-1") == "completed"
    assert rig.history_seqs("wf-1") == [e.seq for e in events]
    assert rig.codec.decoded > 0  # what the hand-off missed came from the topic


def test_partitions_another_projector_holds_are_not_written_in_process(tmp_path):
    rig = Rig(tmp_path)
    mine = partition_for(b"wf-1", 4)
    rig.feed.assign([p for p in range(4) if p != mine])
    rig.projector.step()  # the rebalance: wf-1's partition is someone else's now
    rig.orch.start("wf-1", "three_step", {"n": 2})
    rig.orch.run()
    assert rig.projector.apply_committed(rig.committed.take(0)) == 0
    assert rig.store.get("wf-1") is None


def test_the_in_process_read_model_equals_one_built_from_the_topic(tmp_path):
    rig = Rig(tmp_path)
    for i in range(6):
        rig.orch.start(f"wf-{i}", "three_step", {"n": i})
    rig.orch.signal("wf-0", "nothing", {})  # a refused command: a dead letter, no event
    rig.orch.run()
    while rig.projector.step():
        pass
    assert rig.projector.applied_in_process == len(rig.orch.events())
    _, other_store = _from_the_topic(rig)
    for i in range(6):
        wf = f"wf-{i}"
        assert rig.store.get(wf) == other_store.get(wf)
        assert rig.store.history(wf) == other_store.history(wf)


def test_a_full_channel_drops_what_waits_and_never_blocks_the_orchestrator():
    ch = CommittedEvents(max_events=3)
    ch.publish([CommittedEvent(0, 0, object())])  # type: ignore[arg-type]
    assert ch.take(0) == []  # nobody listens: nothing is kept
    ch.listen()
    ch.publish([CommittedEvent(0, i, object()) for i in range(2)])  # type: ignore[arg-type]
    ch.publish([CommittedEvent(0, i, object()) for i in range(2, 4)])  # type: ignore[arg-type]
    assert [e.offset for e in ch.take(0)] == [2, 3]
    assert ch.dropped == 2
    assert channel("a.events") is channel("a.events") is not channel("b.events")


CORPORA = {
    "examples": (
        None,
        [
            ("wf-three", "three_step", {"n": 2}),
            ("wf-timer", "timer_demo", {"seconds": 0}),
            ("wf-review", "document_review", {"document": "a"}),
            ("wf-parallel", "parallel_checks", {"n": 3}),
        ],
    ),
    "local": (
        local_app.app,
        [
            ("wf-local", "three_step_local", {"n": 2}),
            ("wf-mixed", "mixed_local_remote", {"n": 1}),
        ],
    ),
}


@pytest.mark.parametrize("corpus", sorted(CORPORA))
def test_the_orchestrators_states_are_taken_and_equal_the_topics_fold(tmp_path, corpus):
    """The hand-off carries each run's state after its last event; the projector takes
    it instead of folding, and every row, whole state included, equals one folded from
    the topic alone (signals, timers, parallel steps, local and remote activities)."""
    app, starts = CORPORA[corpus]
    rig = Rig(tmp_path, app=app)
    for wf, name, inp in starts:
        rig.orch.start(wf, name, inp)
    rig.orch.run()
    if corpus == "examples":
        rig.orch.signal("wf-review", "documents_added", {"document": "b"})
        rig.orch.run()
    while rig.projector.step():
        pass
    assert rig.projector.folds_taken >= len(starts)
    assert rig.projector.applied_in_process == len(rig.orch.events())
    other, other_store = _from_the_topic(rig)
    assert other.folds_taken == 0, "the topic alone carries no state"
    for wf, _, _ in starts:
        mine, theirs = rig.store.get(wf), other_store.get(wf)
        assert mine is not None and mine == theirs, wf
        assert rig.store.states[wf] == other_store.states[wf], f"{wf}: the whole state"
        assert rig.store.history(wf) == other_store.history(wf)
