"""Validation of topic and group names.

Names become directory names (topics) or keys in the offsets log (groups), so
every entry point - wire protocol, CLI, config, manhole - calls these before a
name touches anything else. Nothing outside the data dir may ever be reachable.
"""

from __future__ import annotations

import re

from rustka.errors import InvalidName

MAX_TOPIC_LENGTH = 249
MAX_GROUP_LENGTH = 255
_TOPIC_CHARS = re.compile(r"[A-Za-z0-9._-]+")
OFFSETS_TOPIC = "__offsets"
# Kafka's own offsets topic, which rustka can keep for tools that read it (Burrow):
# written by the broker only (docs/kafka.md, "The __consumer_offsets topic").
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS_TOPIC})
# Files the broker keeps at the top of the data dir, beside the topic folders.
RESERVED_FILE_NAMES = frozenset({".clean-shutdown", "manhole_host_key"})


def validate_topic(name: str, *, internal_ok: bool = False) -> str:
    """Return ``name`` if it is a legal topic name (docs/protocol.md, 3.6), else raise.

    ``internal_ok`` admits the broker's own ``__`` names (only the broker sets it).
    """
    if not 1 <= len(name) <= MAX_TOPIC_LENGTH:
        raise InvalidName(
            f"invalid topic name {name!r}: length must be 1-{MAX_TOPIC_LENGTH} characters"
        )
    if not _TOPIC_CHARS.fullmatch(name):
        raise InvalidName(
            f"invalid topic name {name!r}: only A-Z, a-z, 0-9, '.', '_' and '-' are allowed"
        )
    if name in (".", "..") or name in RESERVED_FILE_NAMES:
        raise InvalidName(f"invalid topic name {name!r}")
    if name.startswith("__") and not internal_ok:
        raise InvalidName(f"invalid topic name {name!r}: names starting with '__' are reserved")
    return name


def validate_stored_topic(name: str) -> str:
    """A topic name as the storage may hold it: a client's, or one of `INTERNAL_TOPICS`."""
    return validate_topic(name, internal_ok=name in INTERNAL_TOPICS)


def validate_group(name: str) -> str:
    """Return ``name`` if it is a legal consumer group name, else raise.

    Groups never become paths, but they are printed in logs and admin output, so
    control characters are refused along with empty or oversized names.
    """
    if not 1 <= len(name) <= MAX_GROUP_LENGTH:
        raise InvalidName(
            f"invalid group name {name!r}: length must be 1-{MAX_GROUP_LENGTH} characters"
        )
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise InvalidName(f"invalid group name {name!r}: control characters are not allowed")
    return name
