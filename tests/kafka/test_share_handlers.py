"""The share-group APIs (KIP-932) over a real socket: raw Kafka requests from rustka's
Kafka client to a real broker core, checking the handlers' translation (topic ids,
share sessions, piggybacked acknowledgements, errors); the model and coordinator rules
are in tests/storage/test_share_partition.py and tests/broker/test_share_groups.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_twisted

from rustka.kafka.topic_ids import topic_id
from rustka.record.batch import Record, encode_batch, ms_now
from tests.conftest import RunningBroker, within
from tests.kafka.wire import call, kafka_wire

TOPIC = "jobs"
GROUP = "workers"
HEARTBEAT, DESCRIBE, FETCH, ACK, METADATA = 76, 77, 78, 79, 3
TID = topic_id(TOPIC)


@pytest_twisted.async_yield_fixture
async def kafka(tmp_path: Path) -> AsyncIterator[tuple[RunningBroker, Any]]:
    settings = {"share_auto_offset_reset": "earliest"}
    async with kafka_wire(tmp_path, TOPIC, client_id="w", **settings) as (running, client):
        batch = encode_batch([Record(b"k", b"%d" % i) for i in range(5)], timestamp=ms_now())
        await within(running.broker.append(TOPIC, 0, batch, auto_create=False))
        yield running, client


def fetch_body(
    epoch: int, acks: list[dict[str, Any]] | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "group_id": GROUP,
        "member_id": "m1",
        "share_session_epoch": epoch,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "max_records": 3,
        "batch_size": 3,
        "topics": [
            {
                "topic_id": TID,
                "partitions": [{"partition_index": 0, "acknowledgement_batches": acks or []}],
            }
        ],
        "forgotten_topics_data": [],
        **extra,
    }


@pytest_twisted.ensureDeferred
async def test_metadata_names_topics_by_id(kafka: tuple[RunningBroker, Any]) -> None:
    _, client = kafka
    by_name = await call(client, METADATA, {"topics": [{"name": TOPIC}]}, 12)
    assert by_name["topics"][0]["topic_id"] == TID
    by_id = await call(client, METADATA, {"topics": [{"topic_id": TID, "name": None}]}, 12)
    assert by_id["topics"][0]["name"] == TOPIC
    assert len(by_id["topics"][0]["partitions"]) == 2


@pytest_twisted.ensureDeferred
async def test_heartbeat_assigns_by_topic_id_and_describe_shows_the_member(
    kafka: tuple[RunningBroker, Any],
) -> None:
    _, client = kafka
    joined = await call(
        client,
        HEARTBEAT,
        {
            "group_id": GROUP,
            "member_id": "m1",
            "member_epoch": 0,
            "rack_id": None,
            "subscribed_topic_names": [TOPIC],
        },
    )
    assert joined["error_code"] == 0 and joined["member_epoch"] == 1
    assert joined["assignment"]["topic_partitions"] == [{"topic_id": TID, "partitions": [0, 1]}]
    fenced = await call(
        client,
        HEARTBEAT,
        {
            "group_id": GROUP,
            "member_id": "m1",
            "member_epoch": 7,
            "rack_id": None,
            "subscribed_topic_names": None,
        },
    )
    assert fenced["error_code"] == 110
    described = await call(
        client, DESCRIBE, {"group_ids": [GROUP, "nope"], "include_authorized_operations": False}
    )
    group, unknown = described["groups"]
    assert group["group_state"] == "Stable" and group["members"][0]["member_id"] == "m1"
    assert group["members"][0]["assignment"]["topic_partitions"][0]["topic_name"] == TOPIC
    assert unknown["error_code"] == 69


@pytest_twisted.ensureDeferred
async def test_share_fetch_sessions_acquire_acknowledge_and_close(
    kafka: tuple[RunningBroker, Any],
) -> None:
    running, client = kafka
    assert (await call(client, FETCH, fetch_body(3)))["error_code"] == 122  # no session
    first = await call(client, FETCH, fetch_body(0))
    assert first["error_code"] == 0 and first["acquisition_lock_timeout_ms"] == 30_000
    part = first["responses"][0]["partitions"][0]
    assert part["acquired_records"] == [{"first_offset": 0, "last_offset": 2, "delivery_count": 1}]
    assert part["records"]  # the stored batch holding them
    assert (await call(client, FETCH, fetch_body(5)))["error_code"] == 123  # wrong epoch
    # Epoch 1: accept 0..1, release 2; the next records come with it.
    second = await call(
        client,
        FETCH,
        fetch_body(1, [{"first_offset": 0, "last_offset": 2, "acknowledge_types": [1, 1, 2]}]),
    )
    part = second["responses"][0]["partitions"][0]
    assert part["acknowledge_error_code"] == 0
    assert part["acquired_records"] == [
        {"first_offset": 2, "last_offset": 2, "delivery_count": 2},
        {"first_offset": 3, "last_offset": 4, "delivery_count": 1},
    ]
    # Not this member's records: INVALID_RECORD_STATE, on ShareAcknowledge epoch 2.
    bad = await call(
        client,
        ACK,
        {
            "group_id": GROUP,
            "member_id": "m1",
            "share_session_epoch": 2,
            "topics": [
                {
                    "topic_id": TID,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "acknowledgement_batches": [
                                {"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}
                            ],
                        }
                    ],
                }
            ],
        },
    )
    assert bad["responses"][0]["partitions"][0]["error_code"] == 121
    # Closing (epoch -1) with a reject of 3: 2 and 4 go back, 3 is archived.
    closed = await call(
        client,
        ACK,
        {
            "group_id": GROUP,
            "member_id": "m1",
            "share_session_epoch": -1,
            "topics": [
                {
                    "topic_id": TID,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "acknowledgement_batches": [
                                {"first_offset": 3, "last_offset": 3, "acknowledge_types": [3]}
                            ],
                        }
                    ],
                }
            ],
        },
    )
    assert closed["error_code"] == 0
    assert closed["responses"][0]["partitions"][0]["error_code"] == 0
    share = running.broker.share_groups
    assert share is not None
    assert share.describe_offsets(GROUP) == {(TOPIC, 0): 2}
    counts = share.counts
    assert (counts.acquired, counts.accepted, counts.released, counts.rejected) == (6, 2, 1, 1)
    assert (
        await call(
            client,
            ACK,
            {"group_id": GROUP, "member_id": "m1", "share_session_epoch": 3, "topics": []},
        )
    )["error_code"] == 122


@pytest_twisted.ensureDeferred
async def test_unknown_topic_ids_are_answered_per_partition(
    kafka: tuple[RunningBroker, Any],
) -> None:
    _, client = kafka
    body = fetch_body(0)
    body["topics"][0]["topic_id"] = bytes(range(16))
    answer = await call(client, FETCH, body)
    assert answer["error_code"] == 0
    assert answer["responses"][0]["partitions"][0]["error_code"] == 100


@pytest_twisted.ensureDeferred
async def test_a_share_groups_id_is_refused_to_the_other_protocols_and_listed_as_share(
    kafka: tuple[RunningBroker, Any],
) -> None:
    """One group id, one type: a JoinGroup for a share group's id is
    INCONSISTENT_GROUP_PROTOCOL and a ConsumerGroupHeartbeat GROUP_ID_NOT_FOUND, as
    Kafka's coordinator answers; ListGroups v5 gives it type "share"."""
    _, client = kafka
    joined = await call(
        client,
        HEARTBEAT,
        {
            "group_id": GROUP,
            "member_id": "m1",
            "member_epoch": 0,
            "rack_id": None,
            "subscribed_topic_names": [TOPIC],
        },
    )
    assert joined["error_code"] == 0
    join = {
        "group_id": GROUP,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 10_000,
        "member_id": "",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
    }
    refused = await call(client, 11, join, 5)
    assert refused["error_code"] == 23  # INCONSISTENT_GROUP_PROTOCOL
    heartbeat = {
        "group_id": GROUP,
        "member_id": "c1",
        "member_epoch": 0,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout_ms": 10_000,
        "subscribed_topic_names": [TOPIC],
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": [],
    }
    consumer = await call(client, 68, heartbeat, 1)
    assert consumer["error_code"] == 69  # GROUP_ID_NOT_FOUND
    assert "not a consumer group" in consumer["error_message"]
    listed = await call(client, 16, {"states_filter": [], "types_filter": ["share"]}, 5)
    assert [(g["group_id"], g["group_type"], g["protocol_type"]) for g in listed["groups"]] == [
        (GROUP, "share", "share")
    ]
