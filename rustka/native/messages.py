"""Every native op's request and response, field by field, as docs/protocol.md specifies.

One class per message: its annotations are its fields in wire order, ``OP`` or ``TAG``
its code; ``@request``/``@response`` (rustka/native/wire.py) derive its codecs. Adding
an op is one class here plus its handler; no table needs editing. Import these through
rustka.native.codec, which also holds the entry points.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, TypeAlias

from rustka.errors import InvalidRequest
from rustka.native.wire import (
    U64,
    Array,
    Bytes,
    OpCodes,
    RecordBatches,
    Str,
    StrArray,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    item,
    request,
    response,
)
from rustka.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    code_of,
)

PROTOCOL_VERSION = 2
"""Version 1 is the seed protocol (ops 1-4); version 2 adds the extensions (ops 5 and up)."""

MIN_PROTOCOL_VERSION = 1


# --------------------------------------------------------------------------- requests


@request
class Produce:
    """Op 1: append one record; the broker picks the partition from the key."""

    OP: ClassVar[int] = 1
    topic: Str
    key: Bytes
    value: Bytes


@request
class Fetch:
    """Op 2: read the single record at ``offset``."""

    OP: ClassVar[int] = 2
    topic: Str
    partition: UInt32
    offset: UInt64


@request
class Commit:
    """Op 3: remember ``offset`` as the next offset ``group`` will read."""

    OP: ClassVar[int] = 3
    group: Str
    topic: Str
    partition: UInt32
    offset: UInt64


@request
class OffsetFetch:
    """Op 4: ask for a group's committed offset."""

    OP: ClassVar[int] = 4
    group: Str
    topic: Str
    partition: UInt32


@request
class Hello:
    """Op 5: version handshake; optional, and it changes nothing about the connection."""

    OP: ClassVar[int] = 5
    version: UInt32
    client: Str


@request
class ProduceBatch:
    """Op 6: append client-built RecordBatch v2 bytes to one partition."""

    OP: ClassVar[int] = 6
    topic: Str
    partition: UInt32
    batches: RecordBatches


@request
class FetchBatch:
    """Op 7: read whole stored batches from ``offset``, long-polling at the end of the log."""

    OP: ClassVar[int] = 7
    topic: Str
    partition: UInt32
    offset: UInt64
    max_bytes: UInt32
    max_wait_ms: UInt32


@request
class Metadata:
    """Op 8: partition bounds of the named topics (all topics when ``topics`` is empty)."""

    OP: ClassVar[int] = 8
    topics: StrArray = ()


@request
class CreateTopic:
    """Op 9: create a topic with an explicit partition count."""

    OP: ClassVar[int] = 9
    topic: Str
    partitions: UInt32


@request
class AlterTopic:
    """Op 10: raise a topic's partition count (keys may move, as in Kafka)."""

    OP: ClassVar[int] = 10
    topic: Str
    partitions: UInt32


@request
class ListGroups:
    """Op 11: names of every group with at least one committed offset."""

    OP: ClassVar[int] = 11


@request
class DescribeGroup:
    """Op 12: a group's committed offsets next to the partition bounds, for lag."""

    OP: ClassVar[int] = 12
    group: Str


@request
class DeleteTopic:
    """Op 13: delete a topic with all its partitions and data (Kafka's DeleteTopics)."""

    OP: ClassVar[int] = 13
    topic: Str


@request
class DescribeLogs:
    """Op 14: each partition's log and what the log cleaner knows of it (all topics when
    ``topics`` is empty)."""

    OP: ClassVar[int] = 14
    topics: StrArray = ()


@item
class ConfigValue:
    """One topic config as a client sets it: a Kafka topic config name and its value."""

    name: Str
    value: Str


ConfigValues: TypeAlias = Annotated[tuple[ConfigValue, ...], Array(ConfigValue)]


@request
class CreateTopicWithConfigs:
    """Op 15: create a topic with configs of its own (Kafka topic configs)."""

    OP: ClassVar[int] = 15
    topic: Str
    partitions: UInt32
    configs: ConfigValues


