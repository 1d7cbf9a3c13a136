"""The diskless check (`rustka check` of a cluster) against a real PostgreSQL and S3 server:
a clean cluster passes and is left as it was; each kind of damage is named."""

from __future__ import annotations

import hashlib
import struct
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from crc32c import crc32c

from rustka.record.batch import Record, encode_batch, scan_batches
from rustka.storage.diskless.catalog import Catalog
from rustka.storage.diskless.engine import DisklessEngine, PartitionWrite
from rustka.storage.diskless.object_cache import ObjectCache
from rustka.storage.diskless.partition import DisklessPartition
from rustka.storage.diskless.verify import ClusterReport, format_age, verify_cluster
from rustka.storage.diskless.wal_object import new_object_key
from rustka.storage.log_config import LogConfig
from tests.services.seaweed import S3Place

HOUR_MS = 3_600_000


@pytest.fixture
def engine(postgres_dsn: str, s3_bucket: S3Place) -> Iterator[DisklessEngine]:
    catalog = Catalog(postgres_dsn)
    catalog.migrate()
    e = DisklessEngine(catalog, s3_bucket.store(), ObjectCache(0))
    yield e
    e.close()


def batch(*values: bytes, ts: int = 1000, producer: int = -1, seq: int = -1) -> bytes:
    data = bytearray(encode_batch([Record(b"k", v, timestamp=ts) for v in values]))
    if producer >= 0:  # an idempotent producer's batch, its CRC written again
        struct.pack_into(">qhi", data, 43, producer, 0, seq)
        struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def write(engine: DisklessEngine, *parts: tuple[str, int, list[bytes]]) -> None:
    """One upload holding the payloads of several partitions."""
    writes = [
        PartitionWrite(topic, partition, payloads, [scan_batches(p)[0] for p in payloads])
        for topic, partition, payloads in parts
    ]
    for infos in engine.write(writes):
        assert all(info.error is None for info in infos)


def cluster(engine: DisklessEngine) -> None:
    """Two topics, objects shared by partitions, a payload of two batches, an idempotent
    producer, and log starts moved by DeleteRecords (one into a payload's middle)."""
    engine.catalog.create_topic("orders", 3, {})
    engine.catalog.create_topic("audit", 1, {})
    write(
        engine,
        ("orders", 0, [batch(b"a", b"b"), batch(b"c") + batch(b"d", b"e")]),
        ("orders", 1, [batch(b"x", producer=7, seq=0)]),
        ("audit", 0, [batch(b"first")]),
    )
    write(
        engine,
        ("orders", 0, [batch(b"f", ts=2000)]),
        ("orders", 1, [batch(b"y", producer=7, seq=1)]),
    )
    write(engine, ("audit", 0, [batch(b"second", b"third")]))
    engine.catalog.delete_records("orders", 0, 3)  # inside the payload holding 2..4
    engine.catalog.delete_records("audit", 0, 1)  # the first object loses a payload


def check(dsn: str, s3_bucket: S3Place, now_ms: int | None = None) -> ClusterReport:
    """The check as an operator runs it: its own catalog connection and store client."""
    catalog = Catalog(dsn)
    store = s3_bucket.store()
    try:
        return verify_cluster(catalog, store, now_ms=now_ms)
    finally:
        catalog.close()
        store.close()


def everything(engine: DisklessEngine) -> tuple[Any, ...]:
    """Every row and every object's bytes: what a read-only check must leave alone."""
    store = engine.store
    objects = {
        key: hashlib.sha256(store.get(key)).hexdigest() for key, _, _ in store.list_objects()
    }
    return engine.catalog.verification_snapshot(), objects


def problems(report: ClusterReport) -> list[str]:
    return [str(p) for p in report.problems]


