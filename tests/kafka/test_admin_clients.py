"""The admin APIs tools call, proven with confluent-kafka's AdminClient and
kafka-python's KafkaAdminClient against a real broker (docs/kafka.md, "APIs and versions")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest_twisted
from twisted.internet import threads

from tests.conftest import RunningBroker, within


def in_thread(f: Callable[..., Any], *args: Any) -> Any:
    return within(threads.deferToThread(f, *args), 60)


async def make_topic(running: RunningBroker, topic: str, partitions: int) -> None:
    c = await running.client()
    try:
        await within(c.create_topic(topic, partitions))
    finally:
        await c.close()


# -- OffsetCommit metadata ----------------------------------------------------------------


def commit_with_metadata(bootstrap: str, topic: str, group: str) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTP

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(
            offsets=[
                TopicPartition(topic, 0, 3, metadata="ck-é"),
                TopicPartition(topic, 1, 4),
            ],
            asynchronous=False,
        )
        ck_committed = {
            tp.partition: (tp.offset, tp.metadata)
            for tp in consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], 30)
        }
    finally:
        consumer.close()
    kp_consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group + "-kp")
    try:
        kp_consumer.commit({KTP(topic, 0): OffsetAndMetadata(9, "kp-meta", -1)})
    finally:
        kp_consumer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions

    [future] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    ck_listed = {tp.partition: tp.metadata for tp in future.result(30).topic_partitions}
    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        kp_listed = {
            tp.partition: m.metadata
            for tp, m in kp.list_group_offsets(group + "-kp")[group + "-kp"].items()
        }
    finally:
        kp.close()
    return {"ck_committed": ck_committed, "ck_listed": ck_listed, "kp_listed": kp_listed}


@pytest_twisted.ensureDeferred
async def test_offset_commit_metadata_is_stored_and_returned(broker: RunningBroker) -> None:
    await make_topic(broker, "meta", 2)
    seen = await in_thread(commit_with_metadata, broker.address, "meta", "g-meta")
    # librdkafka shows the "" Kafka answers for a commit without metadata as None.
    assert seen["ck_committed"] == {0: (3, "ck-é"), 1: (4, None)}
    assert seen["ck_listed"] == {0: "ck-é", 1: None}
    assert seen["kp_listed"] == {0: "kp-meta"}
    offsets = broker.broker.offsets
    # confluent-kafka sends the string with its C terminator; Kafka stores the bytes sent.
    assert offsets.committed_metadata("g-meta", "meta", 0) == "ck-é\x00"
    assert offsets.committed_metadata("g-meta", "meta", 1) == ""
    assert offsets.committed_metadata("g-meta-kp", "meta", 0) == "kp-meta"
