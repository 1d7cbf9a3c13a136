"""One log segment: a ``.log`` of record batches and its sparse ``.index``.

The ``.log`` is the truth; the ``.index`` is a cache that saves a scan. Each
index entry is 8 bytes, big-endian ``u32 offset - base_offset, u32 position``,
and maps a batch's base offset to where the batch starts. An entry is added
only once ``index_interval_bytes`` of log have been written since the previous
one, so a lookup is a binary search over a small in-memory array followed by a
forward walk over at most about one interval of batch *headers*.

Opening trusts the index only after cheap checks (length, order, bounds, and a
sample of entries read back from the log); anything suspicious rebuilds it from
the log. Startup then reads only a bounded tail, from the last index entry to
the end, to learn ``next_offset``; a structural problem there (a torn write)
escalates to a full CRC scan that truncates at the first bad batch.

Concurrency: one writer (the partition's lane) calls ``append``/``truncate_to``/
``flush``; readers on other threads call ``read``. Readers use ``os.pread`` on
their own fd and snapshot ``(size, next_offset)`` as one tuple, so they never see
a half-updated segment.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
import threading
import time
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from rustka.errors import CorruptBatch, InvalidBatch, OffsetOutOfRange, StorageError
from rustka.storage.record_batch import HEADER_SIZE, BatchHeader, crc_ok, parse_header, scan_batches

__all__ = [
    "DELETED_SUFFIX",
    "INDEX_ENTRY_SIZE",
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "MAX_RELATIVE_OFFSET",
    "MAX_SEGMENT_SIZE",
    "RecoveryInfo",
    "Segment",
    "base_offset_of",
    "fsync_dir",
    "index_name",
    "log_name",
]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
DELETED_SUFFIX = ".deleted"
INDEX_ENTRY_SIZE = 8
# Index fields are u32; Kafka keeps relative offsets within int32, and so do we.
MAX_RELATIVE_OFFSET = (1 << 31) - 1
MAX_SEGMENT_SIZE = (1 << 32) - 1
_NAME_DIGITS = 20

# Full scans read this much at a time so recovery memory stays bounded by
# max(chunk, largest batch) rather than by the segment size.
_SCAN_CHUNK = 1 << 20
# Index entries read back from the log when opening; all of them would cost one
# pread each (262k for a 1 GiB segment), so open checks a spread and reads check
# the entry they use.
_INDEX_SAMPLES = 16

_BASE_OFFSET = struct.Struct(">q")
_PREFIX = struct.Struct(">qi")
_ENTRY = struct.Struct(">II")
_LITTLE_ENDIAN = sys.byteorder == "little"
assert array("I").itemsize == 4, "index arrays need 32-bit unsigned items"

_OPEN_FLAGS = getattr(os, "O_CLOEXEC", 0)


def log_name(base_offset: int) -> str:
    return f"{base_offset:0{_NAME_DIGITS}d}{LOG_SUFFIX}"


def index_name(base_offset: int) -> str:
    return f"{base_offset:0{_NAME_DIGITS}d}{INDEX_SUFFIX}"


def base_offset_of(name: str, suffix: str = LOG_SUFFIX) -> int | None:
    """The base offset a segment file name encodes, or None if it is not one of ours.

    Strict about the 20 digits so stray files (editor backups, notes) are never
    mistaken for segments.
    """
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    if len(stem) != _NAME_DIGITS or not stem.isdigit() or not stem.isascii():
        return None
    return int(stem)


def fsync_dir(directory: Path) -> None:
    """Make creations, renames and deletions in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | _OPEN_FLAGS)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """os.write may write less than asked (a disk filling up); loop or raise."""
    view = memoryview(data)
    try:
        while view:
            written = os.write(fd, view)
            view = view[written:]
    finally:
        view.release()


def _encode_index(rel: array[int], pos: array[int]) -> bytes:
    pairs = array("I", bytes(INDEX_ENTRY_SIZE * len(rel)))
    pairs[0::2] = rel
    pairs[1::2] = pos
    if _LITTLE_ENDIAN:
        pairs.byteswap()
    return pairs.tobytes()


