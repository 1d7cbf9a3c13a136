"""One log segment: a ``.log`` of record batches, its ``.index`` and its ``.timeindex``.

The ``.log`` is the truth; the two indexes are caches that save a scan
(rustka/storage/offset_index.py and time_index.py own their bytes). An index
entry is added only once ``index_interval_bytes`` of log have been written
since the previous one, so a lookup is a binary search over a small in-memory
array followed by a forward walk over at most about one interval of batch
*headers*.

Every walk over the log's batch headers goes through one loop, ``HeaderWalk``:
the reads (from an index entry to the batch holding an offset), the open-time
tail walk (from the last index entry to the end), the recovery scan (the whole
log, with CRCs), the time lookups and the producer-state rebuild.

Opening trusts the indexes only after cheap checks (length, order, bounds, and a
sample of entries read back from the log); anything suspicious rebuilds them
from the log. Startup then reads only a bounded tail, from the last index entry
to the end, to learn ``next_offset``; a structural problem there (a torn write)
escalates to a full CRC scan that truncates at the first bad batch.

Concurrency: one writer (the partition's lane) calls ``append``/``truncate_to``/
``flush``; readers on other threads call ``read``. Readers use ``os.pread`` on
their own fd and snapshot ``(size, next_offset, max_timestamp)`` as one tuple,
so they never see a half-updated segment.
"""

from __future__ import annotations

import contextlib
import os
import struct
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from rustka.errors import CorruptBatch, InvalidBatch, OffsetOutOfRange, StorageError
from rustka.record.batch import (
    HEADER_SIZE,
    BatchHeader,
    crc_ok,
    decode_records,
    parse_header,
)
from rustka.storage.file_io import closing_on_error, timed_fsync, write_all
from rustka.storage.log_files import DELETED_SUFFIX, index_name, log_name, time_index_name
from rustka.storage.offset_index import OffsetIndex
from rustka.storage.time_index import TimeIndex

__all__ = ["MAX_RELATIVE_OFFSET", "MAX_SEGMENT_SIZE", "HeaderWalk", "RecoveryInfo", "Segment"]

# Index fields are u32; Kafka keeps relative offsets within int32, and so do we.
MAX_RELATIVE_OFFSET = (1 << 31) - 1
MAX_SEGMENT_SIZE = (1 << 32) - 1

# Full scans read this much at a time so recovery memory stays bounded by
# max(chunk, largest batch) rather than by the segment size.
_SCAN_CHUNK = 1 << 20
# Header-only walks over whole segments read this much per pread: many small
# batches per read, or little more than the header of a big one.
_HEADER_WINDOW = 64 << 10

_BASE_OFFSET = struct.Struct(">q")
_OPEN_FLAGS = getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True, slots=True)
class RecoveryInfo:
    """What opening a segment had to repair; the broker logs it at startup.

    ``first_lost_position`` is None when nothing was cut (e.g. only the index
    was rebuilt). ``kept_next_offset`` is the first offset that no longer exists.
    """

    truncated_bytes: int
    first_lost_position: int | None
    kept_next_offset: int
    index_rebuilt: bool
    reason: str

    def __str__(self) -> str:
        parts = [self.reason]
        if self.truncated_bytes:
            parts.append(
                f"truncated {self.truncated_bytes} bytes from position "
                f"{self.first_lost_position}; offsets from {self.kept_next_offset} are gone"
            )
        if self.index_rebuilt:
            parts.append("index rebuilt from the log")
        return "; ".join(parts)


