"""Unmodified Kafka clients against a real rustka broker on 127.0.0.1 (issue 11).

Every client runs in a thread while the reactor serves the broker here; what it
reads back is compared byte for byte with what was produced.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import threads

from tests.conftest import RunningBroker, within
from tests.kafka import real_clients as rc

pytestmark = pytest.mark.clients


def in_thread(f: Any, *args: Any, **kwargs: Any) -> Any:
    return within(threads.deferToThread(f, *args, **kwargs), 90)


def records(n: int, tag: str) -> list[tuple[bytes | None, bytes | None]]:
    return [(f"k{i}".encode(), f"{tag}-{i}-".encode() * 3) for i in range(n)]


@pytest_twisted.ensureDeferred
async def test_kcat_lists_topics_the_native_cli_made(broker: RunningBroker) -> None:
    c = await broker.client()
    await c.create_topic("orders", 3)
    await c.close()
    listing = await in_thread(rc.kcat, "-b", broker.address, "-L", "-J")
    meta = json.loads(listing)
    topics = {t["topic"]: len(t["partitions"]) for t in meta["topics"]}
    assert topics["orders"] == 3
    assert meta["brokers"] == [{"id": 0, "name": broker.address}]


@pytest.mark.parametrize(
    ("producer", "conf"),
    [
        ("confluent", {"acks": "1"}),
        ("confluent", {"acks": "all", "enable.idempotence": True}),
        ("confluent", {"acks": "all", "compression.type": "gzip"}),
        ("confluent", {"acks": "all", "compression.type": "snappy"}),
        ("confluent", {"acks": "all", "compression.type": "lz4"}),
        ("confluent", {"acks": "all", "compression.type": "zstd"}),
        ("kafka-python", {"acks": 1}),
        ("kafka-python", {"acks": "all"}),
        ("kafka-python", {"acks": "all", "compression_type": "gzip"}),
        ("aiokafka", {"acks": 1}),
        ("aiokafka", {"acks": "all", "enable_idempotence": True}),
        ("aiokafka", {"acks": "all", "compression_type": "gzip"}),
        ("aiokafka", {"acks": "all", "compression_type": "snappy"}),
        ("aiokafka", {"acks": "all", "compression_type": "lz4"}),
        ("aiokafka", {"acks": "all", "compression_type": "zstd"}),
    ],
)
@pytest_twisted.ensureDeferred
async def test_produce_then_read_back_by_assignment(
    broker: RunningBroker, producer: str, conf: dict[str, Any]
) -> None:
    topic = "t-" + producer.replace("-", "")
    sent = records(20, producer)
    produce = {
        "confluent": rc.confluent_produce,
        "kafka-python": rc.kafka_python_produce,
        "aiokafka": rc.aiokafka_produce,
    }[producer]
    delivered = await in_thread(produce, broker.address, topic, sent, **conf)
    assert sorted(o for _, o in delivered) == list(range(20))
    readers = [rc.confluent_read, rc.aiokafka_read]
    codec = conf.get("compression.type") or conf.get("compression_type") or "none"
    if codec in ("none", "gzip"):
        # kafka-python decodes snappy, lz4 and zstd only with optional codec packages.
        readers.append(rc.kafka_python_read)
    for read in readers:
        got = await in_thread(read, broker.address, topic, 0, 20)
        assert [(k, v) for _, k, v in got] == sent, read.__name__
        assert [o for o, _, _ in got] == list(range(20))


@pytest.mark.parametrize(
    "budget",
    [
        {},
        # Budgets smaller than a batch: each Fetch serves the first partition with data
        # one whole batch and the others nothing, so a consumer still goes through all.
        {"fetch.max.bytes": 1000, "max.partition.fetch.bytes": 100, "message.max.bytes": 1000},
    ],
    ids=["defaults", "tight"],
)
@pytest_twisted.ensureDeferred
async def test_confluent_consumes_64_partitions_every_record_once_in_order(
    broker: RunningBroker, budget: dict[str, Any]
) -> None:
    """librdkafka fetches every assigned partition in one Fetch (K6's shape): every
    record comes once, each partition's in offset order, as stored."""
    await within(broker.broker.create_topic("wide", 64))
    sent = records(64 * 30, "wide")
    delivered = await in_thread(rc.confluent_produce, broker.address, "wide", sent, spread=64)
    assert sorted(delivered) == [(p, o) for p in range(64) for o in range(30)]
    got = await in_thread(rc.confluent_read_all, broker.address, "wide", 64, len(sent), **budget)
    assert len(got) == len(sent)
    for p in range(64):
        mine = [(o, k, v) for q, o, k, v in got if q == p]
        assert [o for o, _, _ in mine] == list(range(30)), p
        # Record i went to partition i % 64, so offset o of p is record p + 64 * o.
        assert [(k, v) for _, k, v in mine] == sent[p::64], p


@pytest_twisted.ensureDeferred
async def test_kcat_produces_with_every_codec_and_native_reads_it(broker: RunningBroker) -> None:
    lines = [f"line {i}" for i in range(10)]
    settings = {
        "none": ["acks=1"],
        "gzip": ["acks=all"],
        "snappy": ["acks=all", "enable.idempotence=true"],
        "lz4": ["acks=all"],
        "zstd": ["acks=all", "enable.idempotence=true"],
    }
    for codec, extra in settings.items():
        options = [arg for setting in extra for arg in ("-X", setting)]
        await in_thread(
            rc.kcat,
            "-b",
            broker.address,
            "-P",
            "-t",
            f"kc-{codec}",
            "-p",
            "0",
            "-X",
            f"compression.codec={codec}",
            *options,
            stdin=("\n".join(lines) + "\n").encode(),
        )
        c = await broker.client()
        try:
            got = await c.fetch_batch(f"kc-{codec}", 0, 0)
        finally:
            await c.close()
        assert [r.value for r in got.records] == [line.encode() for line in lines], codec


@pytest_twisted.ensureDeferred
async def test_kcat_reads_what_the_native_client_wrote(broker: RunningBroker) -> None:
    c = await broker.client()
    try:
        for i in range(5):
            await c.produce("native", f"user-{i}".encode(), f"event {i}".encode())
    finally:
        await c.close()
    out = await in_thread(
        rc.kcat,
        "-b",
        broker.address,
        "-C",
        "-t",
        "native",
        "-o",
        "beginning",
        "-e",
        "-f",
        "%k=%s\\n",
    )
    got = sorted(line for line in out.splitlines() if line)
    assert got == sorted(f"user-{i}=event {i}" for i in range(5))


@pytest_twisted.ensureDeferred
async def test_admin_clients_create_describe_and_delete_topics(broker: RunningBroker) -> None:
    def confluent_admin() -> dict[str, Any]:
        from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

        admin = AdminClient({"bootstrap.servers": broker.address})
        futures = admin.create_topics([NewTopic("made-by-admin", 4, 1)])
        futures["made-by-admin"].result(30)
        listed = admin.list_topics(timeout=30).topics
        res = ConfigResource("topic", "made-by-admin")
        configs = admin.describe_configs([res])[res].result(30)
        dup = admin.create_topics([NewTopic("made-by-admin", 1, 1)])["made-by-admin"]
        try:
            dup.result(30)
            dup_error = None
        except Exception as e:
            dup_error = str(e)
        admin.delete_topics(["made-by-admin"])["made-by-admin"].result(30)
        after = admin.list_topics(timeout=30).topics
        return {
            "partitions": len(listed["made-by-admin"].partitions),
            "policy": configs["cleanup.policy"].value,
            "dup": dup_error,
            "after": "made-by-admin" in after,
        }

    got = await in_thread(confluent_admin)
    assert got["partitions"] == 4
    assert got["policy"] == "delete"
    assert got["dup"] is not None and "TOPIC_ALREADY_EXISTS" in got["dup"]
    assert got["after"] is False

    def kafka_python_admin() -> list[str]:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=broker.address)
        try:
            admin.create_topics([NewTopic("kp-admin", 2, 1)])
            names = admin.list_topics()
            admin.delete_topics(["kp-admin"])
            return [n for n in names if n == "kp-admin"] + [
                n for n in admin.list_topics() if n == "kp-admin"
            ]
        finally:
            admin.close()

    assert await in_thread(kafka_python_admin) == ["kp-admin"]


