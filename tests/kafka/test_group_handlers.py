"""The group APIs over a real socket: raw Kafka requests from rustka's Kafka client.

A real broker core and a real Kafka listener on 127.0.0.1 port 0; the requests
are encoded by `rustka.kafka.messages` exactly as a client sends them, so this
checks the handlers' translation end to end (the coordinator's rules are in
tests/broker/test_groups.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_twisted

from tests.conftest import RunningBroker, start_broker, within

TOPIC = "orders"
GROUP = "billing"
PROTOCOLS = [{"name": "range", "metadata": b"sub"}]


@pytest_twisted.async_yield_fixture
async def kafka(tmp_path: Path) -> AsyncIterator[tuple[RunningBroker, Any]]:
    from twisted.internet import reactor

    from rustka.kafka.client import connect_kafka
    from rustka.kafka.server import KafkaFactory

    running = await start_broker(tmp_path)
    factory = KafkaFactory(running.broker, running.config, reactor)
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")
    await within(running.broker.create_topic(TOPIC, 2))
    address = f"127.0.0.1:{port.getHost().port}"
    client = await within(_deferred(connect_kafka(reactor, address, client_id="wire")))
    try:
        yield running, client
    finally:
        await client.close()
        await port.stopListening()
        running.broker.groups.close()
        await running.stop()


def _deferred(coro: Any) -> Any:
    from twisted.internet import defer

    return defer.ensureDeferred(coro)


async def call(client: Any, api_key: int, body: dict[str, Any], version: int) -> Any:
    return await within(client.request(api_key, body, version))


async def join(
    client: Any, member_id: str = "", version: int = 5, session_timeout_ms: int = 10_000
) -> Any:
    body = {
        "group_id": GROUP,
        "session_timeout_ms": session_timeout_ms,
        "rebalance_timeout_ms": 10_000,
        "member_id": member_id,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": PROTOCOLS,
    }
    return await call(client, 11, body, version)


@pytest_twisted.ensureDeferred
async def test_group_lifecycle_over_the_wire(kafka: tuple[RunningBroker, Any]) -> None:
    running, client = kafka
    found = await call(client, 10, {"key": GROUP, "key_type": 0}, 2)
    assert found["error_code"] == 0 and found["node_id"] == 0 and found["port"] > 0

    first = await join(client)
    assert first["error_code"] == 79 and first["member_id"].startswith("wire-")
    joined = await join(client, first["member_id"])
    member = joined["member_id"]
    assert joined["error_code"] == 0 and joined["generation_id"] == 1
    assert joined["leader"] == member and joined["protocol_name"] == "range"
    assert [m["metadata"] for m in joined["members"]] == [b"sub"]

    synced = await call(
        client,
        14,
        {
            "group_id": GROUP,
            "generation_id": 1,
            "member_id": member,
            "group_instance_id": None,
            "assignments": [{"member_id": member, "assignment": b"both partitions"}],
        },
        3,
    )
    assert synced == {"throttle_time_ms": 0, "error_code": 0, "assignment": b"both partitions"}
    beat = {"group_id": GROUP, "generation_id": 1, "member_id": member, "group_instance_id": None}
    assert (await call(client, 12, beat, 3))["error_code"] == 0

    def commit(generation: int, offset: int, partition: int = 0) -> dict[str, Any]:
        return {
            "group_id": GROUP,
            "generation_id_or_member_epoch": generation,
            "member_id": member if generation >= 0 else "",
            "group_instance_id": None,
            "retention_time_ms": -1,
            "topics": [
                {
                    "name": TOPIC,
                    "partitions": [
                        {
                            "partition_index": partition,
                            "committed_offset": offset,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                },
            ],
        }

    def codes(resp: dict[str, Any]) -> list[int]:
        return [p["error_code"] for t in resp["topics"] for p in t["partitions"]]

    assert codes(await call(client, 8, commit(1, 7), 7)) == [0]
    assert codes(await call(client, 8, commit(0, 8), 7)) == [22]  # ILLEGAL_GENERATION
    assert codes(await call(client, 8, commit(-1, 9), 7)) == [25]  # active group: -1 refused
    assert codes(await call(client, 8, commit(1, 9, partition=5), 7)) == [3]
    assert running.broker.committed_offsets(GROUP) == {(TOPIC, 0): 7}

    fetched = await call(client, 9, {"group_id": GROUP, "topics": None}, 5)
    assert fetched["error_code"] == 0
    assert [(t["name"], p["partition_index"], p["committed_offset"]) for t in fetched["topics"]
            for p in t["partitions"]] == [(TOPIC, 0, 7)]  # fmt: skip
    some = await call(
        client, 9, {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [1]}]}, 1
    )
    assert some["topics"][0]["partitions"][0]["committed_offset"] == -1

    listed = await call(client, 16, {}, 2)
    assert (GROUP, "consumer") in {(g["group_id"], g["protocol_type"]) for g in listed["groups"]}
    described = await call(
        client, 15, {"groups": [GROUP, "nobody"], "include_authorized_operations": False}, 4
    )
    stable, dead = described["groups"]
    assert (stable["group_state"], stable["protocol_data"]) == ("Stable", "range")
    [m] = stable["members"]
    assert m["client_id"] == "wire" and m["client_host"] == "/127.0.0.1"
    assert m["member_assignment"] == b"both partitions"
    assert dead["group_state"] == "Dead" and dead["members"] == []

    left = await call(client, 13, {"group_id": GROUP, "member_id": member}, 1)
    assert left["error_code"] == 0
    again = await call(client, 13, {"group_id": GROUP, "member_id": member}, 1)
    assert again["error_code"] == 25
    batch = await call(
        client,
        13,
        {"group_id": GROUP, "members": [{"member_id": "ghost", "group_instance_id": None}]},
        3,
    )
    assert batch["members"] == [{"member_id": "ghost", "group_instance_id": None, "error_code": 25}]
    # Empty now: a standalone commit (generation -1) is accepted again.
    assert codes(await call(client, 8, commit(-1, 11), 7)) == [0]
    assert running.broker.committed_offsets(GROUP) == {(TOPIC, 0): 11}


@pytest_twisted.ensureDeferred
async def test_every_entrance_meets_the_configs_session_timeout_bounds(tmp_path: Path) -> None:
    """The core builds the one coordinator with its bounds: a Kafka client on the shared
    port, one on a KafkaFactory built on the core alone (no service tree), and the core's
    own API all refuse a session timeout outside them with INVALID_SESSION_TIMEOUT (26)."""
    from twisted.internet import reactor

    from rustka.broker.coordinator import JoinRequest
    from rustka.kafka.client import connect_kafka
    from rustka.kafka.server import KafkaFactory

    running = await start_broker(
        tmp_path, group_min_session_timeout_ms=2000, group_max_session_timeout_ms=5000
    )
    port = reactor.listenTCP(
        0, KafkaFactory(running.broker, running.config, reactor), interface="127.0.0.1"
    )
    clients = []
    try:
        for address in (running.address, f"127.0.0.1:{port.getHost().port}"):
            clients.append(await within(_deferred(connect_kafka(reactor, address))))
        for client in clients:
            for session in (1999, 5001):
                refused = await join(client, session_timeout_ms=session)
                assert (refused["error_code"], refused["member_id"]) == (26, "")
            assert (await join(client, session_timeout_ms=2000))["error_code"] == 79
        core = running.broker.groups
        for session in (1999, 5001):
            request = JoinRequest(GROUP, "", "consumer", [("range", b"")], session)
            assert (await within(core.join(request))).error == 26
    finally:
        for client in clients:
            await client.close()
        await port.stopListening()
        await running.stop()