class HeaderWalk:
    """A forward walk over batch headers from a known batch start: the one shared loop.

    Iterating yields each header in order; while a header is being handled,
    ``pos`` is its position. The walk checks the structure that can be judged
    from headers: a sane header, the offset chain (each base offset equals the
    previous batch's next offset; baseOffset is outside the CRC, so the chain is
    what catches a damaged base offset or length), offsets within the segment's
    relative range and lengths within ``end``. With ``verify`` it also reads
    each whole batch and checks its CRC.

    With ``gaps`` a batch may start above the previous batch's next offset
    (never below): the log cleaner leaves such gaps in the segments it wrote
    (docs/kafka.md, "Log compaction"), and only in those.

    It stops at the first problem instead of raising: afterwards ``problem``
    says what it was (None if the walk reached ``end``), ``pos`` is where the
    valid log ends and ``expected`` is the next offset after the last good
    batch. Reads one window of ``window`` bytes per pread, more only for a
    batch bigger than that when ``verify`` needs all of it.
    """

    __slots__ = (
        "_base",
        "_fd",
        "_gaps",
        "_verify",
        "_window",
        "end",
        "expected",
        "pos",
        "problem",
        "start",
    )

    def __init__(
        self,
        fd: int,
        start: int,
        expected: int,
        end: int,
        *,
        base_offset: int,
        window: int,
        verify: bool = False,
        gaps: bool = False,
    ) -> None:
        self._fd = fd
        self._base = base_offset
        self._window = max(window, HEADER_SIZE)
        self._verify = verify
        self._gaps = gaps
        self.start = start
        self.pos = start
        self.expected = expected
        self.end = end
        self.problem: str | None = None

    def __iter__(self) -> Iterator[BatchHeader]:
        fd = self._fd
        end = self.end
        window = self._window
        verify = self._verify
        gaps = self._gaps
        limit_offset = self._base + MAX_RELATIVE_OFFSET
        pos = self.pos
        expected = self.expected
        buf = b""
        buf_pos = pos
        while pos < end:
            off = pos - buf_pos
            if len(buf) - off < HEADER_SIZE:
                if end - pos < HEADER_SIZE:
                    self.problem = (
                        f"{end - pos} bytes at position {pos} are too short for a batch header"
                    )
                    return
                buf = os.pread(fd, min(end - pos, window), pos)
                buf_pos = pos
                off = 0
                if len(buf) < HEADER_SIZE:
                    self.problem = f"the log ends early at position {pos + len(buf)}"
                    return
            try:
                header = parse_header(buf, off)
            except InvalidBatch:
                self.problem = f"invalid batch header at position {pos}"
                return
            size = header.size
            if header.base_offset != expected and not (gaps and header.base_offset > expected):
                self.problem = (
                    f"batch at position {pos} has base offset {header.base_offset}, "
                    f"expected {expected}"
                )
                return
            if header.last_offset_delta < 0:
                self.problem = f"batch at position {pos} has a negative last offset delta"
                return
            if header.base_offset + header.last_offset_delta > limit_offset:
                self.problem = f"batch at position {pos} has offsets too far from the segment base"
                return
            if pos + size > end:
                self.problem = (
                    f"batch at position {pos} ({size} bytes) is incomplete: the log ends at {end}"
                )
                return
            if verify:
                if len(buf) - off < size:
                    buf = os.pread(fd, min(end - pos, max(window, size)), pos)
                    buf_pos = pos
                    off = 0
                    if len(buf) < size:
                        self.problem = f"the log ends early at position {pos + len(buf)}"
                        return
                if not crc_ok(buf, off, header):
                    self.problem = f"batch at position {pos} failed its CRC-32C check"
                    return
            yield header
            pos += size
            expected = header.next_offset
            self.pos = pos
            self.expected = expected


class _IndexBuilder:
    """Decides, batch by batch, where both indexes get entries; shared by append and scans.

    An offset index entry goes at a batch once an interval of bytes has passed
    since the last entry; the time index gets one at the same moment if the
    max timestamp grew since its last entry (docs/architecture.md, "segment.py").
    """

    __slots__ = (
        "interval",
        "max_ts",
        "max_ts_offset",
        "offset_entries",
        "since",
        "time_entries",
        "time_ts",
    )

    def __init__(self, interval: int, since: int, max_ts: int, max_ts_offset: int, time_ts: int):
        self.interval = interval
        self.since = since
        self.max_ts = max_ts
        self.max_ts_offset = max_ts_offset
        self.time_ts = time_ts
        self.offset_entries: list[tuple[int, int]] = []
        self.time_entries: list[tuple[int, int]] = []

    def add(self, position: int, base_offset: int, header: BatchHeader) -> None:
        if header.max_timestamp > self.max_ts:
            self.max_ts = header.max_timestamp
            self.max_ts_offset = base_offset
        if self.since >= self.interval:
            self.offset_entries.append((base_offset, position))
            if self.max_ts > self.time_ts:
                self.time_entries.append((self.max_ts, self.max_ts_offset))
                self.time_ts = self.max_ts
            self.since = 0
        self.since += header.size


class _StaleIndexEntry(Exception):
    """An index entry did not point at the batch it names; retry from an earlier point."""


