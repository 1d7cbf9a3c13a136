"""Read-only inspection of a data dir: ``rustka dump`` and ``rustka check`` (docs/operations.md).

Everything here opens files read-only and never goes through
``PartitionLog.open`` or ``Segment.open``, which repair what they find: an
operator checking a damaged data dir must see the damage as it is, and a
check must change no byte. File formats are the ones docs/architecture.md
describes: ``.log`` segments of RecordBatch v2, ``.index`` entries of 8 bytes
(u32 relative offset, u32 position), ``.timeindex`` entries of 12 bytes
(i64 timestamp, u32 relative offset), the ``recovery-point`` file (u64 offset,
u32 CRC-32C of it), the log cleaner's ``cleaner-checkpoint`` and ``cleaner-swap``
files (rustka/storage/log_files.py), the ``log-start-offset`` file DeleteRecords writes
(u64 offset, u32 CRC-32C; it must not lie past the log end), each topic's ``topic-config`` file (its
own Kafka topic configs, checked by their declarations in rustka/config.py as
the broker checks them when it opens the topic) and the ``.clean-shutdown``
marker. Offsets
may skip ahead between batches only in the segments the cleaner wrote, those
below the checkpoint's ``cleaned_below``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rustka.errors import CorruptBatch, InvalidBatch
from rustka.names import OFFSETS_TOPIC
from rustka.record.batch import BatchHeader, crc_ok, decode_records, parse_header
from rustka.record.compression import codec_name
from rustka.record.control import ABORT, COMMIT, marker_type
from rustka.record.header import CODEC_MASK, CONTROL_BIT, TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT
from rustka.storage.log_files import (
    CLEAN_SHUTDOWN_MARKER,
    CLEANER_CHECKPOINT_FILE,
    CLEANER_SWAP_FILE,
    INDEX_SUFFIX,
    LOG_START_FILE,
    LOG_SUFFIX,
    RECOVERY_POINT_FILE,
    TIME_INDEX_SUFFIX,
    TOPIC_CONFIG_FILE,
    DamagedFile,
    DamagedRecoveryPoint,
    base_offset_of,
    decode_cleaner_checkpoint,
    decode_cleaner_swap,
    decode_log_start,
    decode_recovery_point,
    decode_topic_config,
    log_name,
)
from rustka.storage.offset_index import INDEX_ENTRY
from rustka.storage.offsets import decode_key, decode_value
from rustka.storage.time_index import TIME_INDEX_ENTRY
from rustka.storage.txn_log import TRANSACTIONS_DIR

__all__ = [
    "Problem",
    "Report",
    "TopicConfigCheck",
    "check_data_dir",
    "dump_path",
    "dump_segment",
    "format_dump",
]

TopicConfigCheck = Callable[[Mapping[str, str]], str | None]
"""What is wrong with a topic's own configs, or None. Which configs a broker accepts is
the configuration layer's knowledge, above storage, so the caller hands it in."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong: the file, the byte position in it (None for the whole file), why."""

    file: str
    position: int | None
    message: str

    def __str__(self) -> str:
        where = self.file if self.position is None else f"{self.file} at byte {self.position}"
        return f"{where}: {self.message}"


@dataclass
class Report:
    """What ``check`` found; ``problems`` decide the exit status, ``notes`` do not."""

    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    files_checked: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": not self.problems,
            "files_checked": self.files_checked,
            "problems": [
                {"file": p.file, "position": p.position, "message": p.message}
                for p in self.problems
            ],
            "notes": self.notes,
        }


# --------------------------------------------------------------------------- dump


def dump_path(path: Path) -> dict[str, Any]:
    """Everything in one segment, index or time index file, as plain data for text or JSON."""
    path = Path(path)
    name = path.name
    if name.endswith(LOG_SUFFIX):
        return dump_segment(path)
    if name.endswith(TIME_INDEX_SUFFIX):
        return _dump_time_index(path)
    if name.endswith(INDEX_SUFFIX):
        return _dump_index(path)
    raise ValueError(f"{path}: not a .log, .index or .timeindex file")


