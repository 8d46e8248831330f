"""The guarded read-model write in one step, and the row changes it announces, on real Redis.

``Projection.write_guarded`` checks the rebuild lock, the epoch and each row's sequence
number with the write (one Lua script); a live projector folds a workflow whose events
start at seq 1 without reading its row first, so a replay of those events onto an
existing row must be refused and folded again, never appended twice. Each status change
is published on the row's channel: ``KeelClient.start`` and ``wait`` listen there.
"""

from __future__ import annotations

import json
import threading

import pytest

from orchestrator.client.run_views import RunSummary
from orchestrator.domain.model.messages import Envelope, WorkflowStarted
from orchestrator.domain.model.state import WorkflowState
from orchestrator.examples import app as example_app
from orchestrator.io.redis.read_model import EpochChanged, Projection, RebuildRunning, SeqConflict
from orchestrator.io.redis.row_watch import RowWatch
from orchestrator.projector.projector import Projector
from orchestrator.records import fast_json
from orchestrator.records.envelopes import runtime_envelope
from orchestrator.records.history_entries import history_entry
from orchestrator.records.read_model_rows import ROW_FIELDS, ROW_NOTE_MAX_BYTES, announced_row


def _state(
    wf: str, seq: int, status: str = "running", output_json: str | None = None
) -> WorkflowState:
    return WorkflowState(
        wf, "run-1", "three_step", 1, "d", "{}", seq=seq, status=status, output_json=output_json
    )


def _waiting(client, wf: str) -> tuple[threading.Thread, threading.Event, list[RunSummary]]:
    """``client.wait(wf)`` in a thread, its fallback read 30 s away: only an
    announcement can end it in time."""
    done = threading.Event()
    got: list[RunSummary] = []

    def waiter() -> None:
        got.append(client.wait(wf, 30, poll_s=30))
        done.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    return thread, done, got


def _lines(*seqs: int) -> list[str]:
    return [json.dumps({"seq": s, "type": "X"}) for s in seqs]


def test_the_guarded_write_checks_lock_epoch_and_each_rows_seq_atomically(settings):
    store = Projection.from_url(settings.redis, settings.topic_prefix)
    store.write_guarded(
        {"wf-a": (_state("wf-a", 2), _lines(1, 2), None)}, None, expected={"wf-a": None}
    )
    assert store.get("wf-a")["seq"] == 2

    with pytest.raises(SeqConflict) as refused:  # assumed new, but the row exists
        store.write_guarded(
            {
                "wf-a": (_state("wf-a", 2), _lines(1, 2), None),
                "wf-b": (_state("wf-b", 1), _lines(1), None),
            },
            None,
            expected={"wf-a": None, "wf-b": None},
        )
    assert refused.value.workflow_ids == ["wf-a"]
    assert store.get("wf-b") is None, "nothing of a refused batch is written"
    assert [h["seq"] for h in store.history("wf-a")] == [1, 2]

    store.write_guarded(
        {"wf-a": (_state("wf-a", 3), _lines(3), "running")}, None, expected={"wf-a": 2}
    )
    assert [h["seq"] for h in store.history("wf-a")] == [1, 2, 3]

    store.r.set(store.epoch_key, "e2")
    with pytest.raises(EpochChanged) as changed:
        store.write_guarded(
            {"wf-a": (_state("wf-a", 4), _lines(4), "running")}, None, expected={"wf-a": 3}
        )
    assert changed.value.epoch == "e2"
    store.r.set(store.lock_key, "someone")
    with pytest.raises(RebuildRunning):
        store.write_guarded(
            {"wf-a": (_state("wf-a", 4), _lines(4), "running")}, "e2", expected={"wf-a": 3}
        )
    store.r.delete(store.lock_key)
    assert store.get("wf-a")["seq"] == 3


