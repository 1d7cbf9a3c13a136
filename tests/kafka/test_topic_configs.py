"""Topic configs over Kafka's wire (rustka/kafka/handlers.py): CreateTopics with configs and
replica assignments, DescribeConfigs, AlterConfigs and IncrementalAlterConfigs, against a
real broker through the suite's Kafka client."""

from __future__ import annotations

from typing import Any

import pytest_twisted
from twisted.internet import defer

from rustka.kafka.client import KafkaClientProtocol, connect_kafka
from rustka.kafka.errors import ErrorCode as E
from rustka.kafka.messages import ApiKey
from rustka.record.batch import Record, encode_batch, scan_batches
from tests.conftest import RunningBroker, within

TOPIC, BROKER = 2, 4
# DescribeConfigs config sources.
TOPIC_CONFIG, STATIC_BROKER, DEFAULT = 1, 4, 5


async def kafka(broker: RunningBroker) -> KafkaClientProtocol:
    from twisted.internet import reactor

    return await within(defer.ensureDeferred(connect_kafka(reactor, broker.address)))


def new_topic(
    name: str,
    partitions: int = 1,
    configs: dict[str, str | None] | None = None,
    replication: int = 1,
    assignments: list[tuple[int, list[int]]] | None = None,
) -> dict[str, Any]:
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": replication,
        "assignments": [{"partition_index": i, "broker_ids": ids} for i, ids in assignments or []],
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
    }


async def create(
    k: KafkaClientProtocol, *topics: dict[str, Any], validate_only: bool = False, version: int = 4
) -> list[tuple[str, int, str | None]]:
    answer = await within(
        k.request(
            ApiKey.CREATE_TOPICS,
            {"topics": list(topics), "timeout_ms": 5000, "validate_only": validate_only},
            version,
        )
    )
    return [(t["name"], t["error_code"], t.get("error_message")) for t in answer["topics"]]


async def describe(
    k: KafkaClientProtocol, rtype: int, name: str, keys: list[str] | None = None, version: int = 2
) -> dict[str, Any]:
    answer = await within(
        k.request(
            ApiKey.DESCRIBE_CONFIGS,
            {
                "resources": [
                    {"resource_type": rtype, "resource_name": name, "configuration_keys": keys}
                ],
                "include_synonyms": True,
            },
            version,
        )
    )
    [result] = answer["results"]
    return result


def configs(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in result["configs"]}


async def incremental(
    k: KafkaClientProtocol, name: str, ops: list[tuple[str, int, str | None]], **body: Any
) -> tuple[int, str | None]:
    answer = await within(
        k.request(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            {
                "resources": [
                    {
                        "resource_type": body.pop("rtype", TOPIC),
                        "resource_name": name,
                        "configs": [
                            {"name": n, "config_operation": op, "value": v} for n, op, v in ops
                        ],
                    }
                ],
                "validate_only": body.pop("validate_only", False),
            },
            0,
        )
    )
    [r] = answer["responses"]
    return r["error_code"], r["error_message"]


async def alter(
    k: KafkaClientProtocol,
    name: str,
    values: dict[str, str | None],
    *,
    rtype: int = TOPIC,
    validate_only: bool = False,
    version: int = 1,
) -> tuple[int, str | None]:
    answer = await within(
        k.request(
            ApiKey.ALTER_CONFIGS,
            {
                "resources": [
                    {
                        "resource_type": rtype,
                        "resource_name": name,
                        "configs": [{"name": n, "value": v} for n, v in values.items()],
                    }
                ],
                "validate_only": validate_only,
            },
            version,
        )
    )
    [r] = answer["responses"]
    return r["error_code"], r["error_message"]


@pytest_twisted.ensureDeferred
async def test_create_topics_stores_configs_and_describe_reports_their_source(
    broker: RunningBroker,
) -> None:
    k = await kafka(broker)
    got = await create(
        k, new_topic("c", 2, {"cleanup.policy": "compact", "min.insync.replicas": "2"})
    )
    assert got == [("c", 0, None)]
    result = await describe(k, TOPIC, "c")
    assert result["error_code"] == 0
    entries = configs(result)
    assert len(entries) == 39
    policy = entries["cleanup.policy"]
    assert (policy["value"], policy["config_source"], policy["read_only"]) == (
        "compact",
        TOPIC_CONFIG,
        False,
    )
    assert [(s["name"], s["value"], s["source"]) for s in policy["synonyms"]] == [
        ("cleanup.policy", "compact", TOPIC_CONFIG),
        ("cleanup_policy", "delete", DEFAULT),
    ]
    assert entries["retention.ms"]["config_source"] == DEFAULT
    assert entries["min.insync.replicas"]["value"] == "2"
    assert not any(e["is_sensitive"] for e in entries.values())
    assert broker.broker.partition("c", 1).config.compact
    v0 = configs(await describe(k, TOPIC, "c", ["cleanup.policy", "segment.ms"], version=0))
    assert {n: (e["value"], e["is_default"]) for n, e in v0.items()} == {
        "cleanup.policy": ("compact", False),
        "segment.ms": ("604800000", True),
    }
    k.transport.loseConnection()


