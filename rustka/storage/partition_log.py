"""A partition's log: ordered segments with append, roll, read, retention and recovery.

Writes come from one thread at a time (the partition's lane). Readers on other
threads take one immutable snapshot (``_View``) of the segments, log start,
end offset and active size at entry and never look past it, so an append is
invisible until it is complete (and, with ``flush="always"``, fsynced).

The ``recovery-point`` file records an offset below which every segment is known
to be fully on disk: segments are fsynced (with the directory) when they roll,
and the whole log on a clean close. Recovery only CRC-scans segments at or after
it, so a restart after a crash costs one segment scan, not the whole partition.

On a compacted log the cleaner (rustka/storage/cleaner.py) writes replacement
segments; `replace_segments` swaps one in with the ``cleaner-swap`` file as its
commit point, and opening finishes a swap a crash interrupted, or removes the
``.cleaned`` files of one that never reached it (docs/kafka.md, "Log
compaction"). The ``cleaner-checkpoint`` says where the uncleaned part starts
and below which segments may hold the gaps cleaning leaves.

The log start is the first segment's base offset unless DeleteRecords moved it
further, possibly into the middle of a segment (Kafka's log start offset). The
``log-start-offset`` file keeps that offset across restarts; it is written
(replaced whole, fsynced) before readers see the new start, so an answered
DeleteRecords survives a crash. Reads below the log start are OffsetOutOfRange
even where a segment still holds the records, and retention deletes the
segments that lie wholly below it (docs/kafka.md, "DeleteRecords").

Transactions (docs/kafka.md, "Transactions"): the producer state tracks each
producer's open transaction; the view carries the last stable offset (the
first offset of the earliest open transaction, else the end), published with
every write, so `read_committed` never serves a batch at or past it. The
coordinator ends a transaction with `append_marker`, a control batch checked
and stored like any other batch; `aborted_transactions` answers which
producers' records a read_committed consumer drops in a range.
"""

from __future__ import annotations

import contextlib
import os
import struct
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rustka.errors import (
    CorruptBatch,
    InvalidBatch,
    OffsetLost,
    OffsetOutOfRange,
    OutOfOrderSequence,
    ProducerFenced,
    RustkaError,
    StorageError,
)
from rustka.record.batch import (
    BatchHeader,
    Record,
    decode_records,
    ms_now,
    parse_header,
    set_base_offset,
    validate_batches,
)
from rustka.record.control import (
    COMMIT,
    CONTROL_BIT,
    TRANSACTIONAL_BIT,
    encode_control_batch,
    marker_type,
)
from rustka.storage.file_io import close_all, fsync_dir, replace_file
from rustka.storage.log_config import LogConfig
from rustka.storage.log_files import (
    CLEANED_SUFFIX,
    CLEANER_CHECKPOINT_FILE,
    CLEANER_SWAP_FILE,
    INDEX_SUFFIX,
    LEFTOVER_SUFFIXES,
    LOG_START_FILE,
    LOG_SUFFIX,
    RECOVERY_POINT_FILE,
    SEGMENT_SUFFIXES,
    TIME_INDEX_SUFFIX,
    CleanerCheckpoint,
    CleanerSwap,
    DamagedFile,
    DamagedRecoveryPoint,
    base_offset_of,
    decode_cleaner_checkpoint,
    decode_cleaner_swap,
    decode_log_start,
    decode_recovery_point,
    encode_cleaner_checkpoint,
    encode_cleaner_swap,
    encode_log_start,
    encode_recovery_point,
    segment_file_name,
)
from rustka.storage.offset_index import INDEX_ENTRY_SIZE
from rustka.storage.producer_state import (
    AbortedTxn,
    BatchMetadata,
    PendingProducerState,
    ProducerStateManager,
)
from rustka.storage.segment import MAX_RELATIVE_OFFSET, MAX_SEGMENT_SIZE, Segment
from rustka.storage.time_index import TIME_INDEX_ENTRY_SIZE

__all__ = ["AppendInfo", "PartitionLog", "SegmentsChanged"]

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