def _header_json(pos: int, header: BatchHeader, ok: bool) -> dict[str, Any]:
    attributes = header.attributes
    return {
        "position": pos,
        "base_offset": header.base_offset,
        "last_offset": header.last_offset,
        "size": header.size,
        "batch_length": header.batch_length,
        "partition_leader_epoch": header.partition_leader_epoch,
        "magic": header.magic,
        "crc": header.crc,
        "crc_ok": ok,
        "attributes": attributes,
        "compression": codec_name(attributes & CODEC_MASK),
        "timestamp_type": "LogAppendTime" if attributes & TIMESTAMP_TYPE_BIT else "CreateTime",
        "transactional": bool(attributes & TRANSACTIONAL_BIT),
        "control": bool(attributes & CONTROL_BIT),
        "base_timestamp": header.base_timestamp,
        "max_timestamp": header.max_timestamp,
        "producer_id": header.producer_id,
        "producer_epoch": header.producer_epoch,
        "base_sequence": header.base_sequence,
        "record_count": header.record_count,
    }


def dump_segment(path: Path) -> dict[str, Any]:
    """Every batch (header fields, CRC status) and record (offset, timestamp, sizes)."""
    data = _read(path)
    batches: list[dict[str, Any]] = []
    problems: list[Problem] = []
    pos = 0
    while pos < len(data):
        try:
            header = parse_header(data, pos)
        except InvalidBatch as exc:
            problems.append(Problem(str(path), pos, f"invalid batch header: {exc}"))
            break
        if pos + header.size > len(data):
            entry = _header_json(pos, header, False)
            entry["error"] = f"incomplete: {len(data) - pos} of {header.size} bytes present"
            batches.append(entry)
            problems.append(Problem(str(path), pos, entry["error"]))
            break
        ok = crc_ok(data, pos, header)
        entry = _header_json(pos, header, ok)
        try:
            records = decode_records(data, pos, verify=False)
        except (CorruptBatch, InvalidBatch) as exc:
            entry["error"] = str(exc)
            problems.append(Problem(str(path), pos, str(exc)))
        else:
            if header.attributes & CONTROL_BIT:
                kind = marker_type(data, pos)
                entry["marker"] = None if kind is None else {COMMIT: "COMMIT", ABORT: "ABORT"}[kind]
            entry["records"] = [
                {
                    "offset": r.offset,
                    "timestamp": r.timestamp,
                    "key_size": None if r.key is None else len(r.key),
                    "value_size": None if r.value is None else len(r.value),
                    "headers": [k for k, _ in r.headers],
                }
                for r in records
            ]
        if not ok:
            problems.append(Problem(str(path), pos, "CRC-32C mismatch"))
        batches.append(entry)
        pos += header.size
    return {
        "file": str(path),
        "kind": "segment",
        "size": len(data),
        "batches": batches,
        "problems": [str(p) for p in problems],
    }


def _dump_index(path: Path) -> dict[str, Any]:
    data = _read(path)
    base = base_offset_of(path.name, INDEX_SUFFIX) or 0
    usable = len(data) - len(data) % INDEX_ENTRY.size
    entries = [
        {"relative_offset": rel, "offset": base + rel, "position": pos}
        for rel, pos in INDEX_ENTRY.iter_unpack(data[:usable])
    ]
    return {
        "file": str(path),
        "kind": "index",
        "base_offset": base,
        "entries": entries,
        "trailing_bytes": len(data) - usable,
    }


def _dump_time_index(path: Path) -> dict[str, Any]:
    data = _read(path)
    base = base_offset_of(path.name, TIME_INDEX_SUFFIX) or 0
    usable = len(data) - len(data) % TIME_INDEX_ENTRY.size
    entries = [
        {"timestamp": ts, "relative_offset": rel, "offset": base + rel}
        for ts, rel in TIME_INDEX_ENTRY.iter_unpack(data[:usable])
    ]
    return {
        "file": str(path),
        "kind": "timeindex",
        "base_offset": base,
        "entries": entries,
        "trailing_bytes": len(data) - usable,
    }


