"""Kafka handlers for the group APIs: decoded bodies in, the core's coordinator called.

FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, ListGroups and DescribeGroups (versions as `rustka.kafka.messages`
declares them). The rules live in the core's coordinator (``broker.groups``, a
`rustka.broker.coordinator.GroupCoordinator`); this
module only translates between Kafka's request/response shapes and its plain
results, whose error fields already carry Kafka's codes. Offsets are read and
written through the broker core (``commit_offsets``/``committed_offsets``), the
same ``__offsets`` log the native protocol uses (docs/kafka.md, "Consumer groups").

This module registers nothing: `rustka.kafka.apis` lists which handler serves each
API key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twisted.internet import defer
from twisted.python.failure import Failure

from rustka.broker.coordinator import JoinRequest
from rustka.broker.groups import JoinResult, SyncResult
from rustka.errors import RustkaError
from rustka.kafka.context import Body, RequestContext, advertised_address, error_code
from rustka.kafka.errors import ErrorCode as E
from rustka.names import validate_group
from rustka.storage.offsets import METADATA_MAX_BYTES

_INT32_MIN = -(2**31)
_GROUP_KEY = 0
_NO_OFFSET = -1
# A partition with a transaction's offset still pending, under require_stable: the
# client retries until the transaction ends (Kafka sends no offset with it).
_UNSTABLE_OFFSET = {
    "committed_offset": _NO_OFFSET,
    "committed_leader_epoch": -1,
    "metadata": "",
    "error_code": E.UNSTABLE_OFFSET_COMMIT,
}


def _valid_group(group_id: str) -> bool:
    try:
        validate_group(group_id)
    except RustkaError:
        return False
    return True


def _client_host(ctx: RequestContext) -> str:
    """Kafka shows member hosts as ``/address``."""
    peer = ctx.connection.transport.getPeer()
    return f"/{getattr(peer, 'host', peer)}"


# -- FindCoordinator (10) --------------------------------------------------------


def find_coordinator(ctx: RequestContext, version: int, body: Body) -> Body:
    # A broker alone coordinates every group and, for key type 1, every transactional
    # id (docs/kafka.md, "Transactions"). In a cluster the groups' coordinator is the
    # holder of the coordinator role, wherever the request came (docs/diskless.md).
    host, port = advertised_address(ctx)
    node_id = ctx.broker.node_id
    cluster = ctx.broker.cluster
    if cluster is not None and body.get("key_type", 0) == 0:
        coordinator = cluster.coordinator()
        if coordinator is None:
            return {
                "throttle_time_ms": 0,
                "error_code": E.COORDINATOR_NOT_AVAILABLE,
                "error_message": "no broker of the cluster holds the group coordinator role yet",
                "node_id": -1,
                "host": "",
                "port": -1,
            }
        if coordinator.broker_id != node_id:
            node_id, host, port = coordinator.broker_id, coordinator.host, coordinator.port
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "node_id": node_id,
        "host": host,
        "port": port,
    }


def _elsewhere(ctx: RequestContext) -> bool:
    """In a cluster, group requests to a broker that does not hold the coordinator role
    are answered NOT_COORDINATOR: the client asks FindCoordinator again."""
    return not ctx.broker.coordinates_groups()


# -- JoinGroup (11) --------------------------------------------------------------


def join_group(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body]:
    if is_share_group(ctx, body["group_id"]):
        # One group id, one type (docs/kafka.md, "Share groups (KIP-932)"), as Kafka's
        # coordinator refuses a classic member of a share group.
        refused = JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, body["member_id"])
        return defer.succeed(_join_body(refused))
    request = JoinRequest(
        body["group_id"],
        body["member_id"],
        protocol_type=body["protocol_type"],
        protocols=[(p["name"], p["metadata"]) for p in body["protocols"]],
        session_timeout_ms=body["session_timeout_ms"],
        # v0 has no rebalance timeout: Kafka uses the session timeout for both (-1).
        rebalance_timeout_ms=body.get("rebalance_timeout_ms", -1) if version >= 1 else -1,
        instance_id=body.get("group_instance_id") if version >= 5 else None,
        client_id=ctx.header.client_id or "",
        client_host=_client_host(ctx),
        require_known_member_id=version >= 4,
    )
    d = ctx.broker.groups.join(request)
    return d.addCallback(_join_body)


def is_share_group(ctx: RequestContext, group_id: str) -> bool:
    """Whether ``group_id`` is a share group here (so not a classic or consumer one)."""
    shares = ctx.broker.share_groups
    return shares is not None and shares.is_share_group(group_id)


def _join_body(r: JoinResult) -> Body:
    return {
        "throttle_time_ms": 0,
        "error_code": r.error,
        "generation_id": r.generation_id,
        "protocol_name": r.protocol_name or "",
        "leader": r.leader_id,
        "member_id": r.member_id,
        "members": [
            {"member_id": m.member_id, "group_instance_id": m.instance_id, "metadata": m.metadata}
            for m in r.members
        ],
    }


# -- SyncGroup (14) --------------------------------------------------------------


def sync_group(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body]:
    d = ctx.broker.groups.sync(
        body["group_id"],
        body["generation_id"],
        body["member_id"],
        instance_id=body.get("group_instance_id") if version >= 3 else None,
        assignments=[(a["member_id"], a["assignment"]) for a in body["assignments"]],
    )
    return d.addCallback(_sync_body)


def _sync_body(r: SyncResult) -> Body:
    return {"throttle_time_ms": 0, "error_code": r.error, "assignment": r.assignment}


# -- Heartbeat (12) --------------------------------------------------------------


def heartbeat(ctx: RequestContext, version: int, body: Body) -> Body:
    code = ctx.broker.groups.heartbeat(
        body["group_id"],
        body["generation_id"],
        body["member_id"],
        body.get("group_instance_id") if version >= 3 else None,
    )
    return {"throttle_time_ms": 0, "error_code": code}


# -- LeaveGroup (13) -------------------------------------------------------------


def leave_group(ctx: RequestContext, version: int, body: Body) -> Body:
    gc = ctx.broker.groups
    if version < 3:
        result = gc.leave(body["group_id"], [(body["member_id"], None)])
        # One member: its error is the request's error (Kafka's v0-2 answer).
        code = result.error or (result.members[0].error if result.members else 0)
        return {"throttle_time_ms": 0, "error_code": code, "members": []}
    leaving = [(m["member_id"], m.get("group_instance_id")) for m in body["members"]]
    result = gc.leave(body["group_id"], leaving)
    return {
        "throttle_time_ms": 0,
        "error_code": result.error,
        "members": [
            {"member_id": m.member_id, "group_instance_id": m.instance_id, "error_code": m.error}
            for m in result.members
        ],
    }


# -- OffsetCommit (8) ------------------------------------------------------------


def offset_commit(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body]:
    group = body["group_id"]
    topics = body["topics"]

    def every_partition(code: int) -> Body:
        return _commit_body(topics, lambda _t, _p: code)

    if not _valid_group(group):
        return defer.succeed(every_partition(E.INVALID_GROUP_ID))
    fenced = ctx.broker.groups.check_commit(
        group,
        body.get("generation_id_or_member_epoch", -1),
        body.get("member_id", ""),
        body.get("group_instance_id") if version >= 7 else None,
        api_version=version,
    )
    if fenced is not None:
        return defer.succeed(every_partition(fenced))
    codes: dict[tuple[str, int], int] = {}
    offsets: dict[tuple[str, int], int] = {}
    metadata: dict[tuple[str, int], str] = {}
    for topic in topics:
        count = ctx.broker.partition_count(topic["name"])
        for part in topic["partitions"]:
            key = (topic["name"], part["partition_index"])
            if not 0 <= key[1] < count:
                codes[key] = E.UNKNOWN_TOPIC_OR_PARTITION
            elif part["committed_offset"] < 0:
                codes[key] = E.INVALID_COMMIT_OFFSET_SIZE
            elif len((part["committed_metadata"] or "").encode()) > METADATA_MAX_BYTES:
                codes[key] = E.OFFSET_METADATA_TOO_LARGE
            else:
                offsets[key] = part["committed_offset"]
                # Kafka keeps a null metadata as "" and answers it so.
                metadata[key] = part["committed_metadata"] or ""
    if not offsets:
        return defer.succeed(_commit_body(topics, lambda t, p: codes[(t, p)]))

    def written(_: Any) -> Body:
        return _commit_body(topics, lambda t, p: codes.get((t, p), 0))

    def failed(failure: Failure) -> Body:
        code = error_code(failure)
        return _commit_body(topics, lambda t, p: codes.get((t, p), code))

    d = defer.maybeDeferred(ctx.broker.commit_offsets, group, offsets, metadata)
    return d.addCallbacks(written, failed)


def _commit_body(topics: list[Body], code_of: Any) -> Body:
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": t["name"],
                "partitions": [
                    {
                        "partition_index": p["partition_index"],
                        "error_code": code_of(t["name"], p["partition_index"]),
                    }
                    for p in t["partitions"]
                ],
            }
            for t in topics
        ],
    }


# -- OffsetFetch (9) -------------------------------------------------------------


def offset_fetch(ctx: RequestContext, version: int, body: Body) -> Body:
    if version >= 8:  # several groups, KIP-848's member checks (v9)
        return _offset_fetch_groups(ctx, version, body)
    group = body["group_id"]
    requested = body.get("topics")
    if not _valid_group(group):
        return {"throttle_time_ms": 0, "topics": [], "error_code": E.INVALID_GROUP_ID}
    if _elsewhere(ctx):
        return {
            "throttle_time_ms": 0,
            "topics": [
                {
                    "name": t["name"],
                    "partitions": [
                        {
                            "partition_index": index,
                            "committed_offset": _NO_OFFSET,
                            "committed_leader_epoch": -1,
                            "metadata": "",
                            "error_code": E.NOT_COORDINATOR,
                        }
                        for index in t["partition_indexes"]
                    ],
                }
                for t in requested or ()
            ],
            "error_code": E.NOT_COORDINATOR,
        }
    committed: Mapping[tuple[str, int], int] = ctx.broker.committed_offsets(group)
    metadata = ctx.broker.committed_metadata(group)
    unstable = ctx.broker.transactions.pending_offsets(group) if body.get("require_stable") else ()
    wanted: dict[str, list[int]] = {}
    if requested is None:  # v2+: every partition the group committed
        for topic, partition in sorted(committed):
            wanted.setdefault(topic, []).append(partition)
    else:
        for t in requested:
            wanted.setdefault(t["name"], []).extend(t["partition_indexes"])
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": name,
                "partitions": [
                    _UNSTABLE_OFFSET | {"partition_index": index}
                    if (name, index) in unstable
                    else {
                        "partition_index": index,
                        "committed_offset": committed.get((name, index), _NO_OFFSET),
                        "committed_leader_epoch": -1,
                        "metadata": metadata.get((name, index), ""),
                        "error_code": 0,
                    }
                    for index in indexes
                ],
            }
            for name, indexes in wanted.items()
        ],
        "error_code": 0,
    }


def _offset_fetch_groups(ctx: RequestContext, version: int, body: Body) -> Body:
    """OffsetFetch v8+: each group answered as v7 answers one; v9 first checks a
    consumer group's member and epoch (docs/kafka.md, "Consumer groups (KIP-848)")."""
    consumer = ctx.broker.groups.consumer
    answered = []
    for group in body["groups"]:
        group_id = group["group_id"]
        if version >= 9 and group_id in consumer.groups and not _elsewhere(ctx):
            code = consumer.check_fetch(
                group_id, group.get("member_id"), group.get("member_epoch", -1)
            )
            if code:
                answered.append({"group_id": group_id, "topics": [], "error_code": code})
                continue
        one = offset_fetch(
            ctx,
            7,
            {
                "group_id": group_id,
                "topics": group["topics"],
                "require_stable": body.get("require_stable", False),
            },
        )
        answered.append(
            {"group_id": group_id, "topics": one["topics"], "error_code": one["error_code"]}
        )
    return {"throttle_time_ms": 0, "groups": answered}


