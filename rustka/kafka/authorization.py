"""What each Kafka request must be allowed, and how it is cut down to what is.

`GUARDS` has one entry per API `rustka.kafka.apis.HANDLERS` serves, written
from Kafka's "Operations and resources on protocols" table (docs/security.md,
"What each request needs"). A guard looks at a decoded request with the
request's `Gate` and returns the request the handler may serve (the allowed
topics, groups or resources only, or None when nothing is left) and a
function that adds to the handler's response an entry with Kafka's
authorization error for each denied part. So one denied topic of a Produce
gets TOPIC_AUTHORIZATION_FAILED while the others are written, as Kafka answers,
and the handlers never see what was denied.

Kafka's rule that a principal may not learn what it may not describe is kept:
a denied topic is refused the same way whether it exists or not, and listings
(Metadata of all topics, ListGroups, OffsetFetch of all partitions) leave out
quietly what the principal may not describe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, TypeAlias

from rustka.broker.access import Gate
from rustka.kafka import consumer_group_guards
from rustka.kafka.context import Body, RequestContext
from rustka.kafka.errors import ErrorCode as E
from rustka.kafka.messages import ApiKey
from rustka.kafka.topic_ids import names_by_id
from rustka.security.acl import CLUSTER_NAME, Operation, ResourceType

__all__ = ["GUARDS", "Finish", "Guard", "unchanged"]

Finish: TypeAlias = Callable[[Body | None], Body | None]
"""Adds the denied parts to the handler's response (None: the handler was not called)."""

Guard: TypeAlias = Callable[[RequestContext, Gate, int, Body], tuple[Body | None, Finish]]

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
CLUSTER, TXN = ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
READ, WRITE, CREATE = Operation.READ, Operation.WRITE, Operation.CREATE
DELETE, ALTER, DESCRIBE = Operation.DELETE, Operation.ALTER, Operation.DESCRIBE

_DENIED_MESSAGE: Final = "not authorized: no ACL allows {op} on {what} for this principal"


def unchanged(response: Body | None) -> Body | None:
    return response


def _fixed(response: Body) -> Finish:
    """The whole answer when nothing of the request is allowed."""
    return lambda _: response


def _open(ctx: RequestContext, gate: Gate, version: int, body: Body) -> tuple[Body, Finish]:
    """ApiVersions and the SASL exchange: needed before anyone is known."""
    return body, unchanged


def _message(op: Operation, what: str) -> str:
    return _DENIED_MESSAGE.format(op=op.name, what=what)


# -- topics with partitions: Produce, Fetch, ListOffsets, ... -------------------------


@dataclass(frozen=True, slots=True)
class _TopicPartitions:
    """Where a request lists topics and their partitions, and where its response
    answers each partition; ``denied`` are the answer's other fields."""

    request: str
    name: str
    partitions: str
    index: str
    response: str
    response_name: str
    response_partitions: str
    response_index: str
    denied: Mapping[str, Any]


def _named(denied: Mapping[str, Any]) -> _TopicPartitions:
    """The shape most APIs share: ``topics[name, partitions[partition_index]]`` both ways."""
    names = ("topics", "name", "partitions", "partition_index")
    return _TopicPartitions(*names, *names, denied)


def _split(
    gate: Gate,
    body: Body,
    op: Operation,
    shape: _TopicPartitions,
    code: int = E.TOPIC_AUTHORIZATION_FAILED,
    deny_all: bool = False,
) -> tuple[Body | None, Finish]:
    allowed: list[Body] = []
    denied: list[Body] = []
    for topic in body.get(shape.request) or ():
        if not deny_all and gate.allows(op, TOPIC, topic[shape.name]):
            allowed.append(topic)
        else:
            denied.append(topic)
    if not denied:
        return body, unchanged
    entries = [
        {
            shape.response_name: topic[shape.name],
            shape.response_partitions: [
                {shape.response_index: p[shape.index], "error_code": code, **shape.denied}
                for p in topic.get(shape.partitions) or ()
            ],
        }
        for topic in denied
    ]

    def finish(response: Body | None) -> Body:
        response = {} if response is None else response
        response[shape.response] = [*response.get(shape.response, ()), *entries]
        return response

    if not allowed:
        return None, finish
    return {**body, shape.request: allowed}, finish