class PartitionLog:
    """The segments of one partition directory, oldest first; the last one is active."""

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
        """Use ``open``; this only wires up already-loaded segments."""
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

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        recover: bool = False,
        clock: Callable[[], int] = ms_now,
    ) -> PartitionLog:
        """Load the partition from its directory listing and index files.

        ``recover=True`` CRC-scans the segments at or after the recovery point;
        the rest are trusted (they were fsynced when they rolled).
        """
        directory = Path(directory)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            _finish_cleaner_swap(directory)
            bases = _tidy_directory(directory)
        except OSError as e:
            raise StorageError(f"cannot list partition directory {directory}: {e}") from e
        recovery_point = _read_recovery_point(directory)
        log_start, log_start_note = _read_log_start(directory)
        checkpoint = _read_cleaner_checkpoint(directory, bases, config.compact)
        interval = config.index_interval_bytes
        segments: list[Segment] = []
        try:
            for i, base in enumerate(bases):
                scan = recover and base >= recovery_point
                gaps = base < checkpoint.cleaned_below
                seg = Segment.open(directory, base, interval, recover=scan, gaps=gaps)
                segments.append(seg)
                info = seg.last_recovery
                if scan and info is not None and info.truncated_bytes and i + 1 < len(bases):
                    # Data after a torn write was never made durable in order;
                    # keeping it would leave a hole in the offsets.
                    dropped = bases[i + 1 :]
                    _remove_segment_files(directory, dropped)
                    seg.last_recovery = replace(
                        info,
                        reason=f"{info.reason}; later segments {dropped} deleted",
                    )
                    break
            if segments and segments[-1].next_offset < log_start:
                # Segment files lost below a DeleteRecords (Kafka's LogLoader: delete them
                # all and start the log at the stored log start, so no deleted offset is
                # handed out again).
                log_start_note = (
                    f"the log ended at {segments[-1].next_offset}, below its log start "
                    f"{log_start}: its segments were deleted and it starts at {log_start}"
                )
                close_all(segments)
                _remove_segment_files(directory, [seg.base_offset for seg in segments])
                segments = [Segment.create(directory, log_start, interval)]
                fsync_dir(directory)
            if not segments:
                segments.append(Segment.create(directory, 0, interval))
                fsync_dir(directory)
        except OSError as e:
            for seg in segments:
                seg.close()
            raise StorageError(f"cannot open partition {directory}: {e}") from e
        except BaseException:
            for seg in segments:
                seg.close()
            raise
        log = cls(directory, config, segments, recovery_point, clock, log_start)
        log._cleaner = checkpoint
        log.log_start_note = log_start_note
        try:
            log._load_producer_state()
            if recovery_point != segments[-1].base_offset:
                # Until the next clean close the active segment is not known to be
                # on disk, so a crash must rescan it.
                log._write_recovery_point(segments[-1].base_offset)
        except BaseException:
            log._close_segments()
            raise
        return log

    # ------------------------------------------------------------------ producer state

    def _load_producer_state(self) -> None:
        """Rebuild the idempotent producer state: the snapshot, then the headers after it.

        A snapshot past the end (recovery cut the log below it) or a damaged
        one is ignored and every stored header is replayed instead, so the
        state reflects exactly the batches that survived.
        """
        view = self._view
        start = view.log_start
        snapshot = ProducerStateManager.read_snapshot(self.directory)
        if snapshot is not None and snapshot[0] <= view.end:
            start = max(start, snapshot[0])
            self._producers = snapshot[1]
        state = self._producers
        for seg in view.segments:
            if seg.next_offset <= start:
                continue
            try:
                for _, header in seg.headers_from(max(start, seg.base_offset)):
                    if header.producer_id < 0:
                        continue
                    if header.attributes & CONTROL_BIT:
                        kind = marker_type(seg.read(header.base_offset, 1))
                        if kind is not None:
                            state.end_transaction(
                                header.producer_id,
                                header.producer_epoch,
                                header.base_offset,
                                kind == COMMIT,
                            )
                        continue
                    state.update(
                        header.producer_id,
                        header.producer_epoch,
                        header.base_sequence,
                        header.last_offset_delta + 1,
                        header.base_offset,
                        header.last_offset,
                        bool(header.attributes & TRANSACTIONAL_BIT),
                    )
            except CorruptBatch as e:
                # Reads of that batch fail and say so; the rest still counts.
                self.producer_state_problems.append(str(e))
        state.forget_aborted_below(view.log_start)
        self._publish(view.size_bytes, segments_changed=False)

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
        return f"<PartitionLog {self.directory} offsets {view.log_start}..{view.end}>"

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
                info = _stage_producers(stage, payload_batches, offset, payloads[i])
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
                for seg, _ in touched:
                    self._fsync(seg)
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

    def _fsync(self, seg: Segment) -> None:
        """fsync ``seg``; a failure fences the partition until it is reopened.

        After an fsync error the kernel may have dropped the unwritten pages and
        marked them clean, so a later fsync can succeed without the data being on
        disk. Only a reopen, which runs recovery, may trust the files again
        (docs/reliability.md, "fsync failure").
        """
        try:
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

    # ------------------------------------------------------------------ retention

    def enforce_retention(self, now_ms: int) -> list[int]:
        """Delete whole oldest segments beyond retention_bytes or older than retention_ms.

        Never the active segment: an old, non-empty active segment is rolled so
        a later pass can expire it. Segments deleted earlier whose
        file.delete.delay.ms is over are closed now (the broker normally
        releases them when it is over, `release_deleted`). Returns the base
        offsets deleted.

        Segments wholly below the log start DeleteRecords set go under any
        cleanup.policy. Time and size retention only under cleanup.policy
        "delete" (or "compact,delete"): a compact-only log keeps its segments
        for the cleaner. A compacted log's active
        segment is rolled once it is older than segment_ms even if nothing is
        appended, because the cleaner never touches the active segment: without
        the roll the last records of an idle topic would never be compacted
        (Kafka rolls only at the next append).
        """
        self._check_writable()
        self._release_doomed(self._clock())
        config = self.config
        if config.compact and self._past_segment_ms(self._segments[-1], now_ms):
            self.roll()
        candidates = self._segments[:-1]
        active = self._segments[-1]
        total = self._view.size_bytes
        # Below the log start DeleteRecords set, whatever the cleanup policy (Kafka's
        # deleteLogStartOffsetBreachedSegments): a segment whose successor starts at
        # or below it holds nothing readable.
        count = 0
        log_start = self._view.log_start
        for seg, successor in zip(candidates, self._segments[1:], strict=False):
            if successor.base_offset > log_start:
                break
            total -= seg.size
            count += 1
        if not config.delete:
            return self._delete_oldest(count)
        retention_ms = config.retention_ms
        retention_bytes = config.retention_bytes
        for seg in candidates[count:]:
            expired = retention_ms is not None and self._segment_time(seg) < now_ms - retention_ms
            oversize = retention_bytes is not None and total > retention_bytes
            if not (expired or oversize):
                break
            total -= seg.size
            count += 1
        deleted = self._delete_oldest(count)
        # Roll only after deleting: a roll writes files, and on a full disk it would
        # fail before anything was freed, every pass (docs/reliability.md, "Full disk").
        if (
            retention_ms is not None
            and active.size > 0
            and self._segment_time(active) < now_ms - retention_ms
        ):
            self.roll()
        return deleted

    def delete_records(self, offset: int) -> int:
        """Move the log start up to ``offset`` (Kafka's DeleteRecords); returns the log start.

        ``offset`` is at most the end (the high watermark; -1 means it), else
        OffsetOutOfRange. The log start never moves back: an offset at or below
        it changes nothing. The new start may lie inside a segment. The records
        below it are unreadable from the moment this returns; their segments
        are deleted by the next retention pass once the whole segment lies
        below. Durable before it is visible: the end is fsynced first (so the
        log start never points past what a crash can keep) and then the
        ``log-start-offset`` file is replaced (tmp, fsync, rename, fsync dir).
        """
        self._check_writable()
        view = self._view
        target = view.end if offset == -1 else offset
        if target < 0 or target > view.end:
            raise OffsetOutOfRange(offset, view.log_start, view.end)
        if target <= view.log_start:
            return view.log_start
        if self.config.flush != "always":
            self._fsync(self._segments[-1])
        try:
            replace_file(self.directory / LOG_START_FILE, encode_log_start(target))
        except OSError as e:
            raise StorageError(
                f"cannot move the log start of {self.directory} to {target}: {e.strerror}"
            ) from e
        self._log_start = target
        self._publish(self._view.size_bytes, segments_changed=False)
        return self._view.log_start

    def delete_before(self, offset: int) -> list[int]:
        """Delete the oldest non-active segments whose offsets all lie below ``offset``."""
        self._check_writable()
        self._release_doomed(self._clock())
        count = 0
        for seg in self._segments[:-1]:
            if seg.next_offset > offset:
                break
            count += 1
        return self._delete_oldest(count)

    def _segment_time(self, seg: Segment) -> int:
        """Newest timestamp in the segment; the file time when batches carry none."""
        return seg.max_timestamp if seg.max_timestamp >= 0 else seg.mtime_ms()

    def _delete_oldest(self, count: int) -> list[int]:
        """Drop ``count`` oldest segments: move log start first, then rename the files."""
        if count <= 0:
            return []
        count = min(count, len(self._segments) - 1)
        doomed = self._segments[:count]
        del self._segments[:count]
        self._producers.forget_aborted_below(self._segments[0].base_offset)
        freed = sum(seg.size for seg in doomed)
        self._publish(self._view.size_bytes - freed, segments_changed=True)
        self._doom(doomed)
        errors: list[str] = []
        for seg in doomed:
            try:
                seg.delete()
            except StorageError as e:
                errors.append(str(e))
        try:
            fsync_dir(self.directory)
        except OSError as e:
            errors.append(f"fsync of {self.directory} failed: {e.strerror}")
        if errors:
            raise StorageError("; ".join(errors))
        return [seg.base_offset for seg in doomed]

    def release_deleted(self) -> int:
        """Close the files of segments retention deleted, so their space returns now.

        Deleted segments keep their descriptors open for readers that took a
        snapshot before the deletion; the broker calls this on the partition's
        lane the topic's file.delete.delay.ms after the pass (docs/reliability.md,
        "Full disk"), instead of waiting for the next pass. Only those whose
        delay is over go: a segment deleted since keeps its own. Returns how
        many were released.
        """
        return self._release_doomed(self._clock())

    def _doom(self, segments: Sequence[Segment]) -> None:
        """Keep deleted ``segments`` open for readers in flight for file.delete.delay.ms."""
        due = self._clock() + self.config.file_delete_delay_ms
        self._doomed.extend((seg, due) for seg in segments)

    def _release_doomed(self, now_ms: int | None = None) -> int:
        """Close and remove deleted segments whose delay is over at ``now_ms`` (all: None)."""
        doomed: list[Segment] = []
        waiting: list[tuple[Segment, int]] = []
        for seg, due in self._doomed:
            if now_ms is None or due <= now_ms:
                doomed.append(seg)
            else:
                waiting.append((seg, due))
        self._doomed = waiting
        for seg in doomed:
            seg.close()
            with contextlib.suppress(StorageError):
                seg.remove_files()
        return len(doomed)

    # ------------------------------------------------------------------ cleaning

    @property
    def cleaner_checkpoint(self) -> CleanerCheckpoint:
        """Where the cleaner's last round left this log (log_files.CleanerCheckpoint)."""
        return self._cleaner

    def set_cleaner_checkpoint(self, checkpoint: CleanerCheckpoint) -> None:
        """Record the end of a cleaning round (on the partition's lane).

        ``cleaned_below`` never goes down: segments the cleaner wrote stay where
        gaps are allowed, whatever a caller passes.
        """
        self._check_writable()
        checkpoint = replace(
            checkpoint, cleaned_below=max(checkpoint.cleaned_below, self._cleaner.cleaned_below)
        )
        if checkpoint != self._cleaner:
            _replace_file(
                self.directory, CLEANER_CHECKPOINT_FILE, encode_cleaner_checkpoint(checkpoint)
            )
            self._cleaner = checkpoint

    def replace_segments(self, old: Sequence[Segment], cleaned: Segment) -> None:
        """Swap the cleaner's ``cleaned`` segment in for the consecutive sealed ``old`` ones.

        Runs on the partition's lane. ``cleaned`` is a complete segment written
        under ``.cleaned`` names with the base offset of ``old[0]``. The order
        makes a crash at any point recover to the old segments or to the
        cleaned one, never a mix: the cleaned files are fsynced, then the
        ``cleaner-swap`` file naming the swap is written (the commit point),
        then readers switch to ``cleaned``, the old files are renamed to
        ``.deleted`` (their descriptors stay open for readers in flight, like
        retention's), the cleaned files take their final names, the checkpoint
        learns the new bound for gaps, the producer-state snapshot is written
        (the replay after a crash then needs none of the batches cleaning
        removed), and the swap file goes. Opening finishes a swap whose file
        exists (`_finish_cleaner_swap`).

        SegmentsChanged (and nothing done) if ``old`` are no longer the log's
        segments in that order, or if the last of them became the active one.
        """
        self._check_writable()
        segments = self._segments
        first = next((i for i, seg in enumerate(segments) if seg is old[0]), None)
        stop = None if first is None else first + len(old)
        if (
            first is None
            or stop is None
            or stop >= len(segments)
            or any(a is not b for a, b in zip(segments[first:stop], old, strict=True))
        ):
            raise SegmentsChanged(
                f"{self.directory}: the segments from {old[0].base_offset} changed while "
                f"they were being cleaned"
            )
        if cleaned.base_offset != old[0].base_offset or not cleaned.log_path.name.endswith(
            CLEANED_SUFFIX
        ):
            raise StorageError(f"{cleaned.log_path} is not a cleaned copy of {old[0].log_path}")
        next_base = segments[stop].base_offset
        swap = CleanerSwap(cleaned.base_offset, tuple(seg.base_offset for seg in old), next_base)
        try:
            cleaned.flush()
            fsync_dir(self.directory)
            _replace_file(self.directory, CLEANER_SWAP_FILE, encode_cleaner_swap(swap))
        except (OSError, StorageError) as e:
            detail = e.strerror if isinstance(e, OSError) else str(e)
            raise StorageError(f"swapping a cleaned segment into {self.directory}: {detail}") from e
        # Committed: from here on a failure leaves the swap to the next open.
        segments[first:stop] = [cleaned]
        freed = sum(seg.size for seg in old) - cleaned.size
        self._publish(self._view.size_bytes - freed, segments_changed=True)
        self._doom(old)
        try:
            for seg in old:
                seg.delete()
            cleaned.rename("")
            fsync_dir(self.directory)
            self._cleaner = replace(
                self._cleaner, cleaned_below=max(self._cleaner.cleaned_below, swap.cleaned_below)
            )
            _replace_file(
                self.directory, CLEANER_CHECKPOINT_FILE, encode_cleaner_checkpoint(self._cleaner)
            )
            self._producers.write_snapshot(self.directory, self._view.end)
            os.unlink(self.directory / CLEANER_SWAP_FILE)
            fsync_dir(self.directory)
        except (OSError, StorageError) as e:
            detail = e.strerror if isinstance(e, OSError) else str(e)
            self._failed = (
                f"partition {self.directory} refuses writes: swapping in a cleaned segment "
                f"failed half-way ({detail}); reopen it (restart the broker) to finish the swap"
            )
            raise StorageError(self._failed) from e

    # ------------------------------------------------------------------ recovery point

    def _write_recovery_point(self, offset: int) -> None:
        """Atomically replace the recovery-point file (tmp, fsync, rename, fsync dir)."""
        _replace_file(self.directory, RECOVERY_POINT_FILE, encode_recovery_point(offset))
        self._recovery_point = offset

    # ------------------------------------------------------------------ closing

    def close(self) -> None:
        """Flush, mark everything as durable in the recovery point, release the fds."""
        if self._closed:
            return
        try:
            if self._failed is None:
                self._segments[-1].flush()
                self._producers.write_snapshot(self.directory, self._view.end)
                self._write_recovery_point(self._segments[-1].next_offset)
        finally:
            self._closed = True
            self._close_segments()

    def _close_segments(self) -> None:
        try:
            close_all(self._segments)
        finally:
            self._release_doomed()


