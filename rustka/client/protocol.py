"""A Twisted client for the native protocol: every call returns a Deferred.

The protocol has no correlation ids, so the broker answers in request order and
the client keeps one FIFO of outstanding calls; any number of calls may be in
flight on one connection (pipelining) and each Deferred fires with its own
answer. Broker-side failures arrive as exceptions from ``rustka.errors`` (tag 4
``Error`` as :class:`BrokerError`, tag 14 ``Failure`` as the class its code
names, tag 15 as :class:`~rustka.errors.OffsetOutOfRange`), so callers handle
one exception family whatever the transport did.

Responses may be large (a FetchBatch of several MiB), so the receive path is a
linear deframer (rustka.framing) instead of Int32StringReceiver's, which copies its whole buffer
on every read and goes quadratic on big frames.
"""

from __future__ import annotations

import contextlib
import struct
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import HostnameEndpoint, clientFromString, connectProtocol
from twisted.internet.error import ConnectError
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.python.failure import Failure

import rustka
from rustka.allocation import collector_paused
from rustka.eager_write import writer_for
from rustka.errors import (
    ERRORS_BY_CODE,
    AuthenticationFailed,
    BrokerUnavailable,
    InvalidRequest,
    OffsetOutOfRange,
    RustkaError,
)
from rustka.framing import LinearInt32StringReceiver
from rustka.native import codec as p
from rustka.native.codec import (
    GroupOffset,
    LogInfo,
    TopicConfig,
    TopicLogs,
    TopicMetadata,
    Welcome,
)
from rustka.record.batch import Record, decode_records, encode_batch, parse_header
from rustka.security.acl import AclBinding, AclBindingFilter
from rustka.security.scram import MECHANISMS, ScramClient, ScramError

__all__ = [
    "DEFAULT_PORT",
    "BrokerError",
    "ConnectionClosed",
    "FetchResult",
    "GroupOffset",
    "LogInfo",
    "RequestTimedOut",
    "RustkaClientProtocol",
    "TopicLogs",
    "TopicMetadata",
    "Welcome",
    "client_endpoint",
    "connect",
]

DEFAULT_PORT = 9092
DEFAULT_FETCH_MAX_BYTES = 1024 * 1024
CLIENT_NAME = f"rustka-py/{rustka.__version__}"

_LENGTH = struct.Struct("!I")
_MAX_FRAME = 0xFFFF_FFFF
_ENDPOINT_PREFIXES = ("tcp:", "tcp6:", "ssl:", "tls:", "unix:")

T = TypeVar("T")


class BrokerError(RustkaError):
    """The broker answered tag 4 ``Error``: a seed op failed or the frame was unparseable.

    Seed errors carry only prose, so this is all a client can know about them.
    """


class ConnectionClosed(RustkaError):
    """The connection is gone, so this call was never (or never fully) answered.

    A request that was sent may still have been carried out by the broker.
    """


class RequestTimedOut(ConnectionClosed):
    """No answer came within the request timeout, so the client closed the connection.

    Answers come in request order, so once one is overdue nothing behind it can
    arrive either: every call still pending on that connection fails with this.
    The broker may still have carried the requests out.
    """


@dataclass(frozen=True, slots=True)
class FetchResult:
    """The records of one FetchBatch plus where to continue.

    ``records`` holds only offsets >= the requested one (the first stored batch
    may start earlier); ``next_offset`` is the offset to fetch next.
    """

    records: list[Record]
    log_start: int
    high_watermark: int
    next_offset: int


@dataclass(frozen=True, slots=True)
class ShareRecord:
    """A record a share group gave this member (docs/protocol.md 7.16): acknowledge it
    by ``partition`` and ``record.offset``; ``delivery_count`` is 1 the first time."""

    partition: int
    delivery_count: int
    record: Record


def _error_from(response: p.Response, what: str) -> RustkaError:
    """The exception a non-success response stands for."""
    if isinstance(response, p.Error):
        return BrokerError(response.message)
    if isinstance(response, p.Failure):
        cls = ERRORS_BY_CODE.get(response.code, RustkaError)
        try:
            exc = cls(response.message)
        except TypeError:
            exc = RustkaError(response.message)
        if type(exc) is RustkaError:
            # Keep a code this client does not know, for logs and newer callers.
            exc.code = response.code
        return exc
    if isinstance(response, p.OutOfRange):
        return OffsetOutOfRange(response.offset, response.log_start, response.high_watermark)
    return RustkaError(f"the broker answered {what} with an unexpected {type(response).__name__}")


