"""Kafka API handlers: each turns one decoded request into calls on the broker core.

A handler takes the request context, the API version and the decoded body (the
dict shape of `rustka.kafka.messages`) and returns the response body or a
Deferred of it; Produce answers in full even under acks=0, since whether that
producer hears nothing or is hung up on is `rustka.kafka.apis.dispatch`'s rule;
`rustka.kafka.context` defines what it is given. Handlers never touch storage
or the native protocol: the core is the only thing they call, so both
front-ends see the same topics, offsets and groups.

This module registers nothing: `rustka.kafka.apis` lists which handler serves
each API key, these and the group APIs' (`rustka.kafka.group_handlers`).
"""

from __future__ import annotations

import contextlib
import functools
import struct
from typing import Any

from twisted.internet import defer
from twisted.python.failure import Failure

from rustka import errors
from rustka.broker.core import APPEND, DELETE, SET, SUBTRACT
from rustka.config import SOURCE_BROKER, SOURCE_DEFAULT, SOURCE_TOPIC, ConfigEntry
from rustka.errors import InvalidBatch
from rustka.kafka import txn_handlers
from rustka.kafka.cluster_map import ClusterMap
from rustka.kafka.context import Body, RequestContext, advertised_address, error_code
from rustka.kafka.errors import ErrorCode as E
from rustka.kafka.topic_ids import names_by_id, topic_id
from rustka.names import INTERNAL_TOPICS
from rustka.record import legacy
from rustka.record.header import (
    ATTRIBUTES_LOW_AT,
    CODEC_MASK,
    LENGTH_AT,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_AT,
    MIN_BATCH_LENGTH,
    is_transactional_batch,
)
from rustka.record.legacy import is_legacy, up_convert

# Kafka's answer for "no such record": ListOffsets' timestamp and offset of -1.
_NONE = -1
_EARLIEST = -2
_LATEST = -1
# Config resource types (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs).
_TOPIC_RESOURCE = 2
_BROKER_RESOURCE = 4


def _message(failure: Failure) -> str:
    return str(failure.value) or type(failure.value).__name__


# -- ApiVersions (18) ------------------------------------------------------------


def api_versions(ctx: RequestContext, version: int, body: Body) -> Body:
    if version >= 3:
        name = body.get("client_software_name") or ""
        ver = body.get("client_software_version") or ""
        ctx.connection.software = (name, ver)
    return {
        "error_code": 0,
        "api_keys": [
            {"api_key": key, "min_version": lo, "max_version": hi}
            for key, lo, hi in ctx.factory.advertised_versions()
        ],
        "throttle_time_ms": 0,
    }


# -- Metadata (3) ----------------------------------------------------------------


def _partition_metadata(index: int, leader: int) -> Body:
    return {
        # A partition whose only broker is not alive has no leader (Kafka's answer).
        "error_code": E.LEADER_NOT_AVAILABLE if leader < 0 else 0,
        "partition_index": index,
        "leader_id": leader,
        "leader_epoch": 0,
        "replica_nodes": [leader] if leader >= 0 else [],
        "isr_nodes": [leader] if leader >= 0 else [],
        "offline_replicas": [],
    }


def _topic_metadata(name: str, leaders: list[int]) -> Body:
    return {
        "error_code": 0,
        "name": name,
        "topic_id": topic_id(name),
        "is_internal": name in INTERNAL_TOPICS,
        "partitions": [_partition_metadata(i, leader) for i, leader in enumerate(leaders)],
    }


