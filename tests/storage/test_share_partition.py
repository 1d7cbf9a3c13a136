"""The pure share-partition model (KIP-932): acquire, acknowledge, locks, counts, bounds."""

from __future__ import annotations

import pytest

from rustka.storage.share_partition import (
    ACCEPT,
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    GAP,
    REJECT,
    RELEASE,
    AcquiredRange,
    InvalidRecordState,
    SharePartition,
)


def part(**settings: int) -> SharePartition:
    p = SharePartition(**settings)
    p.initialize(0)
    return p


def test_two_members_acquire_different_records_and_accepting_moves_the_start() -> None:
    p = part()
    a, _ = p.acquire("a", range(10), 4, now_ms=0)
    b, _ = p.acquire("b", range(10), 100, now_ms=0)
    assert a == [AcquiredRange(0, 3, 1)]
    assert b == [AcquiredRange(4, 9, 1)]
    delta = p.acknowledge("b", 4, 9, [ACCEPT])
    assert delta.start_offset is None and p.start_offset == 0
    delta = p.acknowledge("a", 0, 3, [ACCEPT])
    assert delta.start_offset == 10 == p.start_offset == p.end_offset
    assert p.records == {}
    assert p.counts.acquired == 10 and p.counts.accepted == 10


def test_release_redelivers_with_a_higher_count_and_reject_archives() -> None:
    p = part()
    p.acquire("a", range(3), 10, now_ms=0)
    p.acknowledge("a", 0, 2, [RELEASE, REJECT, RELEASE])
    assert p.state_of(1) == (ARCHIVED, 1)
    again, delta = p.acquire("b", range(3), 10, now_ms=0)
    assert again == [AcquiredRange(0, 0, 2), AcquiredRange(2, 2, 2)]
    assert (0, AVAILABLE, 2) in delta.records
    assert p.counts.released == 2 and p.counts.rejected == 1


def test_only_the_holder_may_acknowledge_and_a_bad_batch_changes_nothing() -> None:
    p = part()
    p.acquire("a", range(4), 10, now_ms=0)
    with pytest.raises(InvalidRecordState):
        p.acknowledge("b", 0, 1, [ACCEPT])
    with pytest.raises(InvalidRecordState):
        p.acknowledge("a", 3, 5, [ACCEPT])
    with pytest.raises(InvalidRecordState):
        p.acknowledge("a", 0, 3, [ACCEPT, ACCEPT])
    assert all(p.state_of(o)[0] == ACQUIRED for o in range(4))


def test_locks_expire_and_the_delivery_count_limit_archives() -> None:
    p = part(lock_duration_ms=100, delivery_count_limit=3)
    for round_ in range(1, 4):
        got, _ = p.acquire("a", [0], 10, now_ms=round_ * 1000)
        assert got == [AcquiredRange(0, 0, round_)]
        assert p.next_deadline() == round_ * 1000 + 100
        assert not p.expire_locks(round_ * 1000 + 99)
        p.expire_locks(round_ * 1000 + 100)
    assert p.state_of(0) == (ARCHIVED, 3) or p.start_offset == 1
    assert p.start_offset == 1
    assert p.counts.lock_expiries == 3 and p.counts.archived == 1
    assert p.acquire("a", [0], 10, now_ms=9999)[0] == []


def test_release_at_the_limit_archives_too() -> None:
    p = part(delivery_count_limit=2)
    p.acquire("a", [0, 1], 10, now_ms=0)
    p.acknowledge("a", 0, 1, [RELEASE])
    p.acquire("a", [0, 1], 10, now_ms=0)
    p.acknowledge("a", 0, 1, [RELEASE])
    assert p.start_offset == 2 and p.counts.archived == 2


def test_the_in_flight_window_is_bounded() -> None:
    p = part(max_in_flight=5)
    got, _ = p.acquire("a", range(100), 100, now_ms=0)
    assert got == [AcquiredRange(0, 4, 1)]
    assert not p.can_acquire()
    p.acknowledge("a", 0, 1, [ACCEPT])
    got, _ = p.acquire("a", range(100), 100, now_ms=0)
    assert got == [AcquiredRange(5, 6, 1)]


def test_gaps_are_archived_and_do_not_hold_the_start() -> None:
    p = part()
    got, delta = p.acquire("a", [0, 3], 10, now_ms=0, gap_offsets=[1, 2])
    assert got == [AcquiredRange(0, 0, 1), AcquiredRange(3, 3, 1)]
    assert (1, ARCHIVED, 0) in delta.records
    p.acknowledge("a", 0, 3, [ACCEPT, GAP, GAP, ACCEPT])
    assert p.start_offset == 4


def test_release_member_and_move_start() -> None:
    p = part()
    p.acquire("a", range(5), 10, now_ms=0)
    delta = p.release_member("a")
    assert {o for o, s, _ in delta.records if s == AVAILABLE} == set(range(5))
    assert p.next_fetch_offset() == 0
    p.move_start(3)
    assert p.start_offset == 3 and p.next_fetch_offset() == 3


def test_restore_keeps_counts_and_makes_acquired_records_available() -> None:
    p = part()
    p.acquire("a", range(6), 10, now_ms=0)
    p.acknowledge("a", 0, 1, [ACCEPT])
    p.acknowledge("a", 3, 3, [REJECT])
    start, records = p.snapshot()
    q = SharePartition.restore(start, records)
    assert q.start_offset == 2 and q.end_offset == 6
    assert q.state_of(2) == (AVAILABLE, 1) and q.state_of(3) == (ARCHIVED, 1)
    got, _ = q.acquire("b", range(8), 10, now_ms=0)
    assert got == [AcquiredRange(2, 2, 2), AcquiredRange(4, 5, 2), AcquiredRange(6, 7, 1)]
    assert q.state_of(0) == (ARCHIVED, 0)  # below the start: done
    assert ACKNOWLEDGED not in {r.state for r in q.records.values()}
