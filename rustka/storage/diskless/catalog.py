"""The diskless catalog in PostgreSQL: topics, each partition's bounds, where every
stored payload is, idempotent producers, and the uploaded objects (docs/diskless.md).

Plain blocking code over psycopg 3 with a small connection pool, run on the
broker's I/O pool. The tables and two functions are in ``catalog.sql``; a commit
is one call of ``rustka_commit``, so one round trip and one transaction: it locks
the partitions' rows in one order (brokers committing to the same partitions at
once wait for each other, never deadlock), checks each idempotent producer as
Kafka does, assigns offsets from the high watermark and raises it.

Any failure to reach PostgreSQL, or a statement cut by the timeout, is
`CatalogUnavailable`, a retriable storage error: the transaction was not
committed, so nothing it did is visible.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool, PoolTimeout

from rustka.errors import OffsetOutOfRange, StorageError, TopicExists, UnknownTopic

__all__ = [
    "BatchEntry",
    "BatchLocation",
    "Catalog",
    "CatalogUnavailable",
    "CommitError",
    "Committed",
    "TopicRow",
]

SCHEMA_VERSION = 1
_FETCH_ROWS = 500
"""Payload rows one fetch looks at, at most (a Fetch's budget is usually far fewer)."""
_MIGRATION_LOCK = 0x7275_7374_6B61  # "rustka": one advisory lock id for every broker


class CatalogUnavailable(StorageError):
    """PostgreSQL cannot be reached or did not answer in time; nothing was committed."""


class CommitError(enum.IntEnum):
    NONE = 0
    UNKNOWN_PARTITION = 1
    DUPLICATE = 2
    OUT_OF_ORDER_SEQUENCE = 3
    INVALID_PRODUCER_EPOCH = 4


@dataclass(frozen=True, slots=True)
class BatchEntry:
    """One payload of an uploaded object, as a commit takes it."""

    topic: str
    partition: int
    byte_offset: int
    byte_size: int
    record_count: int
    base_timestamp: int
    max_timestamp: int
    timestamp_type: int
    producer_id: int
    producer_epoch: int
    base_sequence: int


@dataclass(frozen=True, slots=True)
class Committed:
    """What a commit did with one entry, in the entries' order."""

    error: CommitError
    base_offset: int
    log_start_offset: int
    log_append_time: int


@dataclass(frozen=True, slots=True)
class BatchLocation:
    """Where a stored payload's bytes are, and the offsets it holds."""

    base_offset: int
    last_offset: int
    object_key: str
    byte_offset: int
    byte_size: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class TopicRow:
    name: str
    topic_id: int
    partitions: int
    configs: dict[str, str]


class Catalog:
    """The catalog of one cluster; see the module docstring."""

    def __init__(self, dsn: str, *, pool_size: int = 4, timeout_s: float = 5.0) -> None:
        self.timeout_s = timeout_s
        self.round_trips = 0
        """Statements sent (one per call here): the figure the benchmark reports."""
        timeout_ms = int(timeout_s * 1000)
        self._pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_size,
            timeout=timeout_s,
            open=False,
            kwargs={
                "connect_timeout": max(1, int(timeout_s)),
                "options": f"-c statement_timeout={timeout_ms} -c lock_timeout={timeout_ms}",
                "autocommit": False,
            },
            check=ConnectionPool.check_connection,
        )
        try:
            self._pool.open(wait=True, timeout=timeout_s)
        except PoolTimeout as e:
            self._pool.close()
            raise CatalogUnavailable(f"cannot reach the diskless catalog: {e}") from e

    def close(self) -> None:
        self._pool.close()

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """One transaction on a pooled connection; connection trouble is CatalogUnavailable."""
        try:
            with self._pool.connection() as conn, conn.transaction():
                yield conn
        except (PoolTimeout, psycopg.OperationalError, pg_errors.QueryCanceled) as e:
            raise CatalogUnavailable(f"the diskless catalog is unavailable: {e}") from e
        except psycopg.InterfaceError as e:
            raise CatalogUnavailable(f"the diskless catalog connection broke: {e}") from e

    def session(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        """One transaction for the catalog's neighbours (cluster membership, shared group
        offsets), with the same mapping of connection trouble to `CatalogUnavailable`."""
        self.round_trips += 1
        return self._transaction()

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self.round_trips += 1
        with self._transaction() as conn:
            return conn.execute(sql, params).fetchall()

    # -- schema --------------------------------------------------------------------------

    def migrate(self) -> None:
        """Create the tables and functions if they are not there (idempotent; brokers
        starting together take turns on an advisory lock)."""
        ddl = resources.files("rustka.storage.diskless").joinpath("catalog.sql").read_text()
        with self._transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute(ddl)
            conn.execute(
                "INSERT INTO rustka_schema (version) VALUES (%s) ON CONFLICT DO NOTHING",
                (SCHEMA_VERSION,),
            )
            (newest,) = conn.execute("SELECT max(version) FROM rustka_schema").fetchone() or (0,)
            if newest > SCHEMA_VERSION:
                raise StorageError(
                    f"the diskless catalog has schema version {newest}; this broker knows "
                    f"{SCHEMA_VERSION}: upgrade the broker"
                )

    # -- topics --------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, configs: Mapping[str, str]) -> None:
        self.round_trips += 1
        try:
            with self._transaction() as conn:
                # The same lock a broker takes to publish a local topic (membership.py):
                # one name is never both a diskless topic and a broker's local one.
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (name,))
                holder = conn.execute(
                    "SELECT broker_id FROM local_topics WHERE name = %s", (name,)
                ).fetchone()
                if holder is not None:
                    raise TopicExists(
                        f"topic {name!r} already exists as a local topic of broker {holder[0]}"
                    )
                row = conn.execute(
                    "INSERT INTO topics (name, partitions, configs) VALUES (%s, %s, %s) "
                    "RETURNING topic_id",
                    (name, partitions, Jsonb(dict(configs))),
                ).fetchone()
                assert row is not None
                conn.execute(
                    "INSERT INTO partitions (topic_id, partition) "
                    "SELECT %s, generate_series(0, %s - 1)",
                    (row[0], partitions),
                )
        except pg_errors.UniqueViolation as e:
            raise TopicExists(f"topic {name!r} already exists") from e

    def topics(self) -> dict[str, TopicRow]:
        rows = self._query("SELECT name, topic_id, partitions, configs FROM topics")
        return {
            name: TopicRow(name, tid, count, {str(k): str(v) for k, v in configs.items()})
            for name, tid, count, configs in rows
        }

    def alter_configs(self, name: str, configs: Mapping[str, str]) -> None:
        rows = self._query(
            "UPDATE topics SET configs = %s WHERE name = %s RETURNING topic_id",
            (Jsonb(dict(configs)), name),
        )
        if not rows:
            raise UnknownTopic(f"unknown topic {name!r}")

    def add_partitions(self, name: str, count: int) -> None:
        self.round_trips += 1
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT topic_id, partitions FROM topics WHERE name = %s FOR UPDATE", (name,)
            ).fetchone()
            if row is None:
                raise UnknownTopic(f"unknown topic {name!r}")
            tid, current = row
            if count <= current:
                return
            conn.execute("UPDATE topics SET partitions = %s WHERE topic_id = %s", (count, tid))
            conn.execute(
                "INSERT INTO partitions (topic_id, partition) "
                "SELECT %s, generate_series(%s, %s - 1)",
                (tid, current, count),
            )

    def delete_topic(self, name: str) -> None:
        """The topic's rows go; the objects they used lose that use (the collector's)."""
        self.round_trips += 1
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT topic_id FROM topics WHERE name = %s FOR UPDATE", (name,)
            ).fetchone()
            if row is None:
                raise UnknownTopic(f"unknown topic {name!r}")
            conn.execute(
                "UPDATE objects o SET used_bytes = o.used_bytes - u.bytes FROM "
                "(SELECT object_id, sum(byte_size) AS bytes FROM batches WHERE topic_id = %s "
                "GROUP BY object_id) u WHERE o.object_id = u.object_id",
                (row[0],),
            )
            conn.execute("DELETE FROM batches WHERE topic_id = %s", (row[0],))
            conn.execute("DELETE FROM topics WHERE topic_id = %s", (row[0],))
            # A topic created again under this name starts with no group positions.
            conn.execute("DELETE FROM group_offsets WHERE topic = %s", (name,))

    # -- produce -------------------------------------------------------------------------

    def commit(
        self,
        object_key: str,
        broker_id: int,
        object_size: int,
        entries: Sequence[BatchEntry],
        now_ms: int,
    ) -> list[Committed]:
        """Record an uploaded object and give its entries offsets, in one transaction."""
        rows = self._query(
            "SELECT idx, error, base_offset, log_start, append_time FROM rustka_commit("
            "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ORDER BY idx",
            (
                object_key,
                broker_id,
                object_size,
                now_ms,
                [e.topic for e in entries],
                [e.partition for e in entries],
                [e.byte_offset for e in entries],
                [e.byte_size for e in entries],
                [e.record_count for e in entries],
                [e.base_timestamp for e in entries],
                [e.max_timestamp for e in entries],
                [e.timestamp_type for e in entries],
                [e.producer_id for e in entries],
                [e.producer_epoch for e in entries],
                [e.base_sequence for e in entries],
            ),
        )
        return [Committed(CommitError(err), base, start, at) for _, err, base, start, at in rows]

    # -- reads ---------------------------------------------------------------------------

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        rows = self._query(
            "SELECT p.log_start_offset, p.high_watermark FROM partitions p "
            "JOIN topics t USING (topic_id) WHERE t.name = %s AND p.partition = %s",
            (topic, partition),
        )
        if not rows:
            raise UnknownTopic(f"unknown diskless partition {topic!r}/{partition}")
        return rows[0][0], rows[0][1]

    def all_bounds(self) -> dict[tuple[str, int], tuple[int, int]]:
        rows = self._query(
            "SELECT t.name, p.partition, p.log_start_offset, p.high_watermark "
            "FROM partitions p JOIN topics t USING (topic_id)"
        )
        return {(name, part): (start, end) for name, part, start, end in rows}

    def find_batches(
        self, topic: str, partition: int, offset: int, max_bytes: int
    ) -> list[BatchLocation]:
        """The payloads from the one holding ``offset`` on, in order, until their sizes
        pass ``max_bytes`` (at least one, if there is any)."""
        rows = self._query(
            "SELECT b.base_offset, b.last_offset, o.object_key, b.byte_offset, b.byte_size, "
            "b.max_timestamp "
            "FROM batches b JOIN topics t USING (topic_id) JOIN objects o USING (object_id) "
            "WHERE t.name = %s AND b.partition = %s AND b.last_offset >= %s "
            "ORDER BY b.last_offset LIMIT %s",
            (topic, partition, offset, _FETCH_ROWS),
        )
        out: list[BatchLocation] = []
        used = 0
        for base, last, key, at, size, max_ts in rows:
            if out and used + size > max_bytes:
                break
            used += size
            out.append(BatchLocation(base, last, key, at, size, max_ts))
        return out

    def offset_for_timestamp(
        self, topic: str, partition: int, timestamp: int
    ) -> tuple[int, int] | None:
        """The first payload at or above the log start whose max timestamp reaches
        ``timestamp``: (its base offset, that timestamp)."""
        rows = self._query(
            "SELECT b.base_offset, b.max_timestamp FROM batches b "
            "JOIN topics t USING (topic_id) JOIN partitions p USING (topic_id, partition) "
            "WHERE t.name = %s AND b.partition = %s AND b.max_timestamp >= %s "
            "AND b.last_offset >= p.log_start_offset ORDER BY b.base_offset LIMIT 1",
            (topic, partition, timestamp),
        )
        return (rows[0][0], rows[0][1]) if rows else None

    # -- retention and deletion ------------------------------------------------------------

    def _partition_id(
        self, conn: psycopg.Connection[Any], topic: str, partition: int
    ) -> tuple[int, int, int, int]:
        row = conn.execute(
            "SELECT p.topic_id, p.log_start_offset, p.high_watermark, p.size_bytes "
            "FROM partitions p JOIN topics t USING (topic_id) "
            "WHERE t.name = %s AND p.partition = %s FOR UPDATE OF p",
            (topic, partition),
        ).fetchone()
        if row is None:
            raise UnknownTopic(f"unknown diskless partition {topic!r}/{partition}")
        return row[0], row[1], row[2], row[3]

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """Kafka's DeleteRecords: the log start moves up to ``offset`` (-1: the high
        watermark); payloads wholly below it go. The new log start."""
        self.round_trips += 1
        with self._transaction() as conn:
            tid, start, end, _ = self._partition_id(conn, topic, partition)
            target = end if offset == -1 else offset
            if target < 0 or target > end:
                raise OffsetOutOfRange(offset, start, end)
            if target <= start:
                return start
            row = conn.execute("SELECT rustka_truncate(%s, %s, %s)", (tid, partition, target))
            return row.fetchone()[0]  # type: ignore[index]

    def enforce_retention(
        self,
        topic: str,
        partition: int,
        *,
        retention_ms: int | None,
        retention_bytes: int | None,
        now_ms: int,
    ) -> int:
        """Drop whole payloads, oldest first: those older than ``retention_ms`` (by their
        max timestamp) and those that keep the partition over ``retention_bytes``. The
        new log start (the high watermark when everything went)."""
        if retention_ms is None and retention_bytes is None:
            return self.bounds(topic, partition)[0]
        self.round_trips += 1
        with self._transaction() as conn:
            tid, start, end, size = self._partition_id(conn, topic, partition)
            rows = conn.execute(
                "SELECT base_offset, last_offset, max_timestamp, byte_size FROM batches "
                "WHERE topic_id = %s AND partition = %s ORDER BY base_offset",
                (tid, partition),
            ).fetchall()
            target = start
            left = size
            for _base, last, max_ts, nbytes in rows:
                expired = retention_ms is not None and max_ts < now_ms - retention_ms
                oversized = retention_bytes is not None and left > retention_bytes
                if not (expired or oversized):
                    break
                target = last + 1
                left -= nbytes
            if target <= start:
                return start
            row = conn.execute(
                "SELECT rustka_truncate(%s, %s, %s)", (tid, partition, min(target, end))
            )
            return row.fetchone()[0]  # type: ignore[index]

    # -- objects -------------------------------------------------------------------------

    def objects_to_delete(self, limit: int = 1000) -> list[str]:
        """Objects no row uses any more."""
        rows = self._query(
            "SELECT object_key FROM objects WHERE used_bytes = 0 ORDER BY object_id LIMIT %s",
            (limit,),
        )
        return [key for (key,) in rows]

    def forget_objects(self, keys: Sequence[str]) -> None:
        """Forget objects the collector deleted from the store (only unused ones)."""
        self._query(
            "DELETE FROM objects WHERE object_key = ANY(%s) AND used_bytes = 0 "
            "AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.object_id = objects.object_id) "
            "RETURNING object_id",
            (list(keys),),
        )

    def known_objects(self, keys: Sequence[str]) -> set[str]:
        rows = self._query(
            "SELECT object_key FROM objects WHERE object_key = ANY(%s)", (list(keys),)
        )
        return {key for (key,) in rows}