def metadata(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body]:
    broker = ctx.broker
    requested = body.get("topics")
    names: list[str] | None
    unknown_ids: list[bytes] = []
    if requested is None or (version == 0 and not requested):
        names = None
    else:
        # v12 names a topic by its id alone (docs/kafka.md, "Consumer groups (KIP-848)").
        names = [t["name"] for t in requested if t.get("name") is not None]
        if len(names) < len(requested):
            by_id = names_by_id(broker.topics)
            for t in requested:
                if t.get("name") is None:
                    known = by_id.get(t["topic_id"])
                    if known is None:
                        unknown_ids.append(t["topic_id"])
                    else:
                        names.append(known)
    allow_create = body.get("allow_auto_topic_creation", True) if version >= 4 else True
    host, port = advertised_address(ctx)
    cluster = ClusterMap.of(broker, host, port)

    async def answer() -> Body:
        leaders = cluster.leaders(broker.topics_snapshot())
        topics: list[Body] = []
        for name in sorted(leaders) if names is None else names:
            found = leaders.get(name)
            if found is None and broker.cluster is not None and _valid_topic_name(name):
                # Created as a diskless topic on another broker a moment ago?
                discovered = await broker.discover_topic(name)
                if discovered is not None:
                    found = cluster.leaders([discovered])[name]
            if found is None and allow_create and broker.config.auto_create_topics:
                try:
                    topic = await broker.auto_create_topic(name)
                    found = cluster.leaders([topic])[name]
                except Exception as exc:
                    topics.append({"error_code": error_code(exc), "name": name, "partitions": []})
                    continue
            if found is None:
                code = E.UNKNOWN_TOPIC_OR_PARTITION
                if not _valid_topic_name(name):
                    code = E.INVALID_TOPIC_EXCEPTION
                topics.append({"error_code": code, "name": name, "partitions": []})
            else:
                topics.append(_topic_metadata(name, found))
        if names is not None:
            topics += [
                {"error_code": E.UNKNOWN_TOPIC_ID, "name": None, "topic_id": tid, "partitions": []}
                for tid in unknown_ids
            ]
        return {
            "throttle_time_ms": 0,
            "brokers": cluster.brokers(),
            "cluster_id": await ctx.broker.cluster_id(),
            "controller_id": broker.node_id,
            "topics": topics,
        }

    return defer.ensureDeferred(answer())


def _valid_topic_name(name: str) -> bool:
    from rustka.names import validate_topic

    try:
        validate_topic(name)
    except errors.RustkaError:
        return False
    return True


# -- Produce (0) -----------------------------------------------------------------

# The request-level checks Kafka makes before the log validator sees a partition's
# records (docs/kafka.md, "Produce validation, rule by rule") read only the first
# batch's header (`rustka.record.header`).
_BATCH_LENGTH = struct.Struct(">i")
_ZSTD = 4
# Produce v7 is the first that may carry zstd (KIP-110).
_FIRST_ZSTD_PRODUCE = 7
# Below these, requests and responses carry magic 0/1 message sets (`rustka.record.legacy`).
_FIRST_BATCH_PRODUCE = 3
_FIRST_BATCH_FETCH = 4


def produce(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body | None]:
    broker = ctx.broker
    acks = body["acks"]
    topic_data = body["topic_data"]
    # A transactional batch is checked against its producer's ongoing transaction by
    # the core (docs/kafka.md, "Transactions"); the id comes from the request.
    transactional_id = body.get("transactional_id")
    if transactional_id is None and any(
        is_transactional_batch(part["records"])
        for topic in topic_data
        for part in topic["partition_data"]
    ):
        # Kafka's KafkaApis: transactional records without a transactional id are not
        # authorized, and the whole request is refused.
        refused = [
            {
                "name": topic["name"],
                "partition_responses": [
                    _produce_error(
                        part["index"],
                        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                        "a transactional batch needs the request's transactional id",
                    )
                    for part in topic["partition_data"]
                ],
            }
            for topic in topic_data
        ]
        return _produce_answer(refused)
    jobs: list[defer.Deferred[Body]] = []
    topics_out: list[Body] = []
    # A Produce of one partition (a one-record producer's every request) may be
    # answered by the I/O thread that stored it (docs/performance.md, "Answers from
    # the I/O thread (issue 33)"); acks=0 is answered by nobody.
    alone = acks != 0 and len(topic_data) == 1 and len(topic_data[0]["partition_data"]) == 1
    for topic in topic_data:
        name = topic["name"]
        parts_out: list[Body] = []
        topics_out.append({"name": name, "partition_responses": parts_out})
        for part in topic["partition_data"]:
            index = part["index"]
            records = part["records"]
            if version < _FIRST_BATCH_PRODUCE and records is not None and is_legacy(records):
                try:
                    records = up_convert(records)
                except InvalidBatch as exc:
                    parts_out.append(_produce_error(index, error_code(exc), str(exc)))
                    continue
            refusal = _records_refusal(version, records)
            if refusal is not None:
                parts_out.append(_produce_error(index, *refusal))
                continue
            if acks not in (0, 1, -1):
                parts_out.append(_produce_error(index, E.INVALID_REQUIRED_ACKS, "acks"))
                continue
            d = broker.append(
                name,
                index,
                records,
                auto_create=True,
                transactional_id=transactional_id,
                early=functools.partial(_answer_early, ctx, name, index) if alone else None,
            )
            d.addCallbacks(_produced, _produce_failed, callbackArgs=(index,), errbackArgs=(index,))
            jobs.append(d)
            parts_out.append({"index": index})  # replaced when the append finishes
    if not jobs:
        return _produce_answer(topics_out)

    # Each partition's result is written back into its place in topics_out.
    places = [p for t in topics_out for p in t["partition_responses"] if len(p) == 1]

    def gathered(results: list[Body]) -> Body:
        for place, result in zip(places, results, strict=True):
            place.clear()
            place.update(result)
        return _produce_body(topics_out)

    if len(jobs) == 1:
        # One partition (a one-record producer's every request): its own Deferred is
        # the answer's, without a DeferredList around it.
        return jobs[0].addCallback(lambda result: gathered([result]))
    return defer.gatherResults(jobs, consumeErrors=True).addCallback(gathered)


