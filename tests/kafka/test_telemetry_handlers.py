"""GetTelemetrySubscriptions and PushTelemetry (KIP-714) over a real Kafka connection."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest_twisted

from rustka.kafka.errors import ErrorCode as E
from rustka.kafka.messages import ApiKey
from tests.broker.test_client_telemetry import payload
from tests.kafka.wire import call, kafka_wire

SETTINGS = {"client_telemetry_metrics": "org.apache.kafka.", "client_telemetry_interval_ms": 1000}


@pytest_twisted.ensureDeferred
async def test_a_client_subscribes_pushes_and_each_refusal_has_kafkas_code(tmp_path: Path) -> None:
    async with kafka_wire(tmp_path, "t", client_id="wire-app", **SETTINGS) as (running, client):
        versions = await call(client, ApiKey.API_VERSIONS, {}, 0)
        keys = {a["api_key"] for a in versions["api_keys"]}
        assert {71, 72} <= keys
        sub = await call(
            client, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, {"client_instance_id": bytes(16)}, 0
        )
        assert sub["error_code"] == E.NONE
        assert sub["requested_metrics"] == ["org.apache.kafka."]
        assert sub["accepted_compression_types"] == [4, 3, 1, 2]
        assert (sub["push_interval_ms"], sub["delta_temporality"]) == (1000, False)
        iid, sid = sub["client_instance_id"], sub["subscription_id"]
        body = payload(("org.apache.kafka.consumer.fetch.latency.avg", "gauge", 2.5, {}))

        async def push(**overrides: object) -> int:
            request = {
                "client_instance_id": iid,
                "subscription_id": sid,
                "terminating": False,
                "compression_type": 1,
                "metrics": gzip.compress(body),
                **overrides,
            }
            return (await call(client, ApiKey.PUSH_TELEMETRY, request, 0))["error_code"]

        assert await push() == E.NONE
        (state,) = running.broker.client_telemetry.clients.values()
        assert state.info.client_id == "wire-app"
        assert [p.value for p in state.series.values()] == [2.5]
        assert await push() == E.THROTTLING_QUOTA_EXCEEDED
        assert await push(subscription_id=sid ^ 1) == E.UNKNOWN_SUBSCRIPTION_ID
        # Asking again lets the next push in at once.
        await call(client, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, {"client_instance_id": iid}, 0)
        assert await push(compression_type=7) == E.UNSUPPORTED_COMPRESSION_TYPE
        too_large = b"\x01" * (1024 * 1024 + 1)
        assert await push(metrics=too_large, compression_type=0) == E.TELEMETRY_TOO_LARGE
        assert await push(metrics=b"\xff\xff", compression_type=0) == E.INVALID_RECORD
        assert await push(terminating=True) == E.NONE
        assert not running.broker.client_telemetry.clients
        # The connection is still served.
        assert (await call(client, ApiKey.API_VERSIONS, {}, 0))["error_code"] == E.NONE
