"""`rustka check` for a cluster: the catalog's rows against the bucket's objects, read
only (docs/diskless.md, "Checking a cluster").

Problems (the check fails): a topic without exactly its partitions 0..n-1; a partition
whose rows leave a gap or an overlap between its log start and its high watermark, or
whose ``size_bytes`` is not the sum of its rows; an object a row points to that the
store does not have, or has at another size; an object whose ``used_bytes`` is not the
sum of its rows; a row whose bytes lie outside its object; bytes that are not whole
record batches with good CRCs and records that parse, of the row's producer, holding
as many offsets as the row says. Notes: objects in the store that no row knows (a crash
between an upload and its commit leaves one; the collector deletes them after its
grace period), with their age.

Nothing here writes a row or an object, so the check is safe on a live cluster, and
what a live cluster does while it runs is not taken for damage:

- the catalog is read first, in one read-only REPEATABLE READ snapshot, and the bucket
  listed afterwards, so every object the snapshot knows was uploaded before the listing;
- objects are deleted only once no row uses them (rows go first, then the collector
  deletes the object, then forgets it), so an object missing from the store is a
  problem only if a row still points into it when the catalog is asked again;
- an object the snapshot does not know is an orphan only if the catalog does not know
  it when asked again (it may have been committed since).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from psycopg import errors as pg_errors

from rustka.errors import CorruptBatch, InvalidBatch, StorageError
from rustka.record.batch import crc_ok, decode_records, parse_header
from rustka.storage.diskless.catalog import Catalog
from rustka.storage.diskless.object_store import ObjectMissing, ObjectStore
from rustka.storage.diskless.wal_object import UPLOADS_PREFIX, object_key_time_ms

__all__ = ["ClusterReport", "Row", "payload_problems", "verify_cluster"]

SNAPSHOT_TIMEOUT_S = 300
"""The snapshot's statement timeout: a large catalog takes longer than a broker's commit."""


class Row(NamedTuple):
    """One payload row of the catalog, as the snapshot reads it."""

    topic: str
    partition: int
    base_offset: int
    last_offset: int
    object_key: str
    byte_offset: int
    byte_size: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int

    @property
    def where(self) -> str:
        return (
            f"{self.topic}-{self.partition} offsets {self.base_offset}..{self.last_offset} "
            f"in {self.object_key}"
        )


@dataclass
class ClusterReport:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    partitions: int = 0
    rows: int = 0
    objects: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": not self.problems,
            "problems": self.problems,
            "notes": self.notes,
            "partitions": self.partitions,
            "rows": self.rows,
            "objects": self.objects,
        }


@dataclass
class _Snapshot:
    topics: list[tuple[str, int]]
    bounds: list[tuple[str, int, int, int, int]]
    rows: list[Row]
    objects: dict[str, tuple[int, int]]
    """key -> (size, used bytes)"""


def verify_cluster(catalog: Catalog, store: ObjectStore, now: float | None = None) -> ClusterReport:
    """Check every row and object; change nothing. `StorageError` when the catalog or
    the store cannot be read at all (then nothing was checked)."""
    now = time.time() if now is None else now
    report = ClusterReport()
    snap = _snapshot(catalog)
    report.partitions, report.rows, report.objects = (
        len(snap.bounds),
        len(snap.rows),
        len(snap.objects),
    )
    _check_topics(report, snap)
    by_partition: dict[tuple[str, int], list[Row]] = defaultdict(list)
    for row in snap.rows:
        by_partition[(row.topic, row.partition)].append(row)
    for topic, partition, start, end, size in snap.bounds:
        mine = by_partition.get((topic, partition), [])
        name = f"{topic}-{partition}"
        _check_offsets(report, name, start, end, mine)
        held = sum(row.byte_size for row in mine)
        if held != size:
            report.problems.append(f"{name}: size_bytes is {size}, its rows hold {held}")
    stored = {key: (size, modified) for key, size, modified in store.list_objects()}
    gone = _check_objects(report, snap, stored)
    gone |= _check_bytes(report, store, snap.rows, stored)
    _report_gone(report, catalog, gone)
    _report_orphans(report, catalog, snap, stored, now)
    return report


def _snapshot(catalog: Catalog) -> _Snapshot:
    """Topics, bounds, rows and objects as they were together at one moment."""
    try:
        with catalog.session() as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            conn.execute(
                "SELECT set_config('statement_timeout', %s, true)",
                (str(SNAPSHOT_TIMEOUT_S * 1000),),
            )
            topics = conn.execute("SELECT name, partitions FROM topics ORDER BY name").fetchall()
            bounds = conn.execute(
                "SELECT t.name, p.partition, p.log_start_offset, p.high_watermark, p.size_bytes "
                "FROM partitions p JOIN topics t USING (topic_id) ORDER BY t.name, p.partition"
            ).fetchall()
            rows = conn.execute(
                "SELECT t.name, b.partition, b.base_offset, b.last_offset, o.object_key, "
                "b.byte_offset, b.byte_size, b.max_timestamp, b.producer_id, b.producer_epoch, "
                "b.base_sequence FROM batches b JOIN topics t USING (topic_id) "
                "JOIN objects o USING (object_id) ORDER BY t.name, b.partition, b.base_offset"
            ).fetchall()
            objects = conn.execute("SELECT object_key, size, used_bytes FROM objects").fetchall()
    except pg_errors.UndefinedTable as e:
        raise StorageError(
            f"the database holds no diskless catalog (no broker has started on it): {e}"
        ) from e
    return _Snapshot(
        [(name, count) for name, count in topics],
        [(t, p, start, end, size) for t, p, start, end, size in bounds],
        [Row(*row) for row in rows],
        {key: (size, used) for key, size, used in objects},
    )


def _check_topics(report: ClusterReport, snap: _Snapshot) -> None:
    have: dict[str, list[int]] = defaultdict(list)
    for topic, partition, *_ in snap.bounds:
        have[topic].append(partition)
    for name, count in snap.topics:
        if sorted(have.get(name, [])) != list(range(count)):
            report.problems.append(
                f"topic {name}: {count} partitions, but rows for partitions "
                f"{sorted(have.get(name, []))}"
            )


def _check_offsets(report: ClusterReport, name: str, start: int, end: int, rows: list[Row]) -> None:
    """The rows of one partition cover its offsets from the log start to the high watermark
    once each (the first row may begin before the log start: DeleteRecords cuts inside it)."""
    if not 0 <= start <= end:
        report.problems.append(f"{name}: log start {start} is not in 0..{end}")
        return
    if end == start:
        if any(row.last_offset >= start for row in rows):
            report.problems.append(f"{name}: rows past its high watermark {end}")
        return
    live = [row for row in rows if row.last_offset >= start]
    if not live:
        report.problems.append(f"{name}: offsets {start}..{end - 1} have no rows")
        return
    if live[0].base_offset > start:
        report.problems.append(f"{name}: offsets {start}..{live[0].base_offset - 1} have no rows")
    expected = live[0].last_offset + 1
    for row in live[1:]:
        if row.base_offset > expected:
            report.problems.append(f"{name}: offsets {expected}..{row.base_offset - 1} missing")
        elif row.base_offset < expected:
            report.problems.append(
                f"{name}: offsets {row.base_offset}..{min(expected - 1, row.last_offset)} "
                "stored twice"
            )
        expected = max(expected, row.last_offset + 1)
    if expected != end:
        report.problems.append(
            f"{name}: rows end at offset {expected - 1}, the high watermark is {end}"
        )


def _check_objects(
    report: ClusterReport, snap: _Snapshot, stored: dict[str, tuple[int, float]]
) -> set[str]:
    """Each catalog object's size and used bytes; the keys the store does not have."""
    used: dict[str, int] = defaultdict(int)
    for row in snap.rows:
        used[row.object_key] += row.byte_size
    gone: set[str] = set()
    for key, (size, used_bytes) in sorted(snap.objects.items()):
        if used_bytes != used.get(key, 0):
            report.problems.append(
                f"object {key}: used_bytes is {used_bytes}, its rows hold {used.get(key, 0)}"
            )
        if key not in stored:
            gone.add(key)
        elif stored[key][0] != size:
            report.problems.append(
                f"object {key}: {stored[key][0]} bytes in the store, {size} in the catalog"
            )
    return gone