def _decode_index(data: bytes) -> tuple[array[int], array[int]]:
    pairs = array("I")
    pairs.frombytes(data)
    if _LITTLE_ENDIAN:
        pairs.byteswap()
    return pairs[0::2], pairs[1::2]


def _strictly_increasing(values: array[int]) -> bool:
    return all(a < b for a, b in pairwise(values))


@dataclass
class SyncStats:
    """Process-wide fsync counters for the metrics endpoint.

    Kept here, where the fsync happens, because with ``flush = "always"`` the
    partition log syncs inside its append (data must be durable before it is
    visible), so no caller above could time the fsync alone.
    """

    count: int = 0
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


SYNC_STATS = SyncStats()


def _timed_fsync(fd: int) -> None:
    started = time.perf_counter()
    os.fsync(fd)
    elapsed = time.perf_counter() - started
    with SYNC_STATS.lock:
        SYNC_STATS.count += 1
        SYNC_STATS.seconds += elapsed


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


class _StaleIndexEntry(Exception):
    """An index entry did not point at the batch it names; retry from an earlier point."""


class Segment:
    """A ``.log`` + ``.index`` pair named by the segment's 20-digit base offset."""

    directory: Path
    base_offset: int
    index_interval_bytes: int
    log_path: Path
    index_path: Path
    first_timestamp: int
    last_recovery: RecoveryInfo | None

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int) -> None:
        """Use ``create`` or ``open``; this only opens the file descriptors."""
        if base_offset < 0:
            raise StorageError(f"segment base offset {base_offset} is negative")
        if index_interval_bytes < 1:
            raise StorageError(f"index interval {index_interval_bytes} must be at least 1 byte")
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = self.directory / log_name(base_offset)
        self.index_path = self.directory / index_name(base_offset)
        # (size, next_offset, max_timestamp), replaced as one object so a reader
        # on another thread never pairs a new size with an old next_offset.
        self._state: tuple[int, int, int] = (0, base_offset, -1)
        self.first_timestamp = -1
        self.last_recovery = None
        self._idx_rel: array[int] = array("I")
        self._idx_pos: array[int] = array("I")
        self._since_index = 0
        self._log_dirty = True
        self._index_dirty = True
        self._broken: str | None = None
        self._index_missing = False
        self._read_fd = -1
        self._log_fd = -1
        self._index_fd = -1

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def create(cls, directory: Path, base_offset: int, index_interval_bytes: int = 4096) -> Segment:
        """A new, empty segment; refuses to clobber an existing ``.log``."""
        seg = cls(directory, base_offset, index_interval_bytes)
        try:
            seg._open_fds(create=True)
        except FileExistsError:
            seg.close()
            raise StorageError(f"segment file {seg.log_path} already exists") from None
        except OSError as e:
            seg.close()
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
    ) -> Segment:
        """Load an existing segment.

        ``recover=False`` reads the index plus a bounded tail; ``recover=True``
        reads the whole log and checks every CRC. Either way ``last_recovery``
        says what was repaired (None if nothing).
        """
        seg = cls(directory, base_offset, index_interval_bytes)
        seg._index_missing = not seg.index_path.exists()
        try:
            seg._open_fds(create=False)
        except OSError as e:
            seg.close()
            raise StorageError(f"cannot open segment {seg.log_path}: {e.strerror}") from e
        try:
            file_size = os.fstat(seg._read_fd).st_size
            seg._state = (file_size, base_offset, -1)
            if recover:
                seg._scan_all("recovery scan", requested=True)
            else:
                seg._load()
        except OSError as e:
            seg.close()
            raise StorageError(f"cannot load segment {seg.log_path}: {e.strerror}") from e
        except BaseException:
            seg.close()
            raise
        return seg

    def _open_fds(self, *, create: bool) -> None:
        excl = os.O_CREAT | os.O_EXCL if create else 0
        self._log_fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | excl | _OPEN_FLAGS, 0o644)
        self._read_fd = os.open(self.log_path, os.O_RDONLY | _OPEN_FLAGS)
        trunc = os.O_TRUNC if create else 0
        self._index_fd = os.open(
            self.index_path, os.O_RDWR | os.O_APPEND | os.O_CREAT | trunc | _OPEN_FLAGS, 0o644
        )

    def close(self) -> None:
        """Release the fds; safe to call twice. Pending data is not fsynced here."""
        for name in ("_read_fd", "_log_fd", "_index_fd"):
            fd = getattr(self, name)
            if fd >= 0:
                setattr(self, name, -1)
                with contextlib.suppress(OSError):
                    os.close(fd)

    def delete(self) -> None:
        """Rename both files to ``*.deleted``; the fds stay open for in-flight readers.

        The owner closes the segment (and removes the files) later, once no
        reader can still hold it.
        """
        errors: list[str] = []
        for attr in ("log_path", "index_path"):
            path: Path = getattr(self, attr)
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
            setattr(self, attr, target)
        if errors:
            raise StorageError("cannot delete segment files: " + "; ".join(errors))

    def remove_files(self) -> None:
        """Unlink this segment's files (after ``delete``/``close``), ignoring missing ones."""
        for path in (self.log_path, self.index_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise StorageError(f"cannot remove {path}: {e.strerror}") from e

    def flush(self) -> None:
        """fsync the log (and the index if it changed) so acknowledged data survives power loss."""
        try:
            if self._log_dirty:
                _timed_fsync(self._log_fd)
                self._log_dirty = False
            if self._index_dirty:
                _timed_fsync(self._index_fd)
                self._index_dirty = False
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
        return len(self._idx_rel)

    def index_snapshot(self) -> list[tuple[int, int]]:
        """(relative offset, position) pairs, for tests and admin tools."""
        return list(zip(self._idx_rel, self._idx_pos, strict=False))

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
        self, data: bytes | bytearray | memoryview, batches: Sequence[tuple[int, BatchHeader]]
    ) -> None:
        """Write batches whose final base offsets are already in ``data``; one ``os.write``.

        On failure the log (and index) are cut back to their previous size and
        StorageError is raised, so a failed append leaves no trace.
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
        last_pos, last_header = batches[-1]
        new_next = _BASE_OFFSET.unpack_from(data, last_pos)[0] + last_header.last_offset_delta + 1
        if new_next - 1 - self.base_offset > MAX_RELATIVE_OFFSET:
            raise StorageError(
                f"offset {new_next - 1} is too far from segment base {self.base_offset}; roll first"
            )
        interval = self.index_interval_bytes
        since = self._since_index
        entries: list[tuple[int, int]] = []
        if since + total - last_header.size >= interval:
            for pos, header in batches:
                if since >= interval:
                    base = _BASE_OFFSET.unpack_from(data, pos)[0]
                    entries.append((base - self.base_offset, size + pos))
                    since = 0
                since += header.size
        else:
            since += total
        batch_max = max(header.max_timestamp for _, header in batches)
        try:
            _write_all(self._log_fd, data)
        except OSError as e:
            self._cut_back(size, len(self._idx_rel))
            raise StorageError(
                f"writing {total} bytes to {self.log_path} failed: {e.strerror}"
            ) from e
        if entries:
            try:
                _write_all(self._index_fd, b"".join(_ENTRY.pack(r, p) for r, p in entries))
            except OSError as e:
                self._cut_back(size, len(self._idx_rel))
                raise StorageError(
                    f"writing the index {self.index_path} failed: {e.strerror}"
                ) from e
            for rel, pos in entries:
                # Position first: a reader that sees a relative offset finds its position.
                self._idx_pos.append(pos)
                self._idx_rel.append(rel)
            self._index_dirty = True
        if size == 0:
            self.first_timestamp = batches[0][1].max_timestamp
        self._since_index = since
        self._log_dirty = True
        self._state = (size + total, new_next, max(max_ts, batch_max))

    def _cut_back(self, size: int, index_entries: int) -> None:
        """Undo a partial write; if even that fails the segment refuses further appends."""
        try:
            os.ftruncate(self._log_fd, size)
            os.ftruncate(self._index_fd, index_entries * INDEX_ENTRY_SIZE)
        except OSError as e:
            self._broken = (
                f"segment {self.log_path} could not be rolled back after a failed write "
                f"({e.strerror}); it must be recovered before accepting writes"
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
        keep = bisect_left(self._idx_pos, position)
        try:
            os.ftruncate(self._log_fd, position)
            if keep < len(self._idx_rel):
                os.ftruncate(self._index_fd, keep * INDEX_ENTRY_SIZE)
        except OSError as e:
            raise StorageError(f"truncating {self.log_path} failed: {e.strerror}") from e
        self._idx_pos = self._idx_pos[:keep]
        self._idx_rel = self._idx_rel[:keep]
        self._log_dirty = self._index_dirty = True
        self._state = (position, self.base_offset, -1)
        if position == 0:
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
        while total - end >= HEADER_SIZE:
            try:
                h = parse_header(buf, end)
            except InvalidBatch:
                break
            stop = end + h.size
            if (
                stop > total
                or h.base_offset != expected
                or h.last_offset_delta < 0
                or not crc_ok(buf, end, h)
            ):
                break
            end = stop
            expected = h.next_offset
        return buf if end == total else buf[:end]

    def _corrupt(self, pos: int, header: BatchHeader | None, why: str) -> CorruptBatch:
        what = f"batch at position {pos}"
        if header is not None:
            what += f" (offsets {header.base_offset}..{header.last_offset})"
        return CorruptBatch(f"{self.log_path}: {what} is corrupt: {why}")

    def _locate(
        self, offset: int, limit: int, complete_next: int | None
    ) -> tuple[int, BatchHeader] | None:
        """Binary search the index, then walk headers forward to the batch holding ``offset``."""
        rels = self._idx_rel
        positions = self._idx_pos
        i = bisect_right(rels, offset - self.base_offset) - 1
        if i >= 0:
            try:
                return self._walk(
                    offset, positions[i], self.base_offset + rels[i], limit, complete_next, True
                )
            except _StaleIndexEntry:
                i -= 1
        if i >= 0:
            start, expected = positions[i], self.base_offset + rels[i]
        else:
            start, expected = 0, self.base_offset
        return self._walk(offset, start, expected, limit, complete_next, False)

    def _walk(
        self,
        offset: int,
        start: int,
        expected: int,
        limit: int,
        complete_next: int | None,
        from_index: bool,
    ) -> tuple[int, BatchHeader] | None:
        """Follow batch lengths from a known batch start, checking the offsets chain.

        baseOffset is outside the CRC, so the chain (each base offset equals the
        previous batch's next offset) is what catches a damaged base offset or
        length. Reads one window of about an index interval per pread.
        """
        pos = start
        window = b""
        win_pos = start
        window_size = self.index_interval_bytes + HEADER_SIZE
        while pos < limit:
            off = pos - win_pos
            if len(window) - off < HEADER_SIZE:
                if limit - pos < HEADER_SIZE:
                    raise self._corrupt(pos, None, f"only {limit - pos} bytes remain for a header")
                window = self._pread(min(limit - pos, window_size), pos)
                win_pos = pos
                off = 0
                if len(window) < HEADER_SIZE:
                    raise self._corrupt(pos, None, "the log is shorter than its recorded size")
            try:
                header = parse_header(window, off)
            except InvalidBatch as e:
                if from_index and pos == start:
                    raise _StaleIndexEntry from None
                raise self._corrupt(pos, None, f"invalid header ({e})") from None
            if header.base_offset != expected or header.last_offset_delta < 0:
                if from_index and pos == start:
                    raise _StaleIndexEntry
                raise self._corrupt(
                    pos,
                    header,
                    f"its base offset should be {expected} (the offset chain is broken)",
                )
            if offset <= header.last_offset:
                if pos + header.size > limit:
                    raise self._corrupt(pos, header, f"it runs past the end of the log ({limit})")
                return pos, header
            pos += header.size
            expected = header.next_offset
        if pos != limit:
            raise self._corrupt(
                start, None, f"a batch length runs past the end of the log ({limit})"
            )
        if complete_next is not None and expected != complete_next:
            raise self._corrupt(
                start, None, f"the batches end at offset {expected}, not {complete_next}"
            )
        return None

    # ------------------------------------------------------------------ loading

    def _load(self) -> None:
        """Trust-but-verify open: index checks, bounded tail walk, full scan only if needed."""
        reason = self._load_index()
        if reason is not None:
            self._scan_all(f"index not trusted: {reason}", requested=False)
            return
        problem = self._scan_tail()
        if problem is not None:
            self._scan_all(f"tail check failed: {problem}", requested=False)

    def _read_index_file(self) -> bytes:
        length = os.fstat(self._index_fd).st_size
        chunks: list[bytes] = []
        pos = 0
        while pos < length:
            chunk = os.pread(self._index_fd, length - pos, pos)
            if not chunk:
                break
            chunks.append(chunk)
            pos += len(chunk)
        return b"".join(chunks)

    def _load_index(self) -> str | None:
        """Adopt the index file, or say why it cannot be trusted."""
        if self._index_missing:
            return "the index file is missing"
        data = self._read_index_file()
        if len(data) % INDEX_ENTRY_SIZE:
            return f"index length {len(data)} is not a multiple of {INDEX_ENTRY_SIZE}"
        rels, positions = _decode_index(data)
        count = len(rels)
        if count:
            size = self.size
            if rels[0] == 0 or positions[0] == 0:
                return "the first index entry points at the segment's first batch"
            if not (_strictly_increasing(rels) and _strictly_increasing(positions)):
                return "index entries are out of order"
            if positions[-1] + HEADER_SIZE > size:
                return f"an index entry points past the end of the log ({size} bytes)"
            step = max(1, (count - 1) // (_INDEX_SAMPLES - 1))
            samples = sorted(set(range(0, count, step)) | {count - 1})
            for i in samples:
                prefix = os.pread(self._read_fd, _PREFIX.size, positions[i])
                if len(prefix) < _PREFIX.size:
                    return f"index entry {i} points past the end of the log"
                base, _ = _PREFIX.unpack(prefix)
                if base != self.base_offset + rels[i]:
                    return (
                        f"index entry {i} names offset {self.base_offset + rels[i]} but the "
                        f"batch at position {positions[i]} starts at {base}"
                    )
        self._idx_rel = rels
        self._idx_pos = positions
        return None

    def _scan_tail(self) -> str | None:
        """Walk headers from the last index entry to the end to learn next_offset.

        Checks structure (header sanity, the offset chain, lengths within the
        file) but not CRCs, which keeps startup cost to a bounded read per
        segment. Returns a description of the first problem, or None. Adds the
        index entries a crash may have kept from reaching the index file.
        """
        size = self.size
        rels = self._idx_rel
        if size == 0:
            self._since_index = 0
            self.first_timestamp = -1
            self._state = (0, self.base_offset, -1)
            return None
        if rels:
            start = self._idx_pos[-1]
            expected = self.base_offset + rels[-1]
        else:
            start = 0
            expected = self.base_offset
        interval = self.index_interval_bytes
        window_size = interval + HEADER_SIZE
        since = 0
        max_ts = -1
        first_ts: int | None = None
        new_entries: list[tuple[int, int]] = []
        pos = start
        window = b""
        win_pos = start
        while pos < size:
            off = pos - win_pos
            if len(window) - off < HEADER_SIZE:
                if size - pos < HEADER_SIZE:
                    return f"{size - pos} bytes at position {pos} are too short for a batch header"
                window = os.pread(self._read_fd, min(size - pos, window_size), pos)
                win_pos = pos
                off = 0
                if len(window) < HEADER_SIZE:
                    return f"the log ends early at position {pos + len(window)}"
            try:
                header = parse_header(window, off)
            except InvalidBatch:
                return f"invalid batch header at position {pos}"
            problem = self._chain_problem(header, pos, expected, size)
            if problem is not None:
                return problem
            if pos == 0:
                first_ts = header.max_timestamp
            if since >= interval:
                new_entries.append((header.base_offset - self.base_offset, pos))
                since = 0
            since += header.size
            if header.max_timestamp > max_ts:
                max_ts = header.max_timestamp
            expected = header.next_offset
            pos += header.size
        if first_ts is None:
            try:
                first_ts = parse_header(os.pread(self._read_fd, HEADER_SIZE, 0)).max_timestamp
            except InvalidBatch:
                return "invalid batch header at position 0"
        if new_entries:
            _write_all(self._index_fd, b"".join(_ENTRY.pack(r, p) for r, p in new_entries))
            for rel, position in new_entries:
                self._idx_pos.append(position)
                self._idx_rel.append(rel)
            self._index_dirty = True
        self.first_timestamp = first_ts
        self._since_index = since
        # The tail covers the newest batches; the first batch guards against a
        # segment whose only timestamps are at its start.
        self._state = (size, expected, max(max_ts, first_ts))
        return None

    def _chain_problem(self, header: BatchHeader, pos: int, expected: int, end: int) -> str | None:
        if header.base_offset != expected:
            return (
                f"batch at position {pos} has base offset {header.base_offset}, expected {expected}"
            )
        if header.last_offset_delta < 0:
            return f"batch at position {pos} has a negative last offset delta"
        if header.last_offset - self.base_offset > MAX_RELATIVE_OFFSET:
            return f"batch at position {pos} has offsets too far from the segment base"
        if pos + header.size > end:
            return (
                f"batch at position {pos} ({header.size} bytes) is incomplete: "
                f"the log ends at {end}"
            )
        return None

    def _scan_all(self, reason: str, *, requested: bool) -> None:
        """Read the whole log with CRCs, truncate at the first bad batch, rebuild the index.

        Reads in chunks so memory is bounded by the chunk or the largest batch.
        """
        file_size = os.fstat(self._read_fd).st_size
        base = self.base_offset
        interval = self.index_interval_bytes
        rels: array[int] = array("I")
        positions: array[int] = array("I")
        since = 0
        expected = base
        max_ts = -1
        first_ts = -1
        pos = 0
        need = 0
        stop_reason: str | None = None
        while pos < file_size:
            buf = os.pread(self._read_fd, min(file_size - pos, max(_SCAN_CHUNK, need)), pos)
            if not buf:
                stop_reason = f"the log ends early at position {pos}"
                break
            batches, end = scan_batches(buf, 0)
            for bpos, header in batches:
                at = pos + bpos
                stop_reason = self._chain_problem(header, at, expected, file_size)
                if stop_reason is not None:
                    end = bpos
                    break
                if at == 0:
                    first_ts = header.max_timestamp
                if since >= interval:
                    rels.append(header.base_offset - base)
                    positions.append(at)
                    since = 0
                since += header.size
                if header.max_timestamp > max_ts:
                    max_ts = header.max_timestamp
                expected = header.next_offset
            at = pos + end
            if stop_reason is not None or end == len(buf):
                pos = at
                if stop_reason is not None:
                    break
                need = 0
                continue
            rest = len(buf) - end
            pos = at
            if rest >= HEADER_SIZE:
                try:
                    header = parse_header(buf, end)
                except InvalidBatch:
                    stop_reason = f"invalid batch header at position {at}"
                    break
                if at + header.size > file_size:
                    stop_reason = (
                        f"batch at position {at} ({header.size} bytes) is incomplete: "
                        f"the log ends at {file_size}"
                    )
                    break
                if end + header.size <= len(buf):
                    stop_reason = f"batch at position {at} failed its CRC-32C check"
                    break
                need = header.size
            elif at + rest >= file_size:
                stop_reason = f"{rest} bytes at position {at} are too short for a batch header"
                break
            else:
                need = HEADER_SIZE
        truncated = file_size - pos
        if truncated:
            os.ftruncate(self._log_fd, pos)
        new_index = _encode_index(rels, positions)
        rebuilt = self._index_missing or new_index != self._read_index_file()
        self._index_missing = False
        if rebuilt:
            os.ftruncate(self._index_fd, 0)
            _write_all(self._index_fd, new_index)
        if truncated or rebuilt:
            os.fsync(self._log_fd)
            os.fsync(self._index_fd)
        self._idx_pos = positions
        self._idx_rel = rels
        self._since_index = since
        self.first_timestamp = first_ts
        self._state = (pos, expected, max_ts)
        if truncated or rebuilt or not requested:
            why = reason if stop_reason is None else f"{reason}: {stop_reason}"
            self.last_recovery = RecoveryInfo(
                truncated_bytes=truncated,
                first_lost_position=pos if truncated else None,
                kept_next_offset=expected,
                index_rebuilt=rebuilt,
                reason=why,
            )
