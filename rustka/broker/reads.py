"""Reads: every fetch, from either front-end, and the long-poll's parking.

- `Reads.read` reads one partition (native FetchBatch), `Reads.read_many` many in
  one pool job (Kafka Fetch: one hop to the pool and back per request, not one per
  partition), `Reads.read_record` one record (the native seed Fetch).
- `Reads.wait_for_data` parks a long-poll on the broker's `Waiters` until one of
  its partitions grows or the time runs out (`rustka.broker.fetch_policy` decides
  whether a fetch waits at all).
- `Reads.list_offset` answers Kafka's ListOffsets for one partition.

Lookups and bounds are checked on the reactor thread, so a read with nothing to
return or an error never reaches the pool; the disk work runs in the
``_..._blocking`` functions below, on the pool, counted by the core so its
drain waits for them.

`Reads` states what it needs of the core in `ReadsCore`, so it never imports
the core (`rustka.broker.core.Broker` builds it and delegates to it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from twisted.internet import defer
from twisted.python.failure import Failure

from rustka.broker.deferreds import reports_errors
from rustka.broker.stats import BrokerStats
from rustka.broker.waiters import Waiters
from rustka.errors import InvalidRequest, OffsetOutOfRange, RustkaError
from rustka.record.batch import Record
from rustka.record.header import (
    LAST_OFFSET_DELTA,
    LAST_OFFSET_DELTA_AT,
    LOG_OVERHEAD,
    OFFSET_LENGTH,
)
from rustka.storage.partition_store import PartitionStore
from rustka.storage.topic import Topic

PartitionKey = tuple[str, int]
T = TypeVar("T")

EARLIEST = -2
LATEST = -1

# The parts of a RecordBatch v2 header a read_committed read walks its batches by.


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Stored batch bytes (as chunks, to be sent back to back) and the partition's bounds."""

    chunks: tuple[bytes, ...]
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int = -1
    # read_committed only: (producer id, first offset) of each aborted transaction
    # with records in what was read; None for read_uncommitted.
    aborted: tuple[tuple[int, int], ...] | None = None

    @property
    def size(self) -> int:
        return sum(len(chunk) for chunk in self.chunks)


FetchPosition = tuple[str, int, int, int]
"""``(topic, partition, offset, max_bytes)``: one partition of a `Reads.read_many`."""

# A read_many slot the pool job has yet to fill (never returned).
_PENDING = ReadResult((), -1, -1)


@dataclass(frozen=True, slots=True)
class OffsetAtTime:
    offset: int
    timestamp: int


class ReadsCore(Protocol):
    """What `Reads` needs of the broker core (`rustka.broker.core.Broker` is one)."""

    stats: BrokerStats
    waiters: Waiters

    @property
    def topics(self) -> Mapping[str, Topic]:
        """The open topics by name; `BrokerUnavailable` while the storage is closed."""

    def partition(self, topic: str, partition: int) -> PartitionStore:
        """The partition's log; `UnknownTopic` or `UnknownPartition` if there is none."""

    def run(self, f: Callable[..., T], *args: Any) -> defer.Deferred[T]:
        """Run ``f`` on the I/O pool, counted so the core's drain waits for it."""