def _check_bytes(
    report: ClusterReport,
    store: ObjectStore,
    rows: list[Row],
    stored: dict[str, tuple[int, float]],
) -> set[str]:
    """Each row's bytes: inside its object, whole batches as `payload_problems` wants
    them. Each object is read once; the objects found gone meanwhile."""
    by_object: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        by_object[row.object_key].append(row)
    gone: set[str] = set()
    for key, its_rows in sorted(by_object.items()):
        if key not in stored:
            continue
        try:
            data = store.get(key)
        except ObjectMissing:
            gone.add(key)
            continue
        for row in its_rows:
            offset, size = row.byte_offset, row.byte_size
            if offset < 0 or offset + size > len(data) or size <= 0:
                report.problems.append(
                    f"{row.where}: bytes {offset}..{offset + size} outside the object's {len(data)}"
                )
                continue
            for problem in payload_problems(data[offset : offset + size], row):
                report.problems.append(f"{row.where}: {problem}")
    return gone


def payload_problems(payload: bytes, row: Row) -> list[str]:
    """What is wrong with a row's bytes: they must be whole RecordBatch v2 batches with
    good CRCs and records that parse, of the row's producer, holding as many offsets as
    the row says, with the row's max timestamp."""
    problems: list[str] = []
    pos = 0
    count = 0
    max_timestamp: int | None = None
    while pos < len(payload):
        try:
            header = parse_header(payload, pos)
        except InvalidBatch:
            return [*problems, f"not whole record batches (stops at byte {pos})"]
        if pos + header.size > len(payload):
            return [*problems, f"not whole record batches (stops at byte {pos})"]
        if not crc_ok(payload, pos, header):
            problems.append(f"a batch fails its CRC (at byte {pos})")
        else:
            try:
                records = len(decode_records(payload, pos, verify=False))
            except (CorruptBatch, InvalidBatch) as e:
                problems.append(f"the records at byte {pos} do not parse: {e}")
            else:
                if records != header.record_count:
                    problems.append(
                        f"{records} records at byte {pos}, its header says {header.record_count}"
                    )
        if (header.producer_id, header.producer_epoch) != (row.producer_id, row.producer_epoch):
            problems.append(
                f"producer {header.producer_id} epoch {header.producer_epoch} at byte {pos}, "
                f"the row says {row.producer_id} epoch {row.producer_epoch}"
            )
        if pos == 0 and header.base_sequence != row.base_sequence:
            problems.append(
                f"base sequence {header.base_sequence}, the row says {row.base_sequence}"
            )
        count += header.last_offset_delta + 1
        if max_timestamp is None or header.max_timestamp > max_timestamp:
            max_timestamp = header.max_timestamp
        pos += header.size
    if count != row.last_offset - row.base_offset + 1:
        problems.append(f"the batches hold {count} offsets")
    if max_timestamp is not None and max_timestamp != row.max_timestamp:
        problems.append(f"max timestamp {max_timestamp}, the row says {row.max_timestamp}")
    return problems