def test_a_command_too_long_for_the_script_is_written_with_watch_and_multi(settings):
    store = Projection.from_url(settings.redis, settings.topic_prefix)
    watch = RowWatch(store)
    assert watch.begin("wf-long") and watch.confirm(5)
    many = list(range(1, 4102))
    store.write_guarded(
        {"wf-long": (_state("wf-long", 4101), _lines(*many), None)},
        None,
        expected={"wf-long": None},
    )
    assert len(store.history("wf-long")) == 4101
    assert watch.next(5) == {"run_id": "run-1", "status": "running", "seq": 4101}, (
        "announced as a plain note: the client reads the row"
    )
    watch.close()
    with pytest.raises(SeqConflict):
        store.write_guarded(
            {"wf-long": (_state("wf-long", 4101), _lines(*many), None)},
            None,
            expected={"wf-long": None},
        )
    assert len(store.history("wf-long")) == 4101


def test_every_text_reaches_redis_exactly_through_the_scripts_json(settings):
    """The script's commands travel as one JSON text that Redis decodes: quotes,
    backslashes, control characters, NUL, non-ASCII and astral characters, numbers and
    enum values must come out byte for byte as redis-py would have sent them."""
    store = Projection.from_url(settings.redis, settings.topic_prefix)
    odd = 'q"uote \\ back\nline\ttab \x00nul \x7f é 😀 \u2028'
    output = json.dumps({"s": odd}, ensure_ascii=False)
    state = _state("wf-odd", 3, status="completed", output_json=output)
    lines = [json.dumps({"seq": 1, "text": odd}, ensure_ascii=False), odd, ""]
    store.write_guarded({"wf-odd": (state, lines, None)}, None, expected={"wf-odd": None})

    raw = store.r.hgetall(store.k_wf("wf-odd"))
    assert raw["output_json"] == output
    assert raw["status"] == "completed" and raw["seq"] == "3" and raw["version"] == "1"
    assert raw["state_json"] == state.to_json(fast_json.dumps_sorted)
    assert WorkflowState.from_json(raw["state_json"]) == state
    assert store.r.lrange(store.k_history("wf-odd"), 0, -1) == lines
    assert store.get("wf-odd")["output"] == {"s": odd}


def test_a_replayed_first_event_onto_an_existing_row_is_not_folded_twice(settings):
    projector = Projector(settings, example_app)
    started = Envelope(
        message_id="m1",
        workflow_id="wf-replay",
        run_id="run-1",
        seq=1,
        type="WorkflowStarted",
        recorded_at=1,
        payload=WorkflowStarted("parallel_checks", 1, "d" * 64, '{"n": 1}'),
    )
    assert projector._apply_envelopes({"wf-replay": [started]}, guarded=True)[0] == 1
    projector._cache.clear()  # as after a restart or a rebalance: the row is not cached

    applied, problems = projector._apply_envelopes({"wf-replay": [started]}, guarded=True)

    assert (applied, problems) == (0, {})
    assert [h["seq"] for h in projector.projection.history("wf-replay")] == [1]


def test_each_status_change_is_announced_and_wakes_a_waiting_client(settings, client):
    store = Projection.from_url(settings.redis, settings.topic_prefix)
    watch = RowWatch(store)
    assert watch.begin("wf-n") and watch.confirm(5)
    store.write_guarded({"wf-n": (_state("wf-n", 1), _lines(1), None)}, None)
    note = watch.next(5)
    assert (note["run_id"], note["status"], note["seq"]) == ("run-1", "running", 1)
    assert announced_row("wf-n", note) == store.get("wf-n"), "the row as written rides along"
    assert set(note["row"]) <= set(ROW_FIELDS), "no state_json, no usage sums"
    store.write_guarded({"wf-n": (_state("wf-n", 2), _lines(2), "running")}, None)
    assert watch.next(0.2) is None, "no status change, no announcement"
    watch.close()

    store.write_guarded({"wf-w": (_state("wf-w", 1), _lines(1), None)}, None)
    thread, done, got = _waiting(client, "wf-w")
    assert not done.wait(0.3)
    final = _state("wf-w", 2, "completed", '{"ok": 1}')
    store.write_guarded({"wf-w": (final, _lines(2), "running")}, None)
    assert done.wait(10), "the announcement woke the waiting client"
    thread.join()
    assert (got[0].status, got[0].output) == ("completed", {"ok": 1})


