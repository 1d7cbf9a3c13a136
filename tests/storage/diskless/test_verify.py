"""`verify_cluster` (rustka check for a cluster) against a real PostgreSQL and SeaweedFS:
a sound cluster passes, and each kind of damage is named; nothing is changed."""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import psycopg
import pytest
from crc32c import crc32c

from rustka.errors import StorageError
from rustka.record.batch import Record, encode_batch, scan_batches
from rustka.storage.diskless.catalog import Catalog
from rustka.storage.diskless.engine import DisklessEngine, PartitionWrite
from rustka.storage.diskless.object_cache import ObjectCache
from rustka.storage.diskless.partition import DisklessPartition
from rustka.storage.diskless.topics import DisklessTopics
from rustka.storage.diskless.verify import verify_cluster
from rustka.storage.diskless.wal_object import new_object_key
from rustka.storage.log_config import LogConfig
from tests.services.postgres import PostgresServer
from tests.services.seaweed import S3Place


@pytest.fixture
def engine(postgres_dsn: str, s3_bucket: S3Place) -> Iterator[DisklessEngine]:
    catalog = Catalog(postgres_dsn)
    catalog.migrate()
    e = DisklessEngine(catalog, s3_bucket.store(), ObjectCache(0))
    yield e
    e.close()


def resolve(overrides: Mapping[str, str]) -> LogConfig:
    return LogConfig(diskless_enable=True)


def stored(engine: DisklessEngine) -> list[str]:
    """Three payloads of two partitions, in three objects; their keys."""
    topic = DisklessTopics(engine, resolve).create("t", 2, {"diskless.enable": "true"})
    for p, values in ((0, [b"a", b"b"]), (1, [b"c"]), (0, [b"d", b"e", b"f"])):
        topic.partitions[p].append(encode_batch([Record(key=None, value=v) for v in values]))
    return sorted(key for key, _, _ in engine.store.list_objects())


def sql(dsn: str, statement: str) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute(statement)


def test_a_sound_cluster_passes_and_an_orphan_is_only_a_note(engine: DisklessEngine) -> None:
    keys = stored(engine)
    assert len(keys) == 3
    report = verify_cluster(engine.catalog, engine.store)
    assert report.problems == []
    assert (report.partitions, report.rows, report.objects) == (2, 3, 3)
    engine.store.put_new("wal/0000-orphan", b"an upload whose commit never came")
    report = verify_cluster(engine.catalog, engine.store)
    assert report.problems == []
    assert len(report.notes) == 1 and "wal/0000-orphan" in report.notes[0]
    assert sorted(k for k, _, _ in engine.store.list_objects()) == sorted(
        [*keys, "wal/0000-orphan"]
    )


def test_a_missing_object_and_a_damaged_one_are_problems(engine: DisklessEngine) -> None:
    first, second, _ = stored(engine)
    data = engine.store.get(second)
    engine.store.delete(first)
    engine.store.delete(second)
    damaged = bytearray(data)
    damaged[-1] ^= 0xFF
    engine.store.put_new(second, bytes(damaged))
    problems = verify_cluster(engine.catalog, engine.store).problems
    assert f"object {first}: in the catalog, missing from the store" in problems
    assert any(second in p and ("CRC" in p or "not whole" in p) for p in problems), problems


def test_rows_past_their_object_and_offsets_without_rows_are_problems(
    engine: DisklessEngine, postgres_dsn: str
) -> None:
    stored(engine)
    sql(postgres_dsn, "UPDATE batches SET byte_offset = byte_offset + 1000 WHERE base_offset = 2")
    sql(
        postgres_dsn,
        "UPDATE partitions SET high_watermark = high_watermark + 4 WHERE partition = 1",
    )
    problems = verify_cluster(engine.catalog, engine.store).problems
    assert any("t-0 offsets 2..4" in p and "outside the object" in p for p in problems), problems
    assert "t-1: rows end at offset 0, the high watermark is 5" in problems
    assert len(problems) == 2


