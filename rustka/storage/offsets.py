"""Committed consumer offsets, kept as a log in ``data_dir/__offsets/``.

Like Kafka's ``__consumer_offsets``, a commit is just a record appended to a
log, and startup replays the log keeping the last value per key, so no other
file has to be kept consistent with it. The key is versioned so a later format
can coexist with old records; records this code cannot read are skipped and
counted rather than failing startup, because the worst outcome of a lost
commit is a consumer re-reading some records (at-least-once).

Record formats (big-endian; ``str`` is a u16 byte length then UTF-8):

- key, version 1: ``u16 version=1, str group, str topic, u32 partition``
- value: ``u64 offset, u64 commit timestamp (ms)``
"""

from __future__ import annotations

import dataclasses
import struct
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from rustka.errors import CorruptBatch, InvalidName, InvalidRequest
from rustka.names import OFFSETS_TOPIC, validate_group, validate_topic
from rustka.storage.partition_log import LogConfig, PartitionLog
from rustka.storage.record_batch import Record, decode_records, encode_batch, parse_header

KEY_VERSION = 1
REPLAY_READ_BYTES = 4 * 1024 * 1024
# Compact once the log holds this many times more records than live entries ...
COMPACT_RATIO = 4
# ... but never for fewer records than this, so a handful of busy keys does not
# roll a new segment every few commits.
COMPACT_MIN_RECORDS = 10_000

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_VALUE = struct.Struct(">QQ")
_U32_MAX = 0xFFFFFFFF
_U64_MAX = 0xFFFFFFFFFFFFFFFF

OffsetKey = tuple[str, str, int]


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


def encode_value(offset: int, timestamp_ms: int) -> bytes:
    return _VALUE.pack(offset, timestamp_ms)


def decode_value(data: bytes | None) -> tuple[int, int] | None:
    """(offset, commit timestamp) or None if the value is not in the known format."""
    if data is None or len(data) != _VALUE.size:
        return None
    offset, timestamp = _VALUE.unpack(data)
    return offset, timestamp


def _check_commit(group: str, topic: str, partition: int, offset: int) -> None:
    validate_group(group)
    validate_topic(topic)
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise InvalidRequest(f"partition must be an integer, got {partition!r}")
    if not 0 <= partition <= _U32_MAX:
        raise InvalidRequest(f"partition {partition} is out of range (0-{_U32_MAX})")
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise InvalidRequest(f"offset must be an integer, got {offset!r}")
    if not 0 <= offset <= _U64_MAX:
        raise InvalidRequest(f"offset {offset} is out of range (0-{_U64_MAX})")


class OffsetsStore:
    """The last committed offset of every (group, topic, partition).

    Writes come from one lane (the store's own), so the log needs no lock; the
    in-memory table does, because readers such as ``groups()`` run on other
    threads while a commit updates it.

    ``replay_skipped`` counts records replay could not interpret (unknown key
    version, malformed key or value); ``replay_corrupt_batches`` counts batches
    whose CRC failed and were ignored.
    """

    directory: Path
    log: PartitionLog
    replay_skipped: int
    replay_corrupt_batches: int

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
        self.replay_corrupt_batches = 0
        self._records_in_log = 0
        self._state: dict[OffsetKey, tuple[int, int]] = {}
        self._lock = threading.Lock()

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
        log = PartitionLog.open(Path(data_dir) / OFFSETS_TOPIC, log_config, recover=recover)
        store = cls(log, compact_ratio=compact_ratio, compact_min_records=compact_min_records)
        try:
            store._replay()
        except BaseException:
            log.close()
            raise
        return store

    def _replay(self) -> None:
        log = self.log
        offset = log.log_start_offset
        end = log.end_offset
        while offset < end:
            data = log.read(offset, REPLAY_READ_BYTES)
            if not data:
                break
            pos = 0
            while pos < len(data):
                header = parse_header(data, pos)
                try:
                    records = decode_records(data, pos)
                except CorruptBatch:
                    self.replay_corrupt_batches += 1
                    records = []
                for record in records:
                    self._records_in_log += 1
                    self._apply(record)
                pos += header.size
                offset = header.next_offset

    def _apply(self, record: Record) -> None:
        key = decode_key(record.key) if record.key is not None else None
        value = decode_value(record.value)
        if key is None or value is None:
            self.replay_skipped += 1
            return
        self._state[key] = value

    def commit_many(self, commits: Sequence[tuple[str, str, int, int]]) -> None:
        """Append all ``commits`` as one batch; nothing is written if any is invalid.

        The caller decides when to ``flush``: the broker acknowledges a commit
        only after its flush, so one fsync can cover many groups' commits.
        """
        if not commits:
            return
        for group, topic, partition, offset in commits:
            _check_commit(group, topic, partition, offset)
        now_ms = int(time.time() * 1000)
        records = [
            Record(key=encode_key(g, t, p), value=encode_value(o, now_ms)) for g, t, p, o in commits
        ]
        self.log.append(encode_batch(records, timestamp=now_ms))
        self._records_in_log += len(records)
        with self._lock:
            for group, topic, partition, offset in commits:
                self._state[(group, topic, partition)] = (offset, now_ms)

    def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        """Commit one offset (the next offset ``group`` will read)."""
        self.commit_many([(group, topic, partition, offset)])

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
        for (group, topic, partition), (offset, _ts) in items:
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
                Record(key=encode_key(g, t, p), value=encode_value(offset, ts), timestamp=ts)
                for (g, t, p), (offset, ts) in items
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
