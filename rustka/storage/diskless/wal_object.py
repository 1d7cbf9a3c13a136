"""The layout of an uploaded object: the payloads of many partitions, back to back.

An object holds exactly the validated bytes of each payload, one after another,
with nothing else: the catalog records where each one starts and how long it is,
so the object needs no header or index of its own, and a fetch is one ranged GET.
"""

from __future__ import annotations

import time
import uuid

__all__ = ["UPLOADS_PREFIX", "ObjectBuilder", "new_object_key", "object_key_time_ms"]

UPLOADS_PREFIX = "wal/"
"""Every upload's key starts so; the collector looks nowhere else."""


def new_object_key(broker_id: int) -> str:
    """A key no other upload has: ``wal/<ms since the epoch, 13 digits>-<broker>-<random>``.

    The time comes first so a listing is in upload order and the collector can tell
    an object young enough to be between its upload and its commit (never an
    orphan yet) from the key alone.
    """
    return f"{UPLOADS_PREFIX}{int(time.time() * 1000):013d}-{broker_id}-{uuid.uuid4().hex}"


def object_key_time_ms(key: str) -> int | None:
    """When the object of ``key`` was made, from the key; None for a foreign key."""
    if not key.startswith(UPLOADS_PREFIX):
        return None
    stamp = key[len(UPLOADS_PREFIX) :].split("-", 1)[0]
    return int(stamp) if stamp.isdigit() else None


class ObjectBuilder:
    """Collects payloads for one object and says where each one lands."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._size = 0

    @property
    def size(self) -> int:
        return self._size

    def add(self, topic: str, partition: int, data: bytes) -> tuple[int, int]:
        """Append ``data`` (one payload of ``topic``/``partition``): its (offset, size)."""
        at = self._size
        self._parts.append(data)
        self._size += len(data)
        return at, len(data)

    def build(self) -> bytes:
        return b"".join(self._parts)