def _records_refusal(version: int, records: Any) -> tuple[int, str] | None:
    """What Kafka's ProduceRequest.validateRecords refuses, as (error code, message).

    Only the first batch's header is read; every record is checked later, on the
    I/O pool, by the log validator (`accept_batches`).
    """
    if records is None or len(records) == 0:
        return E.INVALID_RECORD, "Produce needs one record batch or message set per partition"
    size = len(records)
    if size > MAGIC_AT and records[MAGIC_AT] != MAGIC:
        return E.INVALID_RECORD, f"magic {records[MAGIC_AT]}: Produce v3+ carries only magic 2"
    if (
        version < _FIRST_ZSTD_PRODUCE
        and size > ATTRIBUTES_LOW_AT
        and records[ATTRIBUTES_LOW_AT] & CODEC_MASK == _ZSTD
    ):
        return (
            E.UNSUPPORTED_COMPRESSION_TYPE,
            f"Produce v{version} may not carry zstd; v{_FIRST_ZSTD_PRODUCE}+ may",
        )
    if size >= LOG_OVERHEAD:
        (length,) = _BATCH_LENGTH.unpack_from(records, LENGTH_AT)
        # A length too short for a batch header is the validator's CORRUPT_MESSAGE.
        if length >= MIN_BATCH_LENGTH and size > length + LOG_OVERHEAD:
            return (
                E.INVALID_RECORD,
                f"Produce v3+ carries exactly one record batch per partition; "
                f"{size - length - LOG_OVERHEAD} bytes follow the first batch",
            )
    return None


def _answer_early(ctx: RequestContext, name: str, index: int, result: Any) -> None:
    """On the I/O thread that stored a one-partition Produce: its answer, to the
    connection, which sends it now if nothing is ahead of it (`Connection.answer_early`).
    The Deferred still fires on the reactor and answers it there otherwise."""
    body = _produce_body([{"name": name, "partition_responses": [_produced(result, index)]}])
    ctx.connection.answer_early(ctx.header, body)


def _produce_answer(topics: list[Body]) -> defer.Deferred[Body | None]:
    return defer.succeed(_produce_body(topics))


def _produce_body(topics: list[Body]) -> Body:
    return {"responses": topics, "throttle_time_ms": 0}


def _produce_error(index: int, code: int, message: str | None = None) -> Body:
    return {
        "index": index,
        "error_code": code,
        "base_offset": -1,
        "log_append_time_ms": -1,
        "log_start_offset": -1,
        "record_errors": [],
        "error_message": message,
    }


def _produced(result: Any, index: int) -> Body:
    return {
        "index": index,
        "error_code": 0,
        "base_offset": result.base_offset,
        "log_append_time_ms": result.log_append_time,
        "log_start_offset": result.log_start_offset,
        "record_errors": [],
        "error_message": None,
    }


def _produce_failed(failure: Failure, index: int) -> Body:
    code = error_code(failure)
    if code == E.UNKNOWN_SERVER_ERROR:
        from twisted.logger import Logger

        Logger(namespace="rustka.kafka").failure("Kafka produce failed", failure)
    return _produce_error(index, code, _message(failure))


