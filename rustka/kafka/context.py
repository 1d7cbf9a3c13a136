"""What a Kafka handler gets besides its request body, and what every handler shares.

A handler (`rustka.kafka.handlers`, `rustka.kafka.group_handlers`) is called
with a `RequestContext`, the API version and the decoded body. The context
names the connection and the front-end by the small `Connection` and `Server`
protocols below, not by the server's classes, so the handlers and the server
that calls them do not depend on each other, not even for type checking:
`rustka.kafka.server` implements both protocols and imports the handlers
(through `rustka.kafka.apis`), never the other way round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

from twisted.internet import defer
from twisted.python.failure import Failure

from rustka import errors
from rustka.kafka.errors import ErrorCode as E
from rustka.kafka.schema import RequestHeader
from rustka.record.batch import CorruptMessage, InvalidTimestamp
from rustka.security.principal import Principal

if TYPE_CHECKING:
    from rustka.broker.core import Broker
    from rustka.config import Config
    from rustka.security.session import Authenticator

__all__ = [
    "Body",
    "Connection",
    "Handler",
    "RequestContext",
    "Server",
    "advertised_address",
    "error_code",
]

Body: TypeAlias = dict[str, Any]
"""A request or response body in the dict shape of `rustka.kafka.messages`."""

Handler: TypeAlias = Callable[
    ["RequestContext", int, Body], "Body | defer.Deferred[Body | None] | None"
]
"""``handler(ctx, version, body)``: the response body, a Deferred of it, or None when
Kafka sends no response (Produce with acks=0)."""


@runtime_checkable
class Connection(Protocol):
    """What a handler may use of the connection its request came on."""

    transport: Any
    """Its addresses: ``getHost()`` (the address the client reached), ``getPeer()``."""

    software: tuple[str, str] | None
    """The client's software name and version, as ApiVersions v3+ tells them."""

    principal: Principal
    """Who the connection acts as: User:ANONYMOUS until (or without) authentication."""

    def close_after_answers(self, why: str) -> None:
        """Hang up once the requests in flight are answered (a failed acks=0 Produce)."""

    def answer_early(self, header: RequestHeader, body: Body) -> None:
        """From an I/O thread: send the answer to the request ``header`` now if nothing
        is ahead of it; otherwise the handler's result answers it on the reactor."""


@runtime_checkable
class Server(Protocol):
    """What a handler may use of the front-end that serves it."""

    broker: Broker
    config: Config
    reactor: Any
    authenticator: Authenticator
    """The credential store, mechanisms and failure handling every connection shares."""

    def advertised_versions(self) -> list[tuple[int, int, int]]:
        """(key, min, max) of every API served, for ApiVersions."""


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a handler may know about the request besides its body."""

    factory: Server
    connection: Connection
    header: RequestHeader

    @property
    def broker(self) -> Broker:
        return self.factory.broker

    @property
    def principal(self) -> str:
        """The connection's principal as ACLs name it ("User:alice")."""
        return str(self.connection.principal)


def advertised_address(ctx: RequestContext) -> tuple[str, int]:
    """The host:port clients must reconnect to: configured, else the one they reached."""
    config = ctx.factory.config
    host = getattr(config, "advertised_host", None)
    port = getattr(config, "advertised_port", None)
    local = ctx.connection.transport.getHost()
    if not host:
        host = getattr(local, "host", "127.0.0.1")
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
    if not port:
        port = getattr(local, "port", 9092)
    return str(host), int(port)


def error_code(failure_or_exc: Failure | BaseException) -> int:
    """Kafka's error code for a core error (the mapping of docs/kafka.md, "Errors")."""
    exc = failure_or_exc.value if isinstance(failure_or_exc, Failure) else failure_or_exc
    for cls, code in _ERROR_MAP:
        if isinstance(exc, cls):
            return code
    return E.UNKNOWN_SERVER_ERROR


def _error_map() -> list[tuple[type[BaseException], int]]:
    """Most specific classes first: the first match wins."""
    return [
        (errors.UnknownTopic, E.UNKNOWN_TOPIC_OR_PARTITION),
        (errors.UnknownPartition, E.UNKNOWN_TOPIC_OR_PARTITION),
        (errors.OffsetOutOfRange, E.OFFSET_OUT_OF_RANGE),
        (CorruptMessage, E.CORRUPT_MESSAGE),
        (errors.CorruptBatch, E.CORRUPT_MESSAGE),
        (errors.RecordTooLarge, E.MESSAGE_TOO_LARGE),
        (errors.OutOfOrderSequence, E.OUT_OF_ORDER_SEQUENCE_NUMBER),
        (errors.ProducerFenced, E.INVALID_PRODUCER_EPOCH),
        (errors.InvalidProducerIdMapping, E.INVALID_PRODUCER_ID_MAPPING),
        (errors.ConcurrentTransactions, E.CONCURRENT_TRANSACTIONS),
        (errors.InvalidTransactionTimeout, E.INVALID_TRANSACTION_TIMEOUT),
        (errors.InvalidTxnState, E.INVALID_TXN_STATE),
        (InvalidTimestamp, E.INVALID_TIMESTAMP),
        (errors.InvalidBatch, E.INVALID_RECORD),
        (errors.TopicExists, E.TOPIC_ALREADY_EXISTS),
        (errors.InvalidPartitionCount, E.INVALID_PARTITIONS),
        (errors.InvalidName, E.INVALID_TOPIC_EXCEPTION),
        (errors.InvalidConfig, E.INVALID_CONFIG),
        (errors.PolicyViolation, E.POLICY_VIOLATION),
        (errors.StorageError, E.KAFKA_STORAGE_ERROR),
        (errors.BrokerUnavailable, E.NOT_LEADER_OR_FOLLOWER),
        (errors.InvalidRequest, E.INVALID_REQUEST),
    ]


_ERROR_MAP = _error_map()
