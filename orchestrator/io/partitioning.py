"""Which partition a workflow id belongs to, exactly as Keel's producers place it.

Producers use librdkafka's ``murmur2_random`` partitioner, the Java client's default:
``(murmur2(key) & 0x7fffffff) % partitions``. The orchestrator recomputes it to refuse
a command that arrived on another partition than its workflow id's (it would otherwise
open a second copy of the run on a process that does not own it).
"""

from __future__ import annotations

import struct

__all__ = ["murmur2", "partition_for"]

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 (``org.apache.kafka.common.utils.Utils.murmur2``), unsigned."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    words = length >> 2
    whole = words << 2
    # every 4-byte word in one unpack: a slice and an int per word cost a third more
    for k in struct.unpack_from(f"<{words}I", data):
        k = (k * _M) & _MASK
        k ^= k >> 24
        h = ((h * _M) & _MASK) ^ ((k * _M) & _MASK)
    rest = length & 3
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_for(key: bytes, partitions: int) -> int:
    """The partition ``murmur2_random`` gives ``key`` among ``partitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
