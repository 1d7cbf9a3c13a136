"""The Kafka API handlers over the wire, with rustka's own Kafka client, byte-level cases
the real clients never send: bad batches, duplicates, sequence gaps, acks=0, limits."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import crc32c
import pytest
import pytest_twisted
from twisted.internet import defer

from rustka.kafka.client import KafkaClientProtocol, connect_kafka
from rustka.record.batch import (
    Record,
    compress_batch,
    crc_ok,
    decode_records,
    encode_batch,
    ms_now,
    scan_batches,
)
from rustka.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from rustka.security.acl_store import ACL_FILE, save_acls
from rustka.storage.inspect import dump_path
from tests.conftest import RunningBroker, reactor_turns, start_broker, within

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
async def test_producer_ids_come_from_the_core_whichever_listener_asks(
    broker: RunningBroker,
) -> None:
    """One allocator, the core's: a second Kafka front-end on the same core (as a
    ``kafka_listen`` endpoint has) continues the same sequence, never repeating an id."""
    from twisted.internet import reactor

    from rustka.kafka.server import KafkaFactory

    port = reactor.listenTCP(
        0, KafkaFactory(broker.broker, broker.config, reactor), interface="127.0.0.1"
    )
    shared = await kafka(broker)
    other = await within(
        defer.ensureDeferred(connect_kafka(reactor, f"127.0.0.1:{port.getHost().port}"))
    )
    ask = {"transactional_id": None, "transaction_timeout_ms": 1}
    try:
        given = [broker.broker.new_producer_id()]
        for _ in range(50):
            for client in (shared, other):
                given.append((await client.request(INIT_PID, ask))["producer_id"])
        given.append(broker.broker.new_producer_id())
        assert given == sorted(set(given))
    finally:
        await shared.close()
        await other.close()
        await port.stopListening()


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


def fetch_body(
    positions: list[tuple[str, int, int]], max_bytes: int, max_wait_ms: int = 0
) -> dict[str, Any]:
    """A Fetch of ``(topic, partition, offset)`` in this order, 1 MiB per partition."""
    topics: list[dict[str, Any]] = []
    for topic, partition, offset in positions:
        if not topics or topics[-1]["topic"] != topic:
            topics.append({"topic": topic, "partitions": []})
        topics[-1]["partitions"].append(
            {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
        )
    return {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": 1,
        "max_bytes": max_bytes,
        "topics": topics,
    }


def fetched(answer: dict[str, Any]) -> list[tuple[str, int, int, int, bytes]]:
    """(topic, partition, error, high watermark, records) in the answer's order."""
    return [
        (
            t["topic"],
            p["partition_index"],
            p["error_code"],
            p["high_watermark"],
            bytes(p["records"]),
        )
        for t in answer["responses"]
        for p in t["partitions"]
    ]


