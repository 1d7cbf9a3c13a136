"""What real librdkafka producers' batches are stored as, read from the segment files.

Reading back the values a client produced cannot tell a compressed batch from one
the client sent uncompressed: librdkafka up to 2.11 silently stops compressing
when the broker does not list Produce v0 (docs/kafka.md, "APIs and versions").
So each test here asks ``rustka dump --json`` (rustka/ops, offline and read-only)
what the partition's ``.log`` holds: each batch's codec, CRC, maxTimestamp and
record timestamps. Clients: Debian's kcat (librdkafka 2.0.2) and confluent-kafka
with its own bundled librdkafka.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted

from tests.conftest import RunningBroker
from tests.kafka import real_clients as rc
from tests.kafka.test_clients import in_thread

pytestmark = pytest.mark.clients

CODECS = ("gzip", "snappy", "lz4", "zstd")
LINES = [f"line {i} " + "compressible " * 8 for i in range(40)]


def rustka_dump(segment: Path) -> dict[str, Any]:
    """``rustka dump --json`` of one segment, run as an operator would run it."""
    rustka = Path(sys.executable).with_name("rustka")
    if not rustka.exists():
        raise AssertionError(f"the rustka command is not installed next to {sys.executable}")
    done = subprocess.run(
        [str(rustka), "dump", "--json", str(segment)],
        capture_output=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"rustka dump {segment} exited {done.returncode}: {done.stderr!r}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


async def stored(broker: RunningBroker, topic: str) -> list[dict[str, Any]]:
    """Every batch of partition 0 of ``topic`` as ``rustka dump`` reads it from disk."""
    segments = [s.log_path for s in broker.broker.partition(topic, 0).segments]
    batches: list[dict[str, Any]] = []
    for segment in segments:
        dumped = await in_thread(rustka_dump, segment)
        assert dumped["problems"] == [], dumped["problems"]
        batches.extend(dumped["batches"])
    return batches


def values_of(batches: list[dict[str, Any]]) -> int:
    return sum(len(b["records"]) for b in batches)


@pytest.mark.parametrize("codec", CODECS)
@pytest_twisted.ensureDeferred
async def test_kcat_batches_are_stored_with_the_codec_it_was_asked_for(
    broker: RunningBroker, codec: str
) -> None:
    topic = f"kcat-{codec}"
    await in_thread(
        rc.kcat,
        "-b",
        broker.address,
        "-P",
        "-t",
        topic,
        "-p",
        "0",
        "-X",
        f"compression.codec={codec}",
        "-X",
        "linger.ms=50",
        stdin=("\n".join(LINES) + "\n").encode(),
    )
    batches = await stored(broker, topic)
    assert [b["compression"] for b in batches] == [codec] * len(batches)
    assert all(b["crc_ok"] for b in batches)
    assert values_of(batches) == len(LINES)
    got = await in_thread(rc.confluent_read, broker.address, topic, 0, len(LINES))
    assert [v for _, _, v in got] == [line.encode() for line in LINES]


@pytest.mark.parametrize("codec", CODECS)
@pytest_twisted.ensureDeferred
async def test_confluent_kafka_batches_are_stored_with_their_codec(
    broker: RunningBroker, codec: str
) -> None:
    topic = f"ck-{codec}"
    sent = [(f"k{i}".encode(), line.encode()) for i, line in enumerate(LINES)]
    await in_thread(
        rc.confluent_produce,
        broker.address,
        topic,
        sent,
        **{"compression.type": codec, "linger.ms": 50},
    )
    batches = await stored(broker, topic)
    assert [b["compression"] for b in batches] == [codec] * len(batches)
    assert all(b["crc_ok"] for b in batches)
    assert values_of(batches) == len(sent)


def confluent_produce_without_timestamps(
    bootstrap: str, topic: str, count: int
) -> list[str | None]:
    """Produce with timestamp -1 ("none", what librdkafka's C++ API sends when the
    application gives no timestamp); return the delivery errors, None for success."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 50, "message.timeout.ms": 15000}
    )
    errors: list[Any] = []
    for i in range(count):
        producer.produce(
            topic,
            value=f"v{i}".encode(),
            partition=0,
            timestamp=-1,
            on_delivery=lambda err, _msg: errors.append(None if err is None else str(err)),
        )
    left = producer.flush(30)
    assert left == 0, f"{left} messages undelivered"
    return errors


@pytest_twisted.ensureDeferred
async def test_records_without_a_timestamp_are_stored_with_max_timestamp_minus_one(
    broker: RunningBroker,
) -> None:
    """librdkafka sends such records under a maxTimestamp of 0; Kafka stores them, with
    the maxTimestamp its validator computes (-1), and so does rustka."""
    errors = await in_thread(confluent_produce_without_timestamps, broker.address, "nots", 5)
    assert errors == [None] * 5
    batches = await stored(broker, "nots")
    assert [r["timestamp"] for b in batches for r in b["records"]] == [-1] * 5
    assert {b["max_timestamp"] for b in batches} == {-1}
    assert all(b["crc_ok"] for b in batches)
    got = await in_thread(rc.confluent_read, broker.address, "nots", 0, 5)
    assert [v for _, _, v in got] == [f"v{i}".encode() for i in range(5)]
