"""Consumer assignments decoded for the admin views (``rustka groups``, the manhole)."""

from __future__ import annotations

from rustka.ops.assignments import consumer_assignment, format_assignment


def _assignment(topics: list[tuple[str, list[int]]], version: int = 1) -> bytes:
    """Kafka's ConsumerProtocolAssignment, written out byte by byte, plus user data."""
    out = version.to_bytes(2, "big") + len(topics).to_bytes(4, "big")
    for topic, partitions in topics:
        name = topic.encode()
        out += len(name).to_bytes(2, "big") + name + len(partitions).to_bytes(4, "big")
        out += b"".join(p.to_bytes(4, "big") for p in partitions)
    return out + (3).to_bytes(4, "big") + b"usr"


def test_consumer_assignments_decode_for_the_admin_views() -> None:
    data = _assignment([("orders", [3, 1]), ("audit", [0])])
    assert consumer_assignment(data) == {"orders": [1, 3], "audit": [0]}
    assert format_assignment(data) == "audit[0] orders[1,3]"
    assert consumer_assignment(_assignment([("t", [2]), ("t", [0])], version=0)) == {"t": [0, 2]}
    assert consumer_assignment(b"") == {} and format_assignment(b"") == ""
    # Not a consumer assignment (another protocol type, or cut short): shown by size only.
    for bad in (data[:9], b"\x00\x00\x7f\xff\xff\xff", b"\x00"):
        assert consumer_assignment(bad) is None
        assert format_assignment(bad) == f"<{len(bad)} bytes>"
