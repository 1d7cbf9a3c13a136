"""Diskless topics under the programs users run on them: kcat, Quix Streams, faust, `rustka mirror`.

Each test checks what was stored, not only what came back: the catalog's payload
rows of a partition (offsets contiguous from 0, as many as were written) and the
batches those rows point to in the bucket, decoded from the objects' bytes (codec,
CRC, timestamps, keys and values), and that the broker's data dir holds nothing of
the diskless topics. The stream-processing programs keep their compacted
changelogs on local topics: a diskless topic refuses compaction (docs/diskless.md,
"What is refused, and why").
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import threads

from rustka.record.batch import BatchHeader, Record, crc_ok, decode_records, scan_batches
from rustka.record.compression import codec_name
from rustka.record.header import CODEC_MASK, TIMESTAMP_TYPE_BIT
from tests.apps.programs import (
    START_S,
    app_python,
    committed,
    end_offsets,
    exact_counts,
    start_program,
    stop_program,
    topic_configs,
    words,
)
from tests.conftest import start_broker, within
from tests.diskless.test_diskless_clients import catalog_rows, create_topic, diskless_settings
from tests.kafka import real_clients as rc
from tests.services.seaweed import S3Place
from tools.twistd_process import Twistd
from tools.twistd_process import start_broker as start_twistd

DISKLESS = {"diskless.enable": "true"}


@dataclass(frozen=True)
class StoredPayload:
    """One catalog row of a partition and the batches its bytes hold in the object."""

    base_offset: int
    last_offset: int
    max_timestamp: int
    timestamp_type: int
    batches: list[tuple[BatchHeader, list[Record]]]


def stored_partition(dsn: str, s3: S3Place, topic: str, partition: int) -> list[StoredPayload]:
    """Every payload row of the partition in offset order, each with the batches read
    from the byte range of its object that the row names."""
    rows = catalog_rows_of(
        dsn,
        "SELECT b.base_offset, b.last_offset, o.object_key, b.byte_offset, b.byte_size, "
        "b.max_timestamp, b.timestamp_type FROM batches b JOIN topics t USING (topic_id) "
        "JOIN objects o USING (object_id) WHERE t.name = %s AND b.partition = %s "
        "ORDER BY b.base_offset",
        (topic, partition),
    )
    store = s3.store()
    objects: dict[str, bytes] = {}
    payloads = []
    try:
        for base, last, key, at, size, max_ts, ts_type in rows:
            if key not in objects:
                objects[key] = store.get(key)
            data = objects[key][at : at + size]
            found, end = scan_batches(data)
            assert end == len(data) == size, f"{topic}/{partition}@{base}: a torn payload"
            batches = []
            for pos, header in found:
                assert crc_ok(data, pos, header), f"{topic}/{partition}@{base}: CRC"
                batches.append((header, decode_records(data, pos)))
            payloads.append(StoredPayload(base, last, max_ts, ts_type, batches))
    finally:
        store.close()
    return payloads


def catalog_rows_of(dsn: str, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, params).fetchall()


def stored_records(payloads: list[StoredPayload]) -> list[Record]:
    """The records of the payloads in order, after checking that the rows' offsets are
    contiguous from 0 and that each row counts exactly the records its bytes hold."""
    records: list[Record] = []
    for payload in payloads:
        assert payload.base_offset == len(records), [
            (p.base_offset, p.last_offset) for p in payloads
        ]
        held = [r for _, batch in payload.batches for r in batch]
        assert payload.last_offset - payload.base_offset + 1 == len(held)
        assert payload.max_timestamp == max(h.max_timestamp for h, _ in payload.batches)
        records.extend(held)
    return records


def diskless_topics(dsn: str) -> set[str]:
    return {name for (name,) in catalog_rows(dsn, "SELECT name FROM topics")}


# --------------------------------------------------------------------------- kcat


KCAT_LINES = [f"k{i}:line {i} " + "compressible " * 6 for i in range(120)]


@pytest.mark.clients
@pytest.mark.parametrize("codec", ["snappy", "lz4", "zstd", "gzip"])
@pytest_twisted.ensureDeferred
async def test_kcat_compressed_batches_are_stored_in_the_objects_as_kcat_built_them(
    tmp_path: Path, postgres_dsn: str, s3_bucket: S3Place, codec: str
) -> None:
    """kcat (Debian's, librdkafka 2.0) produces with a codec in two runs; the catalog has
    the partition's offsets 0..n-1 in payloads, each payload's bytes in its object are
    the batches kcat compressed (codec bits, CRC, CreateTime stamps taken by kcat while
    it ran), and kcat reads back every record with those same timestamps."""
    broker = await start_broker(tmp_path / "data", **diskless_settings(postgres_dsn, s3_bucket))
    try:
        error = await threads.deferToThread(create_topic, broker.address, "lines", 1, DISKLESS)
        assert error is None
        before_ms = int(time.time() * 1000)
        # Two kcat runs, small batches: several payloads, whose offsets must join up.
        for half in (KCAT_LINES[:60], KCAT_LINES[60:]):
            await within(
                threads.deferToThread(
                    rc.kcat,
                    "-b",
                    broker.address,
                    "-P",
                    "-t",
                    "lines",
                    "-p",
                    "0",
                    "-K",
                    ":",
                    "-z",
                    codec,
                    "-X",
                    "batch.num.messages=20",
                    "-X",
                    "linger.ms=20",
                    stdin=("\n".join(half) + "\n").encode(),
                ),
                90,
            )
        after_ms = int(time.time() * 1000)
        out = await within(
            threads.deferToThread(
                rc.kcat,
                "-b",
                broker.address,
                "-C",
                "-t",
                "lines",
                "-p",
                "0",
                "-o",
                "beginning",
                "-e",
                "-q",
                "-f",
                "%o\t%k\t%s\t%T\n",
            ),
            90,
        )
        # kcat starting at a time (ListOffsets by timestamp): the first record of the
        # second run, the first whose timestamp reaches that record's.
        second_run = int(out.splitlines()[60].split("\t")[3])
        from_time = await within(
            threads.deferToThread(
                rc.kcat,
                "-b",
                broker.address,
                "-C",
                "-t",
                "lines",
                "-p",
                "0",
                "-o",
                f"s@{second_run}",
                "-c",
                "1",
                "-q",
                "-f",
                "%o\n",
            ),
            90,
        )
    finally:
        await broker.stop()

    read = [line.split("\t") for line in out.splitlines()]
    sent = [line.split(":", 1) for line in KCAT_LINES]
    assert [(int(o), k, v) for o, k, v, _ in read] == [(i, k, v) for i, (k, v) in enumerate(sent)]
    assert int(from_time) == 60
    assert not (tmp_path / "data" / "lines").exists()
    assert catalog_rows(
        postgres_dsn,
        "SELECT p.log_start_offset, p.high_watermark FROM partitions p "
        "JOIN topics t USING (topic_id) WHERE t.name = 'lines'",
    ) == [(0, len(KCAT_LINES))]

    payloads = stored_partition(postgres_dsn, s3_bucket, "lines", 0)
    assert len(payloads) >= 2  # one kcat run after the other: at least a payload each
    records = stored_records(payloads)
    assert [(r.key, r.value) for r in records] == [(k.encode(), v.encode()) for k, v in sent]
    headers = [h for p in payloads for h, _ in p.batches]
    assert len(headers) >= len(KCAT_LINES) // 20  # kcat's batches, each stored as it was
    assert {codec_name(h.attributes & CODEC_MASK) for h in headers} == {codec}
    # CreateTime, stamped by kcat: the catalog's rows and the batches' headers agree with
    # the records' own timestamps, which lie within the kcat runs.
    assert {p.timestamp_type for p in payloads} == {0}
    assert all(h.attributes & TIMESTAMP_TYPE_BIT == 0 for h in headers)
    stamps = [r.timestamp for r in records]
    assert all(t is not None and before_ms <= t <= after_ms for t in stamps), stamps
    for header, batch in (b for p in payloads for b in p.batches):
        assert header.max_timestamp == max(r.timestamp or 0 for r in batch)
    assert [int(t) for *_, t in read] == stamps


# --------------------------------------------------------------------------- mirror


def run_mirror(source: str, target: str, state: Path, topic: str) -> tuple[int, str, str]:
    """`rustka mirror` as an operator runs it: a process of its own."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rustka.ops.cli",
            "mirror",
            "--broker",
            source,
            "--to",
            target,
            "--state",
            str(state),
            "--json",
            topic,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def produce_stamped(bootstrap: str, topic: str, records: dict[int, list[Any]]) -> None:
    """Idempotent confluent-kafka produce with the records' own timestamps and headers."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "compression.type": "lz4",
            "linger.ms": 5,
        }
    )
    errors: list[str] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for partition, rows in records.items():
        for key, value, stamp, headers in rows:
            producer.produce(
                topic,
                key=key,
                value=value,
                partition=partition,
                timestamp=stamp,
                headers=headers,
                on_delivery=report,
            )
    assert producer.flush(60) == 0
    assert errors == []


def read_partition(bootstrap: str, topic: str, partition: int, count: int) -> list[Any]:
    """(offset, key, value, timestamp, headers) of the partition's first ``count`` records."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "mirror-check", "enable.auto.commit": False}
    )
    got: list[Any] = []
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise AssertionError(str(msg.error()))
            got.append(
                (msg.offset(), msg.key(), msg.value(), msg.timestamp()[1], msg.headers() or [])
            )
    finally:
        consumer.close()
    return got


