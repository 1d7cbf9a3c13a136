"""The registry's state kept in the ``_schemas`` topic (docs/schema-registry.md, "Storage").

`SchemaStore` opens (creating if needed) the one-partition ``_schemas`` topic, replays
it into a `Registry` before anything is answered, and runs every change as: catch up
with the log, ask the model for the records, append them, catch up again (so the
change is applied from the log, in log order, like every other broker's), and check
that the change took. A registration that lost its id to another broker's record
(in a cluster, where ``_schemas`` is a diskless topic every broker appends to) is
tried again under a fresh id. Changes run one at a time; in a cluster the log is also
tailed every ``tail_interval_s`` so other brokers' changes show up here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from twisted.internet import defer, task
from twisted.logger import Logger

from rustka.errors import TopicExists
from rustka.record.batch import Record, decode_records, encode_batch, parse_header
from rustka.record.header import CONTROL_BIT, LOG_OVERHEAD
from rustka.schema_registry.model import NOOP_KEY, Registry, RegistryError
from rustka.schema_registry.model import Record as LogRecord

TOPIC = "_schemas"
READ_BYTES = 1 << 20
RETRIES = 5
"""Registrations that lose their id to another broker are tried this many times."""

T = TypeVar("T")


def topic_configs(clustered: bool) -> dict[str, str]:
    """Compacted on one broker; in a cluster a diskless topic every broker shares, which
    cannot be compacted (docs/diskless.md), so ``_schemas`` then keeps everything."""
    if clustered:
        return {"diskless.enable": "true"}
    return {"cleanup.policy": "compact"}


class NotReady(RegistryError):
    def __init__(self) -> None:
        super().__init__(503, 50003, "The schema registry is starting: replaying _schemas")


class SchemaStore:
    """The state and the log behind it; every change goes through `change`."""

    log = Logger(namespace="rustka.schema_registry")

    def __init__(self, broker: Any, reactor: Any, *, tail_interval_s: float = 0.5) -> None:
        self.broker = broker
        self.reactor = reactor
        self.registry = Registry()
        self.position = 0
        self.ready = False
        self.clustered = getattr(broker, "cluster", None) is not None or bool(
            getattr(broker.config, "diskless_configured", False)
        )
        self._lock = defer.DeferredLock()
        self._tail: task.LoopingCall | None = None
        self._tail_interval_s = tail_interval_s
        self._ready_waiters: list[defer.Deferred[None]] = []

    # -- start and stop ------------------------------------------------------------------

    async def open(self) -> None:
        """Create ``_schemas`` if it is missing, then replay it."""
        await self.broker.when_ready()
        topic = await self.broker.discover_topic(TOPIC)
        if topic is None:
            try:
                await self.broker.create_topic(TOPIC, 1, topic_configs(self.clustered))
            except TopicExists:
                await self.broker.discover_topic(TOPIC)
        await self._locked(self.catch_up)
        self.ready = True
        waiters, self._ready_waiters = self._ready_waiters, []
        for d in waiters:
            d.callback(None)
        self.log.info(
            "schema registry ready: {count} subjects replayed from {topic}",
            count=len(self.registry.versions),
            topic=TOPIC,
        )
        if self.clustered:
            self._tail = task.LoopingCall(self._tail_once)
            self._tail.clock = self.reactor
            self._tail.start(self._tail_interval_s, now=False)

    def when_ready(self) -> defer.Deferred[None]:
        if self.ready:
            return defer.succeed(None)
        d: defer.Deferred[None] = defer.Deferred()
        self._ready_waiters.append(d)
        return d

    def close(self) -> None:
        if self._tail is not None and self._tail.running:
            self._tail.stop()

    def _tail_once(self) -> defer.Deferred[None]:
        d = defer.Deferred.fromCoroutine(self._locked(self.catch_up))
        d.addErrback(lambda f: self.log.warn("cannot read {topic}: {e}", topic=TOPIC, e=f.value))
        return d

    # -- the log -------------------------------------------------------------------------

    async def _locked(self, f: Callable[[], Any]) -> Any:
        await self._lock.acquire()
        try:
            return await f()
        finally:
            self._lock.release()

    async def catch_up(self, until: int = 0) -> None:
        """Apply every record from ``position`` to the end of the log as it is now (and at
        least to ``until``: a diskless partition's end as this broker last saw it may
        trail a record just appended)."""
        start, end = self.broker.bounds(TOPIC, 0)
        self.position = max(self.position, start)
        end = max(end, until)
        while self.position < end:
            result = await self.broker.read(TOPIC, 0, self.position, READ_BYTES)
            if not result.chunks:
                break
            self.position = self._apply_chunks(b"".join(result.chunks), self.position)
            end = max(result.high_watermark, until)

    def _apply_chunks(self, data: bytes, first: int) -> int:
        pos = 0
        position = first
        while pos + LOG_OVERHEAD <= len(data):
            header = parse_header(data, pos)
            end = pos + header.size
            if end > len(data):
                break
            if not header.attributes & CONTROL_BIT:
                for record in decode_records(data, pos, min_offset=position):
                    self.registry.apply(record.key, record.value)
            position = max(position, header.next_offset)
            pos = end
        return position

    async def _append(self, records: list[LogRecord]) -> int:
        """Append ``records`` in one batch; the offset after the last of them."""
        batch = encode_batch([Record(key, value) for key, value in records])
        result = await self.broker.append(TOPIC, 0, batch, auto_create=False)
        return int(result.last_offset) + 1

    # -- changes and reads ---------------------------------------------------------------

    def check_ready(self) -> None:
        if not self.ready:
            raise NotReady()

    async def change(self, command: Callable[[Registry], tuple[T, list[LogRecord]]]) -> T:
        """Run ``command`` on the caught-up state and append what it returns."""
        self.check_ready()

        async def run() -> T:
            await self.catch_up()
            answer, records = command(self.registry)
            if records:
                await self.catch_up(until=await self._append(records))
            return answer

        result: T = await self._locked(run)
        return result

    async def register(self, command: Callable[[Registry], tuple[Any, list[LogRecord]]]) -> Any:
        """A registration, tried again if another broker's record took its id first."""
        for _ in range(RETRIES):
            made = await self.change(command)
            if self.registry.outcome(made):
                return made
        raise RegistryError(500, 50001, "could not allocate a schema id: too much contention")

    async def sync(self) -> None:
        """Catch up with what other brokers appended (a NOOP round trip is not needed:
        the high watermark read now bounds the catch-up)."""
        self.check_ready()
        await self._locked(self.catch_up)


__all__ = ["NOOP_KEY", "TOPIC", "NotReady", "SchemaStore", "topic_configs"]
