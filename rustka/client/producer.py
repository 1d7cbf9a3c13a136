"""A batching producer: many records per request, several requests in flight.

Sending one record per round trip caps a client at a few thousand records per
second whatever the broker does, so records are gathered per (topic, partition)
and shipped as one RecordBatch v2 each. A batch goes out when it reaches
``batch_bytes`` or ``linger_ms`` after its first record, whichever comes first;
up to ``max_in_flight`` batches per partition ride the one connection at once
(the broker answers in order and appends a partition's batches in the order it
receives them, so per-partition order is kept).

Keys are routed with :func:`rustka.partitioner.partition_for_key`, the rule the
broker's own Produce uses, so a key lands on the same partition whichever way
it was written. A record without a key sticks to one partition until that
partition's batch is sent, then moves on (Kafka's sticky partitioner), which
keeps batches full without hashing anything.

A topic's partition count is looked up once, with ``metadata``, on its first
send. If the topic does not exist, the producer creates it with
``new_topic_partitions`` partitions (3, the broker's default for auto-created
topics; ``None`` turns creation off and fails those records with
UnknownTopic). A count raised later with ``topics alter`` is picked up by
:meth:`BatchingProducer.refresh` only: re-reading it on every send would cost
a round trip per batch.

Per record the hot path does one hash, one Record, one Deferred and one list
append; encoding happens once per batch with ``encode_batch``.
:meth:`BatchingProducer.send_many` takes many records for one Deferred: the
per-record Deferred (and the garbage collector's work on hundreds of thousands
of live ones) is most of what ``send`` costs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall
from twisted.python.failure import Failure

from rustka.allocation import collector_paused
from rustka.errors import InvalidRequest, RustkaError, TopicExists, UnknownTopic
from rustka.partitioner import partition_for_key
from rustka.record.batch import Record, encode_batch

__all__ = [
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_BUFFER_BYTES",
    "DEFAULT_LINGER_MS",
    "DEFAULT_MAX_IN_FLIGHT",
    "BatchingProducer",
]

# 256 KiB amortises the per-request cost (frame, lane hop, fsync under flush=always)
# over a few thousand small records while staying far below the broker's 16 MiB
# frame limit; bigger batches measured no faster, only burstier.
DEFAULT_BATCH_BYTES = 256 * 1024
DEFAULT_LINGER_MS = 5
DEFAULT_MAX_IN_FLIGHT = 8
# Like Kafka's buffer.memory: how much unacknowledged data wait_for_room() allows.
# Unlike Kafka's 32 MiB: every buffered record is a live Python object, and the
# garbage collector's full passes over hundreds of thousands of them cost more
# than the extra batches in flight win (measured: 4 MiB was as fast and steadier).
DEFAULT_BUFFER_BYTES = 4 * 1024 * 1024
DEFAULT_NEW_TOPIC_PARTITIONS = 3

# Rough per-record framing cost (length, attributes, deltas, key/value lengths),
# used only to decide when a batch is full.
_RECORD_OVERHEAD = 8
_ROUTE_CACHE_SIZE = 65536

Headers = Sequence[tuple[str, bytes | None]]
_Result = tuple[int, int]
# Builds a Record from its five fields in one C call (Record is a tuple subclass).
_new_record: Callable[..., Record] = tuple.__new__  # type: ignore[assignment]


class _Many:
    """The shared outcome of one `send_many` call, filled in as its batches are answered.

    A partition's batches are answered in the order they were sent, so the
    records of this call in one partition complete in the order they were
    given: per partition, a list of their indexes and a cursor into it is all
    the bookkeeping a record needs.
    """

    __slots__ = ("cursors", "deferred", "failure", "indexes", "remaining", "results")

    def __init__(self, count: int) -> None:
        self.deferred: Deferred[list[_Result]] = Deferred()
        self.results: list[Any] = [None] * count
        self.remaining = count
        self.indexes: dict[int, list[int]] = {}
        self.cursors: dict[int, int] = {}
        self.failure: Failure | None = None

    def add(self, partition: int, index: int) -> None:
        indexes = self.indexes.get(partition)
        if indexes is None:
            self.indexes[partition] = [index]
            self.cursors[partition] = 0
        else:
            indexes.append(index)

    def acked(self, partition: int, offsets: list[int]) -> None:
        """This call's records in one answered batch of ``partition``, at ``offsets``."""
        cursor = self.cursors[partition]
        count = len(offsets)
        results = self.results
        indexes = self.indexes[partition][cursor : cursor + count]
        for index, offset in zip(indexes, offsets, strict=True):
            results[index] = (partition, offset)
        self.cursors[partition] = cursor + count
        self._done(count)

    def failed(self, partition: int, count: int, failure: Failure) -> None:
        self.cursors[partition] = self.cursors.get(partition, 0) + count
        if self.failure is None:
            self.failure = failure
        self._done(count)

    def _done(self, count: int) -> None:
        self.remaining -= count
        if self.remaining == 0:
            if self.failure is not None:
                self.deferred.errback(self.failure)
            else:
                self.deferred.callback(self.results)


