"""Byte-exact vectors, round trips and malformed input for the native wire codec.

Every vector is written out by hand, field by field, from docs/protocol.md, so
the codec is checked against the documented layout rather than against itself.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from rustka.errors import (
    InvalidBatch,
    InvalidRequest,
    OffsetOutOfRange,
    RustkaError,
    TopicExists,
    UnknownTopic,
)
from rustka.native.codec import (
    EXTENSION_OPS,
    MESSAGES,
    PROTOCOL_VERSION,
    SEED_OPS,
    AbortTransaction,
    AclEntry,
    Acls,
    AcquiredRange,
    AlterShareGroupOffsets,
    AlterTopic,
    AlterTopicConfigs,
    Batches,
    BatchProduced,
    Commit,
    CommitOk,
    ConfigValue,
    CreateAcls,
    CreateTopic,
    CreateTopicWithConfigs,
    DeleteAcls,
    DeleteRecords,
    DeleteShareGroupOffsets,
    DeleteTopic,
    DescribeAcls,
    DescribeGroup,
    DescribeLogs,
    DescribeShareGroup,
    DescribeStableOffsets,
    DescribeTopicConfigs,
    DescribeTransaction,
    Error,
    Failure,
    Fetch,
    FetchBatch,
    FetchedRecord,
    GroupOffset,
    GroupOffsets,
    Groups,
    Hello,
    ListedTransaction,
    ListGroups,
    ListTransactions,
    LogInfo,
    LogsDescribed,
    LogStart,
    Metadata,
    MetadataResult,
    NotFound,
    Offset,
    OffsetFetch,
    OpenTransaction,
    OutOfRange,
    PartitionMetadata,
    Produce,
    ProduceBatch,
    Produced,
    SaslAuthenticate,
    SaslContinue,
    SaslToken,
    ShareAck,
    ShareAcknowledge,
    ShareAcknowledged,
    ShareAckResult,
    ShareFetch,
    ShareGroupDescribed,
    ShareLeave,
    ShareLeft,
    ShareMember,
    ShareOffset,
    ShareOffsetsAltered,
    ShareOffsetsDeleted,
    SharePartitionRecords,
    SharePartitionWindow,
    ShareRecords,
    StableOffset,
    StableOffsets,
    TopicConfig,
    TopicConfigs,
    TopicDeleted,
    TopicInfo,
    TopicLogs,
    TopicMetadata,
    TopicPartition,
    TopicStableOffsets,
    TransactionAborted,
    TransactionDescribed,
    Transactions,
    TxnPartition,
    Welcome,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    error_response,
    request_frame,
    request_parts,
    response_frame,
    response_parts,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"

ORDERS = "00000006 6f7264657273"
ANALYTICS = "00000009 616e616c7974696373"
EVENTS = "00000006 6576656e7473"
USER_1 = "00000006 757365722d31"
PLACED_ORDER = "0000000c 706c61636564206f72646572"
PAYMENTS_1 = "0000000a 7061796d656e74732d31"
ONGOING = "00000007 4f6e676f696e67"
WORKERS = "00000007 776f726b657273"
MEMBER_A = "00000001 61"

# One RecordBatch v2 holding key "k", value "v" at timestamp 1700000000000 (docs 7.2).
BATCH_HEX = (
    "0000000000000000 0000003a ffffffff 02 e99b8dd8 0000 00000000"
    " 0000018bcfe56800 0000018bcfe56800 ffffffffffffffff ffff ffffffff 00000001"
    " 10 00 00 00 02 6b 02 76 00"
)
BATCH = bytes.fromhex(BATCH_HEX)
BATCH_AT_42 = bytes.fromhex("000000000000002a") + BATCH[8:]


@dataclass(frozen=True)
class Vector:
    """A message and its payload, as (field name, hex) pieces in wire order."""

    message: object
    fields: tuple[tuple[str, str], ...]
    flat: bool = True  # no counts: every truncation point names exactly one field

    @property
    def payload(self) -> bytes:
        return bytes.fromhex("".join(hex_ for _, hex_ in self.fields))

    @property
    def name(self) -> str:
        return type(self.message).__name__


REQUESTS = [
    Vector(
        Produce("orders", b"user-1", b"placed order"),
        (("op", "01"), ("topic", ORDERS), ("key", USER_1), ("value", PLACED_ORDER)),
    ),
    Vector(
        Fetch("orders", 2, 0),
        (("op", "02"), ("topic", ORDERS), ("partition", "00000002"), ("offset", "00" * 8)),
    ),
    Vector(
        Commit("analytics", "orders", 2, 5),
        (
            ("op", "03"),
            ("group", ANALYTICS),
            ("topic", ORDERS),
            ("partition", "00000002"),
            ("offset", "0000000000000005"),
        ),
    ),
    Vector(
        OffsetFetch("analytics", "orders", 2),
        (("op", "04"), ("group", ANALYTICS), ("topic", ORDERS), ("partition", "00000002")),
    ),
    Vector(
        Hello(2, "rustka-py"),
        (("op", "05"), ("version", "00000002"), ("client", "00000009 727573746b612d7079")),
    ),
    Vector(
        ProduceBatch("orders", 0, BATCH),
        (
            ("op", "06"),
            ("topic", ORDERS),
            ("partition", "00000000"),
            ("batches", "00000046 " + BATCH_HEX),
        ),
    ),
    Vector(
        FetchBatch("orders", 0, 42, 1048576, 500),
        (
            ("op", "07"),
            ("topic", ORDERS),
            ("partition", "00000000"),
            ("offset", "000000000000002a"),
            ("max_bytes", "00100000"),
            ("max_wait_ms", "000001f4"),
        ),
    ),
    Vector(
        Metadata(("orders",)),
        (("op", "08"), ("topics", "00000001"), ("topics[0]", ORDERS)),
        flat=False,
    ),
    Vector(Metadata(()), (("op", "08"), ("topics", "00000000")), flat=False),
    Vector(
        CreateTopic("events", 6),
        (("op", "09"), ("topic", EVENTS), ("partitions", "00000006")),
    ),
    Vector(
        AlterTopic("events", 8),
        (("op", "0a"), ("topic", EVENTS), ("partitions", "00000008")),
    ),
    Vector(ListGroups(), (("op", "0b"),)),
    Vector(DescribeGroup("analytics"), (("op", "0c"), ("group", ANALYTICS))),
    Vector(DeleteTopic("events"), (("op", "0d"), ("topic", EVENTS))),
    Vector(
        DescribeLogs(("orders",)),
        (("op", "0e"), ("topics", "00000001"), ("topics[0]", ORDERS)),
        flat=False,
    ),
    Vector(
        CreateTopicWithConfigs("events", 6, (ConfigValue("cleanup.policy", "compact"),)),
        (
            ("op", "0f"),
            ("topic", EVENTS),
            ("partitions", "00000006"),
            ("configs", "00000001"),
            ("configs[0].name", "0000000e 636c65616e75702e706f6c696379"),
            ("configs[0].value", "00000007 636f6d70616374"),
        ),
        flat=False,
    ),
    Vector(
        AlterTopicConfigs("events", (ConfigValue("retention.ms", "-1"),), ("segment.bytes",), 0),
        (
            ("op", "10"),
            ("topic", EVENTS),
            ("set", "00000001"),
            ("set[0].name", "0000000c 726574656e74696f6e2e6d73"),
            ("set[0].value", "00000002 2d31"),
            ("delete", "00000001"),
            ("delete[0]", "0000000d 7365676d656e742e6279746573"),
            ("validate_only", "00"),
        ),
        flat=False,
    ),
    Vector(DescribeTopicConfigs("events"), (("op", "11"), ("topic", EVENTS))),
    Vector(
        SaslAuthenticate("PLAIN", b"\x00alice\x00pw"),
        (
            ("op", "12"),
            ("mechanism", "00000005 504c41494e"),
            ("token", "00000009 00616c696365007077"),
        ),
    ),
    Vector(
        SaslContinue(b"c=biws,r=abc,p=cHJvb2Y="),
        (("op", "13"), ("token", "00000017 633d626977732c723d6162632c703d63484a766232593d")),
    ),
    Vector(
        CreateAcls((AclEntry(2, "orders", 4, "User:a", "*", 4, 3),)),
        (
            ("op", "18"),
            ("acls", "00000001"),
            ("acls[0].resource_type", "02"),
            ("acls[0].resource_name", "00000006 6f7264657273"),
            ("acls[0].pattern_type", "04"),
            ("acls[0].principal", "00000006 557365723a61"),
            ("acls[0].host", "00000001 2a"),
            ("acls[0].operation", "04"),
            ("acls[0].permission", "03"),
        ),
        flat=False,
    ),
    Vector(
        DescribeAcls(2, "orders", 2, "", "", 1, 1),
        (
            ("op", "19"),
            ("resource_type", "02"),
            ("resource_name", "00000006 6f7264657273"),
            ("pattern_type", "02"),
            ("principal", "00000000"),
            ("host", "00000000"),
            ("operation", "01"),
            ("permission", "01"),
        ),
    ),
    Vector(
        DeleteAcls(1, "", 1, "User:a", "", 3, 2),
        (
            ("op", "1a"),
            ("resource_type", "01"),
            ("resource_name", "00000000"),
            ("pattern_type", "01"),
            ("principal", "00000006 557365723a61"),
            ("host", "00000000"),
            ("operation", "03"),
            ("permission", "02"),
        ),
    ),
    Vector(
        DeleteRecords("orders", 2, 100),
        (
            ("op", "1b"),
            ("topic", "00000006 6f7264657273"),
            ("partition", "00000002"),
            ("offset", "0000000000000064"),
        ),
    ),
    Vector(
        ListTransactions(("Ongoing",), (4000,)),
        (
            ("op", "1c"),
            ("states", "00000001"),
            ("states[0]", ONGOING),
            ("producer_ids", "00000001"),
            ("producer_ids[0]", "0000000000000fa0"),
        ),
        flat=False,
    ),
    Vector(
        ListTransactions(), (("op", "1c"), ("states", "00000000"), ("producer_ids", "00000000"))
    ),
    Vector(DescribeTransaction("payments-1"), (("op", "1d"), ("transactional_id", PAYMENTS_1))),
    Vector(AbortTransaction("payments-1"), (("op", "1e"), ("transactional_id", PAYMENTS_1))),
    Vector(
        DescribeStableOffsets(("orders",)),
        (("op", "1f"), ("topics", "00000001"), ("topics[0]", ORDERS)),
        flat=False,
    ),
    Vector(
        ShareFetch("workers", "a", "orders", 10, 500, 1),
        (
            ("op", "20"),
            ("group", WORKERS),
            ("member", MEMBER_A),
            ("topic", ORDERS),
            ("max_records", "0000000a"),
            ("max_wait_ms", "000001f4"),
            ("start", "01"),
        ),
    ),
    Vector(
        ShareAcknowledge("workers", "a", "orders", (ShareAck(2, 7, 1), ShareAck(0, 3, 2))),
        (
            ("op", "21"),
            ("group", WORKERS),
            ("member", MEMBER_A),
            ("topic", ORDERS),
            ("acks", "00000002"),
            ("acks[0].partition", "00000002"),
            ("acks[0].offset", "0000000000000007"),
            ("acks[0].kind", "01"),
            ("acks[1].partition", "00000000"),
            ("acks[1].offset", "0000000000000003"),
            ("acks[1].kind", "02"),
        ),
        flat=False,
    ),
    Vector(ShareLeave("workers", "a"), (("op", "22"), ("group", WORKERS), ("member", MEMBER_A))),
    Vector(DescribeShareGroup("workers"), (("op", "23"), ("group", WORKERS))),
    Vector(
        AlterShareGroupOffsets("workers", (ShareOffset("orders", 1, 40),)),
        (
            ("op", "24"),
            ("group", WORKERS),
            ("offsets", "00000001"),
            ("offsets[0].topic", ORDERS),
            ("offsets[0].partition", "00000001"),
            ("offsets[0].offset", "0000000000000028"),
        ),
        flat=False,
    ),
    Vector(
        DeleteShareGroupOffsets("workers", ("orders",)),
        (("op", "25"), ("group", WORKERS), ("topics", "00000001"), ("topics[0]", ORDERS)),
        flat=False,
    ),
]

RESPONSES = [
    Vector(
        Produced(2, 0),
        (("tag", "01"), ("partition", "00000002"), ("offset", "0000000000000000")),
    ),
    Vector(
        FetchedRecord(0, b"user-1", b"placed order"),
        (("tag", "02"), ("offset", "00" * 8), ("key", USER_1), ("value", PLACED_ORDER)),
    ),
    Vector(NotFound(), (("tag", "03"),)),
    Vector(
        Error("unknown op 99"),
        (("tag", "04"), ("message", "0000000d 756e6b6e6f776e206f70203939")),
    ),
    Vector(CommitOk(), (("tag", "05"),)),
    Vector(Offset(5), (("tag", "06"), ("offset", "0000000000000005"))),
    Vector(
        Welcome(2, "rustka 0.1.0", tuple(range(1, 18))),
        (
            ("tag", "07"),
            ("version", "00000002"),
            ("broker", "0000000c 727573746b6120302e312e30"),
            ("ops", "00000011 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10 11"),
        ),
        flat=False,
    ),
    Vector(
        BatchProduced(0, 42, 44),
        (
            ("tag", "08"),
            ("partition", "00000000"),
            ("base_offset", "000000000000002a"),
            ("last_offset", "000000000000002c"),
        ),
    ),
    Vector(
        Batches(0, 43, BATCH_AT_42),
        (
            ("tag", "09"),
            ("log_start", "0000000000000000"),
            ("high_watermark", "000000000000002b"),
            ("batches", "00000046 000000000000002a " + BATCH_HEX[17:]),
        ),
    ),
    Vector(
        Batches(0, 43, b""),
        (
            ("tag", "09"),
            ("log_start", "0000000000000000"),
            ("high_watermark", "000000000000002b"),
            ("batches", "00000000"),
        ),
    ),
    Vector(
        MetadataResult(
            (TopicMetadata("orders", (PartitionMetadata(0, 3), PartitionMetadata(5, 9))),)
        ),
        (
            ("tag", "0a"),
            ("topics", "00000001"),
            ("topics[0].name", ORDERS),
            ("topics[0].partitions", "00000002"),
            ("topics[0].partitions", "0000000000000000 0000000000000003"),
            ("topics[0].partitions", "0000000000000005 0000000000000009"),
        ),
        flat=False,
    ),
    Vector(
        TopicInfo("events", 6),
        (("tag", "0b"), ("topic", EVENTS), ("partitions", "00000006")),
    ),
    Vector(
        Groups(("analytics", "billing")),
        (
            ("tag", "0c"),
            ("groups", "00000002"),
            ("groups[0]", ANALYTICS),
            ("groups[1]", "00000007 62696c6c696e67"),
        ),
        flat=False,
    ),
    Vector(
        GroupOffsets("analytics", (GroupOffset("orders", 2, 5, 0, 9),)),
        (
            ("tag", "0d"),
            ("group", ANALYTICS),
            ("offsets", "00000001"),
            ("offsets[0].topic", ORDERS),
            ("offsets[0].partition", "00000002"),
            ("offsets[0].committed", "0000000000000005"),
            ("offsets[0].log_start", "0000000000000000"),
            ("offsets[0].high_watermark", "0000000000000009"),
        ),
        flat=False,
    ),
    Vector(
        Failure(4, "unknown topic"),
        (("tag", "0e"), ("code", "0004"), ("message", "0000000d 756e6b6e6f776e20746f706963")),
    ),
    Vector(
        OutOfRange(3, 10, 45),
        (
            ("tag", "0f"),
            ("offset", "0000000000000003"),
            ("log_start", "000000000000000a"),
            ("high_watermark", "000000000000002d"),
        ),
    ),
    Vector(TopicDeleted("events"), (("tag", "10"), ("topic", EVENTS))),
    Vector(
        LogStart("orders", 2, 100),
        (
            ("tag", "19"),
            ("topic", "00000006 6f7264657273"),
            ("partition", "00000002"),
            ("log_start", "0000000000000064"),
        ),
    ),
    Vector(
        Transactions(
            (ListedTransaction("payments-1", 4000, 2, "Ongoing", 60_000, 1_700_000_000_000),)
        ),
        (
            ("tag", "1a"),
            ("transactions", "00000001"),
            ("transactions[0].transactional_id", PAYMENTS_1),
            ("transactions[0].producer_id", "0000000000000fa0"),
            ("transactions[0].producer_epoch", "0002"),
            ("transactions[0].state", ONGOING),
            ("transactions[0].timeout_ms", "0000ea60"),
            ("transactions[0].start_ms", "0000018bcfe56800"),
        ),
        flat=False,
    ),
    Vector(
        TransactionDescribed(
            "payments-1",
            "Ongoing",
            4000,
            2,
            60_000,
            1_700_000_000_000,
            1_700_000_000_500,
            (TxnPartition("orders", 0), TxnPartition("orders", 2)),
            ("billing",),
        ),
        (
            ("tag", "1b"),
            ("transactional_id", PAYMENTS_1),
            ("state", ONGOING),
            ("producer_id", "0000000000000fa0"),
            ("producer_epoch", "0002"),
            ("timeout_ms", "0000ea60"),
            ("start_ms", "0000018bcfe56800"),
            ("last_update_ms", "0000018bcfe569f4"),
            ("partitions", "00000002"),
            ("partitions[0].topic", ORDERS),
            ("partitions[0].partition", "00000000"),
            ("partitions[1].topic", ORDERS),
            ("partitions[1].partition", "00000002"),
            ("groups", "00000001"),
            ("groups[0]", "00000007 62696c6c696e67"),
        ),
        flat=False,
    ),
    Vector(
        TransactionAborted(
            "payments-1",
            4000,
            3,
            "CompleteAbort",
            (TxnPartition("orders", 0), TxnPartition("orders", 2)),
        ),
        (
            ("tag", "1c"),
            ("transactional_id", PAYMENTS_1),
            ("producer_id", "0000000000000fa0"),
            ("producer_epoch", "0003"),
            ("state", "0000000d 436f6d706c65746541626f7274"),
            ("partitions", "00000002"),
            ("partitions[0].topic", ORDERS),
            ("partitions[0].partition", "00000000"),
            ("partitions[1].topic", ORDERS),
            ("partitions[1].partition", "00000002"),
        ),
        flat=False,
    ),
    Vector(
        StableOffsets(
            (
                TopicStableOffsets(
                    "orders",
                    (
                        StableOffset(5, 9, (OpenTransaction(4000, 2, 5),)),
                        StableOffset(3, 3, ()),
                    ),
                ),
            )
        ),
        (
            ("tag", "1d"),
            ("topics", "00000001"),
            ("topics[0].name", ORDERS),
            ("topics[0].partitions", "00000002"),
            ("topics[0].partitions[0].last_stable_offset", "0000000000000005"),
            ("topics[0].partitions[0].high_watermark", "0000000000000009"),
            ("topics[0].partitions[0].open", "00000001"),
            ("topics[0].partitions[0].open[0].producer_id", "0000000000000fa0"),
            ("topics[0].partitions[0].open[0].producer_epoch", "0002"),
            ("topics[0].partitions[0].open[0].first_offset", "0000000000000005"),
            ("topics[0].partitions[1].last_stable_offset", "0000000000000003"),
            ("topics[0].partitions[1].high_watermark", "0000000000000003"),
            ("topics[0].partitions[1].open", "00000000"),
        ),
        flat=False,
    ),
    Vector(
        Acls((AclEntry(3, "g", 3, "User:*", "10.0.0.1", 2, 2),)),
        (
            ("tag", "18"),
            ("acls", "00000001"),
            ("acls[0].resource_type", "03"),
            ("acls[0].resource_name", "00000001 67"),
            ("acls[0].pattern_type", "03"),
            ("acls[0].principal", "00000006 557365723a2a"),
            ("acls[0].host", "00000008 31302e302e302e31"),
            ("acls[0].operation", "02"),
            ("acls[0].permission", "02"),
        ),
        flat=False,
    ),
    Vector(
        TopicConfigs(
            "events",
            (
                TopicConfig("cleanup.policy", "compact", 2),
                TopicConfig("retention.ms", "604800000", 0),
            ),
        ),
        (
            ("tag", "12"),
            ("topic", EVENTS),
            ("configs", "00000002"),
            ("configs[0].name", "0000000e 636c65616e75702e706f6c696379"),
            ("configs[0].value", "00000007 636f6d70616374"),
            ("configs[0].source", "02"),
            ("configs[1].name", "0000000c 726574656e74696f6e2e6d73"),
            ("configs[1].value", "00000009 363034383030303030"),
            ("configs[1].source", "00"),
        ),
        flat=False,
    ),
    Vector(
        LogsDescribed(
            (
                TopicLogs(
                    "orders",
                    "compact",
                    (LogInfo(0, 9, 4096, 2, 250_000, 5, 100, 50, 1_700_000_000_000, ""),),
                ),
            )
        ),
        (
            ("tag", "11"),
            ("topics", "00000001"),
            ("topics[0].name", ORDERS),
            ("topics[0].cleanup_policy", "00000007 636f6d70616374"),
            ("topics[0].partitions", "00000001"),
            ("topics[0].partitions[0].log_start", "0000000000000000"),
            ("topics[0].partitions[0].high_watermark", "0000000000000009"),
            ("topics[0].partitions[0].size_bytes", "0000000000001000"),
            ("topics[0].partitions[0].segments", "00000002"),
            ("topics[0].partitions[0].dirty_ratio_ppm", "0003d090"),
            ("topics[0].partitions[0].first_dirty", "0000000000000005"),
            ("topics[0].partitions[0].cleaner_bytes_read", "0000000000000064"),
            ("topics[0].partitions[0].cleaner_bytes_written", "0000000000000032"),
            ("topics[0].partitions[0].last_clean_ms", "0000018bcfe56800"),
            ("topics[0].partitions[0].uncleanable", "00000000"),
        ),
        flat=False,
    ),
    Vector(
        SaslToken(b"v=c2lnbmF0dXJl", 1, 3_600_000),
        (
            ("tag", "13"),
            ("token", "0000000e 763d63326c6e626d463064584a6c"),
            ("complete", "01"),
            ("session_lifetime_ms", "000000000036ee80"),
        ),
    ),
    Vector(
        ShareRecords((SharePartitionRecords(2, b"\xab", (AcquiredRange(7, 8, 1),)),)),
        (
            ("tag", "1e"),
            ("partitions", "00000001"),
            ("partitions[0].partition", "00000002"),
            ("partitions[0].batches", "00000001 ab"),
            ("partitions[0].acquired", "00000001"),
            ("partitions[0].acquired[0].first", "0000000000000007"),
            ("partitions[0].acquired[0].last", "0000000000000008"),
            ("partitions[0].acquired[0].delivery_count", "0001"),
        ),
        flat=False,
    ),
    Vector(
        ShareAcknowledged((ShareAckResult(2, 0), ShareAckResult(0, 25))),
        (
            ("tag", "1f"),
            ("results", "00000002"),
            ("results[0].partition", "00000002"),
            ("results[0].code", "0000"),
            ("results[1].partition", "00000000"),
            ("results[1].code", "0019"),
        ),
        flat=False,
    ),
    Vector(ShareLeft(), (("tag", "20"),)),
    Vector(ShareOffsetsAltered(), (("tag", "22"),)),
    Vector(ShareOffsetsDeleted(), (("tag", "23"),)),
    Vector(
        ShareGroupDescribed(
            "workers",
            "Stable",
            3,
            (ShareMember("a", 2, (TopicPartition("orders", 1),)),),
            (SharePartitionWindow("orders", 1, 40, 45, 1, 2, 1, 1),),
        ),
        (
            ("tag", "21"),
            ("group", WORKERS),
            ("state", "00000006 537461626c65"),
            ("group_epoch", "00000003"),
            ("members", "00000001"),
            ("members[0].member_id", MEMBER_A),
            ("members[0].member_epoch", "00000002"),
            ("members[0].assignment", "00000001"),
            ("members[0].assignment[0].topic", ORDERS),
            ("members[0].assignment[0].partition", "00000001"),
            ("partitions", "00000001"),
            ("partitions[0].topic", ORDERS),
            ("partitions[0].partition", "00000001"),
            ("partitions[0].start_offset", "0000000000000028"),
            ("partitions[0].end_offset", "000000000000002d"),
            ("partitions[0].available", "00000001"),
            ("partitions[0].acquired", "00000002"),
            ("partitions[0].acknowledged", "00000001"),
            ("partitions[0].archived", "00000001"),
        ),
        flat=False,
    ),
]

ALL = [(v, decode_request, encode_request) for v in REQUESTS] + [
    (v, decode_response, encode_response) for v in RESPONSES
]
ALL_IDS = [f"req-{v.name}-{i}" for i, v in enumerate(REQUESTS)] + [
    f"resp-{v.name}-{i}" for i, v in enumerate(RESPONSES)
]


def _field_at(vector: Vector, position: int) -> str:
    """Name of the field that contains byte ``position`` of the vector's payload."""
    start = 0
    for name, hex_ in vector.fields:
        start += len(bytes.fromhex(hex_))
        if position < start:
            return name
    raise AssertionError(f"position {position} is past the end of {vector.name}")


