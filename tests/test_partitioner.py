"""Kafka-compatible key routing."""

from __future__ import annotations

import random

import pytest

from rustka.errors import InvalidPartitionCount
from rustka.partitioner import murmur2, partition_for_key

# Expected values from Apache Kafka's own test suite:
# clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2
# (apache/kafka commit f55581dc73953c3509a4702433aeeeddc2970779).
KAFKA_VECTORS: list[tuple[bytes, int]] = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS)
def test_murmur2_matches_kafka_vectors(data: bytes, expected: int) -> None:
    """murmur2 returns the same signed int32 as Kafka's Utils.murmur2."""
    assert murmur2(data) == expected


# Kafka's vectors have no input with exactly one leftover byte, so these come from
# the kafka_ex client's Kafka-compatibility test (KafkaEx.Utils.MurmurTest), which
# pins the values the Java client computes.
ONE_BYTE_TAIL_VECTORS: list[tuple[bytes, int]] = [
    (b"hover", -1982829826),
    (b"guest", 1235690374),
]


@pytest.mark.parametrize(("data", "expected"), ONE_BYTE_TAIL_VECTORS)
def test_murmur2_one_byte_tail(data: bytes, expected: int) -> None:
    """Inputs with one leftover byte after the 4-byte words hash like Kafka."""
    assert murmur2(data) == expected


def test_murmur2_vectors_cover_every_tail_length() -> None:
    """Together the vectors exercise all four tail lengths (0-3 leftover bytes)."""
    vectors = KAFKA_VECTORS + ONE_BYTE_TAIL_VECTORS
    assert {len(data) % 4 for data, _ in vectors} == {0, 1, 2, 3}


def test_murmur2_is_signed_int32() -> None:
    """Results stay within Java's int range for many inputs, including negatives."""
    results = [murmur2(f"key-{i}".encode()) for i in range(2000)]
    assert all(-(1 << 31) <= r < (1 << 31) for r in results)
    assert any(r < 0 for r in results)
    assert any(r > 0 for r in results)


def test_murmur2_empty_and_high_bytes() -> None:
    """Empty input hashes to the seed's mix, and bytes >= 0x80 are read unsigned.

    275646681 is what the Java client's Utils.murmur2 returns for an empty array
    (seed 0x9747b28c xor length 0, then the final mix; no words, no tail).
    """
    assert murmur2(b"") == 275646681
    assert murmur2(b"\xff\xfe\xfd") != murmur2(b"\x7f\x7e\x7d")
    assert murmur2(bytearray(b"foobar")) == -790332482


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS)
def test_partition_for_key_masks_sign_bit(data: bytes, expected: int) -> None:
    """The partition is the positive-masked hash modulo the count, as in Kafka."""
    for count in (1, 3, 7, 12, 100):
        assert partition_for_key(data, count) == (expected & 0x7FFFFFFF) % count


def test_partition_for_key_known_value() -> None:
    """A negative hash still maps into range: 'foobar' over 10 partitions."""
    assert partition_for_key(b"foobar", 10) == (-790332482 & 0x7FFFFFFF) % 10 == 6


def test_partition_for_key_stays_in_range() -> None:
    """Every key maps to a partition in [0, count) and uses all of them."""
    seen = {partition_for_key(f"user-{i}".encode(), 5) for i in range(500)}
    assert seen == {0, 1, 2, 3, 4}


@pytest.mark.parametrize("count", [0, -1, -100])
def test_partition_for_key_rejects_bad_count(count: int) -> None:
    """A partition count below 1 is InvalidPartitionCount, not ZeroDivisionError."""
    with pytest.raises(InvalidPartitionCount, match="at least 1"):
        partition_for_key(b"k", count)


def _reference_murmur2(data: bytes) -> int:
    """Kafka's algorithm spelled out byte by byte, as an independent check of the word loop."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    rest = data[whole:]
    if len(rest) == 3:
        h ^= rest[2] << 16
    if len(rest) >= 2:
        h ^= rest[1] << 8
    if rest:
        h ^= rest[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def test_murmur2_matches_reference_for_every_length() -> None:
    """Keys of 0-400 bytes, past the precompiled word readers, hash like the reference."""
    rng = random.Random(7)
    for length in range(401):
        data = rng.randbytes(length)
        assert murmur2(data) == _reference_murmur2(data), length
        assert partition_for_key(data, 12) == (_reference_murmur2(data) & 0x7FFFFFFF) % 12
