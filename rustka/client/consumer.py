"""A prefetching consumer of one partition for one consumer group.

Fetch and processing overlap: as soon as a FetchBatch answer arrives the next
one is requested (from that answer's ``next_offset``) and only then are the
records handed to the application, so the broker reads and the network
carries batch N+1 while the application works on batch N. Exactly one fetch is
in flight at a time; more would only queue behind each other on the ordered
connection and buffer data the application has not asked for yet.

The primary API is a callback that receives a whole batch (``list[Record]``),
because a per-record call costs more than most per-record work at a million
records per second. If the callback returns an awaitable, the next batch waits
for it, which is how a slow application pushes back.

Positions and commits follow Kafka's meaning: ``position`` is the next offset
to hand over, and a committed offset is the next offset the group will read.
A batch counts as processed once its callback returned (or its awaitable
fired); only processed offsets are ever committed, so delivery is at least
once and, across a clean stop and resume, exactly once and in order.

When the position is no longer in the log (retention deleted it, or the log is
now shorter than the committed offset) the ``reset`` policy decides:
``earliest`` moves to the log start, ``latest`` to the end, ``error`` stops
the consumer with OffsetOutOfRange. ``skipped_offsets`` adds up what resets
jumped over and ``on_reset(old, new)`` tells the application each time.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import LoopingCall

from rustka.client.protocol import DEFAULT_FETCH_MAX_BYTES, FetchResult
from rustka.errors import InvalidRequest, OffsetOutOfRange, UnknownPartition
from rustka.names import validate_group, validate_topic
from rustka.record.batch import Record

__all__ = ["RESET_POLICIES", "Consumer"]

RESET_POLICIES = ("earliest", "latest", "error")
DEFAULT_MAX_WAIT_MS = 500

Callback = Callable[[list[Record]], Any]


class Consumer:
    """Deliver one partition's records to a callback, committing by policy.

    Commit policy: ``commit_every_records=N`` commits once N records were
    processed since the last commit; ``commit_interval_ms=T`` commits at most
    every T ms (a timer, so an idle follower still commits its last batch);
    neither means manual: call :meth:`commit`. :meth:`stop` commits the final
    position under every policy unless asked not to.

    ``until_end=True`` stops by itself once it has caught up with the end of
    the log (fetching without long-poll waits); otherwise it follows the log,
    long-polling up to ``max_wait_ms``. ``max_records`` stops after that many.
    """

    def __init__(
        self,
        client: Any,
        group: str,
        topic: str,
        partition: int,
        *,
        reset: str = "earliest",
        commit_every_records: int | None = None,
        commit_interval_ms: int | None = None,
        max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
        max_wait_ms: int = DEFAULT_MAX_WAIT_MS,
        until_end: bool = False,
        max_records: int | None = None,
        on_reset: Callable[[int, int], None] | None = None,
        reactor: Any = None,
    ) -> None:
        validate_group(group)
        validate_topic(topic)
        if reset not in RESET_POLICIES:
            raise InvalidRequest(f"reset must be one of {', '.join(RESET_POLICIES)}, got {reset!r}")
        if commit_every_records is not None and commit_interval_ms is not None:
            raise InvalidRequest("choose one of commit_every_records and commit_interval_ms")
        if commit_every_records is not None and commit_every_records < 1:
            raise InvalidRequest(f"commit_every_records must be >= 1, got {commit_every_records}")
        if commit_interval_ms is not None and commit_interval_ms < 1:
            raise InvalidRequest(f"commit_interval_ms must be >= 1, got {commit_interval_ms}")
        if partition < 0:
            raise UnknownPartition(f"partition must not be negative, got {partition}")
        if max_bytes < 1:
            raise InvalidRequest(f"max_bytes must be at least 1, got {max_bytes}")
        if max_wait_ms < 0:
            raise InvalidRequest(f"max_wait_ms must not be negative, got {max_wait_ms}")
        if max_records is not None and max_records < 0:
            raise InvalidRequest(f"max_records must not be negative, got {max_records}")
        if reactor is None:
            from twisted.internet import reactor as default_reactor

            reactor = default_reactor
        self.client = client
        self.group = group
        self.topic = topic
        self.partition = partition
        self.reset = reset
        self.commit_every_records = commit_every_records
        self.commit_interval_ms = commit_interval_ms
        self.max_bytes = max_bytes
        self.max_wait_ms = 0 if until_end else max_wait_ms
        self.until_end = until_end
        self.max_records = max_records
        self.on_reset = on_reset
        self._reactor = reactor

        self.position: int | None = None
        """The next offset to deliver; known once started."""
        self.start_offset: int | None = None
        """Where this run began (the committed offset or the log start)."""
        self.committed: int | None = None
        """The last offset this consumer committed (or found committed)."""
        self.high_watermark: int | None = None
        """The partition's end offset as of the latest fetch."""
        self.delivered = 0
        self.skipped_offsets = 0
        self.resets = 0

        self._callback: Callback | None = None
        self._stopping = False
        self._commit_on_stop = True
        self._waiting_fetch: Deferred[FetchResult] | None = None
        self._done: Deferred[None] | None = None
        self._finished = False
        self._result: Any = None
        self._stop_waiters: list[Deferred[None]] = []
        self._timer: LoopingCall | None = None
        self._commits: set[Deferred[None]] = set()
        self._commit_error: BaseException | None = None
        self._last_commit_sent = -1

    # -- control ----------------------------------------------------------------

    def start(self, callback: Callback) -> Deferred[None]:
        """Begin delivering; fires when the consumer has stopped and committed.

        Fails with the error that stopped it: a fetch or commit failure, the
        callback's own exception (the failed batch is not committed), or
        OffsetOutOfRange under ``reset="error"``.
        """
        if self._callback is not None:
            raise InvalidRequest("this consumer was already started")
        self._callback = callback
        self._done = defer.ensureDeferred(self._run())
        self._done.addBoth(self._finish)
        return self._chained()

    def stop(self, *, commit: bool = True) -> Deferred[None]:
        """Stop after the batch in hand; fires once the final position is committed.

        A long-poll fetch in flight is abandoned, but the final commit travels
        behind it on the ordered connection, so this can take up to
        ``max_wait_ms``. Never fails: the error, if any, belongs to start()'s Deferred.
        """
        self._stopping = True
        self._commit_on_stop = self._commit_on_stop and commit
        if self._finished or self._callback is None:
            return defer.succeed(None)
        d: Deferred[None] = Deferred()
        self._stop_waiters.append(d)
        waiting = self._waiting_fetch
        if waiting is not None:
            # May finish the run (and fire d) synchronously.
            waiting.cancel()
        return d

    def commit(self) -> Deferred[None]:
        """Commit the current position now (manual policy, or to force one early)."""
        if self.position is None or self.position == self.committed:
            return defer.succeed(None)
        return self._commit(self.position)

    # -- internals --------------------------------------------------------------

    def _chained(self) -> Deferred[None]:
        d: Deferred[None] = Deferred()
        assert self._done is not None

        def relay(_: Any) -> None:
            if isinstance(self._result, BaseException):
                d.errback(self._result)
            else:
                d.callback(None)

        self._done.addCallback(relay)
        return d

    def _finish(self, result: Any) -> None:
        self._finished = True
        self._result = result.value if isinstance(result, defer.Failure) else None
        if self._timer is not None and self._timer.running:
            self._timer.stop()
        waiters, self._stop_waiters = self._stop_waiters, []
        for waiter in waiters:
            waiter.callback(None)

    def _commit(self, offset: int) -> Deferred[None]:
        """Send a commit; the ordered connection keeps commits in the order they were made."""
        self._last_commit_sent = offset
        d = self.client.commit(self.group, self.topic, self.partition, offset)
        self._commits.add(d)

        def done(outcome: Any) -> Any:
            self._commits.discard(d)
            if isinstance(outcome, defer.Failure):
                if self._commit_error is None:
                    self._commit_error = outcome.value
            else:
                self.committed = offset
            return outcome

        return d.addBoth(done)

    def _maybe_commit(self) -> None:
        every = self.commit_every_records
        position = self.position
        if every is None or position is None:
            return
        if position - self._last_commit_sent >= every:
            self._commit(position).addErrback(lambda _: None)

    def _interval_commit(self) -> None:
        position = self.position
        if position is not None and position != self._last_commit_sent:
            self._commit(position).addErrback(lambda _: None)

    def _fetch(self, offset: int) -> Deferred[FetchResult]:
        return self.client.fetch_batch(
            self.topic, self.partition, offset, self.max_bytes, self.max_wait_ms
        )

    async def _starting_position(self) -> int:
        committed = await self.client.committed(self.group, self.topic, self.partition)
        meta = await self.client.metadata([self.topic])
        partitions = meta[0].partitions
        if self.partition >= len(partitions):
            raise UnknownPartition(
                f"topic {self.topic!r} has no partition {self.partition} (it has {len(partitions)})"
            )
        self.high_watermark = partitions[self.partition].high_watermark
        if committed is None:
            return partitions[self.partition].log_start
        self.committed = self._last_commit_sent = committed
        return committed

    def _reset_to(self, error: OffsetOutOfRange) -> int:
        if self.reset == "error":
            raise error
        new = error.log_start if self.reset == "earliest" else error.end
        old = error.offset
        self.skipped_offsets += max(0, new - old)
        self.resets += 1
        if self.on_reset is not None:
            self.on_reset(old, new)
        return new

    async def _run(self) -> None:
        try:
            await self._deliver_loop()
        finally:
            position = self.position
            if (
                self._commit_on_stop
                and position is not None
                and position != self._last_commit_sent
                and self._commit_error is None
            ):
                self._commit(position).addErrback(lambda _: None)
            if self._commits:
                await defer.DeferredList(list(self._commits), consumeErrors=True)
        if self._commit_error is not None:
            raise self._commit_error

    async def _deliver_loop(self) -> None:
        position = await self._starting_position()
        self.position = self.start_offset = position
        if self.committed is None:
            # A new group: count records from where it starts, without committing it yet.
            self._last_commit_sent = position
        if self.commit_interval_ms is not None:
            self._timer = LoopingCall(self._interval_commit)
            self._timer.clock = self._reactor
            self._timer.start(self.commit_interval_ms / 1000, now=False)
        callback = self._callback
        assert callback is not None
        fetch: Deferred[FetchResult] | None = None
        try:
            while not self._stopping:
                if self.max_records is not None and self.delivered >= self.max_records:
                    break
                if self._commit_error is not None:
                    raise self._commit_error
                if fetch is None:
                    fetch = self._fetch(position)
                self._waiting_fetch = fetch
                try:
                    result = await fetch
                except CancelledError:
                    break
                except OffsetOutOfRange as e:
                    position = self._reset_to(e)
                    self.position = position
                    continue
                finally:
                    self._waiting_fetch = None
                    fetch = None
                self.high_watermark = result.high_watermark
                records = result.records
                if (
                    self.max_records is not None
                    and len(records) > self.max_records - self.delivered
                ):
                    records = records[: self.max_records - self.delivered]
                    position = records[-1].offset + 1 if records else position  # type: ignore[operator]
                else:
                    position = max(position, result.next_offset)
                at_end = self.until_end and position >= result.high_watermark
                if not records and at_end:
                    self.position = position
                    break
                wanted = self.max_records is None or (
                    self.delivered + len(records) < self.max_records
                )
                if wanted and not at_end and not self._stopping:
                    # Prefetch: the broker works on the next batch while the callback runs.
                    fetch = self._fetch(position)
                if records:
                    outcome = callback(records)
                    if inspect.isawaitable(outcome):
                        await outcome
                    self.delivered += len(records)
                self.position = position
                self._maybe_commit()
                if at_end:
                    break
        finally:
            if fetch is not None:
                # The answer is no longer wanted; cancelling also silences its failure.
                fetch.addErrback(lambda _: None)
                fetch.cancel()
