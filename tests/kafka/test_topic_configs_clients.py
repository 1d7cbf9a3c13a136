"""Per-topic configs proven with real Kafka admin clients against a real broker:
confluent-kafka's AdminClient (librdkafka 2.x) and kafka-python's KafkaAdminClient create
topics with configs, describe, alter and incrementally alter them, and what they set is
what the topic's logs do (docs/kafka.md, "Topic configs"): checked in what is stored."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import threads

from rustka.record.batch import scan_batches
from tests.conftest import RunningBroker, within
from tests.kafka.real_clients import confluent_produce

pytestmark = pytest.mark.clients


def in_thread(f: Callable[..., Any], *args: Any) -> Any:
    return within(threads.deferToThread(f, *args), 90)


def confluent_admin_session(bootstrap: str) -> dict[str, Any]:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
        NewTopic,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    out: dict[str, Any] = {}
    made = admin.create_topics(
        [
            NewTopic("ck-state", 2, 1, config={"cleanup.policy": "compact,delete"}),
            NewTopic("ck-bad", 1, 1, config={"dummy.doesntexist": "x"}),
            NewTopic("ck-worse", 1, 1, config={"retention.ms": "one week"}),
        ]
    )
    made["ck-state"].result(30)
    for name in ("ck-bad", "ck-worse"):
        try:
            made[name].result(30)
            out[name] = None
        except KafkaException as e:
            out[name] = (e.args[0].name(), e.args[0].str())
    checked = admin.create_topics(
        [NewTopic("ck-checked", 1, 1, config={"retention.ms": "5"})], validate_only=True
    )
    checked["ck-checked"].result(30)
    out["listed"] = sorted(t for t in admin.list_topics(timeout=30).topics if t.startswith("ck-"))

    res = ConfigResource("topic", "ck-state")
    described = admin.describe_configs([res])[res].result(30)
    out["described"] = {
        name: (e.value, e.source, e.is_read_only, e.is_default) for name, e in described.items()
    }
    out["sources"] = (
        int(ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
        int(ConfigSource.DEFAULT_CONFIG.value),
    )

    inc = ConfigResource(
        "topic",
        "ck-state",
        incremental_configs=[
            ConfigEntry("retention.ms", "-1", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry(
                "cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT
            ),
        ],
    )
    admin.incremental_alter_configs([inc])[inc].result(30)
    after = admin.describe_configs([res])[res].result(30)
    out["after_incremental"] = {k: after[k].value for k in ("retention.ms", "cleanup.policy")}

    dry = ConfigResource(
        "topic",
        "ck-state",
        incremental_configs=[
            ConfigEntry("segment.bytes", "1000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([dry], validate_only=True)[dry].result(30)
    bad = ConfigResource(
        "topic",
        "ck-state",
        incremental_configs=[
            ConfigEntry("segment.bytes", "10", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    try:
        admin.incremental_alter_configs([bad])[bad].result(30)
        out["bad_incremental"] = None
    except KafkaException as e:
        out["bad_incremental"] = (e.args[0].name(), e.args[0].str())

    whole = ConfigResource("topic", "ck-state", set_config={"min.insync.replicas": "2"})
    with warnings.catch_warnings():
        # The legacy AlterConfigs is what this step proves; the client warns about it.
        warnings.simplefilter("ignore", DeprecationWarning)
        altered = admin.alter_configs([whole])
    altered[whole].result(30)
    replaced = admin.describe_configs([res])[res].result(30)
    out["after_alter"] = {
        k: (replaced[k].value, replaced[k].source)
        for k in ("min.insync.replicas", "retention.ms", "cleanup.policy")
    }
    broker_res = ConfigResource("broker", "0")
    broker_configs = admin.describe_configs([broker_res])[broker_res].result(30)
    out["broker"] = {k: (e.value, e.is_read_only) for k, e in broker_configs.items()}
    return out


@pytest_twisted.ensureDeferred
async def test_confluent_kafka_admin_creates_describes_and_alters_topic_configs(
    broker: RunningBroker,
) -> None:
    got = await in_thread(confluent_admin_session, broker.address)
    assert got["ck-bad"][0] == "INVALID_CONFIG" and "dummy.doesntexist" in got["ck-bad"][1]
    assert got["ck-worse"][0] == "INVALID_CONFIG" and "retention.ms" in got["ck-worse"][1]
    assert got["listed"] == ["ck-state"]
    topic_source, default_source = got["sources"]
    described = got["described"]
    assert len(described) == 39
    assert described["cleanup.policy"] == ("compact,delete", topic_source, False, False)
    assert described["retention.ms"] == ("604800000", default_source, False, True)
    assert got["after_incremental"] == {"retention.ms": "-1", "cleanup.policy": "compact"}
    assert got["bad_incremental"][0] == "INVALID_CONFIG"
    assert "segment.bytes" in got["bad_incremental"][1]
    assert got["after_alter"] == {
        "min.insync.replicas": ("2", topic_source),
        "retention.ms": ("604800000", default_source),
        "cleanup.policy": ("delete", default_source),
    }
    assert got["broker"]["default_partitions"] == ("3", True)
    # The alter_configs left only min.insync.replicas: the logs are back on the broker's
    # settings, and the validate-only segment.bytes never applied.
    logs = broker.broker.topic("ck-state").partitions
    assert [p.config for p in logs] == [broker.config.log_config()] * 2
    assert broker.broker.topic("ck-state").overrides == {"min.insync.replicas": "2"}


def kafka_python_admin_session(bootstrap: str) -> dict[str, Any]:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
    from kafka.errors import InvalidConfigurationError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    out: dict[str, Any] = {}
    try:
        admin.create_topics(
            [
                NewTopic(
                    "kp-state",
                    1,
                    1,
                    topic_configs={"cleanup.policy": "compact", "segment.ms": "60000"},
                )
            ]
        )
        try:
            admin.create_topics([NewTopic("kp-bad", 1, 1, topic_configs={"segment.bytes": "1"})])
            out["bad"] = None
        except InvalidConfigurationError as e:
            out["bad"] = str(e)
        res = ConfigResource(ConfigResourceType.TOPIC, "kp-state")
        described = admin.describe_configs([res], config_filter="all")
        out["described"] = {k: v["value"] for k, v in described["topic"]["kp-state"].items()}
        modified = admin.describe_configs([res])
        out["modified"] = sorted(modified["topic"]["kp-state"])
        alter = ConfigResource(
            ConfigResourceType.TOPIC, "kp-state", configs={"retention.bytes": "1000000"}
        )
        out["alter"] = admin.alter_configs([alter], incremental=False)
        out["after"] = {
            k: v["value"] for k, v in admin.describe_configs([res])["topic"]["kp-state"].items()
        }
        inc = ConfigResource(ConfigResourceType.TOPIC, "kp-state", configs={"segment.ms": "120000"})
        out["incremental"] = admin.alter_configs([inc], incremental=True)
        out["final"] = {
            k: v["value"] for k, v in admin.describe_configs([res])["topic"]["kp-state"].items()
        }
    finally:
        admin.close()
    return out


@pytest_twisted.ensureDeferred
async def test_kafka_python_admin_creates_describes_and_alters_topic_configs(
    broker: RunningBroker,
) -> None:
    got = await in_thread(kafka_python_admin_session, broker.address)
    assert got["bad"] is not None and "segment.bytes" in got["bad"]
    assert got["described"]["cleanup.policy"] == "compact"
    assert got["described"]["segment.ms"] == "60000"
    assert got["modified"] == ["cleanup.policy", "segment.ms"]
    assert got["alter"] == {"topic": {"kp-state": "OK"}}
    # AlterConfigs replaces the whole set; kafka-python sent the modified ones along.
    assert got["after"] == {
        "cleanup.policy": "compact",
        "retention.bytes": "1000000",
        "segment.ms": "60000",
    }
    assert got["incremental"] == {"topic": {"kp-state": "OK"}}
    assert got["final"]["segment.ms"] == "120000"
    plog = broker.broker.partition("kp-state", 0)
    assert plog.config.compact and plog.config.segment_ms == 120_000
    assert plog.config.retention_bytes == 1_000_000


def create_with_configs(bootstrap: str, topics: dict[str, dict[str, str]]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, 1, 1, config=c) for t, c in topics.items()])
    for future in futures.values():
        future.result(30)


def produce_sizes(bootstrap: str, topic: str, sizes: list[int]) -> list[str | None]:
    """One batch per record (linger 0, flushed each time); the error of each, or None."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 0, "message.timeout.ms": 15000}
    )
    errors: list[str | None] = []
    results: list[str | None] = []

    def report(err: Any, _msg: Any) -> None:
        results.append(None if err is None else err.name())

    for size in sizes:
        producer.produce(topic, value=b"v" * size, key=b"k", on_delivery=report)
        producer.flush(30)
        errors.append(results[-1] if len(results) == len(errors) + 1 else "undelivered")
    return errors


