"""Kafka's transaction APIs: InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn and TxnOffsetCommit, each a call on the core's transaction
coordinator (rustka/broker/transactions.py; docs/kafka.md, "Transactions").

Errors follow Kafka's KafkaApis: a fenced producer is PRODUCER_FENCED, turned
into INVALID_PRODUCER_EPOCH for request versions older than the one that
introduced it (v2 of AddPartitionsToTxn, AddOffsetsToTxn, EndTxn; v4 of
InitProducerId; TxnOffsetCommit always reports INVALID_PRODUCER_EPOCH), since
older clients do not know the newer code. TxnOffsetCommit v3 (KIP-447) names the
consumer's generation and member, which the group coordinator checks first, as
Kafka's GroupCoordinator does for transactional commits.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer
from twisted.python.failure import Failure

from rustka import errors
from rustka.kafka.context import Body, RequestContext, error_code
from rustka.kafka.errors import ErrorCode as E

__all__ = [
    "add_offsets_to_txn",
    "add_partitions_to_txn",
    "describe_transactions",
    "end_txn",
    "init_transactional_producer",
    "list_transactions",
    "txn_offset_commit",
]

_FIRST_PRODUCER_FENCED = 2
#: InitProducerId learnt PRODUCER_FENCED later than the other transactional APIs.
_FIRST_INIT_PRODUCER_FENCED = 4


def _code(failure: Failure, version: int) -> int:
    if failure.check(errors.ProducerFenced):
        return E.PRODUCER_FENCED if version >= _FIRST_PRODUCER_FENCED else E.INVALID_PRODUCER_EPOCH
    code = error_code(failure)
    if code == E.UNKNOWN_SERVER_ERROR:
        from twisted.logger import Logger

        Logger(namespace="rustka.kafka").failure("transaction request failed", failure)
    return code


def init_transactional_producer(
    ctx: RequestContext, version: int, body: Body
) -> defer.Deferred[Body]:
    """InitProducerId with a transactional id: the producer id and a new epoch; from v3
    the producer's current id and epoch, if it names them, ask for its own epoch bump
    (KIP-360) rather than a fence."""
    pid, epoch = body.get("producer_id", -1), body.get("producer_epoch", -1)
    expected = None if pid == -1 else (pid, epoch)
    d = ctx.broker.transactions.init_producer_id(
        body["transactional_id"], body["transaction_timeout_ms"], expected
    )

    def done(ids: tuple[int, int]) -> Body:
        return {
            "throttle_time_ms": 0,
            "error_code": 0,
            "producer_id": ids[0],
            "producer_epoch": ids[1],
        }

    def failed(failure: Failure) -> Body:
        code = error_code(failure)
        if failure.check(errors.ProducerFenced) and version >= _FIRST_INIT_PRODUCER_FENCED:
            code = E.PRODUCER_FENCED
        return {"throttle_time_ms": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}

    return d.addCallbacks(done, failed)


def add_partitions_to_txn(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body]:
    """All partitions or none: an unknown one fails the request (the others are
    OPERATION_NOT_ATTEMPTED), as Kafka answers."""
    wanted = [(t["name"], p) for t in body["topics"] for p in t["partitions"]]
    unknown = [key for key in wanted if not ctx.broker.partition_exists(*key)]

    def answer(code_of: Any) -> Body:
        by_topic: dict[str, list[Body]] = {}
        for topic, partition in wanted:
            by_topic.setdefault(topic, []).append(
                {"partition_index": partition, "error_code": code_of((topic, partition))}
            )
        return {
            "throttle_time_ms": 0,
            "results": [{"name": t, "results": parts} for t, parts in by_topic.items()],
        }

    if unknown:
        missing = set(unknown)
        return defer.succeed(
            answer(
                lambda key: (
                    E.UNKNOWN_TOPIC_OR_PARTITION if key in missing else E.OPERATION_NOT_ATTEMPTED
                )
            )
        )
    d = ctx.broker.transactions.add_partitions(
        body["transactional_id"], body["producer_id"], body["producer_epoch"], wanted
    )

    def failed(failure: Failure) -> Body:
        code = _code(failure, version)
        return answer(lambda key: code)

    return d.addCallbacks(lambda _: answer(lambda key: 0), failed)


def add_offsets_to_txn(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body]:
    d = ctx.broker.transactions.add_offsets(
        body["transactional_id"], body["producer_id"], body["producer_epoch"], body["group_id"]
    )
    return d.addCallbacks(
        lambda _: {"throttle_time_ms": 0, "error_code": 0},
        lambda f: {"throttle_time_ms": 0, "error_code": _code(f, version)},
    )


def end_txn(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body]:
    d = ctx.broker.transactions.end_transaction(
        body["transactional_id"], body["producer_id"], body["producer_epoch"], body["committed"]
    )
    return d.addCallbacks(
        lambda _: {"throttle_time_ms": 0, "error_code": 0},
        lambda f: {"throttle_time_ms": 0, "error_code": _code(f, version)},
    )


def txn_offset_commit(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body]:
    """Stage the offsets in the transaction; OffsetFetch sees them once it commits."""
    offsets = {
        (t["name"], p["partition_index"]): (p["committed_offset"], p["committed_metadata"] or "")
        for t in body["topics"]
        for p in t["partitions"]
    }

    def answer(code: int) -> Body:
        return {
            "throttle_time_ms": 0,
            "topics": [
                {
                    "name": t["name"],
                    "partitions": [
                        {"partition_index": p["partition_index"], "error_code": code}
                        for p in t["partitions"]
                    ],
                }
                for t in body["topics"]
            ],
        }

    fenced = ctx.broker.groups.check_txn_commit(
        body["group_id"],
        body.get("generation_id", -1),
        body.get("member_id", ""),
        body.get("group_instance_id"),
    )
    if fenced is not None:
        return defer.succeed(answer(fenced))
    d = ctx.broker.transactions.txn_offset_commit(
        body["transactional_id"],
        body["producer_id"],
        body["producer_epoch"],
        body["group_id"],
        offsets,
    )

    def failed(failure: Failure) -> Body:
        code = _code(failure, version)
        if code == E.PRODUCER_FENCED:
            code = E.INVALID_PRODUCER_EPOCH
        return answer(code)

    return d.addCallbacks(lambda _: answer(0), failed)


# -- DescribeTransactions (65), ListTransactions (66): the admin views (KIP-664) --


def describe_transactions(ctx: RequestContext, version: int, body: Body) -> Body:
    """Each id's state, timeout, start, producer and partitions; unknown ids get
    TRANSACTIONAL_ID_NOT_FOUND, as Kafka answers."""
    coordinator = ctx.broker.transactions
    states: list[Body] = []
    for tid in body["transactional_ids"]:
        meta = coordinator.describe(tid)
        if meta is None:
            states.append(
                {
                    "error_code": E.TRANSACTIONAL_ID_NOT_FOUND,
                    "transactional_id": tid,
                    "transaction_state": "",
                    "transaction_timeout_ms": 0,
                    "transaction_start_time_ms": -1,
                    "producer_id": -1,
                    "producer_epoch": -1,
                    "topics": [],
                }
            )
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(meta.partitions):
            by_topic.setdefault(topic, []).append(partition)
        states.append(
            {
                "error_code": 0,
                "transactional_id": tid,
                "transaction_state": meta.state.kafka_name,
                "transaction_timeout_ms": meta.timeout_ms,
                "transaction_start_time_ms": meta.start_ms,
                "producer_id": meta.producer_id,
                "producer_epoch": meta.producer_epoch,
                "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            }
        )
    return {"throttle_time_ms": 0, "transaction_states": states}


def list_transactions(ctx: RequestContext, version: int, body: Body) -> Body:
    """Every transactional id the coordinator knows, filtered by state, producer id and
    (v1) how long its transaction has run; unknown state names are reported back."""
    from rustka.storage.txn_log import TxnState

    known = {state.kafka_name: state for state in TxnState}
    wanted = list(body.get("state_filters") or ())
    unknown = [name for name in wanted if name not in known]
    states = {known[name] for name in wanted if name in known}
    producers = set(body.get("producer_id_filters") or ())
    duration = body.get("duration_filter", -1)
    now = int(ctx.broker.reactor.seconds() * 1000)
    listed = []
    for meta in ctx.broker.transactions.transactions():
        if wanted and meta.state not in states:
            continue
        if producers and meta.producer_id not in producers:
            continue
        if duration >= 0 and (meta.start_ms < 0 or now - meta.start_ms <= duration):
            continue
        listed.append(
            {
                "transactional_id": meta.transactional_id,
                "producer_id": meta.producer_id,
                "transaction_state": meta.state.kafka_name,
            }
        )
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "unknown_state_filters": unknown,
        "transaction_states": listed,
    }