def _replace_file(directory: Path, name: str, data: bytes) -> None:
    """Atomically replace a small file of ``directory`` (tmp, fsync, rename, fsync dir)."""
    path = directory / name
    tmp = path.with_name(name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(directory)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise StorageError(f"cannot write {path}: {e.strerror}") from e


def _finish_cleaner_swap(directory: Path) -> None:
    """Complete the swap a ``cleaner-swap`` file records, before leftovers are tidied.

    The file exists only between a swap's commit point and its end
    (`PartitionLog.replace_segments`). While the cleaned log still has its
    ``.cleaned`` name, every file of the replaced segments goes (the old
    segment at the cleaned one's base included) and the cleaned files take
    their names; once it has its name, the old segments were already renamed
    to ``.deleted`` before it, so only the checkpoint and the swap file are
    left to settle. A damaged swap file is refused: it cannot tell which
    segments are current.
    """
    path = directory / CLEANER_SWAP_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    try:
        swap = decode_cleaner_swap(data)
    except DamagedFile as e:
        raise StorageError(
            f"{path} is damaged ({e}): it records a cleaned segment being swapped in, and "
            f"without it the current segments cannot be told from the replaced ones; restore "
            f"the partition from a copy, or remove the file after checking by hand which "
            f"segments to keep"
        ) from None
    cleaned = directory / (segment_file_name(swap.base, LOG_SUFFIX) + CLEANED_SUFFIX)
    if cleaned.exists():
        _remove_segment_files(directory, swap.replaced)
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX):
            final = directory / segment_file_name(swap.base, suffix)
            with contextlib.suppress(FileNotFoundError):
                os.rename(final.with_name(final.name + CLEANED_SUFFIX), final)
    else:
        _remove_segment_files(directory, [b for b in swap.replaced if b != swap.base])
    fsync_dir(directory)
    try:
        checkpoint = decode_cleaner_checkpoint((directory / CLEANER_CHECKPOINT_FILE).read_bytes())
    except (FileNotFoundError, DamagedFile):
        checkpoint = CleanerCheckpoint()
    if checkpoint.cleaned_below < swap.cleaned_below:
        checkpoint = replace(checkpoint, cleaned_below=swap.cleaned_below)
        _replace_file(directory, CLEANER_CHECKPOINT_FILE, encode_cleaner_checkpoint(checkpoint))
    os.unlink(path)
    fsync_dir(directory)


