"""Committed events handed to a projector in a child process, through a pipe.

The in-process channel (``committed.py``) gives the projector thread each transaction
as soon as it commits, but the projector then folds and writes to Redis inside the
orchestrator's GIL. By default (``--projector-in thread`` keeps the thread) the same
hand-off crosses a pipe to a ``keel projector --feed-fd`` child process
(``projector_child.py``): the orchestrator only queues each transaction's record values,
already encoded for Kafka; a writer thread copies them into the pipe; the child decodes
and folds them on the other core (docs/performance.md, "Where the projector runs").

As with the channel, the publisher never blocks: past ``max_bytes`` queued, or while no
child is attached, a transaction is dropped (and counted), and the child reads it from
``keel.events``, which stays the source of truth. The child stops when the pipe closes,
so it never outlives its orchestrator.

One frame per transaction: ``u32`` body length, then per event ``i32`` partition,
``i64`` offset, ``i64`` the offset it follows (``CommittedEvent.follows``), ``u32`` value
length and the value (big-endian).
"""

from __future__ import annotations

import fcntl
import logging
import os
import queue
import struct
import termios
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from orchestrator.io.handoff.committed_channel import CommittedEvent, CommittedEvents, HandedRecord
from orchestrator.payload_schemas.codec import Codec

__all__ = ["MAX_QUEUED_BYTES", "PipePublisher", "decode_frames", "encode_frame", "read_frames"]

log = logging.getLogger("keel.projector.pipe")

_HEAD = struct.Struct(">I")
_EVENT = struct.Struct(">iqqI")
#: Bytes a publisher holds for a child that fell behind before it drops transactions.
MAX_QUEUED_BYTES = 32 * 2**20
#: Bytes read from the pipe at once.
_READ_BYTES = 1 << 20


def encode_frame(events: Sequence[HandedRecord]) -> bytes:
    """One transaction's events as a frame (each needs its ``value``)."""
    parts: list[bytes] = []
    for ev in events:
        value = ev.value
        if value is None:
            raise ValueError(f"event {ev.envelope.message_id} has no record value to send")
        parts += (_EVENT.pack(ev.partition, ev.offset, ev.follows, len(value)), value)
    body = b"".join(parts)
    return _HEAD.pack(len(body)) + body


def decode_frames(buf: bytearray) -> Iterator[list[tuple[int, int, int, bytes]]]:
    """Every whole frame at the start of ``buf`` (removed from it), as its events."""
    while len(buf) >= _HEAD.size:
        (n,) = _HEAD.unpack_from(buf, 0)
        end = _HEAD.size + n
        if len(buf) < end:
            return
        body = bytes(buf[_HEAD.size : end])
        del buf[:end]
        events: list[tuple[int, int, int, bytes]] = []
        at = 0
        while at < n:
            partition, offset, follows, size = _EVENT.unpack_from(body, at)
            at += _EVENT.size
            events.append((partition, offset, follows, body[at : at + size]))
            at += size
        yield events


class PipePublisher:
    """The orchestrator's end of the pipe; a :class:`~orchestrator.io.handoff.committed_channel.
    CommittedSink`. A child is attached (:meth:`attach`) and detached again by its
    supervisor; only the writer thread ever writes to or closes a pipe."""

    def __init__(self, max_bytes: int = MAX_QUEUED_BYTES) -> None:
        self.max_bytes = max_bytes
        self._queue: queue.SimpleQueue[tuple[int, bytes] | int | None] = queue.SimpleQueue()
        self._fd: int | None = None
        self._queued = 0
        self._lock = threading.Lock()
        #: Events handed to a child, and events dropped (the topic has them).
        self.published = 0
        self.dropped = 0
        self._writer = threading.Thread(target=self._write, name="keel-projector-pipe")
        self._writer.daemon = True
        self._writer.start()

    @property
    def listening(self) -> bool:
        return self._fd is not None

    def open_publisher(self) -> None:
        """Part of the sink's interface: a pipe has one publisher, nothing to count."""

    def close_publisher(self) -> None:
        """The orchestrator stopped: the child gets its end of file."""
        self.detach()

    def attach(self, fd: int) -> None:
        """Send from now on to the pipe ``fd`` (owned from here on)."""
        with self._lock:
            old, self._fd = self._fd, fd
            if old is not None:
                self._queue.put(old)  # closed in order, after what was queued for it

    def detach(self) -> None:
        """Send nothing more; the pipe is closed once what was queued for it is written."""
        with self._lock:
            old, self._fd = self._fd, None
            if old is not None:
                self._queue.put(old)

    def stop(self) -> None:
        self.detach()
        self._queue.put(None)
        self._writer.join(5)

    def publish(self, events: Sequence[HandedRecord]) -> None:
        """Queue one transaction for the child; never blocks. Only the records are sent
        (the orchestrator hands its own ``_Sent`` events over as they are).

        The pipe is read and the frame queued under the lock :meth:`detach` takes, so a
        frame always precedes its pipe's close in the writer's queue (a closed pipe's
        number may be reused by the next one).
        """
        if not events or self._fd is None:
            return
        frame = encode_frame(events)
        with self._lock:
            fd = self._fd
            if fd is None:
                return
            if self._queued + len(frame) > self.max_bytes:
                self.dropped += len(events)
                return
            self._queued += len(frame)
            self.published += len(events)
            self._queue.put((fd, frame))

    def _write(self) -> None:
        broken: set[int] = set()
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, int):  # a pipe given up: close it after its frames
                broken.discard(item)
                _close(item)
                continue
            fd, frame = item
            try:
                if fd not in broken:
                    _write_all(fd, frame)
            except OSError as exc:  # the child is gone: drop what is queued for it
                log.warning("the projector child's pipe broke: %s", exc)
                broken.add(fd)
            finally:
                with self._lock:
                    self._queued -= len(frame)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _unread(fd: int) -> int:
    """Bytes waiting in the pipe ``fd``."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        log.debug("closing pipe %d failed", fd)


def read_frames(
    fd: int, into: CommittedEvents, on_eof: Callable[[], Any], codec: Codec
) -> threading.Thread:
    """The child's end: a thread that decodes each frame read from ``fd`` (with the
    process's ``codec``) into ``into`` (as this process's publisher) and calls ``on_eof``
    when the pipe closes."""

    def run() -> None:
        buf = bytearray()
        into.open_publisher()
        try:
            while chunk := os.read(fd, _READ_BYTES):
                into.arriving = True
                buf += chunk
                for events in decode_frames(buf):
                    into.publish(
                        [
                            CommittedEvent(p, o, codec.decode(v), None, None, f)
                            for p, o, f, v in events
                        ]
                    )
                into.arriving = bool(buf) or _unread(fd) > 0
        except Exception:
            log.exception("reading the orchestrator's pipe failed; stopping")
        finally:
            into.arriving = False
            into.close_publisher()
            _close(fd)
            on_eof()

    thread = threading.Thread(target=run, name="keel-projector-feed", daemon=True)
    thread.start()
    return thread
