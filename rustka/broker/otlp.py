"""What a client's pushed metrics say: an OpenTelemetry ``MetricsData`` message, flattened.

KIP-714 clients push their metrics in OTLP's protobuf encoding. The message is decoded
with opentelemetry-proto (the `telemetry` extra, imported only when a broker is
configured for client telemetry) and flattened into `Point`s: one value per metric name
and attribute set, the shape Prometheus and the console show. Gauges and sums give
their value; histograms and summaries give their count and sum as two points
(``<name>.count``, ``<name>.sum``), which is what a dashboard of client metrics uses.

Everything a client sends is bounded before it is kept: at most `max_points` points,
attribute keys and values cut to `MAX_LABEL_CHARS`, at most `MAX_ATTRIBUTES` of them per
point, so one client cannot grow the broker's memory or the metrics page without limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from rustka.settings import ConfigError

MAX_LABEL_CHARS = 128
MAX_ATTRIBUTES = 8


class InvalidMetrics(ValueError):
    """The payload is not an OTLP ``MetricsData`` message."""


@dataclass(frozen=True, slots=True)
class Point:
    """One metric value of one client: Kafka's metric name, its kind and attributes."""

    name: str
    kind: str
    """"sum" (a counter: cumulative, since rustka asks for cumulative values) or "gauge"."""
    value: float
    labels: tuple[tuple[str, str], ...]


def require() -> None:
    """Fail at start, with what to install, when the library is missing."""
    try:
        _metrics_data()
    except ImportError:
        raise ConfigError(
            "client_telemetry_metrics needs opentelemetry-proto: pip install 'rustka[telemetry]'"
        ) from None


def _metrics_data() -> Any:
    from opentelemetry.proto.metrics.v1 import metrics_pb2

    return metrics_pb2.MetricsData


def _text(value: Any) -> str:
    """An OTLP ``AnyValue`` as text (strings, numbers, booleans; others by their repr)."""
    which = value.WhichOneof("value")
    if which is None:
        return ""
    return str(getattr(value, which))[:MAX_LABEL_CHARS]


def _labels(attributes: Iterable[Any]) -> tuple[tuple[str, str], ...]:
    pairs = sorted((a.key[:MAX_LABEL_CHARS], _text(a.value)) for a in attributes)
    return tuple(pairs[:MAX_ATTRIBUTES])


def _number(point: Any) -> float:
    which = point.WhichOneof("value")
    if which == "as_int":
        return float(point.as_int)
    if which == "as_double":
        return float(point.as_double)
    return 0.0


def _points(metric: Any) -> Iterator[Point]:
    kind = metric.WhichOneof("data")
    if kind in ("gauge", "sum"):
        data = getattr(metric, kind)
        for p in data.data_points:
            yield Point(metric.name, kind, _number(p), _labels(p.attributes))
    elif kind in ("histogram", "exponential_histogram", "summary"):
        for p in getattr(metric, kind).data_points:
            labels = _labels(p.attributes)
            yield Point(f"{metric.name}.count", "sum", float(p.count), labels)
            yield Point(f"{metric.name}.sum", "sum", float(p.sum), labels)


def decode_metrics(payload: bytes, max_points: int) -> list[Point]:
    """The points of one push, at most ``max_points`` of them (the rest are dropped)."""
    message = _metrics_data()()
    try:
        message.ParseFromString(payload)
    except Exception as e:  # the protobuf runtime's DecodeError, whatever its module
        raise InvalidMetrics(f"not an OTLP MetricsData message: {e}") from None
    points: list[Point] = []
    for resource in message.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in _points(metric):
                    if len(points) >= max_points:
                        return points
                    points.append(point)
    return points
