"""The in-process projector holds a run's events that change no status (``row_hold.py``).

On the in-memory adapter: a remote run's middle transactions are held, neither in the
read model nor past the offsets committed, and written in one write with the run's end;
in a transaction with other runs only the quiet run waits; a status change is written at
once; what is held is written once held ``hold_rows_s``, or when the loop stops; what a
restart or a reassignment drops the topic brings again; and the read model always ends
equal to one folded from the topic alone. The cursor's side is tested first, alone.
"""

from __future__ import annotations

from typing import Any

from orchestrator.io.memory import MemoryReadModel
from orchestrator.io.partitioning import partition_for
from orchestrator.io.ports import Record
from orchestrator.projector.feed_cursor import FeedCursor
from orchestrator.projector.projector import Projector
from orchestrator.projector.row_hold import HeldRow, RowHold
from tests.unit.projector.test_feed_cursor import Calls
from tests.unit.projector.test_projector_in_process import Rig, _from_the_topic


def _rec(p: int, offset: int) -> Record:
    return Record("t.events", p, offset, b"k", b"v")


def test_no_offset_committed_passes_a_held_record_until_it_is_released():
    feed = Calls()
    cursor = FeedCursor(feed, commit_every_s=0.0)  # type: ignore[arg-type]
    assert cursor.read([_rec(1, 10)]) == {1: 11}
    cursor.hold([(1, 12)])
    cursor.handed([(1, 12, 10, True), (1, 14, 12, True)])  # 12 held, 14 written
    assert cursor.tips[1] == 14
    assert cursor.due_commits(force=True) == {1: 12}  # not past 12
    cursor.release([(1, 12)])
    assert cursor.due_commits(force=True) == {1: 15}


def test_dropping_what_is_held_moves_the_tip_back_and_reads_the_topic_from_there():
    feed = Calls()
    cursor = FeedCursor(feed)  # type: ignore[arg-type]
    cursor.read([_rec(1, 10)])
    cursor.hold([(1, 12)])
    cursor.handed([(1, 12, 10, True), (1, 14, 12, True)])
    cursor.drop_held()
    assert cursor.tips[1] == 11 and not cursor.held
    assert feed.calls[-2:] == [("resume", [1]), ("rewind", 1, 12)]
    assert cursor.unread([_rec(1, 12), _rec(1, 14)]) == [_rec(1, 12), _rec(1, 14)]


def test_a_held_record_handed_before_the_topic_reached_it_is_not_skipped_once_dropped():
    cursor = FeedCursor(Calls())  # type: ignore[arg-type]
    cursor.hold([(2, 5)])
    cursor.handed([(2, 5, -1, True)])  # no tip yet: remembered as folded ahead
    assert cursor.unread([_rec(2, 5)]) == []
    cursor.drop_held()
    assert cursor.unread([_rec(2, 5)]) == [_rec(2, 5)]


class CountingStore(MemoryReadModel):
    """The memory read model, counting the guarded writes (one Redis round trip each)."""

    def __init__(self, broker: Any) -> None:
        super().__init__(broker)
        self.writes = 0

    def write_guarded(self, *args: Any, **kw: Any) -> None:
        self.writes += 1
        super().write_guarded(*args, **kw)


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class HoldingRig(Rig):
    store: CountingStore

    def __init__(self, tmp_path: Any, hold_s: float = 60.0) -> None:
        self.hold_s = hold_s
        self.time = FakeTime()
        super().__init__(tmp_path)

    def new_projector(self, feed: Any, store: Any, committed: Any) -> Projector:
        self.store = CountingStore(self.broker)
        p = Projector(
            self.orch.settings,
            self.orch.app,
            adapters=(feed, self.store),
            committed=committed,
            hold_rows_s=self.hold_s,
        )
        p._hold = RowHold(self.hold_s, monotonic=self.time)
        p.subscribe()
        p.step()  # joins the group: every partition assigned
        return p

    def started(self, wf: str, name: str = "three_step", inp: Any = None) -> int:
        """Start ``wf`` and hand its first transaction to the projector; events applied."""
        self.orch.start(wf, name, {"n": 2} if inp is None else inp)
        self.orch.orch.step()
        return self.projector.apply_committed(self.committed.take(0))

    def transaction(self) -> int:
        """The worker's reports, then one decided transaction handed to the projector."""
        self.orch.work()
        self.orch.orch.step()
        return self.projector.apply_committed(self.committed.take(0))

    def equals_the_topics(self, *wfs: str) -> None:
        _, other = _from_the_topic(self)
        for wf in wfs:
            assert self.store.get(wf) == other.get(wf)
            assert self.store.states[wf] == other.states[wf]
            assert self.store.history(wf) == other.history(wf)
            assert self.history_seqs(wf) == [e.seq for e in self.orch.events(wf)]