@request
class AlterTopicConfigs:
    """Op 16: set and delete some of a topic's own configs, or (``validate_only`` 1) only
    check the change."""

    OP: ClassVar[int] = 16
    topic: Str
    set: ConfigValues
    delete: StrArray
    validate_only: UInt8


@request
class DescribeTopicConfigs:
    """Op 17: every config of a topic, with where its value comes from."""

    OP: ClassVar[int] = 17
    topic: Str


@request
class SaslAuthenticate:
    """Op 18: begin a SASL exchange (or a re-authentication) with its first message."""

    OP: ClassVar[int] = 18
    mechanism: Str
    token: Bytes


@request
class SaslContinue:
    """Op 19: the client's next message of the exchange op 18 began."""

    OP: ClassVar[int] = 19
    token: Bytes


@item
class AclEntry:
    """One ACL, with Kafka's codes (docs/security.md, "Authorization (ACLs)"):
    resource_type 2 topic, 3 group, 4 cluster, 5 transactional id; pattern_type 3
    literal, 4 prefixed; operation 2 all … 12 idempotent write; permission 2 deny,
    3 allow."""

    resource_type: UInt8
    resource_name: Str
    pattern_type: UInt8
    principal: Str
    host: Str
    operation: UInt8
    permission: UInt8


AclEntries: TypeAlias = Annotated[tuple[AclEntry, ...], Array(AclEntry)]


@request
class CreateAcls:
    """Op 24: add ACLs, all or none (an invalid one is code 2 and nothing is stored)."""

    OP: ClassVar[int] = 24
    acls: AclEntries


@request
class DescribeAcls:
    """Op 25: the ACLs a filter selects: codes 1 (any) and "" (any) match every
    value of a field; pattern_type 2 (match) selects every pattern that covers the name."""

    OP: ClassVar[int] = 25
    resource_type: UInt8
    resource_name: Str
    pattern_type: UInt8
    principal: Str
    host: Str
    operation: UInt8
    permission: UInt8


@request
class DeleteAcls:
    """Op 26: remove every ACL a filter (as DescribeAcls') selects."""

    OP: ClassVar[int] = 26
    resource_type: UInt8
    resource_name: Str
    pattern_type: UInt8
    principal: Str
    host: Str
    operation: UInt8
    permission: UInt8


HIGH_WATERMARK = 0xFFFF_FFFF_FFFF_FFFF
"""DeleteRecords' ``offset`` meaning the high watermark (Kafka's -1)."""


@request
class DeleteRecords:
    """Op 27: move a partition's log start up to ``offset`` (Kafka's DeleteRecords);
    `HIGH_WATERMARK` moves it to the high watermark."""

    OP: ClassVar[int] = 27
    topic: Str
    partition: UInt32
    offset: UInt64


# Transactions, the operator's view (docs/protocol.md 7.15): Kafka's ListTransactions,
# DescribeTransactions and kafka-transactions.sh abort, and each partition's last stable
# offset. Ops 20-23 stay free: they are the codec tests' example of an unknown op.

U64Array: TypeAlias = Annotated[tuple[int, ...], Array(U64)]


@request
class ListTransactions:
    """Op 28: every transactional id the coordinator knows, optionally only those in one
    of ``states`` (Kafka's state names) or of one of ``producer_ids`` (empty: any)."""

    OP: ClassVar[int] = 28
    states: StrArray = ()
    producer_ids: U64Array = ()


@request
class DescribeTransaction:
    """Op 29: one transactional id's state, producer, timeout, partitions and groups."""

    OP: ClassVar[int] = 29
    transactional_id: Str


@request
class AbortTransaction:
    """Op 30: abort the id's open transaction as its timeout would, fencing its producer."""

    OP: ClassVar[int] = 30
    transactional_id: Str


