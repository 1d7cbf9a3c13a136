"""Idempotent producer state of one partition: epochs and the last batches' sequences.

Kafka's idempotent producer numbers its batches per partition: a producer id
and epoch (from InitProducerId) and a base sequence per batch, counting records
and wrapping after 2^31-1. The broker keeps, per producer id, the epoch and the
metadata of the last ``BATCHES_KEPT`` batches (first/last sequence, first/last
offset), which is enough to answer a retried batch with its original offsets,
reject a gap (OUT_OF_ORDER_SEQUENCE_NUMBER) and fence an old epoch
(docs/kafka.md, "Idempotent producers").

The state is derived from the log, because every batch header carries its
producer id, epoch and base sequence: the log loader replays headers at open,
starting from a snapshot written at clean close and at each roll
(``SNAPSHOT_FILE``), so after a crash only the tail is re-read and the state
reflects exactly the batches that survived recovery.

Transactions (docs/kafka.md, "Transactions"): an entry also holds the first
offset of the producer's ongoing transaction on this partition (Kafka's
currentTxnFirstOffset), set by its first transactional batch and cleared by
the commit or abort marker the coordinator writes. The earliest of those is
the partition's first unstable offset, so the last stable offset (LSO) is it,
or the end of the log when no transaction is open. Each abort marker adds an
`AbortedTxn` (producer id, first and last offset, the LSO once it ended), the
list Kafka keeps in its per-segment ``.txnindex`` files: here it is kept in
memory, in the snapshot, and rebuilt from the markers replay finds after it,
so a read_committed Fetch can be told which of the records it gets to drop.
Replay and append both turn a header into state through `apply_batch`.

Checks of a group commit are staged in a `PendingProducerState` so that two
batches of one producer in the same write see each other, and so that nothing
is remembered when the write fails.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from crc32c import crc32c

from rustka.errors import OutOfOrderSequence, ProducerFenced, StorageError
from rustka.record.batch import BatchHeader
from rustka.record.control import CONTROL_BIT, TRANSACTIONAL_BIT

__all__ = [
    "BATCHES_KEPT",
    "MAX_SEQUENCE",
    "SNAPSHOT_FILE",
    "AbortedTxn",
    "BatchMetadata",
    "PendingProducerState",
    "ProducerEntry",
    "ProducerStateManager",
    "apply_batch",
    "last_sequence",
    "next_sequence",
]

BATCHES_KEPT = 5
MAX_SEQUENCE = (1 << 31) - 1
SNAPSHOT_FILE = "producer-state"

# Snapshot: magic, version, offset, producer count; per producer id, epoch,
# batch count, then per batch four numbers; a CRC-32C of everything before it.
_MAGIC = b"RKPS"
# Version 2 adds each producer's open transaction and the aborted transactions;
# a version 1 snapshot (written before transactions) still loads.
_VERSION = 2
_VERSIONS = (1, 2)
_FILE_HEADER = struct.Struct(">4sBQI")
_PRODUCER = struct.Struct(">qhB")
_TXN_FIRST = struct.Struct(">q")
_COUNT = struct.Struct(">I")
_ABORTED = struct.Struct(">qqqq")
_BATCH = struct.Struct(">iiqq")
NO_TXN = -1
_CRC = struct.Struct(">I")
_OPEN_FLAGS = getattr(os, "O_CLOEXEC", 0)


def last_sequence(base_sequence: int, record_count: int) -> int:
    """The sequence of a batch's last record, wrapping after MAX_SEQUENCE as Kafka does."""
    return (base_sequence + record_count - 1) % (MAX_SEQUENCE + 1)


def next_sequence(sequence: int) -> int:
    """The sequence that must follow ``sequence``."""
    return 0 if sequence == MAX_SEQUENCE else sequence + 1


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One stored batch of a producer: its sequence range and where it landed."""

    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction of a partition: what read_committed consumers drop.

    Its records are the producer's batches from ``first_offset`` up to the abort
    marker at ``last_offset``; ``last_stable_offset`` is the partition's LSO
    right after the marker (Kafka's AbortedTxn record in the ``.txnindex``).
    """

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    """A producer's epoch, its newest batches, oldest first, and the first offset of its
    open transaction (NO_TXN when none); replaced, never mutated."""

    epoch: int
    batches: tuple[BatchMetadata, ...]
    txn_first_offset: int = NO_TXN

    def with_batch(
        self, epoch: int, batch: BatchMetadata, transactional: bool = False
    ) -> ProducerEntry:
        kept = self.batches if epoch == self.epoch else ()
        txn = self.txn_first_offset
        if transactional and txn == NO_TXN:
            txn = batch.first_offset
        return ProducerEntry(epoch, (*kept, batch)[-BATCHES_KEPT:], txn)

    def ended(self, epoch: int) -> ProducerEntry:
        """After a marker: no open transaction; a newer epoch forgets the old sequences."""
        batches = self.batches if epoch == self.epoch else ()
        return ProducerEntry(max(epoch, self.epoch), batches, NO_TXN)