class Reads:
    """The read side of one broker; see the module docstring."""

    def __init__(self, core: ReadsCore) -> None:
        self._core = core

    @reports_errors
    def read(
        self, topic: str, partition: int, offset: int, max_bytes: int, *, committed: bool = False
    ) -> defer.Deferred[ReadResult]:
        """Stored batches from ``offset``; see docs/broker-api.md."""
        plog = self._core.partition(topic, partition)
        start, end = plog.log_start_offset, plog.end_offset
        if not start <= offset <= end and not _may_lag(plog, offset, end):
            raise OffsetOutOfRange(offset, start, end)
        if committed:
            stable = plog.last_stable_offset
            if offset >= stable:
                return defer.succeed(ReadResult((), end, start, stable, ()))
            return self._core.run(
                _read_committed_blocking, plog, offset, max(1, max_bytes)
            ).addCallback(self._sent)
        if offset == end and not _may_lag(plog, offset, end):
            return defer.succeed(ReadResult((), end, start, plog.last_stable_offset))
        return self._core.run(_read_blocking, plog, offset, max(1, max_bytes)).addCallback(
            self._sent
        )

    def _sent(self, result: ReadResult) -> ReadResult:
        stats = self._core.stats
        for chunk in result.chunks:
            stats.bytes_out += len(chunk)
        return result

    @reports_errors
    def read_many(
        self, wanted: Sequence[FetchPosition], max_bytes: int, *, committed: bool = False
    ) -> defer.Deferred[list[ReadResult | Exception]]:
        """`read` of many partitions in one pool job; see docs/broker-api.md.

        One hop to the pool and back per Fetch instead of one per partition (a
        consumer of 64 partitions paid 64 in a row). Lookups and bounds are checked
        here on the reactor thread, so a partition with nothing to read (at the high
        watermark, or at the LSO under read_committed) or an error never reaches the
        pool, and a Fetch with nothing to read anywhere makes no hop at all.
        """
        core = self._core
        out: list[ReadResult | Exception] = []
        reads: list[tuple[int, PartitionStore, int, int]] = []
        for topic, partition, offset, part_max in wanted:
            try:
                plog = core.partition(topic, partition)
            except RustkaError as exc:
                out.append(exc)
                continue
            start, end = plog.log_start_offset, plog.end_offset
            lagging = _may_lag(plog, offset, end)
            if not start <= offset <= end and not lagging:
                out.append(OffsetOutOfRange(offset, start, end))
                continue
            stable = plog.last_stable_offset
            if offset >= (stable if committed else end) and not lagging:
                out.append(ReadResult((), end, start, stable, () if committed else None))
                continue
            reads.append((len(out), plog, offset, part_max))
            out.append(_PENDING)
        if not reads:
            return defer.succeed(out)
        return core.run(_read_many_blocking, reads, max_bytes, committed).addCallbacks(
            self._read_many_done, self._read_many_failed, (out,), None, (out, reads)
        )

    def _read_many_done(
        self, read: list[tuple[int, ReadResult | Exception]], out: list[ReadResult | Exception]
    ) -> list[ReadResult | Exception]:
        for slot, result in read:
            out[slot] = result
            if type(result) is ReadResult:
                self._sent(result)
        return out

    def _read_many_failed(
        self,
        failure: Failure,
        out: list[ReadResult | Exception],
        reads: list[tuple[int, PartitionStore, int, int]],
    ) -> list[ReadResult | Exception]:
        """The job itself could not run (the pool stopped): each partition it was to
        read answers that error in its place, as a `read` of each would have."""
        exc = failure.value if isinstance(failure.value, Exception) else RustkaError(str(failure))
        for slot, *_ in reads:
            out[slot] = exc
        return out

    @reports_errors
    def read_record(self, topic: str, partition: int, offset: int) -> defer.Deferred[Record | None]:
        """The record at ``offset`` (None at or past the end, or in a gap recovery left)."""
        plog = self._core.partition(topic, partition)
        if offset >= plog.end_offset and not _may_lag(plog, offset, plog.end_offset):
            return defer.succeed(None)
        if offset < plog.log_start_offset:
            raise OffsetOutOfRange(offset, plog.log_start_offset, plog.end_offset)
        return self._core.run(plog.read_record, offset).addCallback(self._record_read)

    def _record_read(self, record: Record | None) -> Record | None:
        if record is not None:
            self._core.stats.bytes_out += len(record.value or b"")
        return record

    @reports_errors
    def wait_for_data(
        self,
        positions: Iterable[tuple[str, int, int]],
        timeout_s: float,
        *,
        committed: bool = False,
    ) -> defer.Deferred[None]:
        """The long-poll's parking; see docs/broker-api.md. Cancelling the Deferred
        unparks it."""
        topics = self._core.topics
        keys: list[PartitionKey] = []
        for topic_name, partition, offset in positions:
            topic = topics.get(topic_name)
            if topic is None or not 0 <= partition < len(topic.partitions):
                continue
            plog = topic.partitions[partition]
            if (plog.last_stable_offset if committed else plog.end_offset) > offset:
                return defer.succeed(None)
            keys.append((topic_name, partition))
        if not keys or timeout_s <= 0:
            return defer.succeed(None)
        return self._core.waiters.park(keys, timeout_s)

    @reports_errors
    def list_offset(
        self, topic: str, partition: int, timestamp: int, *, committed: bool = False
    ) -> defer.Deferred[OffsetAtTime | None]:
        """Kafka's ListOffsets for one partition; see docs/broker-api.md. Under
        read_committed the latest offset is the last stable offset, and a time
        found at or past it is none (Kafka's fetchOffsetByTimestamp)."""
        plog = self._core.partition(topic, partition)
        if timestamp == EARLIEST:
            return defer.succeed(OffsetAtTime(plog.log_start_offset, -1))
        if timestamp == LATEST:
            end = plog.last_stable_offset if committed else plog.end_offset
            return defer.succeed(OffsetAtTime(end, -1))
        if timestamp < 0:
            raise InvalidRequest(f"invalid timestamp {timestamp}: use -2, -1 or a time in ms")

        def found(hit: tuple[int, int] | None) -> OffsetAtTime | None:
            if hit is None or (committed and hit[0] >= plog.last_stable_offset):
                return None
            return OffsetAtTime(hit[0], hit[1])

        return self._core.run(plog.offset_for_timestamp, timestamp).addCallback(found)


