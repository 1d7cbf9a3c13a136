"""Recently uploaded or read objects, kept in memory so consumers at the tail of a
diskless partition do not each read the store (docs/diskless.md, "Fetch").

Whole objects, least recently used out first, bounded by their total size; safe
to use from the pool's threads at once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

__all__ = ["ObjectCache"]


class ObjectCache:
    """An LRU of whole objects by key, within ``capacity_bytes`` (0: off)."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity = capacity_bytes
        self.hits = 0
        self.misses = 0
        self._size = 0
        self._objects: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return self._size

    def put(self, key: str, data: bytes) -> None:
        """Keep ``data`` as ``key``, dropping the least recently used to make room; an
        object larger than the whole cache is not kept, and nothing is when it is off."""
        if self.capacity <= 0 or len(data) > self.capacity:
            return
        with self._lock:
            old = self._objects.pop(key, None)
            if old is not None:
                self._size -= len(old)
            while self._objects and self._size + len(data) > self.capacity:
                _, dropped = self._objects.popitem(last=False)
                self._size -= len(dropped)
            self._objects[key] = data
            self._size += len(data)

    def get(self, key: str, start: int, length: int) -> bytes | None:
        """``length`` bytes of ``key`` from ``start``, or None if the object is not here."""
        with self._lock:
            data = self._objects.get(key)
            if data is None or start < 0 or start + length > len(data):
                self.misses += 1
                return None
            self._objects.move_to_end(key)
            self.hits += 1
        return data[start : start + length]
