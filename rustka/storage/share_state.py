"""The durable state of share groups (KIP-932), kept as a log in ``data_dir/__share_state/``.

Kafka keeps share-partition state in its share coordinator's ``__share_group_state``
topic; rustka keeps it in one append-only file of its own, replayed at start, like the
committed offsets (rustka.storage.offsets). What it holds per (group, topic, partition)
is what must survive a crash (docs/kafka.md, "Share groups (KIP-932)"): the start offset
of the in-flight window and, for each offset of the window with a durable state, that
state (AVAILABLE, ACKNOWLEDGED, ARCHIVED) and its delivery count. The reactor side writes
every change (`Delta` of rustka.storage.share_partition) with `append` -- which fsyncs --
before it answers the client, so an accepted acknowledgement is never lost and an
acquired record is never handed out again with its delivery count reset.

File format: a sequence of frames ``u32 length, u32 crc32, payload``; the payload is
UTF-8 JSON ``{"v": 1, "g": group, "t": topic, "p": partition, "s": start or null,
"r": [[first, last, state, count], ...], "full": bool}``. A frame with ``full`` replaces
what is known of its partition (compaction snapshots); otherwise it is applied on top.
A partition-less frame ``{"v": 1, "g": group, "del": true}`` (with "t"/"p" to name one
partition) forgets state (DeleteShareGroupOffsets, deleting the group).

Replay stops at the first frame that is short or fails its CRC -- a torn tail from a
crash mid-write, which was never answered -- and cuts the file there, so later appends
follow intact frames. Compaction writes one full frame per partition to a new file,
fsyncs it and renames it over the log, so the log stays about as large as the state.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rustka.storage.file_io import fsync_dir
from rustka.storage.share_partition import Delta

SHARE_STATE_DIR: Final = "__share_state"
LOG_NAME: Final = "share-state.log"
FORMAT_VERSION: Final = 1
_FRAME = struct.Struct(">II")
# Compact once the log holds this many frames more than it did after the last compaction.
COMPACT_AFTER_FRAMES: Final = 20_000

ShareKey = tuple[str, str, int]
"""``(group, topic, partition)`` of one share-partition."""


@dataclass(slots=True)
class PartitionState:
    """Durable state of one share-partition: start offset and ``offset -> (state, count)``."""

    start_offset: int | None = None
    records: dict[int, tuple[int, int]] | None = None

    def apply(self, start: int | None, records: Sequence[tuple[int, int, int]]) -> None:
        if self.records is None:
            self.records = {}
        if start is not None:
            self.start_offset = start
        for offset, state, count in records:
            self.records[offset] = (state, count)
        if self.start_offset is not None:
            for offset in [o for o in self.records if o < self.start_offset]:
                del self.records[offset]


def _ranges(records: Sequence[tuple[int, int, int]]) -> list[list[int]]:
    """``(offset, state, count)`` as ``[first, last, state, count]`` runs."""
    runs: list[list[int]] = []
    for offset, state, count in sorted(records):
        if runs and runs[-1][1] + 1 == offset and runs[-1][2:] == [state, count]:
            runs[-1][1] = offset
        else:
            runs.append([offset, offset, state, count])
    return runs


def _records(runs: Sequence[Sequence[int]]) -> list[tuple[int, int, int]]:
    return [(o, state, count) for first, last, state, count in runs for o in range(first, last + 1)]


def _frame(payload: Mapping[str, Any]) -> bytes:
    body = json.dumps(payload, separators=(",", ":")).encode()
    return _FRAME.pack(len(body), zlib.crc32(body)) + body


def _frames(data: bytes) -> Iterator[tuple[int, dict[str, Any]]]:
    """Intact frames and the position after each; stops at the first damaged one."""
    pos = 0
    while pos + _FRAME.size <= len(data):
        length, crc = _FRAME.unpack_from(data, pos)
        body = data[pos + _FRAME.size : pos + _FRAME.size + length]
        if len(body) < length or zlib.crc32(body) != crc:
            return
        try:
            payload = json.loads(body)
        except ValueError:
            return
        pos += _FRAME.size + length
        yield pos, payload


class ShareStateLog:
    """The share-state log of one broker; see the module docstring. Blocking (file I/O
    and fsync): the reactor side calls it on the I/O pool."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._path = directory / LOG_NAME
        self.state: dict[ShareKey, PartitionState] = {}
        self.frames = 0
        self.torn_bytes = 0
        self._frames_after_compaction = 0
        self._file: Any = None
        self._closed = False

    @classmethod
    def open(cls, data_dir: Path) -> ShareStateLog:
        """Replay ``data_dir/__share_state`` and open it for appends. The directory is
        made by the first write, so a broker whose clients never use share groups has
        none."""
        log = cls(data_dir / SHARE_STATE_DIR)
        if not log._path.exists():
            return log
        data = log._path.read_bytes()
        end = 0
        for after, payload in _frames(data):
            log._replay(payload)
            log.frames += 1
            end = after
        if end < len(data):
            log.torn_bytes = len(data) - end
            with open(log._path, "r+b") as f:
                f.truncate(end)
                os.fsync(f.fileno())
        log._frames_after_compaction = log.frames
        log._file = open(log._path, "ab")  # noqa: SIM115 -- held open for appends
        return log

    def _replay(self, payload: Mapping[str, Any]) -> None:
        if payload.get("v") != FORMAT_VERSION:
            return
        group = payload["g"]
        if payload.get("del"):
            if "t" in payload:
                self.state.pop((group, payload["t"], payload["p"]), None)
            else:
                for key in [k for k in self.state if k[0] == group]:
                    del self.state[key]
            return
        key = (group, payload["t"], payload["p"])
        if payload.get("full"):
            self.state[key] = PartitionState()
        self.state.setdefault(key, PartitionState()).apply(payload["s"], _records(payload["r"]))

    def _appender(self) -> Any:
        """The open log file, made (and its directory entries made durable) on first use."""
        if self._closed:
            raise ValueError("the share-state log is closed")
        if self._file is None:
            self._dir.mkdir(exist_ok=True)
            fsync_dir(self._dir.parent)
            self._file = open(self._path, "ab")  # noqa: SIM115 -- held open for appends
            fsync_dir(self._dir)
        return self._file

    def _write(self, payloads: Sequence[Mapping[str, Any]]) -> None:
        if not payloads:
            return
        self._appender()
        self._file.write(b"".join(_frame(p) for p in payloads))
        self._file.flush()
        os.fsync(self._file.fileno())
        for payload in payloads:
            self._replay(payload)
        self.frames += len(payloads)

    def append(self, changes: Sequence[tuple[ShareKey, Delta]]) -> None:
        """Write the deltas durably (fsync) before returning."""
        self._write(
            [
                {
                    "v": FORMAT_VERSION,
                    "g": key[0],
                    "t": key[1],
                    "p": key[2],
                    "s": delta.start_offset,
                    "r": _ranges(delta.records),
                }
                for key, delta in changes
                if delta
            ]
        )

    def reset(self, key: ShareKey, start_offset: int) -> None:
        """Replace a partition's state by an empty window at ``start_offset`` (durably)."""
        self._write([_full(key, start_offset, {})])

    def forget(self, group: str, topic: str | None = None, partition: int = -1) -> None:
        """Forget a group's state, or one partition's (durably)."""
        payload: dict[str, Any] = {"v": FORMAT_VERSION, "g": group, "del": True}
        if topic is not None:
            payload.update(t=topic, p=partition)
        self._write([payload])

    def needs_compaction(self) -> bool:
        return self.frames - self._frames_after_compaction >= COMPACT_AFTER_FRAMES

    def compact(self) -> None:
        """Rewrite the log as one full frame per partition (new file, fsync, rename)."""
        self._appender()
        tmp = self._path.with_suffix(".tmp")
        frames = [
            _full(key, st.start_offset, st.records or {}) for key, st in sorted(self.state.items())
        ]
        with open(tmp, "wb") as f:
            f.write(b"".join(_frame(p) for p in frames))
            f.flush()
            os.fsync(f.fileno())
        self._file.close()
        os.replace(tmp, self._path)
        dir_fd = os.open(self._dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self._file = open(self._path, "ab")  # noqa: SIM115 -- held open for appends
        self.frames = self._frames_after_compaction = len(frames)

    def close(self) -> None:
        self._closed = True
        if self._file is not None:
            self._file.close()
            self._file = None


def _full(
    key: ShareKey, start: int | None, records: Mapping[int, tuple[int, int]]
) -> dict[str, Any]:
    return {
        "v": FORMAT_VERSION,
        "g": key[0],
        "t": key[1],
        "p": key[2],
        "s": start,
        "r": _ranges([(o, s, c) for o, (s, c) in records.items()]),
        "full": True,
    }