# --------------------------------------------------------------------------- vectors


@pytest.mark.parametrize("vector", REQUESTS, ids=lambda v: v.name)
def test_request_encodes_to_vector(vector: Vector) -> None:
    """Each request encodes to exactly the hand-built bytes."""
    assert encode_request(vector.message) == vector.payload


@pytest.mark.parametrize("vector", REQUESTS, ids=lambda v: v.name)
def test_request_decodes_from_vector(vector: Vector) -> None:
    """Each hand-built request payload decodes to the expected dataclass."""
    assert decode_request(vector.payload) == vector.message


@pytest.mark.parametrize("vector", RESPONSES, ids=lambda v: v.name)
def test_response_encodes_to_vector(vector: Vector) -> None:
    """Each response encodes to exactly the hand-built bytes."""
    assert encode_response(vector.message) == vector.payload


@pytest.mark.parametrize("vector", RESPONSES, ids=lambda v: v.name)
def test_response_decodes_from_vector(vector: Vector) -> None:
    """Each hand-built response payload decodes to the expected dataclass."""
    assert decode_response(vector.payload) == vector.message


ALL_OPS = {*range(1, 20), *range(24, 38)}
ALL_TAGS = {*range(1, 20), *range(24, 36)}


def test_vectors_cover_every_op_and_tag() -> None:
    """The vector tables exercise every op and every tag."""
    assert {decode_request(v.payload).OP for v in REQUESTS} == ALL_OPS
    assert {decode_response(v.payload).TAG for v in RESPONSES} == ALL_TAGS


