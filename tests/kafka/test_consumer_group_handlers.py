"""KIP-848's APIs over a real socket: raw requests from rustka's Kafka client.

ConsumerGroupHeartbeat, ConsumerGroupDescribe, Metadata v12 by topic id, OffsetCommit
v9 and OffsetFetch v8-9 against a real broker core and Kafka listener on 127.0.0.1
port 0 (the model's rules are in tests/broker/test_consumer_groups.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_twisted

from rustka.kafka.topic_ids import topic_id
from tests.conftest import RunningBroker
from tests.kafka.wire import call, kafka_wire

TOPIC = "orders"
GROUP = "cg"


@pytest_twisted.async_yield_fixture
async def kafka(tmp_path: Path) -> AsyncIterator[tuple[RunningBroker, Any]]:
    async with kafka_wire(tmp_path, TOPIC, client_id="wire") as running_and_client:
        yield running_and_client


def heartbeat(member_id: str = "", epoch: int = 0, **kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "group_id": GROUP,
        "member_id": member_id,
        "member_epoch": epoch,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout_ms": -1,
        "subscribed_topic_names": None,
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": None,
    }
    return body | kw


@pytest_twisted.ensureDeferred
async def test_heartbeat_describe_commit_and_fetch_over_the_wire(
    kafka: tuple[RunningBroker, Any],
) -> None:
    running, client = kafka
    joined = await call(
        client,
        68,
        heartbeat(rebalance_timeout_ms=5000, subscribed_topic_names=[TOPIC], topic_partitions=[]),
        1,
    )
    assert joined["error_code"] == 0 and joined["member_epoch"] == 1
    member = joined["member_id"]
    assert joined["assignment"] == {
        "topic_partitions": [{"topic_id": topic_id(TOPIC), "partitions": [0, 1]}]
    }
    # Nothing changed: no assignment in the answer (a null struct on the wire).
    again = await call(client, 68, heartbeat(member, 1), 1)
    assert again["error_code"] == 0 and again["assignment"] is None
    fenced = await call(client, 68, heartbeat(member, 4), 1)
    assert fenced["error_code"] == 110  # FENCED_MEMBER_EPOCH

    # Metadata v12 names the assigned topic by its id.
    meta = await call(
        client,
        3,
        {
            "topics": [{"topic_id": topic_id(TOPIC), "name": None}, {"topic_id": b"\1" * 16}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
        12,
    )
    found = {t["name"]: (t["error_code"], t["topic_id"]) for t in meta["topics"]}
    assert found[TOPIC] == (0, topic_id(TOPIC))
    assert found[None] == (100, b"\1" * 16)  # UNKNOWN_TOPIC_ID

    described = await call(
        client, 69, {"group_ids": [GROUP, "nope"], "include_authorized_operations": False}, 0
    )
    group, missing = described["groups"]
    assert group["error_code"] == 0 and group["group_state"] == "Stable"
    assert group["group_epoch"] == group["assignment_epoch"] == 1
    assert group["assignor_name"] == "uniform"
    [m] = group["members"]
    assert m["member_id"] == member and m["client_id"] == "wire"
    assert m["subscribed_topic_names"] == [TOPIC]
    expected = [{"topic_id": topic_id(TOPIC), "topic_name": TOPIC, "partitions": [0, 1]}]
    assert m["assignment"]["topic_partitions"] == expected
    assert m["target_assignment"]["topic_partitions"] == expected
    assert missing["error_code"] == 69  # GROUP_ID_NOT_FOUND

    def commit(epoch: int, version: int = 9) -> dict[str, Any]:
        return {
            "group_id": GROUP,
            "generation_id_or_member_epoch": epoch,
            "member_id": member,
            "group_instance_id": None,
            "topics": [
                {
                    "name": TOPIC,
                    "partitions": [
                        {"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}
                    ],
                }
            ],
        }

    def code(answer: dict[str, Any]) -> int:
        return int(answer["topics"][0]["partitions"][0]["error_code"])

    assert code(await call(client, 8, commit(0), 9)) == 113  # STALE_MEMBER_EPOCH
    assert code(await call(client, 8, commit(1), 8)) == 35  # UNSUPPORTED_VERSION below v9
    assert code(await call(client, 8, commit(1), 9)) == 0

    def fetch(epoch: int) -> dict[str, Any]:
        return {
            "groups": [
                {
                    "group_id": GROUP,
                    "member_id": member,
                    "member_epoch": epoch,
                    "topics": [{"name": TOPIC, "partition_indexes": [0, 1]}],
                }
            ],
            "require_stable": False,
        }

    stale = await call(client, 9, fetch(3), 9)
    assert stale["groups"][0]["error_code"] == 113
    fetched = await call(client, 9, fetch(1), 9)
    parts = fetched["groups"][0]["topics"][0]["partitions"]
    assert [(p["partition_index"], p["committed_offset"]) for p in parts] == [(0, 5), (1, -1)]

    listed = await call(client, 16, {"states_filter": [], "types_filter": ["consumer"]}, 5)
    assert [(g["group_id"], g["group_type"]) for g in listed["groups"]] == [(GROUP, "consumer")]
    none = await call(client, 16, {"states_filter": [], "types_filter": ["classic"]}, 5)
    assert none["groups"] == []

    left = await call(client, 68, heartbeat(member, -1), 1)
    assert left["error_code"] == 0 and left["member_epoch"] == -1
    assert running.broker.groups.consumer_group(GROUP).state == "Empty"


# -- guards (Kafka's ACLs: READ on the group to heartbeat, DESCRIBE to describe) -------


def test_the_guards_check_the_group_and_hide_undescribable_topics() -> None:
    from rustka.kafka.authorization import GUARDS
    from rustka.kafka.messages import ApiKey
    from rustka.security.acl import Operation, ResourceType
    from tests.kafka.test_authorization import allow, gate

    g = gate(
        allow(ResourceType.GROUP, "ok", Operation.READ),
        allow(ResourceType.GROUP, "ok", Operation.DESCRIBE),
        allow(ResourceType.TOPIC, "seen", Operation.DESCRIBE),
    )
    admitted, _ = GUARDS[ApiKey.CONSUMER_GROUP_HEARTBEAT](
        None, g, 1, heartbeat() | {"group_id": "ok"}
    )  # type: ignore[arg-type]
    assert admitted is not None
    refused, finish = GUARDS[ApiKey.CONSUMER_GROUP_HEARTBEAT](None, g, 1, heartbeat())  # type: ignore[arg-type]
    assert refused is None and finish(None)["error_code"] == 30  # GROUP_AUTHORIZATION_FAILED

    body = {"group_ids": ["ok", "cg"], "include_authorized_operations": False}
    admitted, finish = GUARDS[ApiKey.CONSUMER_GROUP_DESCRIBE](None, g, 0, body)  # type: ignore[arg-type]
    assert admitted["group_ids"] == ["ok"]
    tps = [
        {"topic_id": topic_id(t), "topic_name": t, "partitions": [0]} for t in ("seen", "hidden")
    ]
    member = {
        "assignment": {"topic_partitions": tps},
        "target_assignment": {"topic_partitions": tps},
    }
    answer = finish({"throttle_time_ms": 0, "groups": [{"group_id": "ok", "members": [member]}]})
    [shown] = answer["groups"][0]["members"]
    assert [tp["topic_name"] for tp in shown["assignment"]["topic_partitions"]] == ["seen"]
    assert answer["groups"][1]["group_id"] == "cg" and answer["groups"][1]["error_code"] == 30

    fetch = {"groups": [{"group_id": "ok", "topics": None}, {"group_id": "cg", "topics": None}]}
    admitted, finish = GUARDS[ApiKey.OFFSET_FETCH](None, g, 9, fetch)  # type: ignore[arg-type]
    assert [x["group_id"] for x in admitted["groups"]] == ["ok"]
    answer = finish(
        {
            "groups": [
                {
                    "group_id": "ok",
                    "topics": [{"name": "seen"}, {"name": "hidden"}],
                    "error_code": 0,
                }
            ]
        }
    )
    assert [t["name"] for t in answer["groups"][0]["topics"]] == ["seen"]
    assert answer["groups"][1] == {"group_id": "cg", "topics": [], "error_code": 30}
