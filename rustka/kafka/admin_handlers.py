"""Cluster-level admin APIs tools call (docs/kafka.md, "APIs and versions"): what a
single node answers for questions a cluster of brokers would split between them."""

from __future__ import annotations

from twisted.internet import defer

from rustka.kafka.context import Body, RequestContext, advertised_address
from rustka.kafka.errors import ErrorCode as E

# This node's id everywhere a Kafka API names a broker (Metadata, FindCoordinator).
NODE_ID = 0
# DescribeCluster v1's endpoint type of the brokers' listeners (2 is the controllers').
BROKER_ENDPOINTS = 1

# -- DescribeCluster (60) ----------------------------------------------------------------


def describe_cluster(ctx: RequestContext, version: int, body: Body) -> defer.Deferred[Body]:
    """The cluster is this node: it is its own controller and the only broker listed."""
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

    def answer(cluster_id: str) -> Body:
        return {
            "throttle_time_ms": 0,
            "error_code": 0,
            "error_message": None,
            "endpoint_type": BROKER_ENDPOINTS,
            "cluster_id": cluster_id,
            "controller_id": NODE_ID,
            "brokers": [{"broker_id": NODE_ID, "host": host, "port": port, "rack": None}],
        }

    return ctx.broker.cluster_id().addCallback(answer)
