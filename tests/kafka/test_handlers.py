"""The Kafka API handlers over the wire, with rustka's own Kafka client, byte-level cases
the real clients never send: bad batches, duplicates, sequence gaps, acks=0, limits."""

from __future__ import annotations

import struct
from typing import Any

import crc32c
import pytest_twisted
from twisted.internet import defer

from rustka.kafka.client import KafkaClientProtocol, connect_kafka
from rustka.storage.record_batch import Record, encode_batch
from tests.conftest import RunningBroker, within

PRODUCE, FETCH, LIST_OFFSETS, METADATA, INIT_PID = 0, 1, 2, 3, 22


async def kafka(broker: RunningBroker) -> KafkaClientProtocol:
    from twisted.internet import reactor

    return await within(defer.ensureDeferred(connect_kafka(reactor, broker.address)))


def idempotent(batch: bytes, producer_id: int, epoch: int, sequence: int) -> bytes:
    """A batch re-stamped with producer fields, its CRC fixed as a client would write it."""
    out = bytearray(batch)
    struct.pack_into("!qhi", out, 43, producer_id, epoch, sequence)
    struct.pack_into("!I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def produce_body(parts: dict[tuple[str, int], bytes], acks: int = -1) -> dict[str, Any]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), records in parts.items():
        topics.setdefault(topic, []).append({"index": partition, "records": records})
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": 10000,
        "topic_data": [{"name": t, "partition_data": ps} for t, ps in topics.items()],
    }


def results(answer: dict[str, Any]) -> dict[tuple[str, int], tuple[int, int]]:
    return {
        (t["name"], p["index"]): (p["error_code"], p["base_offset"])
        for t in answer["responses"]
        for p in t["partition_responses"]
    }


async def end_offset(k: KafkaClientProtocol, topic: str, partition: int) -> int:
    answer = await k.request(
        LIST_OFFSETS,
        {
            "replica_id": -1,
            "topics": [
                {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}
            ],
        },
    )
    return int(answer["topics"][0]["partitions"][0]["offset"])


@pytest_twisted.ensureDeferred
async def test_bad_batches_are_refused_per_partition_and_store_nothing(
    broker: RunningBroker,
) -> None:
    c = await broker.client()
    await c.create_topic("v", 3)
    await c.close()
    k = await kafka(broker)
    try:
        good = encode_batch([Record(b"k", b"fine")])
        bad_crc = bytearray(good)
        bad_crc[-1] ^= 0xFF
        # A record whose offset delta is 5 in a one-record batch: CRC-valid, malformed.
        lying = bytearray(encode_batch([Record(b"k", b"v")]))
        body = bytearray(lying[61:])
        assert body[3] == 0  # attributes, timestampDelta, then offsetDelta (zig-zag 0)
        body[3] = 10  # zig-zag 5
        lying = bytearray(lying[:61] + body)
        struct.pack_into("!I", lying, 17, crc32c.crc32c(bytes(lying[21:])))
        answer = await k.request(
            PRODUCE, produce_body({("v", 0): good, ("v", 1): bytes(bad_crc), ("v", 2): lying})
        )
        got = results(answer)
        assert got[("v", 0)] == (0, 0)
        assert got[("v", 1)][0] == 2  # CORRUPT_MESSAGE
        assert got[("v", 2)][0] == 87  # INVALID_RECORD
        assert [await end_offset(k, "v", p) for p in range(3)] == [1, 0, 0]
    finally:
        await k.close()