def sql(dsn: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def test_a_clean_cluster_passes_and_nothing_changes(
    engine: DisklessEngine, s3_bucket: S3Place, postgres_dsn: str
) -> None:
    cluster(engine)
    # An unused object the collector has yet to delete is not damage either.
    engine.catalog.delete_records("audit", 0, -1)
    before = everything(engine)
    report = check(postgres_dsn, s3_bucket)
    assert problems(report) == []
    assert report.notes == []
    assert (report.partitions_checked, report.payloads_checked) == (4, 4)
    assert report.objects_listed == 3 and report.files_checked == 2
    assert report.as_json()["ok"] is True
    assert everything(engine) == before


def test_an_object_deleted_from_the_store_is_a_problem(
    engine: DisklessEngine, s3_bucket: S3Place, postgres_dsn: str
) -> None:
    cluster(engine)
    [key] = [
        k
        for (k, *_) in sql(
            postgres_dsn,
            "SELECT o.object_key FROM objects o JOIN batches b USING (object_id) "
            "WHERE b.partition = 1 AND b.base_offset = 1",
        )
    ]
    engine.store.delete(key)
    report = check(postgres_dsn, s3_bucket)
    assert problems(report) == [
        f"{key}: missing from the store; 2 payload row(s) of orders/0, orders/1 point into it"
    ]
    assert not report.as_json()["ok"]


def test_a_corrupted_byte_is_a_crc_mismatch_at_its_payload(
    engine: DisklessEngine, s3_bucket: S3Place, postgres_dsn: str
) -> None:
    cluster(engine)
    [(key, at, size)] = sql(
        postgres_dsn,
        "SELECT o.object_key, b.byte_offset, b.byte_size FROM objects o "
        "JOIN batches b USING (object_id) WHERE b.partition = 0 AND b.base_offset = 2",
    )
    data = bytearray(engine.store.get(key))
    second = at + scan_batches(data[at : at + size])[0][1][0]  # the payload's second batch
    data[second + 70] ^= 0x01
    engine.store.delete(key)
    engine.store.put_new(key, bytes(data))
    report = check(postgres_dsn, s3_bucket)
    assert problems(report) == [f"{key} at byte {second}: orders/0 offsets 2..4: CRC-32C mismatch"]


def test_a_row_past_its_objects_end_is_a_problem(
    engine: DisklessEngine, s3_bucket: S3Place, postgres_dsn: str
) -> None:
    cluster(engine)
    [(key, size, length)] = sql(
        postgres_dsn,
        "SELECT o.object_key, o.size, b.byte_size FROM objects o JOIN batches b USING (object_id) "
        "WHERE b.partition = 0 AND b.base_offset = 5",
    )
    sql(
        postgres_dsn,
        "UPDATE batches SET byte_offset = %s WHERE partition = 0 AND base_offset = 5",
        (size - length + 1,),
    )
    report = check(postgres_dsn, s3_bucket)
    start = size - length + 1
    assert problems(report) == [
        f"{key} at byte {start}: orders/0 offsets 5..5: bytes {start}..{size} are not "
        f"inside the object's {size} bytes"
    ]


def test_gaps_overlaps_and_wrong_sizes_in_the_catalog_are_problems(
    engine: DisklessEngine, s3_bucket: S3Place, postgres_dsn: str
) -> None:
    cluster(engine)
    # The first payload of orders/1 claims two offsets; it holds one, and overlaps the next.
    sql(postgres_dsn, "UPDATE batches SET last_offset = 1 WHERE partition = 1 AND base_offset = 0")
    sql(postgres_dsn, "UPDATE partitions SET high_watermark = 9 WHERE partition = 2")
    sql(postgres_dsn, "UPDATE partitions SET size_bytes = 1 WHERE partition = 2")
    report = check(postgres_dsn, s3_bucket)
    found = sorted(p for p in problems(report) if not p.startswith("wal/"))
    assert found == [
        "orders/1: orders/1 offsets 1..1 overlaps the payload before it, which ends at 1",
        "orders/2: offsets 0..8 are missing: no payload holds them between the log start "
        "and the high watermark 9",
        "orders/2: size_bytes is 1, its payloads hold 0",
    ]
    [(key, position, message)] = [
        (p.file, p.position, p.message) for p in report.problems if p.file.startswith("wal/")
    ]
    assert sql(
        postgres_dsn,
        "SELECT o.object_key, b.byte_offset FROM objects o JOIN batches b USING (object_id) "
        "WHERE b.partition = 1 AND b.base_offset = 0",
    ) == [(key, position)]
    assert message == "orders/1 offsets 0..1: the batches hold 1 offsets, the row 2"


def test_an_orphan_is_a_note_with_its_age_not_a_problem(
    engine: DisklessEngine, s3_bucket: S3Place, postgres_dsn: str
) -> None:
    cluster(engine)
    orphan = new_object_key(9)
    engine.store.put_new(orphan, b"uploaded, never committed")
    engine.store.put_new("backups/someone-elses", b"not the cluster's")
    report = check(postgres_dsn, s3_bucket)
    assert problems(report) == []
    [entry] = report.orphans
    assert entry["key"] == orphan and entry["size"] == 25 and not entry["collectable"]
    assert any(n.startswith(f"orphan {orphan}: 25 bytes,") for n in report.notes)
    assert any("1 object(s) under the prefix are not uploads' keys" in n for n in report.notes)
    later = check(postgres_dsn, s3_bucket, now_ms=int(time.time() * 1000) + 2 * HOUR_MS)
    [entry] = later.orphans
    assert entry["collectable"] and entry["age_ms"] >= 2 * HOUR_MS
    assert any("old, no catalog row knows it; the collector deletes it" in n for n in later.notes)


def test_ages_read_as_an_operator_writes_them() -> None:
    assert [format_age(ms) for ms in (900, 61_000, 3_600_000, 90_061_000)] == [
        "900ms",
        "1m1s",
        "1h",
        "1d1h",
    ]


def test_a_payload_of_a_diskless_partition_is_checked_too(
    engine: DisklessEngine, s3_bucket: S3Place, postgres_dsn: str
) -> None:
    """Payloads written through a partition (LogAppendTime stamping, the produce path's
    own single-partition write) pass as they are."""
    engine.catalog.create_topic("stamped", 1, {})
    plog = DisklessPartition(
        engine,
        "stamped",
        0,
        LogConfig(diskless_enable=True, message_timestamp_type="LogAppendTime"),
    )
    plog.append_many([batch(b"a"), batch(b"b", b"c")])
    report = check(postgres_dsn, s3_bucket)
    assert problems(report) == [] and report.payloads_checked == 2
