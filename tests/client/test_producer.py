"""The batching producer against a real in-process broker on 127.0.0.1."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer

from rustka.client.producer import BatchingProducer
from rustka.client.protocol import RustkaClientProtocol
from rustka.errors import InvalidRequest, UnknownTopic
from rustka.partitioner import partition_for_key
from tests.conftest import within


async def read_all(client: RustkaClientProtocol, topic: str, partition: int) -> list[Any]:
    records: list[Any] = []
    offset = 0
    while True:
        result = await within(client.fetch_batch(topic, partition, offset))
        if not result.records:
            return records
        records.extend(result.records)
        offset = result.next_offset


@pytest_twisted.ensureDeferred
async def test_offsets_are_contiguous_and_records_read_back(client: RustkaClientProtocol) -> None:
    """Every record's Deferred fires with its own offset, and the log holds it there."""
    await within(client.create_topic("events", 3))
    producer = BatchingProducer(client, batch_bytes=2000, linger_ms=1)
    sent = [(f"key-{i % 17}".encode(), f"value-{i}".encode()) for i in range(3000)]
    results = await within(defer.gatherResults([producer.send("events", k, v) for k, v in sent]))
    await within(producer.close())
    by_partition: dict[int, list[tuple[int, bytes, bytes]]] = {}
    for (partition, offset), (key, value) in zip(results, sent, strict=True):
        assert partition == partition_for_key(key, 3)
        by_partition.setdefault(partition, []).append((offset, key, value))
    for partition, expected in by_partition.items():
        assert [o for o, _, _ in expected] == list(range(len(expected)))
        stored = await read_all(client, "events", partition)
        assert [(r.offset, r.key, r.value) for r in stored] == expected


@pytest_twisted.ensureDeferred
async def test_routing_matches_the_brokers_seed_produce(client: RustkaClientProtocol) -> None:
    """A key lands on the partition the broker's own Produce picks for it."""
    await within(client.create_topic("routed", 5))
    producer = BatchingProducer(client)
    for i in range(40):
        key = f"user-{i}".encode()
        seed_partition, _ = await within(client.produce("routed", key, b"seed"))
        batch_partition, _ = await within(producer.send("routed", key, b"batched"))
        assert batch_partition == seed_partition


@pytest_twisted.ensureDeferred
async def test_full_batches_go_out_without_waiting_for_linger(
    client: RustkaClientProtocol,
) -> None:
    """A batch reaching batch_bytes is sent at once even with a very long linger."""
    await within(client.create_topic("full", 1))
    producer = BatchingProducer(client, batch_bytes=1000, linger_ms=60_000)
    ds = [producer.send("full", b"k", b"x" * 100) for _ in range(35)]
    # 108 bytes each: three full batches of ten, five records still open.
    assert await within(ds[29], 10) == (0, 29)
    assert all(d.called for d in ds[:30])
    assert not any(d.called for d in ds[30:])
    await within(producer.flush())
    assert all(d.called for d in ds)


@pytest_twisted.ensureDeferred
async def test_linger_sends_a_partial_batch(client: RustkaClientProtocol) -> None:
    """A lone record goes out after linger_ms without flush()."""
    await within(client.create_topic("linger", 1))
    producer = BatchingProducer(client, linger_ms=2)
    assert await within(producer.send("linger", b"k", b"v"), 10) == (0, 0)


@pytest_twisted.ensureDeferred
async def test_several_batches_are_in_flight(client: RustkaClientProtocol) -> None:
    """Closed batches are pipelined on the connection up to max_in_flight."""
    await within(client.create_topic("inflight", 1))
    producer = BatchingProducer(client, batch_bytes=200, linger_ms=60_000, max_in_flight=4)
    assert await within(producer.refresh("inflight")) == 1
    ds = [producer.send("inflight", b"k", b"x" * 100) for _ in range(20)]
    assert client.pending == 4
    results = await within(defer.gatherResults(ds))
    assert [offset for _, offset in results] == list(range(20))


@pytest_twisted.ensureDeferred
async def test_unknown_topic_is_created_with_the_default_count(
    client: RustkaClientProtocol,
) -> None:
    """The first send to a missing topic creates it with new_topic_partitions."""
    producer = BatchingProducer(client, new_topic_partitions=4)
    await within(producer.send("fresh", b"a", b"1"))
    meta = await within(client.metadata(["fresh"]))
    assert len(meta[0].partitions) == 4


@pytest_twisted.ensureDeferred
async def test_unknown_topic_fails_when_creation_is_off(client: RustkaClientProtocol) -> None:
    """With new_topic_partitions=None, records for a missing topic fail with UnknownTopic."""
    producer = BatchingProducer(client, new_topic_partitions=None)
    ds = [producer.send("absent", b"k", b"v") for _ in range(3)]
    for d in ds:
        with pytest.raises(UnknownTopic):
            await within(d)
    await within(producer.flush())
    assert producer.buffered_bytes == 0


@pytest_twisted.ensureDeferred
async def test_a_failed_batch_fails_only_its_records(client: RustkaClientProtocol) -> None:
    """A batch that cannot be encoded fails its own records; other partitions' succeed."""
    await within(client.create_topic("mixed", 2))
    producer = BatchingProducer(client, linger_ms=60_000)
    keys = {partition_for_key(f"k{i}".encode(), 2): f"k{i}".encode() for i in range(20)}
    warm_up = producer.send("mixed", keys[0], b"warm-up")
    await within(producer.flush())
    assert warm_up.called
    with pytest.raises(InvalidRequest):
        await producer.send("mixed", keys[0], 12345)  # type: ignore[arg-type]
    bad = producer.send("mixed", keys[0], "text, not bytes")  # type: ignore[arg-type]
    neighbour = producer.send("mixed", keys[0], b"same batch")
    other = producer.send("mixed", keys[1], b"other partition")
    await within(producer.flush())
    for d in (bad, neighbour):
        with pytest.raises(InvalidRequest):
            await within(d)
    assert await within(other) == (1, 0)
    assert [r.value for r in await read_all(client, "mixed", 0)] == [b"warm-up"]


