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


# -- DeleteRecords ------------------------------------------------------------------------


def delete_request(name: str, *moves: tuple[int, int]) -> dict[str, Any]:
    partitions = [{"partition_index": p, "offset": o} for p, o in moves]
    return {"topics": [{"name": name, "partitions": partitions}], "timeout_ms": 5000}


async def delete_records(
    k: KafkaClientProtocol, version: int, name: str, *moves: tuple[int, int]
) -> list[tuple[int, int, int]]:
    answer = await ask(k, ApiKey.DELETE_RECORDS, delete_request(name, *moves), version)
    [topic] = answer["topics"]
    assert topic["name"] == name
    rows = topic["partitions"]
    return [(p["partition_index"], p["error_code"], p["low_watermark"]) for p in rows]


async def fetch_at(k: KafkaClientProtocol, name: str, offset: int) -> tuple[int, int, int]:
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "topics": [
            {
                "topic": name,
                "partitions": [
                    {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                ],
            }
        ],
    }
    answer = await ask(k, ApiKey.FETCH, body, 11)
    part = answer["responses"][0]["partitions"][0]
    return part["error_code"], part["log_start_offset"], part["high_watermark"]


async def earliest(k: KafkaClientProtocol, name: str) -> int:
    body = {
        "replica_id": -1,
        "topics": [{"name": name, "partitions": [{"partition_index": 0, "timestamp": -2}]}],
    }
    answer = await ask(k, ApiKey.LIST_OFFSETS, body, 5)
    return int(answer["topics"][0]["partitions"][0]["offset"])


@pytest_twisted.ensureDeferred
async def test_delete_records_moves_the_log_start_by_every_version(
    broker: RunningBroker, kafka: KafkaClientProtocol
) -> None:
    """v0-2 move the start (inside a batch run of one segment); it never moves back; -1
    is the high watermark; past it is OFFSET_OUT_OF_RANGE and the other partitions of
    the request still move. Fetch below it and ListOffsets earliest follow on Kafka,
    the native FetchBatch answers OutOfRange with the bounds and Metadata/DescribeLogs
    show it."""
    from rustka.errors import OffsetOutOfRange

    await within(broker.broker.create_topic("dr", 2))
    await produce(broker, "dr", 10)
    assert await delete_records(kafka, 0, "dr", (0, 3)) == [(0, 0, 3)]
    assert await delete_records(kafka, 1, "dr", (0, 5), (1, 0)) == [(0, 0, 5), (1, 0, 0)]
    assert await delete_records(kafka, 2, "dr", (0, 4)) == [(0, 0, 5)]  # never backwards
    assert await delete_records(kafka, 2, "dr", (0, 11), (1, -1)) == [
        (0, E.OFFSET_OUT_OF_RANGE, -1),
        (1, 0, 0),
    ]
    assert (await fetch_at(kafka, "dr", 4))[0] == E.OFFSET_OUT_OF_RANGE
    assert await fetch_at(kafka, "dr", 5) == (0, 5, 10)
    assert await earliest(kafka, "dr") == 5
    c = await broker.client()
    try:
        try:
            await within(c.fetch_batch("dr", 0, 2))
        except OffsetOutOfRange as e:
            assert (e.log_start, e.end) == (5, 10)
        else:
            raise AssertionError("FetchBatch below the log start was served")
        [meta] = await within(c.metadata(["dr"]))
        assert meta.partitions[0].log_start == 5
        [logs] = await within(c.describe_logs(["dr"]))
        assert logs.partitions[0].log_start == 5
    finally:
        await c.close()
    assert await delete_records(kafka, 1, "dr", (0, -1)) == [(0, 0, 10)]
    assert await earliest(kafka, "dr") == 10


@pytest_twisted.ensureDeferred
async def test_delete_records_refusals(broker: RunningBroker, kafka: KafkaClientProtocol) -> None:
    """Unknown topic and partition are UNKNOWN_TOPIC_OR_PARTITION; a topic that only
    compacts is POLICY_VIOLATION, as Kafka's leader refuses it; an offset below -1 is
    OFFSET_OUT_OF_RANGE. Nothing moves."""
    await within(broker.broker.create_topic("kept", 1, {"cleanup.policy": "compact"}))
    await within(broker.broker.create_topic("both", 1, {"cleanup.policy": "compact,delete"}))
    await produce(broker, "both", 4)
    unknown = E.UNKNOWN_TOPIC_OR_PARTITION
    assert await delete_records(kafka, 1, "nope", (0, 0)) == [(0, unknown, -1)]
    assert await delete_records(kafka, 1, "kept", (3, 0)) == [(3, unknown, -1)]
    assert await delete_records(kafka, 1, "kept", (0, 0)) == [(0, E.POLICY_VIOLATION, -1)]
    assert await delete_records(kafka, 1, "both", (0, -2)) == [(0, E.OFFSET_OUT_OF_RANGE, -1)]
    assert broker.broker.partition("both", 0).log_start_offset == 0
    assert await delete_records(kafka, 1, "both", (0, 2)) == [(0, 0, 2)]
