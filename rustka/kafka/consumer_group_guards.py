"""Authorization of the consumer group protocol's APIs (KIP-848), per Kafka's ACL table.

ConsumerGroupHeartbeat needs READ on the group (and, as Kafka, DESCRIBE on each
subscribed topic is not asked: the assignment only names topics that exist);
ConsumerGroupDescribe needs DESCRIBE on each group, and the topics of the answer's
assignments are left out where the principal may not DESCRIBE them; OffsetFetch v8+
needs DESCRIBE on each of its groups. `rustka.kafka.authorization.GUARDS` lists them.
"""

from __future__ import annotations

from collections.abc import Callable

from rustka.broker.access import Gate
from rustka.kafka.context import Body, RequestContext
from rustka.kafka.errors import ErrorCode as E
from rustka.security.acl import Operation, ResourceType

Finish = Callable[[Body | None], Body | None]

_GROUP, _TOPIC = ResourceType.GROUP, ResourceType.TOPIC
_READ, _DESCRIBE = Operation.READ, Operation.DESCRIBE


def _same(response: Body | None) -> Body | None:
    return response


def heartbeat(
    ctx: RequestContext, gate: Gate, version: int, body: Body
) -> tuple[Body | None, Finish]:
    if gate.allows(_READ, _GROUP, body["group_id"]):
        return body, _same
    denied = {
        "throttle_time_ms": 0,
        "error_code": E.GROUP_AUTHORIZATION_FAILED,
        "error_message": None,
        "member_id": None,
        "member_epoch": -1,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }
    return None, lambda _: denied


def describe(
    ctx: RequestContext, gate: Gate, version: int, body: Body
) -> tuple[Body | None, Finish]:
    names: list[str] = body["group_ids"]
    allowed = [g for g in names if gate.allows(_DESCRIBE, _GROUP, g)]
    denied = [
        {
            "error_code": E.GROUP_AUTHORIZATION_FAILED,
            "error_message": None,
            "group_id": g,
            "group_state": "",
            "group_epoch": -1,
            "assignment_epoch": -1,
            "assignor_name": "",
            "members": [],
        }
        for g in names
        if g not in allowed
    ]

    def finish(response: Body | None) -> Body:
        response = {"throttle_time_ms": 0, "groups": []} if response is None else response
        for group in response["groups"]:
            for member in group["members"]:
                for key in ("assignment", "target_assignment"):
                    member[key]["topic_partitions"] = [
                        tp
                        for tp in member[key]["topic_partitions"]
                        if gate.allows(_DESCRIBE, _TOPIC, tp["topic_name"], quiet=True)
                    ]
        response["groups"] = [*response["groups"], *denied]
        return response

    return ({**body, "group_ids": allowed} if allowed else None), finish


def offset_fetch_groups(gate: Gate, body: Body) -> tuple[Body | None, Finish]:
    """OffsetFetch v8+: DESCRIBE on each group; topics the principal may not DESCRIBE are
    left out of the answer."""
    groups: list[Body] = body["groups"]
    allowed = [g for g in groups if gate.allows(_DESCRIBE, _GROUP, g["group_id"])]
    denied = [
        {"group_id": g["group_id"], "topics": [], "error_code": E.GROUP_AUTHORIZATION_FAILED}
        for g in groups
        if g not in allowed
    ]

    def finish(response: Body | None) -> Body:
        response = {"throttle_time_ms": 0, "groups": []} if response is None else response
        for group in response["groups"]:
            group["topics"] = [
                t for t in group["topics"] if gate.allows(_DESCRIBE, _TOPIC, t["name"], quiet=True)
            ]
        response["groups"] = [*response["groups"], *denied]
        return response

    return ({**body, "groups": allowed} if allowed else None), finish
