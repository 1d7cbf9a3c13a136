"""Tests of rustka/ops/: the service, CLI, console, metrics and the other ops pieces."""

from __future__ import annotations

from typing import Any


async def join_consumer_group(
    address: str, group: str, member_id: str, topics: list[str], **extra: Any
) -> tuple[Any, dict[str, Any]]:
    """A member joining a KIP-848 group by one raw ConsumerGroupHeartbeat (v1): rustka's
    own Kafka client, left open (the caller closes it), and the broker's answer."""
    from twisted.internet import defer, reactor

    from rustka.kafka.client import connect_kafka
    from tests.conftest import within

    client_id = extra.pop("client_id", "cg-test")
    k = await within(defer.ensureDeferred(connect_kafka(reactor, address, client_id=client_id)))
    body = {
        "group_id": group,
        "member_id": member_id,
        "member_epoch": 0,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout_ms": 30_000,
        "subscribed_topic_names": topics,
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": [],
        **extra,
    }
    return k, await within(k.request(68, body, 1))