@pytest_twisted.ensureDeferred
async def test_a_bad_topic_config_is_invalid_config_naming_it(broker: RunningBroker) -> None:
    k = await kafka(broker)
    got = await create(
        k,
        new_topic("a", 1, {"compression.type": "lz4", "dummy.doesntexist": "x"}),
        new_topic("b", 1, {"retention.ms": "a week"}),
        new_topic("c", 1, {"segment.bytes": None}),
        new_topic("d", 1, {"delete.retention.ms": "900", "compression.type": "lz4"}),
    )
    assert [(n, code) for n, code, _ in got] == [
        ("a", E.INVALID_CONFIG),
        ("b", E.INVALID_CONFIG),
        ("c", E.INVALID_CONFIG),
        ("d", 0),
    ]
    assert "dummy.doesntexist" in got[0][2]
    assert "retention.ms" in got[1][2]
    assert "segment.bytes" in got[2][2]
    assert sorted(t.name for t in broker.broker.topics_snapshot()) == ["d"]
    k.transport.loseConnection()


@pytest_twisted.ensureDeferred
async def test_validate_only_checks_configs_and_creates_nothing(broker: RunningBroker) -> None:
    k = await kafka(broker)
    got = await create(
        k,
        new_topic("ok", 3, {"retention.ms": "1000"}),
        new_topic("bad", 1, {"retention.ms": "-7"}),
        validate_only=True,
    )
    assert [(n, code) for n, code, _ in got] == [("ok", 0), ("bad", E.INVALID_CONFIG)]
    assert broker.broker.topics_snapshot() == []
    k.transport.loseConnection()


@pytest_twisted.ensureDeferred
async def test_a_replica_assignment_of_this_broker_only_is_accepted(
    broker: RunningBroker,
) -> None:
    """librdkafka's 0081 assigns [0] to each partition; Kafka takes it on a one-node cluster
    and refuses what names another broker or is not a consecutive set of partitions."""
    k = await kafka(broker)
    ok = new_topic("m", -1, replication=-1, assignments=[(0, [0]), (1, [0]), (2, [0])])
    got = await create(
        k,
        ok,
        new_topic("other", -1, replication=-1, assignments=[(0, [1])]),
        new_topic("twice", -1, replication=-1, assignments=[(0, [0, 0])]),
        new_topic("gap", -1, replication=-1, assignments=[(0, [0]), (2, [0])]),
        new_topic("count", 3, replication=-1, assignments=[(0, [0])]),
        new_topic("rf", -1, replication=1, assignments=[(0, [0])]),
        new_topic("empty", -1, replication=-1, assignments=[(0, [])]),
    )
    assert [(n, c) for n, c, _ in got] == [
        ("m", 0),
        ("other", E.INVALID_REPLICA_ASSIGNMENT),
        ("twice", E.INVALID_REPLICA_ASSIGNMENT),
        ("gap", E.INVALID_REPLICA_ASSIGNMENT),
        ("count", E.INVALID_REQUEST),
        ("rf", E.INVALID_REQUEST),
        ("empty", E.INVALID_REPLICA_ASSIGNMENT),
    ]
    assert "broker 1" in got[1][2]
    assert [(t.name, len(t.partitions)) for t in broker.broker.topics_snapshot()] == [("m", 3)]
    assert (await create(k, new_topic("dup", 1), new_topic("dup", 1)))[0][1] == E.INVALID_REQUEST
    k.transport.loseConnection()


@pytest_twisted.ensureDeferred
async def test_incremental_alter_configs_set_delete_append_subtract(
    broker: RunningBroker,
) -> None:
    k = await kafka(broker)
    await create(k, new_topic("i", 1, {"retention.ms": "1000"}))
    assert await incremental(
        k, "i", [("cleanup.policy", 2, "compact"), ("segment.bytes", 0, "5000")]
    ) == (0, None)
    entries = configs(await describe(k, TOPIC, "i"))
    assert entries["cleanup.policy"]["value"] == "delete,compact"
    assert entries["segment.bytes"]["value"] == "5000"
    plog = broker.broker.partition("i", 0)
    assert plog.config.compact and plog.config.segment_bytes == 5000
    assert await incremental(
        k, "i", [("cleanup.policy", 3, "delete"), ("retention.ms", 1, None)]
    ) == (0, None)
    entries = configs(await describe(k, TOPIC, "i"))
    assert entries["cleanup.policy"]["value"] == "compact"
    assert entries["retention.ms"]["config_source"] == DEFAULT
    assert await incremental(k, "i", [("segment.bytes", 0, "9999")], validate_only=True) == (
        0,
        None,
    )
    assert plog.config.segment_bytes == 5000
    code, message = await incremental(k, "i", [("retention.ms", 2, "5")])
    assert code == E.INVALID_CONFIG and "not LIST" in message
    code, message = await incremental(k, "i", [("nope.nope", 0, "5")])
    assert code == E.INVALID_CONFIG and "nope.nope" in message
    code, _ = await incremental(k, "i", [("segment.bytes", 0, "1"), ("segment.bytes", 0, "2")])
    assert code == E.INVALID_REQUEST
    code, _ = await incremental(k, "i", [("segment.bytes", 0, None)])
    assert code == E.INVALID_REQUEST
    code, _ = await incremental(k, "i", [("segment.bytes", 9, "5")])
    assert code == E.INVALID_REQUEST
    assert (await incremental(k, "none", [("segment.bytes", 0, "5000")]))[0] == (
        E.UNKNOWN_TOPIC_OR_PARTITION
    )
    k.transport.loseConnection()


