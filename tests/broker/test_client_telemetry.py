"""The client telemetry store (KIP-714): subscriptions, pushes, and its three bounds."""

from __future__ import annotations

import gzip

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as m

from rustka.broker.client_telemetry import (
    ZERO_UUID,
    ClientInfo,
    ClientTelemetry,
    TelemetryRefused,
    TelemetrySettings,
)
from rustka.broker.otlp import MAX_ATTRIBUTES, MAX_LABEL_CHARS, decode_metrics


def payload(*metrics: tuple[str, str, float, dict[str, str]]) -> bytes:
    """An OTLP MetricsData of (name, "gauge"|"sum"|"histogram", value, attributes)."""
    data = m.MetricsData()
    scope = data.resource_metrics.add().scope_metrics.add()
    for name, kind, value, attrs in metrics:
        metric = scope.metrics.add(name=name)
        attributes = [KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in attrs.items()]
        if kind == "histogram":
            metric.histogram.data_points.add(count=int(value), sum=value * 2, attributes=attributes)
        else:
            getattr(metric, kind).data_points.add(as_double=value, attributes=attributes)
    return data.SerializeToString()


def info(name: str = "app", connection: object = None) -> ClientInfo:
    return ClientInfo(name, "librdkafka", "2.16", "User:ANONYMOUS", "127.0.0.1:1", connection)


def store(**overrides: object) -> ClientTelemetry:
    values: dict[str, object] = {
        "metrics": ("org.apache.kafka.producer.",),
        "interval_ms": 10_000,
        "max_bytes": 4096,
        "max_clients": 10,
        "max_series": 100,
    }
    values.update(overrides)
    return ClientTelemetry(TelemetrySettings(**values))  # type: ignore[arg-type]


def subscribe(t: ClientTelemetry, now: int = 0, who: ClientInfo | None = None) -> tuple[bytes, int]:
    sub = t.subscription(ZERO_UUID, who or info(), now)
    return sub.instance_id, sub.subscription_id


def test_a_new_client_gets_an_instance_id_and_the_configured_subscription() -> None:
    t = store()
    sub = t.subscription(ZERO_UUID, info(), 0)
    assert sub.instance_id != ZERO_UUID and len(sub.instance_id) == 16
    assert sub.requested_metrics == ("org.apache.kafka.producer.",)
    assert sub.push_interval_ms == 10_000 and sub.max_bytes == 4096
    assert sub.accepted_compression == (4, 3, 1, 2)
    again = t.subscription(sub.instance_id, info(), 5)
    assert (again.instance_id, again.subscription_id) == (sub.instance_id, sub.subscription_id)
    assert store(metrics=("*",)).subscription(ZERO_UUID, info(), 0).requested_metrics == ("",)


def test_a_push_keeps_the_latest_value_of_each_subscribed_series() -> None:
    t = store()
    iid, sid = subscribe(t)
    body = payload(
        ("org.apache.kafka.producer.queue.avg", "gauge", 1.5, {"node.id": "0"}),
        ("org.apache.kafka.producer.sent", "sum", 7, {}),
        ("org.apache.kafka.producer.lat", "histogram", 3, {}),
        ("org.apache.kafka.consumer.lag", "gauge", 9, {}),
    )
    assert t.push(iid, sid, False, 1, gzip.compress(body), info(), 100) == 4
    series = {name: (p.kind, p.value) for (name, _), p in t.clients[iid].series.items()}
    assert series == {
        "org.apache.kafka.producer.queue.avg": ("gauge", 1.5),
        "org.apache.kafka.producer.sent": ("sum", 7.0),
        "org.apache.kafka.producer.lat.count": ("sum", 3.0),
        "org.apache.kafka.producer.lat.sum": ("sum", 6.0),
    }
    later = payload(("org.apache.kafka.producer.sent", "sum", 9, {}))
    assert t.push(iid, sid, False, 0, later, info(), 10_100) == 1
    assert t.clients[iid].series[("org.apache.kafka.producer.sent", ())].value == 9
    assert t.pushes == {"accepted": 2}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"sid": 12345}, TelemetryRefused.UNKNOWN_SUBSCRIPTION),
        ({"iid": ZERO_UUID}, TelemetryRefused.INVALID_REQUEST),
        ({"compression": 9}, TelemetryRefused.UNSUPPORTED_COMPRESSION),
        ({"body": b"\x00" * 5000}, TelemetryRefused.TOO_LARGE),
        ({"body": b"\xff\xff\xff"}, TelemetryRefused.INVALID_RECORD),
        ({"compression": 1, "body": b"not gzip"}, TelemetryRefused.TOO_LARGE),
    ],
)
def test_a_bad_push_is_refused_with_its_reason_and_changes_nothing(
    change: dict[str, object], reason: str
) -> None:
    t = store()
    iid, sid = subscribe(t)
    args = {
        "iid": iid,
        "sid": sid,
        "compression": 0,
        "body": payload(("org.apache.kafka.producer.x", "gauge", 1, {})),
    }
    args.update(change)
    with pytest.raises(TelemetryRefused) as refused:
        t.push(args["iid"], args["sid"], False, args["compression"], args["body"], info(), 1)  # type: ignore[arg-type]
    assert refused.value.reason == reason
    assert not t.clients[iid].series
    assert t.pushes == {reason: 1}