def format_dump(dump: dict[str, Any]) -> str:
    """The text form of ``dump_path``'s result: one line per batch, record or entry."""
    lines = [f"{dump['kind']} {dump['file']}"]
    if dump["kind"] == "segment":
        for b in dump["batches"]:
            lines.append(
                f"batch position {b['position']} offsets {b['base_offset']}..{b['last_offset']} "
                f"size {b['size']} records {b['record_count']} crc {b['crc']:#010x} "
                f"{'ok' if b['crc_ok'] else 'MISMATCH'} compression {b['compression']} "
                f"base_timestamp {b['base_timestamp']} max_timestamp {b['max_timestamp']} "
                f"producer_id {b['producer_id']} producer_epoch {b['producer_epoch']} "
                f"base_sequence {b['base_sequence']}"
                + (" transactional" if b["transactional"] else "")
                + (" control" if b["control"] else "")
                + (f" {b['marker']}" if b.get("marker") else "")
            )
            for r in b.get("records", []):
                lines.append(
                    f"  offset {r['offset']} timestamp {r['timestamp']} "
                    f"key_size {_size(r['key_size'])} value_size {_size(r['value_size'])}"
                    + (f" headers {','.join(r['headers'])}" if r["headers"] else "")
                )
            if "error" in b:
                lines.append(f"  error: {b['error']}")
        lines.extend(f"problem: {p}" for p in dump["problems"])
    elif dump["kind"] == "index":
        for e in dump["entries"]:
            lines.append(
                f"offset {e['offset']} (relative {e['relative_offset']}) position {e['position']}"
            )
    else:
        for e in dump["entries"]:
            lines.append(
                f"timestamp {e['timestamp']} offset {e['offset']} (relative {e['relative_offset']})"
            )
    if dump.get("trailing_bytes"):
        lines.append(f"problem: {dump['trailing_bytes']} trailing bytes (not a whole entry)")
    return "\n".join(lines)


def _size(value: int | None) -> str:
    return "null" if value is None else str(value)


