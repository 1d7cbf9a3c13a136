"""What a ``consumer``-protocol member was assigned, for the admin views.

The broker relays group assignments as opaque bytes (the coordinator never looks
inside); only the admin views do: ``rustka groups describe`` (`rustka.ops.cli.groups`)
and the manhole's ``kafka_groups()`` (`rustka.ops.manhole`) show and count a
member's partitions from them.
"""

from __future__ import annotations

import struct


def consumer_assignment(data: bytes) -> dict[str, list[int]] | None:
    """The partitions a ``consumer``-protocol assignment hands a member.

    Kafka's ConsumerProtocolAssignment (every version): int16 version, an int32
    count of (int16-length topic, int32 count of int32 partitions), then user data.
    None for bytes that are not one (another protocol type, or truncated); an empty
    assignment (no bytes) is ``{}``.
    """
    if not data:
        return {}
    try:
        pos = 2
        (count,) = struct.unpack_from("!i", data, pos)
        pos += 4
        if not 0 <= count <= len(data):
            return None
        result: dict[str, list[int]] = {}
        for _ in range(count):
            (size,) = struct.unpack_from("!h", data, pos)
            pos += 2
            if size < 0 or pos + size > len(data):
                return None
            topic = bytes(data[pos : pos + size]).decode("utf-8")
            pos += size
            (n,) = struct.unpack_from("!i", data, pos)
            pos += 4
            if not 0 <= n <= (len(data) - pos) // 4:
                return None
            result.setdefault(topic, []).extend(struct.unpack_from(f"!{n}i", data, pos))
            pos += 4 * n
    except (struct.error, UnicodeDecodeError):
        return None
    return {topic: sorted(parts) for topic, parts in result.items()}


def format_assignment(data: bytes) -> str:
    """``orders[0,1] audit[3]``: a member's assignment as the admin tools print it."""
    decoded = consumer_assignment(data)
    if decoded is None:
        return f"<{len(data)} bytes>"
    return " ".join(
        f"{topic}[{','.join(map(str, parts))}]" for topic, parts in sorted(decoded.items())
    )
