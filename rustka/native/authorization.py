"""What each native request must be allowed (docs/protocol.md, "Authorization").

The native twin of `rustka.kafka.authorization`, with Kafka's operations and
resources so that one set of ACLs means the same on both protocols: a
Produce needs WRITE on its topic whichever protocol carries it. Native ops
name one resource each, so a rule either allows the request, refuses it
(the error names the operation and the resource: ``NotAuthorized``, code 20),
or, for the listings (Metadata and DescribeLogs of every topic, ListGroups),
allows it and leaves out of the answer what the principal may not describe.

`RULES` has one entry per request type the codec declares; the native server
refuses to start without one (`check_rules`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final, TypeAlias, get_args

from rustka.broker.access import Gate
from rustka.native import codec as p
from rustka.security.acl import CLUSTER_NAME, Operation, ResourceType

__all__ = ["RULES", "Decision", "Filter", "check_rules", "decide"]

Filter: TypeAlias = Callable[[Any], Any]
Decision: TypeAlias = "str | Filter | None"
"""None: allowed; a string: refused, and why; a function: allowed, answer filtered."""

Rule: TypeAlias = Callable[[Gate, Any], Decision]

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TXN_ID = ResourceType.TRANSACTIONAL_ID
Op = Operation


def _refusal(op: Operation, rtype: ResourceType, name: str) -> str:
    return f"not authorized: no ACL allows {op.name} on {rtype.name.lower()} {name!r}"


def _on_topic(op: Operation) -> Rule:
    def rule(gate: Gate, req: Any) -> Decision:
        if gate.allows(op, TOPIC, req.topic):
            return None
        return _refusal(op, TOPIC, req.topic)

    return rule


def _on_group_and_topic(group_op: Operation, topic_op: Operation) -> Rule:
    def rule(gate: Gate, req: Any) -> Decision:
        if not gate.allows(group_op, GROUP, req.group):
            return _refusal(group_op, GROUP, req.group)
        if not gate.allows(topic_op, TOPIC, req.topic):
            return _refusal(topic_op, TOPIC, req.topic)
        return None

    return rule


def _on_group(op: Operation) -> Rule:
    def rule(gate: Gate, req: Any) -> Decision:
        if gate.allows(op, GROUP, req.group):
            return None
        return _refusal(op, GROUP, req.group)

    return rule


def _open(gate: Gate, req: Any) -> Decision:
    return None


def _create(gate: Gate, req: Any) -> Decision:
    if gate.allows(Op.CREATE, CLUSTER, CLUSTER_NAME, quiet=True):
        return None
    return _on_topic(Op.CREATE)(gate, req)


def _topic_listing(
    gate: Gate, req: p.Metadata | p.DescribeLogs | p.DescribeStableOffsets
) -> Decision:
    """Named topics must each be describable; all topics lists only those that are."""
    for name in req.topics:
        if not gate.allows(Op.DESCRIBE, TOPIC, name):
            return _refusal(Op.DESCRIBE, TOPIC, name)
    if req.topics:
        return None

    def visible(response: Any) -> Any:
        if not isinstance(response, (p.MetadataResult, p.LogsDescribed, p.StableOffsets)):
            return response
        shown = tuple(
            t for t in response.topics if gate.allows(Op.DESCRIBE, TOPIC, t.name, quiet=True)
        )
        return response._replace(topics=shown)

    return visible


def _list_groups(gate: Gate, req: p.ListGroups) -> Decision:
    if gate.allows(Op.DESCRIBE, CLUSTER, CLUSTER_NAME, quiet=True):
        return None

    def visible(response: Any) -> Any:
        if not isinstance(response, p.Groups):
            return response
        shown = tuple(g for g in response.groups if gate.allows(Op.DESCRIBE, GROUP, g, quiet=True))
        return response._replace(groups=shown)

    return visible


def _describe_group(gate: Gate, req: p.DescribeGroup) -> Decision:
    if not gate.allows(Op.DESCRIBE, GROUP, req.group):
        return _refusal(Op.DESCRIBE, GROUP, req.group)

    def visible(response: Any) -> Any:
        if not isinstance(response, p.GroupOffsets):
            return response
        shown = tuple(
            o for o in response.offsets if gate.allows(Op.DESCRIBE, TOPIC, o.topic, quiet=True)
        )
        return response._replace(offsets=shown)

    return visible


def _on_cluster(op: Operation) -> Rule:
    def rule(gate: Gate, req: Any) -> Decision:
        if gate.allows(op, CLUSTER, CLUSTER_NAME):
            return None
        return _refusal(op, CLUSTER, CLUSTER_NAME)

    return rule


def _list_transactions(gate: Gate, req: p.ListTransactions) -> Decision:
    """Kafka's ListTransactions lists the ids the principal may DESCRIBE, refusing none."""

    def visible(response: Any) -> Any:
        if not isinstance(response, p.Transactions):
            return response
        shown = tuple(
            t
            for t in response.transactions
            if gate.allows(Op.DESCRIBE, TXN_ID, t.transactional_id, quiet=True)
        )
        return response._replace(transactions=shown)

    return visible