def test_a_start_whose_row_is_already_over_hands_that_row_to_the_wait(settings, client):
    """The start sends first and reads the row once subscribed; a finished row it read
    is the wait's answer, with no second read of Redis."""
    store = Projection.from_url(settings.redis, settings.topic_prefix)
    done = _state("wf-over", 3, status="completed")
    # its history starts with the start of the same workflow and input (the join's check,
    # docs/workflows.md, "Reusing a workflow id"), as the projector writes it
    started = runtime_envelope(
        "run-1", "wf-over", "run-1", WorkflowStarted("three_step", 1, "d", '{"n": 1}'), 0, seq=1
    )
    first = json.dumps(history_entry(started))
    store.write_guarded({"wf-over": (done, [first, *_lines(2, 3)], None)}, None)

    started = client.start("three_step", {"n": 1}, "wf-over")
    assert (started.run_id, started.existed) == ("run-1", True)

    reads: list[str] = []
    real_get = client.projection.get

    def counted(wf: str):
        reads.append(wf)
        return real_get(wf)

    client.projection.get = counted  # type: ignore[method-assign]
    try:
        row = client.wait("wf-over", 5)
    finally:
        client.projection.get = real_get  # type: ignore[method-assign]
    assert reads == []
    assert (row.status, row.seq, row.run_id) == ("completed", 3, "run-1")
    assert client.wait("wf-over", 5) == row  # a second wait reads the row again


def _frozen_reads(client, wf: str):
    """Make every read of ``wf``'s row by ``client`` return the row as it is now."""
    seen = client.projection.get(wf)
    reads: list[str] = []

    def frozen(asked: str):
        reads.append(asked)
        return seen

    client.projection.get = frozen  # type: ignore[method-assign]
    return reads


def test_a_waiting_client_takes_the_finished_row_from_the_announcement(settings, client):
    """The announcement carries the row read after the write, so ``wait`` ends on it:
    here the client's own reads are frozen on the running row and cannot end it."""
    store = Projection.from_url(settings.redis, settings.topic_prefix)
    store.write_guarded({"wf-c": (_state("wf-c", 1), _lines(1), None)}, None)
    store.mark_error("wf-c", "event 1 skipped: unreadable")
    reads = _frozen_reads(client, "wf-c")
    thread, done, got = _waiting(client, "wf-c")
    assert not done.wait(0.3)
    assert reads, "the waiter read the (running) row once subscribed"
    final = _state("wf-c", 2, "completed", '{"ok": 2}')
    store.write_guarded({"wf-c": (final, _lines(2), "running")}, None)
    assert done.wait(10), "the announced row ended the wait"
    thread.join()
    assert (got[0].status, got[0].output, got[0].seq) == ("completed", {"ok": 2}, 2)
    assert got[0].projection_error == "event 1 skipped: unreadable", (
        "read after the write: fields the batch did not write are there too"
    )


def test_a_row_past_the_size_cap_is_announced_without_it_and_read(settings, client):
    store = Projection.from_url(settings.redis, settings.topic_prefix)
    watch = RowWatch(store)
    assert watch.begin("wf-big") and watch.confirm(5)
    big = '{"text": "%s"}' % ("x" * ROW_NOTE_MAX_BYTES)
    final = _state("wf-big", 1, "completed", big)
    store.write_guarded({"wf-big": (final, _lines(1), None)}, None)
    note = watch.next(5)
    assert note == {"run_id": "run-1", "status": "completed", "seq": 1}
    watch.close()
    row = client.wait("wf-big", 5)
    assert row.output == {"text": "x" * ROW_NOTE_MAX_BYTES}
