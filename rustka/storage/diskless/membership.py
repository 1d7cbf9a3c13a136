"""Cluster membership in the catalog: which brokers are alive, who holds each role, and
which broker holds each local topic (docs/diskless.md, "A cluster of brokers").

A broker is alive while its lease in the ``brokers`` table runs; it renews the
lease with one heartbeat (the ``rustka_heartbeat`` function, one round trip) every
third of the lease. Leases are measured on the database's clock only, so brokers'
clocks need not agree. The same heartbeat takes or renews the named roles a broker
asks for (``group_coordinator``): a role has one holder at a time, and passes only
once its holder's lease is over.

Leadership of a diskless partition is not a lease: any live broker can serve any
diskless partition, so the leader Metadata names is only where clients are sent,
spread by `leader_for` over the live brokers, and moves when the live set changes.

Plain blocking code, run on the broker's I/O pool like the catalog's.
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from rustka.errors import StorageError, TopicExists
from rustka.storage.diskless.catalog import Catalog

__all__ = [
    "COORDINATOR_ROLE",
    "BrokerIdTaken",
    "BrokerInfo",
    "ClusterView",
    "Membership",
    "leader_for",
]

COORDINATOR_ROLE = "group_coordinator"
"""The role of the broker that coordinates every consumer group of the cluster."""

_TAKEN = "RK001"
"""The SQLSTATE ``rustka_heartbeat`` raises when a live broker holds the id."""


class BrokerIdTaken(StorageError):
    """Another live broker holds this broker's id: two brokers must never share one."""


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What one heartbeat saw: the live brokers (by id), each held role's (holder, epoch),
    and each published local topic's (broker, partition count)."""

    brokers: tuple[BrokerInfo, ...]
    roles: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    local_topics: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def live_ids(self) -> tuple[int, ...]:
        return tuple(b.broker_id for b in self.brokers)

    def broker(self, broker_id: int) -> BrokerInfo | None:
        for b in self.brokers:
            if b.broker_id == broker_id:
                return b
        return None

    def holder(self, role: str) -> tuple[int, int] | None:
        """The (broker id, epoch) holding ``role``, if a live lease does."""
        return self.roles.get(role)


def leader_for(topic: str, partition: int, live_ids: Sequence[int]) -> int:
    """The broker Metadata names as a diskless partition's leader: the partitions of a
    topic go round the live brokers from a start that depends on the topic's name, so
    every broker computes the same answer from the same live set. -1 if none is live."""
    if not live_ids:
        return -1
    ordered = sorted(live_ids)
    start = zlib.crc32(topic.encode("utf-8"))
    return ordered[(start + partition) % len(ordered)]