def test_a_remote_runs_middle_transactions_are_written_with_its_end_in_one_write(tmp_path):
    rig = HoldingRig(tmp_path)
    assert rig.started("wf-1") == 3  # a start: at once
    assert rig.store.status("wf-1") == "running" and rig.store.writes == 1
    while rig.projector.step():  # the topic reaches the start: the partition follows on
        pass
    started = rig.history_seqs("wf-1")

    assert rig.transaction() == 0  # the first activity completed, the second scheduled
    assert rig.transaction() == 0
    assert rig.history_seqs("wf-1") == started and rig.store.writes == 1
    assert rig.projector._cursor is not None
    assert rig.projector._cursor.due_commits(force=True) == {
        partition_for(b"wf-1", 4): rig.projector._hold.rows["wf-1"].events[0].offset
    }  # nothing committed past what Redis has

    ended = rig.transaction()  # the end, written with all that was held
    assert ended == len(rig.orch.events("wf-1")) - len(started) == 6
    assert rig.store.status("wf-1") == "completed" and rig.store.writes == 2
    assert rig.projector.health()["row_holds"] == 2 and not rig.projector._hold.rows
    while rig.projector.step():
        pass
    assert rig.codec.decoded == 0  # the topic's copies skipped undecoded
    assert rig.projector._cursor.due_commits(force=True) == {
        partition_for(b"wf-1", 4): rig.end_of("wf-1")
    }  # released: the commit may pass them now
    rig.equals_the_topics("wf-1")


def test_only_the_quiet_run_of_a_transaction_waits(tmp_path):
    rig = HoldingRig(tmp_path)
    rig.started("wf-a", inp={"n": 1})
    rig.orch.work()  # wf-a's first report waits in the commands topic
    rig.orch.start("wf-b", "three_step", {"n": 2})
    rig.orch.orch.step()  # one transaction: wf-a's report decided, wf-b started
    handed = rig.committed.take(0)
    assert {e.envelope.workflow_id for e in handed} == {"wf-a", "wf-b"}
    assert rig.projector.apply_committed(handed) == 3  # wf-b's start
    assert rig.store.status("wf-b") == "running"
    assert set(rig.projector._hold.rows) == {"wf-a"}
    rig.orch.run()
    while rig.projector.step():
        pass
    assert rig.store.status("wf-a") == rig.store.status("wf-b") == "completed"
    rig.equals_the_topics("wf-a", "wf-b")


def _sharing_a_partition(wf: str) -> str:
    home = partition_for(wf.encode(), 4)
    return next(f"{wf}-{i}" for i in range(100) if partition_for(f"{wf}-{i}".encode(), 4) == home)


