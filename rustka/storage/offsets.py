"""Committed consumer offsets, kept as a log in ``data_dir/__offsets/``.

Like Kafka's ``__consumer_offsets``, a commit is just a record appended to a
log, and startup replays the log keeping the last value per key, so no other
file has to be kept consistent with it. The key is versioned so a later format
can coexist with old records; records this code cannot read are skipped and
counted rather than failing startup, because the worst outcome of a lost
commit is a consumer re-reading some records (at-least-once).

Startup survives any damage to this log (docs/reliability.md): replay reads
the segment files itself, read-only, before the log is opened, skips a batch
that fails its CRC or does not parse, finds the next intact batch after it
and carries on, so later commits still apply. Each skipped batch is counted
and recorded with its file and byte position for the broker to log; then the
surviving state is compacted into a fresh segment, so the damage is gone from
the next start and no commit that survived can be lost to the log's own
recovery truncating at the damaged batch.

Record formats (big-endian; ``str`` is a u16 byte length then UTF-8):

- key, version 1: ``u16 version=1, str group, str topic, u32 partition``
- value: ``u64 offset, u64 commit timestamp (ms)``, then, only when the commit
  carried a non-empty metadata string (OffsetCommit's ``committed_metadata``),
  ``str metadata``. A 16-byte value is a commit without metadata, so logs
  written before metadata was kept still replay unchanged.
- a null value is a tombstone: the key's commit is deleted (DeleteGroups,
  OffsetDelete, deleting the topic, expiry); compaction drops both.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from rustka.errors import CorruptBatch, InvalidBatch, InvalidName, InvalidRequest
from rustka.names import OFFSETS_TOPIC, validate_group, validate_stored_topic
from rustka.record.batch import (
    Record,
    crc_ok,
    decode_records,
    encode_batch,
    ms_now,
    parse_header,
)
from rustka.record.header import HEADER_SIZE, MAGIC, MAGIC_AT
from rustka.storage.log_config import LogConfig
from rustka.storage.log_files import LOG_SUFFIX, base_offset_of, log_name
from rustka.storage.partition_log import PartitionLog

KEY_VERSION = 1
# Compact once the log holds this many times more records than live entries ...
COMPACT_RATIO = 4
# ... but never for fewer records than this, so a handful of busy keys does not
# roll a new segment every few commits.
COMPACT_MIN_RECORDS = 10_000

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_VALUE = struct.Struct(">QQ")
_U32_MAX = 0xFFFFFFFF
# The most metadata a commit may carry, in UTF-8 bytes: Kafka's default
# offset.metadata.max.bytes (the Kafka front-end answers OffsetMetadataTooLarge).
METADATA_MAX_BYTES = 4096
_U64_MAX = 0xFFFFFFFFFFFFFFFF

OffsetKey = tuple[str, str, int]
# (group, topic, partition, offset), optionally followed by the commit's metadata.
# A bare (group, topic, partition) deletes that commit.
Commit = tuple[str, str, int, int] | tuple[str, str, int, int, str] | tuple[str, str, int]
# The magic byte at its place in a batch header is what a resync after damage looks for.
_MAGIC_BYTE = bytes((MAGIC,))


class OffsetsMirror(Protocol):
    """Where a cluster's group coordinator also writes its commits (the catalog's
    ``group_offsets``), before they reach this store: the next coordinator reads them
    from there (docs/diskless.md, "Consumer groups in a cluster")."""

    def write(self, commits: Sequence[Commit], now_ms: int) -> None: ...


@dataclasses.dataclass(frozen=True, slots=True)
class SkippedBatch:
    """A batch replay could not use: which file, where in it, and why."""

    file: Path
    position: int
    reason: str

    def __str__(self) -> str:
        return f"{self.file} at byte {self.position}: {self.reason}"


def _next_intact(data: bytes, start: int) -> int:
    """Position of the first whole, CRC-valid batch at or after ``start``, or len(data)."""
    find = data.find
    i = find(_MAGIC_BYTE, start + MAGIC_AT)
    while i != -1:
        pos = i - MAGIC_AT
        if _intact_at(data, pos):
            return pos
        i = find(_MAGIC_BYTE, i + 1)
    return len(data)


def _intact_at(data: bytes, pos: int) -> bool:
    try:
        header = parse_header(data, pos)
    except InvalidBatch:
        return False
    return pos + header.size <= len(data) and crc_ok(data, pos, header)


def salvage(
    directory: Path, *, torn_tail_ok: bool = False
) -> tuple[list[Record], list[SkippedBatch]]:
    """Every record of every intact batch in ``directory``'s segments, oldest first.

    Reads the files directly and changes nothing. A damaged batch is skipped
    and reported; scanning resumes at the batch its length points to if that
    one is intact, else at the next intact batch found byte by byte. With
    ``torn_tail_ok`` an incomplete last batch of the newest segment (a write a
    crash cut short, which recovery truncates) is not reported.
    """
    directory = Path(directory)
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return [], []
    bases = sorted(b for b in (base_offset_of(n, LOG_SUFFIX) for n in names) if b is not None)
    records: list[Record] = []
    skipped: list[SkippedBatch] = []
    for n, base in enumerate(bases):
        path = directory / log_name(base)
        data = path.read_bytes()
        last_file = n == len(bases) - 1
        pos = 0
        expected: int | None = base
        while pos < len(data):
            reason, size = _batch_problem(data, pos)
            if reason is None:
                try:
                    batch_records = decode_records(data, pos, verify=False)
                except CorruptBatch as exc:
                    reason = f"records do not parse: {exc}"
                else:
                    # baseOffset lies outside the CRC: a damaged one breaks the offset chain,
                    # which the log's recovery would truncate at. The records are intact.
                    header = parse_header(data, pos)
                    if expected is not None and header.base_offset != expected:
                        skipped.append(
                            SkippedBatch(
                                path,
                                pos,
                                f"base offset {header.base_offset}, expected {expected} "
                                f"(its records were kept)",
                            )
                        )
                    records.extend(batch_records)
                    # After a damaged base offset, continue the chain the batch belonged to.
                    start = header.base_offset if expected is None else expected
                    expected = start + header.last_offset_delta + 1
                    pos += size
                    continue
            expected = None
            nxt = (
                pos + size if size and _intact_at(data, pos + size) else _next_intact(data, pos + 1)
            )
            torn = last_file and nxt == len(data) and reason.startswith("incomplete")
            if not (torn and torn_tail_ok):
                skipped.append(SkippedBatch(path, pos, reason))
            pos = nxt
    return records, skipped


def _batch_problem(data: bytes, pos: int) -> tuple[str | None, int]:
    """(None, size) for an intact batch at ``pos``, else (why not, size or 0 if unknown)."""
    left = len(data) - pos
    if left < HEADER_SIZE:
        return f"incomplete batch: {left} bytes, less than a header", 0
    try:
        header = parse_header(data, pos)
    except InvalidBatch as exc:
        return f"invalid batch header: {exc}", 0
    if header.size > left:
        return f"incomplete batch: {header.size} bytes stated, {left} present", 0
    if not crc_ok(data, pos, header):
        return "CRC-32C mismatch", header.size
    return None, header.size


def _encode_str(text: str, what: str) -> bytes:
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidName(f"{what} name {text!r} is not valid UTF-8 text") from e
    return _U16.pack(len(data)) + data


def encode_key(group: str, topic: str, partition: int) -> bytes:
    """The record key of a commit: version 1 of the format in the module docstring."""
    return (
        _U16.pack(KEY_VERSION)
        + _encode_str(group, "group")
        + _encode_str(topic, "topic")
        + _U32.pack(partition)
    )


def decode_key(data: bytes) -> OffsetKey | None:
    """The (group, topic, partition) of a key, or None if it is not a version-1 key."""
    try:
        (version,) = _U16.unpack_from(data, 0)
        if version != KEY_VERSION:
            return None
        pos = 2
        texts: list[str] = []
        for _ in range(2):
            (length,) = _U16.unpack_from(data, pos)
            pos += 2
            if pos + length > len(data):
                return None
            texts.append(data[pos : pos + length].decode("utf-8"))
            pos += length
        (partition,) = _U32.unpack_from(data, pos)
    except (struct.error, UnicodeDecodeError):
        return None
    if pos + 4 != len(data):
        return None
    return texts[0], texts[1], partition


def encode_value(offset: int, timestamp_ms: int, metadata: str = "") -> bytes:
    """The value of a commit; without metadata, exactly the original 16-byte format."""
    value = _VALUE.pack(offset, timestamp_ms)
    if metadata:
        value += _encode_str(metadata, "metadata")
    return value


def decode_value(data: bytes | None) -> tuple[int, int, str] | None:
    """(offset, commit timestamp, metadata) or None if the value is not in the known format."""
    if data is None or len(data) < _VALUE.size:
        return None
    offset, timestamp = _VALUE.unpack_from(data, 0)
    if len(data) == _VALUE.size:
        return offset, timestamp, ""
    try:
        (length,) = _U16.unpack_from(data, _VALUE.size)
        if _VALUE.size + 2 + length != len(data):
            return None
        metadata = data[_VALUE.size + 2 :].decode("utf-8")
    except (struct.error, UnicodeDecodeError):
        return None
    return offset, timestamp, metadata


def _with_metadata(commit: Commit) -> tuple[str, str, int, int, str]:
    if len(commit) == 5:
        return commit  # type: ignore[return-value]
    group, topic, partition, offset = commit[:4]
    return group, topic, partition, offset, ""


def _check_commit(group: str, topic: str, partition: int, offset: int, metadata: str) -> None:
    validate_group(group)
    validate_stored_topic(topic)
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise InvalidRequest(f"partition must be an integer, got {partition!r}")
    if not 0 <= partition <= _U32_MAX:
        raise InvalidRequest(f"partition {partition} is out of range (0-{_U32_MAX})")
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise InvalidRequest(f"offset must be an integer, got {offset!r}")
    if not 0 <= offset <= _U64_MAX:
        raise InvalidRequest(f"offset {offset} is out of range (0-{_U64_MAX})")
    if not isinstance(metadata, str):
        raise InvalidRequest(f"metadata must be a string, got {metadata!r}")
    if len(metadata.encode("utf-8", "surrogatepass")) > METADATA_MAX_BYTES:
        raise InvalidRequest(f"offset metadata is longer than {METADATA_MAX_BYTES} bytes of UTF-8")


def _expired(
    items: Sequence[tuple[OffsetKey, tuple[int, int, str]]],
    now_ms: int,
    retention_ms: int,
    empty_since: Mapping[str, int | None],
) -> list[OffsetKey]:
    doomed = []
    for (group, topic, partition), (_offset, committed_ms, _m) in items:
        since = empty_since.get(group)
        if since is not None and max(since, committed_ms) + retention_ms <= now_ms:
            doomed.append((group, topic, partition))
    return sorted(doomed)


class OffsetsStore:
    """The last committed offset of every (group, topic, partition).

    Writes come from one lane (the store's own), so the log needs no lock; the
    in-memory table does, because readers such as ``groups()`` run on other
    threads while a commit updates it.

    ``replay_skipped`` counts records replay could not interpret (unknown key
    version, malformed key or value); ``corrupt_batches_skipped`` counts damaged
    batches replay stepped over, and ``skipped_batches`` says where each was.
    """

    directory: Path
    log: PartitionLog
    replay_skipped: int
    skipped_batches: list[SkippedBatch]

    def __init__(
        self,
        log: PartitionLog,
        *,
        compact_ratio: int = COMPACT_RATIO,
        compact_min_records: int = COMPACT_MIN_RECORDS,
    ) -> None:
        self.log = log
        self.directory = log.directory
        self.compact_ratio = compact_ratio
        self.compact_min_records = compact_min_records
        self.replay_skipped = 0
        self.skipped_batches = []
        self._records_in_log = 0
        self._state: dict[OffsetKey, tuple[int, int, str]] = {}
        self._lock = threading.Lock()
        self.mirror: OffsetsMirror | None = None
        """Set in a cluster: every commit is written there first, and fails with it."""
        self.observer: Callable[[Sequence[Commit], int], None] | None = None
        """Told of every write once it is in the log (commits, deletions, expiry), with
        its time, on the writing thread: how the broker keeps `__consumer_offsets`."""

    @classmethod
    def open(
        cls,
        data_dir: Path,
        config: LogConfig,
        *,
        recover: bool = False,
        compact_ratio: int = COMPACT_RATIO,
        compact_min_records: int = COMPACT_MIN_RECORDS,
    ) -> OffsetsStore:
        """Open (or create) the offsets log and rebuild the table by replaying it.

        Retention is switched off for this log whatever the broker's setting:
        an old commit is still the current position of an idle group, and only
        ``compact`` may drop superseded records.
        """
        log_config = dataclasses.replace(config, retention_ms=None, retention_bytes=None)
        directory = Path(data_dir) / OFFSETS_TOPIC
        records, skipped = salvage(directory, torn_tail_ok=recover)
        log = PartitionLog.open(directory, log_config, recover=recover)
        store = cls(log, compact_ratio=compact_ratio, compact_min_records=compact_min_records)
        try:
            for record in records:
                store._records_in_log += 1
                store._apply(record)
            store.skipped_batches = skipped
            if skipped:
                store.compact(force=True)
        except BaseException:
            log.close()
            raise
        return store

    @property
    def corrupt_batches_skipped(self) -> int:
        """Damaged batches the last replay stepped over (each in ``skipped_batches``)."""
        return len(self.skipped_batches)

    def _apply(self, record: Record) -> None:
        key = decode_key(record.key) if record.key is not None else None
        if key is not None and record.value is None:
            self._state.pop(key, None)
            return
        value = decode_value(record.value)
        if key is None or value is None:
            self.replay_skipped += 1
            return
        self._state[key] = value

    def commit_many(self, commits: Sequence[Commit]) -> None:
        """Append all ``commits`` as one batch; nothing is written if any is invalid.

        A commit is (group, topic, partition, offset) or the same with its
        metadata string appended. The caller decides when to ``flush``: the
        broker acknowledges a commit only after its flush, so one fsync can
        cover many groups' commits.
        """
        if not commits:
            return
        full = [c if len(c) == 3 else _with_metadata(c) for c in commits]
        for c in full:
            if len(c) == 5:
                _check_commit(*c)
        now_ms = ms_now()
        if self.mirror is not None:
            self.mirror.write(full, now_ms)
        records = [
            Record(key=encode_key(*c[:3]), value=None)
            if len(c) == 3
            else Record(key=encode_key(*c[:3]), value=encode_value(c[3], now_ms, c[4]))
            for c in full
        ]
        self.log.append(encode_batch(records, timestamp=now_ms))
        self._records_in_log += len(records)
        with self._lock:
            for c in full:
                if len(c) == 3:
                    self._state.pop(c, None)
                else:
                    self._state[c[:3]] = (c[3], now_ms, c[4])
        if self.observer is not None:
            self.observer(full, now_ms)

    def replace(self, entries: Mapping[OffsetKey, tuple[int, int, str]]) -> None:
        """Take ``entries`` ((offset, commit ms, metadata) by key) as the whole table: a
        cluster's new group coordinator loading what the previous one committed, or a
        broker that lost the role forgetting what may go stale. The log is not written;
        in a cluster the mirror, not this log, is the record."""
        with self._lock:
            self._state = dict(entries)

    def entries(self) -> list[tuple[OffsetKey, tuple[int, int, str]]]:
        """Every commit: (group, topic, partition) -> (offset, commit ms, metadata)."""
        with self._lock:
            return sorted(self._state.items())

    def group_partitions(self, group: str) -> list[tuple[str, int]]:
        """The partitions ``group`` has commits for (what deleting the group must tombstone)."""
        with self._lock:
            return sorted((t, p) for (g, t, p) in self._state if g == group)

    def topic_commits(self, topic: str) -> list[tuple[str, int]]:
        """The (group, partition) commits on ``topic`` (what deleting the topic must tombstone,
        so a topic re-created under its name starts with no positions)."""
        with self._lock:
            return sorted((g, p) for (g, t, p) in self._state if t == topic)

    def orphaned(self, topics: Collection[str]) -> list[tuple[str, str, int]]:
        """The commits on topics not in ``topics``: a crash between a topic's deletion and
        its commits' tombstones leaves them, and the topic's next incarnation must not
        inherit them (the broker drops them at startup)."""
        with self._lock:
            return sorted(key for key in self._state if key[1] not in topics)

    def expired(
        self, now_ms: int, retention_ms: int, empty_since: Mapping[str, int | None]
    ) -> list[tuple[str, str, int]]:
        """The commits whose retention is over: of groups ``empty_since`` maps to a time
        (None: the group is in use, keep everything; absent: keep), once both that time
        and the commit are ``retention_ms`` old, Kafka's rule for a group gone empty."""
        with self._lock:
            items = list(self._state.items())
        return _expired(items, now_ms, retention_ms, empty_since)

    def expire(
        self, now_ms: int, retention_ms: int, empty_since: Mapping[str, int | None]
    ) -> list[tuple[str, str, int]]:
        """Forget the `expired` commits now, deciding and removing in one step, and
        return them for `write_expiry` to make durable.

        Called on the reactor, in the same turn that read ``empty_since`` from the
        groups, so a group joining either comes first (it is in use: nothing of it
        expires) or finds its expired offsets already gone, never offsets that are
        removed after it read them (Kafka expires them under the group's lock).
        """
        with self._lock:
            doomed = _expired(list(self._state.items()), now_ms, retention_ms, empty_since)
            for key in doomed:
                del self._state[key]
        return doomed

    def write_expiry(self, keys: Sequence[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
        """Tombstone, in one durable write, the commits `expire` forgot that no commit has
        brought back since (on the store's lane, so no commit runs meanwhile).

        A commit written after the expiry must survive replay, so its key gets no
        tombstone after it. If this write fails the commits are back after a
        restart and expire again (the worst of a lost expiry is a stale position).
        """
        with self._lock:
            gone = [key for key in keys if key not in self._state]
        if gone:
            self.commit_many(gone)
            self.flush()
        return gone

    def commit(
        self, group: str, topic: str, partition: int, offset: int, metadata: str = ""
    ) -> None:
        """Commit one offset (the next offset ``group`` will read)."""
        self.commit_many([(group, topic, partition, offset, metadata)])

    def committed_metadata(self, group: str, topic: str, partition: int) -> str | None:
        """The metadata string of the last commit ("" if it had none), or None without one."""
        entry = self._state.get((group, topic, partition))
        return None if entry is None else entry[2]

    def group_metadata(self, group: str) -> dict[tuple[str, int], str]:
        """The metadata of every partition ``group`` committed, safe on any thread."""
        with self._lock:
            items = list(self._state.items())
        return {(t, p): entry[2] for (g, t, p), entry in items if g == group}

    def committed(self, group: str, topic: str, partition: int) -> int | None:
        """The last committed offset, or None if the group never committed there."""
        entry = self._state.get((group, topic, partition))
        return None if entry is None else entry[0]

    def committed_at(self, group: str, topic: str, partition: int) -> int | None:
        """When the last commit happened (ms), for lag and staleness reports."""
        entry = self._state.get((group, topic, partition))
        return None if entry is None else entry[1]

    def groups(self) -> dict[str, dict[tuple[str, int], int]]:
        """Every group's committed offsets, a snapshot safe to use on any thread."""
        with self._lock:
            items = list(self._state.items())
        result: dict[str, dict[tuple[str, int], int]] = {}
        for (group, topic, partition), (offset, _ts, _metadata) in items:
            result.setdefault(group, {})[(topic, partition)] = offset
        return result

    @property
    def live_entries(self) -> int:
        return len(self._state)

    @property
    def records_in_log(self) -> int:
        """Records currently held by the log, superseded ones included."""
        return self._records_in_log

    def needs_compaction(self) -> bool:
        """True when superseded records dominate the log enough to be worth rewriting."""
        threshold = max(self.compact_ratio * len(self._state), self.compact_min_records)
        return self._records_in_log > threshold

    def compact(self, *, force: bool = False) -> bool:
        """Rewrite the live entries into a fresh segment and drop the older segments.

        Crash-safe by ordering: the snapshot is appended after all existing
        records and flushed before anything is deleted, so replay after a crash
        at any point sees either the old records, or the old records followed
        by an equivalent snapshot. Returns whether anything was rewritten.
        """
        if not force and not self.needs_compaction():
            return False
        with self._lock:
            items = list(self._state.items())
        log = self.log
        log.roll()
        snapshot_start = log.end_offset
        if items:
            records = [
                Record(key=encode_key(g, t, p), value=encode_value(offset, ts, m), timestamp=ts)
                for (g, t, p), (offset, ts, m) in items
            ]
            log.append(encode_batch(records))
        log.flush()
        log.delete_before(snapshot_start)
        self._records_in_log = len(items)
        return True

    def flush(self) -> None:
        """Make every appended commit durable."""
        self.log.flush()

    def close(self) -> None:
        """Flush and release the log (PartitionLog.close flushes first)."""
        self.log.close()