class _Accumulator:
    """The open batch and the queue of closed ones for one partition."""

    __slots__ = ("deferreds", "in_flight", "partition", "queued", "records", "size", "timer")

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.records: list[Record] = []
        # Per record: its send() Deferred, or the _Many of its send_many() call.
        self.deferreds: list[Any] = []
        self.size = 0
        self.timer: IDelayedCall | None = None
        self.queued: deque[tuple[list[Record], list[Any], int]] = deque()
        self.in_flight = 0


class _Topic:
    """What the producer knows about one topic: its partitions once looked up."""

    __slots__ = ("accumulators", "count", "lookup", "routes", "sticky", "waiting")

    def __init__(self) -> None:
        self.count = 0
        # key -> partition: hashing in Python costs more than the rest of send().
        self.routes: dict[bytes, int] = {}
        self.accumulators: list[_Accumulator] = []
        self.sticky = 0
        self.lookup: Deferred[None] | None = None
        # Records sent before the partition count was known: (record, size, sink,
        # index in its send_many call, or -1 for send).
        self.waiting: list[tuple[Record, int, Any, int]] = []


class BatchingProducer:
    """Accumulate records per partition and ship them as batches; see the module docstring.

    The client is borrowed: :meth:`close` flushes but leaves the connection open.
    ``buffered_bytes`` counts data accepted and not yet answered; callers that
    produce faster than the broker absorbs await :meth:`wait_for_room`.
    """

    def __init__(
        self,
        client: Any,
        *,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
        linger_ms: float = DEFAULT_LINGER_MS,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        new_topic_partitions: int | None = DEFAULT_NEW_TOPIC_PARTITIONS,
        reactor: Any = None,
    ) -> None:
        if batch_bytes < 1:
            raise InvalidRequest(f"batch_bytes must be at least 1, got {batch_bytes}")
        if linger_ms < 0:
            raise InvalidRequest(f"linger_ms must not be negative, got {linger_ms}")
        if max_in_flight < 1:
            raise InvalidRequest(f"max_in_flight must be at least 1, got {max_in_flight}")
        if new_topic_partitions is not None and new_topic_partitions < 1:
            raise InvalidRequest(
                f"new_topic_partitions must be at least 1, got {new_topic_partitions}"
            )
        if reactor is None:
            from twisted.internet import reactor as default_reactor

            reactor = default_reactor
        self.client = client
        self.batch_bytes = batch_bytes
        self.linger_s = linger_ms / 1000
        self.max_in_flight = max_in_flight
        self.buffer_bytes = buffer_bytes
        self.new_topic_partitions = new_topic_partitions
        self.buffered_bytes = 0
        self._reactor = reactor
        self._topics: dict[str, _Topic] = {}
        self._closed = False
        # Records accepted by send() whose Deferred has not fired yet.
        self._unfinished = 0
        self._room_waiters: list[Deferred[None]] = []
        self._flush_waiters: list[Deferred[None]] = []

    # -- sending ----------------------------------------------------------------

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers = (),
    ) -> Deferred[_Result]:
        """Queue one record; fires with (partition, offset) once the broker has it.

        Fails with the batch's error (every record of a failed batch fails the
        same way, including a record that cannot be encoded because its key or
        value is not bytes); records of other batches are unaffected.
        """
        if self._closed:
            return defer.fail(InvalidRequest("the producer is closed"))
        size = _RECORD_OVERHEAD
        try:
            if key is not None:
                size += len(key)
            if value is not None:
                size += len(value)
            if headers:
                headers = tuple(headers)
                for hkey, hvalue in headers:
                    size += len(hkey) + (len(hvalue) if hvalue is not None else 0) + 2
        except (TypeError, ValueError) as exc:
            return defer.fail(InvalidRequest(f"a record needs bytes (or None): {exc}"))
        record = _new_record(Record, (key, value, headers if headers else (), None, None))
        d: Deferred[_Result] = Deferred()
        self.buffered_bytes += size
        self._unfinished += 1
        state = self._topics.get(topic)
        if state is None:
            state = self._topics[topic] = _Topic()
        if state.count:
            if key is None:
                partition = state.sticky
            else:
                partition = state.routes.get(key, -1)
                if partition < 0:
                    partition = self._route(state, key)
            self._add(topic, state, state.accumulators[partition], record, size, d)
        else:
            state.waiting.append((record, size, d, -1))
            if state.lookup is None:
                state.lookup = defer.ensureDeferred(self._look_up(topic, state))
        return d

    def send_many(
        self, topic: str, records: Iterable[tuple[bytes | None, bytes | None]]
    ) -> Deferred[list[_Result]]:
        """Queue many ``(key, value)`` records; fires with their (partition, offset)s, in order.

        Batching is the same as for ``send`` (records may share batches with
        other calls' records and span several batches); the saving is one
        Deferred for all of them. Fails with the first error of any batch
        holding one of them, once all of them are answered; records in other
        batches may then have been stored all the same (as with ``send``, whose
        Deferreds would have told them apart). Like ``send``, it does not wait
        for room: callers that produce faster than the broker absorbs await
        :meth:`wait_for_room` between calls.
        """
        if self._closed:
            return defer.fail(InvalidRequest("the producer is closed"))
        with collector_paused():
            return self._send_many(topic, records)

    def _send_many(
        self, topic: str, records: Iterable[tuple[bytes | None, bytes | None]]
    ) -> Deferred[list[_Result]]:
        entries: list[tuple[Record, int]] = []
        new = _new_record
        record_type = Record
        try:
            for key, value in records:
                size = _RECORD_OVERHEAD
                if key is not None:
                    size += len(key)
                if value is not None:
                    size += len(value)
                entries.append((new(record_type, (key, value, (), None, None)), size))
        except (TypeError, ValueError) as exc:
            return defer.fail(InvalidRequest(f"a record needs bytes (or None): {exc}"))
        if not entries:
            return defer.succeed([])
        many = _Many(len(entries))
        state = self._topics.get(topic)
        if state is None:
            state = self._topics[topic] = _Topic()
        self._unfinished += len(entries)
        if not state.count:
            self.buffered_bytes += sum(size for _, size in entries)
            state.waiting.extend(
                (record, size, many, index) for index, (record, size) in enumerate(entries)
            )
            if state.lookup is None:
                state.lookup = defer.ensureDeferred(self._look_up(topic, state))
            return many.deferred
        routes = state.routes
        accumulators = state.accumulators
        add = self._add
        for index, (record, size) in enumerate(entries):
            key = record[0]
            if key is None:
                partition = state.sticky
            else:
                partition = routes.get(key, -1)
                if partition < 0:
                    partition = self._route(state, key)
            many.add(partition, index)
            self.buffered_bytes += size
            add(topic, state, accumulators[partition], record, size, many)
        return many.deferred

    @staticmethod
    def _route(state: _Topic, key: bytes) -> int:
        routes = state.routes
        if len(routes) >= _ROUTE_CACHE_SIZE:
            routes.clear()
        partition = routes[key] = partition_for_key(key, state.count)
        return partition

    def wait_for_room(self) -> Deferred[None]:
        """Fires once fewer than ``buffer_bytes`` are unacknowledged (at once if so already)."""
        if self.buffered_bytes < self.buffer_bytes:
            return defer.succeed(None)
        d: Deferred[None] = Deferred()
        self._room_waiters.append(d)
        return d

    def flush(self) -> Deferred[None]:
        """Send every open batch now; fires when nothing sent so far is left unanswered.

        Never fails: per-record outcomes are on the Deferreds ``send`` returned.
        Records sent while a flush is pending are waited for too.
        """
        for topic, state in self._topics.items():
            for acc in state.accumulators:
                if acc.records:
                    self._close_batch(topic, state, acc)
        if self._unfinished == 0:
            return defer.succeed(None)
        d: Deferred[None] = Deferred()
        self._flush_waiters.append(d)
        return d

    def close(self) -> Deferred[None]:
        """Refuse further sends and flush; the client connection stays open."""
        self._closed = True
        return self.flush()

    def refresh(self, topic: str) -> Deferred[int]:
        """Look a topic's partition count up now; fires with it.

        Before the first send it saves that send the lookup; after ``topics
        alter`` it makes keys route over the new count.
        """

        async def refresh() -> int:
            state = self._topics.get(topic)
            if state is None:
                state = self._topics[topic] = _Topic()
            if not state.count:
                if state.lookup is None:
                    state.lookup = defer.ensureDeferred(self._look_up(topic, state))
                await state.lookup
                if not state.count:
                    raise UnknownTopic(f"could not look up topic {topic!r}")
                return state.count
            count = await self._partition_count(topic)
            if count > state.count:
                state.accumulators.extend(_Accumulator(i) for i in range(state.count, count))
                state.count = count
                state.routes.clear()
            return count

        return defer.ensureDeferred(refresh())

    # -- partition lookup -------------------------------------------------------

    async def _partition_count(self, topic: str) -> int:
        try:
            meta = await self.client.metadata([topic])
        except UnknownTopic:
            if self.new_topic_partitions is None:
                raise
            try:
                return int(await self.client.create_topic(topic, self.new_topic_partitions))
            except TopicExists:
                # Another client created it between our two requests.
                meta = await self.client.metadata([topic])
        return len(meta[0].partitions)

    async def _look_up(self, topic: str, state: _Topic) -> None:
        try:
            count = await self._partition_count(topic)
            if count < 1:
                raise UnknownTopic(f"topic {topic!r} has no partitions")
        except Exception:
            failure = Failure()
            waiting, state.waiting = state.waiting, []
            state.lookup = None
            for _, size, sink, _index in waiting:
                self._record_done(size)
                if type(sink) is _Many:
                    sink.failure = sink.failure or failure
                    sink._done(1)
                else:
                    sink.errback(failure)
            self._check_flushed()
            return
        state.count = count
        state.accumulators = [_Accumulator(i) for i in range(count)]
        state.lookup = None
        waiting, state.waiting = state.waiting, []
        for record, size, sink, index in waiting:
            key = record.key
            partition = state.sticky if key is None else self._route(state, key)
            if index >= 0:
                sink.add(partition, index)
            self._add(topic, state, state.accumulators[partition], record, size, sink)
        if self._flush_waiters:
            # A flush is waiting: these records must not sit out a linger.
            for acc in state.accumulators:
                if acc.records:
                    self._close_batch(topic, state, acc)

    # -- batching ---------------------------------------------------------------

    def _add(
        self,
        topic: str,
        state: _Topic,
        acc: _Accumulator,
        record: Record,
        size: int,
        d: Any,
    ) -> None:
        acc.records.append(record)
        acc.deferreds.append(d)
        acc.size += size
        if acc.size >= self.batch_bytes:
            self._close_batch(topic, state, acc)
        elif acc.timer is None:
            acc.timer = self._reactor.callLater(
                self.linger_s, self._linger_expired, topic, state, acc
            )

    def _linger_expired(self, topic: str, state: _Topic, acc: _Accumulator) -> None:
        acc.timer = None
        if acc.records:
            self._close_batch(topic, state, acc)

    def _close_batch(self, topic: str, state: _Topic, acc: _Accumulator) -> None:
        """Move the open batch to the send queue and send what the in-flight limit allows."""
        timer = acc.timer
        if timer is not None:
            if timer.active():
                timer.cancel()
            acc.timer = None
        acc.queued.append((acc.records, acc.deferreds, acc.size))
        acc.records = []
        acc.deferreds = []
        acc.size = 0
        if state.sticky == acc.partition and state.count > 1:
            state.sticky = (acc.partition + 1) % state.count
        self._pump(topic, acc)

    def _pump(self, topic: str, acc: _Accumulator) -> None:
        while acc.queued and acc.in_flight < self.max_in_flight:
            records, deferreds, size = acc.queued.popleft()
            acc.in_flight += 1
            try:
                data = encode_batch(records)
            except RustkaError:
                self._failed(Failure(), topic, acc, deferreds, size)
                continue
            except (TypeError, AttributeError, ValueError) as exc:
                # A key, value or header of the wrong type; checking each record
                # in send() would tax every well-formed one.
                error = InvalidRequest(f"cannot encode a record of this batch: {exc}")
                self._failed(Failure(error), topic, acc, deferreds, size)
                continue
            self.client.produce_batch(topic, acc.partition, data).addCallbacks(
                self._acked,
                self._failed,
                callbackArgs=(topic, acc, deferreds, size),
                errbackArgs=(topic, acc, deferreds, size),
            )

    def _acked(
        self,
        offsets: tuple[int, int],
        topic: str,
        acc: _Accumulator,
        deferreds: list[Any],
        size: int,
    ) -> None:
        acc.in_flight -= 1
        self._batch_done(size, len(deferreds))
        base = offsets[0]
        partition = acc.partition
        many: dict[_Many, list[int]] = {}
        for offset, d in enumerate(deferreds, start=base):
            if type(d) is _Many:
                offsets_of = many.get(d)
                if offsets_of is None:
                    many[d] = [offset]
                else:
                    offsets_of.append(offset)
            else:
                d.callback((partition, offset))
        for collector, offsets_of in many.items():
            collector.acked(partition, offsets_of)
        self._pump(topic, acc)
        self._check_flushed()

    def _failed(
        self,
        failure: Failure,
        topic: str,
        acc: _Accumulator,
        deferreds: list[Any],
        size: int,
    ) -> None:
        acc.in_flight -= 1
        self._batch_done(size, len(deferreds))
        many: dict[_Many, int] = {}
        for d in deferreds:
            if type(d) is _Many:
                many[d] = many.get(d, 0) + 1
            else:
                d.errback(failure)
        for collector, count in many.items():
            collector.failed(acc.partition, count, failure)
        self._pump(topic, acc)
        self._check_flushed()

    # -- bookkeeping ------------------------------------------------------------

    def _record_done(self, size: int) -> None:
        self._batch_done(size, 1)

    def _batch_done(self, size: int, count: int) -> None:
        self._unfinished -= count
        self.buffered_bytes -= size
        if self._room_waiters and self.buffered_bytes < self.buffer_bytes:
            waiters, self._room_waiters = self._room_waiters, []
            for waiter in waiters:
                waiter.callback(None)

    def _check_flushed(self) -> None:
        if self._flush_waiters and self._unfinished == 0:
            waiters, self._flush_waiters = self._flush_waiters, []
            for waiter in waiters:
                waiter.callback(None)