@request
class DescribeStableOffsets:
    """Op 31: each partition's last stable offset and the transactions open on it (all
    topics when ``topics`` is empty)."""

    OP: ClassVar[int] = 31
    topics: StrArray = ()


@request
class ShareFetch:
    """Op 32: take up to ``max_records`` records of a topic for one member of a share
    group (a queue consumer, docs/protocol.md 7.16), waiting up to ``max_wait_ms`` for
    some. ``start`` says where a partition the group never read starts: 0 the group's
    setting (Kafka's ``share.auto.offset.reset``, latest unless set), 1 earliest,
    2 latest."""

    OP: ClassVar[int] = 32
    group: Str
    member: Str
    topic: Str
    max_records: UInt32
    max_wait_ms: UInt32
    start: UInt8 = 0


@item
class ShareAck:
    """One record's acknowledgement: 1 accept, 2 release (deliver again), 3 reject."""

    partition: UInt32
    offset: UInt64
    kind: UInt8


@request
class ShareAcknowledge:
    """Op 33: acknowledge records a ShareFetch gave this member."""

    OP: ClassVar[int] = 33
    group: Str
    member: Str
    topic: Str
    acks: Annotated[tuple[ShareAck, ...], Array(ShareAck)]


@request
class ShareLeave:
    """Op 34: the member stops; every record it holds and has not acknowledged is
    released at once (its delivery counted), instead of when its lock runs out."""

    OP: ClassVar[int] = 34
    group: Str
    member: Str


@request
class DescribeShareGroup:
    """Op 35: a share group's members and each started partition's in-flight window."""

    OP: ClassVar[int] = 35
    group: Str


@item
class ShareOffset:
    """Where one partition of a share group starts again."""

    topic: Str
    partition: UInt32
    offset: UInt64


@request
class AlterShareGroupOffsets:
    """Op 36: restart partitions of a share group at the given offsets (Kafka's
    AlterShareGroupOffsets): their in-flight state is dropped. Refused while the group
    has members or a worker holds records."""

    OP: ClassVar[int] = 36
    group: Str
    offsets: Annotated[tuple[ShareOffset, ...], Array(ShareOffset)]


@request
class DeleteShareGroupOffsets:
    """Op 37: forget a share group's state for these topics, or the whole group when
    ``topics`` is empty (Kafka's DeleteShareGroupOffsets and DeleteGroups); refused as
    AlterShareGroupOffsets is."""

    OP: ClassVar[int] = 37
    group: Str
    topics: StrArray = ()


# --------------------------------------------------------------------------- responses


@response
class Produced:
    """Tag 1: where a Produce landed."""

    TAG: ClassVar[int] = 1
    partition: UInt32
    offset: UInt64


@response
class FetchedRecord:
    """Tag 2 (``Record`` in docs/protocol.md, section 5): the answer to a Fetch that found data."""

    TAG: ClassVar[int] = 2
    WIRE_NAME: ClassVar[str] = "Record"
    offset: UInt64
    key: Bytes
    value: Bytes


@response
class NotFound:
    """Tag 3: Fetch at/after the end, or OffsetFetch with no commit."""

    TAG: ClassVar[int] = 3


@response
class Error:
    """Tag 4: any failure of ops 1-4, and any frame that could not be parsed."""

    TAG: ClassVar[int] = 4
    message: Str


@response
class CommitOk:
    """Tag 5: the commit is durable."""

    TAG: ClassVar[int] = 5


@response
class Offset:
    """Tag 6: a group's committed offset."""

    TAG: ClassVar[int] = 6
    offset: UInt64


@response
class Welcome:
    """Tag 7: the broker's answer to Hello."""

    TAG: ClassVar[int] = 7
    version: UInt32
    broker: Str
    ops: OpCodes


@response
class BatchProduced:
    """Tag 8: the offsets a ProduceBatch was given (inclusive range)."""

    TAG: ClassVar[int] = 8
    partition: UInt32
    base_offset: UInt64
    last_offset: UInt64


