"""Kafka handlers of the consumer group protocol (KIP-848) and its offsets versions.

ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69), translated to and from the core's
coordinator (``broker.groups``, whose ``consumer`` holds the pure
`rustka.broker.consumer_groups` model). Topics travel by id on the wire
(`rustka.kafka.topic_ids`) and by name in the core. docs/kafka.md, "Consumer groups
(KIP-848)". OffsetFetch v8+ is `rustka.kafka.group_handlers.offset_fetch`'s.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from rustka.broker.assignors import Assignment
from rustka.broker.consumer_groups import HeartbeatRequest
from rustka.kafka import group_handlers
from rustka.kafka.context import Body, RequestContext
from rustka.kafka.errors import ErrorCode as E
from rustka.kafka.topic_ids import TopicNames, topic_id

_INT32_MIN = -(2**31)


def _wire(assignment: Assignment) -> list[Body]:
    return [
        {"topic_id": topic_id(topic), "partitions": sorted(parts)}
        for topic, parts in sorted(assignment.items())
    ]


def _described(assignment: Assignment) -> Body:
    return {
        "topic_partitions": [
            {"topic_id": topic_id(topic), "topic_name": topic, "partitions": sorted(parts)}
            for topic, parts in sorted(assignment.items())
        ]
    }


# -- ConsumerGroupHeartbeat (68) -------------------------------------------------


class _PartitionCounts(Mapping[str, int]):
    """The broker's topics as the model reads them (name -> partition count), without
    copying them at every heartbeat."""

    def __init__(self, topics: Mapping[str, Any]) -> None:
        self._topics = topics

    def __getitem__(self, name: str) -> int:
        return len(self._topics[name].partitions)

    def __iter__(self) -> Iterator[str]:
        return iter(self._topics)

    def __len__(self) -> int:
        return len(self._topics)


_NAMES = TopicNames()


def consumer_group_heartbeat(ctx: RequestContext, version: int, body: Body) -> Body:
    broker = ctx.broker
    topics = _PartitionCounts(broker.topics)
    owned: Assignment | None = None
    if body["topic_partitions"] is not None:
        owned = {}
        for tp in body["topic_partitions"]:
            name = _NAMES.name_of(tp["topic_id"], topics)
            if name is not None and tp["partitions"]:
                owned[name] = frozenset(tp["partitions"])
    names = body["subscribed_topic_names"]
    request = HeartbeatRequest(
        group_id=body["group_id"],
        member_id=body["member_id"],
        member_epoch=body["member_epoch"],
        instance_id=body["instance_id"],
        rack_id=body["rack_id"],
        rebalance_timeout_ms=body["rebalance_timeout_ms"],
        subscribed_names=tuple(names) if names is not None else None,
        subscribed_regex=body.get("subscribed_topic_regex"),
        server_assignor=body["server_assignor"],
        owned=owned,
        client_id=ctx.header.client_id or "",
        client_host=group_handlers._client_host(ctx),
    )
    if group_handlers.is_share_group(ctx, request.group_id):
        return {
            "throttle_time_ms": 0,
            "error_code": E.GROUP_ID_NOT_FOUND,
            "error_message": f"Group {request.group_id} is not a consumer group",
            "member_id": None,
            "member_epoch": -1,
            "heartbeat_interval_ms": 0,
            "assignment": None,
        }
    result = broker.groups.consumer_heartbeat(request, topics)
    return {
        "throttle_time_ms": 0,
        "error_code": result.error,
        "error_message": result.message,
        "member_id": result.member_id or None,
        "member_epoch": result.member_epoch,
        "heartbeat_interval_ms": result.heartbeat_interval_ms,
        "assignment": {"topic_partitions": _wire(result.assignment)}
        if result.assignment is not None
        else None,
    }


# -- ConsumerGroupDescribe (69) --------------------------------------------------


def consumer_group_describe(ctx: RequestContext, version: int, body: Body) -> Body:
    gc = ctx.broker.groups
    described = []
    for group_id in body["group_ids"]:
        empty = {
            "error_message": None,
            "group_id": group_id,
            "group_state": "",
            "group_epoch": -1,
            "assignment_epoch": -1,
            "assignor_name": "",
            "members": [],
            "authorized_operations": _INT32_MIN,
        }
        if not group_handlers._valid_group(group_id):
            described.append({**empty, "error_code": E.INVALID_GROUP_ID})
            continue
        if group_handlers._elsewhere(ctx):
            described.append({**empty, "error_code": E.NOT_COORDINATOR})
            continue
        group = gc.consumer_group(group_id)
        if group is None:
            described.append(
                {
                    **empty,
                    "error_code": E.GROUP_ID_NOT_FOUND,
                    "error_message": f"Group {group_id} is not a consumer group.",
                }
            )
            continue
        described.append(
            {
                **empty,
                "error_code": 0,
                "group_state": str(group.state),
                "group_epoch": group.group_epoch,
                "assignment_epoch": group.assignment_epoch,
                "assignor_name": group.assignor_name or gc.consumer.assignors[0],
                "members": [
                    {
                        "member_id": m.member_id,
                        "instance_id": m.instance_id,
                        "rack_id": m.rack_id,
                        "member_epoch": m.member_epoch,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "subscribed_topic_names": list(m.subscribed_names),
                        "subscribed_topic_regex": m.subscribed_regex,
                        "assignment": _described(m.assigned),
                        "target_assignment": _described(group.target_of(m.member_id)),
                    }
                    for m in group.members.values()
                ],
            }
        )
    return {"throttle_time_ms": 0, "groups": described}
