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
