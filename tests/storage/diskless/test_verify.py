"""`verify_cluster` (rustka check for a cluster) against a real PostgreSQL and SeaweedFS:
a sound cluster passes, and each kind of damage is named; nothing is changed."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import psycopg
import pytest

from rustka.record.batch import Record, encode_batch
from rustka.storage.diskless.catalog import Catalog
from rustka.storage.diskless.engine import DisklessEngine
from rustka.storage.diskless.object_cache import ObjectCache
from rustka.storage.diskless.topics import DisklessTopics
from rustka.storage.diskless.verify import verify_cluster
from rustka.storage.log_config import LogConfig
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
    sql(postgres_dsn, "UPDATE batches SET byte_size = byte_size + 1000 WHERE base_offset = 2")
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
