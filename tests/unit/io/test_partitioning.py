"""Keel's murmur2 is Kafka's: the Java client's own test vectors, signed as Java has them."""

from __future__ import annotations

import pytest

from orchestrator.io.partitioning import murmur2, partition_for

# org.apache.kafka.common.utils.UtilsTest.testMurmur2
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "signed"), sorted(KAFKA_VECTORS.items()))
def test_murmur2_matches_kafkas_vectors(key: bytes, signed: int) -> None:
    assert murmur2(key) == signed & 0xFFFFFFFF


def test_every_tail_length_and_the_empty_key() -> None:
    # 0-3 trailing bytes after whole words each take their own branch
    seen = {murmur2(b"abcd"[:n] + b"efgh") for n in range(4)}
    assert len(seen) == 4
    assert murmur2(b"") == 275646681


def test_the_partition_is_the_positive_hash_modulo_the_count() -> None:
    assert partition_for(b"foobar", 12) == (-790332482 & 0x7FFFFFFF) % 12
