"""Diskless topics end to end: real Kafka clients, a real PostgreSQL, a real S3 server.

What is checked is what was stored, not only what was read back: the catalog's
offsets, the objects in the bucket (batches byte for byte as the producer built
them, codec and CRC included) and the broker's data dir, which holds nothing of
a diskless topic.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
import pytest_twisted
from twisted.internet import threads

from rustka.record.batch import crc_ok, decode_records, scan_batches
from rustka.record.header import CODEC_MASK
from tests.conftest import RunningBroker, reactor_turns, start_broker, within
from tests.kafka import real_clients as rc
from tests.services.seaweed import S3Place

pytestmark = pytest.mark.clients

LZ4 = 3


def diskless_settings(postgres_dsn: str, s3_bucket: S3Place, **more: Any) -> dict[str, Any]:
    return {
        "diskless_dsn": postgres_dsn,
        "diskless_bucket": s3_bucket.bucket,
        "diskless_s3_endpoint": s3_bucket.endpoint_url,
        "diskless_prefix": s3_bucket.prefix,
        "diskless_buffer_ms": 20,
        **more,
    }


def create_topic(bootstrap: str, name: str, partitions: int, configs: dict[str, str]) -> str | None:
    """Create a topic with confluent-kafka's admin client; its error's text, or None."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(name, partitions, 1, config=configs)])[name]
    try:
        future.result(30)
    except Exception as e:
        return str(e)
    return None


def stored_objects(s3_bucket: S3Place) -> dict[str, bytes]:
    store = s3_bucket.store()
    try:
        return {key: store.get(key) for key, _, _ in store.list_objects()}
    finally:
        store.close()


def catalog_rows(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql).fetchall()


@pytest_twisted.ensureDeferred
async def test_confluent_kafka_produces_and_consumes_a_diskless_topic(
    tmp_path: Path, postgres_dsn: str, s3_bucket: S3Place
) -> None:
    broker = await start_broker(tmp_path / "a", **diskless_settings(postgres_dsn, s3_bucket))
    try:
        error = await threads.deferToThread(
            create_topic, broker.address, "events", 3, {"diskless.enable": "true"}
        )
        assert error is None
        records = [(b"k%d" % i, b"value-%d" % i) for i in range(300)]
        delivered = await within(
            threads.deferToThread(
                rc.confluent_produce,
                broker.address,
                "events",
                records,
                spread=3,
                **{"enable.idempotence": True, "compression.type": "lz4", "linger.ms": 5},
            ),
            60,
        )
        by_partition: dict[int, list[int]] = {}
        for partition, offset in delivered:
            by_partition.setdefault(partition, []).append(offset)
        # Each partition's offsets are 0..n-1: contiguous, each record once.
        assert {p: sorted(o) for p, o in by_partition.items()} == {
            p: list(range(100)) for p in range(3)
        }
        read = await within(
            threads.deferToThread(rc.confluent_read_all, broker.address, "events", 3, 300), 60
        )
        assert sorted((k, v) for _, _, k, v in read) == sorted(records)
        assert sorted((p, o) for p, o, _, _ in read) == sorted(delivered)
    finally:
        await broker.stop()

    # Nothing of the topic is on the broker's disk.
    assert not (tmp_path / "a" / "events").exists()
    # The catalog holds 300 records' order; the objects hold the producer's batches.
    bounds = catalog_rows(
        postgres_dsn,
        "SELECT p.partition, p.log_start_offset, p.high_watermark FROM partitions p "
        "JOIN topics t USING (topic_id) WHERE t.name = 'events' ORDER BY p.partition",
    )
    assert bounds == [(0, 0, 100), (1, 0, 100), (2, 0, 100)]
    objects = stored_objects(s3_bucket)
    assert objects
    batches = 0
    values: list[bytes] = []
    for data in objects.values():
        found, end = scan_batches(data)
        assert end == len(data)
        for pos, header in found:
            batches += 1
            assert crc_ok(data, pos, header)
            assert header.attributes & CODEC_MASK == LZ4
            assert header.producer_id >= 0  # idempotent: stored with its producer
            values.extend(r.value or b"" for r in decode_records(data[pos : pos + header.size], 0))
    assert sorted(values) == sorted(v for _, v in records)
    assert batches < 300  # batched by the producer and gathered by the broker


