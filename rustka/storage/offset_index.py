"""A segment's sparse offset index (``.index``), in the layout of Kafka's offset index.

Each entry is 8 bytes, big-endian ``u32 offset - base_offset, u32 position``,
and maps a batch's base offset to the byte position where the batch starts in
the segment's ``.log``. The segment adds an entry only once an index interval
of bytes has been written since the previous one (docs/architecture.md,
"segment.py"), so a lookup is a binary search over a small in-memory array
followed by a forward walk over at most about one interval of batch headers.

The index is a cache of the log: the segment decides when to trust it
(``sanity_check``) and rebuilds it from the log (``replace``) when not.
This module owns the file, its bytes and the in-memory arrays; it knows
nothing about batches, so it stays testable on its own.

Concurrency: one writer appends or truncates; readers on other threads call
``lookup``. Appends extend the position array before the offset array, so a
reader that sees an offset always finds its position.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from pathlib import Path

from rustka.storage.index_file import IndexFile, from_big_endian, strictly_increasing, to_big_endian

__all__ = ["INDEX_ENTRY", "INDEX_ENTRY_SIZE", "OffsetIndex"]

INDEX_ENTRY_SIZE = 8
#: One entry on disk: offset relative to the segment's base, byte position (Kafka's layout).
INDEX_ENTRY = struct.Struct(">II")
# Entries read back from the log by ``sanity_check``: all of them would cost one
# pread each (262k for a 1 GiB segment), so opening checks a spread and reads
# check the entry they use.
_SANITY_SAMPLES = 16


class OffsetIndex(IndexFile):
    """Relative offset → position pairs, both ascending, with the first batch implicit."""

    entry_size = INDEX_ENTRY_SIZE

    def __init__(self, path: Path, base_offset: int, *, create: bool = False) -> None:
        super().__init__(path, base_offset, create=create)
        self._rel: array[int] = array("I")
        self._pos: array[int] = array("I")

    # ------------------------------------------------------------------ bytes and arrays

    @staticmethod
    def encode(rels: Sequence[int], positions: Sequence[int]) -> bytes:
        pairs = array("I", bytes(INDEX_ENTRY_SIZE * len(rels)))
        pairs[0::2] = array("I", rels)
        pairs[1::2] = array("I", positions)
        return to_big_endian(pairs)

    @staticmethod
    def decode(data: bytes) -> tuple[array[int], array[int]]:
        """Relative offsets and positions; ``data`` must be whole entries."""
        pairs = from_big_endian("I", data)
        return pairs[0::2], pairs[1::2]

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return len(self._rel)

    def entry(self, n: int) -> tuple[int, int]:
        """Entry ``n`` as (absolute offset, position)."""
        return self.base_offset + self._rel[n], self._pos[n]

    def slot_for(self, offset: int) -> int:
        """The index of the last entry at or below ``offset``, or -1 if none."""
        return bisect_right(self._rel, offset - self.base_offset) - 1

    def lookup(self, offset: int) -> tuple[int, int]:
        """The (offset, position) to start a forward walk from to find ``offset``.

        The largest indexed offset at or below ``offset``; the segment's first
        batch (base offset, position 0) when no entry is that low.
        """
        slot = self.slot_for(offset)
        return (self.base_offset, 0) if slot < 0 else self.entry(slot)

    def last_entry(self) -> tuple[int, int]:
        """Where a walk to the end of the log can start: the last entry, or the first batch."""
        return (self.base_offset, 0) if not self._rel else self.entry(len(self._rel) - 1)

    def entries(self) -> list[tuple[int, int]]:
        """(relative offset, position) pairs, for tests and admin tools."""
        return list(zip(self._rel, self._pos, strict=False))

    # ------------------------------------------------------------------ checking

    def load(self) -> str | None:
        """Adopt the file's entries, or say why its bytes cannot be entries at all."""
        if not self.existed:
            return "the index file is missing"
        data = self.read_file()
        if len(data) % INDEX_ENTRY_SIZE:
            return f"index length {len(data)} is not a multiple of {INDEX_ENTRY_SIZE}"
        self._rel, self._pos = self.decode(data)
        return None

    def sanity_check(self, log_size: int, base_at: Callable[[int], int | None]) -> str | None:
        """Cheap checks that the loaded entries describe the log; a reason, or None.

        ``base_at(position)`` returns the base offset of the batch stored at
        ``position`` (None if the log is too short there). Checks order, bounds
        and a spread of sampled entries against the log itself.
        """
        rels = self._rel
        positions = self._pos
        count = len(rels)
        if not count:
            return None
        if rels[0] == 0 or positions[0] == 0:
            return "the first index entry points at the segment's first batch"
        if not (strictly_increasing(rels) and strictly_increasing(positions)):
            return "index entries are out of order"
        if positions[-1] >= log_size:
            return f"an index entry points past the end of the log ({log_size} bytes)"
        step = max(1, (count - 1) // (_SANITY_SAMPLES - 1))
        for i in sorted(set(range(0, count, step)) | {count - 1}):
            base = base_at(positions[i])
            if base is None:
                return f"index entry {i} points past the end of the log"
            if base != self.base_offset + rels[i]:
                return (
                    f"index entry {i} names offset {self.base_offset + rels[i]} but the "
                    f"batch at position {positions[i]} starts at {base}"
                )
        return None

    # ------------------------------------------------------------------ writing

    def append(self, entries: Sequence[tuple[int, int]]) -> None:
        """Add (absolute offset, position) entries past the last one, file first."""
        if not entries:
            return
        base = self.base_offset
        rels = [offset - base for offset, _ in entries]
        positions = [position for _, position in entries]
        self._write(self.encode(rels, positions), len(self._rel))
        # Position first: a reader that sees a relative offset finds its position.
        self._pos.extend(positions)
        self._rel.extend(rels)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry at or above ``offset`` (Kafka's truncateTo)."""
        self._keep(bisect_left(self._rel, offset - self.base_offset))

    def truncate_to_position(self, position: int) -> None:
        """Drop every entry pointing at or past ``position`` in the log."""
        self._keep(bisect_left(self._pos, position))

    def truncate_entries(self, count: int) -> None:
        """Keep only the first ``count`` entries (undoing a failed append)."""
        self._keep(count)

    def _keep(self, count: int) -> None:
        if count >= len(self._rel):
            return
        self._truncate_file(count)
        self._rel = self._rel[:count]
        self._pos = self._pos[:count]

    def replace(self, rels: array[int], positions: array[int]) -> bool:
        """Adopt entries rebuilt from the log; True if the file had to change."""
        changed = self._rewrite(self.encode(rels, positions))
        self._pos = positions
        self._rel = rels
        return changed