@pytest_twisted.ensureDeferred
async def test_a_fetch_of_many_partitions_shares_its_budget_and_answers_errors_in_place(
    broker: RunningBroker,
) -> None:
    """One Fetch over four partitions, an unknown topic and another topic: the response's
    max_bytes is shared in request order (the first partition takes its two batches,
    later ones whose batch is over what is left get none), each error in its place."""
    core = broker.broker
    await within(core.create_topic("mp", 4))
    await within(core.create_topic("mq", 1))
    k = await kafka(broker)
    try:
        sent = [
            [encode_batch([Record(b"k", b"%d-%d" % (p, n) * 50)]) for n in range(2)]
            for p in range(5)
        ]
        for p, batches in enumerate(sent):
            for b in batches:
                where = ("mp", p) if p < 4 else ("mq", 0)
                await k.request(PRODUCE, produce_body({where: b}))
        size = len(sent[0][0])
        positions = [
            ("mp", 0, 0),
            ("mp", 1, 9),
            ("mp", 2, 0),
            ("mp", 3, 2),
            ("nope", 0, 0),
            ("mq", 0, 0),
        ]
        answer = await k.request(FETCH, fetch_body(positions, 2 * size + size // 2))
        got = fetched(answer)
        assert [(t, p, e, hw) for t, p, e, hw, _ in got] == [
            ("mp", 0, 0, 2),
            ("mp", 1, 1, 2),  # OFFSET_OUT_OF_RANGE, with the bounds
            ("mp", 2, 0, 2),
            ("mp", 3, 0, 2),
            ("nope", 0, 3, -1),  # UNKNOWN_TOPIC_OR_PARTITION
            ("mq", 0, 0, 2),
        ]
        served = got[0][4]
        batches, _ = scan_batches(served)
        assert [h.base_offset for _, h in batches] == [0, 1] and len(served) == 2 * size
        assert [records for *_, records in got[1:]] == [b""] * 5
        # With room for everything, every partition with data is served in the one answer.
        answer = await k.request(FETCH, fetch_body([("mp", p, 0) for p in range(4)], 1 << 20))
        assert [len(records) for *_, records in fetched(answer)] == [2 * size] * 4
    finally:
        await k.close()


@pytest_twisted.ensureDeferred
async def test_a_long_poll_over_many_partitions_reads_nothing_until_one_has_data(
    broker: RunningBroker,
) -> None:
    """A Fetch at the high watermark of every partition parks without a pool job (there is
    nothing to read), and is answered with the record produced to one of them meanwhile."""

    core = broker.broker
    await within(core.create_topic("lp", 8))
    consumer, producer = await kafka(broker), await kafka(broker)
    try:
        before = core.io.submitted
        waiting = consumer.request(
            FETCH, fetch_body([("lp", p, 0) for p in range(8)], 1 << 20, max_wait_ms=10_000)
        )
        await reactor_turns(lambda: len(core.waiters) > 0)
        assert len(core.waiters) == 1 and not waiting.called
        assert core.io.submitted == before
        record = encode_batch([Record(b"k", b"woken")])
        await producer.request(PRODUCE, produce_body({("lp", 5): record}))
        got = fetched(await within(waiting))
        assert [(p, e, hw) for _, p, e, hw, _ in got] == [(p, 0, int(p == 5)) for p in range(8)]
        assert [records != b"" for *_, records in got] == [p == 5 for p in range(8)]
        assert [r.value for r in decode_records(got[5][4])] == [b"woken"]
    finally:
        await consumer.close()
        await producer.close()


# -- Produce validation, rule by rule (docs/kafka.md) -------------------------------

TS = 1_700_000_000_000


def resealed(batch: bytes, at: int, fmt: str, value: int) -> bytes:
    """One header field changed and the CRC made right again, as a client would send it."""
    out = bytearray(batch)
    struct.pack_into(fmt, out, at, value)
    struct.pack_into("!I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def go_style() -> bytes:
    """Three records TS, TS+5, TS+9 under a maxTimestamp of -1, as the Go client sends."""
    records = [Record(key, b"v", timestamp=TS + delta) for key, delta in ((b"a", 0), (b"b", 5))]
    batch = encode_batch([*records, Record(b"c", b"v", timestamp=TS + 9)])
    return resealed(batch, 35, "!q", -1)


async def fetch_partition(k: KafkaClientProtocol, topic: str, partition: int) -> dict[str, Any]:
    answer = await k.request(
        FETCH,
        {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {"partition": partition, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
        },
    )
    return answer["responses"][0]["partitions"][0]


@pytest_twisted.ensureDeferred
async def test_a_wrong_max_timestamp_is_rewritten_where_consumers_and_the_indexes_see_it(
    broker_factory: Any,
) -> None:
    """A Go client's maxTimestamp of -1 is stored as the records' largest timestamp, as
    Kafka's log validator writes it: on disk (rustka dump), in what Fetch serves (with a
    valid CRC), in the segment's max timestamp that retention reads, in the time index
    and so in ListOffsets by time."""
    # Old timestamps must not make the segment roll by age: both batches share one segment.
    running = await broker_factory(index_interval_bytes=1, segment_ms=None)
    k = await kafka(running)
    try:
        later = encode_batch([Record(b"d", b"4")], timestamp=TS - 100)
        assert results(await k.request(PRODUCE, produce_body({("go", 0): go_style()}))) == {
            ("go", 0): (0, 0)
        }
        assert results(await k.request(PRODUCE, produce_body({("go", 0): later}))) == {
            ("go", 0): (0, 3)
        }
        served = bytes((await fetch_partition(k, "go", 0))["records"])
        [(pos, header), _] = scan_batches(served)[0]
        assert header.max_timestamp == TS + 9
        assert crc_ok(served, pos, header)
        assert [r.timestamp for r in decode_records(served)] == [TS, TS + 5, TS + 9]
        plog = running.broker.partition("go", 0)
        [segment] = plog.segments
        assert segment.max_timestamp == TS + 9
        assert (TS + 9, 0) in segment.time_index_snapshot()
        dumped = dump_path(segment.log_path)
        assert [b["max_timestamp"] for b in dumped["batches"]] == [TS + 9, TS - 100]
        assert all(b["crc_ok"] for b in dumped["batches"]) and not dumped["problems"]
        answer = await k.request(
            LIST_OFFSETS,
            {
                "replica_id": -1,
                "topics": [
                    {"name": "go", "partitions": [{"partition_index": 0, "timestamp": TS + 6}]}
                ],
            },
        )
        found = answer["topics"][0]["partitions"][0]
        assert (found["offset"], found["timestamp"]) == (2, TS + 9)  # the record at TS + 9
    finally:
        await k.close()
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_produce_v3_plus_takes_exactly_one_batch_per_partition(
    broker: RunningBroker,
) -> None:
    """Two batches, or a batch and trailing bytes, in one partition are INVALID_RECORD and
    store nothing; the request's other partitions go on."""
    c = await broker.client()
    await c.create_topic("one", 3)
    await c.close()
    k = await kafka(broker)
    try:
        a = encode_batch([Record(b"k", b"a")])
        b = encode_batch([Record(b"k", b"b")])
        got = results(
            await k.request(
                PRODUCE,
                produce_body({("one", 0): a + b, ("one", 1): a + b"\x00" * 5, ("one", 2): a}),
            )
        )
        assert got == {("one", 0): (87, -1), ("one", 1): (87, -1), ("one", 2): (0, 0)}
        assert [await end_offset(k, "one", p) for p in range(3)] == [0, 0, 1]
    finally:
        await k.close()


@pytest_twisted.ensureDeferred
async def test_record_errors_come_before_bad_acks(broker: RunningBroker) -> None:
    """As in Kafka, a partition whose records fail the request checks says so; only the
    others get INVALID_REQUIRED_ACKS."""
    k = await kafka(broker)
    try:
        a = encode_batch([Record(b"k", b"a")])
        got = results(
            await k.request(PRODUCE, produce_body({("acks", 0): a + a, ("acks", 1): a}, acks=2))
        )
        assert got == {("acks", 0): (87, -1), ("acks", 1): (21, -1)}
    finally:
        await k.close()


@pytest_twisted.ensureDeferred
async def test_zstd_needs_produce_v7(broker: RunningBroker) -> None:
    """zstd in Produce v3-6 is UNSUPPORTED_COMPRESSION_TYPE, as Kafka refuses it; v7 takes it."""
    k = await kafka(broker)
    try:
        batch = compress_batch(encode_batch([Record(b"k", b"z" * 100)]), "zstd")
        old = results(await k.request(PRODUCE, produce_body({("z", 0): batch}), version=6))
        assert old == {("z", 0): (76, -1)}
        new = results(await k.request(PRODUCE, produce_body({("z", 0): batch}), version=7))
        assert new == {("z", 0): (0, 0)}
        gzip = compress_batch(encode_batch([Record(b"k", b"g")]), "gzip")
        assert results(await k.request(PRODUCE, produce_body({("z", 0): gzip}), version=3)) == {
            ("z", 0): (0, 1)
        }
    finally:
        await k.close()


@pytest_twisted.ensureDeferred
async def test_a_transactional_batch_fails_the_whole_request(broker: RunningBroker) -> None:
    """Kafka answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition of a request
    carrying a transactional batch without a transactional id. With an id, a batch outside
    an ongoing transaction of its producer is refused for its partition alone
    (INVALID_PRODUCER_ID_MAPPING: no such transaction); a transactional id beside plain
    batches is no transaction, and Kafka stores them."""
    c = await broker.client()
    await c.create_topic("tx", 2)
    await c.close()
    k = await kafka(broker)
    try:
        plain = encode_batch([Record(b"k", b"v")])
        transactional = resealed(idempotent(plain, 5, 0, 0), 21, "!h", 0x10)
        got = results(
            await k.request(PRODUCE, produce_body({("tx", 0): transactional, ("tx", 1): plain}))
        )
        assert got == {("tx", 0): (53, -1), ("tx", 1): (53, -1)}
        assert [await end_offset(k, "tx", p) for p in range(2)] == [0, 0]
        body = produce_body({("tx", 0): transactional, ("tx", 1): plain})
        body["transactional_id"] = "not-really"
        assert results(await k.request(PRODUCE, body)) == {("tx", 0): (49, -1), ("tx", 1): (0, 0)}
        assert [await end_offset(k, "tx", p) for p in range(2)] == [0, 1]
    finally:
        await k.close()


@pytest_twisted.ensureDeferred
async def test_an_acks_zero_produce_that_fails_closes_the_connection(
    broker: RunningBroker,
) -> None:
    """An acks=0 producer cannot read an error, so Kafka hangs up on it; a good acks=0
    request leaves the connection open (test_acks_zero_gets_no_answer_but_later_requests_do)."""
    k = await kafka(broker)
    bad = bytearray(encode_batch([Record(b"k", b"v")]))
    bad[-1] ^= 0xFF
    k.send_only(PRODUCE, produce_body({("quiet", 0): bytes(bad)}, acks=0), k.version_for(PRODUCE))
    await within(k.closed, 10)
    k2 = await kafka(broker)
    try:
        assert await end_offset(k2, "quiet", 0) == 0
    finally:
        await k2.close()


@pytest_twisted.ensureDeferred
async def test_a_denied_acks_zero_produce_closes_the_connection(data_dir: Path) -> None:
    """A partition the ACLs deny is a failure like any other: Kafka's request handler
    merges it into the answer, then hangs up on the acks=0 producer. The allowed
    partition of the same request is still written."""
    data_dir.mkdir(parents=True)
    allowed = [
        AclBinding(t, n, PatternType.LITERAL, "User:ANONYMOUS", "*", op, Permission.ALLOW)
        for t, n, op in (
            (ResourceType.TOPIC, "ok", Operation.ALL),
            (ResourceType.CLUSTER, "kafka-cluster", Operation.CREATE),
        )
    ]
    save_acls(data_dir / ACL_FILE, allowed)
    running = await start_broker(data_dir, authorizer_enabled=True)
    try:
        k = await kafka(running)
        batch = encode_batch([Record(b"k", b"v")])
        k.send_only(
            PRODUCE,
            produce_body({("ok", 0): batch, ("no", 0): batch}, acks=0),
            k.version_for(PRODUCE),
        )
        await within(k.closed, 10)
        k2 = await kafka(running)
        try:
            assert await end_offset(k2, "ok", 0) == 1
            # A request of allowed partitions only keeps the connection: later ones answer.
            k2.send_only(PRODUCE, produce_body({("ok", 0): batch}, acks=0), k2.version_for(PRODUCE))
            assert await end_offset(k2, "ok", 0) == 2
        finally:
            await k2.close()
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_short_batches_are_corrupt_and_log_append_time_is_an_invalid_timestamp(
    broker: RunningBroker,
) -> None:
    """A batchLength too small for a batch header is CORRUPT_MESSAGE and a client batch
    typed LogAppendTime is INVALID_TIMESTAMP, the codes Kafka answers."""
    k = await kafka(broker)
    try:
        good = encode_batch([Record(b"k", b"v")])
        short = bytearray(good)
        struct.pack_into("!i", short, 8, 20)
        log_append = resealed(good, 21, "!h", 0x08)
        got = results(
            await k.request(PRODUCE, produce_body({("c", 0): bytes(short), ("c", 1): log_append}))
        )
        assert got == {("c", 0): (2, -1), ("c", 1): (32, -1)}
    finally:
        await k.close()


@pytest_twisted.ensureDeferred
async def test_a_partition_without_a_v2_batch_is_invalid_record(broker: RunningBroker) -> None:
    """No records, or a first batch of another magic, is INVALID_RECORD before anything
    else is read: a magic-1 header whose attribute bits would say zstd is not asked for
    Produce v7."""
    k = await kafka(broker)
    try:
        good = encode_batch([Record(b"k", b"v")])
        old_magic = bytearray(good)
        old_magic[16] = 1
        old_magic[22] = 4
        got = results(
            await k.request(
                PRODUCE,
                produce_body({("m", 0): bytes(old_magic), ("m", 1): b"", ("m", 2): good}),
                version=6,
            )
        )
        assert got == {("m", 0): (87, -1), ("m", 1): (87, -1), ("m", 2): (0, 0)}
    finally:
        await k.close()


@pytest_twisted.ensureDeferred
async def test_any_record_timestamp_is_taken_as_kafka_defaults_take_it(
    broker: RunningBroker,
) -> None:
    """rustka has no message.timestamp.before/after.max.ms: a record ten years ahead of the
    broker's clock or at the epoch is stored, as Kafka up to 3.9 stores it by default
    (Kafka 4.0 refuses more than an hour ahead; docs/kafka.md)."""
    k = await kafka(broker)
    try:
        ahead = ms_now() + 10 * 365 * 24 * 3600 * 1000
        batch = encode_batch([Record(b"k", b"v", timestamp=ahead), Record(b"k", b"0", timestamp=0)])
        assert results(await k.request(PRODUCE, produce_body({("far", 0): batch}))) == {
            ("far", 0): (0, 0)
        }
        served = bytes((await fetch_partition(k, "far", 0))["records"])
        assert [r.timestamp for r in decode_records(served)] == [ahead, 0]
    finally:
        await k.close()


@pytest_twisted.ensureDeferred
async def test_a_client_base_offset_is_rewritten_not_refused(broker: RunningBroker) -> None:
    """Kafka refuses a client batch whose baseOffset is not 0; rustka rewrites it like any
    base offset (it is outside the CRC), so `rustka mirror`, which forwards stored batches
    with their offsets, can write into rustka (docs/kafka.md)."""
    k = await kafka(broker)
    try:
        batch = encode_batch([Record(b"k", b"v")], base_offset=41)
        assert results(await k.request(PRODUCE, produce_body({("bo", 0): batch}))) == {
            ("bo", 0): (0, 0)
        }
        served = bytes((await fetch_partition(k, "bo", 0))["records"])
        assert served[8:] == batch[8:]
        assert struct.unpack_from("!q", served)[0] == 0
    finally:
        await k.close()


@pytest_twisted.ensureDeferred
async def test_pipelined_produces_of_many_partitions_keep_each_partitions_order(
    broker: RunningBroker,
) -> None:
    """Produces of eight partitions each, sent back to back from two connections, each
    answered once all its partitions are: every partition stores them in order, a bad
    batch in each request is refused alone, and a new topic in the same requests is
    created on the way."""
    c = await broker.client()
    await c.create_topic("many", 8)
    await c.close()
    connections = [await kafka(broker), await kafka(broker)]
    try:
        sent: list[tuple[int, int, defer.Deferred[dict[str, Any]]]] = []
        for round_no in range(20):
            for conn_no, k in enumerate(connections):
                parts = {
                    ("many", p): encode_batch([Record(b"k", b"%d/%d/%d" % (conn_no, round_no, p))])
                    for p in range(8)
                }
                bad = bytearray(parts[("many", round_no % 8)])
                bad[-1] ^= 0xFF
                parts[("many", round_no % 8)] = bytes(bad)
                parts[("fresh", 0)] = encode_batch([Record(b"k", b"new")])
                sent.append((conn_no, round_no, k.request(PRODUCE, produce_body(parts))))
        answers = await within(defer.gatherResults([d for _, _, d in sent]))
        for (_, round_no, _), answer in zip(sent, answers, strict=True):
            got = results(answer)
            for p in range(8):
                assert (got[("many", p)][0] == 0) == (p != round_no % 8), (round_no, p)
            assert got[("fresh", 0)][0] == 0
        core = broker.broker
        for p in range(8):
            end = core.partition("many", p).end_offset
            values = []
            for offset in range(end):
                record = await within(core.read_record("many", p, offset))
                values.append(record.value)
            for conn_no in range(2):
                mine = [v for v in values if v.startswith(b"%d/" % conn_no)]
                expected = [
                    b"%d/%d/%d" % (conn_no, round_no, p)
                    for round_no in range(20)
                    if round_no % 8 != p
                ]
                assert mine == expected
        assert await end_offset(connections[0], "fresh", 0) == 40
    finally:
        for k in connections:
            await k.close()


@pytest.mark.usefixtures("force_fast_paths")
@pytest_twisted.ensureDeferred
async def test_an_io_thread_answers_a_one_partition_produce_itself_in_order(
    broker: RunningBroker,
) -> None:
    """A Produce of one partition is answered by the I/O thread that stored it
    (`KafkaProtocol.answer_early`); pipelined ones still come back in order, each with
    its own offset, and a Produce of two partitions is answered on the reactor."""
    c = await broker.client()
    await c.create_topic("early", 2)
    await c.close()
    k = await kafka(broker)
    [proto] = list(broker.top.kafka_factory.connections)
    for i in range(20):
        answer = await k.request(
            PRODUCE, produce_body({("early", 0): encode_batch([Record(b"k", b"%d" % i)])})
        )
        assert results(answer) == {("early", 0): (0, i)}
    # A thread counts its answer under the lock it sent it with, which the reactor's
    # own writes take: once a later answer from the reactor arrived, the count is whole.
    assert await end_offset(k, "early", 0) == 20
    # The reactor may take one over when it holds the connection's output at that moment.
    assert proto.answered_early > 0
    alone = proto.answered_early
    pipelined = [
        k.request(PRODUCE, produce_body({("early", 0): encode_batch([Record(b"k", b"p%d" % i)])}))
        for i in range(30)
    ]
    answers = await within(defer.gatherResults(pipelined))
    assert [results(a)[("early", 0)] for a in answers] == [(0, 20 + i) for i in range(30)]
    assert await end_offset(k, "early", 0) == 50
    before = proto.answered_early
    both = produce_body(
        {
            ("early", 0): encode_batch([Record(b"k", b"x")]),
            ("early", 1): encode_batch([Record(b"k", b"y")]),
        }
    )
    assert results(await k.request(PRODUCE, both)) == {("early", 0): (0, 50), ("early", 1): (0, 0)}
    assert await end_offset(k, "early", 0) == 51
    assert proto.answered_early == before >= alone
    k.transport.loseConnection()