def test_rustka_check_cluster_as_a_real_process(
    engine: DisklessEngine, postgres_dsn: str, s3_bucket: S3Place, tmp_path: Path
) -> None:
    """`rustka check --cluster CONFIG` reads the config's catalog and bucket: exit 0 on a
    sound cluster, 1 with the problem named once an object is gone, 2 without a catalog."""
    first = stored(engine)[0]
    config = tmp_path / "broker.toml"
    settings = {
        "diskless_dsn": postgres_dsn,
        "diskless_bucket": s3_bucket.bucket,
        "diskless_s3_endpoint": s3_bucket.endpoint_url,
        "diskless_prefix": s3_bucket.prefix,
    }
    config.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))
    rustka = str(Path(sys.executable).with_name("rustka"))
    ok = subprocess.run([rustka, "check", "--cluster", str(config)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "checked 2 partitions, 3 rows, 3 objects: no problems" in ok.stdout
    engine.store.delete(first)
    bad = subprocess.run(
        [rustka, "check", "--cluster", str(config), "--json"], capture_output=True, text=True
    )
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert json.loads(bad.stdout)["problems"] == [
        f"object {first}: in the catalog, missing from the store"
    ]
    empty = tmp_path / "alone.toml"
    empty.write_text("")
    alone = subprocess.run(
        [rustka, "check", "--cluster", str(empty)], capture_output=True, text=True
    )
    assert alone.returncode == 2 and "names no diskless catalog" in alone.stderr


# -- a cluster with shared objects, a payload of two batches, an idempotent producer and
# log starts moved by DeleteRecords, damaged one way at a time ------------------------


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


def check(dsn: str, s3_bucket: S3Place, now: float | None = None) -> list[str]:
    """The check as an operator runs it: its own catalog connection and store client."""
    catalog = Catalog(dsn)
    store = s3_bucket.store()
    try:
        return verify_cluster(catalog, store, now).problems
    finally:
        catalog.close()
        store.close()


def rows(dsn: str, statement: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(statement).fetchall()


def test_a_clean_cluster_passes_and_nothing_changes(
    engine: DisklessEngine, postgres_dsn: str, s3_bucket: S3Place
) -> None:
    cluster(engine)
    engine.catalog.delete_records("audit", 0, -1)  # an unused object, not yet collected

    def everything() -> tuple[object, ...]:
        tables = [
            rows(postgres_dsn, f"SELECT * FROM {t} ORDER BY 1, 2, 3")
            for t in ("partitions", "objects", "batches", "producers")
        ]
        store = engine.store
        data = {k: hashlib.sha256(store.get(k)).digest() for k, _, _ in store.list_objects()}
        return tables, data

    before = everything()
    report = verify_cluster(engine.catalog, engine.store)
    assert (report.problems, report.notes) == ([], [])
    assert (report.partitions, report.rows, report.objects) == (4, 4, 3)
    assert everything() == before


def test_a_flipped_byte_in_a_payloads_second_batch_fails_its_crc(
    engine: DisklessEngine, postgres_dsn: str, s3_bucket: S3Place
) -> None:
    cluster(engine)
    [(key, at, size)] = rows(
        postgres_dsn,
        "SELECT o.object_key, b.byte_offset, b.byte_size FROM objects o "
        "JOIN batches b USING (object_id) WHERE b.partition = 0 AND b.base_offset = 2",
    )
    assert isinstance(key, str) and isinstance(at, int) and isinstance(size, int)
    data = bytearray(engine.store.get(key))
    second = scan_batches(data[at : at + size])[0][1][0]
    data[at + second + 70] ^= 0x01
    engine.store.delete(key)
    engine.store.put_new(key, bytes(data))
    assert check(postgres_dsn, s3_bucket) == [
        f"orders-0 offsets 2..4 in {key}: a batch fails its CRC (at byte {second})"
    ]


def test_gaps_overlaps_and_sizes_that_do_not_add_up_are_problems(
    engine: DisklessEngine, postgres_dsn: str, s3_bucket: S3Place
) -> None:
    cluster(engine)
    # orders-1's first row claims two offsets: it holds one, and overlaps the next row.
    sql(postgres_dsn, "UPDATE batches SET last_offset = 1 WHERE partition = 1 AND base_offset = 0")
    sql(
        postgres_dsn, "UPDATE partitions SET high_watermark = 9, size_bytes = 1 WHERE partition = 2"
    )
    [(key,)] = rows(
        postgres_dsn,
        "SELECT o.object_key FROM objects o JOIN batches b USING (object_id) "
        "WHERE b.partition = 1 AND b.base_offset = 0",
    )
    assert sorted(check(postgres_dsn, s3_bucket)) == [
        f"orders-1 offsets 0..1 in {key}: the batches hold 1 offsets",
        "orders-1: offsets 1..1 stored twice",
        "orders-2: offsets 0..8 have no rows",
        "orders-2: size_bytes is 1, its rows hold 0",
    ]


def test_what_the_collector_does_meanwhile_is_not_damage(
    engine: DisklessEngine, postgres_dsn: str, s3_bucket: S3Place
) -> None:
    """An unused object deleted before the collector forgets it is a note; an upload
    is an orphan only while no row knows it."""
    cluster(engine)
    engine.catalog.delete_records("audit", 0, -1)
    [unused] = engine.catalog.objects_to_delete()
    engine.store.delete(unused)  # the collector's first step; forgetting it comes next
    orphan = new_object_key(9)
    engine.store.put_new(orphan, b"uploaded, never committed")
    engine.store.put_new("backups/someone-elses", b"not the cluster's")
    catalog = Catalog(postgres_dsn)
    store = s3_bucket.store()
    try:
        report = verify_cluster(catalog, store, now=10**10)
    finally:
        catalog.close()
        store.close()
    assert report.problems == []
    assert report.notes[0].startswith(f"object {unused}: in the catalog, gone from the store")
    assert report.notes[1].startswith(f"object {orphan}: 25 bytes that no row knows")
    assert len(report.notes) == 2


def test_payloads_written_through_a_partition_pass(
    engine: DisklessEngine, postgres_dsn: str, s3_bucket: S3Place
) -> None:
    """LogAppendTime partitions and the single-partition write path pass as they are."""
    engine.catalog.create_topic("stamped", 1, {})
    config = LogConfig(diskless_enable=True, message_timestamp_type="LogAppendTime")
    DisklessPartition(engine, "stamped", 0, config).append_many([batch(b"a"), batch(b"b", b"c")])
    assert check(postgres_dsn, s3_bucket) == []


def test_a_database_without_a_catalog_is_a_storage_error(
    postgres_server: PostgresServer, s3_bucket: S3Place
) -> None:
    catalog = Catalog(postgres_server.new_database())
    store = s3_bucket.store()
    try:
        with pytest.raises(StorageError, match="holds no diskless catalog"):
            verify_cluster(catalog, store)
    finally:
        catalog.close()
        store.close()
