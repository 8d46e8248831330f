"""The compiled Avro writers/readers (``orchestrator/payload_schemas/codec_fast.py``) against fastavro.

For every payload type of the current schema, with ordinary, empty, non-ASCII, null and
extreme values, the compiled writer must produce fastavro's bytes exactly and the
compiled reader must give back what fastavro reads.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from orchestrator.domain.model.messages import PAYLOAD_TYPES, Envelope, TimerFired
from orchestrator.payload_schemas.codec import Codec, DecodeError
from orchestrator.payload_schemas.codec_fast import read_long, write_long

_INTS = [0, 1, -1, 63, 64, -64, -65, 8191, 8192, -8192, 2**31 - 1, -(2**31), 2**40, 2**63 - 1]
_TEXTS = [
    "",
    "a",
    "é",
    "wf-ingest-000042/embed_documents/1",
    "日本語 ✓",
    "x" * 300,
    "y" * 8191,
    "z" * 8192,
]


def _value(t: Any, rnd: random.Random, null: bool) -> Any:
    if isinstance(t, dict):
        t = t["type"]
    if isinstance(t, list):
        if null:
            return None
        t = next(x for x in t if x != "null")
    if t == "string":
        return rnd.choice(_TEXTS)
    if t == "bytes":
        return rnd.choice([b"", b"\x00\xff", bytes(range(256)) * 40])
    if t == "boolean":
        return rnd.choice([True, False])
    return rnd.choice(_INTS[:12] if t == "int" else _INTS)


def _samples(codec: Codec) -> list[Envelope[Any]]:
    payload = next(f for f in codec.schema["fields"] if f["name"] == "payload")
    rnd = random.Random(7)
    out: list[Envelope[Any]] = []
    for branch in payload["type"]:
        cls = PAYLOAD_TYPES[branch["name"].rsplit(".", 1)[-1]]
        types = {f["name"]: f["type"] for f in branch["fields"]}
        for i in range(6):
            null = i % 2 == 1
            values = {f.name: _value(types[f.name], rnd, null) for f in dataclasses.fields(cls)}
            out.append(
                Envelope(
                    message_id=rnd.choice(_TEXTS),
                    workflow_id="wf-é",
                    run_id="r",
                    seq=rnd.choice(_INTS),
                    type=cls.__name__,
                    recorded_at=1_732_900_000_000 + i,
                    payload=cls(**values),
                    causation_id=None if null else "c",
                    correlation_id=None if i % 3 == 0 else "wf",
                    traceparent=None if null else "00-4bf9-01",
                )
            )
    return out


def test_every_payload_type_is_compiled() -> None:
    codec = Codec()
    assert set(codec._writers) == {cls for cls, _ in codec._dec.values()}
    assert codec._read is not None


def test_compiled_bytes_equal_fastavro_and_read_back() -> None:
    codec = Codec()
    samples = _samples(codec)
    assert len(samples) >= 6 * 40
    for env in samples:
        fast = codec.encode(env)
        assert fast == codec.encode_reference(env), env.type
        back = codec.decode(fast)
        assert back == codec.decode_reference(fast)
        assert back == env
        assert back.traceparent == env.traceparent


@pytest.mark.parametrize("n", [*_INTS, -(2**63), 12345678901234, -987654321])
def test_long_round_trip(n: int) -> None:
    data = write_long(n)
    assert read_long(data, 0) == (n, len(data))


def test_long_out_of_range_is_refused() -> None:
    with pytest.raises(OverflowError):
        write_long(2**63)
    with pytest.raises(OverflowError):  # each time: a refusal is never remembered
        write_long(2**63)


def test_large_longs_written_again_are_the_same_bytes_and_the_memory_is_bounded() -> None:
    import io

    from fastavro import schemaless_writer

    from orchestrator.payload_schemas import codec_fast

    start = 1_764_547_200_000  # epoch ms, as recorded_at is
    for n in range(start, start + 3 * codec_fast._RECENT_MAX):
        for _ in range(2):  # written, then found again
            out = io.BytesIO()
            schemaless_writer(out, "long", n)
            assert write_long(n) == out.getvalue()
        assert len(codec_fast._RECENT) <= codec_fast._RECENT_MAX


def test_compiled_reader_refuses_bad_bytes_like_fastavro() -> None:
    codec = Codec()
    data = codec.encode(Envelope("m", "w", "r", 1, "TimerFired", 5, TimerFired("t")))
    bad_branch = data[:10] + b"\x02m\x02w\x02r\x02\x14TimerFired\x0a\x7f"
    with pytest.raises(DecodeError, match=r"^corrupt datum: "):
        codec.decode(bad_branch)
    with pytest.raises(DecodeError, match=r"^corrupt datum: EOFError$"):
        codec.decode(data[:-3])
