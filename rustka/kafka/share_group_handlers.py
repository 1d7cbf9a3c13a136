"""Share groups (KIP-932) on the Kafka front-end: ShareGroupHeartbeat, ShareGroupDescribe,
ShareFetch and ShareAcknowledge.

The handlers translate between Kafka's wire shapes (topics by id, rustka.kafka.topic_ids)
and the protocol-neutral share-group coordinator (`Broker.share_groups`,
rustka.broker.share_groups), and keep Kafka's share sessions: a member's ShareFetch with
epoch 0 opens a session holding the partitions it names, each later ShareFetch or
ShareAcknowledge must carry the session's next epoch (else
INVALID_SHARE_SESSION_EPOCH, or SHARE_SESSION_NOT_FOUND without a session), and epoch -1
closes it, releasing the member's acquired records. A ShareFetch acknowledges first, then
acquires from every partition of the session, up to ``max_records``, waiting up to
``max_wait_ms`` for records when there are none. docs/kafka.md, "Share groups
(KIP-932)", says what is served and what is not.

In a cluster only the broker holding the group-coordinator role serves share groups;
the others answer NOT_COORDINATOR (heartbeat, describe) or NOT_LEADER_OR_FOLLOWER
(fetch, acknowledge), a documented limit.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from twisted.internet import defer

from rustka.broker.share_groups import ShareGroupCoordinator
from rustka.kafka.context import Body, RequestContext
from rustka.kafka.errors import ErrorCode as E
from rustka.kafka.topic_ids import topic_id, topic_names

_INT32_MAX = 0x7FFFFFFF
# Kafka's ShareFetch error codes the general table lacks.
SHARE_SESSION_NOT_FOUND = 122
INVALID_SHARE_SESSION_EPOCH = 123

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class _Session:
    epoch: int
    partitions: list[TopicPartition] = field(default_factory=list)


class ShareSessions:
    """Share sessions of one coordinator, by (group, member)."""

    def __init__(self) -> None:
        self.sessions: dict[tuple[str, str], _Session] = {}


_SESSIONS: weakref.WeakKeyDictionary[ShareGroupCoordinator, ShareSessions] = (
    weakref.WeakKeyDictionary()
)


def sessions_of(coordinator: ShareGroupCoordinator) -> ShareSessions:
    found = _SESSIONS.get(coordinator)
    if found is None:
        found = _SESSIONS[coordinator] = ShareSessions()
    return found


def _names(ctx: RequestContext, ids: Sequence[bytes]) -> dict[bytes, str]:
    return topic_names(ids, [t.name for t in ctx.broker.topics_snapshot()])


def _elsewhere(ctx: RequestContext) -> bool:
    return not ctx.broker.coordinates_groups()


def _leader(ctx: RequestContext) -> Body:
    return {"leader_id": ctx.broker.node_id, "leader_epoch": 0}


# -- ShareGroupHeartbeat (76) ----------------------------------------------------------


def share_group_heartbeat(ctx: RequestContext, version: int, body: Body) -> Body:
    share = ctx.broker.share_groups
    if share is None or _elsewhere(ctx):
        code = E.COORDINATOR_NOT_AVAILABLE if share is None else E.NOT_COORDINATOR
        return {"error_code": code, "member_id": None, "member_epoch": -1}
    result = share.heartbeat(
        body["group_id"],
        body["member_id"],
        body["member_epoch"],
        body.get("subscribed_topic_names"),
        body.get("rack_id"),
    )
    if result.error:
        return {
            "error_code": result.error,
            "error_message": result.error_message,
            "member_id": result.member_id or None,
            "member_epoch": result.member_epoch,
        }
    assignment = result.assignment
    if assignment is None:
        # Unchanged: rustka sends it anyway (rustka.kafka.messages.share_groups says why).
        assignment = share.assignment_of(body["group_id"], result.member_id)
    return {
        "error_code": 0,
        "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval_ms": result.heartbeat_interval_ms,
        "assignment": {
            "topic_partitions": [
                {"topic_id": topic_id(t), "partitions": list(p)}
                for t, p in sorted(assignment.items())
            ]
        },
    }


# -- ShareGroupDescribe (77) -----------------------------------------------------------


def share_group_describe(ctx: RequestContext, version: int, body: Body) -> Body:
    share = ctx.broker.share_groups
    groups = []
    for group_id in body["group_ids"]:
        if share is None or _elsewhere(ctx):
            code = E.COORDINATOR_NOT_AVAILABLE if share is None else E.NOT_COORDINATOR
            groups.append({"error_code": code, "group_id": group_id})
            continue
        described = share.describe(group_id)
        if described.state == "Dead":
            groups.append(
                {
                    "error_code": E.GROUP_ID_NOT_FOUND,
                    "error_message": f"Group {group_id} not found.",
                    "group_id": group_id,
                    "group_state": "Dead",
                }
            )
            continue
        groups.append(
            {
                "error_code": 0,
                "group_id": group_id,
                "group_state": described.state,
                "group_epoch": described.group_epoch,
                "assignment_epoch": described.assignment_epoch,
                "assignor_name": "simple",
                "members": [
                    {
                        "member_id": m.member_id,
                        "rack_id": m.rack_id,
                        "member_epoch": m.member_epoch,
                        "client_id": "",
                        "client_host": "",
                        "subscribed_topic_names": list(m.subscribed_topics),
                        "assignment": {
                            "topic_partitions": [
                                {"topic_id": topic_id(t), "topic_name": t, "partitions": list(p)}
                                for t, p in sorted(m.assignment.items())
                            ]
                        },
                    }
                    for m in described.members
                ],
            }
        )
    return {"throttle_time_ms": 0, "groups": groups}


# -- sessions --------------------------------------------------------------------------


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= _INT32_MAX else epoch + 1


def _session_error(
    sessions: ShareSessions, key: tuple[str, str], epoch: int, *, fetch: bool
) -> int:
    """Check the request's session epoch (a ShareFetch may open a session with 0)."""
    if epoch == 0:
        return 0 if fetch else INVALID_SHARE_SESSION_EPOCH
    session = sessions.sessions.get(key)
    if session is None:
        return SHARE_SESSION_NOT_FOUND
    if epoch != -1 and epoch != session.epoch:
        return INVALID_SHARE_SESSION_EPOCH
    return 0