def test_version_and_op_constants() -> None:
    """The module advertises version 2 with seed ops 1-4 and extension ops 5-19 and 24-37."""
    assert PROTOCOL_VERSION == 2
    assert tuple(SEED_OPS) == (1, 2, 3, 4)
    assert tuple(EXTENSION_OPS) == (*range(5, 20), *range(24, 38))


def _doc_examples(kind: str) -> list[bytes]:
    text = DOCS.read_text(encoding="utf-8")
    blocks = re.findall(rf"```hex {kind}\n(.*?)```", text, flags=re.DOTALL)
    return [
        bytes.fromhex("".join(line.split("#", 1)[0] for line in block.splitlines()))
        for block in blocks
    ]


def test_documented_request_examples_match_codec() -> None:
    """Every request hex example in docs/protocol.md decodes and re-encodes unchanged."""
    examples = _doc_examples("request")
    assert {payload[0] for payload in examples} == ALL_OPS
    for payload in examples:
        assert encode_request(decode_request(payload)) == payload
    assert {v.payload for v in REQUESTS} <= set(examples)


def test_documented_response_examples_match_codec() -> None:
    """Every response hex example in docs/protocol.md decodes and re-encodes unchanged."""
    examples = _doc_examples("response")
    assert {payload[0] for payload in examples} == ALL_TAGS
    for payload in examples:
        assert encode_response(decode_response(payload)) == payload
    assert {v.payload for v in RESPONSES} <= set(examples)


