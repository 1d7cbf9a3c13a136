"""`rustka check` for a cluster: the catalog's rows against the bucket's objects, read
only (docs/diskless.md, "Checking a cluster").

Problems (the check fails): a partition whose rows leave a gap or an overlap between
its log start and its high watermark; an object a row points to that the store does
not have, or has at another size; a row whose bytes lie outside its object; bytes that
are not whole record batches with good CRCs, or hold another number of offsets than
the row says. Notes: objects in the store that no row knows (a crash between an
upload and its commit leaves one; the collector deletes them after its grace period),
with their age.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from rustka.record.batch import crc_ok, scan_batches
from rustka.storage.diskless.catalog import Catalog
from rustka.storage.diskless.object_store import ObjectStore
from rustka.storage.diskless.wal_object import UPLOADS_PREFIX

__all__ = ["ClusterReport", "verify_cluster"]


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


def verify_cluster(catalog: Catalog, store: ObjectStore, now: float | None = None) -> ClusterReport:
    """Check every row and object; change nothing."""
    now = time.time() if now is None else now
    report = ClusterReport()
    with catalog.session() as conn:
        bounds = conn.execute(
            "SELECT t.name, p.partition, p.log_start_offset, p.high_watermark "
            "FROM partitions p JOIN topics t USING (topic_id) ORDER BY t.name, p.partition"
        ).fetchall()
        rows = conn.execute(
            "SELECT t.name, b.partition, b.base_offset, b.last_offset, o.object_key, "
            "b.byte_offset, b.byte_size FROM batches b JOIN topics t USING (topic_id) "
            "JOIN objects o USING (object_id) ORDER BY t.name, b.partition, b.base_offset"
        ).fetchall()
        objects = dict(conn.execute("SELECT object_key, size FROM objects").fetchall())
    report.partitions, report.rows, report.objects = len(bounds), len(rows), len(objects)
    by_partition: dict[tuple[str, int], list[tuple[Any, ...]]] = {}
    for row in rows:
        by_partition.setdefault((row[0], row[1]), []).append(row)
    for topic, partition, start, end in bounds:
        _check_offsets(
            report, f"{topic}-{partition}", start, end, by_partition.get((topic, partition), [])
        )
    stored = {key: (size, modified) for key, size, modified in store.list_objects()}
    for key, size in sorted(objects.items()):
        if key not in stored:
            report.problems.append(f"object {key}: in the catalog, missing from the store")
        elif stored[key][0] != size:
            report.problems.append(
                f"object {key}: {stored[key][0]} bytes in the store, {size} in the catalog"
            )
    for key, (size, modified) in sorted(stored.items()):
        if key not in objects and key.startswith(UPLOADS_PREFIX):
            report.notes.append(
                f"object {key}: {size} bytes that no row knows, {max(0, int(now - modified))} s "
                "old (an upload whose commit never came; the collector deletes it)"
            )
    _check_bytes(report, store, rows, stored)
    return report


def _check_offsets(
    report: ClusterReport, name: str, start: int, end: int, rows: list[tuple[Any, ...]]
) -> None:
    """The rows of one partition cover its offsets from the log start to the high watermark
    once each (the first row may begin before the log start: DeleteRecords cuts inside it)."""
    if end <= start:
        if any(row[3] >= start for row in rows):
            report.problems.append(f"{name}: rows past its high watermark {end}")
        return
    live = [row for row in rows if row[3] >= start]
    if not live:
        report.problems.append(f"{name}: offsets {start}..{end - 1} have no rows")
        return
    if live[0][2] > start:
        report.problems.append(f"{name}: offsets {start}..{live[0][2] - 1} have no rows")
    for before, after in itertools.pairwise(live):
        if after[2] != before[3] + 1:
            if after[2] > before[3] + 1:
                report.problems.append(f"{name}: offsets {before[3] + 1}..{after[2] - 1} missing")
            else:
                report.problems.append(f"{name}: offsets {after[2]}..{before[3]} stored twice")
    if live[-1][3] != end - 1:
        report.problems.append(
            f"{name}: rows end at offset {live[-1][3]}, the high watermark is {end}"
        )


def _check_bytes(
    report: ClusterReport,
    store: ObjectStore,
    rows: list[tuple[Any, ...]],
    stored: dict[str, tuple[int, float]],
) -> None:
    """Each row's bytes: inside its object, whole batches with good CRCs, as many offsets
    as the row says. Each object is read once."""
    by_object: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        by_object.setdefault(row[4], []).append(row)
    for key, its_rows in sorted(by_object.items()):
        if key not in stored:
            continue
        data = store.get(key)
        for topic, partition, base, last, _key, offset, size in its_rows:
            where = f"{topic}-{partition} offsets {base}..{last} in {key}"
            if offset < 0 or offset + size > len(data) or size <= 0:
                report.problems.append(
                    f"{where}: bytes {offset}..{offset + size} outside the object's {len(data)}"
                )
                continue
            payload = data[offset : offset + size]
            found, end = scan_batches(payload)
            if end != len(payload) or not found:
                report.problems.append(f"{where}: not whole record batches (stops at byte {end})")
                continue
            if not all(crc_ok(payload, pos, header) for pos, header in found):
                report.problems.append(f"{where}: a batch fails its CRC")
                continue
            count = sum(header.last_offset_delta + 1 for _, header in found)
            if count != last - base + 1:
                report.problems.append(f"{where}: the batches hold {count} offsets")