def _acks(
    topics: Sequence[Body], names: Mapping[bytes, str]
) -> list[tuple[bytes, int, list[tuple[int, int, list[int]]]]]:
    """``(topic_id, partition, batches)`` of each requested partition."""
    return [
        (
            t["topic_id"],
            p["partition_index"],
            [
                (b["first_offset"], b["last_offset"], list(b["acknowledge_types"]))
                for b in p.get("acknowledgement_batches") or ()
            ],
        )
        for t in topics
        for p in t["partitions"]
    ]


async def _acknowledge_all(
    share: ShareGroupCoordinator,
    group_id: str,
    member_id: str,
    acks: Sequence[tuple[bytes, int, list[tuple[int, int, list[int]]]]],
    names: Mapping[bytes, str],
) -> dict[tuple[bytes, int], int]:
    """Apply each partition's acknowledgements; its error code by (topic id, partition)."""
    answers: dict[tuple[bytes, int], int] = {}
    for tid, partition, batches in acks:
        name = names.get(tid)
        if name is None:
            answers[(tid, partition)] = E.UNKNOWN_TOPIC_ID
        elif batches:
            try:
                answers[(tid, partition)] = await share.acknowledge(
                    group_id, member_id, name, partition, batches
                )
            except Exception:
                answers[(tid, partition)] = E.KAFKA_STORAGE_ERROR
    return answers


# -- ShareFetch (78) -------------------------------------------------------------------


def share_fetch(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body]:
    return defer.ensureDeferred(_share_fetch(ctx, body))


async def _share_fetch(ctx: RequestContext, body: Body) -> Body:
    share = ctx.broker.share_groups
    group_id = body.get("group_id") or ""
    member_id = body.get("member_id") or ""
    epoch = body["share_session_epoch"]
    topics = body.get("topics") or []
    forgotten = body.get("forgotten_topics_data") or []
    ids = [t["topic_id"] for t in topics] + [t["topic_id"] for t in forgotten]
    names = _names(ctx, ids)
    answer: Body = {"throttle_time_ms": 0, "error_code": 0, "responses": []}
    if share is None:
        return {**answer, "error_code": E.COORDINATOR_NOT_AVAILABLE}
    answer["acquisition_lock_timeout_ms"] = share.settings.lock_duration_ms
    if _elsewhere(ctx):
        answer["responses"] = [
            {
                "topic_id": t["topic_id"],
                "partitions": [
                    {
                        "partition_index": p["partition_index"],
                        "error_code": E.NOT_LEADER_OR_FOLLOWER,
                        "current_leader": {"leader_id": -1, "leader_epoch": -1},
                        "records": b"",
                    }
                    for p in t["partitions"]
                ],
            }
            for t in topics
        ]
        return answer
    if not group_id or not member_id:
        return {**answer, "error_code": E.INVALID_REQUEST}
    sessions = sessions_of(share)
    key = (group_id, member_id)
    error = _session_error(sessions, key, epoch, fetch=True)
    acks = _acks(topics, names)
    if error == 0 and epoch == 0 and any(batches for _, _, batches in acks):
        error = E.INVALID_REQUEST
    if error:
        return {**answer, "error_code": error}
    # The session, as of this request.
    if epoch == 0:
        session = sessions.sessions[key] = _Session(1)
    else:
        session = sessions.sessions[key]
        session.epoch = _next_epoch(session.epoch)
    for t in forgotten:
        name = names.get(t["topic_id"])
        for p in t["partitions"]:
            if name is not None and (name, p) in session.partitions:
                session.partitions.remove((name, p))
    for t in topics:
        name = names.get(t["topic_id"])
        for p in t["partitions"]:
            tp = (name, p["partition_index"]) if name is not None else None
            if tp is not None and tp not in session.partitions:
                session.partitions.append(tp)
    ack_errors = await _acknowledge_all(share, group_id, member_id, acks, names)
    parts: dict[tuple[bytes, int], Body] = {}
    for tid, partition, _ in acks:
        parts[(tid, partition)] = {
            "partition_index": partition,
            "error_code": E.UNKNOWN_TOPIC_ID if tid not in names else 0,
            "acknowledge_error_code": ack_errors.get((tid, partition), 0),
            "current_leader": _leader(ctx),
            "records": b"",
            "acquired_records": [],
        }
    if epoch == -1:
        del sessions.sessions[key]
        await share.close_session(group_id, member_id)
    else:
        await _acquire_into(ctx, share, body, group_id, member_id, session, parts)
    by_topic: dict[bytes, list[Body]] = {}
    for (tid, _p), part in parts.items():
        by_topic.setdefault(tid, []).append(part)
    answer["responses"] = [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()]
    return answer


