"""Which handler serves each Kafka API, and the one door every request passes to reach it.

`HANDLERS` is the whole table, written out key by key from `messages.ApiKey`
(as `rustka.native.handlers` lists its ops): the handlers of
`rustka.kafka.handlers`, `rustka.kafka.group_handlers` and
`rustka.kafka.admin_handlers` in one place, so
what the front-end serves does not depend on which modules happen to have been
imported. The front-end advertises exactly these APIs (docs/kafka.md, "APIs
and versions"); adding one is its declaration in `rustka.kafka.messages`, its
handler, and its line here.

`dispatch` is where every decoded request goes before its handler runs, the
one place a check that concerns every request (authorization) belongs.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from twisted.internet import defer

from rustka.kafka import (
    acl_handlers,
    admin_handlers,
    consumer_group_handlers,
    group_handlers,
    handlers,
    sasl_handlers,
    share_group_handlers,
    telemetry_handlers,
    txn_handlers,
)
from rustka.kafka.authorization import GUARDS, unchanged
from rustka.kafka.context import Body, Handler, RequestContext
from rustka.kafka.messages import ApiKey

__all__ = ["HANDLERS", "dispatch"]

HANDLERS: Final[Mapping[int, Handler]] = MappingProxyType(
    {
        ApiKey.PRODUCE: handlers.produce,
        ApiKey.FETCH: handlers.fetch,
        ApiKey.LIST_OFFSETS: handlers.list_offsets,
        ApiKey.METADATA: handlers.metadata,
        ApiKey.OFFSET_COMMIT: group_handlers.offset_commit,
        ApiKey.OFFSET_FETCH: group_handlers.offset_fetch,
        ApiKey.FIND_COORDINATOR: group_handlers.find_coordinator,
        ApiKey.JOIN_GROUP: group_handlers.join_group,
        ApiKey.HEARTBEAT: group_handlers.heartbeat,
        ApiKey.LEAVE_GROUP: group_handlers.leave_group,
        ApiKey.SYNC_GROUP: group_handlers.sync_group,
        ApiKey.DESCRIBE_GROUPS: group_handlers.describe_groups,
        ApiKey.LIST_GROUPS: group_handlers.list_groups,
        ApiKey.API_VERSIONS: handlers.api_versions,
        ApiKey.CREATE_TOPICS: handlers.create_topics,
        ApiKey.DELETE_TOPICS: handlers.delete_topics,
        ApiKey.DELETE_RECORDS: admin_handlers.delete_records,
        ApiKey.INIT_PRODUCER_ID: handlers.init_producer_id,
        ApiKey.ADD_PARTITIONS_TO_TXN: txn_handlers.add_partitions_to_txn,
        ApiKey.ADD_OFFSETS_TO_TXN: txn_handlers.add_offsets_to_txn,
        ApiKey.END_TXN: txn_handlers.end_txn,
        ApiKey.TXN_OFFSET_COMMIT: txn_handlers.txn_offset_commit,
        ApiKey.DESCRIBE_TRANSACTIONS: txn_handlers.describe_transactions,
        ApiKey.LIST_TRANSACTIONS: txn_handlers.list_transactions,
        ApiKey.OFFSET_FOR_LEADER_EPOCH: admin_handlers.offset_for_leader_epoch,
        ApiKey.DESCRIBE_CONFIGS: handlers.describe_configs,
        ApiKey.DESCRIBE_LOG_DIRS: admin_handlers.describe_log_dirs,
        ApiKey.CREATE_PARTITIONS: handlers.create_partitions,
        ApiKey.DELETE_GROUPS: group_handlers.delete_groups,
        ApiKey.OFFSET_DELETE: group_handlers.offset_delete,
        ApiKey.CONSUMER_GROUP_HEARTBEAT: consumer_group_handlers.consumer_group_heartbeat,
        ApiKey.CONSUMER_GROUP_DESCRIBE: consumer_group_handlers.consumer_group_describe,
        ApiKey.DESCRIBE_CLUSTER: admin_handlers.describe_cluster,
        ApiKey.ALTER_CONFIGS: handlers.alter_configs,
        ApiKey.INCREMENTAL_ALTER_CONFIGS: handlers.incremental_alter_configs,
        ApiKey.SASL_HANDSHAKE: sasl_handlers.sasl_handshake,
        ApiKey.SASL_AUTHENTICATE: sasl_handlers.sasl_authenticate,
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: sasl_handlers.describe_user_scram_credentials,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: sasl_handlers.alter_user_scram_credentials,
        ApiKey.DESCRIBE_ACLS: acl_handlers.describe_acls,
        ApiKey.CREATE_ACLS: acl_handlers.create_acls,
        ApiKey.DELETE_ACLS: acl_handlers.delete_acls,
        ApiKey.SHARE_GROUP_HEARTBEAT: share_group_handlers.share_group_heartbeat,
        ApiKey.SHARE_GROUP_DESCRIBE: share_group_handlers.share_group_describe,
        ApiKey.SHARE_FETCH: share_group_handlers.share_fetch,
        ApiKey.SHARE_ACKNOWLEDGE: share_group_handlers.share_acknowledge,
        ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: telemetry_handlers.get_telemetry_subscriptions,
        ApiKey.PUSH_TELEMETRY: telemetry_handlers.push_telemetry,
    }
)
"""API key -> its handler, for every API `rustka.kafka.messages` declares."""


def dispatch(
    handler: Handler, ctx: RequestContext, body: Body
) -> Body | defer.Deferred[Body | None] | None:
    """Run ``handler`` (the table's entry for ``ctx.header.api_key``) on a decoded request,
    on the part of it the connection's principal is allowed (`rustka.kafka.authorization`),
    then decide what an acks=0 Produce's client hears.

    The order is Kafka's request handler's: the denied partitions are merged into
    the handler's answer first, so the acks=0 rule sees every failure of the request
    whichever part of the broker refused it.
    """
    result = _authorized(handler, ctx, body)
    if ctx.header.api_key == ApiKey.PRODUCE and body.get("acks") == 0:
        if isinstance(result, defer.Deferred):
            return result.addCallback(_unanswered, ctx)
        return _unanswered(result, ctx)
    return result


def _authorized(
    handler: Handler, ctx: RequestContext, body: Body
) -> Body | defer.Deferred[Body | None] | None:
    version = ctx.header.api_version
    access = ctx.factory.broker.access
    if access.authorizer is None:
        return handler(ctx, version, body)
    gate = access.gate(ctx.principal, _peer_host(ctx))
    admitted, finish = GUARDS[ctx.header.api_key](ctx, gate, version, body)
    if admitted is None:
        return finish(None)
    result = handler(ctx, version, admitted)
    if finish is unchanged or result is None:
        return result
    if isinstance(result, defer.Deferred):
        return result.addCallback(finish)
    return finish(result)


def _unanswered(response: Body | None, ctx: RequestContext) -> None:
    """An acks=0 Produce is never answered; if any partition of it failed, Kafka hangs
    up instead (docs/kafka.md, "Produce"): the producer has no answer to read the error
    from, and reconnecting makes it refresh its metadata."""
    failed = [
        f"{t['name']}[{p['index']}] error {p['error_code']}"
        for t in (response or {}).get("responses", ())
        for p in t["partition_responses"]
        if p.get("error_code")
    ]
    if failed:
        ctx.connection.close_after_answers("acks=0 Produce failed: " + ", ".join(failed[:3]))
    return None


def _peer_host(ctx: RequestContext) -> str:
    """The client's address as host ACLs name it; a UNIX socket's peer is "localhost"."""
    return getattr(ctx.connection.transport.getPeer(), "host", "localhost")


_unguarded = set(HANDLERS) - set(GUARDS)
if _unguarded:
    raise RuntimeError(f"Kafka APIs without an authorization guard: {sorted(_unguarded)}")
