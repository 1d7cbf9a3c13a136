"""Kafka topic ids for rustka's topics: a UUID derived from the topic's name.

Kafka gives each topic a random UUID when it is created and newer APIs (Metadata v10+,
the share-group APIs of KIP-932) name topics by it. rustka stores no id with a topic,
so the id is derived from the name (UUIDv5): stable across restarts and brokers with no
state to keep. The cost (docs/kafka.md, "Share groups (KIP-932)"): a topic deleted and
created again under the same name has the same id.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Final

ZERO: Final = bytes(16)
_NAMESPACE: Final = uuid.UUID("6f6b1a2e-3c5d-4e8f-9a1b-2c3d4e5f6a7b")


def topic_id(name: str) -> bytes:
    """The 16-byte id of topic ``name``."""
    return uuid.uuid5(_NAMESPACE, name).bytes


def topic_names(ids: Iterable[bytes], names: Iterable[str]) -> dict[bytes, str]:
    """Which of ``names`` each of ``ids`` belongs to (ids of no topic are left out)."""
    wanted = set(ids)
    return {tid: name for name in names if (tid := topic_id(name)) in wanted}
