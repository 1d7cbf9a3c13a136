"""Kafka's transaction APIs: InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn and TxnOffsetCommit, each a call on the core's transaction
coordinator (rustka/broker/transactions.py; docs/kafka.md, "Transactions").

Errors follow Kafka's KafkaApis: a fenced producer is PRODUCER_FENCED, turned
into INVALID_PRODUCER_EPOCH for request versions older than the one that
introduced it (v2 of AddPartitionsToTxn, AddOffsetsToTxn, EndTxn; v3 of
InitProducerId, which rustka does not serve; TxnOffsetCommit always reports
INVALID_PRODUCER_EPOCH), since older clients do not know the newer code.
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
    "end_txn",
    "init_transactional_producer",
    "txn_offset_commit",
]

_FIRST_PRODUCER_FENCED = 2


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
    """InitProducerId with a transactional id: the producer id and a new epoch."""
    d = ctx.broker.transactions.init_producer_id(
        body["transactional_id"], body["transaction_timeout_ms"]
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
        if failure.check(errors.ProducerFenced):
            code = E.INVALID_PRODUCER_EPOCH
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