async def _acquire_into(
    ctx: RequestContext,
    share: ShareGroupCoordinator,
    body: Body,
    group_id: str,
    member_id: str,
    session: _Session,
    parts: dict[tuple[bytes, int], Body],
) -> None:
    """Acquire records of the session's partitions into ``parts``, long-polling once."""
    max_records = body.get("max_records", 500)
    if max_records <= 0 or not session.partitions:
        return
    max_bytes = max(1, body.get("max_bytes", _INT32_MAX))
    max_wait_ms = body.get("max_wait_ms", 0)
    for attempt in (0, 1):
        left, bytes_left, got = max_records, max_bytes, 0
        for name, partition in list(session.partitions):
            if left <= 0 or bytes_left <= 0:
                break
            result = await share.acquire(
                group_id, member_id, name, partition, left, min(bytes_left, 1 << 20)
            )
            tid = topic_id(name)
            if result.error:
                parts.setdefault((tid, partition), _empty_part(ctx, partition))["error_code"] = (
                    result.error
                )
                continue
            if not result.acquired:
                continue
            part = parts.setdefault((tid, partition), _empty_part(ctx, partition))
            part["records"] = list(result.chunks)
            part["acquired_records"] = [
                {"first_offset": r.first, "last_offset": r.last, "delivery_count": r.delivery_count}
                for r in result.acquired
            ]
            left -= result.records
            bytes_left -= sum(len(c) for c in result.chunks)
            got += result.records
        if got or attempt or max_wait_ms <= 0:
            return
        positions = []
        for name, partition in session.partitions:
            try:
                positions.append((name, partition, ctx.broker.bounds(name, partition)[1]))
            except Exception:
                continue
        await ctx.broker.wait_for_data(positions, max_wait_ms / 1000)


def _empty_part(ctx: RequestContext, partition: int) -> Body:
    return {
        "partition_index": partition,
        "error_code": 0,
        "acknowledge_error_code": 0,
        "current_leader": _leader(ctx),
        "records": b"",
        "acquired_records": [],
    }


# -- ShareAcknowledge (79) -------------------------------------------------------------


def share_acknowledge(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body]:
    return defer.ensureDeferred(_share_acknowledge(ctx, body))


async def _share_acknowledge(ctx: RequestContext, body: Body) -> Body:
    share = ctx.broker.share_groups
    group_id = body.get("group_id") or ""
    member_id = body.get("member_id") or ""
    epoch = body["share_session_epoch"]
    topics = body.get("topics") or []
    answer: Body = {"throttle_time_ms": 0, "error_code": 0, "responses": []}
    if share is None:
        return {**answer, "error_code": E.COORDINATOR_NOT_AVAILABLE}
    names = _names(ctx, [t["topic_id"] for t in topics])
    if _elsewhere(ctx):
        code = E.NOT_LEADER_OR_FOLLOWER
    elif not group_id or not member_id:
        return {**answer, "error_code": E.INVALID_REQUEST}
    else:
        sessions = sessions_of(share)
        key = (group_id, member_id)
        error = _session_error(sessions, key, epoch, fetch=False)
        if error:
            return {**answer, "error_code": error}
        code = 0
    acks = _acks(topics, names)
    errors: dict[tuple[bytes, int], int] = {}
    if code == 0:
        errors = await _acknowledge_all(share, group_id, member_id, acks, names)
        if epoch == -1:
            del sessions.sessions[key]
            await share.close_session(group_id, member_id)
        else:
            sessions.sessions[key].epoch = _next_epoch(epoch)
    by_topic: dict[bytes, list[Body]] = {}
    for tid, partition, _ in acks:
        by_topic.setdefault(tid, []).append(
            {
                "partition_index": partition,
                "error_code": code or errors.get((tid, partition), 0),
                "current_leader": _leader(ctx),
            }
        )
    answer["responses"] = [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()]
    return answer