def _may_lag(plog: PartitionStore, offset: int, end: int) -> bool:
    """Whether a read past this broker's view of the end must still go to the partition:
    a diskless partition's end is as last seen here (other brokers commit to it too,
    docs/diskless.md), so only the partition itself, asking the catalog, can say an
    offset is out of range."""
    return offset > end and plog.config.diskless_enable


def _read_blocking(plog: PartitionStore, offset: int, max_bytes: int) -> ReadResult:
    """Runs on the pool. Bounds are taken after the read, so the high watermark
    never trails the data returned."""
    data = plog.read(offset, max_bytes)
    return ReadResult(
        (data,) if data else (), plog.end_offset, plog.log_start_offset, plog.last_stable_offset
    )


def _read_many_blocking(
    reads: list[tuple[int, PartitionStore, int, int]], max_bytes: int, committed: bool
) -> list[tuple[int, ReadResult | Exception]]:
    """Runs on the pool: each ``(slot, plog, offset, partition max bytes)`` in request
    order within Kafka's response budget (ReplicaManager.readFromLocalLog): the
    response's ``max_bytes`` is shared in order, and until a partition has returned
    data its first batch comes whole even above the limits, so a consumer always
    progresses; after that a partition whose first batch is over what is left gets
    no records. A failed read answers its own slot; the others still read."""
    read = _read_committed_blocking if committed else _read_blocking
    none = () if committed else None
    left = max_bytes
    progressed = False
    out: list[tuple[int, ReadResult | Exception]] = []
    for slot, plog, offset, part_max in reads:
        limit = min(part_max, left)
        if limit <= 0 and progressed:
            out.append(
                (
                    slot,
                    ReadResult(
                        (), plog.end_offset, plog.log_start_offset, plog.last_stable_offset, none
                    ),
                )
            )
            continue
        try:
            result = read(plog, offset, max(limit, 1))
        except Exception as exc:
            out.append((slot, exc))
            continue
        size = result.size
        if progressed and size > limit:
            result = ReadResult(
                (), result.high_watermark, result.log_start_offset, result.last_stable_offset, none
            )
        elif size:
            progressed = True
            left -= size
        out.append((slot, result))
    return out


def _read_committed_blocking(plog: PartitionStore, offset: int, max_bytes: int) -> ReadResult:
    """Runs on the pool: batches below the LSO, with the aborted transactions among them
    (Kafka's collectAbortedTxns up to the end of the last batch returned)."""
    data, stable = plog.read_committed(offset, max_bytes)
    upto = offset
    pos = 0
    while pos + LOG_OVERHEAD <= len(data):
        base, length = OFFSET_LENGTH.unpack_from(data, pos)
        (delta,) = LAST_OFFSET_DELTA.unpack_from(data, pos + LAST_OFFSET_DELTA_AT)
        upto = base + delta + 1
        pos += length + LOG_OVERHEAD
    aborted = tuple(
        (txn.producer_id, txn.first_offset) for txn in plog.aborted_transactions(offset, upto)
    )
    return ReadResult(
        (data,) if data else (), plog.end_offset, plog.log_start_offset, stable, aborted
    )