# -- InitProducerId (22) ---------------------------------------------------------


def init_producer_id(ctx: RequestContext, version: int, body: Body) -> Body | defer.Deferred[Body]:
    """A new producer id (idempotent producers: always a new one, whatever v3+ names, as
    Kafka gives), or the transactional id's ("Transactions"). v3+ names the producer's id
    and epoch both or neither; one without the other is INVALID_REQUEST, as Kafka answers."""
    if (body.get("producer_id", -1) == -1) != (body.get("producer_epoch", -1) == -1):
        return {
            "throttle_time_ms": 0,
            "error_code": E.INVALID_REQUEST,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    if body.get("transactional_id") is not None:
        return txn_handlers.init_transactional_producer(ctx, version, body)
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "producer_id": ctx.broker.new_producer_id(),
        "producer_epoch": 0,
    }


# -- Fetch (1) -------------------------------------------------------------------


def fetch(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body]:
    """Kafka's Fetch under the broker's fetch policy (`Broker.fetch`: the size cap,
    the long-poll for ``min_bytes`` within ``max_wait_ms``)."""
    broker = ctx.broker
    wanted = [
        (t["topic"], p["partition"], p["fetch_offset"], p["partition_max_bytes"])
        for t in body["topics"]
        for p in t["partitions"]
    ]
    # isolation_level 1 (read_committed): up to the last stable offset, with the
    # aborted transactions of what is returned (docs/kafka.md, "Transactions").
    committed = body.get("isolation_level", 0) == 1
    d = broker.fetch(
        wanted,
        body.get("max_bytes", 0x7FFFFFFF),
        min_bytes=body.get("min_bytes", 1),
        max_wait_ms=body.get("max_wait_ms", 0),
        committed=committed,
    )
    d.addCallback(_fetch_answer, broker, wanted)
    if version < _FIRST_BATCH_FETCH:
        d.addCallback(_as_message_sets, 0 if version < 2 else 1, wanted)
    return d


def _as_message_sets(answer: Body, magic: int, wanted: list[tuple[str, int, int, int]]) -> Body:
    """Fetch v0-3 carry magic 0 (v0-1) or magic 1 (v2-3) messages: the stored batches
    converted down, as Kafka 3.9 did (docs/kafka.md, "Old versions")."""
    start = {(t, p): offset for t, p, offset, _ in wanted}
    for topic in answer["responses"]:
        for part in topic["partitions"]:
            if part["records"]:
                first = start[(topic["topic"], part["partition_index"])]
                part["records"] = [legacy.down_convert(part["records"], magic, first)]
    return answer


def _fetch_answer(results: list[Any], broker: Any, wanted: list[tuple[str, int, int, int]]) -> Body:
    """The Fetch response: each partition's answer, grouped by topic in request order."""
    by_topic: dict[str, list[Body]] = {}
    order: list[str] = []
    for (topic, partition, _o, _m), result in zip(wanted, results, strict=True):
        if topic not in by_topic:
            by_topic[topic] = []
            order.append(topic)
        by_topic[topic].append(_fetched(broker, topic, partition, result))
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [{"topic": t, "partitions": by_topic[t]} for t in order],
    }


def _fetched(broker: Any, topic: str, partition: int, result: Any) -> Body:
    """One partition's answer: its batches, or its error with the bounds if it has any."""
    if isinstance(result, Exception):
        code = error_code(result)
        hw, start = -1, -1
        with contextlib.suppress(Exception):
            start, hw = broker.bounds(topic, partition)
        return _fetch_partition(partition, code, hw, start, [])
    chunks = list(result.chunks)
    part_body = _fetch_partition(
        partition, 0, result.high_watermark, result.log_start_offset, chunks
    )
    part_body["last_stable_offset"] = result.last_stable_offset
    aborted = result.aborted
    part_body["aborted_transactions"] = (
        None
        if aborted is None
        else [{"producer_id": pid, "first_offset": first} for pid, first in aborted]
    )
    return part_body


