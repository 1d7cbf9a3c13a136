"""The diskless engine and partition against a real PostgreSQL and S3 server: payloads
stored once and read back with their assigned offsets, retention, collection."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from rustka.errors import InvalidConfig, OffsetOutOfRange
from rustka.record.batch import Record, decode_records, encode_batch, scan_batches
from rustka.storage.diskless.catalog import Catalog
from rustka.storage.diskless.engine import DisklessEngine
from rustka.storage.diskless.object_cache import ObjectCache
from rustka.storage.diskless.partition import DisklessPartition
from rustka.storage.diskless.topics import DisklessTopics, apply_change
from rustka.storage.diskless.wal_object import new_object_key
from rustka.storage.log_config import LogConfig
from rustka.storage.partition_store import PartitionStore
from rustka.storage.topic import Topic
from tests.services.seaweed import S3Place


@pytest.fixture
def engine(postgres_dsn: str, s3_bucket: S3Place) -> Iterator[DisklessEngine]:
    catalog = Catalog(postgres_dsn)
    catalog.migrate()
    e = DisklessEngine(catalog, s3_bucket.store(), ObjectCache(0))
    yield e
    e.close()


def batch(*values: bytes, ts: int = 1000) -> bytes:
    return encode_batch([Record(b"k", v, timestamp=ts) for v in values])


def test_a_diskless_partition_is_a_partition_store_that_stores_and_reads_back(
    engine: DisklessEngine,
) -> None:
    engine.catalog.create_topic("t", 1, {})
    plog = DisklessPartition(engine, "t", 0, LogConfig(diskless_enable=True))
    assert isinstance(plog, PartitionStore)
    infos = plog.append_many([batch(b"a", b"b"), batch(b"c")])
    assert [tuple(i) for i in infos] == [(0, 1), (2, 2)]
    assert plog.append(batch(b"d", b"e")) == (3, 4)
    assert (plog.log_start_offset, plog.end_offset) == (0, 5)
    data = plog.read(2, 1 << 20)
    found, _ = scan_batches(data)
    # The stored bytes keep base offset 0; the read gives the assigned ones.
    assert [h.base_offset for _, h in found] == [2, 3]
    values = [r.value for pos, _ in found for r in decode_records(data, pos, verify=True)]
    assert values == [b"c", b"d", b"e"]
    record = plog.read_record(4)
    assert record is not None and record.value == b"e"
    assert plog.read(5, 100) == b""
    with pytest.raises(OffsetOutOfRange):
        plog.read(6, 100)
    assert engine.store.stats.puts == 2  # one object per write
    # A second broker's partition sees the same records.
    other = DisklessPartition(engine, "t", 0, LogConfig(diskless_enable=True))
    assert other.refresh() == (0, 5)


def test_retention_then_collection_delete_unused_objects_and_old_orphans(
    engine: DisklessEngine,
) -> None:
    engine.catalog.create_topic("t", 1, {})
    config = LogConfig(diskless_enable=True, retention_ms=1000, retention_bytes=None)
    plog = DisklessPartition(engine, "t", 0, config)
    plog.append_many([batch(b"old", ts=100)])
    plog.append_many([batch(b"older", ts=50), batch(b"new", ts=10**13)])
    orphan = new_object_key(9)
    engine.store.put_new(orphan, b"uploaded, never committed")
    engine.store.put_new("backups/someone-elses", b"not the collector's")
    assert plog.enforce_retention(now_ms=10_000) == [0]
    assert plog.log_start_offset == 2
    assert plog.offset_for_timestamp(0) == (2, 10**13)
    # One of the second object's payloads is still in use: only the first goes.
    engine.orphan_grace_ms = 3_600_000
    assert engine.collect() == (1, 0)  # the orphan is too young to be sure of
    engine.orphan_grace_ms = 0
    assert engine.collect() == (0, 1)
    keys = [key for key, _, _ in engine.store.list_objects("wal/")]
    assert len(keys) == 1 and engine.catalog.known_objects(keys) == set(keys)
    assert engine.store.get("backups/someone-elses") == b"not the collector's"
    assert [r.value for r in decode_records(plog.read(2, 100), 0)] == [b"new"]
    record = plog.read_record(2)
    assert record is not None and record.value == b"new"


def test_a_broker_learns_what_another_did_to_diskless_topics(engine: DisklessEngine) -> None:
    def resolve(overrides: Mapping[str, str]) -> LogConfig:
        return LogConfig(diskless_enable=True, retention_ms=int(overrides.get("retention.ms", 1)))

    here, there = DisklessTopics(engine, resolve), DisklessTopics(engine, resolve)
    topics: dict[str, Topic] = {}
    made = here.create("t", 1, {"diskless.enable": "true"})
    found = there.refresh(topics)
    assert list(found.added) == ["t"] and found.added["t"].partition_count == 1
    topics["t"] = found.added["t"]
    made.add_partitions(3)
    made.reconfigure(lambda old: {**old, "retention.ms": "5000"}, resolve)
    made.partitions[2].append(batch(b"x"))
    found = there.refresh(topics)
    [(topic, overrides, config, grown)] = found.changed
    apply_change(topic, overrides, config, grown)
    assert topics["t"].partition_count == 3 and topics["t"].config.retention_ms == 5000
    assert there.refresh(topics).moved == []  # new partitions arrive with their bounds
    assert topics["t"].partitions[2].end_offset == 1
    here.delete(made)
    assert there.refresh(topics).gone == ["t"]


def test_diskless_enable_cannot_change_either_way(engine: DisklessEngine, tmp_path: Path) -> None:
    def resolve(overrides: Mapping[str, str]) -> LogConfig:
        return LogConfig(diskless_enable=overrides.get("diskless.enable") == "true")

    local = Topic.create(tmp_path, "local", 1, LogConfig(), {})
    try:
        with pytest.raises(InvalidConfig, match=r"diskless\.enable cannot change"):
            local.reconfigure(lambda old: {"diskless.enable": "true"}, resolve)
    finally:
        local.close()
    kept = DisklessTopics(engine, resolve).create("kept", 1, {"diskless.enable": "true"})
    with pytest.raises(InvalidConfig, match=r"diskless\.enable cannot change"):
        kept.reconfigure(lambda old: {}, resolve)
    kept.reconfigure(lambda old: {**old, "retention.ms": "1"}, resolve)
    assert engine.catalog.topics()["kept"].configs == {
        "diskless.enable": "true",
        "retention.ms": "1",
    }


def test_a_topic_created_here_while_the_catalog_is_read_is_not_taken_for_deleted(
    engine: DisklessEngine,
) -> None:
    """The refresh reads the catalog on the pool while the reactor may be adding a topic
    this broker just created: it is in neither the catalog's answer nor gone."""

    def resolve(overrides: Mapping[str, str]) -> LogConfig:
        return LogConfig(diskless_enable=True)

    registry = DisklessTopics(engine, resolve)
    topics: dict[str, Topic] = {}
    catalog_topics = engine.catalog.topics

    def read_then_created_here() -> dict[str, object]:
        rows = catalog_topics()
        topics["late"] = registry.create("late", 1, {"diskless.enable": "true"})
        return rows  # type: ignore[return-value]

    engine.catalog.topics = read_then_created_here  # type: ignore[method-assign]
    found = registry.refresh(topics)
    assert found.gone == [] and "late" in topics
    engine.catalog.topics = catalog_topics  # type: ignore[method-assign]
    assert registry.refresh(topics).gone == []