# -- DeleteGroups (42) / OffsetDelete (47) --------------------------------------


def delete_groups(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body]:
    broker = ctx.broker

    async def one(group: str) -> Body:
        if not _valid_group(group):
            return {"group_id": group, "error_code": E.INVALID_GROUP_ID}
        if _elsewhere(ctx):
            return {"group_id": group, "error_code": E.NOT_COORDINATOR}
        refused = broker.groups.deletion_refused(group)
        if refused is not None:
            return {"group_id": group, "error_code": refused}
        try:
            await broker.delete_offsets(group)
        except Exception as exc:
            return {"group_id": group, "error_code": error_code(exc)}
        broker.groups.forget(group)
        return {"group_id": group, "error_code": 0}

    async def answer() -> Body:
        return {"throttle_time_ms": 0, "results": [await one(g) for g in body["groups_names"]]}

    return defer.ensureDeferred(answer())


def offset_delete(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body]:
    broker = ctx.broker
    group = body["group_id"]
    wanted = [(t["name"], p["partition_index"]) for t in body["topics"] for p in t["partitions"]]

    def answer(top: int, code_of: Any) -> Body:
        return {
            "error_code": top,
            "throttle_time_ms": 0,
            "topics": [
                {
                    "name": t["name"],
                    "partitions": [
                        {
                            "partition_index": p["partition_index"],
                            "error_code": code_of(t["name"], p["partition_index"]),
                        }
                        for p in t["partitions"]
                    ],
                }
                for t in body["topics"]
            ],
        }

    if not _valid_group(group):
        return defer.succeed(answer(E.INVALID_GROUP_ID, lambda _t, _p: 0))
    if _elsewhere(ctx):
        return defer.succeed(answer(E.NOT_COORDINATOR, lambda _t, _p: 0))
    refused = broker.groups.deletion_refused(group)
    if refused == E.GROUP_ID_NOT_FOUND:
        return defer.succeed(answer(refused, lambda _t, _p: 0))
    if refused is not None:
        # Kafka refuses only the topics the members subscribe to; the broker does not read
        # subscriptions, so while members exist every partition is refused.
        return defer.succeed(answer(0, lambda _t, _p: E.GROUP_SUBSCRIBED_TO_TOPIC))
    known = broker.topics
    unknown = {(t, p) for t, p in wanted if t not in known or not 0 <= p < len(known[t].partitions)}
    d = defer.maybeDeferred(broker.delete_offsets, group, [k for k in wanted if k not in unknown])
    d.addCallback(
        lambda _: answer(0, lambda t, p: E.UNKNOWN_TOPIC_OR_PARTITION if (t, p) in unknown else 0)
    )
    return d.addErrback(lambda failure: answer(error_code(failure), lambda _t, _p: 0))