@pytest_twisted.ensureDeferred
async def test_list_offsets_by_time_earliest_and_latest(broker: RunningBroker) -> None:
    def run() -> tuple[Any, ...]:
        from confluent_kafka import Consumer, Producer, TopicPartition

        p = Producer({"bootstrap.servers": broker.address})
        for i in range(10):
            p.produce("times", value=b"v", partition=0, timestamp=1_000_000 + i * 1000)
            p.flush(10)
        p.flush(30)
        c = Consumer({"bootstrap.servers": broker.address, "group.id": "lo"})
        try:
            lo, hi = c.get_watermark_offsets(TopicPartition("times", 0), timeout=30)
            by_time = c.offsets_for_times([TopicPartition("times", 0, 1_004_500)], timeout=30)
            past = c.offsets_for_times([TopicPartition("times", 0, 9_999_999)], timeout=30)
            return lo, hi, by_time[0].offset, past[0].offset
        finally:
            c.close()

    lo, hi, at, past = await in_thread(run)
    assert (lo, hi) == (0, 10)
    assert at == 5
    assert past == -1


@pytest_twisted.ensureDeferred
async def test_a_transactional_producer_is_told_when_its_timeout_is_too_long(
    broker: RunningBroker,
) -> None:
    """Transactions are served (docs/kafka.md, "Transactions"): init_transactions works
    up to transaction_max_timeout_ms and fails clearly above it, as Kafka's
    transaction.max.timeout.ms makes it fail."""

    def run(timeout_ms: int) -> str:
        from confluent_kafka import KafkaException, Producer

        p = Producer(
            {
                "bootstrap.servers": broker.address,
                "transactional.id": f"tx-{timeout_ms}",
                "transaction.timeout.ms": timeout_ms,
            }
        )
        try:
            p.init_transactions(20)
        except KafkaException as e:
            return str(e.args[0].name())
        return "ok"

    assert await in_thread(run, 900_000) == "ok"
    assert await in_thread(run, 1_000_000) == "INVALID_TRANSACTION_TIMEOUT"


@pytest_twisted.ensureDeferred
async def test_native_and_kafka_clients_share_one_port(broker: RunningBroker) -> None:
    c = await broker.client()
    try:
        await c.create_topic("shared", 1)
        listing = json.loads(await in_thread(rc.kcat, "-b", broker.address, "-L", "-J"))
        assert "shared" in {t["topic"] for t in listing["topics"]}
        # The native connection still works after a Kafka client used the same port.
        partition, offset = await c.produce("shared", b"k", b"v")
        assert (partition, offset) == (0, 0)
    finally:
        await c.close()