def test_a_decompression_bomb_is_refused_before_it_is_inflated() -> None:
    t = store()
    iid, sid = subscribe(t)
    bomb = gzip.compress(b"\x00" * (4096 * 8 + 1))
    assert len(bomb) < 4096
    with pytest.raises(TelemetryRefused) as refused:
        t.push(iid, sid, False, 1, bomb, info(), 1)
    assert refused.value.reason == TelemetryRefused.TOO_LARGE


def test_pushing_again_before_half_an_interval_is_throttled_unless_it_resubscribed() -> None:
    t = store()
    iid, sid = subscribe(t)
    body = payload(("org.apache.kafka.producer.x", "gauge", 1, {}))
    t.push(iid, sid, False, 0, body, info(), 1_000)
    with pytest.raises(TelemetryRefused) as refused:
        t.push(iid, sid, False, 0, body, info(), 5_999)
    assert refused.value.reason == TelemetryRefused.THROTTLED
    t.push(iid, sid, False, 0, body, info(), 6_000)
    t.subscription(iid, info(), 6_001)
    t.push(iid, sid, False, 0, body, info(), 6_002)


def test_a_terminating_push_is_taken_and_the_client_forgotten() -> None:
    t = store()
    iid, sid = subscribe(t)
    t.push(iid, sid, True, 0, payload(("org.apache.kafka.producer.x", "gauge", 1, {})), info(), 1)
    assert iid not in t.clients
    with pytest.raises(TelemetryRefused) as refused:
        t.push(iid, sid, False, 0, b"", info(), 20_000)
    assert refused.value.reason == TelemetryRefused.UNKNOWN_SUBSCRIPTION


def test_clients_are_bounded_least_recently_heard_from_dropped_first() -> None:
    t = store(max_clients=2)
    first, _ = subscribe(t, 0, info("a"))
    subscribe(t, 1, info("b"))
    t.subscription(first, info("a"), 2)
    third, _ = subscribe(t, 3, info("c"))
    assert list(t.clients) == [first, third]
    assert t.dropped_clients == 1


def test_series_are_bounded_per_client() -> None:
    t = store(max_series=3)
    iid, sid = subscribe(t)
    many = [(f"org.apache.kafka.producer.m{i}", "gauge", float(i), {}) for i in range(10)]
    assert t.push(iid, sid, False, 0, payload(*many), info(), 1) == 3
    assert len(t.clients[iid].series) == 3


def test_silent_clients_expire_and_closed_connections_are_forgotten() -> None:
    t = store(interval_ms=30_000)
    conn = object()
    quiet, _ = subscribe(t, 0, info("quiet"))
    gone, _ = subscribe(t, 50_000, info("gone", conn))
    assert [s.instance_id for s in t.snapshot(89_999)] == [quiet, gone]
    assert [s.instance_id for s in t.snapshot(90_001)] == [gone]
    t.disconnected(conn)
    assert not t.clients


def test_labels_are_bounded_in_number_and_length() -> None:
    attrs = {f"k{i}": "v" * 1000 for i in range(20)}
    (point,) = decode_metrics(payload(("x", "gauge", 1, attrs)), 10)
    assert len(point.labels) == MAX_ATTRIBUTES
    assert all(len(v) == MAX_LABEL_CHARS for _, v in point.labels)
