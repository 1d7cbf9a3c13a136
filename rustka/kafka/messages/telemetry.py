"""Client telemetry (KIP-714): GetTelemetrySubscriptions and PushTelemetry.

A client asks which of its metrics the broker wants and how often, then pushes them as
an OpenTelemetry ``MetricsData`` message, compressed with one of the codecs the answer
lists. Both APIs have one version, flexible from the start. docs/kafka.md, "Client
telemetry (KIP-714)", says what rustka does with them.

Each API's structs are followed by its one declaration (`api`), which registers it
in `APIS`; rustka/kafka/messages/__init__.py says how to read them.
"""

from __future__ import annotations

from rustka.kafka.schema import BOOL, BYTES, INT8, INT16, INT32, STRING, UUID, Array

from .registry import ApiKey, F, api, msg

# --- GetTelemetrySubscriptions (71) ----------------------------------------------------

GET_TELEMETRY_SUBSCRIPTIONS_REQUEST = msg(
    "GetTelemetrySubscriptionsRequest",
    F("client_instance_id", UUID),
)

GET_TELEMETRY_SUBSCRIPTIONS_RESPONSE = msg(
    "GetTelemetrySubscriptionsResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("client_instance_id", UUID),
    F("subscription_id", INT32),
    F("accepted_compression_types", Array(INT8)),
    F("push_interval_ms", INT32),
    F("telemetry_max_bytes", INT32),
    F("delta_temporality", BOOL),
    F("requested_metrics", Array(STRING)),
)

api(
    ApiKey.GET_TELEMETRY_SUBSCRIPTIONS,
    "GetTelemetrySubscriptions",
    (0, 0),
    0,
    GET_TELEMETRY_SUBSCRIPTIONS_REQUEST,
    GET_TELEMETRY_SUBSCRIPTIONS_RESPONSE,
)

# --- PushTelemetry (72) ------------------------------------------------------------------

PUSH_TELEMETRY_REQUEST = msg(
    "PushTelemetryRequest",
    F("client_instance_id", UUID),
    F("subscription_id", INT32),
    F("terminating", BOOL),
    F("compression_type", INT8),
    F("metrics", BYTES),
)

PUSH_TELEMETRY_RESPONSE = msg(
    "PushTelemetryResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
)

api(
    ApiKey.PUSH_TELEMETRY,
    "PushTelemetry",
    (0, 0),
    0,
    PUSH_TELEMETRY_REQUEST,
    PUSH_TELEMETRY_RESPONSE,
)
