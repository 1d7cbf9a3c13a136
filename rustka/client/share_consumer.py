"""A share-group consumer: a topic used as a work queue (docs/protocol.md 7.16).

Several `ShareConsumer`s of one group take records of the same topic, each record
given to one of them at a time; each acknowledges what it took, record by record:
accept (done), release (give it to someone again) or reject (never again). A record
neither acknowledged nor released goes back when its lock runs out (30 s by the
group's default), so a worker that dies loses nothing; one that accepted a record
is never given it again, across broker crashes too.

`run` is the loop most workers want: take a batch, hand it to a callback, accept it
when the callback returns (or its awaitable fires), release it when the callback
raises, so another worker retries it. `poll` and `acknowledge` are the parts, for
acknowledging record by record.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from twisted.internet import defer

from rustka.client.protocol import RustkaClientProtocol, ShareRecord
from rustka.errors import InvalidRecordState
from rustka.names import validate_group, validate_topic

__all__ = ["ACCEPT", "REJECT", "RELEASE", "ShareConsumer", "ShareRecord"]

ACCEPT, RELEASE, REJECT = 1, 2, 3
_KINDS = {"accept": ACCEPT, "release": RELEASE, "reject": REJECT}
_STARTS = {None: 0, "earliest": 1, "latest": 2}


class ShareConsumer:
    """One member of share group ``group`` reading ``topic`` over ``client``.

    ``start`` is where partitions the group never read begin ("earliest" or
    "latest"; None: the group's ``share.auto.offset.reset``). ``member`` names the
    member (a random UUID by default); two consumers must not share one.
    """

    def __init__(
        self,
        client: RustkaClientProtocol,
        group: str,
        topic: str,
        *,
        member: str | None = None,
        start: str | None = None,
        max_wait_ms: int = 500,
    ) -> None:
        validate_group(group)
        validate_topic(topic)
        if start not in _STARTS:
            raise ValueError(f"start must be earliest, latest or None, not {start!r}")
        self.client = client
        self.group = group
        self.topic = topic
        self.member = member or str(uuid.uuid4())
        self.max_wait_ms = max_wait_ms
        self._start = _STARTS[start]
        self._running = False
        self._loop: defer.Deferred[None] | None = None

    def poll(self, max_records: int = 100) -> defer.Deferred[list[ShareRecord]]:
        """Up to ``max_records`` records locked for this member; [] if none came in
        ``max_wait_ms``."""
        return self.client.share_fetch(
            self.group, self.member, self.topic, max_records, self.max_wait_ms, self._start
        )

    def acknowledge(
        self, records: Sequence[ShareRecord], kind: str = "accept"
    ) -> defer.Deferred[None]:
        """Acknowledge ``records`` (``kind``: accept, release or reject); fires once the
        broker has it on disk, or fails with InvalidRecordState if it no longer counts
        one of them as this member's (its lock ran out: someone else may have it)."""
        code = _KINDS[kind]
        acks = [(r.partition, r.record.offset or 0, code) for r in records]
        if not acks:
            return defer.succeed(None)

        def checked(results: dict[int, int]) -> None:
            refused = sorted(p for p, c in results.items() if c)
            if refused:
                raise InvalidRecordState(
                    f"share group {self.group!r}: records of {self.topic} partitions "
                    f"{refused} are no longer this member's (lock expired?)"
                )

        return self.client.share_acknowledge(self.group, self.member, self.topic, acks).addCallback(
            checked
        )

    def run(
        self, callback: Callable[[list[ShareRecord]], Any], max_records: int = 100
    ) -> defer.Deferred[None]:
        """Take batches and hand each to ``callback`` until `stop`: accepted when it
        returns (or its awaitable fires), released when it raises, which also ends the
        loop with that error."""
        self._running = True
        self._loop = defer.ensureDeferred(self._run(callback, max_records))
        return self._loop

    async def _run(self, callback: Callable[[list[ShareRecord]], Any], max_records: int) -> None:
        while self._running:
            records = await self.poll(max_records)
            if not records:
                continue
            try:
                result = callback(records)
                if inspect.isawaitable(result):
                    await result
            except BaseException:
                await self.acknowledge(records, "release")
                raise
            await self.acknowledge(records, "accept")

    def stop(self) -> defer.Deferred[None]:
        """End `run` after its current batch (and its poll in flight), then release
        what this member still holds (ShareLeave) so other members get it at once."""
        self._running = False
        loop, self._loop = self._loop, None
        ended: defer.Deferred[Any] = defer.succeed(None)
        if loop is not None and not loop.called:
            ended = defer.Deferred()
            loop.addBoth(lambda result: (ended.callback(None), result)[1])
        return ended.addCallback(lambda _: self.client.share_leave(self.group, self.member))