@pytest.mark.clients
@pytest_twisted.ensureDeferred
async def test_mirror_copies_a_local_topic_into_a_diskless_topic_on_another_broker(
    tmp_path: Path, postgres_dsn: str, s3_bucket: S3Place
) -> None:
    """`rustka mirror` from a broker with local topics only into a diskless topic of the
    same name on a broker with a catalog and a bucket: every record arrives once, in
    order, at the same offsets, with its key, value, timestamp and headers, and what the
    target stored is in the catalog and the objects, not on its disk."""
    source = await start_broker(tmp_path / "source")
    target = await start_broker(tmp_path / "target", **diskless_settings(postgres_dsn, s3_bucket))
    base_ms = 1_700_000_000_000
    sent = {
        p: [
            (
                b"k%d-%d" % (p, i),
                b"v%d-%d" % (p, i),
                base_ms + p * 100_000 + i * 7,
                [("trace", b"t%d" % i)] if i % 3 == 0 else None,
            )
            for i in range(80)
        ]
        for p in range(2)
    }
    try:
        assert await threads.deferToThread(create_topic, source.address, "orders", 2, {}) is None
        assert (
            await threads.deferToThread(create_topic, target.address, "orders", 2, DISKLESS) is None
        )
        await within(threads.deferToThread(produce_stamped, source.address, "orders", sent), 90)
        code, out, err = await within(
            threads.deferToThread(
                run_mirror, source.address, target.address, tmp_path / "mirror.json", "orders"
            ),
            150,
        )
        assert code == 0, err
        assert json.loads(out)["records"] == 160
        for p, rows in sent.items():
            got = await within(
                threads.deferToThread(read_partition, target.address, "orders", p, len(rows)),
                90,
            )
            assert got == [(i, k, v, t, h or []) for i, (k, v, t, h) in enumerate(rows)]

        # One more record, mirrored; then a crash after the target acknowledged it but
        # before the state was saved, and one more record again: the next run finds the
        # acknowledged record in the diskless partition and copies only the new one.
        late = [(b"late%d" % i, b"record", base_ms + 999_000 + i, None) for i in range(2)]
        runs = []
        for record in late:
            await within(
                threads.deferToThread(produce_stamped, source.address, "orders", {0: [record]}),
                60,
            )
            if runs:
                state = json.loads((tmp_path / "mirror.json").read_text())
                state["partitions"]["orders/0"]["next_source"] -= 1
                state["partitions"]["orders/0"]["next_target"] -= 1
                (tmp_path / "mirror.json").write_text(json.dumps(state))
            code, out, err = await within(
                threads.deferToThread(
                    run_mirror, source.address, target.address, tmp_path / "mirror.json", "orders"
                ),
                150,
            )
            assert code == 0, err
            summary = json.loads(out)
            runs.append((summary["records"], summary["skipped_after_crash"]))
        assert runs == [(1, 0), (1, 1)]
        sent[0].extend(late)
    finally:
        await source.stop()
        await target.stop()

    assert (tmp_path / "source" / "orders").is_dir()
    assert not (tmp_path / "target" / "orders").exists()
    assert diskless_topics(postgres_dsn) == {"orders"}
    for p, rows in sent.items():
        payloads = stored_partition(postgres_dsn, s3_bucket, "orders", p)
        records = stored_records(payloads)
        assert [(r.key, r.value, r.timestamp, list(r.headers)) for r in records] == [
            (k, v, t, h or []) for k, v, t, h in rows
        ]
        headers = [h for payload in payloads for h, _ in payload.batches]
        # The producer's lz4 batches, forwarded byte for byte but for their producer
        # fields, which the mirror clears (rustka/ops/mirror.py); librdkafka leaves a
        # lone late record uncompressed, as lz4 would not make it smaller.
        assert {codec_name(h.attributes & CODEC_MASK) for h in headers if h.record_count > 1} == {
            "lz4"
        }
        assert {h.producer_id for h in headers} == {-1}
        assert payloads[-1].max_timestamp == rows[-1][2]


