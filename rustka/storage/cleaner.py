"""The log cleaner: Kafka's log compaction, as plain synchronous code over one partition log.

A compacted log keeps at least the latest record of every key (docs/kafka.md,
"Log compaction"). As in Kafka (``LogCleaner``, ``LogCleanerManager``), the log
is a clean part, ``[log start, first dirty)``, cleaned by earlier rounds, and
a dirty part; the dirty part ends at the first uncleanable offset
(`cleanable_range`): the active segment, and any segment whose newest record is
younger than ``min.compaction.lag.ms``. A round (`Cleaning`):

1. maps each key of the dirty part to its last offset (`OffsetMap`, bounded in
   memory: when it is full the round maps a prefix and the next round goes on);
2. copies every segment below the end of the mapped range, in groups that stay
   within ``segment.bytes``, keeping a record if it lies past the mapped range
   or is the latest of its key, and, for a tombstone (null value), only until
   its batch's delete horizon; records without a key are dropped;
3. rewrites a batch it keeps part of with its base offset, last offset delta,
   producer fields, leader epoch, timestamps and codec (rewrite_batch in
   rustka/record/batch.py), stamps a batch whose tombstones it keeps for the
   first time with the delete horizon now + ``delete.retention.ms`` (KIP-534),
   and keeps a batch it empties as a header only when it is an idempotent
   producer's last batch or the round's last batch (empty_batch), else drops it;
4. swaps each group's cleaned segment in (`PartitionLog.replace_segments`, crash
   safe), then records where the round ended (the cleaner checkpoint).

Offsets never change; the gaps removed records leave are served across by
every read. Nothing here schedules or waits: the broker
(rustka/broker/log_cleaner.py) picks the partition and drives a `Cleaning` one
bounded step at a time on the partition's lane, pacing the steps to its I/O
rate limit.
"""

from __future__ import annotations

import contextlib
import hashlib
from array import array
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from rustka.errors import StorageError
from rustka.record.batch import (
    BatchHeader,
    Record,
    decode_records,
    delete_horizon,
    empty_batch,
    parse_header,
    rewrite_batch,
)
from rustka.record.header import CONTROL_BIT, TRANSACTIONAL_BIT
from rustka.storage.log_files import CLEANED_SUFFIX, CleanerCheckpoint
from rustka.storage.partition_log import PartitionLog, SegmentsChanged
from rustka.storage.segment import MAX_RELATIVE_OFFSET, Segment

__all__ = [
    "CHUNK_BYTES",
    "CleanableRange",
    "CleanerStats",
    "Cleaning",
    "OffsetMap",
    "cleanable_range",
    "group_segments",
    "map_entry_bytes",
]

# The cleaner reads sealed segments this much at a time (more for a bigger batch).
CHUNK_BYTES = 256 * 1024
# Keys of up to 16 bytes are stored as they are; longer ones as their 17-byte
# BLAKE2b digest. The lengths differ, so the two kinds can never be confused, and
# only keys longer than 16 bytes share Kafka's (MD5) risk of a digest collision.
_RAW_KEY_BYTES = 16
_DIGEST_BYTES = 17
# What one map entry costs at most: its stored key as a bytes object (a 33-byte
# header plus the key, in 8-byte allocation units), its offset as an int (32
# bytes), and its share of the dict's table at the worst moment, a resize, when
# the old table (20 bytes per slot, two thirds used) and the new one twice its
# size (a third used) are both allocated: 90 bytes per entry. Counting the worst
# case keeps the real memory under the bound whenever the map stops, and covers
# the sorted array of offsets (8 bytes each) made once the map is complete;
# bench/cleaner_bench.py measures the average (about 120 bytes per key), and
# tests/storage/test_cleaner.py checks the bound against tracemalloc.
_INT_BYTES = 32
_TABLE_SHARE = 96


def _entry_bytes(stored_length: int) -> int:
    return (33 + stored_length + 7) // 8 * 8 + _INT_BYTES + _TABLE_SHARE


_COSTS = [_entry_bytes(n) for n in range(_DIGEST_BYTES + 1)]


def _key_of(key: bytes) -> bytes:
    if len(key) <= _RAW_KEY_BYTES:
        return key
    return hashlib.blake2b(key, digest_size=_DIGEST_BYTES).digest()