def _check(
    entry: ProducerEntry | None,
    producer_id: int,
    epoch: int,
    base_sequence: int,
    record_count: int,
) -> BatchMetadata | None:
    """Kafka's sequence rules for one batch against the producer's entry.

    Returns the stored batch this one duplicates, None if it may be appended;
    raises ProducerFenced or OutOfOrderSequence otherwise.
    """
    if not 0 <= base_sequence <= MAX_SEQUENCE:
        raise OutOfOrderSequence(
            f"producer {producer_id}: base sequence {base_sequence} is outside 0..{MAX_SEQUENCE}"
        )
    if record_count < 1:
        raise OutOfOrderSequence(f"producer {producer_id}: a batch needs at least one record")
    if entry is None:
        # Unknown here (new, or its batches expired with old segments): as in
        # Kafka, any sequence starts the producer's history on this partition.
        return None
    if epoch < entry.epoch:
        raise ProducerFenced(
            f"producer {producer_id} wrote with epoch {epoch}, but epoch {entry.epoch} "
            f"has written to this partition since: this producer was fenced"
        )
    if epoch > entry.epoch:
        if base_sequence != 0:
            raise OutOfOrderSequence(
                f"producer {producer_id}: the first batch of new epoch {epoch} must start "
                f"at sequence 0, not {base_sequence}"
            )
        return None
    last = last_sequence(base_sequence, record_count)
    for batch in entry.batches:
        if batch.first_sequence == base_sequence and batch.last_sequence == last:
            return batch
    if not entry.batches:
        return None
    expected = next_sequence(entry.batches[-1].last_sequence)
    if base_sequence != expected:
        raise OutOfOrderSequence(
            f"producer {producer_id} epoch {epoch}: expected sequence {expected}, "
            f"got {base_sequence} (a batch is missing or was reordered)"
        )
    return None


