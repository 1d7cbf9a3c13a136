"""A FUSE passthrough filesystem that fails ``fsync`` (and optionally ``write``) on demand.

Usage (as root, with libfuse3 installed; ``.ci/run`` installs it)::

    .venv/bin/python -m tools.faultfs BACKING MOUNTPOINT --fail-fsync-if FLAG
        [--fail-fsync-once FLAG2] [--fail-write-if FLAG3]      (one line)

Every operation on MOUNTPOINT is carried out on the same path under BACKING.
While the file FLAG exists, every ``fsync`` and ``fsyncdir`` answers EIO, which
is what a disk that lost a write reports; while FLAG3 exists, every ``write``
answers EIO. The flags live outside the mount, so a test turns a fault on and
off with a plain ``touch`` and ``unlink`` while the program under test keeps its
files open. ``--fail-fsync-once FLAG2`` fails only the first fsync after FLAG2
appears (and removes FLAG2), which is how Linux reports a writeback error: once,
to the next fsync, after which the page cache looks clean again.

When the filesystem is mounted, the process prints ``mounted`` on a line of its
own to stdout, so a caller can wait for that instead of polling. It exits when
MOUNTPOINT is unmounted (``umount MOUNTPOINT``) or on SIGTERM.

This exists to check the fsync-failure promise of docs/reliability.md
("fsync failure") against the real storage code; it is no general-purpose
filesystem: no links, extended attributes or locks.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import threading
from pathlib import Path
from typing import Any

import mfusepy as fuse

__all__ = ["FaultFS", "main"]


class FaultFS(fuse.Operations):
    """Passthrough of ``backing`` with fsync/write failures switched by flag files."""

    use_ns = True

    def __init__(
        self,
        backing: Path,
        fail_fsync_if: Path | None = None,
        fail_write_if: Path | None = None,
        fail_fsync_once: Path | None = None,
    ) -> None:
        self.backing = backing
        self.fail_fsync_if = fail_fsync_if
        self.fail_write_if = fail_write_if
        self.fail_fsync_once = fail_fsync_once
        self._once_lock = threading.Lock()
        self.fsync_failures = 0

    # -- fault switches --------------------------------------------------------

    def _fsync_fault(self) -> None:
        """Raise EIO when an fsync fault is switched on (consuming a one-shot flag)."""
        if self.fail_fsync_if is not None and self.fail_fsync_if.exists():
            self.fsync_failures += 1
            raise fuse.FuseOSError(errno.EIO)
        if self.fail_fsync_once is not None:
            with self._once_lock:
                try:
                    self.fail_fsync_once.unlink()
                except FileNotFoundError:
                    return
            self.fsync_failures += 1
            raise fuse.FuseOSError(errno.EIO)

    def _real(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    @staticmethod
    def _call(func: Any, *args: Any) -> Any:
        """Run an os call, turning its OSError into the FUSE error the kernel passes on."""
        try:
            return func(*args)
        except OSError as e:
            raise fuse.FuseOSError(e.errno or errno.EIO) from None

    # -- metadata ----------------------------------------------------------------

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = self._call(os.fstat, fh) if fh is not None else self._call(os.lstat, self._real(path))
        keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks")
        attrs: dict[str, Any] = {key: getattr(st, key) for key in keys}
        attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return attrs

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._real(path), amode):
            raise fuse.FuseOSError(errno.EACCES)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        self._call(os.chmod, self._real(path), mode)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        if times is None:
            self._call(os.utime, self._real(path))
        else:
            self._call(lambda: os.utime(self._real(path), ns=times))
        return 0

    def statfs(self, path: str) -> dict[str, Any]:
        st = self._call(os.statvfs, self._real(path))
        keys = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail")
        more = ("f_files", "f_ffree", "f_favail", "f_flag", "f_namemax")
        return {key: getattr(st, key) for key in keys + more}

    # -- directories -------------------------------------------------------------

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *self._call(os.listdir, self._real(path))]

    def mkdir(self, path: str, mode: int) -> int:
        self._call(os.mkdir, self._real(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        self._call(os.rmdir, self._real(path))
        return 0

    def unlink(self, path: str) -> int:
        self._call(os.unlink, self._real(path))
        return 0

    def rename(self, old: str, new: str) -> int:
        self._call(os.rename, self._real(old), self._real(new))
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        self._fsync_fault()
        return 0

    # -- files ---------------------------------------------------------------------

    def open(self, path: str, flags: int) -> int:
        return int(self._call(os.open, self._real(path), flags))

    def create(self, path: str, mode: int, flags: int = os.O_RDWR) -> int:
        return int(self._call(os.open, self._real(path), flags | os.O_CREAT, mode))

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return bytes(self._call(os.pread, fh, size, offset))

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        if self.fail_write_if is not None and self.fail_write_if.exists():
            raise fuse.FuseOSError(errno.EIO)
        return int(self._call(os.pwrite, fh, data, offset))

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        if fh is not None:
            self._call(os.ftruncate, fh, length)
        else:
            self._call(os.truncate, self._real(path), length)
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0

    def release(self, path: str, fh: int) -> int:
        self._call(os.close, fh)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        self._fsync_fault()
        self._call(os.fdatasync if datasync else os.fsync, fh)
        return 0

    def init(self, path: str) -> None:
        print("mounted", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.faultfs", description=__doc__)
    parser.add_argument("backing", type=Path, help="directory whose files are served")
    parser.add_argument("mountpoint", type=Path, help="where to mount the passthrough")
    parser.add_argument("--fail-fsync-if", type=Path, help="fsync answers EIO while this exists")
    parser.add_argument("--fail-fsync-once", type=Path, help="the next fsync after this appears")
    parser.add_argument("--fail-write-if", type=Path, help="write answers EIO while this exists")
    args = parser.parse_args(argv)
    if not args.backing.is_dir():
        parser.error(f"{args.backing} is not a directory")
    ops = FaultFS(
        args.backing.resolve(), args.fail_fsync_if, args.fail_write_if, args.fail_fsync_once
    )
    try:
        fuse.FUSE(ops, str(args.mountpoint), foreground=True, nothreads=True)
    except RuntimeError as e:
        print(f"faultfs: cannot mount {args.mountpoint}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