class Membership:
    """One broker's registration: its heartbeat, its local topics, and its leaving.

    ``state_file`` (in the broker's data dir) keeps the incarnation of the last run,
    so a broker restarted on the same data dir takes its id back at once instead of
    waiting for the lease of the run that crashed to end.
    """

    def __init__(
        self,
        catalog: Catalog,
        broker_id: int,
        host: str,
        port: int,
        *,
        lease_ms: int,
        rack: str | None = None,
        state_file: Path | None = None,
    ) -> None:
        self.catalog = catalog
        self.broker_id = broker_id
        self.host = host
        self.port = port
        self.rack = rack
        self.lease_ms = lease_ms
        self.incarnation = uuid.uuid4()
        self._state_file = state_file
        self._previous = _read_incarnation(state_file)
        self._published: dict[str, int] | None = None

    def heartbeat(self, roles: Sequence[str] = ()) -> ClusterView:
        """Renew this broker's lease, try for ``roles``, and read the cluster.

        Raises `BrokerIdTaken` if another live broker holds the id, and
        `CatalogUnavailable` if the catalog cannot be reached (the caller must then
        assume its lease and roles end when their last renewal said)."""
        try:
            with self.catalog.session() as conn:
                rows = conn.execute(
                    "SELECT kind, id, host, port, rack FROM rustka_heartbeat("
                    "%s, %s, %s, %s, %s, %s, %s, %s)",
                    (
                        self.broker_id,
                        self.incarnation,
                        self._previous,
                        self.host,
                        self.port,
                        self.rack,
                        self.lease_ms,
                        list(roles),
                    ),
                ).fetchall()
                local = conn.execute(
                    "SELECT name, broker_id, partitions FROM local_topics"
                ).fetchall()
        except psycopg.DatabaseError as e:
            if e.sqlstate == _TAKEN:
                raise BrokerIdTaken(str(e.diag.message_primary)) from e
            raise
        if self._previous != self.incarnation:
            _write_incarnation(self._state_file, self.incarnation)
            self._previous = self.incarnation
        brokers = tuple(
            BrokerInfo(bid, host, int(port), rack)
            for kind, bid, host, port, rack in rows
            if kind == "broker"
        )
        held = {host: (bid, int(port)) for kind, bid, host, port, _ in rows if kind == "lease"}
        topics = {name: (bid, count) for name, bid, count in local}
        self._published = {n: c for n, (b, c) in topics.items() if b == self.broker_id}
        return ClusterView(brokers, held, topics)

    def claim_local_topic(self, name: str, partitions: int) -> None:
        """Before a local topic is created here: take its name for this broker, so no
        other broker creates a local topic, and no one a diskless topic, under it."""
        with self.catalog.session() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (name,))
            if conn.execute("SELECT 1 FROM topics WHERE name = %s", (name,)).fetchone():
                raise TopicExists(f"topic {name!r} already exists as a diskless topic")
            row = conn.execute(
                "INSERT INTO local_topics AS t (name, broker_id, partitions) VALUES (%s, %s, %s) "
                "ON CONFLICT (name) DO UPDATE SET partitions = EXCLUDED.partitions "
                "WHERE t.broker_id = EXCLUDED.broker_id RETURNING broker_id",
                (name, self.broker_id, partitions),
            ).fetchone()
            if row is None:
                holder = conn.execute(
                    "SELECT broker_id FROM local_topics WHERE name = %s", (name,)
                ).fetchone()
                raise TopicExists(
                    f"topic {name!r} already exists as a local topic of broker "
                    f"{holder[0] if holder else '?'}"
                )
        if self._published is not None:
            self._published[name] = partitions

    def publish_local_topics(self, topics: Mapping[str, int]) -> list[str]:
        """Make this broker's rows of ``local_topics`` name exactly ``topics`` (name ->
        partition count), writing only when they differ from what the last heartbeat
        read. Returns the names another broker or a diskless topic already holds: those
        stay served here only for clients that come to this broker, and are reported."""
        if self._published is not None and dict(self._published) == dict(topics):
            return []
        clashes: list[str] = []
        with self.catalog.session() as conn:
            mine = dict(
                conn.execute(
                    "SELECT name, partitions FROM local_topics WHERE broker_id = %s",
                    (self.broker_id,),
                ).fetchall()
            )
            gone = [n for n in mine if n not in topics]
            if gone:
                conn.execute(
                    "DELETE FROM local_topics WHERE broker_id = %s AND name = ANY(%s)",
                    (self.broker_id, gone),
                )
            for name, count in sorted(topics.items()):
                if mine.get(name) == count:
                    continue
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (name,))
                diskless = conn.execute("SELECT 1 FROM topics WHERE name = %s", (name,)).fetchone()
                row = None
                if diskless is None:
                    row = conn.execute(
                        "INSERT INTO local_topics AS t (name, broker_id, partitions) "
                        "VALUES (%s, %s, %s) ON CONFLICT (name) DO UPDATE SET "
                        "partitions = EXCLUDED.partitions WHERE t.broker_id = EXCLUDED.broker_id "
                        "RETURNING broker_id",
                        (name, self.broker_id, count),
                    ).fetchone()
                if row is None:
                    clashes.append(name)
        self._published = {n: c for n, c in topics.items() if n not in clashes}
        return clashes

    def cluster_id(self, proposed: str) -> str:
        """The cluster's id: the first broker to ask stores ``proposed``, and every broker
        answers what is stored."""
        with self.catalog.session() as conn:
            conn.execute(
                "INSERT INTO cluster (cluster_id) VALUES (%s) ON CONFLICT DO NOTHING", (proposed,)
            )
            row = conn.execute("SELECT cluster_id FROM cluster").fetchone()
        assert row is not None
        return str(row[0])

    def leave(self) -> None:
        """On a clean stop: give up the id and every role now, so the others need not wait
        for the leases to run out."""
        with self.catalog.session() as conn:
            conn.execute(
                "UPDATE leases SET lease_until = clock_timestamp() - interval '1 second' "
                "WHERE incarnation = %s",
                (self.incarnation,),
            )
            conn.execute(
                "DELETE FROM brokers WHERE broker_id = %s AND incarnation = %s",
                (self.broker_id, self.incarnation),
            )


def _read_incarnation(path: Path | None) -> uuid.UUID | None:
    if path is None:
        return None
    try:
        return uuid.UUID(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _write_incarnation(path: Path | None, incarnation: uuid.UUID) -> None:
    if path is None:
        return
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{incarnation}\n")
    tmp.replace(path)