def _expect(response: p.Response, kind: type[T], what: str) -> T:
    if type(response) is kind:
        return response  # type: ignore[return-value]
    raise _error_from(response, what)


_Pending = tuple[Deferred[Any], Callable[[p.Response], Any]]

_CONNECTING, _OPEN, _CLOSING, _CLOSED = range(4)


class RustkaClientProtocol(LinearInt32StringReceiver):
    """One connection to a broker; see the module docstring.

    ``MAX_LENGTH`` bounds a response frame (default 64 MiB; set it on the
    instance or a subclass). A larger frame cannot be skipped safely, so the
    connection is dropped and every outstanding call fails.
    """

    MAX_LENGTH = 64 * 1024 * 1024

    def __init__(self, clock: Any = None, request_timeout: float | None = None) -> None:
        """``request_timeout`` (seconds, needs ``clock``): how long a call may wait for its
        answer, plus the long-poll wait it asked for; None waits for ever."""
        super().__init__()
        if request_timeout is not None and (clock is None or request_timeout <= 0):
            raise ValueError("request_timeout needs a clock and a positive number of seconds")
        self._clock = clock
        self.request_timeout = request_timeout
        # the deadline of each pending call, in order; never decreasing (see _watch)
        self._deadlines: deque[float] = deque()
        self._timer: Any = None
        self._pending: deque[_Pending] = deque()
        self._state = _CONNECTING
        self._close_reason: str | None = None
        self._close_waiters: list[Deferred[None]] = []
        self._aborted = False
        # Where a call with nothing in flight is written: the socket at once (a plain
        # TCP transport, rustka.eager_write), else the transport (set on connect).
        self._first_out: Any = None
        # The next re-authentication (KIP-368 style session lifetime), if one is due.
        self._reauth: Any = None
        self.logins = 0
        self.reauthentication: Deferred[int] | None = None
        """The re-authentication under way or last made (for callers that must know)."""

    # -- connection lifecycle ------------------------------------------------

    def connectionMade(self) -> None:
        self._state = _OPEN
        self._first_out = writer_for(self.transport)
        # Requests are small and latency-bound; Nagle would hold them back.
        # TLS wrappers forward the attribute to the TCP transport underneath.
        set_no_delay = getattr(self.transport, "setTcpNoDelay", None)
        if set_no_delay is not None:
            # UNIX sockets have no Nagle algorithm to turn off.
            with contextlib.suppress(OSError):
                set_no_delay(True)

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self._state = _CLOSED
        if self._reauth is not None and self._reauth.active():
            self._reauth.cancel()
        self.discard_buffer()
        self._deadlines.clear()
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        why = self._close_reason or (
            reason.getErrorMessage() if reason is not None else "connection lost"
        )
        pending, self._pending = self._pending, deque()
        for d, _ in pending:
            d.errback(ConnectionClosed(f"the connection closed before the broker answered: {why}"))
        waiters, self._close_waiters = self._close_waiters, []
        for waiter in waiters:
            waiter.callback(None)

    @property
    def is_open(self) -> bool:
        """True while calls can be made (connected, and close() not called)."""
        return self._state == _OPEN

    @property
    def pending(self) -> int:
        """Calls sent and not yet answered."""
        return len(self._pending)

    def close(self) -> Deferred[None]:
        """Disconnect; fires when the connection is gone.

        Calls made afterwards fail at once; calls still unanswered fail with
        ConnectionClosed (await them first if their results matter).
        """
        if self._state in (_CONNECTING, _CLOSED):
            self._state = _CLOSED
            return defer.succeed(None)
        d: Deferred[None] = Deferred()
        self._close_waiters.append(d)
        if self._state == _OPEN:
            self._state = _CLOSING
            self._close_reason = "the client closed the connection"
            self.transport.loseConnection()
        return d

    def _drop(self, reason: str) -> None:
        """Abandon a stream that can no longer be trusted to stay in step."""
        if self._state in (_OPEN, _CLOSING) and not self._aborted:
            self._aborted = True
            self._state = _CLOSING
            self._close_reason = reason
            self.transport.abortConnection()

    # -- receiving -----------------------------------------------------------

    def framing_paused(self) -> bool:
        return self._aborted or self._state == _CLOSED

    def lengthLimitExceeded(self, length: int) -> None:
        self._drop(
            f"the broker sent a frame of {length} bytes, over this client's MAX_LENGTH of "
            f"{self.MAX_LENGTH} bytes"
        )

    def stringReceived(self, string: bytes) -> None:
        if not self._pending:
            self._drop("the broker sent a response to no request")
            return
        d, convert = self._pending.popleft()
        if self._deadlines:
            self._deadlines.popleft()
        try:
            result = convert(p.decode_response(string))
        except Exception:
            d.errback()
        else:
            d.callback(result)

    # -- sending -------------------------------------------------------------

    def _call(self, request: p.Request, convert: Callable[[p.Response], T]) -> Deferred[T]:
        if self._state != _OPEN:
            why = self._close_reason or (
                "the client is not connected yet"
                if self._state == _CONNECTING
                else "the connection is closed"
            )
            return defer.fail(ConnectionClosed(why))
        try:
            parts = p.request_parts(request)
        except (ValueError, TypeError) as exc:
            return defer.fail(InvalidRequest(f"cannot encode {type(request).__name__}: {exc}"))
        size = sum(len(part) for part in parts)
        if size > _MAX_FRAME:
            return defer.fail(
                InvalidRequest(f"a {size}-byte request does not fit in one frame (max 4 GiB)")
            )
        d: Deferred[T] = Deferred()
        self._pending.append((d, convert))
        if self.request_timeout is not None:
            self._watch(getattr(request, "max_wait_ms", 0))
        # A call with nothing ahead of it (one request, one answer) leaves in this call
        # rather than on the reactor's next pass; pipelined calls go to the transport,
        # which sends what queued up in one write per pass.
        out = self._first_out if len(self._pending) == 1 else self.transport
        if len(parts) == 1:
            out.write(_LENGTH.pack(size) + parts[0])
        else:
            out.writeSequence([_LENGTH.pack(size), *parts])
        return d

    def _watch(self, wait_ms: int) -> None:
        """Give the call just queued a deadline, and make sure a timer looks at the oldest.

        Answers come in order, so a call cannot be answered before the one ahead
        of it: each deadline is at least the previous one, and one timer on the
        oldest pending call covers them all.
        """
        assert self.request_timeout is not None
        deadline = self._clock.seconds() + self.request_timeout + wait_ms / 1000
        if self._deadlines and self._deadlines[-1] > deadline:
            deadline = self._deadlines[-1]
        self._deadlines.append(deadline)
        if self._timer is None or not self._timer.active():
            self._timer = self._clock.callLater(deadline - self._clock.seconds(), self._check)

    def _check(self) -> None:
        self._timer = None
        if not self._deadlines or self._state not in (_OPEN, _CLOSING):
            return
        late = self._clock.seconds() - self._deadlines[0]
        if late < 0:
            self._timer = self._clock.callLater(-late, self._check)
            return
        error = RequestTimedOut(
            f"no answer from the broker within {self.request_timeout:g} s "
            "(plus any long-poll wait); the connection was closed"
        )
        pending, self._pending = self._pending, deque()
        self._deadlines.clear()
        self._drop(str(error))
        for d, _ in pending:
            d.errback(error)

    # -- seed operations -----------------------------------------------------

    def produce(self, topic: str, key: bytes, value: bytes) -> Deferred[tuple[int, int]]:
        """Append one record; fires with (partition, offset)."""

        def done(response: p.Response) -> tuple[int, int]:
            produced = _expect(response, p.Produced, "Produce")
            return produced.partition, produced.offset

        return self._call(p.Produce(topic, key, value), done)

    def fetch(self, topic: str, partition: int, offset: int) -> Deferred[Record | None]:
        """The record at ``offset``, or None when the partition has nothing there yet."""

        def done(response: p.Response) -> Record | None:
            if type(response) is p.NotFound:
                return None
            found = _expect(response, p.FetchedRecord, "Fetch")
            return Record(key=found.key, value=found.value, offset=found.offset)

        return self._call(p.Fetch(topic, partition, offset), done)

    def commit(self, group: str, topic: str, partition: int, offset: int) -> Deferred[None]:
        """Durably record ``offset`` as the next offset ``group`` will read."""

        def done(response: p.Response) -> None:
            _expect(response, p.CommitOk, "Commit")

        return self._call(p.Commit(group, topic, partition, offset), done)

    def committed(self, group: str, topic: str, partition: int) -> Deferred[int | None]:
        """The group's committed offset, or None if it never committed there."""

        def done(response: p.Response) -> int | None:
            if type(response) is p.NotFound:
                return None
            return _expect(response, p.Offset, "OffsetFetch").offset

        return self._call(p.OffsetFetch(group, topic, partition), done)

    # -- authentication (docs/protocol.md, 7.12) -------------------------------

    def authenticate(
        self, user: str, password: str, mechanism: str = "SCRAM-SHA-256"
    ) -> Deferred[int]:
        """Authenticate on a listener that requires it; fires with the session lifetime
        in ms (0: none), after which the client must authenticate again.

        SCRAM proves the broker knows the credential too: a wrong server signature
        fails the call and drops the connection. A refusal is AuthenticationFailed
        (the broker then closes the connection).
        """
        return defer.ensureDeferred(self._authenticate(user, password, mechanism))

    async def _authenticate(self, user: str, password: str, mechanism: str) -> int:
        def token(response: p.Response) -> p.SaslToken:
            return _expect(response, p.SaslToken, "SaslAuthenticate")

        if mechanism == "PLAIN":
            plain = b"\0" + user.encode() + b"\0" + password.encode()
            done = await self._call(p.SaslAuthenticate(mechanism, plain), token)
        else:
            if mechanism not in MECHANISMS:
                raise AuthenticationFailed(f"unsupported SASL mechanism {mechanism!r}")
            scram = ScramClient(MECHANISMS[mechanism], user, password)
            first = await self._call(p.SaslAuthenticate(mechanism, scram.first()), token)
            try:
                final = scram.final(bytes(first.token))
            except ScramError as e:
                self._drop(f"SCRAM: {e}")
                raise AuthenticationFailed(f"SCRAM: {e}") from None
            done = await self._call(p.SaslContinue(final), token)
            try:
                scram.verify(bytes(done.token))
            except ScramError as e:
                self._drop(f"SCRAM: {e}")
                raise AuthenticationFailed(f"SCRAM: {e}") from None
        if not done.complete:
            self._drop("the broker did not complete the SASL exchange")
            raise AuthenticationFailed("the broker did not complete the SASL exchange")
        self.logins += 1
        lifetime = int(done.session_lifetime_ms)
        if lifetime and self._clock is not None and self._state == _OPEN:
            # Log in again before the session ends (at 85% of it, as librdkafka does
            # within its 85-95% window), so a long-lived connection is never cut off.
            self._reauth = self._clock.callLater(
                lifetime * 0.85 / 1000, self._reauthenticate, user, password, mechanism
            )
        return lifetime

    def _reauthenticate(self, user: str, password: str, mechanism: str) -> None:
        if self._state != _OPEN:
            return
        d = self.reauthentication = self.authenticate(user, password, mechanism)
        # A refusal closes the connection (the broker hangs up); the calls in flight
        # fail with ConnectionClosed, which is how the application hears of it.
        d.addErrback(self._reauthentication_failed)

    def _reauthentication_failed(self, failure: Failure) -> None:
        self._drop(f"re-authentication failed: {failure.value}")

    # -- extensions ----------------------------------------------------------

    def hello(
        self, version: int = p.PROTOCOL_VERSION, client: str = CLIENT_NAME
    ) -> Deferred[Welcome]:
        """Learn the broker's name, the common protocol version and the usable ops."""
        return self._call(p.Hello(version, client), lambda r: _expect(r, p.Welcome, "Hello"))

    def produce_batch(
        self,
        topic: str,
        partition: int,
        records: Sequence[Record] | bytes | bytearray | memoryview,
    ) -> Deferred[tuple[int, int]]:
        """Append records (or ready-made RecordBatch v2 bytes) to one partition.

        Fires with the (base_offset, last_offset) the broker assigned, inclusive.
        """
        if isinstance(records, (bytes, bytearray, memoryview)):
            data: bytes | bytearray | memoryview = records
        else:
            try:
                data = encode_batch(list(records))
            except RustkaError as exc:
                return defer.fail(exc)

        def done(response: p.Response) -> tuple[int, int]:
            produced = _expect(response, p.BatchProduced, "ProduceBatch")
            return produced.base_offset, produced.last_offset

        return self._call(p.ProduceBatch(topic, partition, data), done)

    def fetch_batch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
        max_wait_ms: int = 0,
    ) -> Deferred[FetchResult]:
        """Records from ``offset`` on, waiting up to ``max_wait_ms`` at the end of the log.

        Every batch's CRC-32C is verified (CorruptBatch otherwise). A long wait
        holds up the calls queued behind it on this connection.
        """

        def done(response: p.Response) -> FetchResult:
            result = _expect(response, p.Batches, "FetchBatch")
            return _unpack_batches(result, offset)

        return self._call(p.FetchBatch(topic, partition, offset, max_bytes, max_wait_ms), done)

    def metadata(self, topics: Sequence[str] = ()) -> Deferred[list[TopicMetadata]]:
        """Partition bounds of the named topics, or of every topic when none are named."""

        def done(response: p.Response) -> list[TopicMetadata]:
            return list(_expect(response, p.MetadataResult, "Metadata").topics)

        return self._call(p.Metadata(tuple(topics)), done)

    def describe_logs(self, topics: Sequence[str] = ()) -> Deferred[list[TopicLogs]]:
        """Each partition's log (bounds, bytes, segments) and what the log cleaner knows
        of it, for the named topics or every topic (docs/protocol.md, DescribeLogs)."""

        def done(response: p.Response) -> list[TopicLogs]:
            return list(_expect(response, p.LogsDescribed, "DescribeLogs").topics)

        return self._call(p.DescribeLogs(tuple(topics)), done)

    def create_topic(
        self, topic: str, partitions: int, configs: Mapping[str, str] | None = None
    ) -> Deferred[int]:
        """Create a topic, with configs of its own (Kafka topic configs) if ``configs``;
        fires with its partition count. A bad config fails with InvalidConfig naming it."""

        def done(response: p.Response) -> int:
            return _expect(response, p.TopicInfo, "CreateTopic").partitions

        if configs:
            pairs = tuple(p.ConfigValue(k, v) for k, v in configs.items())
            return self._call(p.CreateTopicWithConfigs(topic, partitions, pairs), done)
        return self._call(p.CreateTopic(topic, partitions), done)

    def alter_topic_configs(
        self,
        topic: str,
        set: Mapping[str, str] | None = None,
        delete: Sequence[str] = (),
        *,
        validate_only: bool = False,
    ) -> Deferred[list[TopicConfig]]:
        """Set and delete some of a topic's own configs (deleted ones go back to the
        broker's); fires with every config of the topic as it now is (or would be,
        with ``validate_only``)."""

        def done(response: p.Response) -> list[TopicConfig]:
            return list(_expect(response, p.TopicConfigs, "AlterTopicConfigs").configs)

        pairs = tuple(p.ConfigValue(k, v) for k, v in (set or {}).items())
        request = p.AlterTopicConfigs(topic, pairs, tuple(delete), int(validate_only))
        return self._call(request, done)

    def describe_topic_configs(self, topic: str) -> Deferred[list[TopicConfig]]:
        """Every config of a topic, by name, with its source (``p.CONFIG_SOURCES``)."""

        def done(response: p.Response) -> list[TopicConfig]:
            return list(_expect(response, p.TopicConfigs, "DescribeTopicConfigs").configs)

        return self._call(p.DescribeTopicConfigs(topic), done)

    def delete_records(self, topic: str, partition: int, before: int) -> Deferred[int]:
        """Delete the records below offset ``before`` (-1: every record up to the high
        watermark) by moving the partition's log start; fires with it once durable. Past
        the high watermark is OffsetOutOfRange with the bounds; the start never moves
        back (docs/protocol.md, DeleteRecords)."""

        def done(response: p.Response) -> int:
            return _expect(response, p.LogStart, "DeleteRecords").log_start

        offset = p.HIGH_WATERMARK if before == -1 else before
        return self._call(p.DeleteRecords(topic, partition, offset), done)

    def create_acls(self, acls: Sequence[AclBinding]) -> Deferred[list[AclBinding]]:
        """Add ACLs, all or none (an invalid one fails the call, naming it); fires with
        those added."""

        def done(response: p.Response) -> list[AclBinding]:
            return [p.acl_binding(e) for e in _expect(response, p.Acls, "CreateAcls").acls]

        return self._call(p.CreateAcls(tuple(p.acl_entry(a) for a in acls)), done)

    def describe_acls(self, selector: AclBindingFilter | None = None) -> Deferred[list[AclBinding]]:
        """The ACLs ``selector`` selects (all of them without one)."""

        def done(response: p.Response) -> list[AclBinding]:
            return [p.acl_binding(e) for e in _expect(response, p.Acls, "DescribeAcls").acls]

        return self._call(p.DescribeAcls(*_filter_fields(selector)), done)

    def delete_acls(self, selector: AclBindingFilter) -> Deferred[list[AclBinding]]:
        """Remove every ACL ``selector`` selects; fires with those removed."""

        def done(response: p.Response) -> list[AclBinding]:
            return [p.acl_binding(e) for e in _expect(response, p.Acls, "DeleteAcls").acls]

        return self._call(p.DeleteAcls(*_filter_fields(selector)), done)

    # -- transactions, the operator's view (docs/protocol.md 7.15) ----------------

    def list_transactions(
        self, states: Sequence[str] = (), producer_ids: Sequence[int] = ()
    ) -> Deferred[list[p.ListedTransaction]]:
        """Every transactional id the coordinator knows, by id; only those in one of
        ``states`` (Kafka's names: Ongoing, CompleteCommit, ...) or of one of
        ``producer_ids`` when given. An unknown state name fails the call."""

        def done(response: p.Response) -> list[p.ListedTransaction]:
            return list(_expect(response, p.Transactions, "ListTransactions").transactions)

        return self._call(p.ListTransactions(tuple(states), tuple(producer_ids)), done)

    def describe_transaction(self, transactional_id: str) -> Deferred[p.TransactionDescribed]:
        """One transactional id: state, producer, timeout, start, partitions and groups
        (TransactionalIdNotFound if the coordinator does not know it)."""

        def done(response: p.Response) -> p.TransactionDescribed:
            return _expect(response, p.TransactionDescribed, "DescribeTransaction")

        return self._call(p.DescribeTransaction(transactional_id), done)

    def abort_transaction(self, transactional_id: str) -> Deferred[p.TransactionAborted]:
        """Abort the id's open transaction, fencing its producer; fires with what was
        aborted. InvalidTxnState if none is open, TransactionalIdNotFound if unknown."""

        def done(response: p.Response) -> p.TransactionAborted:
            return _expect(response, p.TransactionAborted, "AbortTransaction")

        return self._call(p.AbortTransaction(transactional_id), done)

    def describe_stable_offsets(
        self, topics: Sequence[str] = ()
    ) -> Deferred[list[p.TopicStableOffsets]]:
        """Each partition's last stable offset, high watermark and open transactions,
        for the named topics or every topic."""

        def done(response: p.Response) -> list[p.TopicStableOffsets]:
            return list(_expect(response, p.StableOffsets, "DescribeStableOffsets").topics)

        return self._call(p.DescribeStableOffsets(tuple(topics)), done)

    def share_fetch(
        self,
        group: str,
        member: str,
        topic: str,
        max_records: int,
        max_wait_ms: int = 0,
        start: int = 0,
    ) -> Deferred[list[ShareRecord]]:
        """Up to ``max_records`` records of ``topic`` locked for ``member`` of share group
        ``group`` (ShareFetch, docs/protocol.md 7.16), in partition and offset order;
        an empty list if none came within ``max_wait_ms``. Batch CRCs are verified."""

        def done(response: p.Response) -> list[ShareRecord]:
            answer = _expect(response, p.ShareRecords, "ShareFetch")
            return [r for part in answer.partitions for r in _acquired_records(part)]

        return self._call(p.ShareFetch(group, member, topic, max_records, max_wait_ms, start), done)

    def share_acknowledge(
        self, group: str, member: str, topic: str, acks: Sequence[tuple[int, int, int]]
    ) -> Deferred[dict[int, int]]:
        """Acknowledge ``(partition, offset, kind)`` records (1 accept, 2 release,
        3 reject); fires once durable with each partition's code (0, or 25 for a
        record the member does not hold)."""

        def done(response: p.Response) -> dict[int, int]:
            answer = _expect(response, p.ShareAcknowledged, "ShareAcknowledge")
            return {r.partition: r.code for r in answer.results}

        acked = tuple(p.ShareAck(*a) for a in acks)
        return self._call(p.ShareAcknowledge(group, member, topic, acked), done)

    def share_leave(self, group: str, member: str) -> Deferred[None]:
        """Release what ``member`` holds and has not acknowledged (ShareLeave)."""

        def done(response: p.Response) -> None:
            _expect(response, p.ShareLeft, "ShareLeave")

        return self._call(p.ShareLeave(group, member), done)

    def describe_share_group(self, group: str) -> Deferred[p.ShareGroupDescribed]:
        """A share group's members and each started partition's in-flight window."""

        def done(response: p.Response) -> p.ShareGroupDescribed:
            return _expect(response, p.ShareGroupDescribed, "DescribeShareGroup")

        return self._call(p.DescribeShareGroup(group), done)

    def alter_share_group_offsets(
        self, group: str, offsets: Sequence[tuple[str, int, int]]
    ) -> Deferred[None]:
        """Restart ``(topic, partition, offset)`` partitions of an idle share group."""

        def done(response: p.Response) -> None:
            _expect(response, p.ShareOffsetsAltered, "AlterShareGroupOffsets")

        entries = tuple(p.ShareOffset(*o) for o in offsets)
        return self._call(p.AlterShareGroupOffsets(group, entries), done)

    def delete_share_group_offsets(self, group: str, topics: Sequence[str] = ()) -> Deferred[None]:
        """Forget an idle share group's state for ``topics``, or the whole group."""

        def done(response: p.Response) -> None:
            _expect(response, p.ShareOffsetsDeleted, "DeleteShareGroupOffsets")

        return self._call(p.DeleteShareGroupOffsets(group, tuple(topics)), done)

    def alter_topic(self, topic: str, partitions: int) -> Deferred[int]:
        """Raise a topic's partition count; fires with the new count."""

        def done(response: p.Response) -> int:
            return _expect(response, p.TopicInfo, "AlterTopic").partitions

        return self._call(p.AlterTopic(topic, partitions), done)

    def delete_topic(self, topic: str) -> Deferred[None]:
        """Delete a topic and all its data; fires once it is gone (UnknownTopic if it was not)."""

        def done(response: p.Response) -> None:
            _expect(response, p.TopicDeleted, "DeleteTopic")

        return self._call(p.DeleteTopic(topic), done)

    def list_groups(self) -> Deferred[list[str]]:
        """Every group with a committed offset, in name order."""

        def done(response: p.Response) -> list[str]:
            return list(_expect(response, p.Groups, "ListGroups").groups)

        return self._call(p.ListGroups(), done)

    def describe_group(self, group: str) -> Deferred[list[GroupOffset]]:
        """A group's committed offsets with each partition's bounds (see GroupOffset.lag)."""

        def done(response: p.Response) -> list[GroupOffset]:
            return list(_expect(response, p.GroupOffsets, "DescribeGroup").offsets)

        return self._call(p.DescribeGroup(group), done)


