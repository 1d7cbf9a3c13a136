"""Opening a partition directory: what Kafka's LogLoader does before a log serves.

Opening first settles the work a crash interrupted: a cleaner swap past its
commit point is completed (the ``cleaner-swap`` file, docs/kafka.md, "Log
compaction") and leftovers (``.cleaned``, ``.deleted``, ``.tmp``, orphan
indexes) are removed. Then the segments are opened, CRC-scanning those at or
after the ``recovery-point`` when recovery is asked for (every segment below
it was fsynced when it rolled); a torn write cuts off the segments after it,
and segments lost below the ``log-start-offset`` that DeleteRecords stored are
replaced by an empty one at that start, so no deleted offset is handed out
again. Finally `replay_producer_state` rebuilds the producer state from its
snapshot and the batch headers after it.

The small files of a partition directory are replaced whole by
`replace_log_file`, which the running log (rustka/storage/local_log.py and
the modules above it) uses too.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from rustka.errors import CorruptBatch, StorageError
from rustka.record.control import COMMIT, CONTROL_BIT, marker_type
from rustka.storage.file_io import close_all, fsync_dir
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
    DamagedFile,
    DamagedRecoveryPoint,
    base_offset_of,
    decode_cleaner_checkpoint,
    decode_cleaner_swap,
    decode_log_start,
    decode_recovery_point,
    encode_cleaner_checkpoint,
    segment_file_name,
)
from rustka.storage.producer_state import ProducerStateManager, apply_batch
from rustka.storage.segment import Segment

__all__ = [
    "LoadedSegments",
    "load_segments",
    "replace_log_file",
    "replay_producer_state",
]


@dataclass(slots=True)
class LoadedSegments:
    """What opening a directory found: its segments, oldest first, and its small files."""

    segments: list[Segment]
    recovery_point: int
    log_start: int
    log_start_note: str | None
    cleaner_checkpoint: CleanerCheckpoint


def load_segments(directory: Path, config: LogConfig, *, recover: bool) -> LoadedSegments:
    """Settle ``directory`` and open its segments (``recover`` as in `PartitionLog.open`).

    On failure every segment opened so far is closed again.
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
    except BaseException as e:
        for seg in segments:
            seg.close()
        if isinstance(e, OSError):
            raise StorageError(f"cannot open partition {directory}: {e}") from e
        raise
    return LoadedSegments(segments, recovery_point, log_start, log_start_note, checkpoint)


def replay_producer_state(
    directory: Path, segments: Sequence[Segment], log_start: int, end: int
) -> tuple[ProducerStateManager, list[str]]:
    """Rebuild the idempotent producer state: the snapshot, then the headers after it.

    A snapshot past the end (recovery cut the log below it) or a damaged
    one is ignored and every stored header is replayed instead, so the
    state reflects exactly the batches that survived. Returns the state and
    the damage found on the way (a batch whose header cannot be read: reads of
    it fail and say so; the rest still counts).
    """
    problems: list[str] = []
    start = log_start
    state = ProducerStateManager()
    snapshot = ProducerStateManager.read_snapshot(directory)
    if snapshot is not None and snapshot[0] <= end:
        start = max(start, snapshot[0])
        state = snapshot[1]
    for seg in segments:
        if seg.next_offset <= start:
            continue
        try:
            for _, header in seg.headers_from(max(start, seg.base_offset)):
                if header.producer_id < 0:
                    continue
                commit = False
                if header.attributes & CONTROL_BIT:
                    kind = marker_type(seg.read(header.base_offset, 1))
                    if kind is None:
                        continue
                    commit = kind == COMMIT
                apply_batch(state, header, header.base_offset, commit)
        except CorruptBatch as e:
            problems.append(str(e))
    state.forget_aborted_below(log_start)
    return state, problems


def replace_log_file(directory: Path, name: str, data: bytes) -> None:
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
        replace_log_file(directory, CLEANER_CHECKPOINT_FILE, encode_cleaner_checkpoint(checkpoint))
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