@pytest_twisted.ensureDeferred
async def test_what_a_client_configures_is_what_the_topics_logs_do(
    broker_factory: Any,
) -> None:
    """segment.bytes rolls segments, retention.ms deletes on its topic only, max.message.bytes
    refuses a larger batch on its topic only, LogAppendTime stamps what is stored; all after
    a restart too."""
    running = await broker_factory()
    try:
        await in_thread(
            create_with_configs,
            running.address,
            {
                "small-segments": {"segment.bytes": "300"},
                "short-lived": {"retention.ms": "0", "segment.bytes": "300"},
                "long-lived": {"segment.bytes": "300"},
                "tight": {"max.message.bytes": "500"},
                "stamped": {"message.timestamp.type": "LogAppendTime"},
            },
        )
        await running.stop()
        running = await broker_factory()
        core = running.broker
        for topic in ("small-segments", "short-lived", "long-lived", "plain"):
            sent = await in_thread(produce_sizes, running.address, topic, [200] * 4)
            assert sent == [None] * 4
        assert len(core.partition("small-segments", 0).segments) == 2
        assert len(core.partition("long-lived", 0).segments) == 2
        plain = core.topic("plain").partitions
        assert sum(p.end_offset for p in plain) == 4
        assert all(len(p.segments) == 1 for p in plain)
        await within(core.enforce_retention())
        assert core.bounds("short-lived", 0)[0] > 0
        assert core.bounds("long-lived", 0) == (0, 4)
        assert core.bounds("small-segments", 0) == (0, 4)

        assert await in_thread(produce_sizes, running.address, "tight", [100, 2000]) == [
            None,
            "MSG_SIZE_TOO_LARGE",
        ]
        assert await in_thread(produce_sizes, running.address, "long-lived", [2000]) == [None]
        assert core.bounds("tight", 0) == (0, 1)

        sent_at = 1_600_000_000_000
        await in_thread(confluent_produce, running.address, "stamped", [(b"k", b"v")])
        read = await within(core.read("stamped", 0, 0, 100_000))
        [(_, header)] = scan_batches(read.chunks[0])[0]
        assert header.attributes & 0x08
        assert header.max_timestamp > sent_at
        assert core.topic("stamped").overrides == {"message.timestamp.type": "LogAppendTime"}
    finally:
        await running.stop()
