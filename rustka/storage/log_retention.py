"""Retention and DeleteRecords of a partition's segments: Kafka's retention in UnifiedLog.

The log start is the first segment's base offset unless DeleteRecords moved it
further, possibly into the middle of a segment (Kafka's log start offset). The
``log-start-offset`` file keeps that offset across restarts; it is written
(replaced whole, fsynced) before readers see the new start, so an answered
DeleteRecords survives a crash. Reads below the log start are OffsetOutOfRange
even where a segment still holds the records, and retention deletes the
segments that lie wholly below it (docs/kafka.md, "DeleteRecords").

A deleted segment is renamed ``.deleted`` at once but stays open for readers
that took their snapshot before, until the topic's file.delete.delay.ms is over
("doomed"); then `release_deleted` closes it and removes its files
(docs/reliability.md, "Full disk").
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from rustka.errors import OffsetOutOfRange, StorageError
from rustka.storage.file_io import fsync_dir, replace_file
from rustka.storage.local_log import LocalLog
from rustka.storage.log_files import LOG_START_FILE, encode_log_start
from rustka.storage.segment import Segment

__all__ = ["LogRetention"]


class LogRetention(LocalLog):
    """`LocalLog` plus what removes records from its front: retention, DeleteRecords."""

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