def test_documented_batch_example_is_a_valid_record_batch() -> None:
    """The batch shown in the docs passes the broker's produce validation (CRC included)."""
    from rustka.record.batch import decode_records, validate_batches

    [(pos, header)] = validate_batches(BATCH)
    assert (pos, header.record_count, header.base_timestamp) == (0, 1, 1_700_000_000_000)
    [record] = decode_records(BATCH_AT_42)
    assert (record.key, record.value, record.offset) == (b"k", b"v", 42)


# --------------------------------------------------------------------------- round trips


ROUND_TRIP_REQUESTS = [
    Produce("", b"", b""),
    Produce("t\u00e9l\u00e9", b"\xff\x00", b"\x80" * 1000),
    Fetch("x", 0xFFFF_FFFF, 0xFFFF_FFFF_FFFF_FFFF),
    Commit("g\u263a", "t", 0, 0),
    OffsetFetch("g", "t", 0xFFFF_FFFF),
    Hello(0xFFFF_FFFF, ""),
    ProduceBatch("t", 7, b"\x00" * 70_000),
    FetchBatch("t", 1, 2, 0, 0xFFFF_FFFF),
    Metadata(("a", "b", "\u00fc" * 100)),
    CreateTopic("a", 0xFFFF_FFFF),
    AlterTopic("a", 0),
    ListGroups(),
    DescribeGroup(""),
    DeleteTopic("t\u00e9"),
    DescribeLogs(()),
    CreateTopicWithConfigs("t", 1, ()),
    AlterTopicConfigs("t", (ConfigValue("a", ""), ConfigValue("\u00e9", "x" * 300)), ("b",), 1),
    DescribeTopicConfigs(""),
    SaslAuthenticate("", b""),
    SaslContinue(b"\xff" * 300),
    CreateAcls(()),
    DescribeAcls(0, "", 0, "", "", 0, 0),
    DeleteAcls(255, "x" * 300, 255, "User:\u00e9", "*", 255, 255),
    ListTransactions(("\u00e9", ""), (0, 0xFFFF_FFFF_FFFF_FFFF)),
    DescribeTransaction(""),
    AbortTransaction("t\u00e9" * 100),
    DescribeStableOffsets(()),
    ShareFetch("", "", "", 0, 0xFFFF_FFFF, 255),
    ShareAcknowledge("g", "m" * 255, "t\u00e9", ()),
    ShareLeave("\u00e9", ""),
    DescribeShareGroup(""),
    AlterShareGroupOffsets("g", ()),
    DeleteShareGroupOffsets("g", ()),
]

