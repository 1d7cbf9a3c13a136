"""Client telemetry (KIP-714) on the Kafka front-end: GetTelemetrySubscriptions and
PushTelemetry.

The handlers turn a request into a call on the broker's `ClientTelemetry`
(rustka.broker.client_telemetry) with who sent it, and its refusals into Kafka's error
codes. The APIs are served, and advertised, only when client telemetry is configured
(client_telemetry_metrics), as Kafka advertises them only with a telemetry receiver.
Any client may use them, as in Kafka: no ACL guards them (docs/kafka.md, "Client
telemetry (KIP-714)").
"""

from __future__ import annotations

from rustka.broker.client_telemetry import ClientInfo, ClientTelemetry, TelemetryRefused
from rustka.kafka.context import Body, RequestContext
from rustka.kafka.errors import ErrorCode as E

_ERRORS = {
    TelemetryRefused.THROTTLED: E.THROTTLING_QUOTA_EXCEEDED,
    TelemetryRefused.UNKNOWN_SUBSCRIPTION: E.UNKNOWN_SUBSCRIPTION_ID,
    TelemetryRefused.TOO_LARGE: E.TELEMETRY_TOO_LARGE,
    TelemetryRefused.UNSUPPORTED_COMPRESSION: E.UNSUPPORTED_COMPRESSION_TYPE,
    TelemetryRefused.INVALID_REQUEST: E.INVALID_REQUEST,
    TelemetryRefused.INVALID_RECORD: E.INVALID_RECORD,
}


def _telemetry(ctx: RequestContext) -> ClientTelemetry:
    telemetry = ctx.broker.client_telemetry
    if telemetry is None:  # the factory serves these APIs only when it is configured
        raise RuntimeError("client telemetry is off")
    return telemetry


def _now_ms(ctx: RequestContext) -> int:
    return int(ctx.factory.reactor.seconds() * 1000)


def _client(ctx: RequestContext) -> ClientInfo:
    software = ctx.connection.software or ("", "")
    peer = ctx.connection.transport.getPeer()
    address = f"{getattr(peer, 'host', '')}:{getattr(peer, 'port', '')}"
    return ClientInfo(
        client_id=ctx.header.client_id or "",
        software_name=software[0],
        software_version=software[1],
        principal=ctx.principal,
        address=address,
        connection=ctx.connection,
    )


def get_telemetry_subscriptions(ctx: RequestContext, version: int, body: Body) -> Body:
    sub = _telemetry(ctx).subscription(body["client_instance_id"], _client(ctx), _now_ms(ctx))
    return {
        "error_code": E.NONE,
        "client_instance_id": sub.instance_id,
        "subscription_id": sub.subscription_id,
        "accepted_compression_types": list(sub.accepted_compression),
        "push_interval_ms": sub.push_interval_ms,
        "telemetry_max_bytes": sub.max_bytes,
        # Cumulative values: what Prometheus counters are, so no broker-side summing.
        "delta_temporality": False,
        "requested_metrics": list(sub.requested_metrics),
    }


def push_telemetry(ctx: RequestContext, version: int, body: Body) -> Body:
    try:
        _telemetry(ctx).push(
            body["client_instance_id"],
            body["subscription_id"],
            body["terminating"],
            body["compression_type"],
            bytes(body["metrics"] or b""),
            _client(ctx),
            _now_ms(ctx),
        )
    except TelemetryRefused as e:
        return {"error_code": _ERRORS[e.reason]}
    return {"error_code": E.NONE}