@response
class Batches:
    """Tag 9: stored batches, byte for byte; may be empty at the high watermark."""

    TAG: ClassVar[int] = 9
    log_start: UInt64
    high_watermark: UInt64
    batches: RecordBatches


@item
class PartitionMetadata:
    """The bounds of one partition; its index is its position in ``TopicMetadata.partitions``."""

    log_start: UInt64
    high_watermark: UInt64


@item
class TopicMetadata:
    """One topic of a MetadataResult, its partitions in partition order."""

    name: Str
    partitions: Annotated[tuple[PartitionMetadata, ...], Array(PartitionMetadata)]


@response
class MetadataResult:
    """Tag 10: the answer to Metadata."""

    TAG: ClassVar[int] = 10
    topics: Annotated[tuple[TopicMetadata, ...], Array(TopicMetadata)]


@response
class TopicInfo:
    """Tag 11: a topic's partition count after CreateTopic or AlterTopic."""

    TAG: ClassVar[int] = 11
    topic: Str
    partitions: UInt32


@response
class Groups:
    """Tag 12: the answer to ListGroups."""

    TAG: ClassVar[int] = 12
    groups: StrArray


@item
class GroupOffset:
    """One committed offset with the partition's bounds, so lag needs no second request."""

    topic: Str
    partition: UInt32
    committed: UInt64
    log_start: UInt64
    high_watermark: UInt64

    @property
    def lag(self) -> int:
        """Records the group has yet to read; never negative even if the log was rewound."""
        return max(0, self.high_watermark - max(self.committed, self.log_start))


@response
class GroupOffsets:
    """Tag 13: the answer to DescribeGroup."""

    TAG: ClassVar[int] = 13
    group: Str
    offsets: Annotated[tuple[GroupOffset, ...], Array(GroupOffset)]


@response
class Failure:
    """Tag 14: a failed extension op, with the machine-readable code from rustka.errors."""

    TAG: ClassVar[int] = 14
    code: UInt16
    message: Str


@response
class OutOfRange:
    """Tag 15: FetchBatch outside [log_start, high_watermark]; the bounds allow a reset."""

    TAG: ClassVar[int] = 15
    offset: UInt64
    log_start: UInt64
    high_watermark: UInt64


@response
class TopicDeleted:
    """Tag 16: the answer to DeleteTopic; the topic and its data are gone."""

    TAG: ClassVar[int] = 16
    topic: Str


@item
class LogInfo:
    """One partition of a LogsDescribed topic, in partition order.

    ``dirty_ratio_ppm`` is the share of the log not cleaned yet, in parts per
    million, as the cleaner last measured it (0 on a log that does not
    compact); ``last_clean_ms`` is 0 until a round finished; ``uncleanable`` is
    why the cleaner gave up on the partition, "" when it has not.
    """

    log_start: UInt64
    high_watermark: UInt64
    size_bytes: UInt64
    segments: UInt32
    dirty_ratio_ppm: UInt32
    first_dirty: UInt64
    cleaner_bytes_read: UInt64
    cleaner_bytes_written: UInt64
    last_clean_ms: UInt64
    uncleanable: Str


@item
class TopicLogs:
    """One topic of a LogsDescribed: its cleanup.policy and its partitions' logs."""

    name: Str
    cleanup_policy: Str
    partitions: Annotated[tuple[LogInfo, ...], Array(LogInfo)]


@response
class LogsDescribed:
    """Tag 17: the answer to DescribeLogs."""

    TAG: ClassVar[int] = 17
    topics: Annotated[tuple[TopicLogs, ...], Array(TopicLogs)]


CONFIG_SOURCES: tuple[str, ...] = ("default", "broker", "topic")
"""``TopicConfig.source`` codes: Kafka's default, a broker setting, the topic's own config."""


@item
class TopicConfig:
    """One config of a TopicConfigs answer; ``source`` indexes CONFIG_SOURCES."""

    name: Str
    value: Str
    source: UInt8