class OffsetMap:
    """Key -> last offset over the dirty part of a log, within ``memory_bytes``.

    The role of Kafka's SkimpyOffsetMap: ``put`` refuses a new key once the
    entries could cost more than ``memory_bytes`` (a Python dict's cost at its
    worst, `_entry_bytes`), and the round then cleans only the
    prefix it mapped. ``latest_offset`` is the last offset the map covers:
    records after it are kept whatever their key.
    """

    __slots__ = ("_entries", "keyless", "latest_offset", "limit", "memory_used")

    def __init__(self, memory_bytes: int) -> None:
        self.limit = memory_bytes
        self.memory_used = 0
        self.latest_offset = -1
        #: Records without a key `put_records` saw (the cleaner drops them).
        self.keyless = 0
        self._entries: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, key: bytes, offset: int) -> bool:
        """Map ``key`` to ``offset``; False (and nothing stored) if a new key does not fit."""
        return self.put_records([Record(key, None, (), None, offset)])

    def put_records(self, records: Sequence[Record]) -> bool:
        """`put` for each keyed record, in order; False at the first new key that does
        not fit (the records before it are mapped). One dict store per record."""
        entries = self._entries
        used = self.memory_used
        limit = self.limit
        costs = _COSTS
        raw = _RAW_KEY_BYTES
        digest = hashlib.blake2b
        size = len
        for record in records:
            key = record.key
            if key is None:
                self.keyless += 1
                continue
            if size(key) > raw:
                key = digest(key, digest_size=_DIGEST_BYTES).digest()
            before = size(entries)
            entries[key] = record.offset  # type: ignore[assignment]
            if size(entries) != before:
                used += costs[size(key)]
                if used > limit:
                    del entries[key]
                    self.memory_used = used - costs[size(key)]
                    return False
        self.memory_used = used
        return True

    def get(self, key: bytes) -> int:
        """The last offset of ``key`` in the mapped range, -1 if it does not occur there."""
        return self._entries.get(_key_of(key), -1)

    def offsets(self) -> array[int]:
        """Every mapped key's last offset, sorted: the records the mapped range keeps."""
        return array("q", sorted(self._entries.values()))


@dataclass(frozen=True, slots=True)
class CleanableRange:
    """What a log offers the cleaner now (Kafka's LogToClean and OffsetsToClean).

    ``clean_bytes`` are the segments below ``first_dirty``; ``cleanable_bytes``
    those from ``first_dirty`` up to ``first_uncleanable``; the segment holding
    ``first_dirty`` counts in both, as in Kafka. ``overdue``: a dirty segment's
    first batch is older than max.compaction.lag.ms. ``horizon_due``: a
    tombstone the last round kept has passed its delete horizon.
    """

    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    cleanable_bytes: int
    overdue: bool = False
    horizon_due: bool = False

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0

    def due(self, min_cleanable_dirty_ratio: float) -> bool:
        """Kafka's choice of a log to clean, plus the tombstone horizon (see above)."""
        if self.overdue and self.cleanable_bytes > 0:
            return True
        if self.horizon_due and self.clean_bytes > 0:
            return True
        return self.cleanable_bytes > 0 and self.dirty_ratio > min_cleanable_dirty_ratio


def _covering(segments: Sequence[Segment], start: int, end: int) -> list[int]:
    """Indexes of the segments holding offsets of ``[start, end)`` (Kafka's logSegments).

    A segment holds everything from its base offset to the next one's, gaps
    included, so the segment holding ``start`` counts even if its last batch
    ends below ``start``.
    """
    found: list[int] = []
    if start >= end:
        return found
    for i, seg in enumerate(segments):
        upper = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if seg.base_offset >= end:
            break
        if upper is None or upper > start:
            found.append(i)
    return found


