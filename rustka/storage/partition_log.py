"""A partition's log: the class the broker and tools construct, and log cleaning's swap.

`PartitionLog` is composed the way Kafka splits its log (docs/architecture.md,
"Storage"):

- rustka/storage/local_log.py (`LocalLog`, Kafka's LocalLog): the segment
  list, the readers' snapshot, append, roll, flush, the read paths and the
  recovery point;
- rustka/storage/log_retention.py (`LogRetention`, the retention part of
  Kafka's UnifiedLog): retention, DeleteRecords and the release of deleted
  segments;
- rustka/storage/log_loader.py (Kafka's LogLoader): `open` settles the
  directory, opens the segments and replays the producer state;
- rustka/storage/log_append.py: a payload's producer checks and `AppendInfo`.

What the broker needs of it, whatever the engine, is the protocol in
rustka/storage/partition_store.py.

On a compacted log the cleaner (rustka/storage/cleaner.py) writes replacement
segments; `replace_segments` swaps one in with the ``cleaner-swap`` file as its
commit point, and opening finishes a swap a crash interrupted, or removes the
``.cleaned`` files of one that never reached it (docs/kafka.md, "Log
compaction"). The ``cleaner-checkpoint`` says where the uncleaned part starts
and below which segments may hold the gaps cleaning leaves.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from rustka.errors import StorageError
from rustka.record.batch import ms_now
from rustka.storage.file_io import close_all, fsync_dir
from rustka.storage.local_log import SegmentsChanged
from rustka.storage.log_append import AppendInfo
from rustka.storage.log_config import LogConfig
from rustka.storage.log_files import (
    CLEANED_SUFFIX,
    CLEANER_CHECKPOINT_FILE,
    CLEANER_SWAP_FILE,
    CleanerCheckpoint,
    CleanerSwap,
    encode_cleaner_checkpoint,
    encode_cleaner_swap,
)
from rustka.storage.log_loader import load_segments, replace_log_file, replay_producer_state
from rustka.storage.log_retention import LogRetention
from rustka.storage.segment import Segment

__all__ = ["AppendInfo", "PartitionLog", "SegmentsChanged"]


class PartitionLog(LogRetention):
    """One partition directory's log, opened with `open`; the local `PartitionStore`."""

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
        loaded = load_segments(directory, config, recover=recover)
        segments = loaded.segments
        recovery_point = loaded.recovery_point
        log = cls(directory, config, segments, recovery_point, clock, loaded.log_start)
        log._cleaner = loaded.cleaner_checkpoint
        log.log_start_note = loaded.log_start_note
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

    def _load_producer_state(self) -> None:
        """Rebuild the producer state from the stored headers (`replay_producer_state`)."""
        view = self._view
        self._producers, problems = replay_producer_state(
            self.directory, view.segments, view.log_start, view.end
        )
        self.producer_state_problems.extend(problems)
        self._publish(view.size_bytes, segments_changed=False)

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
            replace_log_file(
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
        exists (rustka/storage/log_loader.py).

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
            replace_log_file(self.directory, CLEANER_SWAP_FILE, encode_cleaner_swap(swap))
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
            replace_log_file(
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