# --------------------------------------------------------------------------- programs

GROUP = "word-counter"
INPUT = "words"
OUTPUT = "word-counts"
PARTITIONS = 2
FIRST = {"apple": 3, "banana": 1, "cherry": 4, "damson": 2, "elder": 5, "fig": 1}
SECOND = {"apple": 2, "cherry": 1, "fig": 3, "grape": 2}
TOTALS = {w: FIRST.get(w, 0) + SECOND.get(w, 0) for w in FIRST | SECOND}


def start_diskless_twistd(data_dir: Path, postgres_dsn: str, s3: S3Place) -> Twistd:
    """`twistd rustka` with the catalog and the bucket in its --config file."""
    config = data_dir.with_name("rustka.toml")
    settings = diskless_settings(postgres_dsn, s3)
    config.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items()))
    return start_twistd(data_dir, "--config", str(config))


def stored_counts(dsn: str, s3: S3Place) -> dict[str, list[int]]:
    """The counts the program wrote, per word in order, as the objects hold them."""
    records = stored_records(stored_partition(dsn, s3, OUTPUT, 0))
    seen: dict[str, list[int]] = {}
    for record in records:
        assert record.key is not None and record.value is not None
        count = json.loads(record.value)
        assert count["word"] == record.key.decode()
        seen.setdefault(count["word"], []).append(count["count"])
    return seen


