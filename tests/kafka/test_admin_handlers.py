"""The cluster-level admin APIs by hand, through rustka's own Kafka client, for the
answers real clients do not reach (tests/kafka/test_admin_clients.py has theirs)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_twisted
from twisted.internet import defer

from rustka.kafka.client import KafkaClientProtocol
from rustka.kafka.errors import ErrorCode as E
from rustka.kafka.messages import ApiKey
from tests.conftest import RunningBroker, within


@pytest_twisted.async_yield_fixture
async def kafka(broker: RunningBroker) -> AsyncIterator[KafkaClientProtocol]:
    from twisted.internet import reactor

    from rustka.kafka.client import connect_kafka

    client = await within(defer.ensureDeferred(connect_kafka(reactor, broker.address)))
    try:
        yield client
    finally:
        await within(client.close())


async def ask(k: KafkaClientProtocol, key: int, body: dict[str, Any], version: int) -> Any:
    return await within(k.request(key, body, version))


# -- DescribeCluster ----------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_describe_cluster_v0_and_v1(
    broker: RunningBroker, kafka: KafkaClientProtocol
) -> None:
    cluster = await within(broker.broker.cluster_id())
    for version in (0, 1):
        answer = await ask(kafka, ApiKey.DESCRIBE_CLUSTER, {}, version)
        assert answer["error_code"] == 0 and answer["error_message"] is None
        assert (answer["cluster_id"], answer["controller_id"]) == (cluster, 0)
        assert answer["brokers"] == [
            {"broker_id": 0, "host": "127.0.0.1", "port": broker.port, "rack": None}
        ]


@pytest_twisted.ensureDeferred
async def test_describe_cluster_of_the_controllers_is_a_mismatched_endpoint(
    kafka: KafkaClientProtocol,
) -> None:
    answer = await ask(kafka, ApiKey.DESCRIBE_CLUSTER, {"endpoint_type": 2}, 1)
    assert answer["error_code"] == E.MISMATCHED_ENDPOINT_TYPE
    assert answer["brokers"] == []


# -- OffsetForLeaderEpoch -----------------------------------------------------------------


async def produce(broker: RunningBroker, topic: str, count: int) -> None:
    from rustka.record.batch import Record, encode_batch, ms_now

    records = [Record(b"k", b"v%d" % i) for i in range(count)]
    await within(
        broker.broker.append(topic, 0, encode_batch(records, timestamp=ms_now()), auto_create=False)
    )


def epoch_request(topic: str, partition: int, epoch: int, current: int = -1) -> dict[str, Any]:
    return {
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": partition, "current_leader_epoch": current, "leader_epoch": epoch}
                ],
            }
        ]
    }


async def epoch_end(
    k: KafkaClientProtocol, version: int, topic: str, partition: int, epoch: int, current: int = -1
) -> tuple[int, int, int]:
    body = epoch_request(topic, partition, epoch, current)
    answer = await ask(k, ApiKey.OFFSET_FOR_LEADER_EPOCH, body, version)
    [[row]] = [t["partitions"] for t in answer["topics"]]
    assert row["partition"] == partition
    return row["error_code"], row.get("leader_epoch", -1), row["end_offset"]


@pytest_twisted.ensureDeferred
async def test_offset_for_leader_epoch_answers_the_end_of_epoch_zero(
    broker: RunningBroker, kafka: KafkaClientProtocol
) -> None:
    await within(broker.broker.create_topic("ep", 2))
    await produce(broker, "ep", 3)
    for version in (1, 2, 3):
        assert await epoch_end(kafka, version, "ep", 0, 0) == (0, 0, 3)
        assert await epoch_end(kafka, version, "ep", 1, 0) == (0, 0, 0)
        # An epoch this node never had (above its only one) has no end.
        assert await epoch_end(kafka, version, "ep", 0, 1) == (0, -1, -1)
    assert await epoch_end(kafka, 0, "ep", 0, 0) == (0, -1, 3)  # v0 has no epoch field
    assert await epoch_end(kafka, 2, "ep", 0, 0, current=0) == (0, 0, 3)
    assert (await epoch_end(kafka, 2, "ep", 0, 0, current=1))[0] == E.UNKNOWN_LEADER_EPOCH
    assert (await epoch_end(kafka, 3, "ep", 0, 0, current=-5))[0] == E.FENCED_LEADER_EPOCH
    unknown = E.UNKNOWN_TOPIC_OR_PARTITION
    assert await epoch_end(kafka, 3, "ep", 2, 0) == (unknown, -1, -1)
    assert await epoch_end(kafka, 3, "nope", 0, 0) == (unknown, -1, -1)


# -- DescribeLogDirs ----------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_describe_log_dirs_of_chosen_partitions_and_the_disk_totals(
    broker: RunningBroker, kafka: KafkaClientProtocol, data_dir: Any
) -> None:
    await within(broker.broker.create_topic("ld", 3))
    await produce(broker, "ld", 4)
    body = {
        "topics": [{"topic": "ld", "partitions": [0, 2, 7]}, {"topic": "nope", "partitions": [0]}]
    }
    for version in (0, 1, 2, 3, 4):
        answer = await ask(kafka, ApiKey.DESCRIBE_LOG_DIRS, body, version)
        [result] = answer["results"]
        assert (result["error_code"], result["log_dir"]) == (0, str(data_dir.resolve()))
        [topic] = result["topics"]  # the unknown topic and partition 7 are left out
        sizes = {p["partition_index"]: p["partition_size"] for p in topic["partitions"]}
        assert sizes == {0: broker.broker.topics["ld"].partitions[0].size_bytes, 2: 0}
        assert sizes[0] > 0
        if version >= 4:
            assert 0 < result["usable_bytes"] <= result["total_bytes"]
    empty = await ask(kafka, ApiKey.DESCRIBE_LOG_DIRS, {"topics": []}, 1)
    assert empty["results"][0]["topics"] == []
