"""``rustka check`` for diskless topics: a cluster's catalog against its objects
(docs/diskless.md, "Checking a cluster").

Reads only: one read-only snapshot of the catalog, one listing of the bucket, one GET
of each object a payload row points into. Nothing here writes a row or an object, so
it is safe on a live cluster; what a live cluster does meanwhile is told apart from
damage:

- the catalog is read first and the bucket listed afterwards, so every object the
  snapshot knows was uploaded before the listing began;
- the only objects deleted meanwhile are those no row used any more (rows go first,
  then the collector deletes the objects), so an object missing from the store is a
  problem only if a row still points into it when the catalog is asked again;
- an object in the store the snapshot does not know is an orphan (a note, never a
  problem: the collector deletes it after its grace period) unless the catalog knows
  it when asked again (committed since the snapshot).

What is checked, in the terms of ``catalog.sql``: each topic has its partitions
0..n-1; each partition's payload rows cover its offsets from the log start to the high
watermark with no gap and no overlap, and their sizes add up to its ``size_bytes``;
each object is in the store with the size the catalog recorded, and its ``used_bytes``
is the sum of the rows pointing into it; each row's byte range lies inside its object,
and the bytes there are whole RecordBatch v2 batches with good CRCs whose records
parse and add up to the row's offsets, of the row's producer.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rustka.errors import CorruptBatch, InvalidBatch
from rustka.record.batch import crc_ok, decode_records, parse_header
from rustka.storage.diskless.catalog import Catalog
from rustka.storage.diskless.object_store import ObjectMissing, ObjectStore
from rustka.storage.diskless.wal_object import object_key_time_ms
from rustka.storage.inspect import Problem, Report

__all__ = ["ClusterReport", "StoredPayload", "payload_problems", "verify_cluster"]

COLLECTOR_GRACE_MS = 10 * 60 * 1000
"""The collector's grace period for orphans (DisklessEngine.orphan_grace_ms)."""


@dataclass(frozen=True, slots=True)
class StoredPayload:
    """One payload row of the catalog."""

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
        return f"{self.topic}/{self.partition} offsets {self.base_offset}..{self.last_offset}"


@dataclass
class ClusterReport(Report):
    """What the check found; ``files_checked`` counts the objects read."""

    partitions_checked: int = 0
    payloads_checked: int = 0
    objects_listed: int = 0
    orphans: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        result = super().as_json()
        result.update(
            partitions_checked=self.partitions_checked,
            payloads_checked=self.payloads_checked,
            objects_listed=self.objects_listed,
            orphans=self.orphans,
        )
        return result

    def summary(self) -> str:
        verdict = "no problems" if not self.problems else f"{len(self.problems)} problem(s)"
        return (
            f"checked {self.partitions_checked} partitions, {self.payloads_checked} payloads "
            f"in {self.files_checked} objects ({self.objects_listed} listed): {verdict}"
        )