@pytest_twisted.ensureDeferred
async def test_a_new_broker_with_an_empty_disk_serves_what_another_stored(
    tmp_path: Path, postgres_dsn: str, s3_bucket: S3Place
) -> None:
    settings = diskless_settings(postgres_dsn, s3_bucket)
    first = await start_broker(tmp_path / "first", **settings)
    try:
        assert (
            await threads.deferToThread(
                create_topic, first.address, "kept", 1, {"diskless.enable": "true"}
            )
            is None
        )
        records = [(b"k", b"r%d" % i) for i in range(50)]
        await within(threads.deferToThread(rc.confluent_produce, first.address, "kept", records))
    finally:
        await first.stop()
    second = await start_broker(tmp_path / "second", **settings)
    try:
        read = await within(
            threads.deferToThread(rc.confluent_read, second.address, "kept", 0, 50), 60
        )
        assert [(o, v) for o, _, v in read] == [(i, b"r%d" % i) for i in range(50)]
        more = await within(
            threads.deferToThread(rc.confluent_produce, second.address, "kept", [(b"k", b"next")])
        )
        assert more == [(0, 50)]
    finally:
        await second.stop()


@pytest_twisted.ensureDeferred
async def test_what_diskless_topics_do_not_support_is_refused_by_name(
    tmp_path: Path, postgres_dsn: str, s3_bucket: S3Place
) -> None:
    broker: RunningBroker = await start_broker(
        tmp_path / "b", **diskless_settings(postgres_dsn, s3_bucket)
    )
    try:
        error = await threads.deferToThread(
            create_topic,
            broker.address,
            "compacted",
            1,
            {"diskless.enable": "true", "cleanup.policy": "compact"},
        )
        assert error is not None and "cleanup.policy=compact" in error
        assert "diskless.enable=true" in error
    finally:
        await broker.stop()
    # Without a catalog and a bucket the broker refuses diskless.enable=true.
    plain = await start_broker(tmp_path / "c")
    try:
        error = await threads.deferToThread(
            create_topic, plain.address, "nowhere", 1, {"diskless.enable": "true"}
        )
        assert error is not None and "diskless_dsn" in error
    finally:
        await plain.stop()


@pytest_twisted.ensureDeferred
async def test_two_brokers_producing_into_the_same_partition_get_contiguous_offsets(
    tmp_path: Path, postgres_dsn: str, s3_bucket: S3Place
) -> None:
    """Two brokers share the catalog and the bucket; producers on each write into the
    same partition at once: every record once, offsets 0..n-1, and a consumer on
    either broker reads all of them."""
    settings = diskless_settings(postgres_dsn, s3_bucket)
    one = await start_broker(tmp_path / "one", **settings, broker_id=1)
    two = await start_broker(tmp_path / "two", **settings, broker_id=2)
    try:
        assert (
            await threads.deferToThread(
                create_topic, one.address, "shared", 1, {"diskless.enable": "true"}
            )
            is None
        )
        # The second broker learns of the topic from the catalog (its refresh).
        await reactor_turns(lambda: "shared" in two.broker.topics, 30)
        records_one = [(b"one", b"1-%d" % i) for i in range(200)]
        records_two = [(b"two", b"2-%d" % i) for i in range(200)]
        idempotent = {"enable.idempotence": True, "linger.ms": 2}
        both = await within(
            defer_both(
                threads.deferToThread(
                    rc.confluent_produce, one.address, "shared", records_one, **idempotent
                ),
                threads.deferToThread(
                    rc.confluent_produce, two.address, "shared", records_two, **idempotent
                ),
            ),
            90,
        )
        offsets = sorted(o for delivered in both for _, o in delivered)
        assert offsets == list(range(400))
        for broker in (one, two):
            read = await within(
                threads.deferToThread(rc.confluent_read_all, broker.address, "shared", 1, 400),
                60,
            )
            assert [o for _, o, _, _ in read] == list(range(400))
            assert sorted(v for _, _, _, v in read) == sorted(
                v for _, v in records_one + records_two
            )
    finally:
        await one.stop()
        await two.stop()


def defer_both(*ds: Any) -> Any:
    from twisted.internet import defer

    return defer.gatherResults(list(ds), consumeErrors=True)