@pytest_twisted.ensureDeferred
async def test_flush_waits_for_every_acknowledgement(client: RustkaClientProtocol) -> None:
    """After flush() every record's Deferred has fired and nothing is buffered."""
    producer = BatchingProducer(client, linger_ms=60_000)
    ds = [producer.send("flushing", f"{i}".encode(), b"v") for i in range(500)]
    assert not any(d.called for d in ds)
    await within(producer.flush())
    assert all(d.called for d in ds)
    assert producer.buffered_bytes == 0


@pytest_twisted.ensureDeferred
async def test_keyless_records_stick_then_move(client: RustkaClientProtocol) -> None:
    """Records without a key fill one partition's batch, then the next batch moves on."""
    await within(client.create_topic("sticky", 3))
    producer = BatchingProducer(client, batch_bytes=500, linger_ms=60_000)
    ds = [producer.send("sticky", None, b"x" * 40) for _ in range(30)]
    await within(producer.flush())
    partitions = [(await d)[0] for d in ds]
    assert partitions[:10] == [0] * 10
    assert set(partitions) == {0, 1, 2}


@pytest_twisted.ensureDeferred
async def test_headers_travel_with_the_record(client: RustkaClientProtocol) -> None:
    """Headers given to send() are stored with the record."""
    await within(client.create_topic("headed", 1))
    producer = BatchingProducer(client)
    await within(producer.send("headed", b"k", b"v", [("trace", b"abc"), ("none", None)]))
    [record] = await read_all(client, "headed", 0)
    assert record.headers == (("trace", b"abc"), ("none", None))


@pytest_twisted.ensureDeferred
async def test_wait_for_room_applies_backpressure(client: RustkaClientProtocol) -> None:
    """Over buffer_bytes, wait_for_room() waits until acknowledgements free space."""
    await within(client.create_topic("pressure", 1))
    producer = BatchingProducer(client, buffer_bytes=1000, linger_ms=60_000)
    for _ in range(20):
        producer.send("pressure", b"k", b"x" * 100)
    room = producer.wait_for_room()
    assert not room.called
    await within(producer.flush())
    assert room.called


@pytest_twisted.ensureDeferred
async def test_send_after_close_fails(client: RustkaClientProtocol) -> None:
    """A closed producer refuses new records with InvalidRequest."""
    producer = BatchingProducer(client)
    await within(producer.close())
    with pytest.raises(InvalidRequest):
        await producer.send("late", b"k", b"v")


@pytest_twisted.ensureDeferred
async def test_refresh_picks_up_added_partitions(client: RustkaClientProtocol) -> None:
    """After topics alter, refresh() routes keys over the new partition count."""
    await within(client.create_topic("growing", 1))
    producer = BatchingProducer(client)
    assert (await within(producer.send("growing", b"x", b"v")))[0] == 0
    await within(client.alter_topic("growing", 4))
    assert await within(producer.refresh("growing")) == 4
    keys = [f"key-{i}".encode() for i in range(30)]
    results = [await within(producer.send("growing", k, b"v")) for k in keys]
    assert [p for p, _ in results] == [partition_for_key(k, 4) for k in keys]


def test_bad_settings_are_refused() -> None:
    """Nonsensical sizes raise InvalidRequest before anything is sent."""
    for kwargs in (
        {"batch_bytes": 0},
        {"linger_ms": -1},
        {"max_in_flight": 0},
        {"new_topic_partitions": 0},
    ):
        with pytest.raises(InvalidRequest):
            BatchingProducer(object(), reactor=object(), **kwargs)


@pytest_twisted.ensureDeferred
async def test_send_many_fires_with_each_records_place(client: RustkaClientProtocol) -> None:
    """send_many's records get (partition, offset)s in order, interleaved with send()s."""
    await within(client.create_topic("many", 3))
    producer = BatchingProducer(client, batch_bytes=500, linger_ms=1)
    pairs = [(b"key-%d" % (i % 7), b"value-%d" % i) for i in range(400)]
    single = producer.send("many", b"key-1", b"alone")
    many = producer.send_many("many", pairs)
    empty = producer.send_many("many", [])
    results = await within(many)
    assert await within(empty) == []
    await within(producer.close())
    lone_partition, lone_offset = await within(single)
    per_partition: dict[int, list[int]] = {}
    for (partition, offset), (key, _) in zip(results, pairs, strict=True):
        assert partition == partition_for_key(key, 3)
        per_partition.setdefault(partition, []).append(offset)
    for offsets in per_partition.values():
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert lone_offset not in per_partition.get(lone_partition, [])
    fetched = await within(client.fetch_batch("many", results[10][0], results[10][1]))
    assert (fetched.records[0].key, fetched.records[0].value) == pairs[10]


@pytest_twisted.ensureDeferred
async def test_send_many_to_a_missing_topic_fails_when_creation_is_off(
    client: RustkaClientProtocol,
) -> None:
    """Without auto-creation, a send_many to an unknown topic fails with UnknownTopic."""
    producer = BatchingProducer(client, new_topic_partitions=None)
    with pytest.raises(UnknownTopic):
        await within(producer.send_many("nowhere", [(b"k", b"v"), (b"k2", b"v2")]))
    assert producer.buffered_bytes == 0