_PRODUCE = _TopicPartitions(
    "topic_data",
    "name",
    "partition_data",
    "index",
    "responses",
    "name",
    "partition_responses",
    "index",
    {"base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1},
)
_FETCH = _TopicPartitions(
    "topics",
    "topic",
    "partitions",
    "partition",
    "responses",
    "topic",
    "partitions",
    "partition_index",
    {"high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1, "records": b""},
)
_LIST_OFFSETS = _named({"timestamp": -1, "offset": -1, "leader_epoch": -1})
_OFFSET_COMMIT = _named({})
_LEADER_EPOCH = _TopicPartitions(
    "topics",
    "topic",
    "partitions",
    "partition",
    "topics",
    "topic",
    "partitions",
    "partition",
    {"leader_epoch": -1, "end_offset": -1},
)
_OFFSET_DELETE = _named({})

_DELETE_RECORDS = _named({"low_watermark": -1})


def _produce(
    ctx: RequestContext, gate: Gate, version: int, body: Body
) -> tuple[Body | None, Finish]:
    transactional_id = body.get("transactional_id")
    denied_id = transactional_id is not None and not gate.allows(WRITE, TXN, transactional_id)
    code = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if denied_id else E.TOPIC_AUTHORIZATION_FAILED
    # Under acks=0 too the denied partitions join the answer: dispatch then sees the
    # failure and hangs up on the producer, as Kafka does.
    return _split(gate, body, WRITE, _PRODUCE, code, deny_all=denied_id)


def _each_topic(op: Operation, shape: _TopicPartitions) -> Guard:
    """Fetch, ListOffsets, OffsetForLeaderEpoch, DeleteRecords: ``op`` on each topic."""

    def guard(
        ctx: RequestContext, gate: Gate, version: int, body: Body
    ) -> tuple[Body | None, Finish]:
        return _split(gate, body, op, shape)

    return guard


def _offset_commit(
    ctx: RequestContext, gate: Gate, version: int, body: Body
) -> tuple[Body | None, Finish]:
    if not gate.allows(READ, GROUP, body["group_id"]):
        return _split(gate, body, READ, _OFFSET_COMMIT, E.GROUP_AUTHORIZATION_FAILED, True)
    return _split(gate, body, READ, _OFFSET_COMMIT)


def _offset_delete(
    ctx: RequestContext, gate: Gate, version: int, body: Body
) -> tuple[Body | None, Finish]:
    if not gate.allows(DELETE, GROUP, body["group_id"]):
        return None, _fixed({"error_code": E.GROUP_AUTHORIZATION_FAILED, "topics": []})
    admitted, finish = _split(gate, body, READ, _OFFSET_DELETE)
    if admitted is None:
        return None, lambda _: finish({"error_code": 0, "topics": []})
    return admitted, finish


def _offset_fetch(
    ctx: RequestContext, gate: Gate, version: int, body: Body
) -> tuple[Body | None, Finish]:
    if version >= 8:
        return consumer_group_guards.offset_fetch_groups(gate, body)
    requested = body.get("topics")
    if not gate.allows(DESCRIBE, GROUP, body["group_id"]):
        if version >= 2:
            return None, _fixed({"error_code": E.GROUP_AUTHORIZATION_FAILED, "topics": []})
        return None, _fixed(
            {
                "topics": [
                    {
                        "name": t["name"],
                        "partitions": [
                            _no_offset(p, E.GROUP_AUTHORIZATION_FAILED)
                            for p in t["partition_indexes"]
                        ],
                    }
                    for t in requested or ()
                ]
            }
        )
    if requested is None:  # every partition the group committed: leave out the hidden
        return body, _describable_topics(gate)
    allowed = [t for t in requested if gate.allows(DESCRIBE, TOPIC, t["name"])]
    if len(allowed) == len(requested):
        return body, unchanged
    denied = [
        {
            "name": t["name"],
            "partitions": [
                _no_offset(p, E.TOPIC_AUTHORIZATION_FAILED) for p in t["partition_indexes"]
            ],
        }
        for t in requested
        if t not in allowed
    ]

    def finish(response: Body | None) -> Body:
        response = {"error_code": 0} if response is None else response
        response["topics"] = [*response.get("topics", ()), *denied]
        return response

    return ({**body, "topics": allowed} if allowed else None), finish


def _describable_topics(gate: Gate) -> Finish:
    """For a listing of every topic (Metadata, OffsetFetch of all partitions): leave out,
    quietly, the topics the principal may not describe."""

    def visible(response: Body | None) -> Body | None:
        if response is not None:
            response["topics"] = [
                t
                for t in response.get("topics", ())
                if gate.allows(DESCRIBE, TOPIC, t["name"], quiet=True)
            ]
        return response

    return visible


def _no_offset(partition: int, code: int) -> Body:
    return {
        "partition_index": partition,
        "committed_offset": -1,
        "committed_leader_epoch": -1,
        "metadata": "",
        "error_code": code,
    }


# -- Metadata ---------------------------------------------------------------------------


def _metadata(
    ctx: RequestContext, gate: Gate, version: int, body: Body
) -> tuple[Body | None, Finish]:
    requested = body.get("topics")
    if requested is None or (version == 0 and not requested):
        return body, _describable_topics(gate)
    existing = {t.name for t in ctx.broker.topics_snapshot()}
    may_create = None
    allowed: list[Body] = []
    denied: list[Body] = []
    by_id = names_by_id(existing) if version >= 10 else {}
    for topic in requested:
        name = topic["name"]
        if name is None:  # v12 by topic id (unknown ids: the handler's UNKNOWN_TOPIC_ID)
            name = by_id.get(topic["topic_id"])
            if name is None:
                allowed.append(topic)
                continue
        ok = gate.allows(DESCRIBE, TOPIC, name)
        if ok and name not in existing and body.get("allow_auto_topic_creation", True):
            # Auto-creation needs CREATE too, on the cluster or on the topic.
            if may_create is None:
                may_create = gate.allows(CREATE, CLUSTER, CLUSTER_NAME, quiet=True)
            ok = may_create or gate.allows(CREATE, TOPIC, name)
        (allowed if ok else denied).append(topic)
    if not denied:
        return body, unchanged
    entries = [
        {"error_code": E.TOPIC_AUTHORIZATION_FAILED, "name": t["name"], "partitions": []}
        for t in denied
    ]

    def finish(response: Body | None) -> Body | None:
        if response is not None:
            response["topics"] = [*response.get("topics", ()), *entries]
        return response

    if not allowed:
        # Ask for no topic at all (an empty list, not "all"), keep the brokers and ids.
        return {**body, "topics": []}, finish
    return {**body, "topics": allowed}, finish


# -- groups -----------------------------------------------------------------------------


def _group_member(
    ctx: RequestContext, gate: Gate, version: int, body: Body
) -> tuple[Body | None, Finish]:
    """JoinGroup, Heartbeat, LeaveGroup and SyncGroup: READ on the group."""
    if gate.allows(READ, GROUP, body["group_id"]):
        return body, unchanged
    return None, _fixed({"error_code": E.GROUP_AUTHORIZATION_FAILED})


def _groups_each(field: str, op: Operation) -> Guard:
    """DescribeGroups and DeleteGroups: the op on each named group."""

    def guard(
        ctx: RequestContext, gate: Gate, version: int, body: Body
    ) -> tuple[Body | None, Finish]:
        names: list[str] = body.get(field) or []
        allowed = [g for g in names if gate.allows(op, GROUP, g)]
        if len(allowed) == len(names):
            return body, unchanged
        denied = [
            {"group_id": g, "error_code": E.GROUP_AUTHORIZATION_FAILED}
            for g in names
            if g not in allowed
        ]
        results = "groups" if field == "groups" else "results"

        def finish(response: Body | None) -> Body:
            response = {} if response is None else response
            response[results] = [*response.get(results, ()), *denied]
            return response

        return ({**body, field: allowed} if allowed else None), finish

    return guard


def _list_groups(
    ctx: RequestContext, gate: Gate, version: int, body: Body
) -> tuple[Body | None, Finish]:
    if gate.allows(DESCRIBE, CLUSTER, CLUSTER_NAME, quiet=True):
        return body, unchanged

    def visible(response: Body | None) -> Body | None:
        if response is not None:
            response["groups"] = [
                g
                for g in response.get("groups", ())
                if gate.allows(DESCRIBE, GROUP, g["group_id"], quiet=True)
            ]
        return response

    return body, visible


def _find_coordinator(
    ctx: RequestContext, gate: Gate, version: int, body: Body
) -> tuple[Body | None, Finish]:
    transaction = body.get("key_type", 0) == 1
    rtype, code = (
        (TXN, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if transaction
        else (
            GROUP,
            E.GROUP_AUTHORIZATION_FAILED,
        )
    )
    if gate.allows(DESCRIBE, rtype, body["key"]):
        return body, unchanged
    return None, _fixed(
        {
            "error_code": code,
            "error_message": _message(DESCRIBE, f"{rtype.name} {body['key']}"),
            "node_id": -1,
            "host": "",
            "port": -1,
        }
    )


# -- topic administration and configs ------------------------------------------------


def _topics_each(
    request: str, op: Operation, results: str, *, with_message: bool, cluster_op: bool = False
) -> Guard:
    """CreateTopics, DeleteTopics, CreatePartitions: the op on each topic (CreateTopics:
    or CREATE on the cluster, which allows every topic)."""

    def guard(
        ctx: RequestContext, gate: Gate, version: int, body: Body
    ) -> tuple[Body | None, Finish]:
        entries: list[Any] = body.get(request) or []
        if cluster_op and gate.allows(op, CLUSTER, CLUSTER_NAME, quiet=True):
            return body, unchanged

        def name_of(entry: Any) -> str:
            return entry if isinstance(entry, str) else entry["name"]

        allowed = [e for e in entries if gate.allows(op, TOPIC, name_of(e))]
        if len(allowed) == len(entries):
            return body, unchanged
        denied = [
            {
                "name": name_of(e),
                "error_code": E.TOPIC_AUTHORIZATION_FAILED,
                **({"error_message": _message(op, f"topic {name_of(e)}")} if with_message else {}),
            }
            for e in entries
            if e not in allowed
        ]

        def finish(response: Body | None) -> Body:
            response = {} if response is None else response
            response[results] = [*response.get(results, ()), *denied]
            return response

        return ({**body, request: allowed} if allowed else None), finish

    return guard


_TOPIC_RESOURCE, _BROKER_RESOURCE = 2, 4


def _configs(op: Operation, results: str) -> Guard:
    """DescribeConfigs (DESCRIBE_CONFIGS) and AlterConfigs/IncrementalAlterConfigs
    (ALTER_CONFIGS): a topic resource on the topic, the broker on the cluster."""

    def guard(
        ctx: RequestContext, gate: Gate, version: int, body: Body
    ) -> tuple[Body | None, Finish]:
        resources: list[Body] = body.get("resources") or []
        allowed: list[Body] = []
        denied: list[Body] = []
        for r in resources:
            kind, name = r["resource_type"], r["resource_name"]
            if kind == _TOPIC_RESOURCE:
                ok = gate.allows(op, TOPIC, name)
                code = E.TOPIC_AUTHORIZATION_FAILED
            elif kind == _BROKER_RESOURCE:
                ok = gate.allows(op, CLUSTER, CLUSTER_NAME)
                code = E.CLUSTER_AUTHORIZATION_FAILED
            else:  # the handler refuses types it does not know
                ok, code = True, 0
            if ok:
                allowed.append(r)
            else:
                denied.append(
                    {
                        "error_code": code,
                        "error_message": _message(op, f"resource {name!r}"),
                        "resource_type": kind,
                        "resource_name": name,
                        "configs": [],
                    }
                )
        if not denied:
            return body, unchanged

        def finish(response: Body | None) -> Body:
            response = {} if response is None else response
            response[results] = [*response.get(results, ()), *denied]
            return response

        return ({**body, "resources": allowed} if allowed else None), finish

    return guard


def _init_producer_id(
    ctx: RequestContext, gate: Gate, version: int, body: Body
) -> tuple[Body | None, Finish]:
    transactional_id = body.get("transactional_id")
    if transactional_id is not None:
        if gate.allows(WRITE, TXN, transactional_id):
            return body, unchanged
        code = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif gate.allows(Operation.IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME, quiet=True) or (
        gate.allows_any(WRITE, TOPIC)
    ):
        # Kafka 2.8+: an idempotent producer needs IDEMPOTENT_WRITE, or WRITE on some topic.
        return body, unchanged
    else:
        code = E.CLUSTER_AUTHORIZATION_FAILED
    return None, _fixed({"error_code": code, "producer_id": -1, "producer_epoch": -1})


def _transactional(denied: Body) -> Guard:
    """AddPartitionsToTxn's topics aside, Kafka's rule for every transactional request:
    WRITE on the TRANSACTIONAL_ID resource, else the whole request is refused."""

    def guard(
        ctx: RequestContext, gate: Gate, version: int, body: Body
    ) -> tuple[Body | None, Finish]:
        if gate.allows(WRITE, TXN, body["transactional_id"]):
            return body, unchanged
        return None, _fixed({"throttle_time_ms": 0, **denied})

    return guard


def _add_partitions_to_txn(
    ctx: RequestContext, gate: Gate, version: int, body: Body
) -> tuple[Body | None, Finish]:
    """WRITE on the transactional id, then WRITE on each topic (Kafka's
    handleAddPartitionsToTxnRequest: a denied topic fails the request, the other
    partitions being OPERATION_NOT_ATTEMPTED)."""
    topics = body.get("topics") or ()

    def every(code_of: Callable[[str], int]) -> Finish:
        return _fixed(
            {
                "throttle_time_ms": 0,
                "results": [
                    {
                        "name": t["name"],
                        "results": [
                            {"partition_index": p, "error_code": code_of(t["name"])}
                            for p in t["partitions"]
                        ],
                    }
                    for t in topics
                ],
            }
        )

    if not gate.allows(WRITE, TXN, body["transactional_id"]):
        return None, every(lambda _: E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    denied = {t["name"] for t in topics if not gate.allows(WRITE, TOPIC, t["name"])}
    if not denied:
        return body, unchanged
    return None, every(
        lambda name: E.TOPIC_AUTHORIZATION_FAILED if name in denied else E.OPERATION_NOT_ATTEMPTED
    )


def _add_offsets_to_txn(
    ctx: RequestContext, gate: Gate, version: int, body: Body
) -> tuple[Body | None, Finish]:
    """WRITE on the transactional id, then READ on the group (Kafka's order)."""
    if not gate.allows(WRITE, TXN, body["transactional_id"]):
        code = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not gate.allows(READ, GROUP, body["group_id"]):
        code = E.GROUP_AUTHORIZATION_FAILED
    else:
        return body, unchanged
    return None, _fixed({"throttle_time_ms": 0, "error_code": code})


def _txn_offset_commit(
    ctx: RequestContext, gate: Gate, version: int, body: Body
) -> tuple[Body | None, Finish]:
    """Kafka's handleTxnOffsetCommitRequest: WRITE on the transactional id (else
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED everywhere), READ on the group (else
    GROUP_AUTHORIZATION_FAILED everywhere), then READ on each topic."""
    if not gate.allows(WRITE, TXN, body["transactional_id"]):
        code = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not gate.allows(READ, GROUP, body["group_id"]):
        code = E.GROUP_AUTHORIZATION_FAILED
    else:
        return _split(gate, body, READ, _TXN_OFFSET_COMMIT)
    return _split(gate, body, READ, _TXN_OFFSET_COMMIT, code, deny_all=True)


_TXN_OFFSET_COMMIT = _named({})


def _describe_transactions(
    ctx: RequestContext, gate: Gate, version: int, body: Body
) -> tuple[Body | None, Finish]:
    """Kafka's handleDescribeTransactionsRequest: DESCRIBE on each transactional id (else
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED for it), and only the topics the principal may
    DESCRIBE in what is described."""
    ids = list(body.get("transactional_ids") or ())
    allowed = [tid for tid in ids if gate.allows(DESCRIBE, TXN, tid)]
    denied = [tid for tid in ids if tid not in allowed]

    def finish(response: Body | None) -> Body:
        response = (
            {"throttle_time_ms": 0, "transaction_states": []} if response is None else response
        )
        for state in response["transaction_states"]:
            state["topics"] = [
                t for t in state["topics"] if gate.allows(DESCRIBE, TOPIC, t["topic"], quiet=True)
            ]
        response["transaction_states"] += [
            {
                "error_code": E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "transactional_id": tid,
                "transaction_state": "",
                "transaction_timeout_ms": 0,
                "transaction_start_time_ms": -1,
                "producer_id": -1,
                "producer_epoch": -1,
                "topics": [],
            }
            for tid in denied
        ]
        return response

    return ({**body, "transactional_ids": allowed} if allowed else None), finish


def _list_transactions(
    ctx: RequestContext, gate: Gate, version: int, body: Body
) -> tuple[Body | None, Finish]:
    """Kafka lists only the transactional ids the principal may DESCRIBE (quietly)."""

    def visible(response: Body | None) -> Body | None:
        if response is not None:
            response["transaction_states"] = [
                s
                for s in response["transaction_states"]
                if gate.allows(DESCRIBE, TXN, s["transactional_id"], quiet=True)
            ]
        return response

    return body, visible


def _cluster(op: Operation, denied: Body) -> Guard:
    """A request about the whole broker: ``op`` on the cluster, else ``denied``."""

    def guard(
        ctx: RequestContext, gate: Gate, version: int, body: Body
    ) -> tuple[Body | None, Finish]:
        if gate.allows(op, CLUSTER, CLUSTER_NAME):
            return body, unchanged
        return None, _fixed(dict(denied))

    return guard


def _acl_changes(request: str, results: str, empty: Mapping[str, Any]) -> Guard:
    """CreateAcls and DeleteAcls: ALTER on the cluster, one error per entry if not."""

    def guard(
        ctx: RequestContext, gate: Gate, version: int, body: Body
    ) -> tuple[Body | None, Finish]:
        if gate.allows(ALTER, CLUSTER, CLUSTER_NAME):
            return body, unchanged
        error = {
            "error_code": E.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": _message(ALTER, "the cluster"),
            **empty,
        }
        return None, _fixed({results: [dict(error) for _ in body.get(request) or ()]})

    return guard


# -- share groups (KIP-932) -------------------------------------------------------------


def _share_groups_describe(
    ctx: RequestContext, gate: Gate, version: int, body: Body
) -> tuple[Body | None, Finish]:
    """ShareGroupDescribe: DESCRIBE on each group."""
    names: list[str] = body.get("group_ids") or []
    allowed = [g for g in names if gate.allows(DESCRIBE, GROUP, g)]
    denied = [
        {"group_id": g, "error_code": E.GROUP_AUTHORIZATION_FAILED}
        for g in names
        if g not in allowed
    ]

    def finish(response: Body | None) -> Body:
        response = {"groups": []} if response is None else response
        response["groups"] = [*response.get("groups", ()), *denied]
        return response

    return ({**body, "group_ids": allowed} if allowed else None), finish


def _share_read(
    ctx: RequestContext, gate: Gate, version: int, body: Body
) -> tuple[Body | None, Finish]:
    """ShareFetch and ShareAcknowledge: READ on the group and on every topic named (by
    id); any refusal refuses the whole request (docs/kafka.md, "Share groups (KIP-932)")."""
    from rustka.kafka.topic_ids import topic_names

    if not gate.allows(READ, GROUP, body.get("group_id") or ""):
        return None, _fixed({"error_code": E.GROUP_AUTHORIZATION_FAILED, "responses": []})
    ids = [t["topic_id"] for t in body.get("topics") or ()]
    names = topic_names(ids, [t.name for t in ctx.broker.topics_snapshot()])
    if all(gate.allows(READ, TOPIC, name) for name in names.values()):
        return body, unchanged
    return None, _fixed({"error_code": E.TOPIC_AUTHORIZATION_FAILED, "responses": []})


_CLUSTER_DENIED = {
    "error_code": E.CLUSTER_AUTHORIZATION_FAILED,
    "error_message": _message(DESCRIBE, "the cluster"),
}

GUARDS: Final[Mapping[int, Guard]] = MappingProxyType(
    {
        ApiKey.PRODUCE: _produce,
        ApiKey.FETCH: _each_topic(READ, _FETCH),
        ApiKey.LIST_OFFSETS: _each_topic(DESCRIBE, _LIST_OFFSETS),
        ApiKey.METADATA: _metadata,
        ApiKey.OFFSET_COMMIT: _offset_commit,
        ApiKey.OFFSET_FETCH: _offset_fetch,
        ApiKey.FIND_COORDINATOR: _find_coordinator,
        ApiKey.JOIN_GROUP: _group_member,
        ApiKey.HEARTBEAT: _group_member,
        ApiKey.LEAVE_GROUP: _group_member,
        ApiKey.SYNC_GROUP: _group_member,
        ApiKey.DESCRIBE_GROUPS: _groups_each("groups", DESCRIBE),
        ApiKey.LIST_GROUPS: _list_groups,
        ApiKey.API_VERSIONS: _open,
        ApiKey.SASL_HANDSHAKE: _open,
        ApiKey.SASL_AUTHENTICATE: _open,
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _cluster(
            DESCRIBE, {**_CLUSTER_DENIED, "results": []}
        ),
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _cluster(
            ALTER, {"throttle_time_ms": 0, "results": []}
        ),
        ApiKey.CREATE_TOPICS: _topics_each(
            "topics", CREATE, "topics", with_message=True, cluster_op=True
        ),
        ApiKey.DELETE_TOPICS: _topics_each("topic_names", DELETE, "responses", with_message=False),
        ApiKey.DELETE_RECORDS: _each_topic(DELETE, _DELETE_RECORDS),
        ApiKey.INIT_PRODUCER_ID: _init_producer_id,
        ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn,
        ApiKey.ADD_OFFSETS_TO_TXN: _add_offsets_to_txn,
        ApiKey.END_TXN: _transactional({"error_code": E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}),
        ApiKey.TXN_OFFSET_COMMIT: _txn_offset_commit,
        ApiKey.DESCRIBE_TRANSACTIONS: _describe_transactions,
        ApiKey.LIST_TRANSACTIONS: _list_transactions,
        ApiKey.OFFSET_FOR_LEADER_EPOCH: _each_topic(DESCRIBE, _LEADER_EPOCH),
        ApiKey.DESCRIBE_CONFIGS: _configs(Operation.DESCRIBE_CONFIGS, "results"),
        ApiKey.DESCRIBE_LOG_DIRS: _cluster(DESCRIBE, {**_CLUSTER_DENIED, "results": []}),
        ApiKey.CREATE_PARTITIONS: _topics_each("topics", ALTER, "results", with_message=True),
        ApiKey.DELETE_GROUPS: _groups_each("groups_names", DELETE),
        ApiKey.OFFSET_DELETE: _offset_delete,
        ApiKey.DESCRIBE_CLUSTER: _cluster(DESCRIBE, {**_CLUSTER_DENIED, "brokers": []}),
        ApiKey.ALTER_CONFIGS: _configs(Operation.ALTER_CONFIGS, "responses"),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: _configs(Operation.ALTER_CONFIGS, "responses"),
        ApiKey.DESCRIBE_ACLS: _cluster(DESCRIBE, {**_CLUSTER_DENIED, "resources": []}),
        ApiKey.CREATE_ACLS: _acl_changes("creations", "results", {}),
        ApiKey.DELETE_ACLS: _acl_changes("filters", "filter_results", {"matching_acls": []}),
        ApiKey.SHARE_GROUP_HEARTBEAT: _group_member,
        ApiKey.SHARE_GROUP_DESCRIBE: _share_groups_describe,
        ApiKey.SHARE_FETCH: _share_read,
        ApiKey.SHARE_ACKNOWLEDGE: _share_read,
        ApiKey.CONSUMER_GROUP_HEARTBEAT: consumer_group_guards.heartbeat,
        ApiKey.CONSUMER_GROUP_DESCRIBE: consumer_group_guards.describe,
        # KIP-714: any client may ask for its subscription and push its metrics.
        ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: _open,
        ApiKey.PUSH_TELEMETRY: _open,
    }
)
"""API key -> its guard; `rustka.kafka.apis` refuses to start without one per handler."""
