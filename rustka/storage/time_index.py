"""A segment's sparse time index (``.timeindex``), in the layout of Kafka's time index.

Each entry is 12 bytes, big-endian ``i64 timestamp, u32 offset - base_offset``.
An entry (T, o) says: the batch at offset o is the first in the segment whose
max timestamp reached T, so every batch before o has a max timestamp below T.
Timestamps strictly increase from entry to entry. The segment adds an entry at
the same moments as an offset index entry (an index interval of bytes has
passed) and only when the segment's max timestamp grew since the last entry
(docs/architecture.md, "segment.py").

A lookup by time therefore finds the last entry with a timestamp below the
target and starts a forward walk over batch headers from its offset; batches
before it cannot hold the answer. The last entry also gives the segment's max
timestamp at open without reading the whole log.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from pathlib import Path

from rustka.storage.index_file import IndexFile, strictly_increasing

__all__ = ["TIME_INDEX_ENTRY", "TIME_INDEX_ENTRY_SIZE", "TimeIndex"]

TIME_INDEX_ENTRY_SIZE = 12
#: One entry on disk: max timestamp, offset relative to the segment's base (Kafka's layout).
TIME_INDEX_ENTRY = struct.Struct(">qI")


class TimeIndex(IndexFile):
    """Timestamp → relative offset pairs, both strictly ascending."""

    entry_size = TIME_INDEX_ENTRY_SIZE

    def __init__(self, path: Path, base_offset: int, *, create: bool = False) -> None:
        super().__init__(path, base_offset, create=create)
        self._ts: array[int] = array("q")
        self._rel: array[int] = array("I")

    # ------------------------------------------------------------------ bytes and arrays

    @staticmethod
    def encode(timestamps: Sequence[int], rels: Sequence[int]) -> bytes:
        pack = TIME_INDEX_ENTRY.pack
        return b"".join(pack(ts, rel) for ts, rel in zip(timestamps, rels, strict=True))

    @staticmethod
    def decode(data: bytes) -> tuple[array[int], array[int]]:
        """Timestamps and relative offsets; ``data`` must be whole entries."""
        stamps: array[int] = array("q")
        rels: array[int] = array("I")
        for ts, rel in TIME_INDEX_ENTRY.iter_unpack(data):
            stamps.append(ts)
            rels.append(rel)
        return stamps, rels

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return len(self._ts)

    def entry(self, n: int) -> tuple[int, int]:
        """Entry ``n`` as (timestamp, absolute offset)."""
        return self._ts[n], self.base_offset + self._rel[n]

    def last_entry(self) -> tuple[int, int] | None:
        """The newest (timestamp, offset), or None when the index is empty."""
        return self.entry(len(self._ts) - 1) if self._ts else None

    def lookup(self, timestamp: int) -> int:
        """The offset a forward walk for the first batch reaching ``timestamp`` starts at.

        The offset of the last entry whose timestamp is below ``timestamp``
        (batches before it are all older), or the base offset if there is none.
        """
        slot = bisect_left(self._ts, timestamp) - 1
        return self.base_offset if slot < 0 else self.base_offset + self._rel[slot]

    def entries(self) -> list[tuple[int, int]]:
        """(timestamp, relative offset) pairs, for tests and admin tools."""
        return list(zip(self._ts, self._rel, strict=False))

    # ------------------------------------------------------------------ checking

    def load(self) -> str | None:
        """Adopt the file's entries, or say why its bytes cannot be entries at all."""
        if not self.existed:
            return "the time index file is missing"
        data = self.read_file()
        if len(data) % TIME_INDEX_ENTRY_SIZE:
            return f"time index length {len(data)} is not a multiple of {TIME_INDEX_ENTRY_SIZE}"
        self._ts, self._rel = self.decode(data)
        return None

    def sanity_check(self) -> str | None:
        """A reason the loaded entries cannot be right, or None (Kafka's sanityCheck)."""
        if not (strictly_increasing(self._ts) and strictly_increasing(self._rel)):
            return "time index entries are out of order"
        return None

    # ------------------------------------------------------------------ writing

    def append(self, entries: Sequence[tuple[int, int]]) -> None:
        """Add (timestamp, absolute offset) entries, each newer than the last."""
        if not entries:
            return
        stamps = [ts for ts, _ in entries]
        rels = [offset - self.base_offset for _, offset in entries]
        self._write(self.encode(stamps, rels), len(self._ts))
        # Offsets first, as in OffsetIndex: a reader that sees a timestamp finds its offset.
        self._rel.extend(rels)
        self._ts.extend(stamps)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry naming an offset at or above ``offset`` (Kafka's truncateTo)."""
        keep = bisect_left(self._rel, offset - self.base_offset)
        if keep >= len(self._ts):
            return
        self._truncate_file(keep)
        self._ts = self._ts[:keep]
        self._rel = self._rel[:keep]

    def replace(self, timestamps: array[int], rels: array[int]) -> bool:
        """Adopt entries rebuilt from the log; True if the file had to change."""
        changed = self._rewrite(self.encode(timestamps, rels))
        self._rel = rels
        self._ts = timestamps
        return changed
