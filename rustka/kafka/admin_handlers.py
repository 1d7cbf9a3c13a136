"""Cluster-level admin APIs tools call (docs/kafka.md, "APIs and versions"): what a
single node answers for questions a cluster of brokers would split between them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from twisted.internet import defer
from twisted.python.failure import Failure

from rustka.kafka.cluster_map import ClusterMap
from rustka.kafka.context import Body, RequestContext, advertised_address, error_code
from rustka.kafka.errors import ErrorCode as E

# The only leader epoch a partition of a single node ever has (Metadata and Fetch say 0 too).
LEADER_EPOCH = 0
# DescribeCluster v1's endpoint type of the brokers' listeners (2 is the controllers').
BROKER_ENDPOINTS = 1

# -- DescribeCluster (60) ----------------------------------------------------------------


def describe_cluster(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body]:
    """A broker alone is its own controller and the only broker listed; in a cluster every
    live broker is listed (`rustka.kafka.cluster_map`) and the one asked answers as the
    controller (rustka has no controller quorum: the catalog plays its part)."""
    host, port = advertised_address(ctx)
    endpoint_type = body.get("endpoint_type", BROKER_ENDPOINTS)
    if endpoint_type != BROKER_ENDPOINTS:
        # Kafka's brokers answer this when asked for the controllers' listeners.
        return defer.succeed(
            {
                "throttle_time_ms": 0,
                "error_code": E.MISMATCHED_ENDPOINT_TYPE,
                "error_message": f"endpoint type {endpoint_type} is not served by a broker",
                "endpoint_type": endpoint_type,
                "cluster_id": "",
                "brokers": [],
            }
        )

    brokers = [
        {"broker_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
        for b in ClusterMap.of(ctx.broker, host, port).brokers()
    ]

    def answer(cluster_id: str) -> Body:
        return {
            "throttle_time_ms": 0,
            "error_code": 0,
            "error_message": None,
            "endpoint_type": BROKER_ENDPOINTS,
            "cluster_id": cluster_id,
            "controller_id": ctx.broker.node_id,
            "brokers": brokers,
        }

    return ctx.broker.cluster_id().addCallback(answer)


# -- DeleteRecords (21) ------------------------------------------------------------------


def delete_records(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body]:
    """Move each partition's log start (docs/kafka.md, "DeleteRecords"): the answer's low
    watermark is the log start afterwards, once it is durable. Partitions are independent,
    as in Kafka: one refused (unknown, past the high watermark, a compact-only topic)
    answers its error and the others still move. ``timeout_ms`` bounds Kafka's wait for
    followers; a single node has none to wait for."""
    broker = ctx.broker
    jobs: list[defer.Deferred[Body]] = []
    topics = []
    for topic in body["topics"]:
        name = topic["name"]
        partitions: list[Body] = []
        topics.append({"name": name, "partitions": partitions})
        for asked in topic["partitions"]:
            index = asked["partition_index"]
            place: Body = {"partition_index": index, "low_watermark": -1, "error_code": 0}
            partitions.append(place)
            d = broker.delete_records(name, index, asked["offset"])
            jobs.append(d.addCallbacks(_moved, _not_moved, (place,), None, (place, broker)))

    def answer(_: object) -> Body:
        return {"throttle_time_ms": 0, "topics": topics}

    return defer.gatherResults(jobs).addCallback(answer)


def _moved(low_watermark: int, place: Body) -> Body:
    place["low_watermark"] = low_watermark
    return place


def _not_moved(failure: Failure, place: Body, broker: Any) -> Body:
    place["error_code"] = error_code(broker.report_error(failure, "DeleteRecords"))
    return place


# -- OffsetForLeaderEpoch (23) -----------------------------------------------------------


def offset_for_leader_epoch(ctx: RequestContext, version: int, body: Body) -> Body:
    """Where each asked-for epoch ends: a partition here has one epoch, 0, that ends at
    the log's end; any other epoch is unknown to it (-1, -1), as Kafka's epoch cache
    answers for an epoch above its latest. A current leader epoch other than 0 (or -1,
    none) is fenced if lower and unknown if higher, as Kafka checks it."""
    topics = ctx.broker.topics
    answers = []
    for request in body["topics"]:
        name = request["topic"]
        topic = topics.get(name)
        partitions = []
        for asked in request["partitions"]:
            index = asked["partition"]
            answer: Body = {"error_code": 0, "partition": index, "leader_epoch": -1}
            current = asked.get("current_leader_epoch", -1)
            if topic is None or not 0 <= index < len(topic.partitions):
                answer["error_code"] = E.UNKNOWN_TOPIC_OR_PARTITION
            elif current != -1 and current != LEADER_EPOCH:
                answer["error_code"] = (
                    E.UNKNOWN_LEADER_EPOCH if current > LEADER_EPOCH else E.FENCED_LEADER_EPOCH
                )
            elif asked["leader_epoch"] == LEADER_EPOCH:
                answer["leader_epoch"] = LEADER_EPOCH
                answer["end_offset"] = topic.partitions[index].end_offset
            partitions.append(answer)
        answers.append({"topic": name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": answers}


# -- DescribeLogDirs (35) ----------------------------------------------------------------


def describe_log_dirs(ctx: RequestContext, version: int, body: Body) -> Body:
    """One log dir, the data dir, with the size of each partition asked for (all when
    ``topics`` is null); a partition that does not exist is left out, as Kafka leaves
    out those it does not host. There are no replicas, so every lag is 0."""
    broker = ctx.broker
    topics = broker.topics
    requested = body.get("topics")
    wanted: list[tuple[str, list[int] | None]]
    if requested is None:
        wanted = [(name, None) for name in sorted(topics)]
    else:
        wanted = [(t["topic"], list(t["partitions"])) for t in requested]
    described = []
    for name, indexes in wanted:
        topic = topics.get(name)
        if topic is None:
            continue
        count = len(topic.partitions)
        chosen = range(count) if indexes is None else [i for i in indexes if 0 <= i < count]
        partitions = [
            {
                "partition_index": i,
                "partition_size": topic.partitions[i].size_bytes,
                "offset_lag": 0,
                "is_future_key": False,
            }
            for i in chosen
        ]
        if partitions:
            described.append({"name": name, "partitions": partitions})
    log_dir = Path(broker.config.data_dir).resolve()
    result: Body = {"error_code": 0, "log_dir": str(log_dir), "topics": described}
    if version >= 4:
        usage = shutil.disk_usage(log_dir)  # one statvfs: metadata, not disk reads
        result["total_bytes"], result["usable_bytes"] = usage.total, usage.free
    return {"throttle_time_ms": 0, "error_code": 0, "results": [result]}
