"""The contract every adapter of the runtime ports keeps, run against each adapter.

Like pyeventsourcing's recorder test cases: one abstract suite, subclassed once per
adapter (``tests/unit/io/test_port_contract_memory.py`` for the in-memory adapter,
``tests/integration/test_runtime_contract_kafka.py`` for Kafka), so the in-memory
adapter the fast unit tests rely on cannot drift from what the broker does.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from orchestrator.domain.model.state import WorkflowState
from orchestrator.engine.log_scan import group_runs
from orchestrator.io.ports import (
    CommandIntake,
    DeliveryError,
    EventLog,
    GroupIntake,
    OutcomeSink,
    ProducerReset,
    Record,
    RecordRefused,
    TxnAbortable,
)
from orchestrator.io.redis.read_model import EpochChanged, SeqConflict

#: The event type header a rebuild groups by (``recovery.TYPE_HEADER``).
TYPE = "keel.type"


class Harness:
    """What one adapter provides to the suite (subclasses implement it)."""

    partitions: int
    commands: str
    events: str

    def intake(self) -> CommandIntake:
        """An intake subscribed to the commands topic that owns every partition."""
        raise NotImplementedError

    def log(self, intake: CommandIntake | None, transactional_id: str) -> EventLog:
        raise NotImplementedError

    def produce(self, topic: str, key: bytes, value: bytes, partition: int) -> None:
        """A plain, non-transactional write (a client)."""
        raise NotImplementedError

    def read(self, topic: str) -> list[Record]:
        raise NotImplementedError

    def group_intake(self, topic: str, group_id: str) -> GroupIntake:
        """A member of ``group_id`` subscribed to ``topic`` that owns every partition."""
        raise NotImplementedError

    def sink(self) -> OutcomeSink:
        raise NotImplementedError

    def store(self) -> Any:
        """An empty read-model store (``ReadModelStore`` and ``ReadModel``)."""
        raise NotImplementedError

    def poll_until(self, intake: CommandIntake, count: int) -> list[Record]:
        got: list[Record] = []
        for _ in range(200):
            got.extend(intake.poll(100, 0.1))
            if len(got) >= count:
                break
        return got


def read_settled(log: EventLog, topic: str, starts: dict[int, int], count: int) -> list[Record]:
    """What ``log.read`` gives once ``count`` committed records are readable (at most 10 s).

    A Kafka commit returns once the transaction coordinator has logged it; its markers
    reach the partitions just after, and a ``read_committed`` reader stops at the last
    stable offset until they do. So a read straight after a commit may end before the
    records it committed (seen once in CI); the in-memory adapter gives them at once.
    """
    records: list[Record] = []
    for _ in range(100):
        records = list(log.read(topic, starts))
        if len(records) >= count:
            break
        time.sleep(0.1)
    return records


class RuntimeContract:
    """Subclasses provide a ``harness`` fixture returning a :class:`Harness`."""

    def test_committed_records_are_read_back_in_order_with_their_offsets(self, harness: Any):
        log = harness.log(None, "contract-a")
        delivered: list[tuple[int, int]] = []
        log.begin()
        for i in range(3):
            log.append(
                harness.events,
                f"e{i}".encode(),
                b"wf",
                partition=1,
                headers=[("keel.type", b"X")],
                on_delivered=lambda p, o: delivered.append((p, o)),
            )
        log.commit({})
        log.flush()
        records = read_settled(log, harness.events, {1: 0}, 3)
        assert [r.value for r in records] == [b"e0", b"e1", b"e2"]
        assert [r.partition for r in records] == [1, 1, 1]
        assert [r.offset for r in records] == sorted(r.offset for r in records)
        assert records[0].header("keel.type") == "X"
        assert sorted(delivered) == [(1, r.offset) for r in records]
        tail = list(log.read(harness.events, {1: records[1].offset}))
        assert [r.value for r in tail] == [b"e1", b"e2"]
        log.close()

    def test_aborted_records_are_never_read(self, harness: Any):
        log = harness.log(None, "contract-b")
        log.begin()
        log.append(harness.events, b"aborted", b"wf", partition=0)
        log.flush()
        log.abort()
        log.begin()
        log.append(harness.events, b"committed", b"wf", partition=0)
        log.commit({})
        assert [r.value for r in read_settled(log, harness.events, {0: 0}, 1)] == [b"committed"]
        log.close()

    def test_a_rebuild_reads_the_tail_grouped_by_run_in_log_order(self, harness: Any):
        """``log_scan.group_runs`` (over ``EventLog.read_batches``): the same groups,
        first offsets, last headers and ends on each adapter."""
        events = harness.events
        log = harness.log(None, "contract-tail")
        log.begin()
        log.append(events, b"aborted", b"wf-a", partition=2, headers=[(TYPE, b"X")])
        log.flush()
        log.abort()
        armed = [(TYPE, b"ActivityScheduled"), ("keel.armed", b'["x",1,[]]')]
        writes = [
            (b"a1", b"wf-a", 2, [(TYPE, b"WorkflowStarted")]),
            (b"b1", b"wf-b", 2, [(TYPE, b"WorkflowStarted")]),
            (b"a2", b"wf-a", 2, armed),
            (b"c1", b"wf-c", 3, [("other", b"1"), (TYPE, b"WorkflowStarted")]),
            (b"c2", b"wf-c", 3, []),
        ]
        log.begin()
        for value, key, partition, headers in writes:
            log.append(events, value, key, partition=partition, headers=headers)
        log.commit({})
        log.flush()
        at = {r.value: r.offset for r in read_settled(log, events, {2: 0, 3: 0}, 5)}
        assert set(at) == {b"a1", b"b1", b"a2", b"c1", b"c2"}

        groups = group_runs(log, events, {1: 0, 2: 0, 3: 0}, None, TYPE)
        assert groups.records == {
            1: {},
            2: {
                b"wf-a": [("WorkflowStarted", b"a1"), ("ActivityScheduled", b"a2")],
                b"wf-b": [("WorkflowStarted", b"b1")],
            },
            3: {b"wf-c": [("WorkflowStarted", b"c1"), (None, b"c2")]},
        }
        assert groups.firsts == {
            1: {},
            2: {b"wf-a": at[b"a1"], b"wf-b": at[b"b1"]},
            3: {b"wf-c": at[b"c1"]},
        }
        lasts = {p: {k: list(hs) for k, hs in by.items()} for p, by in groups.lasts.items()}
        assert lasts == {
            1: {},
            2: {b"wf-a": armed, b"wf-b": [(TYPE, b"WorkflowStarted")]},
            3: {b"wf-c": []},
        }
        assert groups.ends == {1: 0, 2: at[b"a2"] + 1, 3: at[b"c2"] + 1}
        assert groups.count == 5

        later = group_runs(log, events, {2: at[b"a2"]}, None, TYPE)
        assert later.records == {2: {b"wf-a": [("ActivityScheduled", b"a2")]}}
        assert (later.firsts, later.ends, later.count) == (
            {2: {b"wf-a": at[b"a2"]}},
            {2: at[b"a2"] + 1},
            1,
        )
        log.close()

    def test_raw_batches_hold_the_committed_records_read_gives(self, harness: Any):
        """``EventLog.read_batches`` (a rebuild's bulk read): from the same start offsets,
        the records ``read`` gives, with their partition, offset, key, value and headers,
        none of an aborted transaction, in batches of at most ``batch``."""
        events = harness.events
        log = harness.log(None, "contract-batches")
        log.begin()
        log.append(events, b"aborted", b"wf-a", partition=0, headers=[(TYPE, b"X")])
        log.append(events, b"aborted too", b"wf-b", partition=1)
        log.flush()
        log.abort()
        writes = [
            (b"a1", b"wf-a", 0, [(TYPE, b"WorkflowStarted")]),
            (b"b1", b"wf-b", 1, [(TYPE, b"WorkflowStarted"), ("other", b"1")]),
            (b"b2", b"wf-b", 1, []),
            (b"c1", None, 1, [("other", b"2"), (TYPE, b"Done")]),
            (b"a2", b"wf-a", 0, [(TYPE, b"ActivityScheduled")]),
        ]
        log.begin()
        for value, key, partition, headers in writes:
            log.append(events, value, key, partition=partition, headers=headers)
        log.commit({})
        log.flush()
        at = {r.value: r.offset for r in read_settled(log, events, {0: 0, 1: 0}, 5)}
        assert set(at) == {b"a1", b"b1", b"b2", b"c1", b"a2"}

        def as_read(starts: dict[int, int]) -> list[tuple]:
            records = log.read(events, starts)
            got = [(r.partition, r.offset, r.key, r.value, list(r.headers)) for r in records]
            return sorted(got, key=lambda r: (r[0], r[1]))

        def as_batches(starts: dict[int, int], batch: int) -> list[tuple]:
            batches = list(log.read_batches(events, starts, batch=batch))
            assert all(0 < len(b) <= batch for b in batches)
            got = [
                (m.partition(), m.offset(), m.key(), m.value(), list(m.headers() or ()))
                for b in batches
                for m in b
            ]
            by_partition = [[r for r in got if r[0] == p] for p in starts]
            assert all(rs == sorted(rs, key=lambda r: r[1]) for rs in by_partition)
            return sorted(got, key=lambda r: (r[0], r[1]))

        # partition 2 is empty; partition 1 is read from past its first committed record
        starts = {0: 0, 1: at[b"b2"], 2: 0}
        expected = [
            (0, at[b"a1"], b"wf-a", b"a1", [(TYPE, b"WorkflowStarted")]),
            (0, at[b"a2"], b"wf-a", b"a2", [(TYPE, b"ActivityScheduled")]),
            (1, at[b"b2"], b"wf-b", b"b2", []),
            (1, at[b"c1"], None, b"c1", [("other", b"2"), (TYPE, b"Done")]),
        ]
        assert as_read(starts) == expected
        assert as_batches(starts, 10_000) == expected
        assert as_batches(starts, 1) == expected
        everything = {0: 0, 1: 0, 2: 0}
        assert as_batches(everything, 2) == as_read(everything)
        assert len(as_read(everything)) == 5
        assert list(log.read_batches(events, {2: 0})) == []
        log.close()

    def test_intake_offsets_commit_with_the_transaction_and_rewind_to_them(self, harness: Any):
        for i in range(4):
            harness.produce(harness.commands, b"k", f"c{i}".encode(), 2)
        intake = harness.intake()
        log = harness.log(intake, "contract-c")
        got = [r for r in harness.poll_until(intake, 4) if r.partition == 2]
        assert [r.value for r in got] == [b"c0", b"c1", b"c2", b"c3"]
        log.begin()
        log.append(harness.events, b"decided", b"k", partition=2)
        log.commit({2: got[1].offset + 1})  # the first two are done
        intake.rewind_to_committed([2])
        again = [r for r in harness.poll_until(intake, 2) if r.partition == 2]
        assert [r.value for r in again] == [b"c2", b"c3"]
        intake.rewind(2, got[0].offset)
        assert [r.value for r in harness.poll_until(intake, 4) if r.partition == 2] == [
            b"c0",
            b"c1",
            b"c2",
            b"c3",
        ]
        assert intake.partition_count() == harness.partitions
        log.close()
        intake.close()

    def test_a_new_writer_fences_the_old_one(self, harness: Any):
        old = harness.log(None, "contract-d")
        old.begin()
        old.append(harness.events, b"zombie", b"wf", partition=3)
        new = harness.log(None, "contract-d")  # same transactional id: a new epoch
        new.open()  # fences before anything is read or written: what a rebuild needs
        # the zombie's open transaction is aborted: a read gets past it, and finds nothing
        assert list(new.read(harness.events, {3: 0})) == []
        with pytest.raises(ProducerReset):
            old.commit({})
        new.begin()
        new.append(harness.events, b"alive", b"wf", partition=3)
        new.commit({})
        assert [r.value for r in new.read(harness.events, {3: 0})] == [b"alive"]
        new.close()

    def test_a_record_over_the_broker_limit_is_refused_at_append(self, harness: Any):
        log = harness.log(None, "contract-e")
        log.begin()
        with pytest.raises(TxnAbortable):
            log.append(harness.events, b"x" * 1_100_000, b"wf", partition=0)
        log.abort()
        log.close()

    # -- the worker's and the projector's ports -------------------------------------

    def test_a_group_member_commits_its_own_offsets_and_a_new_member_starts_there(
        self, harness: Any
    ):
        for i in range(3):
            harness.produce(harness.events, b"k", f"t{i}".encode(), 1)
        first = harness.group_intake(harness.events, "contract-workers")
        got = [r for r in harness.poll_until(first, 3) if r.partition == 1]
        assert [r.value for r in got] == [b"t0", b"t1", b"t2"]
        first.commit({1: got[0].offset + 1})
        first.rewind(1, got[0].offset)  # a failed batch reads again from its first offset
        assert [r.value for r in harness.poll_until(first, 3) if r.partition == 1] == [
            b"t0",
            b"t1",
            b"t2",
        ]
        first.close()
        second = harness.group_intake(harness.events, "contract-workers")
        again = [r for r in harness.poll_until(second, 2) if r.partition == 1]
        assert [r.value for r in again] == [b"t1", b"t2"]
        second.close()

    def test_a_recreated_member_reads_from_the_committed_offsets(self, harness: Any):
        for i in range(2):
            harness.produce(harness.events, b"k", f"r{i}".encode(), 2)
        intake = harness.group_intake(harness.events, "contract-recreate")
        got = [r for r in harness.poll_until(intake, 2) if r.partition == 2]
        intake.commit({2: got[0].offset + 1})
        intake.recreate()
        again = [r for r in harness.poll_until(intake, 1) if r.partition == 2]
        assert [r.value for r in again] == [b"r1"]
        intake.close()

    def test_a_paused_partition_is_not_fetched_and_resumes_where_it_is_rewound(self, harness: Any):
        """``EventFeed.pause``/``resume``: what the projector's cursor relies on."""
        for i in range(2):
            harness.produce(harness.events, b"k", f"p{i}".encode(), 3)
        feed = harness.group_intake(harness.events, "contract-pause")
        got = [r for r in harness.poll_until(feed, 2) if r.partition == 3]
        assert [r.value for r in got] == [b"p0", b"p1"]
        feed.pause([3])
        for i in range(2, 5):
            harness.produce(harness.events, b"k", f"p{i}".encode(), 3)
        paused = [r for _ in range(10) for r in feed.poll(100, 0.1) if r.partition == 3]
        assert paused == []
        feed.resume([3])
        feed.rewind(3, got[1].offset + 2)  # past p2, as from a tip the hand-off moved on
        later = [r for r in harness.poll_until(feed, 2) if r.partition == 3]
        assert [r.value for r in later] == [b"p3", b"p4"]
        feed.close()

    def test_a_sink_delivers_in_order_and_refuses_an_oversized_record_at_once(self, harness: Any):
        sink = harness.sink()
        failed: list[DeliveryError] = []
        for i in range(3):
            sink.send(
                harness.commands,
                f"o{i}".encode(),
                b"wf",
                headers=[("traceparent", b"00-x")],
                on_failed=failed.append,
            )
        with pytest.raises(RecordRefused, match="Kafka refused a record of 1,100,000 bytes"):
            sink.send(harness.commands, b"x" * 1_100_000, b"wf", on_failed=failed.append)
        assert sink.flush(30) == 0
        assert failed == []
        records = [r for r in harness.read(harness.commands) if r.key == b"wf"]
        assert [r.value for r in records] == [b"o0", b"o1", b"o2"]
        assert records[0].header("traceparent") == "00-x"
        sink.close()

    def test_a_store_keeps_states_and_history_and_refuses_a_write_of_another_epoch(
        self, harness: Any
    ):
        store = harness.store()
        state = WorkflowState("wf-s", "run-1", "three_step", 1, "d", "{}", seq=2)
        lines = [json.dumps({"seq": 1, "type": "A"}), json.dumps({"seq": 2, "type": "B"})]
        store.write_guarded({"wf-s": (state, lines, None)}, None)
        assert store.load_states(["wf-s", "nobody"]) == {"wf-s": state}
        assert store.status("wf-s") == "running"
        assert [h["seq"] for h in store.history("wf-s")] == [1, 2]
        store.mark_error("wf-s", "event seq 3 (X) skipped: broken")
        assert store.get("wf-s")["projection_error"] == "event seq 3 (X) skipped: broken"
        assert store.rebuild_running() is False
        with pytest.raises(EpochChanged):
            store.write_guarded({"wf-s": (state, lines, None)}, "another-epoch")
        assert [h["seq"] for h in store.history("wf-s")] == [1, 2]

    def test_a_store_writes_only_over_the_seq_the_writer_expected(self, harness: Any):
        """The projector folds a run whose events start at seq 1 as new without reading
        its row: the store itself must refuse the write if the row exists after all."""
        store = harness.store()
        first = WorkflowState("wf-q", "run-1", "three_step", 1, "d", "{}", seq=1)
        one = [json.dumps({"seq": 1, "type": "A"})]
        store.write_guarded({"wf-q": (first, one, None)}, None, expected={"wf-q": None})
        later = WorkflowState("wf-q", "run-1", "three_step", 1, "d", "{}", seq=2)
        two = [json.dumps({"seq": 2, "type": "B"})]
        with pytest.raises(SeqConflict) as refused:
            store.write_guarded({"wf-q": (later, two, None)}, None, expected={"wf-q": None})
        assert refused.value.workflow_ids == ["wf-q"]
        assert [h["seq"] for h in store.history("wf-q")] == [1], "a refused write writes nothing"
        store.write_guarded({"wf-q": (later, two, None)}, None, expected={"wf-q": 1})
        assert [h["seq"] for h in store.history("wf-q")] == [1, 2]