def wait_counts(bootstrap: str, expected: int) -> dict[str, list[int]]:
    """The output's counts once ``expected`` are there (bounded), per word in order,
    from a real consumer; a count written twice would be one record more."""
    records = rc.confluent_read(bootstrap, OUTPUT, 0, expected)
    assert len(records) == expected, f"{len(records)} of {expected} counts: {records}"
    assert end_offsets(bootstrap, OUTPUT, 1) == [expected]
    seen: dict[str, list[int]] = {}
    for _, key, value in records:
        assert key is not None and value is not None
        count = json.loads(value)
        assert count["word"] == key.decode()
        seen.setdefault(count["word"], []).append(count["count"])
    return seen


def create_diskless_topics(bootstrap: str) -> None:
    for name, partitions in ((INPUT, PARTITIONS), (OUTPUT, 1)):
        error = create_topic(bootstrap, name, partitions, DISKLESS)
        assert error is None, error


def check_stored(data_dir: Path, dsn: str, s3: S3Place, changelog: str) -> None:
    """The program's input and output are diskless (nothing on disk, the catalog has
    them); its changelog, compacted, is a local topic the catalog does not know."""
    assert diskless_topics(dsn) == {INPUT, OUTPUT}
    for name in (INPUT, OUTPUT):
        assert not (data_dir / name).exists()
    assert (data_dir / changelog).is_dir(), sorted(p.name for p in data_dir.iterdir())
    input_records = [
        r for p in range(PARTITIONS) for r in stored_records(stored_partition(dsn, s3, INPUT, p))
    ]
    assert sorted(r.key or b"" for r in input_records) == sorted(
        w.encode() for w, n in TOTALS.items() for _ in range(n)
    )
    assert stored_counts(dsn, s3) == exact_counts(TOTALS)


