"""One share-partition of a share group (KIP-932): which records are in flight, and how.

A share group reads a partition like a queue: records are *acquired* by one member for a
time (the acquisition lock), then acknowledged (accepted, released or rejected) or, if
the lock runs out, made available again. This module is the pure model of that, with
time passed in as ``now_ms``; the reactor side (rustka.broker.share_groups) owns the
clock, reads the records and writes every change this model reports to the durable
share-state log (rustka.storage.share_state) before answering.

The in-flight window is ``[start_offset, end_offset)``: below it every record is done
(acknowledged or archived), from ``end_offset`` on nothing was handed out yet. Inside
it each offset has a state (AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED, Kafka's codes)
and a delivery count. The start moves forward past done records, and the window never
spans more than ``max_in_flight`` offsets (Kafka's
``group.share.partition.max.record.locks``), so a member that never acknowledges
cannot make the broker track an unbounded number of records.

Every mutating call returns a `Delta`: the offsets whose durable state changed and the
new start offset. Durable state is what must survive a crash: an acquisition
increments a delivery count (so a record acquired at a crash comes back AVAILABLE with
its count kept), an acknowledgement or archive is final.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

# Record states, with Kafka's codes (RecordState in SharePartition).
AVAILABLE: Final = 0
ACQUIRED: Final = 1
ACKNOWLEDGED: Final = 2
ARCHIVED: Final = 4

# Acknowledge types, as on the wire (ShareFetch/ShareAcknowledge AcknowledgeTypes).
GAP: Final = 0
ACCEPT: Final = 1
RELEASE: Final = 2
REJECT: Final = 3

# Kafka's defaults.
DEFAULT_LOCK_DURATION_MS: Final = 30_000  # group.share.record.lock.duration.ms
DEFAULT_DELIVERY_COUNT_LIMIT: Final = 5  # group.share.delivery.count.limit
DEFAULT_MAX_IN_FLIGHT: Final = 2000  # group.share.partition.max.record.locks

_DONE: Final = (ACKNOWLEDGED, ARCHIVED)


class InvalidRecordState(Exception):
    """An acknowledgement of records that are not acquired by the acknowledging member
    (Kafka's INVALID_RECORD_STATE); nothing of that batch was applied."""


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """Offsets ``first..last`` (inclusive) acquired together, each delivered
    ``delivery_count`` times."""

    first: int
    last: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class Delta:
    """The durable changes of one operation: new start offset (None: unchanged) and
    ``(offset, state, delivery_count)`` of each offset whose durable state changed.

    The durable state of an ACQUIRED record is AVAILABLE with its count: after a crash
    it is delivered again, counted."""

    start_offset: int | None = None
    records: tuple[tuple[int, int, int], ...] = ()

    def __bool__(self) -> bool:
        return self.start_offset is not None or bool(self.records)


@dataclass(slots=True)
class _InFlight:
    state: int
    delivery_count: int
    member: str = ""
    deadline_ms: int = 0


@dataclass(slots=True)
class Counts:
    """What happened to records, for metrics (plain counters)."""

    acquired: int = 0
    accepted: int = 0
    released: int = 0
    rejected: int = 0
    archived: int = 0
    lock_expiries: int = 0


def durable_state(state: int) -> int:
    return AVAILABLE if state == ACQUIRED else state


@dataclass(slots=True)
class SharePartition:
    """The in-flight records of one (group, topic, partition); see the module docstring.

    ``start_offset`` is None until the partition is first read by the group: where it
    starts then is the group's ``share.auto.offset.reset`` (the caller's choice, passed to
    `initialize`)."""

    lock_duration_ms: int = DEFAULT_LOCK_DURATION_MS
    delivery_count_limit: int = DEFAULT_DELIVERY_COUNT_LIMIT
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    start_offset: int | None = None
    end_offset: int = 0
    records: dict[int, _InFlight] = field(default_factory=dict)
    counts: Counts = field(default_factory=Counts)

    # --- setup and restore ---------------------------------------------------------------

    def initialize(self, offset: int) -> Delta:
        """Start the window at ``offset`` (first read, or an admin reset of the start)."""
        self.start_offset = offset
        self.end_offset = offset
        self.records.clear()
        return Delta(start_offset=offset)

    @classmethod
    def restore(
        cls,
        start_offset: int | None,
        records: Mapping[int, tuple[int, int]],
        **settings: int,
    ) -> SharePartition:
        """Rebuild from durable state: start offset and ``offset -> (state, count)``.

        Records acquired at the crash were stored AVAILABLE with their count, so they
        are delivered again, counted. Offsets of the window with no stored state were
        never handed out: AVAILABLE with count 0."""
        part = cls(**settings)
        part.start_offset = start_offset
        if start_offset is None:
            return part
        live = {o: v for o, v in records.items() if o >= start_offset}
        part.end_offset = max(live, default=start_offset - 1) + 1
        for offset in range(start_offset, part.end_offset):
            state, count = live.get(offset, (AVAILABLE, 0))
            part.records[offset] = _InFlight(durable_state(state), count)
        part._advance_start()
        return part

    def snapshot(self) -> tuple[int | None, dict[int, tuple[int, int]]]:
        """Durable state now (what `restore` takes): start offset and each in-flight offset."""
        return self.start_offset, {
            o: (durable_state(r.state), r.delivery_count) for o, r in self.records.items()
        }

    # --- queries -------------------------------------------------------------------------

    @property
    def initialized(self) -> bool:
        return self.start_offset is not None

    def next_fetch_offset(self) -> int:
        """Where a read for this partition should start: the first AVAILABLE offset of the
        window, else its end."""
        for offset in sorted(self.records):
            if self.records[offset].state == AVAILABLE:
                return offset
        return self.end_offset

    def can_acquire(self) -> bool:
        """Whether an acquisition could hand out anything without reading past the bound."""
        assert self.start_offset is not None
        if any(r.state == AVAILABLE for r in self.records.values()):
            return True
        return self.end_offset - self.start_offset < self.max_in_flight

    def in_flight(self) -> int:
        """Records acquired right now."""
        return sum(1 for r in self.records.values() if r.state == ACQUIRED)

    def state_of(self, offset: int) -> tuple[int, int]:
        """``(state, delivery_count)`` of ``offset``; done below the window, fresh above."""
        assert self.start_offset is not None
        if offset < self.start_offset:
            return ARCHIVED, 0
        record = self.records.get(offset)
        if record is None:
            return AVAILABLE, 0
        return record.state, record.delivery_count

    def next_deadline(self) -> int | None:
        """The earliest lock deadline, or None with nothing acquired."""
        deadlines = [r.deadline_ms for r in self.records.values() if r.state == ACQUIRED]
        return min(deadlines, default=None)

    # --- operations ----------------------------------------------------------------------

    def acquire(
        self,
        member: str,
        record_offsets: Iterable[int],
        max_records: int,
        now_ms: int,
        gap_offsets: Iterable[int] = (),
    ) -> tuple[list[AcquiredRange], Delta]:
        """Acquire up to ``max_records`` of ``record_offsets`` (offsets a read found, in
        order) for ``member`` until ``now_ms + lock_duration_ms``.

        AVAILABLE records of the window are acquired again with their count incremented;
        offsets past the window extend it (up to ``max_in_flight``), and ``gap_offsets``
        (offsets a read found holding no record, e.g. transaction markers) that the window
        grows over are archived at once, so they never hold the start back."""
        assert self.start_offset is not None, "initialize the partition first"
        gaps = set(gap_offsets)
        changed: list[tuple[int, int, int]] = []
        taken: list[tuple[int, int]] = []
        deadline = now_ms + self.lock_duration_ms
        for offset in record_offsets:
            if len(taken) >= max_records:
                break
            if offset < self.start_offset:
                continue
            if offset < self.end_offset:
                record = self.records.get(offset)
                if record is None or record.state != AVAILABLE:
                    continue
            else:
                if offset - self.start_offset >= self.max_in_flight:
                    break
                for skipped in range(self.end_offset, offset):
                    state = ARCHIVED if skipped in gaps else AVAILABLE
                    self.records[skipped] = _InFlight(state, 0)
                    if state == ARCHIVED:
                        changed.append((skipped, ARCHIVED, 0))
                record = _InFlight(AVAILABLE, 0)
                self.records[offset] = record
                self.end_offset = offset + 1
            record.state = ACQUIRED
            record.delivery_count += 1
            record.member = member
            record.deadline_ms = deadline
            changed.append((offset, AVAILABLE, record.delivery_count))
            taken.append((offset, record.delivery_count))
        self.counts.acquired += len(taken)
        return _ranges(taken), self._delta(changed)

    def acknowledge(self, member: str, first: int, last: int, types: Sequence[int]) -> Delta:
        """Apply one acknowledgement batch of ``member``: ``types`` holds one type for the
        whole range or one per offset. Every offset must be ACQUIRED by ``member`` (GAP
        offsets may also be untracked or archived already); otherwise nothing is applied
        and `InvalidRecordState` is raised."""
        assert self.start_offset is not None
        if last < first or len(types) not in (1, last - first + 1):
            raise InvalidRecordState(f"bad acknowledgement batch {first}..{last}")
        kinds = [types[0]] * (last - first + 1) if len(types) == 1 else list(types)
        for offset, kind in zip(range(first, last + 1), kinds, strict=True):
            if kind not in (GAP, ACCEPT, RELEASE, REJECT):
                raise InvalidRecordState(f"unknown acknowledge type {kind}")
            record = self.records.get(offset)
            owned = record is not None and record.state == ACQUIRED and record.member == member
            settled = record is None or record.state == ARCHIVED
            if not owned and not (kind == GAP and settled):
                raise InvalidRecordState(f"offset {offset} is not acquired by {member}")
        changed: list[tuple[int, int, int]] = []
        for offset, kind in zip(range(first, last + 1), kinds, strict=True):
            record = self.records.get(offset)
            if record is None or record.state != ACQUIRED:
                continue
            if kind == ACCEPT:
                record.state = ACKNOWLEDGED
                self.counts.accepted += 1
            elif kind == RELEASE:
                self._release(record)
                self.counts.released += 1
            else:
                record.state = ARCHIVED
                if kind == REJECT:
                    self.counts.rejected += 1
                self.counts.archived += 1
            record.member = ""
            changed.append((offset, record.state, record.delivery_count))
        return self._delta(changed)

    def release_member(self, member: str) -> Delta:
        """Release every record ``member`` holds (it left the group or closed its share
        session); a record at the delivery count limit is archived instead."""
        changed = []
        for offset, record in self.records.items():
            if record.state == ACQUIRED and record.member == member:
                self._release(record)
                record.member = ""
                changed.append((offset, record.state, record.delivery_count))
        return self._delta(changed)

    def expire_locks(self, now_ms: int) -> Delta:
        """Records whose lock ran out by ``now_ms`` become AVAILABLE again (or ARCHIVED at
        the delivery count limit)."""
        changed = []
        for offset, record in self.records.items():
            if record.state == ACQUIRED and record.deadline_ms <= now_ms:
                self._release(record)
                record.member = ""
                self.counts.lock_expiries += 1
                changed.append((offset, record.state, record.delivery_count))
        return self._delta(changed)

    def move_start(self, offset: int) -> Delta:
        """Records below ``offset`` are gone (retention, DeleteRecords): drop them."""
        assert self.start_offset is not None
        if offset <= self.start_offset:
            return Delta()
        for old in [o for o in self.records if o < offset]:
            del self.records[old]
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)
        return Delta(start_offset=offset)

    # --- internals -----------------------------------------------------------------------

    def _release(self, record: _InFlight) -> None:
        if record.delivery_count >= self.delivery_count_limit:
            record.state = ARCHIVED
            self.counts.archived += 1
        else:
            record.state = AVAILABLE

    def _advance_start(self) -> bool:
        assert self.start_offset is not None
        moved = False
        while self.start_offset < self.end_offset:
            record = self.records.get(self.start_offset)
            if record is not None and record.state not in _DONE:
                break
            self.records.pop(self.start_offset, None)
            self.start_offset += 1
            moved = True
        return moved

    def _delta(self, changed: list[tuple[int, int, int]]) -> Delta:
        moved = self._advance_start()
        return Delta(self.start_offset if moved else None, tuple(changed))


def _ranges(taken: list[tuple[int, int]]) -> list[AcquiredRange]:
    """Consecutive offsets of one delivery count as one range."""
    ranges: list[AcquiredRange] = []
    for offset, count in taken:
        if ranges and ranges[-1].last + 1 == offset and ranges[-1].delivery_count == count:
            ranges[-1] = AcquiredRange(ranges[-1].first, offset, count)
        else:
            ranges.append(AcquiredRange(offset, offset, count))
    return ranges