_LOG_APPEND_TIME = 0x08
"""The timestamp-type attribute bit of a batch header."""


def _unpack_batches(result: p.Batches, offset: int) -> FetchResult:
    """Decode every batch (CRC-checked), dropping records before ``offset``.

    A fetch of a few MiB builds tens of thousands of Record tuples at once;
    see `rustka.allocation` for why the cyclic collector waits meanwhile.
    """
    data = result.batches
    records: list[Record] = []
    next_offset = offset
    pos = 0
    total = len(data)
    with collector_paused():
        while pos < total:
            header = parse_header(data, pos)
            batch = decode_records(data, pos, min_offset=offset)
            if header.attributes & _LOG_APPEND_TIME:
                # Every record of a LogAppendTime batch has the broker's stamp, as a
                # Kafka consumer reads it (docs/kafka.md, "Topic configs").
                stamp = header.max_timestamp
                batch = [r._replace(timestamp=stamp) for r in batch]
            records.extend(batch)
            next_offset = max(next_offset, header.next_offset)
            pos += header.size
    return FetchResult(records, result.log_start, result.high_watermark, next_offset)


def _acquired_records(part: p.SharePartitionRecords) -> list[ShareRecord]:
    """The records of a ShareRecords partition that lie in its acquired ranges: the
    batches may hold others, which are not this member's."""
    data = part.batches
    ranges = part.acquired
    out: list[ShareRecord] = []
    pos = 0
    while pos < len(data):
        header = parse_header(data, pos)
        for r in ranges:
            if r.first <= header.last_offset and header.base_offset <= r.last:
                break
        else:
            pos += header.size
            continue
        stamp = header.max_timestamp if header.attributes & _LOG_APPEND_TIME else None
        for record in decode_records(data, pos):
            offset = record.offset
            for r in ranges:
                if r.first <= offset <= r.last:
                    if stamp is not None:
                        record = record._replace(timestamp=stamp)
                    out.append(ShareRecord(part.partition, r.delivery_count, record))
                    break
        pos += header.size
    return out