@pytest.mark.apps
def test_quix_streams_counts_from_a_diskless_topic_into_a_diskless_topic(
    tmp_path: Path, postgres_dsn: str, s3_bucket: S3Place
) -> None:
    """tests/apps/quix_counter.py reads a diskless input and writes a diskless output; its
    state's changelog is a local compacted topic. Stopped, its state dir emptied and
    started again on more input, it restores the state from the changelog and resumes
    at the group's commits on the diskless input: every count is right, once, and the
    counts are what the objects hold."""
    python = app_python("quixstreams")
    data_dir = tmp_path / "data"
    state_dir = tmp_path / "state"
    changelog = f"changelog__{GROUP}--{INPUT}--default"
    with start_diskless_twistd(data_dir, postgres_dsn, s3_bucket) as daemon:
        bootstrap = f"127.0.0.1:{daemon.port}"
        env = {
            "BOOTSTRAP": bootstrap,
            "GROUP": GROUP,
            "STATE_DIR": str(state_dir),
            "INPUT": INPUT,
            "OUTPUT": OUTPUT,
            "COMMIT_EVERY": "1",
        }
        create_diskless_topics(bootstrap)
        rc.confluent_produce(bootstrap, INPUT, words(FIRST), partition=-1)
        with start_program(python, "quix_counter.py", [], env, tmp_path) as app:
            app.wait_for("The application started", START_S)
            first = wait_counts(bootstrap, sum(FIRST.values()))
            assert stop_program(app) == 0, "".join(app.output)
        assert first == exact_counts(FIRST)
        assert topic_configs(bootstrap, changelog)["cleanup.policy"][0] == "compact"
        fed = end_offsets(bootstrap, INPUT, PARTITIONS)
        assert committed(bootstrap, GROUP, INPUT, PARTITIONS) == fed

        shutil.rmtree(state_dir)
        state_dir.mkdir()
        rc.confluent_produce(bootstrap, INPUT, words(SECOND), partition=-1)
        with start_program(python, "quix_counter.py", [], env, tmp_path) as app:
            both = wait_counts(bootstrap, sum(TOTALS.values()))
            assert stop_program(app) == 0, "".join(app.output)
            assert app.logged("Recovery successful"), "".join(app.output)
        assert both == exact_counts(TOTALS)
        fed = end_offsets(bootstrap, INPUT, PARTITIONS)
        assert sum(fed) == sum(TOTALS.values())
        assert committed(bootstrap, GROUP, INPUT, PARTITIONS) == fed
        assert daemon.stop() in (0, -signal.SIGTERM), "".join(daemon.output)
    check_stored(data_dir, postgres_dsn, s3_bucket, changelog)


@pytest.mark.apps
def test_faust_counts_from_a_diskless_topic_into_a_diskless_topic(
    tmp_path: Path, postgres_dsn: str, s3_bucket: S3Place
) -> None:
    """tests/apps/faust_counter.py (aiokafka underneath) the same way: a diskless input
    and output, its Table's changelog and its assignor topic local. Its data dir deleted
    between two runs, it rebuilds the table from the changelog and counts on from its
    commits on the diskless input."""
    python = app_python("faust")
    data_dir = tmp_path / "data"
    faust_dir = tmp_path / "faust"
    changelog = f"{GROUP}-counts-changelog"
    ready = r"\[\^Worker\]: Ready"
    with start_diskless_twistd(data_dir, postgres_dsn, s3_bucket) as daemon:
        bootstrap = f"127.0.0.1:{daemon.port}"
        env = {
            "BOOTSTRAP": bootstrap,
            "APP_ID": GROUP,
            "DATA_DIR": str(faust_dir),
            "INPUT": INPUT,
            "OUTPUT": OUTPUT,
        }
        worker = ["worker", "--without-web", "--loglevel", "info"]
        create_diskless_topics(bootstrap)
        with start_program(python, "faust_counter.py", worker, env, tmp_path) as app:
            app.wait_for(ready, START_S)
            rc.confluent_produce(bootstrap, INPUT, words(FIRST), partition=-1)
            first = wait_counts(bootstrap, sum(FIRST.values()))
            assert stop_program(app) == 0, "".join(app.output)
        assert first == exact_counts(FIRST)
        assert topic_configs(bootstrap, changelog)["cleanup.policy"][0] == "compact"
        fed = end_offsets(bootstrap, INPUT, PARTITIONS)
        assert committed(bootstrap, GROUP, INPUT, PARTITIONS) == fed

        shutil.rmtree(faust_dir)
        with start_program(python, "faust_counter.py", worker, env, tmp_path) as app:
            app.wait_for(r"\[\^---Recovery\]: Done reading from changelog topics", START_S)
            app.wait_for(ready, START_S)
            rc.confluent_produce(bootstrap, INPUT, words(SECOND), partition=-1)
            both = wait_counts(bootstrap, sum(TOTALS.values()))
            assert stop_program(app) == 0, "".join(app.output)
        assert both == exact_counts(TOTALS)
        fed = end_offsets(bootstrap, INPUT, PARTITIONS)
        assert committed(bootstrap, GROUP, INPUT, PARTITIONS) == fed
        assert daemon.stop() in (0, -signal.SIGTERM), "".join(daemon.output)
    check_stored(data_dir, postgres_dsn, s3_bucket, changelog)