# -- ListGroups (16) / DescribeGroups (15) ---------------------------------------


def list_groups(ctx: RequestContext, version: int, body: Body) -> Body:
    # v4's states_filter, matched without regard to case as Kafka's coordinator does;
    # an empty filter (and every older version) lists every state.
    wanted = {state.lower() for state in body.get("states_filter") or ()}
    # v5's types_filter ("classic", "consumer"), also without regard to case.
    types = {kind.lower() for kind in body.get("types_filter") or ()}
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "groups": [
            {
                "group_id": group,
                "protocol_type": protocol_type,
                "group_state": state,
                "group_type": kind,
            }
            for group, protocol_type, state, kind in _typed_groups(ctx)
            if (not wanted or state.lower() in wanted) and (not types or kind in types)
        ],
    }


def _typed_groups(ctx: RequestContext) -> list[tuple[str, str, str, str]]:
    """Every group with its protocol type, state and type: the coordinator's classic
    and consumer groups, then the share groups ("Share groups (KIP-932)")."""
    groups = list(ctx.broker.groups.list_typed_groups())
    shares = ctx.broker.share_groups
    if shares is not None:
        groups += [(g, "share", state, "share") for g, state in shares.list_groups()]
    return groups


def describe_groups(ctx: RequestContext, version: int, body: Body) -> Body:
    gc = ctx.broker.groups
    groups = []
    for group_id in body["groups"]:
        if not _valid_group(group_id):
            groups.append(_group_error(group_id, E.INVALID_GROUP_ID))
            continue
        if _elsewhere(ctx):
            groups.append(_group_error(group_id, E.NOT_COORDINATOR))
            continue
        desc = gc.describe(group_id)
        groups.append(
            {
                "error_code": 0,
                "group_id": group_id,
                "group_state": desc.state,
                "protocol_type": desc.protocol_type,
                "protocol_data": desc.protocol,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in desc.members
                ],
                "authorized_operations": _INT32_MIN,
            }
        )
    return {"throttle_time_ms": 0, "groups": groups}


def _group_error(group_id: str, code: int) -> Body:
    return {
        "error_code": code,
        "group_id": group_id,
        "group_state": "",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
        "authorized_operations": _INT32_MIN,
    }