@response
class TopicConfigs:
    """Tag 18: a topic's configs, by name (the answer to AlterTopicConfigs and
    DescribeTopicConfigs; after an alter, the configs as they now are)."""

    TAG: ClassVar[int] = 18
    topic: Str
    configs: Annotated[tuple[TopicConfig, ...], Array(TopicConfig)]


@response
class SaslToken:
    """Tag 19: the server's SASL message; ``complete`` 1 once the client is authenticated,
    with the session lifetime (0: none) after which it must authenticate again."""

    TAG: ClassVar[int] = 19
    token: Bytes
    complete: UInt8
    session_lifetime_ms: UInt64


@response
class Acls:
    """Tag 24: ACLs: those created, selected or deleted, in a stable order."""

    TAG: ClassVar[int] = 24
    acls: AclEntries


@response
class LogStart:
    """Tag 25: the answer to DeleteRecords: the partition's log start, now durable."""

    TAG: ClassVar[int] = 25
    topic: Str
    partition: UInt32
    log_start: UInt64


NO_TIME = 0
"""``start_ms`` of a transactional id with no transaction begun (Kafka's -1)."""


@item
class ListedTransaction:
    """One transactional id of a Transactions answer; ``start_ms`` is when its current
    (or last) transaction began, NO_TIME if none has."""

    transactional_id: Str
    producer_id: UInt64
    producer_epoch: UInt16
    state: Str
    timeout_ms: UInt32
    start_ms: UInt64


@response
class Transactions:
    """Tag 26: the answer to ListTransactions, by transactional id."""

    TAG: ClassVar[int] = 26
    transactions: Annotated[tuple[ListedTransaction, ...], Array(ListedTransaction)]


@item
class TxnPartition:
    """A partition of a transaction."""

    topic: Str
    partition: UInt32


TxnPartitions: TypeAlias = Annotated[tuple[TxnPartition, ...], Array(TxnPartition)]


@response
class TransactionDescribed:
    """Tag 27: the answer to DescribeTransaction; ``groups`` are those whose offsets the
    transaction commits (AddOffsetsToTxn)."""

    TAG: ClassVar[int] = 27
    transactional_id: Str
    state: Str
    producer_id: UInt64
    producer_epoch: UInt16
    timeout_ms: UInt32
    start_ms: UInt64
    last_update_ms: UInt64
    partitions: TxnPartitions
    groups: StrArray


@response
class TransactionAborted:
    """Tag 28: what AbortTransaction ended: the producer, the epoch its abort markers
    carry (which fences the producer), the state it ended in and its partitions."""

    TAG: ClassVar[int] = 28
    transactional_id: Str
    producer_id: UInt64
    producer_epoch: UInt16
    state: Str
    partitions: TxnPartitions


@item
class OpenTransaction:
    """A transaction a partition holds open: its producer and where its records begin."""

    producer_id: UInt64
    producer_epoch: UInt16
    first_offset: UInt64


@item
class StableOffset:
    """One partition of a StableOffsets topic, in partition order."""

    last_stable_offset: UInt64
    high_watermark: UInt64
    open: Annotated[tuple[OpenTransaction, ...], Array(OpenTransaction)]


@item
class TopicStableOffsets:
    """One topic of a StableOffsets answer."""

    name: Str
    partitions: Annotated[tuple[StableOffset, ...], Array(StableOffset)]


@response
class StableOffsets:
    """Tag 29: the answer to DescribeStableOffsets."""

    TAG: ClassVar[int] = 29
    topics: Annotated[tuple[TopicStableOffsets, ...], Array(TopicStableOffsets)]


@item
class AcquiredRange:
    """Records ``first``..``last`` (inclusive) are this member's, delivered for the
    ``delivery_count``-th time."""

    first: UInt64
    last: UInt64
    delivery_count: UInt16


@item
class SharePartitionRecords:
    """One partition of a ShareRecords answer: the stored batches holding the acquired
    records, byte for byte, and which of their records were acquired (a batch may hold
    records that are not this member's)."""

    partition: UInt32
    batches: Bytes
    acquired: Annotated[tuple[AcquiredRange, ...], Array(AcquiredRange)]