def _report_gone(report: ClusterReport, catalog: Catalog, gone: set[str]) -> None:
    """Objects the snapshot knew and the store has not: damage if a row still uses them,
    else the collector at work (it deletes an unused object, then forgets it)."""
    if not gone:
        return
    with catalog.session() as conn:
        in_use = {
            key
            for (key,) in conn.execute(
                "SELECT DISTINCT o.object_key FROM objects o JOIN batches b USING (object_id) "
                "WHERE o.object_key = ANY(%s)",
                (sorted(gone),),
            ).fetchall()
        }
    for key in sorted(gone):
        if key in in_use:
            report.problems.append(f"object {key}: in the catalog, missing from the store")
        else:
            report.notes.append(
                f"object {key}: in the catalog, gone from the store, used by no row "
                "(the collector is deleting it)"
            )


def _report_orphans(
    report: ClusterReport,
    catalog: Catalog,
    snap: _Snapshot,
    stored: dict[str, tuple[int, float]],
    now: float,
) -> None:
    """Uploads' objects no row knows: notes with their age."""
    unknown = [
        key
        for key in sorted(stored)
        if key not in snap.objects
        and key.startswith(UPLOADS_PREFIX)
        and object_key_time_ms(key) is not None
    ]
    if unknown:
        committed_since = catalog.known_objects(unknown)
        unknown = [key for key in unknown if key not in committed_since]
    for key in unknown:
        size, modified = stored[key]
        report.notes.append(
            f"object {key}: {size} bytes that no row knows, {max(0, int(now - modified))} s "
            "old (an upload whose commit never came; the collector deletes it)"
        )
