"""Kafka topic ids (KIP-516): a stable UUID for each topic name.

Kafka 4 clients name topics by id in the consumer group protocol (KIP-848), where
the coordinator hands out assignments by topic id and the client resolves them with
a Metadata request (v12) by id, and in the share-group APIs (KIP-932). rustka keeps
no id on disk; the id is derived from the topic's name, so every broker of a cluster
and every restart give the same one. What differs from Kafka (docs/kafka.md,
"Consumer groups (KIP-848)"): a topic deleted and created again under the same name
keeps its id.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable
from typing import Final

_NAMESPACE: Final = uuid.UUID("5a1f3a5e-6b1c-4c3e-9f1e-727573746b61")
ZERO_ID: Final = bytes(16)


@functools.lru_cache(maxsize=65_536)
def topic_id(name: str) -> bytes:
    """The topic's id as Kafka's wire carries it (16 bytes)."""
    return uuid.uuid5(_NAMESPACE, name).bytes


def names_by_id(names: Iterable[str]) -> dict[bytes, str]:
    """The id -> name table of the given topics."""
    return {topic_id(name): name for name in names}


class TopicNames:
    """Topic names by id, for the requests that name topics by id only.

    Kept between requests and rebuilt from the broker's topics only when an id is not
    found, so a heartbeat costs a dict lookup per owned topic, not a hash per topic
    of the broker.
    """

    def __init__(self) -> None:
        self._names: dict[bytes, str] = {}

    def name_of(self, tid: bytes, names: Iterable[str]) -> str | None:
        """The name of the topic with that id among ``names``, or None."""
        name = self._names.get(tid)
        if name is None:
            self._names = names_by_id(names)
            name = self._names.get(tid)
        return name


def topic_names(ids: Iterable[bytes], names: Iterable[str]) -> dict[bytes, str]:
    """Which of ``names`` each of ``ids`` belongs to (ids of no topic are left out)."""
    wanted = set(ids)
    return {tid: name for name in names if (tid := topic_id(name)) in wanted}