def _read(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# --------------------------------------------------------------------------- check


def check_data_dir(data_dir: Path, topic_config_problem: TopicConfigCheck | None = None) -> Report:
    """Verify every segment, index, time index and checkpoint under ``data_dir``; read-only.

    Each topic's config file is checked for damage, and its configs with
    ``topic_config_problem`` when one is given.
    """
    data_dir = Path(data_dir)
    report = Report()
    if not data_dir.is_dir():
        report.problems.append(Problem(str(data_dir), None, "not a directory"))
        return report
    partitions: list[Path] = []
    offsets_dir = data_dir / OFFSETS_TOPIC
    txn_dir = data_dir / TRANSACTIONS_DIR
    for entry in sorted(data_dir.iterdir()):
        if entry.name in (OFFSETS_TOPIC, TRANSACTIONS_DIR) or not entry.is_dir():
            continue
        _check_topic_config(entry, report, topic_config_problem)
        partitions.extend(
            sub for sub in sorted(entry.iterdir()) if sub.is_dir() and sub.name.isdigit()
        )
    has_logs = bool(partitions) or offsets_dir.is_dir()
    if has_logs and not (data_dir / CLEAN_SHUTDOWN_MARKER).exists():
        report.notes.append(
            f"{data_dir / CLEAN_SHUTDOWN_MARKER} is absent: the broker is running or did not "
            f"stop cleanly, so its next start re-checks the active segments"
        )
    for directory in partitions:
        _check_partition(directory, report, commits=False)
    if offsets_dir.is_dir():
        _check_partition(offsets_dir, report, commits=True)
    if txn_dir.is_dir():
        _check_partition(txn_dir, report, commits=False)
    return report


def _check_topic_config(
    directory: Path, report: Report, topic_config_problem: TopicConfigCheck | None
) -> None:
    """The topic's own configs: an intact file, and every config one the broker accepts."""
    path = directory / TOPIC_CONFIG_FILE
    leftover = path.with_name(TOPIC_CONFIG_FILE + ".tmp")
    if leftover.exists():
        report.notes.append(
            f"{leftover}: an interrupted config change (removed at startup; the topic keeps "
            f"the configs of {path.name})"
        )
    if not path.exists():
        return
    report.files_checked += 1
    try:
        configs = decode_topic_config(_read(path))
    except DamagedFile as e:
        report.problems.append(Problem(str(path), None, f"damaged: {e}"))
        return
    problem = None if topic_config_problem is None else topic_config_problem(configs)
    if problem is not None:
        report.problems.append(Problem(str(path), None, problem))


def _check_partition(directory: Path, report: Report, *, commits: bool) -> None:
    names = os.listdir(directory)
    bases = sorted(b for b in (base_offset_of(n, LOG_SUFFIX) for n in names) if b is not None)
    cleaned_below = _check_cleaner_files(directory, names, report)
    previous_end: int | None = None
    for base in bases:
        log = directory / log_name(base)
        if previous_end is not None and base < previous_end:
            report.problems.append(
                Problem(
                    str(log),
                    None,
                    f"base offset {base} overlaps the previous segment, "
                    f"which ends at offset {previous_end}",
                )
            )
        elif previous_end is not None and base > previous_end:
            report.notes.append(
                f"{log}: offsets {previous_end}..{base - 1} are missing "
                f"(a gap recovery, retention or the log cleaner left)"
            )
        starts, end, size = _check_segment(
            log, base, report, commits=commits, gaps=base < cleaned_below
        )
        previous_end = end
        index = log.with_suffix(INDEX_SUFFIX)
        if index.exists():
            _check_index(index, base, starts, size, report)
        time_index = log.with_suffix(TIME_INDEX_SUFFIX)
        if time_index.exists():
            _check_time_index(time_index, base, starts, end, report)
    for name in names:
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            b = base_offset_of(name, suffix)
            if b is not None and b not in bases:
                report.notes.append(
                    f"{directory / name}: no matching {LOG_SUFFIX} (ignored at startup and removed)"
                )
    _check_recovery_point(directory, previous_end, report)
    _check_log_start(directory, bases[0] if bases else None, previous_end, report)


def _check_cleaner_files(directory: Path, names: list[str], report: Report) -> int:
    """The cleaner checkpoint's ``cleaned_below`` (0 if there is none); its damage and an
    unfinished swap are reported."""
    cleaned_below = 0
    for name, decode in (
        (CLEANER_CHECKPOINT_FILE, decode_cleaner_checkpoint),
        (CLEANER_SWAP_FILE, decode_cleaner_swap),
    ):
        if name not in names:
            continue
        report.files_checked += 1
        path = directory / name
        try:
            decoded = decode(_read(path))
        except DamagedFile as e:
            report.problems.append(Problem(str(path), None, str(e)))
            continue
        if name == CLEANER_SWAP_FILE:
            report.notes.append(
                f"{path}: a cleaned segment at offset {decoded.base} was being swapped in "
                f"for the segments at {list(decoded.replaced)}; the next start finishes it"
            )
        cleaned_below = max(cleaned_below, decoded.cleaned_below)
    return cleaned_below


def _check_segment(
    path: Path, base: int, report: Report, *, commits: bool, gaps: bool = False
) -> tuple[dict[int, int], int, int]:
    """CRCs, the offset chain and every record; returns (batch start -> base offset, end, size).

    With ``gaps`` (a segment the log cleaner wrote) a batch may start past the
    previous batch's end, never before it.
    """
    report.files_checked += 1
    data = _read(path)
    starts: dict[int, int] = {}
    expected = base
    pos = 0
    where = str(path)
    while pos < len(data):
        try:
            header = parse_header(data, pos)
        except InvalidBatch as exc:
            report.problems.append(Problem(where, pos, f"invalid batch header: {exc}"))
            break
        if pos + header.size > len(data):
            report.problems.append(
                Problem(
                    where,
                    pos,
                    f"batch of {header.size} bytes is cut off: the file ends "
                    f"{pos + header.size - len(data)} bytes early",
                )
            )
            break
        if header.base_offset != expected and not (gaps and header.base_offset > expected):
            report.problems.append(
                Problem(
                    where,
                    pos,
                    f"base offset {header.base_offset}, expected {expected} "
                    f"(offsets are not contiguous)",
                )
            )
        if header.last_offset_delta < 0:
            report.problems.append(Problem(where, pos, "negative last offset delta"))
        if not crc_ok(data, pos, header):
            report.problems.append(Problem(where, pos, "CRC-32C mismatch"))
        else:
            try:
                records = decode_records(data, pos, verify=False)
            except (CorruptBatch, InvalidBatch) as exc:
                report.problems.append(Problem(where, pos, f"records do not parse: {exc}"))
            else:
                if len(records) != header.record_count:
                    report.problems.append(
                        Problem(
                            where, pos, f"{len(records)} records, header says {header.record_count}"
                        )
                    )
                if commits:
                    for r in records:
                        if (
                            r.key is None
                            or decode_key(r.key) is None
                            or decode_value(r.value) is None
                        ):
                            report.problems.append(
                                Problem(
                                    where, pos, f"offset {r.offset} is not a readable commit record"
                                )
                            )
        starts[pos] = header.base_offset
        expected = header.base_offset + max(header.last_offset_delta, 0) + 1
        pos += header.size
    return starts, expected, len(data)


def _whole_entries(path: Path, entry: struct.Struct, report: Report) -> list[tuple[int, int]]:
    """An index file's complete entries; a torn last entry is reported, not read."""
    report.files_checked += 1
    data = _read(path)
    usable = len(data) - len(data) % entry.size
    if usable != len(data):
        report.problems.append(
            Problem(str(path), usable, f"length {len(data)} is not a multiple of {entry.size}")
        )
    return list(entry.iter_unpack(data[:usable]))


def _check_index(
    path: Path, base: int, starts: dict[int, int], log_size: int, report: Report
) -> None:
    where = str(path)
    prev: tuple[int, int] | None = None
    for n, (rel, pos) in enumerate(_whole_entries(path, INDEX_ENTRY, report)):
        at = n * INDEX_ENTRY.size
        if prev is not None and (rel <= prev[0] or pos <= prev[1]):
            report.problems.append(
                Problem(
                    where,
                    at,
                    f"entry {n} (offset {base + rel}, position {pos}) is out of order "
                    f"after (offset {base + prev[0]}, position {prev[1]})",
                )
            )
        prev = (rel, pos)
        if pos >= log_size:
            report.problems.append(
                Problem(
                    where,
                    at,
                    f"entry {n} points at position {pos}, past the log's {log_size} bytes",
                )
            )
        elif pos not in starts:
            report.problems.append(
                Problem(
                    where, at, f"entry {n} points at position {pos}, which is not a batch start"
                )
            )
        elif starts[pos] != base + rel:
            report.problems.append(
                Problem(
                    where,
                    at,
                    f"entry {n} names offset {base + rel} but the batch at position "
                    f"{pos} starts at offset {starts[pos]}",
                )
            )


def _check_time_index(
    path: Path, base: int, starts: dict[int, int], end: int, report: Report
) -> None:
    where = str(path)
    batch_offsets = set(starts.values())
    prev: tuple[int, int] | None = None
    for n, (ts, rel) in enumerate(_whole_entries(path, TIME_INDEX_ENTRY, report)):
        at = n * TIME_INDEX_ENTRY.size
        if prev is not None and (ts <= prev[0] or rel < prev[1]):
            report.problems.append(
                Problem(
                    where, at, f"entry {n} (timestamp {ts}, offset {base + rel}) is out of order"
                )
            )
        prev = (ts, rel)
        if base + rel >= end:
            report.problems.append(
                Problem(
                    where, at, f"entry {n} names offset {base + rel}, past the segment end {end}"
                )
            )
        elif base + rel not in batch_offsets:
            report.problems.append(
                Problem(where, at, f"entry {n} names offset {base + rel}, which starts no batch")
            )


def _check_log_start(
    directory: Path, first_base: int | None, end: int | None, report: Report
) -> None:
    """Where DeleteRecords put the log start: an intact file, not past the log end.

    Past the end means segments were lost below it (the next start deletes the
    rest and starts the log there, as Kafka's loader does); below the first
    segment it is stale (retention deleted further) and harmless.
    """
    path = directory / LOG_START_FILE
    if not path.exists():
        return
    report.files_checked += 1
    try:
        offset = decode_log_start(_read(path))
    except DamagedFile as e:
        report.problems.append(Problem(str(path), None, str(e)))
        return
    if end is not None and offset > end:
        report.problems.append(
            Problem(
                str(path),
                0,
                f"log start {offset} is past the log end {end}: segments below it are "
                f"missing (the next start deletes the others and starts the log at {offset})",
            )
        )
    elif first_base is not None and offset > first_base:
        report.notes.append(
            f"{path}: DeleteRecords moved the log start to {offset}; offsets "
            f"{first_base}..{offset - 1} are still on disk until retention deletes them"
        )


def _check_recovery_point(directory: Path, end: int | None, report: Report) -> None:
    path = directory / RECOVERY_POINT_FILE
    if not path.exists():
        return
    report.files_checked += 1
    try:
        offset = decode_recovery_point(_read(path))
    except DamagedRecoveryPoint as e:
        report.problems.append(Problem(str(path), e.position, str(e)))
        return
    if end is not None and offset > end:
        report.problems.append(
            Problem(str(path), 0, f"recovery point {offset} is past the log end {end}")
        )
