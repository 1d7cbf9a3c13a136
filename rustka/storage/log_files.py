"""The names and small files of a data dir, in one place (Kafka's ``LogFileUtils``).

A partition directory holds segments named by their base offset in 20 digits
(``00000000000000000000.log`` with its ``.index`` and ``.timeindex``), the
``recovery-point`` file (u64 offset, then the CRC-32C of those 8 bytes, so a
torn write reads as "unknown"), and, briefly, leftovers of interrupted work
(``.deleted``, ``.tmp``, ``.cleaned``). The data dir holds ``.clean-shutdown``
while the broker is stopped cleanly. Everything that writes, repairs or only
reads these files (segments, partition logs, the offsets store, ``rustka
check``) takes the layout from here.
"""

from __future__ import annotations

import struct

from crc32c import crc32c

__all__ = [
    "CLEAN_SHUTDOWN_MARKER",
    "DELETED_SUFFIX",
    "INDEX_SUFFIX",
    "LEFTOVER_SUFFIXES",
    "LOG_SUFFIX",
    "NAME_DIGITS",
    "RECOVERY_POINT_FILE",
    "RECOVERY_POINT_SIZE",
    "SEGMENT_SUFFIXES",
    "TIME_INDEX_SUFFIX",
    "DamagedRecoveryPoint",
    "base_offset_of",
    "decode_recovery_point",
    "encode_recovery_point",
    "index_name",
    "log_name",
    "segment_file_name",
    "time_index_name",
]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
DELETED_SUFFIX = ".deleted"
# What interrupted work leaves behind: segments awaiting deletion, half-written
# replacements, and a cleaner's output that was never swapped in.
LEFTOVER_SUFFIXES = (DELETED_SUFFIX, ".tmp", ".cleaned")
RECOVERY_POINT_FILE = "recovery-point"
CLEAN_SHUTDOWN_MARKER = ".clean-shutdown"
NAME_DIGITS = 20

_RECOVERY_POINT = struct.Struct(">QI")
RECOVERY_POINT_SIZE = _RECOVERY_POINT.size


def segment_file_name(base_offset: int, suffix: str) -> str:
    """``00000000000000000042.log`` for base offset 42 and suffix ``.log``."""
    return f"{base_offset:0{NAME_DIGITS}d}{suffix}"


def log_name(base_offset: int) -> str:
    return segment_file_name(base_offset, LOG_SUFFIX)


def index_name(base_offset: int) -> str:
    return segment_file_name(base_offset, INDEX_SUFFIX)


def time_index_name(base_offset: int) -> str:
    return segment_file_name(base_offset, TIME_INDEX_SUFFIX)


def base_offset_of(name: str, suffix: str = LOG_SUFFIX) -> int | None:
    """The base offset a segment file name encodes, or None if it is not one of ours.

    Strict about the 20 digits so stray files (editor backups, notes) are never
    mistaken for segments.
    """
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    if len(stem) != NAME_DIGITS or not stem.isdigit() or not stem.isascii():
        return None
    return int(stem)


class DamagedRecoveryPoint(ValueError):
    """The recovery-point file cannot be trusted; ``position`` is the bad byte, if one is."""

    def __init__(self, message: str, position: int | None) -> None:
        super().__init__(message)
        self.position = position


def encode_recovery_point(offset: int) -> bytes:
    """The recovery-point file's 12 bytes for ``offset``."""
    return _RECOVERY_POINT.pack(offset, crc32c(offset.to_bytes(8, "big")))


def decode_recovery_point(data: bytes) -> int:
    """The offset the file records; DamagedRecoveryPoint if its length or CRC is wrong."""
    if len(data) != RECOVERY_POINT_SIZE:
        raise DamagedRecoveryPoint(f"{len(data)} bytes, expected {RECOVERY_POINT_SIZE}", None)
    offset, checksum = _RECOVERY_POINT.unpack(data)
    if crc32c(data[:8]) != checksum:
        raise DamagedRecoveryPoint("checksum mismatch", 8)
    return int(offset)