def verify_cluster(
    catalog: Catalog,
    store: ObjectStore,
    *,
    now_ms: int | None = None,
    orphan_grace_ms: int = COLLECTOR_GRACE_MS,
) -> ClusterReport:
    """Check the catalog against the store; see the module docstring. Raises
    `StorageError` (`CatalogUnavailable`, `ObjectStoreUnavailable`) when either cannot
    be read at all: then nothing was checked."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    report = ClusterReport()
    snapshot = catalog.verification_snapshot()
    listed = {key: (size, modified) for key, size, modified in store.list_objects()}
    report.objects_listed = len(listed)
    payloads = [StoredPayload(*row) for row in snapshot["batches"]]
    report.payloads_checked = len(payloads)
    objects = {key: (size, used) for key, size, used, _created in snapshot["objects"]}

    _check_topics(snapshot["topics"], snapshot["partitions"], report)
    _check_partitions(snapshot["partitions"], payloads, report)
    gone = _check_objects(objects, listed, payloads, report)
    gone |= _check_payloads(store, objects, listed, payloads, report)
    _report_missing(catalog, gone, payloads, report)
    _report_orphans(catalog, objects, listed, now, orphan_grace_ms, report)
    return report


def _check_topics(
    topics: Sequence[tuple[Any, ...]], partitions: Sequence[tuple[Any, ...]], report: Report
) -> None:
    have: dict[str, list[int]] = defaultdict(list)
    for topic, partition, *_ in partitions:
        have[topic].append(partition)
    for name, count in topics:
        if sorted(have.get(name, [])) != list(range(count)):
            report.problems.append(
                Problem(
                    f"topic {name}",
                    None,
                    f"has {count} partitions, but the catalog has rows for partitions "
                    f"{sorted(have.get(name, []))}",
                )
            )


def _check_partitions(
    partitions: Sequence[tuple[Any, ...]], payloads: Sequence[StoredPayload], report: ClusterReport
) -> None:
    """Offsets from log start to high watermark covered exactly once; sizes add up."""
    rows: dict[tuple[str, int], list[StoredPayload]] = defaultdict(list)
    for payload in payloads:  # in (topic, partition, base offset) order
        rows[(payload.topic, payload.partition)].append(payload)
    for topic, partition, log_start, high_watermark, size_bytes in partitions:
        report.partitions_checked += 1
        where = f"{topic}/{partition}"
        mine = rows.get((topic, partition), [])
        problems = report.problems
        if not 0 <= log_start <= high_watermark:
            problems.append(
                Problem(where, None, f"log start {log_start} is not in 0..{high_watermark}")
            )
            continue
        used = sum(p.byte_size for p in mine)
        if used != size_bytes:
            problems.append(
                Problem(where, None, f"size_bytes is {size_bytes}, its payloads hold {used}")
            )
        live = [p for p in mine if p.last_offset >= log_start]
        below = len(mine) - len(live)
        if below:
            report.notes.append(
                f"{where}: {below} payload row(s) wholly below the log start {log_start}"
            )
        expected = log_start
        for i, payload in enumerate(live):
            if payload.last_offset < payload.base_offset:
                problems.append(Problem(where, None, f"{payload.where}: the range is empty"))
                continue
            if payload.base_offset > expected:
                after = "the log start" if i == 0 else "the payload before"
                problems.append(
                    Problem(
                        where,
                        None,
                        f"offsets {expected}..{payload.base_offset - 1} are missing: "
                        f"no payload holds them between {after} and {payload.where}",
                    )
                )
            elif payload.base_offset < expected and i > 0:
                problems.append(
                    Problem(
                        where,
                        None,
                        f"{payload.where} overlaps the payload before it, which ends at "
                        f"{expected - 1}",
                    )
                )
            expected = max(expected, payload.last_offset + 1)
        if expected < high_watermark:
            problems.append(
                Problem(
                    where,
                    None,
                    f"offsets {expected}..{high_watermark - 1} are missing: no payload "
                    f"holds them between {'the last payload' if live else 'the log start'} "
                    f"and the high watermark {high_watermark}",
                )
            )
        elif expected > high_watermark:
            problems.append(
                Problem(
                    where,
                    None,
                    f"payloads reach offset {expected - 1}, past the high watermark "
                    f"{high_watermark}",
                )
            )


def _check_objects(
    objects: dict[str, tuple[int, int]],
    listed: dict[str, tuple[int, float]],
    payloads: Sequence[StoredPayload],
    report: Report,
) -> set[str]:
    """Each catalog object's size and used bytes; the keys absent from the store."""
    used: dict[str, int] = defaultdict(int)
    for payload in payloads:
        used[payload.object_key] += payload.byte_size
    gone: set[str] = set()
    for key, (size, used_bytes) in objects.items():
        if used_bytes != used.get(key, 0):
            report.problems.append(
                Problem(
                    key,
                    None,
                    f"used_bytes is {used_bytes}, the payload rows in it hold {used.get(key, 0)}",
                )
            )
        if key not in listed:
            gone.add(key)
        elif listed[key][0] != size:
            report.problems.append(
                Problem(key, None, f"the store holds {listed[key][0]} bytes, the catalog {size}")
            )
    return gone


def _check_payloads(
    store: ObjectStore,
    objects: dict[str, tuple[int, int]],
    listed: dict[str, tuple[int, float]],
    payloads: Sequence[StoredPayload],
    report: Report,
) -> set[str]:
    """Each row's range and bytes, reading each object once; the objects found gone."""
    by_object: dict[str, list[StoredPayload]] = defaultdict(list)
    for payload in payloads:
        by_object[payload.object_key].append(payload)
    gone: set[str] = set()
    for key, mine in by_object.items():
        if key not in listed:
            gone.add(key)
            continue
        size = min(objects[key][0], listed[key][0])
        inside = []
        for payload in mine:
            start, length = payload.byte_offset, payload.byte_size
            if start < 0 or length <= 0 or start + length > size:
                report.problems.append(
                    Problem(
                        key,
                        start,
                        f"{payload.where}: bytes {start}..{start + length - 1} are not inside "
                        f"the object's {size} bytes",
                    )
                )
            else:
                inside.append(payload)
        if not inside:
            continue
        try:
            data = store.get(key)
        except ObjectMissing:
            gone.add(key)
            continue
        report.files_checked += 1
        for payload in inside:
            chunk = data[payload.byte_offset : payload.byte_offset + payload.byte_size]
            for at, message in payload_problems(chunk, payload):
                report.problems.append(
                    Problem(key, payload.byte_offset + at, f"{payload.where}: {message}")
                )
    return gone


