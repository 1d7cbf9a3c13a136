"""The metrics Kafka clients pushed (KIP-714), as Prometheus families and as the console's
JSON.

Each client metric becomes one family named after Kafka's metric name with its
``org.apache.kafka.`` prefix dropped (``org.apache.kafka.producer.record.queue.time.avg``
is ``rustka_client_producer_record_queue_time_avg``), labelled with the client's
``client_id`` and ``client_instance_id`` and the metric's own attributes (``node_id``,
``topic``...). Sums are counters (clients push cumulative values: rustka asks for
them), everything else gauges. The broker keeps a bounded number of clients and series
(rustka.broker.client_telemetry), so the families are bounded too; a client that goes
away disappears from the next scrape.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from rustka.broker.client_telemetry import ClientState, ClientTelemetry

_KAFKA_PREFIX = "org.apache.kafka."
_CLIENT_LABELS = ("client_id", "client_instance_id")


def _name(metric: str) -> str:
    return "rustka_client_" + re.sub(r"[^a-zA-Z0-9_]", "_", metric.removeprefix(_KAFKA_PREFIX))


def _label(key: str) -> str:
    label = re.sub(r"[^a-zA-Z0-9_]", "_", key)
    if not label or label[0].isdigit() or label.startswith("__") or label in _CLIENT_LABELS:
        label = "attr_" + label.lstrip("_")
    return label


def client_metric_families(telemetry: ClientTelemetry, now_ms: int) -> Iterator[Metric]:
    """One family per client metric name, then the telemetry's own counters."""
    clients = telemetry.snapshot(now_ms)
    by_name: dict[str, list[tuple[ClientState, Any]]] = {}
    for state in clients:
        for point in state.series.values():
            by_name.setdefault(point.name, []).append((state, point))
    for metric, samples in sorted(by_name.items()):
        keys = sorted({_label(k) for _, p in samples for k, _ in p.labels})
        counter = all(p.kind == "sum" for _, p in samples)
        family_type = CounterMetricFamily if counter else GaugeMetricFamily
        family = family_type(
            _name(metric),
            f"Kafka client metric {metric}, as the clients last pushed it (KIP-714).",
            labels=(*_CLIENT_LABELS, *keys),
        )
        for state, point in samples:
            attrs = {_label(k): v for k, v in point.labels}
            values = (state.info.client_id, state.instance, *(attrs.get(k, "") for k in keys))
            family.add_metric(values, point.value)
        yield family
    yield GaugeMetricFamily(
        "rustka_client_telemetry_clients",
        "Client instances whose pushed metrics the broker keeps (KIP-714).",
        value=len(clients),
    )
    pushes = CounterMetricFamily(
        "rustka_client_telemetry_pushes",
        "PushTelemetry requests by result: accepted, or why one was refused.",
        labels=("result",),
    )
    for result, count in sorted(telemetry.pushes.items()):
        pushes.add_metric((result,), count)
    yield pushes
    yield CounterMetricFamily(
        "rustka_client_telemetry_dropped_clients",
        "Client instances dropped to stay within client_telemetry_max_clients.",
        value=telemetry.dropped_clients,
    )


def clients_json(telemetry: ClientTelemetry | None, now_ms: int) -> dict[str, Any]:
    """The console's /api/clients answer (docs/console.md)."""
    if telemetry is None:
        return {"enabled": False, "clients": []}
    return {
        "enabled": True,
        "clients": [
            {
                "client_instance_id": state.instance,
                "client_id": state.info.client_id,
                "software_name": state.info.software_name,
                "software_version": state.info.software_version,
                "principal": state.info.principal,
                "address": state.info.address,
                "last_push_ms": state.last_push_ms,
                "metrics": [
                    {
                        "name": p.name,
                        "kind": p.kind,
                        "value": p.value,
                        "labels": dict(p.labels),
                    }
                    for p in sorted(state.series.values(), key=lambda p: (p.name, p.labels))
                ],
            }
            for state in reversed(telemetry.snapshot(now_ms))
        ],
    }