def _read_cleaner_checkpoint(
    directory: Path, bases: Sequence[int], compact: bool
) -> CleanerCheckpoint:
    """The stored checkpoint; none on a log that is not compacted means nothing was cleaned.

    A damaged one, or none on a compacted log, starts over from the log start
    and lets every segment but the last hold gaps: the active segment is never
    cleaned, and treating a cleaned segment's gap as damage would cut its later
    records off, while the price of leniency is only that a damaged base offset
    in a sealed segment goes unnoticed until its CRC-checked read.
    """
    lenient = CleanerCheckpoint(cleaned_below=bases[-1] if bases else 0)
    try:
        data = (directory / CLEANER_CHECKPOINT_FILE).read_bytes()
    except FileNotFoundError:
        return lenient if compact else CleanerCheckpoint()
    except OSError as e:
        raise StorageError(
            f"cannot read the cleaner checkpoint of {directory}: {e.strerror}"
        ) from e
    try:
        return decode_cleaner_checkpoint(data)
    except DamagedFile:
        return lenient


def _tidy_directory(directory: Path) -> list[int]:
    """Remove leftovers of interrupted work; return the segment base offsets, sorted."""
    names = os.listdir(directory)
    bases = {b for b in (base_offset_of(n) for n in names) if b is not None}
    removed = False
    for name in names:
        stale = name.endswith(LEFTOVER_SUFFIXES)
        if not stale:
            stale = any(
                (index_base := base_offset_of(name, suffix)) is not None and index_base not in bases
                for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
            )
        if stale:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / name)
            removed = True
    if removed:
        fsync_dir(directory)
    return sorted(bases)


