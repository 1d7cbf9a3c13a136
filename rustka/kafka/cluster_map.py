"""Which brokers Metadata names, and which of them leads each partition (docs/kafka.md,
"Metadata in a cluster").

A broker alone (no catalog) names itself, node ``broker_id``, as the leader of
everything, at the address the client reached it by. In a cluster the live brokers
come from the catalog's leases (`rustka.broker.cluster`): a diskless partition is led
by the broker the cluster spreads it to (any broker can serve it; the leader is
where clients are sent), a local topic by the broker that holds it, and a local
topic of a broker whose lease ran out by nobody (LEADER_NOT_AVAILABLE).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["ClusterMap", "TopicShape"]

TopicShape = tuple[str, int, bool]
"""A topic as the map needs it: name, partition count, diskless."""


@dataclass(frozen=True, slots=True)
class ClusterMap:
    node_id: int
    host: str
    port: int
    cluster: Any = None
    """The broker's `ClusterMember`, or None for a broker alone."""

    @classmethod
    def of(cls, broker: Any, host: str, port: int) -> ClusterMap:
        return cls(broker.node_id, host, port, broker.cluster)

    def _live(self) -> tuple[Any, ...]:
        return () if self.cluster is None else self.cluster.brokers()

    def brokers(self) -> list[dict[str, Any]]:
        live = self._live()
        if not live:
            return [{"node_id": self.node_id, "host": self.host, "port": self.port, "rack": None}]
        return [
            {"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack} for b in live
        ]

    def leaders(self, topics: Iterable[Any]) -> dict[str, list[int]]:
        """Each topic's partition leaders: ``topics`` are this broker's (TopicInfo or
        Topic objects), and in a cluster the other brokers' local topics are added."""
        live_ids = [b.broker_id for b in self._live()]
        out: dict[str, list[int]] = {}
        for name, count, diskless in (_shape(t) for t in topics):
            if diskless and live_ids:
                out[name] = self.cluster.diskless_leaders(name, count)
            else:
                out[name] = [self.node_id] * count
        view = None if self.cluster is None else self.cluster.view
        if view is not None:
            for name, (holder, count) in view.local_topics.items():
                if name in out or holder == self.node_id:
                    continue
                leader = holder if holder in live_ids else -1
                out[name] = [leader] * count
        return out


def _shape(topic: Any) -> TopicShape:
    """(name, partitions, diskless) of a `TopicInfo` or a storage `Topic`."""
    configs = getattr(topic, "configs", None) or getattr(topic, "overrides", None) or {}
    diskless = bool(getattr(topic, "diskless", False)) or (
        str(configs.get("diskless.enable", "")).lower() == "true"
    )
    return topic.name, len(topic.partitions), diskless
