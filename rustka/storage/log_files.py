"""The names and small files of a data dir, in one place (Kafka's ``LogFileUtils``).

A partition directory holds segments named by their base offset in 20 digits
(``00000000000000000000.log`` with its ``.index`` and ``.timeindex``), the
``recovery-point`` file (u64 offset, then the CRC-32C of those 8 bytes, so a
torn write reads as "unknown"), on a compacted log the ``cleaner-checkpoint``
and, while a cleaned segment is being swapped in, ``cleaner-swap`` (both
below), and, briefly, leftovers of interrupted work (``.deleted``, ``.tmp``,
``.cleaned``), and once DeleteRecords moved the log start into or past the first
segment, ``log-start-offset`` (below). A topic directory holds its partition folders and, when the
topic has configs of its own (Kafka topic configs, docs/kafka.md "Topic
configs"), the ``topic-config`` file (below). The data dir holds ``.clean-shutdown``
while the broker is stopped cleanly. Everything that writes, repairs or only
reads these files (segments, partition logs, the offsets store, ``rustka
check``) takes the layout from here.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

from crc32c import crc32c

__all__ = [
    "CLEANED_SUFFIX",
    "CLEANER_CHECKPOINT_FILE",
    "CLEANER_SWAP_FILE",
    "CLEAN_SHUTDOWN_MARKER",
    "DELETED_SUFFIX",
    "INDEX_SUFFIX",
    "LEFTOVER_SUFFIXES",
    "LOG_START_FILE",
    "LOG_SUFFIX",
    "NAME_DIGITS",
    "RECOVERY_POINT_FILE",
    "RECOVERY_POINT_SIZE",
    "SEGMENT_SUFFIXES",
    "TIME_INDEX_SUFFIX",
    "TOPIC_CONFIG_FILE",
    "CleanerCheckpoint",
    "CleanerSwap",
    "DamagedFile",
    "DamagedRecoveryPoint",
    "base_offset_of",
    "decode_cleaner_checkpoint",
    "decode_cleaner_swap",
    "decode_log_start",
    "decode_recovery_point",
    "decode_topic_config",
    "encode_cleaner_checkpoint",
    "encode_cleaner_swap",
    "encode_log_start",
    "encode_recovery_point",
    "encode_topic_config",
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
CLEANED_SUFFIX = ".cleaned"
# What interrupted work leaves behind: segments awaiting deletion, half-written
# replacements, and a cleaner's output that was never swapped in.
LEFTOVER_SUFFIXES = (DELETED_SUFFIX, ".tmp", CLEANED_SUFFIX)
RECOVERY_POINT_FILE = "recovery-point"
CLEANER_CHECKPOINT_FILE = "cleaner-checkpoint"
CLEANER_SWAP_FILE = "cleaner-swap"
LOG_START_FILE = "log-start-offset"
CLEAN_SHUTDOWN_MARKER = ".clean-shutdown"
TOPIC_CONFIG_FILE = "topic-config"
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


_CRC = struct.Struct(">I")


class DamagedFile(ValueError):
    """A small checkpoint file whose length, magic or CRC-32C is wrong."""


# --------------------------------------------------------------------------- log start


def encode_log_start(offset: int) -> bytes:
    """The ``log-start-offset`` file's 12 bytes: u64 offset, then the CRC-32C of those 8.

    Kafka's log-start-offset checkpoint, one file per partition: where DeleteRecords
    moved the log start, which may lie inside a segment, so it cannot be derived
    from the segment names as the rest of the log's bounds are. Replaced whole
    (file_io.replace_file), so a crash leaves the old offset or the new one.
    """
    return _RECOVERY_POINT.pack(offset, crc32c(offset.to_bytes(8, "big")))


def decode_log_start(data: bytes) -> int:
    """The offset the file records; DamagedFile if its length or CRC is wrong."""
    if len(data) != RECOVERY_POINT_SIZE:
        raise DamagedFile(f"{len(data)} bytes, expected {RECOVERY_POINT_SIZE}")
    offset, checksum = _RECOVERY_POINT.unpack(data)
    if crc32c(data[:8]) != checksum:
        raise DamagedFile("checksum mismatch")
    return int(offset)


# --------------------------------------------------------------------------- cleaner files


@dataclass(frozen=True, slots=True)
class CleanerCheckpoint:
    """What the log cleaner remembers of a partition between rounds.

    ``first_dirty``: where the part of the log not yet cleaned begins (Kafka's
    cleaner checkpoint). ``cleaned_below``: every segment the cleaner wrote
    starts below it, so only those may hold offset gaps (segment.py,
    `HeaderWalk`); a gap anywhere else is damage. ``horizon``: the earliest
    delete horizon of the tombstones the last round kept, -1 for none: when
    the log is due a round to drop them even if nothing new was written.
    """

    first_dirty: int = 0
    cleaned_below: int = 0
    horizon: int = -1


# u64 first_dirty, u64 cleaned_below, i64 horizon, then the CRC-32C of those 24 bytes.
_CHECKPOINT = struct.Struct(">QQq")


def encode_cleaner_checkpoint(checkpoint: CleanerCheckpoint) -> bytes:
    body = _CHECKPOINT.pack(checkpoint.first_dirty, checkpoint.cleaned_below, checkpoint.horizon)
    return body + _CRC.pack(crc32c(body))


def decode_cleaner_checkpoint(data: bytes) -> CleanerCheckpoint:
    """The checkpoint the bytes hold; DamagedFile if their length or CRC is wrong."""
    if len(data) != _CHECKPOINT.size + _CRC.size:
        raise DamagedFile(f"{len(data)} bytes, expected {_CHECKPOINT.size + _CRC.size}")
    if crc32c(data[: _CHECKPOINT.size]) != _CRC.unpack_from(data, _CHECKPOINT.size)[0]:
        raise DamagedFile("checksum mismatch")
    return CleanerCheckpoint(*_CHECKPOINT.unpack_from(data, 0))


@dataclass(frozen=True, slots=True)
class CleanerSwap:
    """A cleaned segment being swapped in: written before the first old file is touched.

    Its existence is the commit point of one swap (docs/kafka.md, "Log
    compaction", crash safety): ``base`` names the ``.cleaned`` files, which
    replace the segments whose base offsets are ``replaced`` (``base`` among
    them); ``cleaned_below`` is the checkpoint's new bound. Opening the log
    finishes a swap it finds, and without one removes ``.cleaned`` leftovers.
    """

    base: int
    replaced: tuple[int, ...]
    cleaned_below: int


# magic, version, u64 base, u64 cleaned_below, u32 count, then count u64 base
# offsets, then a u32 CRC-32C of everything before it.
_SWAP_MAGIC = b"RKCS"
_SWAP_VERSION = 1
_SWAP_HEAD = struct.Struct(">4sBQQI")
_U64 = struct.Struct(">Q")


def encode_cleaner_swap(swap: CleanerSwap) -> bytes:
    parts = [
        _SWAP_HEAD.pack(
            _SWAP_MAGIC, _SWAP_VERSION, swap.base, swap.cleaned_below, len(swap.replaced)
        )
    ]
    parts.extend(_U64.pack(base) for base in swap.replaced)
    body = b"".join(parts)
    return body + _CRC.pack(crc32c(body))


def decode_cleaner_swap(data: bytes) -> CleanerSwap:
    """The swap the bytes describe; DamagedFile if they are not a whole, intact one."""
    if len(data) < _SWAP_HEAD.size + _CRC.size:
        raise DamagedFile(f"{len(data)} bytes, too short")
    body, (checksum,) = data[: -_CRC.size], _CRC.unpack(data[-_CRC.size :])
    if crc32c(body) != checksum:
        raise DamagedFile("checksum mismatch")
    magic, version, base, cleaned_below, count = _SWAP_HEAD.unpack_from(body, 0)
    if magic != _SWAP_MAGIC or version != _SWAP_VERSION:
        raise DamagedFile(f"not a version {_SWAP_VERSION} swap file")
    if len(body) != _SWAP_HEAD.size + count * _U64.size:
        raise DamagedFile(f"{count} replaced segments do not fit in {len(body)} bytes")
    replaced = tuple(
        _U64.unpack_from(body, _SWAP_HEAD.size + i * _U64.size)[0] for i in range(count)
    )
    if base not in replaced:
        raise DamagedFile(f"the cleaned segment {base} replaces none of {replaced}")
    return CleanerSwap(base, replaced, cleaned_below)


# --------------------------------------------------------------------------- topic configs

# magic, version, u32 count, then count entries (u16 name length, name, u32 value
# length, value; UTF-8), then a u32 CRC-32C of everything before it.
_TOPIC_CONFIG_MAGIC = b"RKTC"
_TOPIC_CONFIG_VERSION = 1
_TOPIC_CONFIG_HEAD = struct.Struct(">4sBI")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


def encode_topic_config(configs: Mapping[str, str]) -> bytes:
    """A topic's own configs (Kafka names and values), sorted by name, as the file stores them.

    Replaced whole (tmp, fsync, rename, fsync dir) like the recovery point, so a
    crash leaves the old configs or the new ones; the CRC tells a damaged file
    from either.
    """
    parts = [_TOPIC_CONFIG_HEAD.pack(_TOPIC_CONFIG_MAGIC, _TOPIC_CONFIG_VERSION, len(configs))]
    for name in sorted(configs):
        raw_name, raw_value = name.encode("utf-8"), configs[name].encode("utf-8")
        parts += [_U16.pack(len(raw_name)), raw_name, _U32.pack(len(raw_value)), raw_value]
    body = b"".join(parts)
    return body + _CRC.pack(crc32c(body))


def decode_topic_config(data: bytes) -> dict[str, str]:
    """The configs the file holds; DamagedFile if it is not one whole, intact file."""
    if len(data) < _TOPIC_CONFIG_HEAD.size + _CRC.size:
        raise DamagedFile(f"{len(data)} bytes, too short")
    body, (checksum,) = data[: -_CRC.size], _CRC.unpack(data[-_CRC.size :])
    if crc32c(body) != checksum:
        raise DamagedFile("checksum mismatch")
    magic, version, count = _TOPIC_CONFIG_HEAD.unpack_from(body, 0)
    if magic != _TOPIC_CONFIG_MAGIC or version != _TOPIC_CONFIG_VERSION:
        raise DamagedFile(f"not a version {_TOPIC_CONFIG_VERSION} topic config file")
    configs: dict[str, str] = {}
    pos = _TOPIC_CONFIG_HEAD.size
    try:
        for _ in range(count):
            (size,) = _U16.unpack_from(body, pos)
            name = body[pos + 2 : pos + 2 + size].decode("utf-8")
            pos += 2 + size
            (size,) = _U32.unpack_from(body, pos)
            value = body[pos + 4 : pos + 4 + size]
            if len(value) != size:
                raise DamagedFile(f"config {name!r} runs past the end of the file")
            pos += 4 + size
            if name in configs:
                raise DamagedFile(f"config {name!r} appears twice")
            configs[name] = value.decode("utf-8")
    except (struct.error, UnicodeDecodeError) as e:
        raise DamagedFile(f"entry {len(configs)} is malformed: {e}") from None
    if pos != len(body):
        raise DamagedFile(f"{len(body) - pos} bytes follow the last of {count} configs")
    return configs