def _remove_segment_files(directory: Path, bases: Sequence[int]) -> None:
    for base in bases:
        for suffix in SEGMENT_SUFFIXES:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / segment_file_name(base, suffix))
    fsync_dir(directory)


def _read_log_start(directory: Path) -> tuple[int, str | None]:
    """Where DeleteRecords put the log start (0 if it never did), and what was wrong.

    A damaged file is the one case without a safe answer: the records it hid
    are still stored, and losing data is worse than showing deleted records
    again, so the log starts at its first segment and the note says so (``rustka
    check`` reports the damage).
    """
    path = directory / LOG_START_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0, None
    except OSError as e:
        raise StorageError(f"cannot read the log start offset of {directory}: {e.strerror}") from e
    try:
        return decode_log_start(data), None
    except DamagedFile as e:
        return 0, (
            f"{path} is damaged ({e}): the log starts at its first segment, so records "
            f"DeleteRecords removed below it may be served again"
        )


def _read_recovery_point(directory: Path) -> int:
    """The stored recovery point, or 0 (scan everything) if absent or damaged."""
    try:
        data = (directory / RECOVERY_POINT_FILE).read_bytes()
    except FileNotFoundError:
        return 0
    except OSError as e:
        raise StorageError(f"cannot read the recovery point of {directory}: {e.strerror}") from e
    try:
        return decode_recovery_point(data)
    except DamagedRecoveryPoint:
        return 0