@pytest_twisted.ensureDeferred
async def test_alter_configs_replaces_the_whole_set(broker: RunningBroker) -> None:
    """AlterConfigs (v0 and v1): the topic keeps exactly what the request names, as
    librdkafka's test_AlterConfigs_simple relies on when it writes back every described
    value (message.format.version "0.10.0.0" among them)."""
    k = await kafka(broker)
    await create(k, new_topic("r", 1, {"retention.ms": "1000", "segment.ms": "100"}))
    for version in (0, 1):
        every = {n: e["value"] for n, e in configs(await describe(k, TOPIC, "r")).items()}
        every["message.format.version"] = "0.10.0.0"
        assert await alter(k, "r", every, version=version) == (0, None)
    entries = configs(await describe(k, TOPIC, "r"))
    assert all(e["config_source"] == TOPIC_CONFIG for e in entries.values())
    assert await alter(k, "r", {"compression.type": "gzip", "flush.ms": "12345678"}) == (0, None)
    own = broker.broker.topic("r").overrides
    assert own == {"compression.type": "gzip", "flush.ms": "12345678"}
    assert broker.broker.partition("r", 0).config.retention_ms == broker.config.retention_ms
    assert await alter(k, "r", {"segment.ms": "5"}, validate_only=True) == (0, None)
    assert broker.broker.topic("r").overrides == own
    code, message = await alter(k, "missing", {"offset.metadata.max.bytes": "1"})
    assert code == E.UNKNOWN_TOPIC_OR_PARTITION
    code, message = await alter(k, "r", {"offset.metadata.max.bytes": "1"})
    assert code == E.INVALID_CONFIG and "offset.metadata.max.bytes" in message
    k.transport.loseConnection()


@pytest_twisted.ensureDeferred
async def test_the_broker_resource_is_described_and_read_only(broker_factory: Any) -> None:
    running = await broker_factory(retention_ms="1h")
    try:
        k = await kafka(running)
        for name in ("0", ""):
            result = await describe(k, BROKER, name)
            assert result["error_code"] == 0
            entries = configs(result)
            assert entries["retention_ms"]["value"] == "3600000"
            assert entries["retention_ms"]["config_source"] == STATIC_BROKER
            assert entries["default_partitions"]["config_source"] == DEFAULT
            assert all(e["read_only"] for e in entries.values())
        assert (await describe(k, BROKER, "7"))["error_code"] == E.INVALID_REQUEST
        assert (await describe(k, 99, "x"))["error_code"] == E.INVALID_REQUEST
        topic = configs(await describe(k, TOPIC, "nope"))
        assert topic == {}
        assert (await describe(k, TOPIC, "nope"))["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION
        code, message = await alter(k, "0", {"retention_ms": "5"}, rtype=BROKER)
        assert code == E.INVALID_REQUEST and "retention_ms" in message
        assert await alter(k, "0", {}, rtype=BROKER) == (0, None)
        await create(k, new_topic("t", 1))
        assert configs(await describe(k, TOPIC, "t"))["retention.ms"]["synonyms"] == [
            {"name": "retention_ms", "value": "3600000", "source": STATIC_BROKER},
            {"name": "retention_ms", "value": "604800000", "source": DEFAULT},
        ]
        k.transport.loseConnection()
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_log_append_time_is_answered_and_stored(broker: RunningBroker) -> None:
    k = await kafka(broker)
    await create(k, new_topic("l", 1, {"message.timestamp.type": "LogAppendTime"}))
    batch = encode_batch([Record(b"k", b"v", timestamp=1000)], timestamp=1000)
    answer = await within(
        k.request(
            ApiKey.PRODUCE,
            {
                "acks": -1,
                "timeout_ms": 5000,
                "topic_data": [{"name": "l", "partition_data": [{"index": 0, "records": batch}]}],
            },
            8,
        )
    )
    [part] = answer["responses"][0]["partition_responses"]
    assert part["error_code"] == 0 and part["log_append_time_ms"] > 1000
    read = await within(broker.broker.read("l", 0, 0, 10_000))
    [(_, header)] = scan_batches(read.chunks[0])[0]
    assert header.attributes & 0x08 and header.max_timestamp == part["log_append_time_ms"]
    k.transport.loseConnection()
