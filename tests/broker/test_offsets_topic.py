"""Kafka's ``__consumer_offsets`` records as rustka writes them (rustka.broker.offsets_topic).

The byte vectors are written by hand from Kafka's schemas (OffsetCommitKey: int16
version, string group, string topic, int32 partition; OffsetCommitValue version 3:
int16 version, int64 offset, int32 leader epoch, string metadata, int64 commit
timestamp; a string is an int16 length and UTF-8), and the hashes were printed by
Java's own ``String.hashCode``, so none of them comes from the encoder under test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_twisted

from rustka.broker.offsets_topic import (
    java_hash,
    offset_commit_key,
    offset_commit_value,
    partition_for,
    records_of,
)
from rustka.names import CONSUMER_OFFSETS_TOPIC
from tests.conftest import reactor_turns, start_broker


def test_the_key_is_offset_commit_key_version_1() -> None:
    assert offset_commit_key("g1", "orders", 3) == bytes.fromhex(
        "0001"  # version 1
        "0002" + b"g1".hex() + "0006" + b"orders".hex() + "00000003"
    )


def test_string_lengths_count_utf8_bytes() -> None:
    # "grüppe" is six characters and seven bytes.
    assert offset_commit_key("grüppe", "t", 70000) == bytes.fromhex(
        "0001" + "0007" + b"gr".hex() + "c3bc" + b"ppe".hex() + "0001" + "74" + "00011170"
    )


def test_the_value_is_offset_commit_value_version_3() -> None:
    assert offset_commit_value(42, "m", 1_700_000_000_000) == bytes.fromhex(
        "0003"  # version 3
        "000000000000002a"  # offset
        "ffffffff"  # leader epoch: unknown
        "0001" + b"m".hex() + "0000018bcfe56800"  # commit time 1_700_000_000_000 ms
    )


def test_empty_metadata_is_an_empty_string_not_null() -> None:
    assert offset_commit_value(0, "", 0) == bytes.fromhex(
        "00030000000000000000ffffffff00000000000000000000"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hello", 99162322),
        ("", 0),
        ("héllo wörld", 1628148953),
        ("😀", 1772899),  # a surrogate pair: two UTF-16 code units, as Java counts
        ("billing", -109829509),
        ("abcdefghijklmnop", -2093879032),
        ("polygenelubricants", -(2**31)),
        ("Aa", 2112),
        ("BB", 2112),
    ],
)
def test_java_hash_matches_java(text: str, expected: int) -> None:
    assert java_hash(text) == expected


@pytest.mark.parametrize(
    ("group", "partitions", "expected"),
    [
        ("hello", 50, 22),
        ("", 50, 0),
        ("héllo wörld", 50, 3),
        ("😀", 50, 49),
        ("billing", 50, 9),  # a negative hash: its absolute value
        ("billing", 3, 1),
        ("console-consumer-12345", 50, 6),
        ("abcdefghijklmnop", 50, 32),
        ("polygenelubricants", 50, 0),  # Integer.MIN_VALUE: Kafka's Utils.abs gives 0
        ("anything", 1, 0),
    ],
)
def test_partition_for_is_kafkas_choice(group: str, partitions: int, expected: int) -> None:
    assert partition_for(group, partitions) == expected


def test_records_of_a_commit_and_a_deletion() -> None:
    records = records_of([("g", "t", 0, 5, "meta"), ("g2", "t", 1)], 1_700_000_000_000)
    assert [group for group, _ in records] == ["g", "g2"]
    commit, deletion = (record for _, record in records)
    assert commit.key == bytes.fromhex("000100016700017400000000")
    assert commit.value == bytes.fromhex(
        "00030000000000000005ffffffff0004" + b"meta".hex() + "0000018bcfe56800"
    )
    assert commit.timestamp == 1_700_000_000_000
    assert deletion.key == bytes.fromhex("00010002" + b"g2".hex() + "00017400000001")
    assert deletion.value is None
    assert deletion.timestamp == 1_700_000_000_000


def test_records_of_a_commit_without_metadata() -> None:
    [(_, record)] = records_of([("g", "t", 2, 7)], 5)
    assert record.value == bytes.fromhex("00030000000000000007ffffffff00000000000000000005")


# -- in the broker (a real one on 127.0.0.1, the native protocol) --------------------


@pytest_twisted.ensureDeferred
async def test_the_topic_exists_once_the_broker_is_ready(data_dir: Path) -> None:
    running = await start_broker(data_dir, consumer_offsets_topic=True)
    try:
        # No wait: a client's first request may come now.
        assert len(running.broker.topics[CONSUMER_OFFSETS_TOPIC].partitions) == 1
        assert running.broker.offsets_topic is not None
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_native_commit_becomes_a_record(data_dir: Path) -> None:
    running = await start_broker(data_dir, consumer_offsets_topic=True)
    try:
        c = await running.client()
        try:
            await c.create_topic("t", 1)
            await c.commit("g", "t", 0, 5)
            kept = running.broker.offsets_topic
            await reactor_turns(lambda: kept.records_written == 1)
            record = await c.fetch(CONSUMER_OFFSETS_TOPIC, 0, 0)
        finally:
            await c.close()
        assert record is not None
        assert record.key == bytes.fromhex("000100016700017400000000")
        assert record.value is not None and record.value[:16] == bytes.fromhex(
            "00030000000000000005ffffffff0000"
        )
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_write_while_the_broker_stops_is_dropped_quietly(data_dir: Path) -> None:
    running = await start_broker(data_dir, consumer_offsets_topic=True)
    try:
        kept = running.broker.offsets_topic
        running.broker.accepting = False
        try:
            kept.publish([("g", "t", 0, 1, "")], 5)  # restated at the next start
        finally:
            running.broker.accepting = True
        assert (kept.failed_writes, kept.records_written) == (1, 0)
    finally:
        await running.stop()