def test_what_is_held_is_written_once_held_that_long(tmp_path):
    rig = HoldingRig(tmp_path, hold_s=0.05)
    rig.orch.start("wf-0", "three_step", {"n": 1})
    rig.orch.run()
    while rig.projector.step():  # the partition's hand-off follows on: not fetched
        pass
    wf = _sharing_a_partition("wf-0")
    rig.started(wf)
    assert rig.transaction() == 0
    assert rig.projector._hold.wait_s(0.02) == 0.02
    rig.time.now += 0.04
    assert abs(rig.projector._hold.wait_s(0.02) - 0.01) < 1e-9  # the loop wakes in time
    assert rig.projector.step() == 0  # still within the hold
    rig.time.now += 0.02
    writes = rig.store.writes
    assert rig.projector.step() == 2  # ActivityCompleted, ActivityScheduled
    assert rig.history_seqs(wf) == [e.seq for e in rig.orch.events(wf)]
    assert rig.store.status(wf) == "running" and rig.store.writes == writes + 1


def test_a_run_that_comes_to_wait_is_written_at_once(tmp_path):
    rig = HoldingRig(tmp_path)
    rig.started("wf-r", "document_review", {"document": "a"})
    assert rig.transaction() > 0  # reviewed: it needs documents, and waits for them
    assert rig.store.status("wf-r") == "waiting"
    assert rig.history_seqs("wf-r") == [e.seq for e in rig.orch.events("wf-r")]


def test_a_stopping_projector_writes_what_it_holds(tmp_path):
    rig = HoldingRig(tmp_path)
    rig.orch.start("wf-1", "three_step", {"n": 2})
    rig.orch.orch.step()
    projector = rig.projector
    held: list[int] = []

    def hold_one_then_stop() -> int:
        applied = projector.apply_committed(rig.committed.take(0))  # the start
        applied += rig.transaction()  # a quiet one: held
        held.append(len(projector._hold.rows["wf-1"].events))
        projector.stop()
        return applied

    projector.step = hold_one_then_stop  # type: ignore[method-assign]
    projector.run()
    assert held == [2]  # the loop held it, then wrote it on its way out
    assert rig.history_seqs("wf-1") == [e.seq for e in rig.orch.events("wf-1")]


def test_a_reassignment_drops_what_is_held_and_the_topic_brings_it(tmp_path):
    rig = HoldingRig(tmp_path)
    rig.started("wf-1")
    assert rig.transaction() == 0
    rig.projector._reset([0, 1, 2, 3])  # revoked and assigned again: start from the topic
    assert not rig.projector._hold.rows
    rig.orch.run()
    rig.committed.take(0)  # the rest's hand-off lost with the assignment
    rig.projector._cursor.to_topic(range(4))  # type: ignore[union-attr]
    while rig.projector.step():
        pass
    assert rig.codec.decoded > 0
    rig.equals_the_topics("wf-1")


def test_a_restart_of_the_loop_drops_what_is_held_and_the_topic_brings_it(tmp_path):
    rig = HoldingRig(tmp_path)
    rig.started("wf-1")
    assert rig.transaction() == 0 and rig.transaction() == 0
    projector = rig.projector
    steps = iter([True, False])

    def one_step_then_stop() -> int:
        applied = Projector.step(projector)
        if not next(steps):
            projector.stop()
        return applied

    projector.step = one_step_then_stop  # type: ignore[method-assign]
    projector.run()  # restart(): tips back before what was held, read from the topic
    assert rig.history_seqs("wf-1") == [e.seq for e in rig.orch.events("wf-1")]


def test_rows_come_due_oldest_first_and_a_row_held_again_keeps_its_place():
    time_ = FakeTime()
    hold = RowHold(1.0, monotonic=time_)
    state: Any = object()
    for wf in ("a", "b"):
        hold.keep(wf, HeldRow([], state, time_.now), first=True)
        time_.now += 0.4
    again = hold.take(["a"])["a"]  # a's next events: held again, since its first hold
    hold.keep("a", HeldRow([], state, again.since), first=False)
    assert hold.due() == [] and abs(hold.wait_s(5.0) - 0.2) < 1e-9
    time_.now += 0.2
    assert hold.due() == ["a"]
    hold.take(["a"])  # written
    assert hold.due() == [] and abs(hold.wait_s(5.0) - 0.4) < 1e-9
    time_.now += 0.4
    assert hold.due() == ["b"]
    hold.clear()
    assert hold.wait_s(5.0) == 5.0
