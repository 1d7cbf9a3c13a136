"""Key -> partition routing that agrees with Apache Kafka's default partitioner.

Clients written for Kafka expect a key to land on the same partition no matter
which broker or client library stores it, so this must reproduce Kafka's
32-bit MurmurHash2 (seed 0x9747b28c, Java ``int`` arithmetic) bit for bit.
"""

from __future__ import annotations

import struct

from rustka.errors import InvalidPartitionCount

__all__ = ["murmur2", "partition_for_key"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: the signed 32-bit result a Java client computes.

    Python ints do not wrap, so every multiplication is masked back to 32 bits
    to mimic Java's overflow; words are read little-endian as Kafka does.
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    words = length >> 2
    if words:
        for k in struct.unpack_from(f"<{words}I", data):
            k = (k * _M) & _MASK32
            k ^= k >> _R
            k = (k * _M) & _MASK32
            h = ((h * _M) & _MASK32) ^ k
    tail = length & 3
    if tail:
        base = words << 2
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partition_count: int) -> int:
    """Map a key to a partition; the positive mask (not abs) matches Kafka for INT_MIN."""
    if partition_count < 1:
        raise InvalidPartitionCount(f"partition count must be at least 1, got {partition_count}")
    return (murmur2(key) & 0x7FFFFFFF) % partition_count
