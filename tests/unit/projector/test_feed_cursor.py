"""The projector's cursor: the topic paused while the hand-off follows on, read for gaps.

First the cursor alone against a feed that records its calls, then the projector on the
in-memory adapter fed by an orchestrator's transactions (``committed.py``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from orchestrator.io.handoff.committed_channel import CommittedEvents
from orchestrator.io.handoff.committed_pipe import PipePublisher, read_frames
from orchestrator.io.partitioning import partition_for
from orchestrator.io.ports import Record
from orchestrator.payload_schemas.codec import Codec
from orchestrator.projector.feed_cursor import FeedCursor
from tests.unit.memory_rig import MemoryRig
from tests.unit.projector.test_projector_in_process import Rig


class Calls:
    """An EventFeed's flow calls, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def pause(self, partitions: Sequence[int]) -> None:
        self.calls.append(("pause", list(partitions)))

    def resume(self, partitions: Sequence[int]) -> None:
        self.calls.append(("resume", list(partitions)))

    def rewind(self, partition: int, offset: int) -> None:
        self.calls.append(("rewind", partition, offset))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _rec(p: int, offset: int) -> Record:
    return Record("t.events", p, offset, b"k", b"v")


def _cursor(**kw: Any) -> tuple[FeedCursor, Calls, Clock]:
    feed, clock = Calls(), Clock()
    return FeedCursor(feed, clock=clock, **kw), feed, clock  # type: ignore[arg-type]


def test_a_hand_off_that_follows_the_topic_pauses_the_partition_and_commits_from_it():
    cursor, feed, clock = _cursor()
    assert cursor.read([_rec(1, 10), _rec(1, 11)]) == {1: 12}
    # the next transaction: offsets 13, 14 after its predecessor's marker at 12
    cursor.handed([(1, 13, 11, True), (1, 14, 13, True)])
    assert cursor.tips == {1: 14} and cursor.paused == {1}
    assert feed.calls == [("pause", [1])]
    assert cursor.tick() == {}  # offsets from the hand-off wait for the commit interval
    clock.now += 0.5
    assert cursor.tick() == {1: 15}
    assert cursor.tick() == {}
    assert cursor.unread([_rec(1, 14), _rec(1, 16)]) == [_rec(1, 16)]


def test_a_gap_in_the_hand_off_reads_the_topic_again_from_the_tip():
    cursor, feed, _ = _cursor()
    cursor.read([_rec(2, 5)])
    cursor.handed([(2, 7, 5, True)])
    assert cursor.paused == {2}
    # a transaction was dropped on the way: this one follows 20, which the cursor lacks
    cursor.handed([(2, 22, 20, True), (2, 23, 22, True)])
    assert cursor.paused == set() and cursor.tips == {2: 7}
    assert feed.calls[1:] == [("resume", [2]), ("rewind", 2, 8)]
    assert cursor.folded_ahead == {2: {22, 23}}  # folded: the topic skips them undecoded
    assert cursor.unread([_rec(2, 20), _rec(2, 22), _rec(2, 23)]) == [_rec(2, 20)]
    assert cursor.gaps == 1


def test_an_event_that_could_not_be_folded_in_order_breaks_the_chain():
    cursor, feed, _ = _cursor()
    cursor.read([_rec(0, 3)])
    cursor.handed([(0, 5, 3, True), (0, 6, 5, False), (0, 7, 6, True)])
    assert cursor.tips == {0: 5}
    assert cursor.paused == set()  # the topic brings 6 (and 7, folded: skipped there)
    assert feed.calls == []
    assert cursor.folded_ahead == {0: {7}}


def test_an_unknown_predecessor_or_an_unread_partition_never_pauses():
    cursor, feed, _ = _cursor()
    cursor.handed([(4, 9, 8, True)])  # the topic has given nothing of partition 4 yet
    cursor.read([_rec(3, 1)])
    cursor.handed([(3, 3, -1, True)])  # first transaction since the orchestrator took it
    assert cursor.paused == set() and feed.calls == []
    assert cursor.folded_ahead == {4: {9}, 3: {3}}


def test_a_silent_hand_off_is_rechecked_on_the_topic():
    cursor, feed, clock = _cursor(recheck_s=1.0)
    cursor.read([_rec(1, 0), _rec(2, 0)])
    cursor.handed([(1, 2, 0, True), (2, 2, 0, True)])
    clock.now += 0.6
    cursor.handed([(2, 4, 2, True)])  # partition 2 keeps coming through the hand-off
    clock.now += 0.3
    cursor.tick()
    assert cursor.paused == {1, 2}
    clock.now += 0.2
    cursor.tick()
    assert cursor.paused == {2} and cursor.rechecks == 1
    assert feed.calls[-2:] == [("resume", [1]), ("rewind", 1, 3)]


def test_a_revoked_partition_is_forgotten_and_left_unpaused():
    cursor, feed, _ = _cursor()
    cursor.read([_rec(1, 0), _rec(2, 0)])
    cursor.handed([(1, 2, 0, True), (2, 2, 0, True)])
    cursor.forget([1])
    assert cursor.paused == {2} and 1 not in cursor.tips
    assert feed.calls[-1] == ("resume", [1])
    cursor.restart()  # the loop starts again: everything from the topic, from the tips
    assert cursor.paused == set() and feed.calls[-2:] == [("resume", [2]), ("rewind", 2, 3)]


