"""The file operations storage shares: counted fsyncs, whole writes, durable directory
changes, and closing several things so that one failure neither hides another nor
leaks the rest.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

__all__ = [
    "SYNC_STATS",
    "Closeable",
    "SyncStats",
    "close_all",
    "closing_on_error",
    "fsync_dir",
    "replace_file",
    "timed_fsync",
    "write_all",
]

_OPEN_FLAGS = getattr(os, "O_CLOEXEC", 0)


@dataclass
class SyncStats:
    """Process-wide fsync counters for the metrics endpoint.

    Kept where the fsync happens, because with ``flush = "always"`` the
    partition log syncs inside its append (data must be durable before it is
    visible), so no caller above could time the fsync alone.
    """

    count: int = 0
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


SYNC_STATS = SyncStats()


def timed_fsync(fd: int) -> None:
    """fsync ``fd`` and count it in SYNC_STATS."""
    started = time.perf_counter()
    os.fsync(fd)
    elapsed = time.perf_counter() - started
    with SYNC_STATS.lock:
        SYNC_STATS.count += 1
        SYNC_STATS.seconds += elapsed


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """os.write may write less than asked (a disk filling up); loop or raise."""
    view = memoryview(data)
    try:
        while view:
            written = os.write(fd, view)
            view = view[written:]
    finally:
        view.release()


def fsync_dir(directory: Path) -> None:
    """Make creations, renames and deletions in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | _OPEN_FLAGS)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace a small file whole: write ``path`` + ".tmp", fsync it, rename it over
    ``path``, fsync the directory. A crash leaves the old file or the new one, and at
    worst a ``.tmp`` leftover; OSError is the caller's to report.

    ``mode`` is set on the temporary file before any byte is written, so a secret
    (the credential file, mode 0600) is never readable by others, not even briefly
    through a leftover ``.tmp`` that an earlier run created with wider permissions."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _OPEN_FLAGS, mode)
        try:
            os.fchmod(fd, mode)
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


class Closeable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=Closeable)


def close_all(things: Iterable[Closeable]) -> None:
    """Close every one of ``things``, even after a failure; then raise the first error."""
    first_error: BaseException | None = None
    for thing in things:
        try:
            thing.close()
        except BaseException as e:
            if first_error is None:
                first_error = e
    if first_error is not None:
        raise first_error


@contextlib.contextmanager
def closing_on_error(thing: C) -> Iterator[C]:
    """Close ``thing`` if the block raises (whatever it raises), and re-raise."""
    try:
        yield thing
    except BaseException:
        thing.close()
        raise
