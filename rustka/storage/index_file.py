"""What both segment indexes share (Kafka's ``AbstractIndex``): the file with its one
append fd and dirty flag, fsync, whole-file rewrites, and the big-endian arrays
both layouts are read into and written from.

The two layouts themselves (``.index``: offset → position, ``.timeindex``:
timestamp → offset) are in offset_index.py and time_index.py.
"""

from __future__ import annotations

import contextlib
import os
import sys
from array import array
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

from rustka.errors import StorageError
from rustka.storage.file_io import timed_fsync, write_all

__all__ = ["IndexFile", "from_big_endian", "strictly_increasing", "to_big_endian"]

_LITTLE_ENDIAN = sys.byteorder == "little"
_OPEN_FLAGS = getattr(os, "O_CLOEXEC", 0)
assert array("I").itemsize == 4, "index arrays need 32-bit unsigned items"
assert array("q").itemsize == 8, "time index arrays need 64-bit signed items"


def strictly_increasing(values: Sequence[int]) -> bool:
    return all(a < b for a, b in pairwise(values))


def to_big_endian(items: array[int]) -> bytes:
    """The bytes of ``items`` in the big-endian order the index files use."""
    if _LITTLE_ENDIAN:
        items = array(items.typecode, items)
        items.byteswap()
    return items.tobytes()


def from_big_endian(typecode: str, data: bytes) -> array[int]:
    items = array(typecode)
    items.frombytes(data)
    if _LITTLE_ENDIAN:
        items.byteswap()
    return items


class IndexFile:
    """The file handling both segment indexes share: one append fd, dirty flag, fsync.

    ``existed`` records whether the file was there before opening, because a
    missing index must be rebuilt even though opening creates an empty one.
    """

    path: Path
    base_offset: int
    existed: bool
    entry_size: int = 0

    def __init__(self, path: Path, base_offset: int, *, create: bool) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        # A new segment's empty index is complete; an existing one must be checked.
        self.existed = create or self.path.exists()
        trunc = os.O_TRUNC if create else 0
        try:
            self._fd = os.open(
                self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | trunc | _OPEN_FLAGS, 0o644
            )
        except OSError as e:
            raise StorageError(f"cannot open index {self.path}: {e.strerror}") from e
        self._dirty = True

    def read_file(self) -> bytes:
        """The whole file as stored (which may differ from memory if it is damaged)."""
        length = os.fstat(self._fd).st_size
        chunks: list[bytes] = []
        pos = 0
        while pos < length:
            chunk = os.pread(self._fd, length - pos, pos)
            if not chunk:
                break
            chunks.append(chunk)
            pos += len(chunk)
        return b"".join(chunks)

    def _write(self, data: bytes, keep_entries: int) -> None:
        """Append ``data``; on failure cut the file back to ``keep_entries`` and raise."""
        try:
            write_all(self._fd, data)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, keep_entries * self.entry_size)
            raise StorageError(f"writing the index {self.path} failed: {e.strerror}") from e
        self._dirty = True

    def _truncate_file(self, entries: int) -> None:
        try:
            os.ftruncate(self._fd, entries * self.entry_size)
        except OSError as e:
            raise StorageError(f"truncating the index {self.path} failed: {e.strerror}") from e
        self._dirty = True

    def _rewrite(self, data: bytes) -> bool:
        """Make the file hold exactly ``data``; True if it had to change."""
        if self.existed and data == self.read_file():
            return False
        self._truncate_file(0)
        self._write(data, 0)
        self.existed = True
        return True

    def flush(self) -> None:
        """fsync the file if it changed since the last flush."""
        if self._dirty:
            try:
                timed_fsync(self._fd)
            except OSError as e:
                raise StorageError(f"fsync of {self.path} failed: {e.strerror}") from e
            self._dirty = False

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def rename(self, target: Path) -> None:
        """Move the file (segment deletion); the fd stays valid."""
        os.rename(self.path, target)
        self.path = target