def cleanable_range(log: PartitionLog, now_ms: int) -> CleanableRange:
    """Kafka's ``cleanableOffsets`` and ``maxCompactionDelay`` for ``log`` at ``now_ms``.

    A checkpoint outside the log (retention moved the start past it, or
    recovery cut the end below it) starts over from the log start. The dirty
    part ends at the first of: the active segment, and the first dirty segment
    whose newest timestamp is within min.compaction.lag.ms of now.
    """
    config = log.config
    segments = log.segments
    checkpoint = log.cleaner_checkpoint
    log_start, end = log.log_start_offset, log.end_offset
    first_dirty = checkpoint.first_dirty
    if not log_start <= first_dirty <= end:
        first_dirty = log_start
    sealed = segments[:-1]
    dirty = [sealed[i] for i in _covering(sealed, first_dirty, end)]
    uncleanable = segments[-1].base_offset
    lag = config.min_compaction_lag_ms
    if lag > 0:
        for seg in dirty:
            if seg.max_timestamp > now_ms - lag:
                uncleanable = min(uncleanable, seg.base_offset)
                break
    # Kafka's firstUncleanableDirtyOffset: never past the first open transaction, whose
    # records may yet be aborted (docs/kafka.md, "Transactions").
    uncleanable = min(uncleanable, log.last_stable_offset)
    uncleanable = max(first_dirty, uncleanable)
    # Kafka's calculateCleanableBytes: the round ends at the base of the segment
    # holding the first uncleanable offset.
    uncleanable = max(seg.base_offset for seg in segments if seg.base_offset <= uncleanable)
    clean_bytes = sum(seg.size for seg in segments if seg.base_offset < first_dirty)
    lower = min(first_dirty, uncleanable)
    cleanable_bytes = sum(segments[i].size for i in _covering(segments, lower, uncleanable))
    overdue = False
    max_lag = config.max_compaction_lag_ms
    if max_lag is not None:
        firsts = [seg.first_timestamp for seg in dirty if seg.first_timestamp > 0]
        overdue = bool(firsts) and min(firsts) < now_ms - max_lag
    horizon_due = 0 <= checkpoint.horizon <= now_ms
    return CleanableRange(
        first_dirty, uncleanable, clean_bytes, cleanable_bytes, overdue, horizon_due
    )