ROUND_TRIP_RESPONSES = [
    Transactions(()),
    Transactions((ListedTransaction("", 0, 0xFFFF, "", 0xFFFF_FFFF, 0xFFFF_FFFF_FFFF_FFFF),)),
    TransactionDescribed("t", "Empty", 0, 0, 0, 0, 0, (), ()),
    TransactionAborted("t", 1, 2, "CompleteCommit", (TxnPartition("\u00e9", 0xFFFF_FFFF),)),
    StableOffsets(()),
    StableOffsets((TopicStableOffsets("a", (StableOffset(0, 0, ()),)),)),
    ShareRecords(()),
    ShareRecords((SharePartitionRecords(0, b"", ()),)),
    ShareAcknowledged(()),
    ShareGroupDescribed("", "Dead", 0, (), ()),
    Produced(0xFFFF_FFFF, 0xFFFF_FFFF_FFFF_FFFF),
    FetchedRecord(7, b"", b"\xff" * 5000),
    NotFound(),
    Error(""),
    Error("\u00e9chec"),
    CommitOk(),
    Offset(0xFFFF_FFFF_FFFF_FFFF),
    Welcome(1, "", ()),
    Welcome(2, "b", (0, 255)),
    BatchProduced(1, 2, 3),
    Batches(1, 2, b"x" * 100_000),
    MetadataResult(()),
    MetadataResult((TopicMetadata("a", ()), TopicMetadata("b", (PartitionMetadata(1, 2),)))),
    TopicInfo("t", 1),
    Groups(()),
    Groups(("a", "", "c")),
    GroupOffsets("g", ()),
    GroupOffsets("g", (GroupOffset("a", 0, 1, 2, 3), GroupOffset("b", 9, 8, 7, 6))),
    Failure(0xFFFF, "m"),
    OutOfRange(0, 0, 0),
    TopicDeleted(""),
    LogsDescribed(()),
    LogsDescribed((TopicLogs("a", "", ()), TopicLogs("b", "delete", (LogInfo(*range(9), "x"),)))),
    TopicConfigs("t", ()),
    SaslToken(b"", 0, 0xFFFF_FFFF_FFFF_FFFF),
    TopicConfigs("t", (TopicConfig("a", "", 0), TopicConfig("b", "c", 255))),
    Acls(()),
    Acls(
        (
            AclEntry(0, "", 0, "", "", 0, 0),
            AclEntry(255, "\u00e9" * 300, 255, "U:x", "::1", 255, 255),
        )
    ),
]