def _fetch_partition(
    index: int, code: int, high_watermark: int, log_start: int, chunks: list[Any]
) -> Body:
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": high_watermark,
        "last_stable_offset": high_watermark,
        "log_start_offset": log_start,
        "aborted_transactions": [],
        "preferred_read_replica": -1,
        "records": chunks,
    }


# -- ListOffsets (2) -------------------------------------------------------------


def list_offsets(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body]:
    broker = ctx.broker
    # read_committed (v2+): latest is the last stable offset.
    committed = body.get("isolation_level", 0) == 1

    async def answer() -> Body:
        topics: list[Body] = []
        for topic in body["topics"]:
            parts: list[Body] = []
            for part in topic["partitions"]:
                index = part["partition_index"]
                try:
                    found = await broker.list_offset(
                        topic["name"], index, part["timestamp"], committed=committed
                    )
                    offset, timestamp = (
                        (_NONE, _NONE) if found is None else (found.offset, found.timestamp)
                    )
                    parts.append(
                        {
                            "partition_index": index,
                            "error_code": 0,
                            "timestamp": timestamp,
                            "offset": offset,
                            "leader_epoch": 0,
                            # v0 (docs/kafka.md, "Old versions"): the one offset as a list.
                            "old_style_offsets": [offset][: part["max_num_offsets"]]
                            if offset >= 0
                            else [],
                        }
                    )
                except Exception as exc:
                    parts.append(
                        {
                            "partition_index": index,
                            "error_code": error_code(exc),
                            "timestamp": _NONE,
                            "offset": _NONE,
                            "leader_epoch": -1,
                            "old_style_offsets": [],
                        }
                    )
            topics.append({"name": topic["name"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    return defer.ensureDeferred(answer())


# -- CreateTopics (19), DeleteTopics (20) -----------------------------------------


def create_topics(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body]:
    """Kafka's CreateTopics: each topic with its partitions (or a replica assignment that
    names only this broker) and its own configs, checked and stored (docs/kafka.md,
    "Topic configs"); ``validate_only`` runs every check and creates nothing."""
    broker = ctx.broker
    validate_only = body.get("validate_only", False)
    names = [t["name"] for t in body["topics"]]

    async def one(topic: Body) -> Body:
        name = topic["name"]
        if names.count(name) > 1:
            return _created(name, E.INVALID_REQUEST, "Duplicate topic name.")
        count = topic.get("num_partitions", -1)
        replication = topic.get("replication_factor", -1)
        assignments = topic.get("assignments") or []
        if assignments:
            refusal = _assignment_refusal(assignments, count, replication, broker.node_id)
            if refusal is not None:
                return _created(name, *refusal)
            count = len(assignments)
        elif replication < -1 or replication == 0:
            return _created(
                name,
                E.INVALID_REPLICATION_FACTOR,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            )
        elif replication > 1:
            return _created(
                name,
                E.INVALID_REPLICATION_FACTOR,
                f"replication factor {replication}: this broker is a single node",
            )
        if count == -1:
            count = ctx.factory.config.default_partitions
        configs = {entry["name"]: entry["value"] for entry in topic.get("configs") or []}
        try:
            await broker.create_topic(name, count, configs, validate_only=validate_only)
        except Exception as exc:
            return _created(name, error_code(exc), str(exc))
        return _created(name, 0, None)

    async def answer() -> Body:
        results = [await one(t) for t in body["topics"]]
        return {"throttle_time_ms": 0, "topics": results}

    return defer.ensureDeferred(answer())


def _assignment_refusal(
    assignments: list[Body], count: int, replication: int, node_id: int
) -> tuple[int, str] | None:
    """What Kafka's controller refuses in a manual replica assignment, on a one-node cluster:
    each partition's replicas may only be this broker, once (replication factor 1)."""
    if replication != -1:
        return (
            E.INVALID_REQUEST,
            "A manual partition assignment was specified, but replication factor was not "
            "set to -1.",
        )
    if count != -1:
        return (
            E.INVALID_REQUEST,
            "A manual partition assignment was specified, but numPartitions was not set to -1.",
        )
    seen: set[int] = set()
    for assignment in assignments:
        index, replicas = assignment["partition_index"], list(assignment["broker_ids"])
        if index in seen:
            return (
                E.INVALID_REPLICA_ASSIGNMENT,
                f"Found multiple manual partition assignments for partition {index}",
            )
        seen.add(index)
        if not replicas:
            return (
                E.INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes an empty replica list.",
            )
        for broker_id in replicas:
            if broker_id != node_id:
                return (
                    E.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes broker {broker_id}, but no "
                    f"such broker is registered.",
                )
        if len(replicas) > 1:
            return (
                E.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes the broker {node_id} more than once.",
            )
    if seen != set(range(len(seen))):
        return (
            E.INVALID_REPLICA_ASSIGNMENT,
            "partitions should be a consecutive 0-based integer sequence",
        )
    return None


def _created(name: str, code: int, message: str | None) -> Body:
    return {"name": name, "error_code": code, "error_message": message}


# -- CreatePartitions (37) ---------------------------------------------------------


def create_partitions(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body]:
    broker = ctx.broker
    validate_only = body["validate_only"]

    def result(name: str, code: int, message: str | None) -> Body:
        return {"name": name, "error_code": code, "error_message": message}

    async def one(topic: Body) -> Body:
        name, count = topic["name"], topic["count"]
        known = broker.topics.get(name)
        if known is None:
            return result(name, E.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name} does not exist")
        current = len(known.partitions)
        if count <= current:
            return result(
                name,
                E.INVALID_PARTITIONS,
                f"topic {name} has {current} partitions; the new count must be higher, got {count}",
            )
        assignments = topic["assignments"]
        if assignments is not None:
            if len(assignments) != count - current:
                return result(
                    name,
                    E.INVALID_REPLICA_ASSIGNMENT,
                    f"{len(assignments)} assignments for {count - current} new partitions",
                )
            if any(a["broker_ids"] != [broker.node_id] for a in assignments):
                return result(
                    name,
                    E.INVALID_REPLICA_ASSIGNMENT,
                    f"this single node is broker {broker.node_id} only",
                )
        if validate_only:
            return result(name, 0, None)
        try:
            await broker.alter_topic(name, count)
        except Exception as exc:
            return result(name, error_code(exc), str(exc))
        return result(name, 0, None)

    async def answer() -> Body:
        return {"throttle_time_ms": 0, "results": [await one(t) for t in body["topics"]]}

    return defer.ensureDeferred(answer())


def delete_topics(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body]:
    broker = ctx.broker

    async def answer() -> Body:
        out: list[Body] = []
        for name in body["topic_names"]:
            try:
                await broker.delete_topic(name)
                out.append({"name": name, "error_code": 0})
            except Exception as exc:
                out.append({"name": name, "error_code": error_code(exc)})
        return {"throttle_time_ms": 0, "responses": out}

    return defer.ensureDeferred(answer())


# -- DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44) ------------

# Config sources of DescribeConfigs v1+ (Kafka's DescribeConfigsResponse.ConfigSource).
_SOURCES = {SOURCE_TOPIC: 1, SOURCE_BROKER: 4, SOURCE_DEFAULT: 5}
# IncrementalAlterConfigs' config_operation (Kafka's AlterConfigOp.OpType).
_OPERATIONS = {0: SET, 1: DELETE, 2: APPEND, 3: SUBTRACT}


def describe_configs(ctx: RequestContext, version: int, body: Body) -> Body:
    """Every config of a topic (its own, the broker's defaults and Kafka's) or of the broker,
    with its source and, when asked, its synonyms (docs/kafka.md, "Topic configs")."""
    broker = ctx.broker
    synonyms = version >= 1 and bool(body.get("include_synonyms"))
    results: list[Body] = []
    for res in body["resources"]:
        rtype, rname = res["resource_type"], res["resource_name"]
        keys = res.get("configuration_keys")
        try:
            if rtype == _TOPIC_RESOURCE:
                entries = broker.topic_configs(rname)
            elif rtype == _BROKER_RESOURCE:
                _check_broker_name(rname, broker.node_id)
                entries = broker.broker_configs()
            else:
                raise errors.InvalidRequest(f"Unsupported resource type: {rtype}")
        except Exception as exc:
            results.append(_config_result(rtype, rname, error_code(exc), str(exc), []))
            continue
        configs = [
            _config_entry(entry, version, synonyms)
            for entry in entries
            if keys is None or entry.name in keys
        ]
        results.append(_config_result(rtype, rname, 0, None, configs))
    return {"throttle_time_ms": 0, "results": results}


def _config_entry(entry: ConfigEntry, version: int, synonyms: bool) -> Body:
    return {
        "name": entry.name,
        "value": entry.value,
        "read_only": entry.read_only,
        "is_default": entry.source == SOURCE_DEFAULT,
        "config_source": _SOURCES[entry.source],
        "is_sensitive": False,
        "synonyms": [
            {"name": name, "value": value, "source": _SOURCES[source]}
            for name, value, source in entry.synonyms
        ]
        if synonyms
        else [],
    }


def _check_broker_name(name: str, node_id: int) -> None:
    """Kafka's rule for a broker resource: empty (the cluster default) or this broker's id."""
    if name == "":
        return
    if not name.lstrip("-").isdigit():
        raise errors.InvalidRequest(f"Broker id must be an integer, but it is: {name}")
    if int(name) != node_id:
        raise errors.InvalidRequest(
            f"Unexpected broker id, expected {node_id} or empty string, but received {name}"
        )


def _config_result(
    rtype: int, rname: str, code: int, message: str | None, configs: list[Body]
) -> Body:
    return {
        "error_code": code,
        "error_message": message,
        "resource_type": rtype,
        "resource_name": rname,
        "configs": configs,
    }


def alter_configs(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body]:
    """Kafka's AlterConfigs: a topic's own configs become exactly those given."""
    ops = [[(c["name"], SET, c["value"]) for c in res["configs"]] for res in body["resources"]]
    return _alter(ctx, body, ops, replace=True)


def incremental_alter_configs(
    ctx: RequestContext, version: int, body: Body
) -> defer.Deferred[Body]:
    """Kafka's IncrementalAlterConfigs: SET, DELETE, APPEND or SUBTRACT one config at a time."""
    ops = [
        [(c["name"], _OPERATIONS.get(c["config_operation"]), c["value"]) for c in res["configs"]]
        for res in body["resources"]
    ]
    return _alter(ctx, body, ops, replace=False)


def _alter(
    ctx: RequestContext, body: Body, ops: list[list[Any]], *, replace: bool
) -> defer.Deferred[Body]:
    broker = ctx.broker
    validate_only = bool(body.get("validate_only"))
    resources = body["resources"]
    ids = [(r["resource_type"], r["resource_name"]) for r in resources]

    async def one(res: Body, changes: list[Any]) -> Body:
        rtype, rname = res["resource_type"], res["resource_name"]

        def refused(code: int, message: str) -> Body:
            return _altered(rtype, rname, code, message)

        if ids.count((rtype, rname)) > 1:
            return refused(E.INVALID_REQUEST, "Each resource must appear at most once.")
        keys = [key for key, _, _ in changes]
        if len(set(keys)) != len(keys):
            return refused(E.INVALID_REQUEST, "Error due to duplicate config keys")
        for key, op, _ in changes:
            if op is None:
                return refused(E.INVALID_REQUEST, f"Unknown operations type for {key}")
        nulls = [key for key, op, value in changes if value is None and op != DELETE]
        if nulls:
            return refused(E.INVALID_REQUEST, f"Null value not supported for : {', '.join(nulls)}")
        try:
            if rtype == _TOPIC_RESOURCE:
                await broker.alter_topic_configs(
                    rname, changes, replace=replace, validate_only=validate_only
                )
            elif rtype == _BROKER_RESOURCE:
                _check_broker_name(rname, broker.node_id)
                if changes:
                    raise errors.InvalidRequest(
                        f"broker settings are read-only at run time ({', '.join(keys)}): "
                        f"set them in rustka.toml or as flags, and restart"
                    )
            else:
                raise errors.InvalidRequest(f"Unsupported resource type: {rtype}")
        except Exception as exc:
            return refused(error_code(exc), str(exc))
        return _altered(rtype, rname, 0, None)

    async def answer() -> Body:
        responses = [await one(res, c) for res, c in zip(resources, ops, strict=True)]
        return {"throttle_time_ms": 0, "responses": responses}

    return defer.ensureDeferred(answer())


def _altered(rtype: int, rname: str, code: int, message: str | None) -> Body:
    return {
        "error_code": code,
        "error_message": message,
        "resource_type": rtype,
        "resource_name": rname,
    }