def group_segments(
    segments: Sequence[Segment], max_bytes: int, first_uncleanable: int
) -> list[list[Segment]]:
    """Consecutive segments merged while their sizes add up to at most ``max_bytes``
    and their offsets stay within one segment's relative range (Kafka's
    groupSegmentsBySize), so repeated cleaning does not leave ever smaller
    segments. ``segments`` are the ones to clean, oldest first; the offset after
    the last of them is at most ``first_uncleanable``.
    """
    groups: list[list[Segment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size = segments[i].size
        i += 1
        while i < len(segments):
            seg = segments[i]
            last = (
                segments[i + 1].base_offset - 1 if i + 1 < len(segments) else first_uncleanable - 1
            )
            if size + seg.size > max_bytes:
                break
            if seg.size and last - group[0].base_offset > MAX_RELATIVE_OFFSET:
                break
            group.append(seg)
            size += seg.size
            i += 1
        groups.append(group)
    return groups


@dataclass
class CleanerStats:
    """What one round did, for the broker's metrics and log line."""

    bytes_read: int = 0
    bytes_written: int = 0
    map_bytes_read: int = 0
    keys_mapped: int = 0
    map_memory_bytes: int = 0
    records_read: int = 0
    records_kept: int = 0
    records_without_key: int = 0
    tombstones_dropped: int = 0
    batches_emptied: int = 0
    segments_replaced: int = 0
    groups_swapped: int = 0
    first_dirty: int = 0
    cleaned_to: int = 0
    dirty_ratio: float = 0.0


@dataclass
class _Round:
    """The offsets a round works between, fixed once its map is built."""

    first_dirty: int
    first_uncleanable: int
    map_end: int = 0
    horizon: int = -1
    producers_last: dict[int, int] = field(default_factory=dict)
    #: The mapped range's kept offsets, sorted (`OffsetMap.offsets`).
    kept: array[int] = field(default_factory=lambda: array("q"))


class Cleaning:
    """One round of cleaning ``log``, run by `step` a bounded piece at a time.

    Every call of `step`, and `abort`, must run where the log's writes run (the
    partition's lane), never two at once; between calls the log may take
    appends, roll, or lose segments to retention, and a step that finds the
    segments it was reading gone stops the round with SegmentsChanged (the
    cleaned segment in progress is removed, the log is as before). ``now_ms``
    is the round's clock: the delete horizons it stamps and honours, and the
    compaction lags, are measured from it.
    """

    def __init__(
        self,
        log: PartitionLog,
        *,
        map_bytes: int,
        now_ms: int,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        self.log = log
        self.now_ms = now_ms
        self.chunk_bytes = chunk_bytes
        self.map = OffsetMap(map_bytes)
        self.stats = CleanerStats()
        self.done = False
        self._cleaned: Segment | None = None
        self._steps = self._run()

    def step(self, budget_bytes: int) -> int:
        """Clean until about ``budget_bytes`` were read and written; returns how many were.

        Sets ``done`` when the round is over. Any error ends the round with the
        log as it was after its last completed swap (each swap is atomic), and
        the partial cleaned segment removed.
        """
        used = 0
        try:
            while used < budget_bytes and not self.done:
                try:
                    used += next(self._steps)
                except StopIteration:
                    self.done = True
        except BaseException:
            self.done = True
            self._discard()
            raise
        return used

    def abort(self) -> None:
        """Stop the round now (shutdown, topic deletion): drop the partial cleaned segment."""
        self.done = True
        self._steps.close()
        self._discard()

    def _discard(self) -> None:
        cleaned, self._cleaned = self._cleaned, None
        if cleaned is not None:
            cleaned.close()
            with contextlib.suppress(StorageError):
                cleaned.remove_files()

    # ------------------------------------------------------------------ the round

    def _current(self, segments: Sequence[Segment]) -> None:
        live = {id(seg) for seg in self.log.segments[:-1]}
        for seg in segments:
            if id(seg) not in live:
                raise SegmentsChanged(
                    f"{self.log.directory}: segment {seg.base_offset} was removed or became "
                    f"active while it was being cleaned"
                )

    def _run(self) -> Iterator[int]:
        log = self.log
        found = cleanable_range(log, self.now_ms)
        stats = self.stats
        stats.first_dirty = found.first_dirty
        stats.dirty_ratio = found.dirty_ratio
        work = _Round(found.first_dirty, found.first_uncleanable)
        segments = log.segments
        yield from self._build_map(segments, work)
        stats.keys_mapped = len(self.map)
        stats.records_without_key += self.map.keyless
        stats.map_memory_bytes = self.map.memory_used
        work.kept = self.map.offsets()
        to_clean = [seg for seg in segments[:-1] if seg.base_offset < work.map_end]
        for group in group_segments(to_clean, log.config.segment_bytes, work.first_uncleanable):
            self._current(group)
            work.producers_last = {
                pid: entry.batches[-1].last_offset
                for pid, entry in log.producer_state.producers().items()
                if entry.batches
            }
            yield from self._clean_group(group, work)
        checkpoint = log.cleaner_checkpoint
        log.set_cleaner_checkpoint(
            CleanerCheckpoint(work.map_end, checkpoint.cleaned_below, work.horizon)
        )
        stats.cleaned_to = work.map_end

    def _build_map(self, segments: Sequence[Segment], work: _Round) -> Iterator[int]:
        """Map the dirty part's keys, as far as the map holds them; sets ``map_end``."""
        start, end = work.first_dirty, work.first_uncleanable
        offset_map = self.map
        stats = self.stats
        sealed = list(segments[:-1])
        full = False
        for i in _covering(sealed, start, end):
            seg = sealed[i]
            self._current([seg])
            upper = min(sealed[i + 1].base_offset, end) if i + 1 < len(sealed) else end
            position = seg.position_of(start) if seg.base_offset < start else 0
            for buf, entries in seg.batches_from(position, self.chunk_bytes):
                for pos, header in entries:
                    if header.last_offset < start:
                        continue
                    if header.attributes & CONTROL_BIT or (
                        header.attributes & TRANSACTIONAL_BIT
                        and self.log.is_aborted(header.producer_id, header.base_offset)
                    ):
                        # An aborted record supersedes nothing (Kafka's cleaner leaves
                        # aborted batches out of its map); markers are kept whole.
                        offset_map.latest_offset = header.last_offset
                        continue
                    records = decode_records(buf, pos, verify=False, min_offset=start)
                    if not offset_map.put_records(records):
                        full = True
                        break
                    offset_map.latest_offset = header.last_offset
                stats.map_bytes_read += len(buf)
                stats.bytes_read += len(buf)
                yield len(buf)
                if full:
                    break
                self._current([seg])
            if full:
                break
            offset_map.latest_offset = max(offset_map.latest_offset, upper - 1)
        offset_map.latest_offset = max(offset_map.latest_offset, start - 1)
        work.map_end = offset_map.latest_offset + 1
        if full and work.map_end <= start:
            raise StorageError(
                f"{self.log.directory}: the cleaner's key map ({offset_map.limit} bytes, "
                f"cleaner_dedupe_buffer_bytes) cannot hold the keys of one batch"
            )

    def _clean_group(self, group: list[Segment], work: _Round) -> Iterator[int]:
        log = self.log
        stats = self.stats
        cleaned = Segment.create(
            log.directory,
            group[0].base_offset,
            log.config.index_interval_bytes,
            suffix=CLEANED_SUFFIX,
            gaps=True,
        )
        self._cleaned = cleaned
        for seg in group:
            for buf, entries in seg.batches_from(0, self.chunk_bytes):
                out = bytearray()
                kept: list[tuple[int, BatchHeader]] = []
                for pos, header in entries:
                    batch = self._filter(buf, pos, header, work)
                    if batch is not None:
                        kept.append((len(out), parse_header(batch)))
                        out += batch
                if kept:
                    cleaned.append(out, kept, offsets_in_headers=True)
                stats.bytes_read += len(buf)
                stats.bytes_written += len(out)
                yield len(buf) + len(out)
                self._current(group)
        self._cleaned = None
        try:
            log.replace_segments(group, cleaned)
        except BaseException:
            if not any(seg is cleaned for seg in log.segments):
                self._cleaned = cleaned
            raise
        stats.segments_replaced += len(group)
        stats.groups_swapped += 1
        yield 0

    def _filter(self, buf: bytes, pos: int, header: BatchHeader, work: _Round) -> bytes | None:
        """What of one stored batch the cleaned segment gets: the batch itself, a
        rewritten batch, a header-only batch, or None (Kafka's filterTo and
        shouldRetainRecord)."""
        stats = self.stats
        if header.attributes & CONTROL_BIT:
            return buf[pos : pos + header.size]
        if (
            work.first_dirty <= header.base_offset
            and header.last_offset <= self.map.latest_offset
            and delete_horizon(header) is None
        ):
            # In the mapped range a record is kept exactly when its offset is its
            # key's last, a value of the map: a batch holding none of those is
            # dropped without being decoded (most batches of a busy key set).
            kept_offsets = work.kept
            i = bisect_left(kept_offsets, header.base_offset)
            if i == len(kept_offsets) or kept_offsets[i] > header.last_offset:
                stats.records_read += header.record_count
                return self._emptied(header, work)
        records = decode_records(buf, pos, verify=False)
        stats.records_read += len(records)
        offset_map = self.map
        latest = offset_map.latest_offset
        horizon = delete_horizon(header)
        now = self.now_ms
        kept: list[Record] = []
        tombstones = False
        for record in records:
            offset = record.offset
            assert offset is not None
            if offset <= latest:
                key = record.key
                if key is None:
                    if offset < work.first_dirty:  # the map counted those after it
                        stats.records_without_key += 1
                    continue
                if offset < offset_map.get(key):
                    continue
                if record.value is None and horizon is not None and now >= horizon:
                    stats.tombstones_dropped += 1
                    continue
            if record.value is None:
                tombstones = True
            kept.append(record)
        stats.records_kept += len(kept)
        if not kept:
            return self._emptied(header, work)
        new_horizon = horizon
        if tombstones and horizon is None:
            new_horizon = now + self.log.config.delete_retention_ms
        if tombstones and new_horizon is not None:
            work.horizon = new_horizon if work.horizon < 0 else min(work.horizon, new_horizon)
        if len(kept) == len(records) and new_horizon == horizon:
            return buf[pos : pos + header.size]
        return rewrite_batch(header, kept, horizon=new_horizon)

    def _emptied(self, header: BatchHeader, work: _Round) -> bytes | None:
        """A batch with nothing left: a header-only batch where Kafka keeps one (an
        idempotent producer's last batch, the round's last batch), else nothing."""
        retain = header.next_offset == work.first_uncleanable or (
            header.producer_id >= 0
            and work.producers_last.get(header.producer_id) == header.last_offset
        )
        if retain:
            self.stats.batches_emptied += 1
            return empty_batch(header)
        return None


def map_entry_bytes(key_length: int) -> int:
    """What `OffsetMap` counts for one key of ``key_length`` bytes (docs, bench)."""
    return _COSTS[key_length if key_length <= _RAW_KEY_BYTES else _DIGEST_BYTES]
