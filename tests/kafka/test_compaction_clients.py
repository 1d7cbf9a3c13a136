"""Log compaction as real Kafka clients see it (docs/kafka.md, "Log compaction").

confluent-kafka (librdkafka 2.x) writes many versions of a set of keys and some
tombstones into a topic the broker compacts (the broker-wide cleanup_policy =
"compact"), with a small segment.ms so the idle topic's last segment rolls too,
and a small max.compaction.lag.ms so the last, barely dirty segment is cleaned.
With the broker's own schedule (retention passes, cleaner passes), a read from
the beginning by kcat soon returns exactly the latest record of each key, at the
offset it was produced at, with its timestamp, tombstones included; once
delete.retention.ms has passed after that clean, the tombstones are gone too.
The stored batches keep the producer's codec.
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import task, threads

from rustka.record.batch import parse_header
from tests.conftest import within
from tests.kafka import real_clients as rc

pytestmark = pytest.mark.clients

RETENTION_MS = 6000
SETTINGS = {
    "cleanup_policy": "compact",
    "segment_ms": 300,
    "segment_bytes": 1024,
    "delete_retention_ms": RETENTION_MS,
    # The last few tombstones make the log only a little dirty (below the 0.5 ratio):
    # max.compaction.lag.ms is what gets them compacted soon, as in Kafka.
    "max_compaction_lag_ms": 1000,
    "retention_check_interval_ms": 100,
    "cleaner_backoff_ms": 100,
    "flush": "never",
}
KEYS = 25
VERSIONS = 12
DELETED = {b"key-3", b"key-11", b"key-20"}


def produce_versions(bootstrap: str) -> dict[bytes, tuple[int, bytes | None, int]]:
    """Every version of every key, then tombstones; the latest (offset, value, timestamp)."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": "lz4",
            "linger.ms": 20,
            "enable.idempotence": True,
            "socket.timeout.ms": 10000,
            "message.timeout.ms": 30000,
        }
    )
    latest: dict[bytes, tuple[int, bytes | None, int]] = {}
    failures: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))
            return
        key = msg.key()
        offset = msg.offset()
        if key not in latest or latest[key][0] < offset:
            latest[key] = (offset, msg.value(), msg.timestamp()[1])

    for version in range(VERSIONS):
        for k in range(KEYS):
            noise = random.Random(version * 1000 + k).randbytes(30).hex().encode()
            value = b"value-%d-of-key-%d-" % (version, k) + noise
            producer.produce(
                "table", key=b"key-%d" % k, value=value, partition=0, on_delivery=report
            )
        producer.flush(30)
    for key in sorted(DELETED):
        producer.produce("table", key=key, value=None, partition=0, on_delivery=report)
    left = producer.flush(30)
    assert not left and not failures, (left, failures[:3])
    return latest


def read_from_beginning(bootstrap: str) -> list[tuple[int, bytes, bytes | None, int]]:
    """kcat from offset 0 to the end: (offset, key, value or None, timestamp) per record."""
    out = rc.kcat(
        "-b",
        bootstrap,
        "-C",
        "-t",
        "table",
        "-p",
        "0",
        "-o",
        "beginning",
        "-e",
        "-Z",
        "-f",
        "%o|%k|%s|%T\\n",
    )
    records = []
    for line in out.splitlines():
        if not line:
            continue
        offset, key, value, ts = line.split("|")
        records.append(
            (int(offset), key.encode(), None if value == "NULL" else value.encode(), int(ts))
        )
    return records


async def read_until(bootstrap: str, wanted: list[Any], seconds: float) -> list[Any]:
    """Read from the beginning until it returns ``wanted`` (or the time is up)."""
    from twisted.internet import reactor

    deadline = time.monotonic() + seconds
    got: list[Any] = []
    while time.monotonic() < deadline:
        got = await within(threads.deferToThread(read_from_beginning, bootstrap), 60)
        if got == wanted:
            return got
        await task.deferLater(reactor, 0.2, lambda: None)
    return got


@pytest_twisted.ensureDeferred
async def test_a_client_reading_from_the_start_sees_the_compacted_topic(
    broker_factory: Any,
) -> None:
    running = await broker_factory(**SETTINGS)
    try:
        core = running.broker
        bootstrap = running.address
        await within(core.create_topic("table", 1))
        latest = await within(threads.deferToThread(produce_versions, bootstrap), 90)
        assert len(latest) == KEYS
        total = KEYS * VERSIONS + len(DELETED)
        plog = core.partition("table", 0)
        assert plog.end_offset == total and len(plog.segments) > 3
        with_tombstones = sorted(
            (offset, key, value, ts) for key, (offset, value, ts) in latest.items()
        )
        seen = await read_until(bootstrap, with_tombstones, 30)
        assert seen == with_tombstones, (len(seen), len(with_tombstones))
        assert core.cleaner.totals.rounds >= 1
        # The offsets and timestamps compared are the producer's own (delivery reports);
        # the stored batches are still lz4 (codec 3).
        data = plog.read(plog.log_start_offset, 1 << 20)
        assert parse_header(data).attributes & 7 == 3
        live = [r for r in with_tombstones if r[2] is not None]
        assert len(live) == KEYS - len(DELETED)
        seen = await read_until(bootstrap, live, 45)
        assert seen == live
        # The end offset never moves back: a new record follows the old ones.
        assert plog.end_offset == total
    finally:
        await running.stop()
