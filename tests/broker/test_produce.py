"""The shared produce path (rustka/broker/produce.py), through the native front-end.

The Kafka front-end's own request checks are in tests/kafka/test_handlers.py; what
both front-ends share is `accept_batches` on the I/O pool, so a native
ProduceBatch gets the same rewrite of a wrong maxTimestamp that a Kafka Produce
gets (docs/protocol.md, ProduceBatch), while keeping what the native protocol
allows beyond Kafka: several batches in one request.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest_twisted
from crc32c import crc32c

from rustka.record.batch import (
    Record,
    crc_ok,
    encode_batch,
    scan_batches,
    validate_batches,
)
from tests.conftest import RunningBroker, within

TS = 1_700_000_000_000


def with_max_timestamp(batch: bytes, max_timestamp: int) -> bytes:
    out = bytearray(batch)
    struct.pack_into("!q", out, 35, max_timestamp)
    struct.pack_into("!I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


@pytest_twisted.ensureDeferred
async def test_native_produce_batch_stores_the_true_max_timestamp(broker: RunningBroker) -> None:
    """Two batches in one ProduceBatch, the second claiming maxTimestamp -1: both are
    stored, the second with its records' largest timestamp and a valid CRC, and the
    segment's max timestamp (retention's input) is that of the records."""
    first = encode_batch([Record(b"a", b"1")], timestamp=TS - 10)
    second = with_max_timestamp(
        encode_batch([Record(b"b", b"2", timestamp=TS), Record(b"c", b"3", timestamp=TS + 7)]),
        -1,
    )
    c = await broker.client()
    try:
        assert await within(c.produce_batch("native-ts", 0, first + second)) == (0, 2)
        got = await within(c.fetch_batch("native-ts", 0, 0))
        assert [r.timestamp for r in got.records] == [TS - 10, TS, TS + 7]
    finally:
        await within(c.close())
    read = await within(broker.broker.read("native-ts", 0, 0, 1 << 20))
    stored = b"".join(read.chunks)
    batches, end = scan_batches(stored)
    assert end == len(stored)
    assert [h.max_timestamp for _, h in batches] == [TS - 10, TS + 7]
    assert all(crc_ok(stored, pos, h) for pos, h in batches)
    assert validate_batches(stored)
    [segment] = broker.broker.partition("native-ts", 0).segments
    assert segment.max_timestamp == TS + 7


@pytest_twisted.ensureDeferred
async def test_a_batch_larger_than_a_segment_is_stored_whole(
    broker_factory: Any,
) -> None:
    """Kafka refuses a batch larger than segment.bytes (RECORD_LIST_TOO_LARGE); rustka's
    segment_bytes is only where segments roll, and max_batch_bytes is the one size
    limit, so such a batch is stored whole, and the segment it lands in rolls after it
    (docs/kafka.md)."""
    running = await broker_factory(segment_bytes=1024, segment_ms=None)
    try:
        core = running.broker
        small = encode_batch([Record(b"k", b"s")], timestamp=TS)
        big = encode_batch([Record(b"k", b"x" * 5000)], timestamp=TS)
        for batch in (small, big, small):
            await within(core.append("seg", 0, batch, auto_create=True))
        sizes = [(s.base_offset, s.size) for s in core.partition("seg", 0).segments]
        assert sizes == [(0, len(small) + len(big)), (2, len(small))]
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_topics_configs_apply_to_the_seed_produce_too(broker: RunningBroker) -> None:
    """The native seed Produce's broker-built batches get the topic's rules as client
    batches do: LogAppendTime stamps them, compression.type recompresses them, and a
    topic without configs stores them as before."""
    configs = {"message.timestamp.type": "LogAppendTime", "compression.type": "gzip"}
    c = await broker.client()
    try:
        assert await within(c.create_topic("seeded", 1, configs)) == 1
        assert await within(c.create_topic("plain", 1)) == 1
        for topic in ("seeded", "plain"):
            for i in range(3):
                await within(c.produce(topic, b"k", b"v%d" % i))
        got = await within(c.fetch_batch("seeded", 0, 0))
        assert [r.value for r in got.records] == [b"v0", b"v1", b"v2"]
    finally:
        await within(c.close())
    stored = b"".join((await within(broker.broker.read("seeded", 0, 0, 1 << 20))).chunks)
    batches, _ = scan_batches(stored)
    assert len(batches) == 3
    assert all(h.attributes & 0x07 == 1 and h.attributes & 0x08 for _, h in batches)
    assert all(crc_ok(stored, pos, h) for pos, h in batches)
    assert [r.timestamp for r in got.records] == [h.max_timestamp for _, h in batches]
    plain = b"".join((await within(broker.broker.read("plain", 0, 0, 1 << 20))).chunks)
    assert all(h.attributes == 0 for _, h in scan_batches(plain)[0])