@pytest.mark.parametrize("message", ROUND_TRIP_REQUESTS, ids=lambda m: type(m).__name__)
def test_request_round_trip(message: object) -> None:
    """Edge values (empty, maximal, non-ASCII, large) survive encode then decode."""
    assert decode_request(encode_request(message)) == message


@pytest.mark.parametrize("message", ROUND_TRIP_RESPONSES, ids=lambda m: type(m).__name__)
def test_response_round_trip(message: object) -> None:
    """Edge values (empty, maximal, non-ASCII, large) survive encode then decode."""
    assert decode_response(encode_response(message)) == message


def test_decode_accepts_bytearray_and_memoryview() -> None:
    """Payloads held in mutable or borrowed buffers decode the same as bytes."""
    payload = REQUESTS[0].payload
    assert decode_request(bytearray(payload)) == REQUESTS[0].message
    assert decode_request(memoryview(payload)) == REQUESTS[0].message
    assert decode_response(memoryview(RESPONSES[0].payload)) == RESPONSES[0].message


def test_decoded_fields_are_plain_bytes_and_tuples() -> None:
    """Decoded blobs are bytes and sequences are tuples, so messages are hashable values."""
    produce = decode_request(REQUESTS[0].payload)
    assert type(produce.key) is bytes and type(produce.value) is bytes
    metadata = decode_request(bytes.fromhex("08 00000001" + ORDERS))
    assert isinstance(metadata.topics, tuple)
    assert hash(produce) == hash(Produce("orders", b"user-1", b"placed order"))


def test_key_and_value_may_hold_any_bytes() -> None:
    """bytes fields are opaque: invalid UTF-8 in a key or value is not an error."""
    message = Produce("t", b"\xc3\x28", b"\xff\xfe")
    assert decode_request(encode_request(message)) == message


# --------------------------------------------------------------------------- parts


def test_batches_response_parts_keep_the_data_uncopied() -> None:
    """response_parts returns the Batches data as its own piece, the very same object."""
    data = b"\x01" * 1_000_000
    response = Batches(5, 9, data)
    parts = response_parts(response)
    assert parts[-1] is data
    assert b"".join(parts) == encode_response(response)
    assert all(type(part) is bytes for part in parts)


def test_produce_batch_request_parts_keep_the_data_uncopied() -> None:
    """request_parts returns the ProduceBatch data as its own piece, the very same object."""
    request = ProduceBatch("orders", 1, BATCH)
    parts = request_parts(request)
    assert parts[-1] is BATCH
    assert b"".join(parts) == encode_request(request)


@pytest.mark.parametrize("vector", REQUESTS + RESPONSES, ids=lambda v: v.name)
def test_parts_join_to_the_encoding(vector: Vector) -> None:
    """For every message the pieces concatenate to exactly the encoded payload."""
    if vector in REQUESTS:
        assert b"".join(request_parts(vector.message)) == vector.payload
    else:
        assert b"".join(response_parts(vector.message)) == vector.payload


def test_parts_of_a_bytearray_blob_are_bytes() -> None:
    """A Batches response built from a bytearray still yields bytes pieces for writeSequence."""
    parts = response_parts(Batches(0, 1, bytearray(b"abc")))
    assert all(type(part) is bytes for part in parts)
    assert b"".join(parts) == encode_response(Batches(0, 1, b"abc"))


# --------------------------------------------------------------------------- malformed


def test_empty_request_frame() -> None:
    """A request frame with no bytes at all is refused as an empty frame."""
    with pytest.raises(InvalidRequest, match="empty frame"):
        decode_request(b"")


def test_empty_response_frame() -> None:
    """A response frame with no bytes at all is refused as an empty frame."""
    with pytest.raises(InvalidRequest, match="empty frame"):
        decode_response(b"")


@pytest.mark.parametrize("op", [0, 20, 99, 255])
def test_unknown_op(op: int) -> None:
    """An op byte no message has is refused with its number in the message."""
    with pytest.raises(InvalidRequest, match=f"unknown op {op}$"):
        decode_request(bytes([op]) + b"\x00\x00\x00\x00")


@pytest.mark.parametrize("tag", [0, 20, 255])
def test_unknown_tag(tag: int) -> None:
    """A tag byte no message has is refused with its number in the message."""
    with pytest.raises(InvalidRequest, match=f"unknown tag {tag}$"):
        decode_response(bytes([tag]))


@pytest.mark.parametrize(("vector", "decode", "encode"), ALL, ids=ALL_IDS)
def test_every_truncation_is_refused(vector: Vector, decode, encode) -> None:
    """Cutting a valid payload anywhere after its first byte raises InvalidRequest."""
    payload = vector.payload
    for cut in range(1, len(payload)):
        with pytest.raises(InvalidRequest, match=r"truncated|count too large"):
            decode(payload[:cut])


FLAT = [(v, d, e) for v, d, e in ALL if v.flat and len(v.fields) > 1]
FLAT_IDS = [i for (v, _, _), i in zip(ALL, ALL_IDS, strict=True) if v.flat and len(v.fields) > 1]


@pytest.mark.parametrize(("vector", "decode", "encode"), FLAT, ids=FLAT_IDS)
def test_truncation_names_the_cut_field(vector: Vector, decode, encode) -> None:
    """A cut inside (or just before) a field reports that field by name."""
    payload = vector.payload
    for cut in range(1, len(payload)):
        field = _field_at(vector, cut)
        with pytest.raises(InvalidRequest, match=rf"truncated field '{re.escape(field)}' in"):
            decode(payload[:cut])


@pytest.mark.parametrize(("vector", "decode", "encode"), ALL, ids=ALL_IDS)
def test_trailing_bytes_are_refused(vector: Vector, decode, encode) -> None:
    """Bytes after the last field are an error that states how many there are."""
    with pytest.raises(InvalidRequest, match="has 1 trailing byte after"):
        decode(vector.payload + b"\x00")
    with pytest.raises(InvalidRequest, match="has 3 trailing bytes after"):
        decode(vector.payload + b"abc")


def _with_field(vector: Vector, field: str, hex_: str) -> bytes:
    return bytes.fromhex("".join(hex_ if name == field else h for name, h in vector.fields))


BAD_UTF8 = "00000002 c328"  # 0xc3 starts a 2-byte sequence; 0x28 cannot continue it