@pytest_twisted.ensureDeferred
async def test_idempotent_retry_gets_its_first_offsets_and_gaps_are_refused(
    broker: RunningBroker,
) -> None:
    k = await kafka(broker)
    try:
        pid_answer = await k.request(
            INIT_PID, {"transactional_id": None, "transaction_timeout_ms": 1}
        )
        pid = pid_answer["producer_id"]
        assert pid_answer["error_code"] == 0 and pid > 0
        first = idempotent(encode_batch([Record(b"a", b"1"), Record(b"b", b"2")]), pid, 0, 0)
        second = idempotent(encode_batch([Record(b"c", b"3")]), pid, 0, 2)
        gap = idempotent(encode_batch([Record(b"d", b"4")]), pid, 0, 7)
        r1 = results(await k.request(PRODUCE, produce_body({("idem", 0): first})))
        r2 = results(await k.request(PRODUCE, produce_body({("idem", 0): second})))
        retry = results(await k.request(PRODUCE, produce_body({("idem", 0): first})))
        r_gap = results(await k.request(PRODUCE, produce_body({("idem", 0): gap})))
        assert r1[("idem", 0)] == (0, 0)
        assert r2[("idem", 0)] == (0, 2)
        assert retry[("idem", 0)] == (0, 0)  # answered with the original offsets
        assert r_gap[("idem", 0)][0] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        assert await end_offset(k, "idem", 0) == 3
        other = await k.request(INIT_PID, {"transactional_id": None, "transaction_timeout_ms": 1})
        assert other["producer_id"] != pid
    finally:
        await k.close()


@pytest_twisted.ensureDeferred
async def test_acks_zero_gets_no_answer_but_later_requests_do(broker: RunningBroker) -> None:
    k = await kafka(broker)
    try:
        batch = encode_batch([Record(b"k", b"quiet")])
        k.send_only(PRODUCE, produce_body({("quiet", 0): batch}, acks=0), k.version_for(PRODUCE))
        # The next request's answer proves the silent one was handled first, in order.
        assert await end_offset(k, "quiet", 0) == 1
    finally:
        await k.close()


@pytest_twisted.ensureDeferred
async def test_batch_over_the_limit_is_message_too_large(broker_factory: Any) -> None:
    running = await broker_factory(max_batch_bytes=4096)
    k = await kafka(running)
    try:
        big = encode_batch([Record(b"k", b"x" * 5000)])
        small = encode_batch([Record(b"k", b"ok")])
        got = results(await k.request(PRODUCE, produce_body({("lim", 0): big, ("lim", 1): small})))
        assert got[("lim", 0)][0] == 10  # MESSAGE_TOO_LARGE
        assert got[("lim", 1)] == (0, 0)
        assert await end_offset(k, "lim", 0) == 0
    finally:
        await k.close()
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_fetch_serves_stored_batches_with_bounds_and_out_of_range(
    broker: RunningBroker,
) -> None:
    k = await kafka(broker)
    try:
        batches = [encode_batch([Record(b"k", f"v{i}".encode())]) for i in range(3)]
        for b in batches:
            await k.request(PRODUCE, produce_body({("f", 0): b}))

        async def fetch(offset: int, max_bytes: int = 1 << 20) -> dict[str, Any]:
            answer = await k.request(
                FETCH,
                {
                    "replica_id": -1,
                    "max_wait_ms": 0,
                    "min_bytes": 0,
                    "max_bytes": max_bytes,
                    "topics": [
                        {
                            "topic": "f",
                            "partitions": [
                                {
                                    "partition": 0,
                                    "fetch_offset": offset,
                                    "partition_max_bytes": max_bytes,
                                }
                            ],
                        }
                    ],
                },
            )
            return answer["responses"][0]["partitions"][0]

        whole = await fetch(0)
        assert (whole["error_code"], whole["high_watermark"], whole["log_start_offset"]) == (
            0,
            3,
            0,
        )
        stored = bytes(whole["records"])
        assert len(stored) == sum(len(b) for b in batches)
        assert struct.unpack_from("!q", stored, len(batches[0]))[0] == 1  # base offset rewritten
        # A limit smaller than one batch still returns the first batch whole.
        tiny = await fetch(1, max_bytes=10)
        assert len(bytes(tiny["records"])) == len(batches[1])
        past = await fetch(4)
        assert past["error_code"] == 1  # OFFSET_OUT_OF_RANGE
    finally:
        await k.close()
