"""The pipe between an orchestrator and its projector child: frames, drops, end of file."""

from __future__ import annotations

import os
import random
import threading

import pytest

from orchestrator.domain.model.messages import Envelope, WorkflowStarted
from orchestrator.io.handoff.committed_channel import CommittedEvent, CommittedEvents
from orchestrator.io.handoff.committed_pipe import (
    PipePublisher,
    decode_frames,
    encode_frame,
    read_frames,
)
from orchestrator.payload_schemas.codec import Codec

codec = Codec()


def _event(
    wf: str, seq: int, partition: int = 3, offset: int = 0, follows: int = -1
) -> CommittedEvent:
    env = Envelope(
        message_id=f"{wf}/{seq}",
        workflow_id=wf,
        run_id=wf,
        seq=seq,
        type="WorkflowStarted",
        recorded_at=1_764_500_000_000 + seq,
        payload=WorkflowStarted("order", 1, "d" * 64, '{"n": "é\\u0000"}', 0),
    )
    return CommittedEvent(partition, offset or seq, env, None, codec.encode(env), follows)


def test_frames_survive_any_split_of_the_stream():
    batches = [
        [_event(f"wf-{b}", s, b % 4, 10 * b + s, 10 * b + s - 1) for s in range(1, b + 2)]
        for b in range(30)
    ]
    stream = b"".join(encode_frame(batch) for batch in batches)
    rng = random.Random(7)
    buf, got, at = bytearray(), [], 0
    while at < len(stream):
        step = rng.randint(1, 97)
        buf += stream[at : at + step]
        at += step
        got.extend(decode_frames(buf))
    assert buf == bytearray()
    want = [[(e.partition, e.offset, e.follows, e.value) for e in batch] for batch in batches]
    assert got == want


def test_an_event_without_its_record_value_is_refused():
    ev = _event("wf-1", 1)
    bare = CommittedEvent(ev.partition, ev.offset, ev.envelope)
    with pytest.raises(ValueError, match="wf-1/1 has no record value to send"):
        encode_frame([bare])


def test_a_child_gets_every_event_decoded_then_its_end_of_file():
    read_end, write_end = os.pipe()
    into = CommittedEvents()
    into.listen()
    ended = threading.Event()
    reader = read_frames(read_end, into, ended.set, Codec())
    publisher = PipePublisher()
    publisher.attach(write_end)
    assert publisher.listening
    sent = [
        [_event(f"wf-{i}", s, offset=100 * i + s, follows=100 * i + s - 1) for s in (1, 2, 3)]
        for i in range(50)
    ]
    for batch in sent:
        publisher.publish(batch)
    got: list[CommittedEvent] = []
    while len(got) < 150:
        taken = into.take(5.0)
        assert taken, f"only {len(got)} of 150 events arrived"
        got.extend(taken)
    assert [(e.partition, e.offset, e.follows, e.envelope) for e in got] == [
        (e.partition, e.offset, e.follows, e.envelope) for batch in sent for e in batch
    ]
    assert into.publishing
    publisher.detach()  # the orchestrator stops: the child reads its end of file
    assert not publisher.listening
    assert ended.wait(5.0)
    reader.join(5.0)
    assert not into.publishing
    publisher.publish(sent[0])  # nobody attached: nothing queued, nothing counted
    assert (publisher.published, publisher.dropped) == (150, 0)
    publisher.stop()


def test_a_child_that_falls_behind_makes_the_publisher_drop_not_block():
    read_end, write_end = os.pipe()
    publisher = PipePublisher(max_bytes=64 * 1024)
    publisher.attach(write_end)
    batch = [_event("wf-slow", s) for s in range(1, 40)]
    for _ in range(400):  # ~4 MB into a pipe nobody reads
        publisher.publish(batch)
    assert publisher.dropped > 0
    assert publisher.published + publisher.dropped == 400 * len(batch)
    os.close(read_end)  # the child died: the writer's EPIPE drops the rest
    publisher.stop()


def test_a_dead_child_never_breaks_the_publisher():
    read_end, write_end = os.pipe()
    os.close(read_end)
    publisher = PipePublisher()
    publisher.attach(write_end)
    for _ in range(20):
        publisher.publish([_event("wf-x", 1)])
    publisher.stop()  # the writer saw EPIPE and went on; nothing raised here
    assert publisher.published == 20


def test_each_pipe_gets_exactly_its_frames_though_pipe_numbers_are_reused():
    publisher = PipePublisher()
    for i in range(40):  # a child restarted forty times; the writer closes each old pipe
        read_end, write_end = os.pipe()
        publisher.attach(write_end)
        batch = [_event(f"wf-{i}", 1, offset=i + 1)]
        publisher.publish(batch)
        publisher.detach()
        received = bytearray()
        while chunk := os.read(read_end, 1 << 16):  # until the writer closed its end
            received += chunk
        os.close(read_end)
        assert list(decode_frames(received)) == [
            [(ev.partition, ev.offset, ev.follows, ev.value) for ev in batch]
        ]
        assert received == bytearray()
    assert (publisher.published, publisher.dropped) == (40, 0)
    publisher.stop()