class Segment:
    """A ``.log`` + ``.index`` + ``.timeindex`` set named by the segment's base offset.

    ``gaps``: the log cleaner wrote this segment, so its batches may leave
    offsets out between them (`HeaderWalk`). ``suffix`` follows the three names
    while the cleaner writes one (``.cleaned``), until `rename` swaps it in.
    """

    directory: Path
    base_offset: int
    index_interval_bytes: int
    gaps: bool
    log_path: Path
    first_timestamp: int
    last_recovery: RecoveryInfo | None
    offset_index: OffsetIndex
    time_index: TimeIndex

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int,
        *,
        suffix: str = "",
        gaps: bool = False,
    ) -> None:
        """Use ``create`` or ``open``; this only checks the arguments."""
        if base_offset < 0:
            raise StorageError(f"segment base offset {base_offset} is negative")
        if index_interval_bytes < 1:
            raise StorageError(f"index interval {index_interval_bytes} must be at least 1 byte")
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.gaps = gaps
        self._suffix = suffix
        self.log_path = self.directory / (log_name(base_offset) + suffix)
        # (size, next_offset, max_timestamp), replaced as one object so a reader
        # on another thread never pairs a new size with an old next_offset.
        self._state: tuple[int, int, int] = (0, base_offset, -1)
        self._max_ts_offset = base_offset
        self.first_timestamp = -1
        self.last_recovery = None
        self._since_index = 0
        self._log_dirty = True
        self._broken: str | None = None
        self._read_fd = -1
        self._log_fd = -1

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int = 4096,
        *,
        suffix: str = "",
        gaps: bool = False,
    ) -> Segment:
        """A new, empty segment; refuses to clobber an existing ``.log``."""
        seg = cls(directory, base_offset, index_interval_bytes, suffix=suffix, gaps=gaps)
        with closing_on_error(seg):
            try:
                seg._open_files(create=True)
            except FileExistsError:
                raise StorageError(f"segment file {seg.log_path} already exists") from None
            except OSError as e:
                raise StorageError(f"cannot create segment {seg.log_path}: {e.strerror}") from e
        return seg

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int = 4096,
        *,
        recover: bool = False,
        gaps: bool = False,
    ) -> Segment:
        """Load an existing segment.

        ``recover=False`` reads the indexes plus a bounded tail; ``recover=True``
        reads the whole log and checks every CRC. Either way ``last_recovery``
        says what was repaired (None if nothing).
        """
        seg = cls(directory, base_offset, index_interval_bytes, gaps=gaps)
        with closing_on_error(seg):
            try:
                seg._open_files(create=False)
            except OSError as e:
                raise StorageError(f"cannot open segment {seg.log_path}: {e.strerror}") from e
            try:
                file_size = os.fstat(seg._read_fd).st_size
                seg._state = (file_size, base_offset, -1)
                if recover:
                    seg._scan_all("recovery scan", requested=True)
                else:
                    seg._load()
            except OSError as e:
                raise StorageError(f"cannot load segment {seg.log_path}: {e.strerror}") from e
        return seg

    def _open_files(self, *, create: bool) -> None:
        excl = os.O_CREAT | os.O_EXCL if create else 0
        self._log_fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | excl | _OPEN_FLAGS, 0o644)
        self._read_fd = os.open(self.log_path, os.O_RDONLY | _OPEN_FLAGS)
        base = self.base_offset
        suffix = self._suffix
        self.offset_index = OffsetIndex(
            self.directory / (index_name(base) + suffix), base, create=create
        )
        self.time_index = TimeIndex(
            self.directory / (time_index_name(base) + suffix), base, create=create
        )

    @property
    def index_path(self) -> Path:
        return self.offset_index.path

    @property
    def time_index_path(self) -> Path:
        return self.time_index.path

    def close(self) -> None:
        """Release the fds; safe to call twice. Pending data is not fsynced here."""
        for name in ("_read_fd", "_log_fd"):
            fd = getattr(self, name)
            if fd >= 0:
                setattr(self, name, -1)
                with contextlib.suppress(OSError):
                    os.close(fd)
        for index_attr in ("offset_index", "time_index"):
            index = getattr(self, index_attr, None)
            if index is not None:
                index.close()

    def _files(self) -> list[Path]:
        paths = [self.log_path]
        for index_attr in ("offset_index", "time_index"):
            index = getattr(self, index_attr, None)
            if index is not None:
                paths.append(index.path)
        return paths

    def delete(self) -> None:
        """Rename every file to ``*.deleted``; the fds stay open for in-flight readers.

        The owner closes the segment (and removes the files) later, once no
        reader can still hold it.
        """
        errors: list[str] = []
        for path in self._files():
            if path.name.endswith(DELETED_SUFFIX):
                continue
            target = path.with_name(path.name + DELETED_SUFFIX)
            try:
                os.rename(path, target)
            except FileNotFoundError:
                pass
            except OSError as e:
                errors.append(f"{path}: {e.strerror}")
                continue
            if path == self.log_path:
                self.log_path = target
            elif path == self.offset_index.path:
                self.offset_index.path = target
            else:
                self.time_index.path = target
        if errors:
            raise StorageError("cannot delete segment files: " + "; ".join(errors))

    def rename(self, suffix: str) -> None:
        """Give the three files their names with ``suffix`` (\"\" for the final names).

        The indexes go first and the log last: the log's name is what makes a
        segment exist, and an index found without its log is a leftover that
        opening removes (a missing index is rebuilt from the log). The fds stay
        open; the directory is not fsynced here (the caller does that once).
        """
        base = self.base_offset
        moves = [
            (self.offset_index, self.directory / (index_name(base) + suffix)),
            (self.time_index, self.directory / (time_index_name(base) + suffix)),
        ]
        try:
            for index, target in moves:
                if index.path != target:
                    os.rename(index.path, target)
                    index.path = target
            target = self.directory / (log_name(base) + suffix)
            if self.log_path != target:
                os.rename(self.log_path, target)
                self.log_path = target
        except OSError as e:
            raise StorageError(f"cannot rename segment {self.log_path}: {e.strerror}") from e
        self._suffix = suffix

    def remove_files(self) -> None:
        """Unlink this segment's files (after ``delete``/``close``), ignoring missing ones."""
        for path in self._files():
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise StorageError(f"cannot remove {path}: {e.strerror}") from e

    def flush(self) -> None:
        """fsync the log (and the indexes if they changed) so acknowledged data survives."""
        self.flush_log()
        self.offset_index.flush()
        self.time_index.flush()

    def flush_log(self) -> None:
        """fsync the log alone: what an acknowledgement of ``flush = "always"`` needs.

        The indexes of the active segment need not be durable for that: after a
        crash, recovery scans every segment from the recovery point (the active
        one always among them) and rebuilds its indexes from the log
        (`_scan_all`); a segment's indexes are fsynced when it is sealed.
        """
        try:
            if self._log_dirty:
                timed_fsync(self._log_fd)
                self._log_dirty = False
        except OSError as e:
            raise StorageError(f"fsync of segment {self.log_path} failed: {e.strerror}") from e

    # ------------------------------------------------------------------ properties

    @property
    def size(self) -> int:
        return self._state[0]

    @property
    def next_offset(self) -> int:
        return self._state[1]

    @property
    def max_timestamp(self) -> int:
        return self._state[2]

    @property
    def index_entries(self) -> int:
        return len(self.offset_index)

    def index_snapshot(self) -> list[tuple[int, int]]:
        """(relative offset, position) pairs, for tests and admin tools."""
        return self.offset_index.entries()

    def time_index_snapshot(self) -> list[tuple[int, int]]:
        """(timestamp, relative offset) pairs, for tests and admin tools."""
        return self.time_index.entries()

    def mtime_ms(self) -> int:
        """Last modification time of the log, for segments whose batches carry no timestamp."""
        return os.fstat(self._read_fd).st_mtime_ns // 1_000_000

    def __repr__(self) -> str:
        return (
            f"<Segment {self.log_path.name} offsets {self.base_offset}..{self.next_offset} "
            f"size {self.size}>"
        )

    # ------------------------------------------------------------------ writing

    def append(
        self,
        data: bytes | bytearray | memoryview,
        batches: Sequence[tuple[int, BatchHeader]],
        *,
        offsets_in_headers: bool = False,
    ) -> None:
        """Write batches whose final base offsets are already in ``data``; one ``os.write``.

        The base offsets must continue this segment's offsets without a gap (the
        partition log assigns them so), unless ``offsets_in_headers``: then each
        header carries its batch's own base offset, as in the cleaner's output,
        where gaps are allowed. On failure the log and indexes are cut back to
        their previous size and StorageError is raised, so a failed append
        leaves no trace.
        """
        if not batches:
            return
        if self._broken is not None:
            raise StorageError(self._broken)
        size, _, max_ts = self._state
        total = len(data)
        if size + total > MAX_SEGMENT_SIZE:
            raise StorageError(
                f"segment {self.log_path} would exceed {MAX_SEGMENT_SIZE} bytes; roll first"
            )
        first_base = _BASE_OFFSET.unpack_from(data, batches[0][0])[0]
        if offsets_in_headers:
            new_next = batches[-1][1].next_offset
        else:
            new_next = first_base + sum(h.last_offset_delta + 1 for _, h in batches)
        if new_next - 1 - self.base_offset > MAX_RELATIVE_OFFSET:
            raise StorageError(
                f"offset {new_next - 1} is too far from segment base {self.base_offset}; roll first"
            )
        last_time = self.time_index.last_entry()
        builder = _IndexBuilder(
            self.index_interval_bytes,
            self._since_index,
            max_ts,
            self._max_ts_offset,
            -1 if last_time is None else last_time[0],
        )
        base = first_base
        for pos, header in batches:
            if offsets_in_headers:
                base = header.base_offset
            builder.add(size + pos, base, header)
            base += header.last_offset_delta + 1
        offset_entries = len(self.offset_index)
        time_entries = len(self.time_index)
        try:
            write_all(self._log_fd, data)
        except OSError as e:
            self._cut_back(size, offset_entries, time_entries)
            raise StorageError(
                f"writing {total} bytes to {self.log_path} failed: {e.strerror}"
            ) from e
        try:
            self.offset_index.append(builder.offset_entries)
            self.time_index.append(builder.time_entries)
        except StorageError:
            self._cut_back(size, offset_entries, time_entries)
            raise
        if size == 0:
            self.first_timestamp = batches[0][1].max_timestamp
        self._since_index = builder.since
        self._max_ts_offset = builder.max_ts_offset
        self._log_dirty = True
        self._state = (size + total, new_next, builder.max_ts)

    def _cut_back(self, size: int, offset_entries: int, time_entries: int) -> None:
        """Undo a partial write; if even that fails the segment refuses further appends."""
        try:
            os.ftruncate(self._log_fd, size)
            self.offset_index.truncate_entries(offset_entries)
            if len(self.time_index) > time_entries:
                self.time_index.truncate_to(self.time_index.entry(time_entries)[1])
        except (OSError, StorageError) as e:
            self._broken = (
                f"segment {self.log_path} could not be rolled back after a failed write "
                f"({e}); it must be recovered before accepting writes"
            )

    def truncate_to(self, position: int) -> None:
        """Cut the log at ``position`` (a batch boundary) and re-derive the tail state."""
        size = self.size
        if not 0 <= position <= size:
            raise StorageError(
                f"cannot truncate {self.log_path} to {position}: it holds {size} bytes"
            )
        if position == size:
            return
        try:
            prefix = os.pread(self._read_fd, _BASE_OFFSET.size, position)
            os.ftruncate(self._log_fd, position)
        except OSError as e:
            raise StorageError(f"truncating {self.log_path} failed: {e.strerror}") from e
        self.offset_index.truncate_to_position(position)
        if len(prefix) == _BASE_OFFSET.size:
            self.time_index.truncate_to(_BASE_OFFSET.unpack(prefix)[0])
        else:
            self.time_index.truncate_to(self.base_offset)
        self._log_dirty = True
        self._state = (position, self.base_offset, -1)
        self._max_ts_offset = self.base_offset
        if position == 0:
            self.time_index.truncate_to(self.base_offset)
            self.first_timestamp = -1
            self._since_index = 0
            return
        try:
            problem = self._scan_tail()
            if problem is not None:
                self._scan_all(
                    f"truncation to {position} left a bad tail: {problem}", requested=False
                )
        except OSError as e:
            raise StorageError(f"re-reading {self.log_path} failed: {e.strerror}") from e

    # ------------------------------------------------------------------ reading

    def _pread(self, length: int, position: int) -> bytes:
        try:
            return os.pread(self._read_fd, length, position)
        except OSError as e:
            raise StorageError(
                f"reading {length} bytes at {position} of {self.log_path} failed: {e.strerror}"
            ) from e

    def read(self, offset: int, max_bytes: int, max_position: int | None = None) -> bytes:
        """Whole, CRC-checked batches starting with the one holding ``offset``.

        At least one batch is returned even when it is bigger than ``max_bytes``
        (a consumer must always make progress). If that first batch is corrupt
        the read fails with CorruptBatch; a corrupt *later* batch just ends the
        result early, so the caller serves what is good and fails next time.
        """
        size, next_offset, _ = self._state
        limit = size if max_position is None else min(max_position, size)
        if offset < self.base_offset:
            raise OffsetOutOfRange(offset, self.base_offset, next_offset)
        if offset >= next_offset:
            return b""
        found = self._locate(offset, limit, next_offset if limit == size else None)
        if found is None:
            return b""
        pos, header = found
        batch_size = header.size
        want = min(limit - pos, max(max_bytes, batch_size))
        buf = self._pread(want, pos)
        if len(buf) < batch_size:
            raise self._corrupt(pos, header, f"only {len(buf)} of its {batch_size} bytes exist")
        if not crc_ok(buf, 0, header):
            raise self._corrupt(pos, header, "it failed its CRC-32C check")
        end = batch_size
        expected = header.next_offset
        total = len(buf)
        gaps = self.gaps
        # Later batches already in the buffer: whole, chained and CRC-valid, or the end.
        while total - end >= HEADER_SIZE:
            try:
                h = parse_header(buf, end)
            except InvalidBatch:
                break
            stop = end + h.size
            if (
                stop > total
                or (h.base_offset != expected and not (gaps and h.base_offset > expected))
                or h.last_offset_delta < 0
                or not crc_ok(buf, end, h)
            ):
                break
            end = stop
            expected = h.next_offset
        return buf if end == total else buf[:end]

    def headers_from(
        self, offset: int, limit: int | None = None
    ) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of every batch from the one holding ``offset`` to ``limit``.

        Structure only (no CRCs): for the producer-state rebuild and time
        lookups, which need headers, not records. CorruptBatch on a broken chain.
        """
        size = self.size if limit is None else min(limit, self.size)
        if offset >= self.next_offset or size == 0:
            return
        found = self._locate(max(offset, self.base_offset), size, None)
        if found is None:
            return
        start, header = found
        walk = HeaderWalk(
            self._read_fd,
            start,
            header.base_offset,
            size,
            base_offset=self.base_offset,
            window=_HEADER_WINDOW,
            gaps=self.gaps,
        )
        try:
            for h in walk:
                yield walk.pos, h
        except OSError as e:
            raise StorageError(f"reading {self.log_path} failed: {e.strerror}") from e
        if walk.problem is not None:
            raise CorruptBatch(f"{self.log_path}: {walk.problem}")

    def position_of(self, offset: int) -> int:
        """Where the batch holding ``offset`` (or the first batch after it) starts; the
        segment's size if no batch here reaches ``offset``."""
        size = self.size
        if offset >= self.next_offset or size == 0:
            return size
        found = self._locate(max(offset, self.base_offset), size, None)
        return size if found is None else found[0]

    def batches_from(
        self, position: int, chunk_bytes: int
    ) -> Iterator[tuple[bytes, list[tuple[int, BatchHeader]]]]:
        """Whole, CRC-checked batches from ``position`` (a batch start) to the end.

        One pread of about ``chunk_bytes`` at a time (more for a bigger batch):
        each chunk comes with the (position in the chunk, header) of the batches
        wholly in it. For the log cleaner, which reads whole sealed segments
        once; CorruptBatch at the first batch that is damaged or out of order.
        A chunk holds exactly its whole batches.
        """
        size = self.size
        expected: int | None = None
        gaps = self.gaps
        window = max(chunk_bytes, HEADER_SIZE)
        while position < size:
            buf = self._pread(min(size - position, window), position)
            if len(buf) < HEADER_SIZE:
                raise self._corrupt(position, None, "the log ends early")
            entries: list[tuple[int, BatchHeader]] = []
            at = 0
            while len(buf) - at >= HEADER_SIZE:
                try:
                    header = parse_header(buf, at)
                except InvalidBatch as e:
                    raise self._corrupt(position + at, None, str(e)) from None
                if header.size > len(buf) - at:
                    if at == 0:
                        if position + header.size > size:
                            raise self._corrupt(position, header, "it runs past the end")
                        buf = self._pread(header.size, position)
                        continue
                    break
                if expected is not None and (
                    header.base_offset < expected or (not gaps and header.base_offset != expected)
                ):
                    raise self._corrupt(position + at, header, f"expected offset {expected}")
                if header.last_offset_delta < 0 or not crc_ok(buf, at, header):
                    raise self._corrupt(position + at, header, "it failed its CRC-32C check")
                entries.append((at, header))
                expected = header.next_offset
                at += header.size
            if not entries:
                raise self._corrupt(position, None, "no whole batch starts here")
            yield (buf if at == len(buf) else buf[:at]), entries
            position += at

    def find_offset_by_timestamp(
        self, timestamp: int, max_position: int | None = None, *, min_offset: int = 0
    ) -> tuple[int, int] | None:
        """The first (offset, timestamp) here whose record timestamp is >= ``timestamp``.

        The time index gives a batch before which nothing is new enough; a
        header walk from there finds the first batch whose max timestamp
        reaches ``timestamp``, and its records give the exact offset (Kafka's
        ListOffsets rule). A batch whose records cannot be decoded here
        answers with its base offset and max timestamp. None if no record in
        this segment is that new. ``max_position`` bounds the walk as in ``read``;
        offsets below ``min_offset`` (the log start) are never the answer.
        """
        size, _, max_ts = self._state
        if max_position is not None:
            size = min(size, max_position)
        if max_ts < timestamp:
            return None
        start = self.time_index.lookup(timestamp)
        for pos, header in self.headers_from(start, size):
            if header.max_timestamp < timestamp or header.last_offset < min_offset:
                continue
            data = self._pread(header.size, pos)
            try:
                records = decode_records(data, 0, verify=True)
            except (InvalidBatch, CorruptBatch):
                return max(header.base_offset, min_offset), header.max_timestamp
            for record in records:
                if (
                    record.timestamp is not None
                    and record.timestamp >= timestamp
                    and (record.offset is None or record.offset >= min_offset)
                ):
                    return record.offset, record.timestamp
            if header.base_offset >= min_offset:
                return header.base_offset, header.max_timestamp
        return None

    def _corrupt(self, pos: int, header: BatchHeader | None, why: str) -> CorruptBatch:
        what = f"batch at position {pos}"
        if header is not None:
            what += f" (offsets {header.base_offset}..{header.last_offset})"
        return CorruptBatch(f"{self.log_path}: {what} is corrupt: {why}")

    def _locate(
        self, offset: int, limit: int, complete_next: int | None
    ) -> tuple[int, BatchHeader] | None:
        """Look the offset up in the index, then walk headers forward to the batch holding it."""
        index = self.offset_index
        slot = index.slot_for(offset)
        if slot >= 0:
            start_offset, start = index.entry(slot)
            try:
                return self._walk_to(offset, start, start_offset, limit, complete_next, True)
            except _StaleIndexEntry:
                slot -= 1
        start_offset, start = (self.base_offset, 0) if slot < 0 else index.entry(slot)
        return self._walk_to(offset, start, start_offset, limit, complete_next, False)

    def _walk_to(
        self,
        offset: int,
        start: int,
        expected: int,
        limit: int,
        complete_next: int | None,
        from_index: bool,
    ) -> tuple[int, BatchHeader] | None:
        """Walk from a batch start to the batch holding ``offset``; None if past ``limit``."""
        walk = HeaderWalk(
            self._read_fd,
            start,
            expected,
            limit,
            base_offset=self.base_offset,
            window=self.index_interval_bytes + HEADER_SIZE,
            gaps=self.gaps,
        )
        try:
            for header in walk:
                if offset <= header.last_offset:
                    return walk.pos, header
        except OSError as e:
            raise StorageError(f"reading {self.log_path} failed: {e.strerror}") from e
        if walk.problem is not None:
            if from_index and walk.pos == start:
                raise _StaleIndexEntry
            raise CorruptBatch(f"{self.log_path}: {walk.problem}")
        if complete_next is not None and walk.expected != complete_next:
            raise self._corrupt(
                start, None, f"the batches end at offset {walk.expected}, not {complete_next}"
            )
        return None

    # ------------------------------------------------------------------ loading

    def _base_at(self, position: int) -> int | None:
        prefix = os.pread(self._read_fd, _BASE_OFFSET.size, position)
        return _BASE_OFFSET.unpack(prefix)[0] if len(prefix) == _BASE_OFFSET.size else None

    def _load(self) -> None:
        """Trust-but-verify open: index checks, bounded tail walk, full scan only if needed."""
        reason = self._load_indexes()
        if reason is not None:
            self._scan_all(f"index not trusted: {reason}", requested=False)
            return
        problem = self._scan_tail()
        if problem is not None:
            self._scan_all(f"tail check failed: {problem}", requested=False)

    def _load_indexes(self) -> str | None:
        """Adopt both index files, or say why they cannot be trusted."""
        reason = self.offset_index.load()
        if reason is None:
            reason = self.offset_index.sanity_check(self.size, self._base_at)
        if reason is not None:
            return reason
        reason = self.time_index.load()
        if reason is not None:
            return reason
        # Time entries made after the last offset entry (the offset index lost
        # its tail in a crash) are dropped here and re-made by the tail walk.
        offset_index = self.offset_index
        if len(offset_index):
            self.time_index.truncate_to(offset_index.last_entry()[0] + 1)
        else:
            self.time_index.truncate_to(self.base_offset)
        return self.time_index.sanity_check()

    def _scan_tail(self) -> str | None:
        """Walk headers from the last index entry to the end to learn next_offset.

        Checks structure (header sanity, the offset chain, lengths within the
        file) but not CRCs, which keeps startup cost to a bounded read per
        segment. Returns a description of the first problem, or None. Adds the
        index entries a crash may have kept from reaching the index files.
        """
        size = self.size
        if size == 0:
            self._since_index = 0
            self.first_timestamp = -1
            self._max_ts_offset = self.base_offset
            self._state = (0, self.base_offset, -1)
            return None
        start_offset, start = self.offset_index.last_entry()
        last_time = self.time_index.last_entry()
        time_ts, time_offset = (-1, self.base_offset) if last_time is None else last_time
        builder = _IndexBuilder(self.index_interval_bytes, 0, time_ts, time_offset, time_ts)
        walk = HeaderWalk(
            self._read_fd,
            start,
            start_offset,
            size,
            base_offset=self.base_offset,
            window=self.index_interval_bytes + HEADER_SIZE,
            gaps=self.gaps,
        )
        first_ts: int | None = None
        for header in walk:
            if walk.pos == 0:
                first_ts = header.max_timestamp
            builder.add(walk.pos, header.base_offset, header)
        if walk.problem is not None:
            return walk.problem
        if first_ts is None:
            try:
                first_ts = parse_header(os.pread(self._read_fd, HEADER_SIZE, 0)).max_timestamp
            except InvalidBatch:
                return "invalid batch header at position 0"
        self.offset_index.append(builder.offset_entries)
        self.time_index.append(builder.time_entries)
        self.first_timestamp = first_ts
        self._since_index = builder.since
        self._max_ts_offset = builder.max_ts_offset
        # The time index covers the batches before the tail; the first batch
        # guards against a damaged time index on a segment stamped only at its start.
        self._state = (size, walk.expected, max(builder.max_ts, first_ts))
        return None

    def _scan_all(self, reason: str, *, requested: bool) -> None:
        """Read the whole log with CRCs, truncate at the first bad batch, rebuild the indexes.

        Reads in chunks so memory is bounded by the chunk or the largest batch.
        """
        file_size = os.fstat(self._read_fd).st_size
        base = self.base_offset
        builder = _IndexBuilder(self.index_interval_bytes, 0, -1, base, -1)
        walk = HeaderWalk(
            self._read_fd,
            0,
            base,
            file_size,
            base_offset=base,
            window=_SCAN_CHUNK,
            verify=True,
            gaps=self.gaps,
        )
        first_ts = -1
        for header in walk:
            if walk.pos == 0:
                first_ts = header.max_timestamp
            builder.add(walk.pos, header.base_offset, header)
        pos = walk.pos
        truncated = file_size - pos
        if truncated:
            os.ftruncate(self._log_fd, pos)
        rels = array("I", (offset - base for offset, _ in builder.offset_entries))
        positions = array("I", (position for _, position in builder.offset_entries))
        stamps = array("q", (ts for ts, _ in builder.time_entries))
        time_rels = array("I", (offset - base for _, offset in builder.time_entries))
        rebuilt = self.offset_index.replace(rels, positions)
        rebuilt = self.time_index.replace(stamps, time_rels) or rebuilt
        if truncated or rebuilt:
            os.fsync(self._log_fd)
            self.offset_index.flush()
            self.time_index.flush()
        self._since_index = builder.since
        self._max_ts_offset = builder.max_ts_offset
        self.first_timestamp = first_ts
        self._state = (pos, walk.expected, builder.max_ts)
        if truncated or rebuilt or not requested:
            why = reason if walk.problem is None else f"{reason}: {walk.problem}"
            self.last_recovery = RecoveryInfo(
                truncated_bytes=truncated,
                first_lost_position=pos if truncated else None,
                kept_next_offset=walk.expected,
                index_rebuilt=rebuilt,
                reason=why,
            )