class AppendInfo(tuple[int, int]):
    """Where one payload landed: ``(first, last)`` offsets, plus what happened to it.

    Still a 2-tuple, so ``first, last = info`` keeps working. ``duplicate``:
    a retried idempotent batch, not stored again, answered with its original
    offsets. ``error``: the payload was refused (offsets -1) and nothing of it
    was stored, e.g. OutOfOrderSequence or ProducerFenced. ``log_append_time``:
    the time a LogAppendTime topic stamped the payload's batches with, else -1
    (set by the produce path, which stamps them).
    """

    duplicate: bool
    error: RustkaError | None
    log_append_time: int

    def __new__(
        cls, first: int, last: int, *, duplicate: bool = False, error: RustkaError | None = None
    ) -> AppendInfo:
        info = super().__new__(cls, (first, last))
        info.duplicate = duplicate
        info.error = error
        info.log_append_time = -1
        return info

    @property
    def first(self) -> int:
        return self[0]

    @property
    def last(self) -> int:
        return self[1]

    def __repr__(self) -> str:
        extra = ", duplicate" if self.duplicate else ""
        if self.error is not None:
            extra += f", error={self.error!r}"
        return f"AppendInfo({self[0]}, {self[1]}{extra})"


def _stage_producers(
    stage: PendingProducerState,
    batches: Sequence[tuple[int, BatchHeader]],
    offset: int,
    payload: bytes | bytearray | memoryview,
) -> AppendInfo | None:
    """Check one payload's idempotent batches; None if it is to be written at ``offset``.

    Stages the batches' sequences (with the offsets they will get) so that a
    later payload of the same group commit is checked against them. A
    payload that is entirely a retry is a duplicate; one that mixes a retry
    with new batches cannot be stored or answered whole, so it is refused.
    """
    inner = stage.begin()
    duplicates: list[BatchMetadata] = []
    fresh = 0
    try:
        for pos, header in batches:
            count = header.last_offset_delta + 1
            if header.producer_id < 0:
                fresh += 1
            elif header.attributes & CONTROL_BIT:
                # Only the coordinator writes these (`append_marker`), one per payload.
                inner.check_marker(header.producer_id, header.producer_epoch)
                inner.end_transaction(
                    header.producer_id,
                    header.producer_epoch,
                    offset,
                    marker_type(payload, pos) == COMMIT,
                )
                fresh += 1
            else:
                original = inner.check(
                    header.producer_id, header.producer_epoch, header.base_sequence, count
                )
                if original is not None:
                    duplicates.append(original)
                else:
                    fresh += 1
                    inner.update(
                        header.producer_id,
                        header.producer_epoch,
                        header.base_sequence,
                        count,
                        offset,
                        offset + count - 1,
                        bool(header.attributes & TRANSACTIONAL_BIT),
                    )
            offset += count
        if duplicates and fresh:
            raise OutOfOrderSequence(
                "a payload mixes a retried idempotent batch with new batches; send them separately"
            )
    except (OutOfOrderSequence, ProducerFenced) as e:
        return AppendInfo(-1, -1, error=e)
    if duplicates:
        return AppendInfo(duplicates[0].first_offset, duplicates[-1].last_offset, duplicate=True)
    inner.commit()
    return None