class ProducerStateManager:
    """Per producer id, the entry the next batch is checked against."""

    def __init__(self) -> None:
        self._producers: dict[int, ProducerEntry] = {}
        # Producer id -> first offset of its open transaction, kept beside the entries
        # so the LSO costs a min over the open transactions, not over every producer.
        self._ongoing: dict[int, int] = {}
        # Ordered by last offset (markers are appended in offset order); readers on
        # other threads take len() once and never look past it.
        self._aborted: list[AbortedTxn] = []

    def __len__(self) -> int:
        return len(self._producers)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    def producers(self) -> dict[int, ProducerEntry]:
        """A copy of every producer's entry, for tests and admin tools."""
        return dict(self._producers)

    def ongoing(self) -> dict[int, int]:
        """Producer id -> first offset of each open transaction."""
        return dict(self._ongoing)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open transaction (None: none open)."""
        ongoing = self._ongoing
        return min(ongoing.values()) if ongoing else None

    @property
    def aborted(self) -> list[AbortedTxn]:
        """The aborted transactions, by last offset (the live list: take its length once)."""
        return self._aborted

    def aborted_between(self, start: int, upto: int) -> list[AbortedTxn]:
        """The aborted transactions with records in [start, upto): Kafka's
        collectAbortedTxns, what a read_committed Fetch of that range returns."""
        aborted = self._aborted
        count = len(aborted)
        # The marker ends the transaction: one ending before ``start`` has no record there.
        lo, hi = 0, count
        while lo < hi:
            mid = (lo + hi) // 2
            if aborted[mid].last_offset < start:
                lo = mid + 1
            else:
                hi = mid
        return [txn for txn in aborted[lo:count] if txn.first_offset < upto]

    def is_aborted(self, producer_id: int, offset: int) -> bool:
        """Whether the transactional batch of ``producer_id`` at ``offset`` was aborted."""
        return any(
            txn.producer_id == producer_id and txn.first_offset <= offset <= txn.last_offset
            for txn in self.aborted_between(offset, offset + 1)
        )

    def forget_aborted_below(self, offset: int) -> None:
        """Drop aborted transactions whose marker lies below ``offset`` (the log start)."""
        aborted = self._aborted
        if aborted and aborted[0].last_offset < offset:
            self._aborted = [txn for txn in aborted if txn.last_offset >= offset]

    def check(
        self, producer_id: int, epoch: int, base_sequence: int, record_count: int
    ) -> BatchMetadata | None:
        """None if the batch may be appended, else the stored batch it duplicates.

        Raises ProducerFenced for an old epoch and OutOfOrderSequence for a
        gap, a reorder or a new epoch not starting at 0.
        """
        return _check(
            self._producers.get(producer_id), producer_id, epoch, base_sequence, record_count
        )

    def update(
        self,
        producer_id: int,
        epoch: int,
        base_sequence: int,
        record_count: int,
        first_offset: int,
        last_offset: int,
        transactional: bool = False,
    ) -> None:
        """Remember a stored batch (also used to replay the log, without checks)."""
        stage = self.begin()
        stage.update(
            producer_id,
            epoch,
            base_sequence,
            record_count,
            first_offset,
            last_offset,
            transactional,
        )
        stage.commit()

    def end_transaction(self, producer_id: int, epoch: int, offset: int, commit: bool) -> None:
        """Replay a marker at ``offset`` (no checks: the log is the truth)."""
        stage = self.begin()
        stage.end_transaction(producer_id, epoch, offset, commit)
        stage.commit()

    def begin(self) -> PendingProducerState:
        """A staging area for one group commit."""
        return PendingProducerState(self)

    def _apply(self, changes: dict[int, ProducerEntry], aborted: list[AbortedTxn]) -> None:
        self._producers.update(changes)
        ongoing = self._ongoing
        for producer_id, entry in changes.items():
            if entry.txn_first_offset == NO_TXN:
                ongoing.pop(producer_id, None)
            else:
                ongoing[producer_id] = entry.txn_first_offset
        if aborted:
            self._aborted.extend(aborted)

    # ------------------------------------------------------------------ snapshots

    def encode(self, offset: int) -> bytes:
        """The snapshot bytes for this state as of ``offset`` (the next offset to write)."""
        parts = [_FILE_HEADER.pack(_MAGIC, _VERSION, offset, len(self._producers))]
        for producer_id, entry in sorted(self._producers.items()):
            parts.append(_PRODUCER.pack(producer_id, entry.epoch, len(entry.batches)))
            parts.append(_TXN_FIRST.pack(entry.txn_first_offset))
            parts.extend(
                _BATCH.pack(b.first_sequence, b.last_sequence, b.first_offset, b.last_offset)
                for b in entry.batches
            )
        aborted = self._aborted
        parts.append(_COUNT.pack(len(aborted)))
        parts.extend(
            _ABORTED.pack(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
            for t in aborted
        )
        body = b"".join(parts)
        return body + _CRC.pack(crc32c(body))

    @classmethod
    def decode(cls, data: bytes) -> tuple[int, ProducerStateManager] | None:
        """(offset, state) from snapshot bytes, or None if they are damaged or foreign."""
        if len(data) < _FILE_HEADER.size + _CRC.size:
            return None
        body, (checksum,) = data[: -_CRC.size], _CRC.unpack(data[-_CRC.size :])
        if crc32c(body) != checksum:
            return None
        magic, version, offset, count = _FILE_HEADER.unpack_from(body, 0)
        if magic != _MAGIC or version not in _VERSIONS:
            return None
        state = cls()
        pos = _FILE_HEADER.size
        try:
            for _ in range(count):
                producer_id, epoch, batches = _PRODUCER.unpack_from(body, pos)
                pos += _PRODUCER.size
                txn = NO_TXN
                if version >= 2:
                    (txn,) = _TXN_FIRST.unpack_from(body, pos)
                    pos += _TXN_FIRST.size
                kept = tuple(BatchMetadata(*b) for b in _iter_batches(body, pos, batches))
                pos += batches * _BATCH.size
                state._producers[producer_id] = ProducerEntry(epoch, kept, txn)
                if txn != NO_TXN:
                    state._ongoing[producer_id] = txn
            if version >= 2:
                (aborted,) = _COUNT.unpack_from(body, pos)
                pos += _COUNT.size
                for _ in range(aborted):
                    state._aborted.append(AbortedTxn(*_ABORTED.unpack_from(body, pos)))
                    pos += _ABORTED.size
        except struct.error:
            return None
        if pos != len(body):
            return None
        return offset, state

    def write_snapshot(self, directory: Path, offset: int) -> None:
        """Atomically replace the snapshot (tmp, fsync, rename, fsync dir)."""
        path = directory / SNAPSHOT_FILE
        tmp = path.with_name(path.name + ".tmp")
        data = self.encode(offset)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _OPEN_FLAGS, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | _OPEN_FLAGS)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise StorageError(f"cannot write {path}: {e.strerror}") from e

    @classmethod
    def read_snapshot(cls, directory: Path) -> tuple[int, ProducerStateManager] | None:
        """The stored snapshot, or None when it is absent or damaged (then replay it all)."""
        try:
            data = (directory / SNAPSHOT_FILE).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StorageError(f"cannot read {directory / SNAPSHOT_FILE}: {e.strerror}") from e
        return cls.decode(data)


def _iter_batches(body: bytes, pos: int, count: int) -> Iterator[tuple[int, int, int, int]]:
    for i in range(count):
        yield _BATCH.unpack_from(body, pos + i * _BATCH.size)


def apply_batch(
    state: ProducerStateManager | PendingProducerState,
    header: BatchHeader,
    first_offset: int,
    commit: bool = False,
) -> None:
    """Record one stored batch of a producer: its sequences and offsets, or its marker.

    The one place a batch header's producer fields (id, epoch, base sequence,
    record count, transactional and control bits) become producer state, so
    replaying the log at open and appending to it cannot disagree about what
    a batch means. ``first_offset`` is where the batch is stored (at append,
    the offset it is about to get); ``commit`` says what a control batch's
    marker is (the callers read it, from the log or from the payload). The
    append path checks the batch first (`PendingProducerState.check`,
    ``check_marker``); replay does not: the log is the truth.
    """
    if header.attributes & CONTROL_BIT:
        state.end_transaction(header.producer_id, header.producer_epoch, first_offset, commit)
        return
    count = header.last_offset_delta + 1
    state.update(
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        count,
        first_offset,
        first_offset + count - 1,
        bool(header.attributes & TRANSACTIONAL_BIT),
    )


class PendingProducerState:
    """Checks and updates of one group commit, applied only if its write succeeds."""

    def __init__(self, under: ProducerStateManager | PendingProducerState) -> None:
        self._under = under
        self._changes: dict[int, ProducerEntry] = {}
        self._aborted: list[AbortedTxn] = []

    def entry(self, producer_id: int) -> ProducerEntry | None:
        entry = self._changes.get(producer_id)
        return entry if entry is not None else self._under.entry(producer_id)

    def begin(self) -> PendingProducerState:
        """A nested stage (one payload inside a group commit)."""
        return PendingProducerState(self)

    def _apply(self, changes: dict[int, ProducerEntry], aborted: list[AbortedTxn]) -> None:
        self._changes.update(changes)
        self._aborted.extend(aborted)

    def _ongoing_firsts(self) -> dict[int, int]:
        under = self._under
        firsts = (
            under._ongoing_firsts() if isinstance(under, PendingProducerState) else under.ongoing()
        )
        for producer_id, entry in self._changes.items():
            if entry.txn_first_offset == NO_TXN:
                firsts.pop(producer_id, None)
            else:
                firsts[producer_id] = entry.txn_first_offset
        return firsts

    def check_marker(self, producer_id: int, epoch: int) -> None:
        """Kafka's appendEndTxnMarker check: a marker of an older epoch is fenced."""
        entry = self.entry(producer_id)
        if entry is not None and epoch < entry.epoch:
            raise ProducerFenced(
                f"transaction marker for producer {producer_id} has epoch {epoch}, but epoch "
                f"{entry.epoch} has written to this partition since"
            )

    def end_transaction(self, producer_id: int, epoch: int, offset: int, commit: bool) -> None:
        """Stage a commit or abort marker stored at ``offset``."""
        entry = self.entry(producer_id) or ProducerEntry(epoch, ())
        first = entry.txn_first_offset
        self._changes[producer_id] = entry.ended(epoch)
        if not commit and first != NO_TXN:
            others = self._ongoing_firsts()
            lso = min(others.values()) if others else offset + 1
            self._aborted.append(AbortedTxn(producer_id, first, offset, lso))

    def check(
        self, producer_id: int, epoch: int, base_sequence: int, record_count: int
    ) -> BatchMetadata | None:
        """As `ProducerStateManager.check`, seeing the batches staged before this one."""
        return _check(self.entry(producer_id), producer_id, epoch, base_sequence, record_count)

    def update(
        self,
        producer_id: int,
        epoch: int,
        base_sequence: int,
        record_count: int,
        first_offset: int,
        last_offset: int,
        transactional: bool = False,
    ) -> None:
        batch = BatchMetadata(
            base_sequence, last_sequence(base_sequence, record_count), first_offset, last_offset
        )
        entry = self.entry(producer_id)
        if entry is None:
            entry = ProducerEntry(epoch, ())
        self._changes[producer_id] = entry.with_batch(epoch, batch, transactional)

    def commit(self) -> None:
        """Make the staged updates visible to the stage (or manager) below."""
        self._under._apply(self._changes, self._aborted)
        self._changes = {}
        self._aborted = []