def test_each_handed_event_names_the_record_it_follows(tmp_path):
    rig = Rig(tmp_path)
    rig.orch.start("wf-1", "three_step", {"n": 2})
    rig.orch.orch.step()
    first = rig.committed.take(0)
    offsets = [e.offset for e in first]
    assert [e.follows for e in first] == [-1, *offsets[:-1]]  # new owner: nothing known
    rig.orch.work()
    rig.orch.orch.step()
    second = rig.committed.take(0)
    assert second[0].follows == offsets[-1]
    assert [e.follows for e in second[1:]] == [e.offset for e in second[:-1]]
    rig.orch.orch = rig.orch.new_orchestrator()  # a restart: the partition taken anew
    rig.orch.work()
    rig.orch.orch.step()
    third = rig.committed.take(0)
    assert third and third[0].follows == -1


def test_a_child_is_handed_each_record_with_the_one_it_follows(tmp_path):
    read_end, write_end = os.pipe()
    publisher = PipePublisher()
    publisher.attach(write_end)
    into = CommittedEvents()
    into.listen()
    ended = threading.Event()
    reader = read_frames(read_end, into, ended.set, Codec())
    rig = MemoryRig(tmp_path, committed=publisher)
    rig.start("wf-1", "three_step", {"n": 2})
    rig.orch.step()
    rig.work()
    rig.orch.step()
    written = rig.broker.log(rig.topics.events)[partition_for(b"wf-1", 4)]
    got: list[Any] = []
    while len(got) < len(written):
        taken = into.take(5.0)
        assert taken, f"{len(got)} of {len(written)} records came through the pipe"
        got.extend(taken)
    assert [(e.offset, e.envelope.seq) for e in got] == [
        (r.offset, i + 1) for i, r in enumerate(written)
    ]
    assert [e.follows for e in got] == [-1, *(r.offset for r in written[:-1])]
    publisher.stop()
    assert ended.wait(5.0)
    reader.join(5.0)


def test_the_projector_takes_the_hand_off_and_leaves_the_topic_paused(tmp_path):
    rig = Rig(tmp_path)
    cursor = rig.projector._cursor
    assert cursor is not None
    cursor.commit_every_s = 0.0
    rig.orch.start("wf-1", "three_step", {"n": 2})
    rig.orch.orch.step()  # the first transaction since the orchestrator took the partition
    while rig.projector.step():
        pass
    p = partition_for(b"wf-1", 4)
    assert p not in rig.feed.paused  # it follows nothing known: the topic was read
    rig.orch.run()  # the rest, each transaction following on from the one before
    while rig.projector.step():
        pass
    events = rig.orch.events("wf-1")
    assert rig.store.status("wf-1") == "completed"
    assert rig.history_seqs("wf-1") == [e.seq for e in events]
    assert p in rig.feed.paused and cursor.pauses >= 1
    assert rig.committed_offset("wf-1") == rig.end_of("wf-1")  # committed from the hand-off
    assert rig.codec.decoded == 0


def test_a_hand_off_lost_while_paused_is_read_from_the_topic(tmp_path):
    rig = Rig(tmp_path)
    rig.orch.start("wf-1", "three_step", {"n": 2})
    rig.orch.start("wf-2", "three_step", {"n": 3})
    rig.orch.orch.step()
    while rig.projector.step():
        pass
    rig.orch.work()
    rig.orch.orch.step()
    rig.projector.step()  # follows on: paused from here
    p = partition_for(b"wf-1", 4)
    assert p in rig.feed.paused
    rig.orch.work()
    rig.orch.orch.step()
    rig.committed.take(0)  # this transaction's hand-off is lost
    rig.orch.run()
    while rig.projector.step():
        pass
    for wf in ("wf-1", "wf-2"):
        assert rig.store.status(wf) == "completed"
        assert rig.history_seqs(wf) == [e.seq for e in rig.orch.events(wf)]
    assert rig.codec.decoded > 0  # what was lost came from the topic
    assert rig.projector._cursor is not None and rig.projector._cursor.gaps >= 1


class FailingTake(CommittedEvents):
    """A channel whose first take finds nothing and whose second fails (the hand-off's
    write to Redis failing while topic records wait for it)."""

    takes = 0

    def take(self, timeout_s: float) -> list[Any]:
        self.takes += 1
        if self.takes == 1:
            return []
        if self.takes == 2:
            super().take(timeout_s)  # taken, then lost with the failed write
            raise ConnectionError("the read model is away")
        return super().take(timeout_s)


def test_topic_records_held_for_a_failing_hand_off_are_read_again(tmp_path):
    channel_ = FailingTake()
    rig = Rig(tmp_path, committed=channel_)
    channel_.takes = 0
    rig.orch.start("wf-1", "three_step", {"n": 2})
    rig.orch.orch.step()  # committed: on the topic and in the channel
    try:
        rig.projector.step()
    except ConnectionError:
        pass
    else:
        raise AssertionError("the failing hand-off did not fail the step")
    while rig.projector.step():  # as after the supervisor's restart
        pass
    started = rig.orch.events("wf-1")
    assert rig.history_seqs("wf-1") == [e.seq for e in started]
