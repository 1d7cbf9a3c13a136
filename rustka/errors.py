"""Errors that cross module boundaries.

Each error carries a stable numeric ``code`` so the extension responses of the
wire protocol can tell a client *what* went wrong without it parsing prose; the
seed operations (1-4) only ever see the message, through tag 4 ``Error``.
"""

from __future__ import annotations


class RustkaError(Exception):
    """Base class: a failure the broker reports to the client instead of crashing."""

    code: int = 1

    @property
    def message(self) -> str:
        return str(self)


class InvalidRequest(RustkaError):
    """A frame that cannot be parsed: unknown op, truncated field, trailing bytes."""

    code = 2


class InvalidName(RustkaError):
    """A topic or group name that could escape the data dir or is reserved."""

    code = 3


class UnknownTopic(RustkaError):
    code = 4


class UnknownPartition(RustkaError):
    code = 5


class OffsetOutOfRange(RustkaError):
    """The requested offset was deleted by retention (or lies beyond the end).

    Carries the bounds so a consumer can reset without a second round trip.
    """

    code = 6

    def __init__(self, offset: int, log_start: int, end: int) -> None:
        self.offset = offset
        self.log_start = log_start
        self.end = end
        super().__init__(
            f"offset {offset} is out of range: the earliest available offset is "
            f"{log_start} and the end offset is {end}"
        )


class CorruptBatch(RustkaError):
    """Stored bytes failed their CRC-32C: never served, always logged."""

    code = 7


class InvalidBatch(RustkaError):
    """A client-supplied record batch is malformed or fails its checksum."""

    code = 8


class TopicExists(RustkaError):
    code = 9


class InvalidPartitionCount(RustkaError):
    code = 10


class BrokerUnavailable(RustkaError):
    """The broker is shutting down or its storage failed; retry elsewhere or later."""

    code = 11


class HeldElsewhere(BrokerUnavailable):
    """In a cluster, the topic is a local topic of another broker: Metadata sends its
    clients there (Kafka's NOT_LEADER_OR_FOLLOWER, which makes a client refresh it)."""


class RecordTooLarge(RustkaError):
    code = 12


class StorageError(RustkaError):
    """The disk refused a write (full, read-only, I/O error); nothing was acknowledged."""

    code = 13


class OffsetLost(RustkaError):
    """A single-record read of an offset the log holds no record for.

    Below the end offset but stored nowhere: the log cleaner removed the record
    (a later one has its key, docs/kafka.md "Log compaction"), or it was lost
    with a torn or corrupt segment (docs/reliability.md). ``next_offset`` is
    the first offset stored after the gap, where a reader can carry on. Not in
    ERRORS_BY_CODE, like OffsetOutOfRange, because it is built from numbers.
    """

    code = 14

    def __init__(self, offset: int, next_offset: int) -> None:
        self.offset = offset
        self.next_offset = next_offset
        super().__init__(
            f"offset {offset} holds no record (removed by log compaction or lost in crash "
            f"recovery); the next stored offset is {next_offset}"
        )


class OutOfOrderSequence(RustkaError):
    """An idempotent producer's batch does not continue its sequence (a gap or a reorder)."""

    code = 15


class ProducerFenced(RustkaError):
    """An idempotent producer wrote with an epoch older than one the log has seen."""

    code = 16


class GroupHasActiveMembers(RustkaError):
    """A native commit or offset fetch, or an offset reset, aimed at a group Kafka members drive.

    Their assignment owns the group's partitions: offsets written beside them would
    be overwritten by the members' next commit or would move a running consumer,
    so the broker refuses, as Kafka refuses a commit from a non-member and
    ``kafka-consumer-groups --reset-offsets`` refuses an active group
    (docs/kafka.md, "Consumer groups"). Built from a message so a client can
    rebuild it from a ``Failure``; `for_group` writes the broker's wording.
    """

    code = 17

    @classmethod
    def for_group(cls, group: str, members: int) -> GroupHasActiveMembers:
        return cls(
            f"group {group!r} has {members} active Kafka consumer(s); its offsets change "
            f"only through its members' commits until they leave the group"
        )


class InvalidConfig(RustkaError):
    """A topic config that is unknown or whose value its declaration refuses.

    The message names the config, in Kafka's words (rustka/config.py, Kafka's
    INVALID_CONFIG; docs/kafka.md, "Topic configs").
    """

    code = 18


class PolicyViolation(RustkaError):
    """A request a topic's configs forbid: DeleteRecords on a topic that only compacts.

    Kafka refuses it with POLICY_VIOLATION: without cleanup.policy ``delete``
    the log start is the cleaner's, not a client's (docs/kafka.md, "DeleteRecords").
    """

    code = 19


class NotAuthorized(RustkaError):
    """The connection's principal may not do this: no ACL allows it, or one denies it
    (docs/security.md, "Authorization (ACLs)"). Kafka's *_AUTHORIZATION_FAILED."""

    code = 20


class AuthenticationRequired(RustkaError):
    """The listener requires authentication and the connection has not (or no longer
    has) authenticated: only Hello and the SASL ops are served (docs/protocol.md, 7.12)."""

    code = 21


class AuthenticationFailed(RustkaError):
    """The SASL exchange failed: wrong credentials, an unknown user or mechanism, or a
    malformed message. The connection is closed after the answer."""

    code = 22


class InvalidTxnState(RustkaError):
    """A transactional request the transaction's state does not allow (Kafka's
    INVALID_TXN_STATE), e.g. a transactional batch for a partition the transaction
    did not add (docs/kafka.md, "Transactions"), or an operator's abort of an id with
    no open transaction (docs/protocol.md 7.15). The subclasses are Kafka's other
    transaction errors; they share the code, since only the Kafka front-end, which
    maps each to its own Kafka error, tells them apart."""

    code = 23


class InvalidProducerIdMapping(InvalidTxnState):
    """The transactional id is unknown, or belongs to another producer id."""


class ConcurrentTransactions(InvalidTxnState):
    """The transaction is still being completed; the client retries."""


class InvalidTransactionTimeout(InvalidTxnState):
    """transaction.timeout.ms above the broker's maximum, or not positive."""


class TransactionalIdNotFound(RustkaError):
    """An operator named a transactional id the coordinator does not know (Kafka's
    TRANSACTIONAL_ID_NOT_FOUND; docs/protocol.md 7.15)."""

    code = 24


class InvalidRecordState(RustkaError):
    """A share-group acknowledgement of a record the member does not hold (never given
    to it, already acknowledged, or its lock ran out): Kafka's INVALID_RECORD_STATE
    (docs/protocol.md 7.16)."""

    code = 25


ERRORS_BY_CODE: dict[int, type[RustkaError]] = {
    cls.code: cls
    for cls in (
        RustkaError,
        InvalidRequest,
        InvalidName,
        UnknownTopic,
        UnknownPartition,
        CorruptBatch,
        InvalidBatch,
        TopicExists,
        InvalidPartitionCount,
        BrokerUnavailable,
        RecordTooLarge,
        StorageError,
        OutOfOrderSequence,
        ProducerFenced,
        GroupHasActiveMembers,
        InvalidConfig,
        PolicyViolation,
        NotAuthorized,
        AuthenticationRequired,
        AuthenticationFailed,
        InvalidTxnState,
        TransactionalIdNotFound,
        InvalidRecordState,
    )
}