@pytest.mark.parametrize(
    ("vector", "field"),
    [
        (REQUESTS[0], "topic"),
        (REQUESTS[1], "topic"),
        (REQUESTS[2], "group"),
        (REQUESTS[2], "topic"),
        (REQUESTS[3], "group"),
        (REQUESTS[3], "topic"),
        (REQUESTS[4], "client"),
        (REQUESTS[5], "topic"),
        (REQUESTS[6], "topic"),
        (REQUESTS[7], "topics[0]"),
        (REQUESTS[9], "topic"),
        (REQUESTS[10], "topic"),
        (REQUESTS[12], "group"),
        (REQUESTS[13], "topic"),
    ],
    ids=lambda x: x.name if isinstance(x, Vector) else x,
)
def test_invalid_utf8_in_request_str(vector: Vector, field: str) -> None:
    """A str field of a request that is not UTF-8 is refused, naming the field."""
    with pytest.raises(InvalidRequest, match=rf"invalid UTF-8 in field '{re.escape(field)}'"):
        decode_request(_with_field(vector, field, BAD_UTF8))


@pytest.mark.parametrize(
    ("index", "field"),
    [
        (3, "message"),
        (6, "broker"),
        (10, "topics[0].name"),
        (11, "topic"),
        (12, "groups[1]"),
        (13, "group"),
        (13, "offsets[0].topic"),
        (14, "message"),
        (16, "topic"),
    ],
)
def test_invalid_utf8_in_response_str(index: int, field: str) -> None:
    """A str field of a response that is not UTF-8 is refused, naming the field."""
    with pytest.raises(InvalidRequest, match=rf"invalid UTF-8 in field '{re.escape(field)}'"):
        decode_response(_with_field(RESPONSES[index], field, BAD_UTF8))


def test_surrogate_encoded_in_utf8_is_refused() -> None:
    """UTF-8-encoded surrogates (CESU style) are not valid UTF-8 and are refused."""
    surrogate = "00000003 eda080"  # U+D800 encoded as if it were a code point
    with pytest.raises(InvalidRequest, match="invalid UTF-8 in field 'group'"):
        decode_request(bytes.fromhex("0c" + surrogate))
    with pytest.raises(InvalidRequest, match="invalid UTF-8 in field 'topic'"):
        decode_response(bytes.fromhex("0b" + surrogate + "00000001"))


@pytest.mark.parametrize(
    ("decode", "payload", "field"),
    [
        (decode_request, "08 ffffffff" + "00" * 10, "topics"),
        (decode_response, "07 00000002 00000000 ffffffff" + "01" * 10, "ops"),
        (decode_response, "0a ffffffff" + "00" * 10, "topics"),
        (decode_response, "0a 00000001 00000000 ffffffff" + "00" * 10, "topics[0].partitions"),
        (decode_response, "0c ffffffff" + "00" * 10, "groups"),
        (decode_response, "0d 00000000 ffffffff" + "00" * 10, "offsets"),
        (decode_request, "08 00000003 00000000 00000000", "topics"),
        (decode_response, "0d 00000000 00000001" + "00" * 31, "offsets"),
    ],
)
def test_count_too_large_for_the_remaining_bytes(decode, payload: str, field: str) -> None:
    """A count that cannot fit in the bytes left is refused before any item is built."""
    with pytest.raises(InvalidRequest, match=rf"count too large in field '{re.escape(field)}'"):
        decode(bytes.fromhex(payload))


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ("01 ffffffff 6f72", "topic"),
        ("01" + ORDERS + "ffffffff 00", "key"),
        ("01" + ORDERS + USER_1 + "ffffffff 706c61", "value"),
        ("06" + ORDERS + "00000000 ffffffff" + "00" * 10, "batches"),
    ],
)
def test_huge_length_with_short_payload(payload: str, field: str) -> None:
    """A 4 GiB declared length with a few bytes left is a truncation, not an allocation."""
    with pytest.raises(InvalidRequest, match=rf"truncated field '{field}'.*needs 4294967295 bytes"):
        decode_request(bytes.fromhex(payload))


def test_truncated_message_says_where_and_how_much() -> None:
    """The truncation message gives the position and the number of bytes remaining."""
    with pytest.raises(InvalidRequest) as info:
        decode_request(bytes.fromhex("02" + ORDERS + "0000"))
    assert str(info.value) == (
        "truncated field 'partition' in Fetch request: needs 4 bytes at position 11, only 2 remain"
    )


# --------------------------------------------------------------------------- encode checks


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (Fetch("t", -1, 0), "partition"),
        (Fetch("t", 1 << 32, 0), "partition"),
        (Fetch("t", 0, 1 << 64), "offset"),
        (Commit("g", "t", 0, -5), "offset"),
        (Hello(1 << 32, "c"), "version"),
        (FetchBatch("t", 0, 0, 1 << 32, 0), "max_bytes"),
        (FetchBatch("t", 0, 0, 0, -1), "max_wait_ms"),
        (CreateTopic("t", -1), "partitions"),
    ],
    ids=lambda x: type(x).__name__ if not isinstance(x, str) else x,
)
def test_request_encode_range_checked(message: object, field: str) -> None:
    """Integers outside their wire type are a ValueError naming the field."""
    with pytest.raises(ValueError, match=rf"field '{field}' must be an integer"):
        encode_request(message)


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (Produced(1 << 32, 0), "partition"),
        (Offset(-1), "offset"),
        (Failure(1 << 16, "x"), "code"),
        (BatchProduced(0, 0, 1 << 64), "last_offset"),
        (OutOfRange(0, -1, 0), "log_start"),
        (GroupOffsets("g", (GroupOffset("t", 0, 1 << 64, 0, 0),)), "offsets[0].committed"),
        (
            MetadataResult((TopicMetadata("t", (PartitionMetadata(0, -1),)),)),
            "topics[0].partitions[0].high_watermark",
        ),
    ],
    ids=lambda x: type(x).__name__ if not isinstance(x, str) else x,
)
def test_response_encode_range_checked(message: object, field: str) -> None:
    """Integers outside their wire type are a ValueError naming the field."""
    with pytest.raises(ValueError, match=rf"field '{re.escape(field)}' must be an integer"):
        encode_response(message)


def test_welcome_ops_must_be_bytes() -> None:
    """Op codes in Welcome are single bytes; 256 cannot be encoded."""
    with pytest.raises(ValueError, match="field 'ops'"):
        encode_response(Welcome(2, "b", (1, 256)))


