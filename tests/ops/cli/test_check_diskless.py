"""``rustka check --diskless``: a cluster's catalog against its objects, against a real
PostgreSQL and S3 server, named by flags or by a broker's config file."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rustka.ops.cli import main
from rustka.record.batch import Record, encode_batch
from rustka.storage.diskless.catalog import Catalog
from rustka.storage.diskless.engine import DisklessEngine
from rustka.storage.diskless.object_cache import ObjectCache
from rustka.storage.diskless.partition import DisklessPartition
from rustka.storage.diskless.wal_object import new_object_key
from rustka.storage.log_config import LogConfig
from tests.services.seaweed import S3Place

RUSTKA = Path(sys.executable).with_name("rustka")


@pytest.fixture
def engine(postgres_dsn: str, s3_bucket: S3Place) -> Iterator[DisklessEngine]:
    """A broker's engine with one diskless topic of two partitions, three objects."""
    catalog = Catalog(postgres_dsn)
    catalog.migrate()
    e = DisklessEngine(catalog, s3_bucket.store(), ObjectCache(0))
    e.catalog.create_topic("orders", 2, {})
    for partition in (0, 1):
        plog = DisklessPartition(e, "orders", partition, LogConfig(diskless_enable=True))
        plog.append(encode_batch([Record(b"k", b"v%d" % partition, timestamp=1000)]))
    plog.append(encode_batch([Record(b"k", b"w", timestamp=2000)]))
    yield e
    e.close()


def flags(dsn: str, place: S3Place) -> list[str]:
    return [
        "--diskless-dsn",
        dsn,
        "--diskless-bucket",
        place.bucket,
        "--diskless-s3-endpoint",
        place.endpoint_url,
        "--diskless-prefix",
        place.prefix,
    ]


def config_file(path: Path, dsn: str, place: S3Place) -> Path:
    """A broker's config as an operator has it: the cluster's settings among others."""
    path.write_text(
        f'data_dir = "{path.parent / "data"}"\n'
        "broker_id = 2\n"
        f'diskless_dsn = "{dsn}"\n'
        f'diskless_bucket = "{place.bucket}"\n'
        f'diskless_s3_endpoint = "{place.endpoint_url}"\n'
        f'diskless_prefix = "{place.prefix}"\n'
    )
    return path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def object_of(engine: DisklessEngine, partition: int) -> str:
    """The object holding the first payload of orders/``partition``."""
    return engine.catalog.find_batches("orders", partition, 0, 1)[0].object_key


def test_a_clean_cluster_by_flags_and_by_config_file(
    engine: DisklessEngine,
    postgres_dsn: str,
    s3_bucket: S3Place,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, err = run(["check", *flags(postgres_dsn, s3_bucket)], capsys)
    assert (status, err) == (0, ""), out
    assert out.splitlines()[-1] == (
        "checked 2 partitions, 3 payloads in 3 objects (3 listed): no problems"
    )
    config = config_file(tmp_path / "broker-2.toml", postgres_dsn, s3_bucket)
    status, out, _ = run(["check", "--json", "--diskless", "-c", str(config)], capsys)
    report = json.loads(out)
    assert status == 0 and report["ok"] is True and report["problems"] == []
    assert (report["partitions_checked"], report["payloads_checked"]) == (2, 3)


def test_damage_exits_1_and_an_orphan_is_only_a_note(
    engine: DisklessEngine,
    postgres_dsn: str,
    s3_bucket: S3Place,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    orphan = new_object_key(3)
    engine.store.put_new(orphan, b"never committed")
    config = config_file(tmp_path / "broker-2.toml", postgres_dsn, s3_bucket)
    status, out, _ = run(["check", "--diskless", "-c", str(config)], capsys)
    assert status == 0, out
    assert f"note: orphan {orphan}: 15 bytes," in out
    gone = object_of(engine, 0)
    engine.store.delete(gone)
    status, out, _ = run(["check", "--json", "--diskless", "-c", str(config)], capsys)
    report = json.loads(out)
    assert status == 1 and report["ok"] is False
    assert [(p["file"], p["message"]) for p in report["problems"]] == [
        (gone, "missing from the store; 1 payload row(s) of orders/0 point into it")
    ]
    assert [o["key"] for o in report["orphans"]] == [orphan]


def test_the_installed_command_exits_1_on_damage(
    engine: DisklessEngine, postgres_dsn: str, s3_bucket: S3Place, tmp_path: Path
) -> None:
    config = config_file(tmp_path / "broker-2.toml", postgres_dsn, s3_bucket)
    command = [str(RUSTKA), "check", "--diskless", "-c", str(config)]
    ok = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    engine.store.delete(object_of(engine, 1))
    bad = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "missing from the store" in bad.stdout and "1 problem(s)" in bad.stdout


def test_usage_errors_and_an_unreachable_catalog(
    tmp_path: Path, s3_bucket: S3Place, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (
        ["check"],
        ["check", str(tmp_path), "--diskless"],
        ["check", "-c", str(tmp_path / "rustka.toml")],
    ):
        with pytest.raises(SystemExit) as stopped:
            main(argv)
        assert stopped.value.code == 2, argv
    status, _, err = run(["check", "--diskless"], capsys)
    assert status == 1 and "no cluster named" in err
    status, _, err = run(["check", "--diskless-dsn", "postgresql://x@127.0.0.1/x"], capsys)
    assert status == 1 and "diskless_dsn and diskless_bucket: set both" in err
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dsn = f"postgresql://rustka@127.0.0.1:{port}/rustka"
    status, out, err = run(["check", *flags(dsn, s3_bucket)], capsys)
    assert (status, out) == (1, "")
    assert err.startswith("rustka: cannot reach the diskless catalog")
