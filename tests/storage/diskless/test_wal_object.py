"""The layout of an uploaded object and its key (pure: no store)."""

from __future__ import annotations

import time

from rustka.storage.diskless.wal_object import ObjectBuilder, new_object_key, object_key_time_ms


def test_object_keys_name_their_broker_and_time_and_are_unique() -> None:
    before = int(time.time() * 1000)
    first = new_object_key(3)
    after = int(time.time() * 1000)
    stamp_part, broker, random = first.split("-")
    assert stamp_part.startswith("wal/") and len(stamp_part) == len("wal/") + 13
    assert broker == "3" and len(random) == 32
    stamp = object_key_time_ms(first)
    assert stamp is not None and before <= stamp <= after
    assert len({new_object_key(3) for _ in range(1000)}) == 1000


def test_object_keys_sort_in_the_order_they_were_made() -> None:
    made = []
    for _ in range(5):
        key = new_object_key(12)
        made.append(key)
        # The next key must come from a later millisecond: wait for the clock to move.
        stamp = object_key_time_ms(key)
        while int(time.time() * 1000) <= (stamp or 0):
            time.sleep(0.0005)
    assert sorted(made) == made
    assert sorted([new_object_key(7), *made])[-1].split("-")[1] == "7"


def test_keys_not_made_here_have_no_time() -> None:
    assert object_key_time_ms("elsewhere/x") is None
    assert object_key_time_ms("wal/notatime-1-ab") is None
    assert object_key_time_ms("wal/0000000000042-1-ab") == 42


def test_the_builder_places_payloads_back_to_back() -> None:
    builder = ObjectBuilder()
    assert builder.size == 0 and builder.build() == b""
    assert builder.add("t", 0, b"abc") == (0, 3)
    assert builder.add("u", 2, b"defgh") == (3, 5)
    assert builder.add("t", 0, b"") == (8, 0)
    assert builder.add("t", 1, b"ij") == (8, 2)
    data = builder.build()
    assert builder.size == len(data) == 10 and data == b"abcdefghij"
    assert data[3 : 3 + 5] == b"defgh"
