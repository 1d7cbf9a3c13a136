"""A partition's segments as they are written and read: Kafka's LocalLog.

Writes come from one thread at a time (the partition's lane). Readers on other
threads take one immutable snapshot (``_View``) of the segments, log start,
end offset and active size at entry and never look past it, so an append is
invisible until it is complete (and, with ``flush="always"``, fsynced).

The ``recovery-point`` file records an offset below which every segment is known
to be fully on disk: segments are fsynced (with the directory) when they roll,
and the whole log on a clean close. Recovery (rustka/storage/log_loader.py) only
CRC-scans segments at or after it, so a restart after a crash costs one segment
scan, not the whole partition.

Transactions (docs/kafka.md, "Transactions"): the producer state tracks each
producer's open transaction; the view carries the last stable offset (the
first offset of the earliest open transaction, else the end), published with
every write, so `read_committed` never serves a batch at or past it. The
coordinator ends a transaction with `append_marker`, a control batch checked
(rustka/storage/log_append.py) and stored like any other batch.

Retention and DeleteRecords are rustka/storage/log_retention.py, opening is
rustka/storage/log_loader.py, and `rustka.storage.partition_log.PartitionLog`
puts them together (docs/architecture.md, "Storage").
"""

from __future__ import annotations

import contextlib
import struct
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rustka.errors import (
    CorruptBatch,
    InvalidBatch,
    OffsetLost,
    OffsetOutOfRange,
    StorageError,
)
from rustka.record.batch import (
    BatchHeader,
    Record,
    decode_records,
    parse_header,
    set_base_offset,
    validate_batches,
)
from rustka.record.control import COMMIT, encode_control_batch
from rustka.storage.log_append import AppendInfo, stage_producers
from rustka.storage.log_config import LogConfig
from rustka.storage.log_files import (
    RECOVERY_POINT_FILE,
    CleanerCheckpoint,
    encode_recovery_point,
)
from rustka.storage.log_loader import replace_log_file
from rustka.storage.offset_index import INDEX_ENTRY_SIZE
from rustka.storage.producer_state import AbortedTxn, ProducerStateManager
from rustka.storage.segment import MAX_RELATIVE_OFFSET, MAX_SEGMENT_SIZE, Segment
from rustka.storage.time_index import TIME_INDEX_ENTRY_SIZE

__all__ = ["LocalLog", "SegmentsChanged"]

_OFFSET_LENGTH = struct.Struct(">qi")


class SegmentsChanged(StorageError):
    """The segments a clean read are no longer the log's (retention or a roll moved on)."""


@dataclass(frozen=True, slots=True)
class _View:
    """What a reader may see; replaced as a whole after each completed write."""

    segments: tuple[Segment, ...]
    bases: tuple[int, ...]
    log_start: int
    end: int
    active_size: int
    size_bytes: int
    last_stable: int