def _describe_transaction(gate: Gate, req: p.DescribeTransaction) -> Decision:
    if gate.allows(Op.DESCRIBE, TXN_ID, req.transactional_id):
        return None
    return _refusal(Op.DESCRIBE, TXN_ID, req.transactional_id)


def _abort_transaction(gate: Gate, req: p.AbortTransaction) -> Decision:
    """CLUSTER_ACTION on the cluster, what kafka-transactions.sh abort needs (its
    WriteTxnMarkers), or WRITE on the transactional id, with which a Kafka producer
    may already abort it by fencing (InitProducerId)."""
    if gate.allows(Op.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME, quiet=True):
        return None
    if gate.allows(Op.WRITE, TXN_ID, req.transactional_id):
        return None
    return (
        f"not authorized: no ACL allows CLUSTER_ACTION on cluster {CLUSTER_NAME!r} or "
        f"WRITE on transactional_id {req.transactional_id!r}"
    )


_BASE_RULES: dict[type, Rule] = {
    p.Produce: _on_topic(Op.WRITE),
    p.Fetch: _on_topic(Op.READ),
    p.Commit: _on_group_and_topic(Op.READ, Op.READ),
    p.OffsetFetch: _on_group_and_topic(Op.DESCRIBE, Op.DESCRIBE),
    p.Hello: _open,
    p.SaslAuthenticate: _open,
    p.SaslContinue: _open,
    p.ProduceBatch: _on_topic(Op.WRITE),
    p.FetchBatch: _on_topic(Op.READ),
    p.Metadata: _topic_listing,
    p.CreateTopic: _create,
    p.AlterTopic: _on_topic(Op.ALTER),
    p.ListGroups: _list_groups,
    p.DescribeGroup: _describe_group,
    p.DeleteTopic: _on_topic(Op.DELETE),
    p.DeleteRecords: _on_topic(Op.DELETE),
    p.DescribeLogs: _topic_listing,
    p.CreateTopicWithConfigs: _create,
    p.AlterTopicConfigs: _on_topic(Op.ALTER_CONFIGS),
    p.DescribeTopicConfigs: _on_topic(Op.DESCRIBE_CONFIGS),
    p.CreateAcls: _on_cluster(Op.ALTER),
    p.DescribeAcls: _on_cluster(Op.DESCRIBE),
    p.DeleteAcls: _on_cluster(Op.ALTER),
    p.ListTransactions: _list_transactions,
    p.DescribeTransaction: _describe_transaction,
    p.AbortTransaction: _abort_transaction,
    p.DescribeStableOffsets: _topic_listing,
    # Kafka's ShareFetch and ShareAcknowledge: READ on the group and the topic.
    p.ShareFetch: _on_group_and_topic(Op.READ, Op.READ),
    p.ShareAcknowledge: _on_group_and_topic(Op.READ, Op.READ),
    p.ShareLeave: _on_group(Op.READ),
    p.DescribeShareGroup: _on_group(Op.DESCRIBE),
    # As Kafka's AlterShareGroupOffsets (READ) and DeleteShareGroupOffsets (DELETE).
    p.AlterShareGroupOffsets: _on_group(Op.READ),
    p.DeleteShareGroupOffsets: _on_group(Op.DELETE),
}

RULES: Final[Mapping[type, Rule]] = MappingProxyType(_BASE_RULES)
"""Request type -> its rule."""


_BY_TOPIC: Final = frozenset({p.Produce, p.ProduceBatch, p.Fetch, p.FetchBatch})
"""Ops whose rule depends on the topic alone, their first field: an allowed one is
remembered by (op, topic) on the gate, so a pipeline of them is checked once."""


def decide(gate: Gate, request: Any) -> Decision:
    """The rule's decision for ``request`` (see the module docstring)."""
    kind = type(request)
    if kind in _BY_TOPIC:
        key = (kind, request[0])
        if key in gate.allowed:
            return None
        decision = RULES[kind](gate, request)
        if decision is None:
            gate.allowed.add(key)
        return decision
    return RULES[kind](gate, request)


def check_rules() -> None:
    """Every request type the codec declares has a rule (called at import)."""
    declared = set(get_args(p.Request))
    missing = declared - set(RULES)
    if missing:
        names = ", ".join(sorted(c.__name__ for c in missing))
        raise RuntimeError(f"native ops without an authorization rule: {names}")


check_rules()
