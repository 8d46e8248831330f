"""Broker errors sorted as librdkafka documents them; no call waits forever; stop is honoured."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError, KafkaException

from orchestrator.io.kafka import broker_errors
from orchestrator.io.kafka.broker_errors import (
    BoundedCaller,
    BrokerErrorKind,
    CallStalled,
    ProducerReset,
    Stopping,
    TxnAbortable,
    classify,
    retry_call,
)
from tests.unit.memory_rig import MemoryRig


def _exc(code: int, **flags: bool) -> KafkaException:
    return KafkaException(KafkaError(code, "injected", **flags))


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (_exc(KafkaError._TIMED_OUT, retriable=True), BrokerErrorKind.RETRIABLE),
        (_exc(KafkaError._TRANSPORT), BrokerErrorKind.RETRIABLE),
        (_exc(KafkaError._TIMED_OUT, txn_requires_abort=True), BrokerErrorKind.ABORTABLE),
        (_exc(KafkaError._FENCED, fatal=True), BrokerErrorKind.FATAL),
        (_exc(KafkaError.PRODUCER_FENCED), BrokerErrorKind.FATAL),
        (_exc(KafkaError.INVALID_CONFIG), BrokerErrorKind.FATAL),
    ],
)
def test_classify(exc, kind):
    assert classify(exc) is kind


def test_a_retriable_error_is_retried_until_it_succeeds():
    calls = []

    def attempt(remaining: float) -> str:
        calls.append(remaining)
        if len(calls) < 3:
            raise _exc(KafkaError._TIMED_OUT, retriable=True)
        return "committed"

    assert retry_call("commit", attempt, deadline_s=30, stopping=lambda: False) == "committed"
    assert len(calls) == 3


def test_retries_back_off_from_50_ms_to_at_most_200_ms(monkeypatch):
    """A retry waits no longer than 200 ms, so a call goes through within a fifth of a
    second of a failover ending (docs/operations.md, "Losing a broker")."""
    slept: list[float] = []
    monkeypatch.setattr(broker_errors.time, "sleep", slept.append)
    failures = iter(range(6))

    def attempt(remaining: float) -> str:
        if next(failures, None) is not None:
            raise _exc(KafkaError.CONCURRENT_TRANSACTIONS, retriable=True)
        return "offsets sent"

    assert retry_call("send_offsets", attempt, deadline_s=30, stopping=lambda: False) == (
        "offsets sent"
    )
    assert slept == [0.05, 0.1, 0.2, 0.2, 0.2, 0.2]


def test_abortable_and_fatal_errors_are_not_retried():
    def abortable(_: float) -> None:
        raise _exc(KafkaError._TIMED_OUT, txn_requires_abort=True)

    def fatal(_: float) -> None:
        raise _exc(KafkaError._FENCED, fatal=True)

    with pytest.raises(TxnAbortable, match="send_offsets"):
        retry_call("send_offsets", abortable, deadline_s=30, stopping=lambda: False)
    with pytest.raises(ProducerReset, match="commit"):
        retry_call("commit", fatal, deadline_s=30, stopping=lambda: False)


def test_a_commit_still_failing_at_its_deadline_resets_the_producer():
    """The outcome of the commit is in doubt: only a new epoch settles it."""

    def always(_: float) -> None:
        raise _exc(KafkaError._TIMED_OUT, retriable=True)

    with pytest.raises(ProducerReset, match="still failing"):
        retry_call("commit", always, deadline_s=0.01, stopping=lambda: False, in_doubt=True)
    with pytest.raises(TxnAbortable, match="still failing"):
        retry_call("send_offsets", always, deadline_s=0.01, stopping=lambda: False)


def test_retrying_honours_the_stop_flag():
    stop = threading.Event()

    def attempt(_: float) -> None:
        stop.set()
        raise _exc(KafkaError._TIMED_OUT, retriable=True)

    with pytest.raises(Stopping):
        retry_call("commit", attempt, deadline_s=3600, stopping=stop.is_set)


def test_a_call_past_its_bound_is_abandoned_and_the_next_call_is_served():
    released = threading.Event()
    caller = BoundedCaller("test-call", lambda: False, slice_s=0.01)
    with pytest.raises(CallStalled, match="send_offsets_to_transaction did not return"):
        caller.call("send_offsets_to_transaction", lambda: released.wait(60), 0.05)
    assert caller.abandoned == 1
    assert (
        caller.call("commit", lambda: "served by a fresh thread", 5) == "served by a fresh thread"
    )
    released.set()


def test_a_stop_request_ends_a_call_that_ignores_its_timeout():
    stop = threading.Event()
    released = threading.Event()
    caller = BoundedCaller("test-call", stop.is_set, slice_s=0.01)
    threading.Timer(0.05, stop.set).start()
    with pytest.raises(Stopping, match="stopped while waiting for send_offsets"):
        caller.call("send_offsets_to_transaction", lambda: released.wait(60), 3600)
    assert not released.is_set()
    released.set()


def test_errors_raised_by_the_call_reach_the_caller():
    caller = BoundedCaller("test-call", lambda: False, slice_s=0.01)
    with pytest.raises(KafkaException):
        caller.call("commit", lambda: (_ for _ in ()).throw(_exc(KafkaError._FENCED)), 5)


def _run_in_thread(rig: MemoryRig) -> threading.Thread:
    t = threading.Thread(target=rig.orch.run, daemon=True)
    t.start()
    return t


def _run_until_completed(rig: MemoryRig, wf: str, rounds: int) -> list:
    """Run the orchestrator until ``wf`` completes (or ``rounds`` run out), then stop it;
    the history, which must be contiguous and end in WorkflowCompleted."""
    runner = _run_in_thread(rig)
    for _ in range(rounds):
        rig.work()
        if any(e.type == "WorkflowCompleted" for e in rig.events(wf)):
            break
        threading.Event().wait(0.02)
    rig.orch.stop()
    runner.join(30)
    assert not runner.is_alive()
    events = rig.events(wf)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[-1].type == "WorkflowCompleted"
    return events


def test_run_survives_fatal_and_abortable_commits_and_stops_on_request(tmp_path):
    rig = MemoryRig(tmp_path, hard_exit_on_stall=False, status_interval_s=0.0)
    rig.broker.inject("commit", TxnAbortable("injected abortable"))
    rig.broker.inject("commit", ProducerReset("injected: fenced"))
    rig.broker.inject("commit", CallStalled("injected: send_offsets stalled"))
    rig.start("wf-1", "three_step", {"n": 1})
    _run_until_completed(rig, "wf-1", rounds=200)
    assert rig.orch.stats.aborts == 1
    assert rig.orch.stats.producer_resets == 2
    status = (tmp_path / "status").glob("orchestrator-*.json")
    assert next(status).read_text().count('"producer_resets": 2') == 1


def test_a_reset_loop_exits_for_the_supervisor(tmp_path):
    rig = MemoryRig(tmp_path, hard_exit_on_stall=False, max_resets=2)
    rig.broker.inject("commit", ProducerReset("injected: fenced"), times=50)
    rig.start("wf-1", "three_step", {"n": 1})
    with pytest.raises(SystemExit) as exited:
        rig.orch.run()
    assert exited.value.code == 70


class _FatalMessage:
    def error(self) -> KafkaError:
        return KafkaError(KafkaError._FATAL, "static consumer fenced", fatal=True)


class _FencedConsumer:
    def poll(self, timeout: float) -> _FatalMessage:
        return _FatalMessage()

    def consume(self, n: int, timeout: float) -> list:
        return []

    def close(self) -> None:
        pass


def test_a_fatal_consumer_is_replaced_and_the_group_joined_again(tmp_path):
    from orchestrator.config.settings import Settings
    from orchestrator.io.kafka.adapter import KafkaCommandIntake

    settings = Settings(bootstrap_servers="127.0.0.1:1", redis_url="redis://127.0.0.1:1/0")
    intake = KafkaCommandIntake(
        settings, "t.commands", "t.orchestrator", instance_id="static", stopping=lambda: False
    )
    revoked: list[list[int]] = []
    intake._partitions = 2
    intake._callbacks = (lambda owned: None, revoked.append)
    fenced = _FencedConsumer()
    intake._consumer = fenced  # type: ignore[assignment]
    assert intake.poll(10, 0) == []  # the fatal error is seen
    intake.poll(10, 0)  # ... and acted on: a new consumer joins
    assert intake.consumer_resets == 1
    assert revoked == [[0, 1]]
    assert intake._consumer is not fenced
    intake._consumer.close()  # type: ignore[union-attr]


def test_committed_offsets_unanswered_after_a_reset_are_asked_again_not_fatal(tmp_path):
    """After a producer reset the partitions are rewound to their committed offsets; a
    broker that does not answer in time (as after a freeze) delays the rebuild, it does
    not end the process."""
    rig = MemoryRig(tmp_path, hard_exit_on_stall=False)
    rig.broker.inject("commit", ProducerReset("injected: fenced"))
    timed_out = _exc(KafkaError._TIMED_OUT, retriable=True)
    rig.broker.inject("rewind_to_committed", timed_out, times=2)
    rig.start("wf-1", "three_step", {"n": 1})
    _run_until_completed(rig, "wf-1", rounds=600)
    assert rig.orch.stats.producer_resets == 1
    assert rig.broker.faults["rewind_to_committed"] == []  # both failures were met