def test_wrong_field_types_are_refused_on_encode() -> None:
    """A str where bytes belong (or the reverse) is a TypeError, not a silent mis-encoding."""
    with pytest.raises(TypeError, match="field 'key' must be bytes"):
        encode_request(Produce("t", "k", b"v"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="field 'topic' must be str"):
        encode_request(Produce(b"t", b"k", b"v"))  # type: ignore[arg-type]


def test_encoding_a_non_message_is_a_type_error() -> None:
    """Responses are not requests and vice versa."""
    with pytest.raises(TypeError, match="not a rustka request: Produced"):
        encode_request(Produced(0, 0))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a rustka response: Produce"):
        encode_response(Produce("t", b"", b""))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- error_response


def test_unparseable_frame_gets_error() -> None:
    """With no parsed request, the answer is the seed Error tag whatever the failure."""
    response = error_response(None, InvalidRequest("unknown op 99"))
    assert response == Error("unknown op 99")


@pytest.mark.parametrize("vector", REQUESTS[:4], ids=lambda v: v.name)
def test_seed_ops_always_get_error(vector: Vector) -> None:
    """Ops 1-4 get tag 4 Error even for failures that have codes or bounds."""
    exc = OffsetOutOfRange(3, 10, 45)
    assert error_response(vector.message, exc) == Error(str(exc))
    assert error_response(vector.message, UnknownTopic("no topic x")) == Error("no topic x")


def test_seed_fetch_out_of_range_message_names_earliest_offset() -> None:
    """docs/protocol.md, section 3: the Error for a deleted offset names the earliest offset."""
    response = error_response(Fetch("t", 0, 3), OffsetOutOfRange(3, 10, 45))
    assert isinstance(response, Error)
    assert "out of range" in response.message and "10" in response.message


def test_fetch_batch_out_of_range_gets_out_of_range_tag() -> None:
    """FetchBatch outside the log gets tag 15 carrying the requested offset and both bounds."""
    response = error_response(FetchBatch("t", 0, 3, 100, 0), OffsetOutOfRange(3, 10, 45))
    assert response == OutOfRange(3, 10, 45)


@pytest.mark.parametrize(
    ("request_", "exc", "code"),
    [
        (CreateTopic("t", 1), TopicExists("topic 't' exists"), 9),
        (ProduceBatch("t", 0, b""), InvalidBatch("bad crc"), 8),
        (Metadata(("x",)), UnknownTopic("unknown topic 'x'"), 4),
        (Metadata(()), OffsetOutOfRange(1, 2, 3), 6),
        (Hello(0, "c"), InvalidRequest("no common version"), 2),
        (ListGroups(), RustkaError("boom"), 1),
        (DeleteTopic("x"), UnknownTopic("unknown topic 'x'"), 4),
    ],
    ids=lambda x: type(x).__name__ if not isinstance(x, int) else str(x),
)
def test_extension_ops_get_failure_with_code(request_: object, exc: RustkaError, code: int) -> None:
    """Extension ops get tag 14 carrying the exception class's code and its message."""
    assert error_response(request_, exc) == Failure(code, str(exc))


def test_error_without_message_still_says_something() -> None:
    """An exception raised without text is reported by its class name, never as ''."""
    assert error_response(None, UnknownTopic()) == Error("UnknownTopic")
    assert error_response(ListGroups(), UnknownTopic()) == Failure(4, "UnknownTopic")


def test_messages_are_values_of_their_own_class() -> None:
    """Equal fields in different message classes are unequal; field-less messages are true."""
    assert CreateTopic("t", 3) != AlterTopic("t", 3)
    assert Produced(0, 1) != (0, 1)
    assert Produced(partition=0, offset=1) == Produced(0, 1)
    assert {Produced(0, 1): "a"}[Produced(0, 1)] == "a"
    assert bool(NotFound()) and bool(CommitOk()) and bool(ListGroups())
    assert Produce.OP == 1 and Batches.TAG == 9
    assert type(decode_request(REQUESTS[0].payload)) is Produce


# --------------------------------------------------------------------------- every path


SAMPLES = [v.message for v in REQUESTS + RESPONSES] + ROUND_TRIP_REQUESTS + ROUND_TRIP_RESPONSES


def test_every_declared_message_has_samples() -> None:
    """The path comparison below covers each declaration, so a new op cannot skip it."""
    assert {spec.cls for spec in MESSAGES} == {type(m) for m in SAMPLES}


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_every_path_agrees(message: object) -> None:
    """Compiled and checking paths give the same bytes and the same values.

    Encoding: the compiled parts, the compiled frame and the checking writer;
    decoding: the compiled fast path (where the message has one) and the
    checking reader.
    """
    spec = next(s for s in MESSAGES if s.cls is type(message))
    payload = b"".join(spec.encode_slow(message))
    assert b"".join(spec.parts(message)) == payload
    assert b"".join(spec.frame(message)) == len(payload).to_bytes(4, "big") + payload
    framed = response_frame if spec.kind == "response" else request_frame
    assert framed(message) == spec.frame(message)
    assert spec.decode_slow(payload) == message
    if spec.decode_fast is not None:
        assert spec.decode_fast(payload) == message


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_fast_path_never_accepts_what_the_checking_reader_refuses(message: object) -> None:
    """Cut or mutated payloads: the fast path agrees with the reader or steps aside (None)."""
    spec = next(s for s in MESSAGES if s.cls is type(message))
    if spec.decode_fast is None:
        return
    payload = b"".join(spec.encode_slow(message))
    rng = random.Random(len(payload))
    # Every cut of the head and of the tail (the big samples' middles add nothing new).
    cuts = set(range(1, min(len(payload), 120))) | set(
        range(max(1, len(payload) - 40), len(payload))
    )
    variants = [payload[:cut] for cut in sorted(cuts)] + [payload + b"\x00"]
    for _ in range(200):
        mutated = bytearray(payload)
        mutated[rng.randrange(1, len(mutated)) if len(mutated) > 1 else 0] = rng.randrange(256)
        variants.append(bytes(mutated))
    for variant in variants:
        fast = spec.decode_fast(variant)
        try:
            slow = spec.decode_slow(variant)
        except InvalidRequest:
            assert fast is None, variant.hex()
        else:
            assert fast in (None, slow), variant.hex()


def test_frames_are_a_single_piece_unless_they_carry_batches() -> None:
    """A Produced frame is one struct call's bytes; a Batches frame keeps its data uncopied."""
    assert response_frame(Produced(2, 0)) == [bytes.fromhex("0000000d 01 00000002" + "00" * 8)]
    data = b"\x07" * 1000
    head, tail = response_frame(Batches(0, 1, data))
    assert tail is data and head == bytes.fromhex(
        "000003fd 09" + "00" * 8 + "00" * 7 + "01 000003e8"
    )
    with pytest.raises(ValueError, match="field 'offset' must be an integer"):
        response_frame(Produced(0, -1))
