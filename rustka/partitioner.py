"""Key -> partition routing that agrees with Apache Kafka's default partitioner.

Clients written for Kafka expect a key to land on the same partition no matter
which broker or client library stores it, so this must reproduce Kafka's
32-bit MurmurHash2 (seed 0x9747b28c, Java ``int`` arithmetic) bit for bit.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from rustka.errors import InvalidPartitionCount

__all__ = ["murmur2", "partition_for_key"]

_SEED = 0x9747B28C

# One precompiled little-endian word reader per key length in words, so hashing a
# typical key costs one C call to read it rather than a format string and a lookup.
_PRECOMPILED_WORDS = 64
_WORD_READERS: list[Callable[[bytes], tuple[int, ...]]] = [
    struct.Struct(f"<{n}I").unpack_from for n in range(_PRECOMPILED_WORDS + 1)
]


def _read_words(data: bytes, words: int) -> tuple[int, ...]:
    if words <= _PRECOMPILED_WORDS:
        return _WORD_READERS[words](data)
    return struct.unpack_from(f"<{words}I", data)


def _hash32(data: bytes) -> int:
    """MurmurHash2 as an unsigned 32-bit value.

    Python ints do not wrap, so products are masked back to 32 bits to mimic
    Java's overflow. The constants are written out (0x5BD1E995 is ``m``,
    0xFFFFFFFF the mask) because literals are the cheapest loads in the word
    loop, and Kafka's ``h = h*m ^ k*m`` is masked once after the xor: the low
    32 bits of an xor depend only on the low 32 bits of its operands.
    """
    length = len(data)
    h = _SEED ^ length
    for k in _read_words(data, length >> 2):
        k = (k * 0x5BD1E995) & 0xFFFFFFFF
        h = ((h * 0x5BD1E995) ^ ((k ^ (k >> 24)) * 0x5BD1E995)) & 0xFFFFFFFF
    tail = length & 3
    if tail:
        base = length - tail
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h = ((h ^ data[base]) * 0x5BD1E995) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0x5BD1E995) & 0xFFFFFFFF
    return h ^ (h >> 15)


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: the signed 32-bit result a Java client computes."""
    h = _hash32(data)
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partition_count: int) -> int:
    """Map a key to a partition; the positive mask (not abs) matches Kafka for INT_MIN.

    Every key of a one-partition topic lands on partition 0, so those skip the
    hash. The positive mask of the signed hash equals the unsigned hash's low 31
    bits, so the sign conversion is skipped too.
    """
    if partition_count == 1:
        return 0
    if partition_count < 1:
        raise InvalidPartitionCount(f"partition count must be at least 1, got {partition_count}")
    return (_hash32(key) & 0x7FFFFFFF) % partition_count