class LocalLog:
    """The segments of one partition directory, oldest first; the last one is active.

    Construct `rustka.storage.partition_log.PartitionLog` (its ``open``), which adds
    opening, retention and cleaning to this.
    """

    directory: Path
    config: LogConfig

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: list[Segment],
        recovery_point: int,
        clock: Callable[[], int],
        log_start: int = 0,
    ) -> None:
        """Use ``PartitionLog.open``; this only wires up already-loaded segments."""
        self.directory = directory
        self.config = config
        self._clock = clock
        self._segments = segments
        # Where DeleteRecords put the log start; the first segment's base counts when
        # it is higher (retention deleted past it).
        self._log_start = log_start
        self._recovery_point = recovery_point
        # Time-based rolling counts from the later of the first batch's timestamp
        # and when this process started the segment, so batches with old client
        # timestamps cannot make every append roll.
        self._active_started_ms: int | None = None
        # Deleted segments still open for readers in flight, each with the time (ms, the
        # log's clock) from which it may close: file.delete.delay.ms after its deletion.
        self._doomed: list[tuple[Segment, int]] = []
        self._failed: str | None = None
        self._closed = False
        self._producers = ProducerStateManager()
        self._view = self._make_view(sum(s.size for s in segments))
        self.producer_state_problems: list[str] = []
        # What opening found wrong with the log-start-offset file, for the startup log.
        self.log_start_note: str | None = None
        self._cleaner = CleanerCheckpoint()

    # ------------------------------------------------------------------ producer state

    @property
    def producer_state(self) -> ProducerStateManager:
        """The committed idempotent producer state (read it on the partition's lane)."""
        return self._producers

    # ------------------------------------------------------------------ snapshots

    def _make_view(self, size_bytes: int, view: _View | None = None) -> _View:
        segments = tuple(self._segments) if view is None else view.segments
        bases = tuple(s.base_offset for s in segments) if view is None else view.bases
        active = segments[-1]
        log_start = max(segments[0].base_offset, self._log_start)
        end = active.next_offset
        unstable = self._producers.first_unstable_offset()
        last_stable = end if unstable is None else min(unstable, end)
        return _View(
            segments, bases, log_start, end, active.size, size_bytes, max(last_stable, log_start)
        )

    @property
    def log_start_offset(self) -> int:
        return self._view.log_start

    @property
    def end_offset(self) -> int:
        return self._view.end

    @property
    def size_bytes(self) -> int:
        return self._view.size_bytes

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: below it every transaction has ended (the end with none open)."""
        return self._view.last_stable

    def open_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of each transaction open on this partition."""
        return self._producers.ongoing()

    def aborted_transactions(self, start: int, upto: int) -> list[AbortedTxn]:
        """The aborted transactions with records in [start, upto) (read_committed Fetch)."""
        return self._producers.aborted_between(start, upto)

    def is_aborted(self, producer_id: int, offset: int) -> bool:
        """Whether the transactional batch of ``producer_id`` at ``offset`` was aborted."""
        return self._producers.is_aborted(producer_id, offset)

    @property
    def segments(self) -> list[Segment]:
        return list(self._view.segments)

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    def describe(self) -> dict[str, Any]:
        """The numbers an operator wants first: bounds, segment count, bytes."""
        view = self._view
        return {
            "log_start": view.log_start,
            "end": view.end,
            "segments": len(view.segments),
            "bytes": view.size_bytes,
        }

    def __repr__(self) -> str:
        view = self._view
        return f"<{type(self).__name__} {self.directory} offsets {view.log_start}..{view.end}>"

    # ------------------------------------------------------------------ appending

    def append(self, data: bytes | bytearray | memoryview) -> AppendInfo:
        """Append one payload of batches; returns its (first, last) offsets.

        A retried idempotent batch is not stored again: the result has
        ``duplicate`` set and the offsets it got the first time. A sequence or
        epoch error is raised (OutOfOrderSequence, ProducerFenced).
        """
        info = self.append_many([data])[0]
        if info.error is not None:
            raise info.error
        return info

    def append_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int = 0
    ) -> int:
        """End ``producer_id``'s transaction here with a commit or abort control batch.

        Only the coordinator calls this (on the partition's lane). An epoch
        older than the producer's on this partition is ProducerFenced, as in
        Kafka; a producer with no open transaction here still gets its marker
        (the coordinator writes one to every partition the transaction added,
        and a restart rolling a decision forward may write one twice), which
        changes nothing. Returns the marker's offset.
        """
        batch = encode_control_batch(
            producer_id, producer_epoch, COMMIT if commit else 0, coordinator_epoch, self._clock()
        )
        info = self.append_many([batch], [[(0, parse_header(batch))]])[0]
        if info.error is not None:
            raise info.error
        return info.first

    def append_many(
        self,
        payloads: Sequence[bytes | bytearray | memoryview],
        validated: Sequence[list[tuple[int, BatchHeader]]] | None = None,
    ) -> list[AppendInfo]:
        """Group commit: assign offsets to several payloads and write them together.

        One copy into a bytearray, base offsets rewritten in place (the CRC does
        not cover them), and one ``os.write`` per segment touched. All or
        nothing: a bad payload raises InvalidBatch before anything is written,
        and a failed write is rolled back before StorageError is raised.

        ``validated`` carries `validate_batches` results the caller already
        computed (the broker validates each request on arrival so that one bad
        request fails alone); the CRCs are then not computed a second time.

        Batches with a producer id are checked against the idempotent producer
        state first (rustka/storage/producer_state.py), payload by payload: a
        duplicate is not written and its AppendInfo carries ``duplicate=True``
        and the original offsets; a sequence or epoch error is returned in that
        payload's ``error`` (offsets -1) while the other payloads are written.
        """
        self._check_writable()
        if not payloads:
            return []
        parsed: list[list[tuple[int, BatchHeader]]] = []
        if validated is not None:
            parsed = list(validated)
        else:
            for i, payload in enumerate(payloads):
                try:
                    parsed.append(validate_batches(payload))
                except InvalidBatch as e:
                    if len(payloads) == 1:
                        raise
                    raise InvalidBatch(f"payload {i}: {e}") from None
        results: list[AppendInfo] = []
        stage = self._producers.begin()
        offset = self._segments[-1].next_offset
        kept: list[int] = []
        counts: list[int] = []
        for i, payload_batches in enumerate(parsed):
            count = sum(h.last_offset_delta + 1 for _, h in payload_batches)
            info = None
            # Only idempotent batches need the producer state; seed records never do.
            if any(h.producer_id >= 0 for _, h in payload_batches):
                info = stage_producers(stage, payload_batches, offset, payloads[i])
            if info is None:
                info = AppendInfo(offset, offset + count - 1)
                offset += count
                kept.append(i)
                counts.append(count)
            results.append(info)
        if len(kept) != len(payloads):
            if not kept:
                stage.commit()
                return results
            payloads = [payloads[i] for i in kept]
            parsed = [parsed[i] for i in kept]
        buf = bytearray().join(payloads)
        config = self.config
        now = self._clock() if config.segment_ms is not None else 0
        active = self._segments[-1]
        next_offset = active.next_offset
        touched: list[tuple[Segment, int]] = [(active, active.size)]
        created: list[Segment] = []
        old_recovery_point = self._recovery_point
        chunk_start = 0
        chunk: list[tuple[int, BatchHeader]] = []
        at = 0
        try:
            for payload_batches, payload, count in zip(parsed, payloads, counts, strict=True):
                length = len(payload)
                pending = at - chunk_start
                if self._should_roll(active, pending, length, next_offset + count - 1, now):
                    if chunk:
                        self._write_chunk(active, buf, chunk_start, at, chunk)
                    active = self._roll_to(next_offset, now)
                    created.append(active)
                    touched.append((active, 0))
                    chunk_start = at
                    chunk = []
                for pos, header in payload_batches:
                    set_base_offset(buf, at + pos, next_offset)
                    chunk.append((at + pos - chunk_start, header))
                    next_offset += header.last_offset_delta + 1
                at += length
            if chunk:
                self._write_chunk(active, buf, chunk_start, at, chunk)
            if config.flush == "always":
                # The data, not the indexes: recovery rebuilds the active segment's
                # indexes (Segment.flush_log), and a sealed one was fsynced whole.
                for seg, _ in touched:
                    self._fsync(seg, log_only=True)
        except (OSError, StorageError) as e:
            self._undo(touched, created, old_recovery_point)
            detail = e.strerror if isinstance(e, OSError) else str(e)
            raise StorageError(
                f"append to {self.directory} failed, nothing was written: {detail}"
            ) from e
        stage.commit()
        self._publish(self._view.size_bytes + len(buf), segments_changed=bool(created))
        return results

    def _write_chunk(
        self, seg: Segment, buf: bytearray, start: int, end: int, batches: list[Any]
    ) -> None:
        view = memoryview(buf)[start:end]
        try:
            seg.append(view, batches)
        finally:
            view.release()

    def _should_roll(
        self, active: Segment, pending: int, length: int, last_offset: int, now: int
    ) -> bool:
        """Roll before a payload if the active segment or one of its indexes is full (Kafka's
        segment.bytes, segment.index.bytes), it is old, or out of index range."""
        size = active.size + pending
        if size == 0:
            return False
        config = self.config
        if size >= config.segment_bytes or size + length > MAX_SEGMENT_SIZE:
            return True
        index_bytes = config.segment_index_bytes
        if (
            active.index_entries >= index_bytes // INDEX_ENTRY_SIZE
            or len(active.time_index) >= index_bytes // TIME_INDEX_ENTRY_SIZE
        ):
            return True
        if last_offset - active.base_offset > MAX_RELATIVE_OFFSET:
            return True
        return self._past_segment_ms(active, now)

    def _past_segment_ms(self, active: Segment, now: int) -> bool:
        """Whether the active segment is older than segment_ms (and holds something)."""
        segment_ms = self.config.segment_ms
        if segment_ms is None or active.size == 0:
            return False
        started = active.first_timestamp
        if self._active_started_ms is not None:
            started = max(started, self._active_started_ms)
        return started >= 0 and now - started > segment_ms

    def _roll_to(self, base_offset: int, now: int) -> Segment:
        """Seal the active segment and start a new one at ``base_offset``.

        The sealed segment and the directory are fsynced before the recovery
        point moves past it, so recovery may skip it from then on.
        """
        self._fsync(self._segments[-1])
        # The committed producer state belongs to the published end, which is
        # durable now; a crash replays headers from there (producer_state.py).
        self._producers.write_snapshot(self.directory, self._view.end)
        seg = Segment.create(self.directory, base_offset, self.config.index_interval_bytes)
        self._segments.append(seg)
        try:
            self._write_recovery_point(base_offset)
        except StorageError:
            self._segments.pop()
            seg.close()
            with contextlib.suppress(StorageError):
                seg.remove_files()
            raise
        self._active_started_ms = now
        return seg

    def _undo(
        self, touched: list[tuple[Segment, int]], created: list[Segment], recovery_point: int
    ) -> None:
        """Put the log back as it was before a failed append_many."""
        try:
            for seg in reversed(created):
                self._segments.remove(seg)
                seg.close()
                seg.remove_files()
            for seg, size in touched:
                if seg not in created and seg.size != size:
                    seg.truncate_to(size)
                    seg.flush()
            if self._recovery_point != recovery_point:
                self._write_recovery_point(recovery_point)
        except (OSError, StorageError) as e:
            self._failed = (
                f"partition {self.directory} could not be rolled back after a failed write "
                f"({e}); reopen it with recovery"
            )

    def _publish(self, size_bytes: int, *, segments_changed: bool) -> None:
        self._view = self._make_view(size_bytes, None if segments_changed else self._view)

    def _fsync(self, seg: Segment, *, log_only: bool = False) -> None:
        """fsync ``seg``; a failure fences the partition until it is reopened.

        After an fsync error the kernel may have dropped the unwritten pages and
        marked them clean, so a later fsync can succeed without the data being on
        disk. Only a reopen, which runs recovery, may trust the files again
        (docs/reliability.md, "fsync failure").
        """
        try:
            if log_only:
                seg.flush_log()
            else:
                seg.flush()
        except StorageError as e:
            if self._failed is None:
                self._failed = (
                    f"partition {self.directory} refuses writes after a failed fsync ({e}); "
                    f"reopen it (restart the broker) to run recovery"
                )
            raise

    def _check_writable(self) -> None:
        if self._closed:
            raise StorageError(f"partition {self.directory} is closed")
        if self._failed is not None:
            raise StorageError(self._failed)

    def roll(self) -> None:
        """Start a new segment now (if the active one holds anything)."""
        self._check_writable()
        active = self._segments[-1]
        if active.size == 0:
            return
        self._roll_to(active.next_offset, self._clock())
        self._publish(self._view.size_bytes, segments_changed=True)

    def flush(self) -> None:
        """fsync what the active segment holds (sealed segments were fsynced at roll)."""
        self._check_writable()
        self._fsync(self._segments[-1])

    # ------------------------------------------------------------------ reading

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole CRC-checked batches from the one holding ``offset``, within one segment."""
        view = self._view
        if offset < view.log_start or offset > view.end:
            raise OffsetOutOfRange(offset, view.log_start, view.end)
        if offset == view.end:
            return b""
        segments = view.segments
        last = len(segments) - 1
        i = bisect_right(view.bases, offset) - 1
        while True:
            seg = segments[i]
            data = seg.read(offset, max_bytes, view.active_size if i == last else None)
            if data:
                return data
            if i == last:
                raise CorruptBatch(
                    f"{seg.log_path}: offset {offset} is below the end offset {view.end} "
                    f"but no stored batch holds it"
                )
            # A hole left by recovery or the cleaner: serve from the next segment's first
            # offset (nothing, if that is the end: an active segment still empty).
            i += 1
            offset = segments[i].base_offset
            if offset >= view.end:
                return b""

    def read_committed(self, offset: int, max_bytes: int) -> tuple[bytes, int]:
        """`read`, but only batches below the last stable offset; also returns that LSO.

        A read_committed consumer may see nothing at or past the LSO (Kafka's
        FetchIsolation.TXN_COMMITTED): the batches read are cut at the first
        one that starts there.
        """
        last_stable = self._view.last_stable
        if offset >= last_stable:
            if offset > self._view.end or offset < self._view.log_start:
                raise OffsetOutOfRange(offset, self._view.log_start, self._view.end)
            return b"", last_stable
        data = self.read(offset, max_bytes)
        pos = 0
        size = len(data)
        while pos + 12 <= size:
            base, length = _OFFSET_LENGTH.unpack_from(data, pos)
            if base >= last_stable:
                break
            pos += length + 12
        return (data if pos >= size else data[:pos]), last_stable

    def read_record(self, offset: int) -> Record | None:
        """The record at ``offset`` (CRC verified), or None at or after the end.

        An offset below the end that no segment holds was cut out by crash
        recovery: that is OffsetLost naming the next stored offset, so the seed
        Fetch can say so instead of a bare "not found" (docs/protocol.md).
        """
        view = self._view
        if offset >= view.end:
            return None
        data = self.read(offset, 1)
        records = decode_records(data, 0, verify=True, min_offset=offset)
        if records and records[0].offset == offset:
            return records[0]
        if records and records[0].offset is not None and records[0].offset > offset:
            raise OffsetLost(offset, records[0].offset)
        return None

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """The earliest (offset, timestamp) whose record timestamp is >= ``timestamp``.

        Kafka's ListOffsets by time: segments are tried oldest first, skipping
        those whose max timestamp is older; within one the time index narrows the
        walk; records below the log start are never an answer (Kafka searches from
        its log start offset). None when no stored record is that new.
        """
        view = self._view
        last = len(view.segments) - 1
        for i, seg in enumerate(view.segments):
            if seg.max_timestamp < timestamp or seg.next_offset <= view.log_start:
                continue
            hit = seg.find_offset_by_timestamp(
                timestamp, view.active_size if i == last else None, min_offset=view.log_start
            )
            if hit is not None and hit[0] < view.end:
                return hit
        return None

    # ------------------------------------------------------------------ recovery point

    def _write_recovery_point(self, offset: int) -> None:
        """Atomically replace the recovery-point file (tmp, fsync, rename, fsync dir)."""
        replace_log_file(self.directory, RECOVERY_POINT_FILE, encode_recovery_point(offset))
        self._recovery_point = offset