# --------------------------------------------------------------------------- connecting


def _host_port(address: str) -> tuple[str, int]:
    """Split "HOST:PORT", "HOST", "[V6]:PORT" or a bare IPv6 address."""
    text = address.strip()
    host, port_text = text, ""
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise RustkaError(f"invalid broker address {address!r}: missing ']'")
        host, rest = text[1:close], text[close + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise RustkaError(f"invalid broker address {address!r}")
            port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    if not host:
        raise RustkaError(f"invalid broker address {address!r}: no host")
    if not port_text:
        return host, DEFAULT_PORT
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise RustkaError(f"invalid broker address {address!r}: port must be 1-65535")
    return host, int(port_text)


def client_endpoint(reactor: Any, broker: str, timeout: float) -> IStreamClientEndpoint:
    """The endpoint for ``broker`` as `connect` reads it; for clients of other protocols too."""
    text = broker.strip()
    if "=" in text or text.startswith(_ENDPOINT_PREFIXES):
        try:
            return clientFromString(reactor, text)
        except (ValueError, TypeError, KeyError, IndexError, ImportError) as exc:
            raise RustkaError(f"invalid broker endpoint {broker!r}: {exc}") from exc
    host, port = _host_port(text)
    return HostnameEndpoint(reactor, host, port, timeout=timeout)


async def connect(
    reactor: Any,
    broker: str,
    *,
    timeout: float = 10,
    request_timeout: float | None = None,
    user: str | None = None,
    password: str | None = None,
    mechanism: str = "SCRAM-SHA-256",
) -> RustkaClientProtocol:
    """Connect to ``broker``: "HOST:PORT" (port defaults to 9092) or an endpoint string.

    Endpoint strings ("tcp:host=h:port=p", "ssl:...", "unix:path=...") go to
    Twisted's clientFromString, which is how TLS and UNIX sockets are reached.
    A refused or timed-out connection raises BrokerUnavailable. With
    ``request_timeout`` (seconds) a call that gets no answer in that time, plus
    the long-poll wait it asked for, fails with RequestTimedOut and the
    connection is closed; by default calls wait as long as the connection lives.
    With ``user`` (and ``password``) the connection authenticates first
    (`RustkaClientProtocol.authenticate`); a refusal raises AuthenticationFailed.
    """
    endpoint = client_endpoint(reactor, broker, timeout)
    d = connectProtocol(endpoint, RustkaClientProtocol(reactor, request_timeout))
    d.addTimeout(timeout, reactor)
    try:
        proto: RustkaClientProtocol = await d
    except defer.TimeoutError as exc:
        raise BrokerUnavailable(f"could not connect to {broker} within {timeout} s") from exc
    except (ConnectError, OSError) as exc:
        raise BrokerUnavailable(f"could not connect to {broker}: {exc}") from exc
    if user is not None:
        try:
            await proto.authenticate(user, password or "", mechanism)
        except BaseException:
            await proto.close()
            raise
    return proto


def _filter_fields(selector: AclBindingFilter | None) -> tuple[int, str, int, str, str, int, int]:
    """A filter in the native ops' fields: "" for any name, principal or host."""
    f = selector or AclBindingFilter()
    return (
        int(f.resource_type),
        f.resource_name or "",
        int(f.pattern_type),
        f.principal or "",
        f.host or "",
        int(f.operation),
        int(f.permission),
    )