@response
class ShareRecords:
    """Tag 30: the answer to ShareFetch; no partitions when nothing came in time."""

    TAG: ClassVar[int] = 30
    partitions: Annotated[tuple[SharePartitionRecords, ...], Array(SharePartitionRecords)]


@item
class ShareAckResult:
    """A partition's acknowledgements: code 0, or 25 (InvalidRecordState) for the first
    that named a record this member does not hold; those after it were not applied."""

    partition: UInt32
    code: UInt16


@response
class ShareAcknowledged:
    """Tag 31: the answer to ShareAcknowledge, one result per partition named."""

    TAG: ClassVar[int] = 31
    results: Annotated[tuple[ShareAckResult, ...], Array(ShareAckResult)]


@response
class ShareLeft:
    """Tag 32: the answer to ShareLeave."""

    TAG: ClassVar[int] = 32


@item
class TopicPartition:
    """One partition of a topic."""

    topic: Str
    partition: UInt32


@item
class ShareMember:
    """A member that joined by ShareGroupHeartbeat (Kafka's share consumers), with its
    epoch and assignment; native workers (op 32) hold records without joining."""

    member_id: Str
    member_epoch: UInt32
    assignment: Annotated[tuple[TopicPartition, ...], Array(TopicPartition)]


@item
class SharePartitionWindow:
    """A started share-partition: the in-flight window ``start_offset`` to
    ``end_offset`` (exclusive; below the start everything is done) and how many of its
    records are available, acquired (locked for a member), acknowledged and archived."""

    topic: Str
    partition: UInt32
    start_offset: UInt64
    end_offset: UInt64
    available: UInt32
    acquired: UInt32
    acknowledged: UInt32
    archived: UInt32


@response
class ShareOffsetsAltered:
    """Tag 34: the answer to AlterShareGroupOffsets, once durable."""

    TAG: ClassVar[int] = 34


@response
class ShareOffsetsDeleted:
    """Tag 35: the answer to DeleteShareGroupOffsets, once durable."""

    TAG: ClassVar[int] = 35


@response
class ShareGroupDescribed:
    """Tag 33: the answer to DescribeShareGroup; state "Dead" for a group unknown here."""

    TAG: ClassVar[int] = 33
    group: Str
    state: Str
    group_epoch: UInt32
    members: Annotated[tuple[ShareMember, ...], Array(ShareMember)]
    partitions: Annotated[tuple[SharePartitionWindow, ...], Array(SharePartitionWindow)]


# --------------------------------------------------------------------------- ACL entries
# Between the wire's AclEntry and rustka.security.acl's bindings, for the server and
# the client library alike.


def acl_binding(e: AclEntry) -> AclBinding:
    return AclBinding(
        code_of(ResourceType, e.resource_type),
        e.resource_name,
        code_of(PatternType, e.pattern_type),
        e.principal,
        e.host,
        code_of(Operation, e.operation),
        code_of(Permission, e.permission),
    )


def acl_entry(a: AclBinding) -> AclEntry:
    return AclEntry(
        int(a.resource_type),
        a.resource_name,
        int(a.pattern_type),
        a.principal,
        a.host,
        int(a.operation),
        int(a.permission),
    )


def acl_selector(req: DescribeAcls | DeleteAcls) -> AclBindingFilter:
    """The filter of a DescribeAcls or DeleteAcls: "" matches any name, principal or
    host; InvalidRequest if a code matches nothing."""
    selector = AclBindingFilter(
        code_of(ResourceType, req.resource_type),
        req.resource_name or None,
        code_of(PatternType, req.pattern_type),
        req.principal or None,
        req.host or None,
        code_of(Operation, req.operation),
        code_of(Permission, req.permission),
    )
    try:
        selector.validate()
    except AclError as e:
        raise InvalidRequest(str(e)) from None
    return selector