def payload_problems(data: bytes, payload: StoredPayload) -> list[tuple[int, str]]:
    """What is wrong with a payload's bytes, as (position in ``data``, why): they must
    be whole RecordBatch v2 batches with good CRCs and parsing records, of the row's
    producer, whose records number the row's offsets."""
    problems: list[tuple[int, str]] = []
    pos = 0
    records = 0
    max_timestamp: int | None = None
    first = True
    while pos < len(data):
        try:
            header = parse_header(data, pos)
        except InvalidBatch as e:
            problems.append((pos, f"not a RecordBatch v2: {e}"))
            return problems
        if pos + header.size > len(data):
            problems.append(
                (pos, f"a batch of {header.size} bytes runs past the payload's {len(data)}")
            )
            return problems
        if not crc_ok(data, pos, header):
            problems.append((pos, "CRC-32C mismatch"))
        else:
            try:
                count = len(decode_records(data, pos, verify=False))
            except (CorruptBatch, InvalidBatch) as e:
                problems.append((pos, f"records do not parse: {e}"))
            else:
                if count != header.record_count:
                    problems.append(
                        (pos, f"{count} records, the batch header says {header.record_count}")
                    )
        if (header.producer_id, header.producer_epoch) != (
            payload.producer_id,
            payload.producer_epoch,
        ):
            problems.append(
                (
                    pos,
                    f"producer {header.producer_id} epoch {header.producer_epoch}, the row "
                    f"says {payload.producer_id} epoch {payload.producer_epoch}",
                )
            )
        if first and header.base_sequence != payload.base_sequence:
            problems.append(
                (
                    pos,
                    f"base sequence {header.base_sequence}, the row says {payload.base_sequence}",
                )
            )
        first = False
        records += header.last_offset_delta + 1
        if max_timestamp is None or header.max_timestamp > max_timestamp:
            max_timestamp = header.max_timestamp
        pos += header.size
    wanted = payload.last_offset - payload.base_offset + 1
    if records != wanted:
        problems.append((0, f"the batches hold {records} offsets, the row {wanted}"))
    if max_timestamp is not None and max_timestamp != payload.max_timestamp:
        problems.append((0, f"max timestamp {max_timestamp}, the row says {payload.max_timestamp}"))
    return problems


def _report_missing(
    catalog: Catalog, gone: set[str], payloads: Sequence[StoredPayload], report: Report
) -> None:
    """Objects the snapshot knew and the store has not: damage if a row still uses them."""
    if not gone:
        return
    in_use = catalog.objects_in_use(sorted(gone))
    users: dict[str, list[StoredPayload]] = defaultdict(list)
    for payload in payloads:
        if payload.object_key in in_use:
            users[payload.object_key].append(payload)
    for key in sorted(gone):
        if key in in_use:
            mine = users.get(key, [])
            partitions = sorted({f"{p.topic}/{p.partition}" for p in mine})
            report.problems.append(
                Problem(
                    key,
                    None,
                    f"missing from the store; {len(mine)} payload row(s) of "
                    f"{', '.join(partitions) or 'some partition'} point into it",
                )
            )
        else:
            report.notes.append(
                f"{key}: listed in the catalog but gone from the store; no row uses it "
                "(the collector is deleting it)"
            )


def _report_orphans(
    catalog: Catalog,
    objects: dict[str, tuple[int, int]],
    listed: dict[str, tuple[int, float]],
    now_ms: int,
    grace_ms: int,
    report: ClusterReport,
) -> None:
    """Objects in the store the catalog does not know: notes, with their age."""
    foreign = 0
    unknown: list[str] = []
    for key in listed:
        if key in objects:
            continue
        if object_key_time_ms(key) is None:
            foreign += 1
        else:
            unknown.append(key)
    if unknown:
        known_now = catalog.known_objects(unknown)
        unknown = [key for key in unknown if key not in known_now]
    for key in unknown:
        size, modified = listed[key]
        age_ms = max(0, now_ms - int(modified * 1000))
        collectable = age_ms >= grace_ms
        report.orphans.append(
            {"key": key, "size": size, "age_ms": age_ms, "collectable": collectable}
        )
        when = (
            "the collector deletes it"
            if collectable
            else f"the collector deletes it once it is {format_age(grace_ms)} old, unless "
            "its commit is still on its way"
        )
        report.notes.append(
            f"orphan {key}: {size} bytes, {format_age(age_ms)} old, no catalog row knows it; {when}"
        )
    if foreign:
        report.notes.append(
            f"{foreign} object(s) under the prefix are not uploads' keys (wal/<time>-...): "
            "not the cluster's, left alone"
        )


def format_age(ms: int) -> str:
    """``2d3h``, ``4m10s``, ``900ms``: the two largest units."""
    if ms < 1000:
        return f"{ms}ms"
    seconds = ms // 1000
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or parts:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
        if len(parts) == 2:
            break
    return "".join(p for p in parts if not p.startswith("0")) or "0s"
