"""Tests for the API declarations and public entry points (rustka.kafka.messages).

Expected bytes are derived by hand from Kafka's JSON message schemas, one comment per field
group; the generic sweeps then cover every declared (api, version, direction).
"""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest

from rustka.kafka.errors import ErrorCode
from rustka.kafka.messages import (
    APIS,
    ApiKey,
    api_versions_error_response,
    api_versions_table,
    count_response_errors,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    encode_response_parts,
    is_flexible,
)
from rustka.kafka.schema import (
    BIG_CHUNK,
    RECORDS,
    UUID,
    Array,
    Field,
    Fixed,
    KafkaCodecError,
    Struct,
)


def hx(*chunks: str) -> bytes:
    return bytes.fromhex("".join(chunks).replace(" ", ""))


def norm(value: Any) -> Any:
    """Records decode to memoryviews; compare them as bytes."""
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, dict):
        return {k: norm(v) for k, v in value.items()}
    if isinstance(value, list):
        return [norm(v) for v in value]
    return value


def contains(actual: Any, expected: Any) -> bool:
    """`actual` matches `expected`, where dicts in `actual` may carry extra (default) keys."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            k in actual and contains(actual[k], v) for k, v in expected.items()
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(contains(a, e) for a, e in zip(actual, expected, strict=True))
        )
    return bool(actual == expected)


# --- the table -------------------------------------------------------------------------

EXPECTED_TABLE = {
    # key: (name, min, max, first flexible version per Kafka's schema)
    18: ("ApiVersions", 0, 4, 3),
    29: ("DescribeAcls", 0, 3, 2),
    30: ("CreateAcls", 0, 3, 2),
    31: ("DeleteAcls", 0, 3, 2),
    3: ("Metadata", 0, 12, 9),
    0: ("Produce", 0, 8, 9),
    1: ("Fetch", 0, 11, 12),
    2: ("ListOffsets", 0, 5, 6),
    22: ("InitProducerId", 0, 4, 2),
    # Transactions (docs/kafka.md, "Transactions").
    24: ("AddPartitionsToTxn", 0, 3, 3),
    25: ("AddOffsetsToTxn", 0, 3, 3),
    26: ("EndTxn", 0, 3, 3),
    28: ("TxnOffsetCommit", 0, 3, 3),
    65: ("DescribeTransactions", 0, 0, 0),
    66: ("ListTransactions", 0, 1, 0),
    19: ("CreateTopics", 0, 4, 5),
    20: ("DeleteTopics", 0, 3, 4),
    32: ("DescribeConfigs", 0, 2, 4),
    10: ("FindCoordinator", 0, 2, 3),
    11: ("JoinGroup", 0, 5, 6),
    14: ("SyncGroup", 0, 3, 4),
    12: ("Heartbeat", 0, 3, 4),
    13: ("LeaveGroup", 0, 3, 4),
    8: ("OffsetCommit", 0, 9, 8),
    9: ("OffsetFetch", 0, 9, 6),
    16: ("ListGroups", 0, 5, 3),
    15: ("DescribeGroups", 0, 4, 5),
    # Admin APIs (docs/kafka.md, "APIs and versions").
    37: ("CreatePartitions", 0, 1, 2),
    42: ("DeleteGroups", 0, 1, 2),
    47: ("OffsetDelete", 0, 0, None),
    60: ("DescribeCluster", 0, 1, 0),
    23: ("OffsetForLeaderEpoch", 0, 3, 4),
    35: ("DescribeLogDirs", 0, 4, 2),
    21: ("DeleteRecords", 0, 2, 2),
    # Topic configs (docs/kafka.md, "Topic configs").
    33: ("AlterConfigs", 0, 1, 2),
    44: ("IncrementalAlterConfigs", 0, 0, 1),
    # Authentication (docs/kafka.md, "Authentication").
    17: ("SaslHandshake", 0, 1, None),
    36: ("SaslAuthenticate", 0, 2, 2),
    50: ("DescribeUserScramCredentials", 0, 0, 0),
    51: ("AlterUserScramCredentials", 0, 0, 0),
    # Share groups (docs/kafka.md, "Share groups (KIP-932)"): v1 only, the stable version.
    76: ("ShareGroupHeartbeat", 1, 1, 0),
    77: ("ShareGroupDescribe", 1, 1, 0),
    78: ("ShareFetch", 1, 1, 0),
    79: ("ShareAcknowledge", 1, 1, 0),
    # Consumer groups (KIP-848) (docs/kafka.md, "Consumer groups (KIP-848)").
    68: ("ConsumerGroupHeartbeat", 0, 1, 0),
    69: ("ConsumerGroupDescribe", 0, 0, 0),
    71: ("GetTelemetrySubscriptions", 0, 0, 0),
    72: ("PushTelemetry", 0, 0, 0),
}


def test_apis_table_matches_the_advertised_ranges() -> None:
    actual = {k: (s.name, s.min_version, s.max_version, s.flexible_from) for k, s in APIS.items()}
    assert actual == EXPECTED_TABLE
    assert {int(k) for k in ApiKey} == set(APIS)
    for key, spec in APIS.items():
        assert spec.key == key


def test_the_flexible_versions_are_the_declared_few() -> None:
    flexible = {
        (k, v)
        for k, s in APIS.items()
        for v in range(s.min_version, s.max_version + 1)
        if is_flexible(k, v)
    }
    assert flexible == {
        # Metadata v9-12, OffsetCommit v8-9, OffsetFetch v8-9, ListGroups v5, KIP-848's.
        (3, 9),
        (3, 10),
        (3, 11),
        (3, 12),
        (8, 8),
        (8, 9),
        (9, 8),
        (9, 9),
        (16, 5),
        (68, 0),
        (68, 1),
        (69, 0),
        (71, 0),
        (72, 0),
        (18, 3),
        (18, 4),
        (16, 3),
        (16, 4),
        (60, 0),
        (60, 1),
        (29, 2),
        (29, 3),
        (30, 2),
        (30, 3),
        (31, 2),
        (31, 3),
        (35, 2),
        (35, 3),
        (35, 4),
        (21, 2),
        (36, 2),
        (50, 0),
        (51, 0),
        (65, 0),
        (66, 0),
        (66, 1),
        # Transactions: InitProducerId v2-4, the others' v3 (docs/kafka.md, "Transactions").
        (22, 2),
        (22, 3),
        (22, 4),
        (24, 3),
        (25, 3),
        (26, 3),
        (28, 3),
        # OffsetFetch v6-7: v7's require_stable (KIP-447) for read_committed consumers.
        (9, 6),
        (9, 7),
        # Metadata v9-12: v10+ carry topic ids (rustka.kafka.topic_ids).
        (3, 9),
        (3, 10),
        (3, 11),
        (3, 12),
        # Share groups (KIP-932): v1 only.
        (76, 1),
        (77, 1),
        (78, 1),
        (79, 1),
    }


def test_api_versions_table_is_sorted_and_complete() -> None:
    table = api_versions_table()
    assert [row["api_key"] for row in table] == sorted(EXPECTED_TABLE)
    assert table[0] == {"api_key": 0, "min_version": 0, "max_version": 8}


def test_every_api_lists_exactly_what_it_accepts() -> None:
    """Produce v0 is listed (librdkafka up to 2.11 compresses only for a broker listing
    it) and, since rustka converts the old message sets, accepted too."""
    listed = {
        row["api_key"]: (row["min_version"], row["max_version"]) for row in api_versions_table()
    }
    assert listed == {k: (s.min_version, s.max_version) for k, s in APIS.items()}
    assert listed[0] == (0, 8) and APIS[0].supports(0)


def test_error_codes_match_kafka() -> None:
    assert ErrorCode.UNKNOWN_SERVER_ERROR == -1
    assert ErrorCode.UNSUPPORTED_VERSION == 35
    assert ErrorCode.MEMBER_ID_REQUIRED == 79
    assert ErrorCode.INVALID_RECORD == 87
    assert ErrorCode.PRODUCER_FENCED == 90
    assert len({int(e) for e in ErrorCode}) == len(ErrorCode)


def test_a_produce_answer_counts_its_partitions_error_codes() -> None:
    """The per-API error statistics read Produce's partition codes from its declaration."""
    body = {
        "responses": [
            {
                "name": "t",
                "partition_responses": [
                    {"index": 0, "error_code": 0, "base_offset": 5},
                    {"index": 1, "error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER},
                    {"index": 2, "error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER},
                ],
            },
            {"name": "u", "partition_responses": [{"index": 0, "error_code": 87}]},
        ],
        "throttle_time_ms": 0,
    }
    spec = APIS[ApiKey.PRODUCE]
    for version in range(spec.min_version, spec.max_version + 1):
        out: dict[int, int] = {}
        count_response_errors(ApiKey.PRODUCE, version, body, out)
        assert out == {ErrorCode.NOT_LEADER_OR_FOLLOWER: 2, 87: 1}


# --- hand-derived vectors --------------------------------------------------------------


def req_header(key: int, version: int) -> str:
    """Header with correlation id 1 and client id "c": v1, or v2 (an extra empty tag
    section) for a flexible version."""
    tags = " 00" if is_flexible(key, version) else ""
    return f"{key:04x} {version:04x} 00000001 0001 63{tags}"


RESP_HEADER = "00000001"  # response header v0: correlation id 1

TOPIC_T = "0001 74"  # string "t"
U = "00112233445566778899aabbccddeeff"  # a topic id (uuid)
UUID_U = bytes.fromhex(U)
CONSUMER = "0008 636f6e73756d6572"  # string "consumer"
RANGE = "0005 72616e6765"  # string "range"

# (api key, version, body, body hex); laid out by hand, so the formatter keeps off.
# fmt: off
REQUEST_VECTORS: list[tuple[int, int, dict[str, Any], str]] = [
    # ApiVersions v0-2 requests have no body
    (18, 0, {}, ""),
    (18, 2, {}, ""),
    (18, 4, {"client_software_name": "k", "client_software_version": "1"},
     "02 6b 02 31 00"),  # compact strings, body tag section
    # Metadata
    (3, 0, {"topics": [{"name": "t"}]}, "00000001 " + TOPIC_T),
    (3, 1, {"topics": None}, "ffffffff"),  # null = all topics
    (3, 1, {"topics": []}, "00000000"),  # empty = no topics
    (3, 4, {"topics": [{"name": "t"}], "allow_auto_topic_creation": False},
     "00000001 " + TOPIC_T + " 00"),
    (3, 4, {}, "ffffffff 01"),  # defaults: all topics, auto-create true
    (3, 8, {"topics": None, "include_cluster_authorized_operations": True,
            "include_topic_authorized_operations": True}, "ffffffff 01 01 01"),
    # Produce
    # v0-2: no transactional id; the records are a magic 0/1 message set (not parsed here).
    (0, 0, {"acks": 1, "timeout_ms": 30000,
            "topic_data": [{"name": "t",
                            "partition_data": [{"index": 0, "records": b"\xaa"}]}]},
     "0001 00007530 00000001 " + TOPIC_T + " 00000001 00000000 00000001 aa"),
    (0, 3, {"transactional_id": None, "acks": 1, "timeout_ms": 30000,
            "topic_data": [{"name": "t",
                            "partition_data": [{"index": 0, "records": b"\xaa\xbb"}]}]},
     "ffff 0001 00007530 00000001 " + TOPIC_T + " 00000001 00000000 00000002 aabb"),
    (0, 8, {"transactional_id": "x", "acks": -1, "timeout_ms": 30000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 1, "records": None}]}]},
     "0001 78 ffff 00007530 00000001 " + TOPIC_T + " 00000001 00000001 ffffffff"),
    # Fetch
    # v0-2: no max_bytes, no isolation level (v3 adds the first, v4 the second).
    (1, 0, {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1,
            "topics": [{"topic": "t", "partitions": [
                {"partition": 0, "fetch_offset": 7, "partition_max_bytes": 1048576}]}]},
     "ffffffff 000001f4 00000001"
     " 00000001 " + TOPIC_T + " 00000001 00000000 0000000000000007 00100000"),
    (1, 3, {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1024,
            "topics": []},
     "ffffffff 000001f4 00000001 00000400 00000000"),
    (1, 4, {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 52428800,
            "isolation_level": 1,
            "topics": [{"topic": "t", "partitions": [
                {"partition": 0, "fetch_offset": 7, "partition_max_bytes": 1048576}]}]},
     "ffffffff 000001f4 00000001 03200000 01"  # replica, wait, min, max, isolation
     " 00000001 " + TOPIC_T + " 00000001 00000000 0000000000000007 00100000"),
    (1, 7, {"max_wait_ms": 500, "min_bytes": 1, "session_id": 5, "session_epoch": 2,
            "topics": [],
            "forgotten_topics_data": [{"topic": "u", "partitions": [1, 2]}]},
     "ffffffff 000001f4 00000001 7fffffff 00 00000005 00000002 00000000"
     " 00000001 0001 75 00000002 00000001 00000002"),
    (1, 11, {"max_wait_ms": 500, "min_bytes": 1, "max_bytes": 52428800,
             "topics": [{"topic": "t", "partitions": [
                 {"partition": 0, "fetch_offset": 7, "partition_max_bytes": 1048576}]}],
             "rack_id": "r"},
     "ffffffff 000001f4 00000001 03200000 00 00000000 ffffffff"
     " 00000001 " + TOPIC_T + " 00000001"
     " 00000000 ffffffff 0000000000000007 ffffffffffffffff 00100000"  # epoch/log start -1
     " 00000000 0001 72"),  # no forgotten topics, rack "r"
    # ListOffsets
    (2, 0, {"replica_id": -1, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "timestamp": -1, "max_num_offsets": 1}]}]},
     "ffffffff 00000001 " + TOPIC_T + " 00000001 00000000 ffffffffffffffff 00000001"),
    (2, 1, {"replica_id": -1, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "timestamp": -2}]}]},
     "ffffffff 00000001 " + TOPIC_T + " 00000001 00000000 fffffffffffffffe"),
    (2, 5, {"replica_id": -1, "isolation_level": 1, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "timestamp": -1}]}]},
     "ffffffff 01 00000001 " + TOPIC_T + " 00000001 00000000 ffffffff ffffffffffffffff"),
    # InitProducerId
    (22, 0, {"transactional_id": None, "transaction_timeout_ms": 60000}, "ffff 0000ea60"),
    (22, 1, {"transactional_id": "x", "transaction_timeout_ms": 1}, "0001 78 00000001"),
    (22, 2, {"transactional_id": "x", "transaction_timeout_ms": 60000},
     "02 78 0000ea60 00"),  # flexible: compact string, body tags
    (22, 3, {"transactional_id": "x", "transaction_timeout_ms": 60000, "producer_id": 5,
             "producer_epoch": 2},
     "02 78 0000ea60 0000000000000005 0002 00"),  # v3+: the producer's id and epoch
    (22, 4, {"transactional_id": None, "transaction_timeout_ms": 1},
     "00 00000001 ffffffffffffffff ffff 00"),  # null id; id and epoch default to -1
    # AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit (id "x", producer 1)
    (24, 0, {"transactional_id": "x", "producer_id": 1, "producer_epoch": 0,
             "topics": [{"name": "t", "partitions": [0]}]},
     "0001 78 0000000000000001 0000 00000001 " + TOPIC_T + " 00000001 00000000"),
    (24, 2, {"transactional_id": "x", "producer_id": 1, "producer_epoch": 2, "topics": []},
     "0001 78 0000000000000001 0002 00000000"),
    (24, 3, {"transactional_id": "x", "producer_id": 1, "producer_epoch": 0,
             "topics": [{"name": "t", "partitions": [0, 1]}]},
     "02 78 0000000000000001 0000 02 02 74 03 00000000 00000001 00 00"),  # compact arrays
    (25, 0, {"transactional_id": "x", "producer_id": 1, "producer_epoch": 0, "group_id": "g"},
     "0001 78 0000000000000001 0000 0001 67"),
    (25, 2, {"transactional_id": "x", "producer_id": 1, "producer_epoch": 3, "group_id": "g"},
     "0001 78 0000000000000001 0003 0001 67"),
    (25, 3, {"transactional_id": "x", "producer_id": 1, "producer_epoch": 3, "group_id": "g"},
     "02 78 0000000000000001 0003 02 67 00"),
    (26, 0, {"transactional_id": "x", "producer_id": 1, "producer_epoch": 0, "committed": True},
     "0001 78 0000000000000001 0000 01"),
    (26, 2, {"transactional_id": "x", "producer_id": 1, "producer_epoch": 0, "committed": False},
     "0001 78 0000000000000001 0000 00"),
    (26, 3, {"transactional_id": "x", "producer_id": 1, "producer_epoch": 0, "committed": True},
     "02 78 0000000000000001 0000 01 00"),
    (28, 0, {"transactional_id": "x", "group_id": "g", "producer_id": 1, "producer_epoch": 0,
             "topics": [{"name": "t", "partitions": [
                 {"partition_index": 0, "committed_offset": 5, "committed_metadata": None}]}]},
     "0001 78 0001 67 0000000000000001 0000 00000001 " + TOPIC_T
     + " 00000001 00000000 0000000000000005 ffff"),
    (28, 2, {"transactional_id": "x", "group_id": "g", "producer_id": 1, "producer_epoch": 0,
             "topics": [{"name": "t", "partitions": [
                 {"partition_index": 0, "committed_offset": 5, "committed_metadata": "m"}]}]},
     "0001 78 0001 67 0000000000000001 0000 00000001 " + TOPIC_T
     + " 00000001 00000000 0000000000000005 ffffffff 0001 6d"),  # leader epoch -1 (v2+)
    (28, 3, {"transactional_id": "x", "group_id": "g", "producer_id": 1, "producer_epoch": 0,
             "generation_id": 4, "member_id": "m", "group_instance_id": None,
             "topics": [{"name": "t", "partitions": [
                 {"partition_index": 0, "committed_offset": 5, "committed_metadata": None}]}]},
     "02 78 02 67 0000000000000001 0000"
     " 00000004 02 6d 00"  # v3+: generation 4, member "m", no instance id (KIP-447)
     " 02 02 74 02 00000000 0000000000000005 ffffffff 00 00 00 00"),
    (28, 3, {"transactional_id": "x", "group_id": "g", "producer_id": 1, "producer_epoch": 0,
             "group_instance_id": "i", "topics": []},
     "02 78 02 67 0000000000000001 0000 ffffffff 01 02 69 01 00"),  # defaults -1, ""
    # DescribeTransactions, ListTransactions (flexible from v0)
    (65, 0, {"transactional_ids": ["x"]}, "02 02 78 00"),
    (66, 0, {"state_filters": [], "producer_id_filters": []}, "01 01 00"),
    (66, 1, {"state_filters": ["Ongoing"], "producer_id_filters": [5], "duration_filter": 1000},
     "02 08 4f6e676f696e67 02 0000000000000005 00000000000003e8 00"),
    # CreateTopics
    (19, 0, {"topics": [{"name": "t", "num_partitions": 3, "replication_factor": 1,
                         "assignments": [], "configs": [{"name": "k", "value": None}]}],
             "timeout_ms": 1000},
     "00000001 " + TOPIC_T + " 00000003 0001 00000000 00000001 0001 6b ffff 000003e8"),
    (19, 4, {"topics": [{"name": "t", "num_partitions": -1, "replication_factor": -1,
                         "assignments": [{"partition_index": 0, "broker_ids": [1]}]}],
             "validate_only": True},
     "00000001 " + TOPIC_T + " ffffffff ffff 00000001 00000000 00000001 00000001 00000000"
     " 0000ea60 01"),  # timeout defaults to 60000
    # DeleteTopics
    (20, 0, {"topic_names": ["a", "b"], "timeout_ms": 5}, "00000002 0001 61 0001 62 00000005"),
    (20, 3, {"topic_names": [], "timeout_ms": 5}, "00000000 00000005"),
    # DescribeConfigs
    (32, 0, {"resources": [{"resource_type": 2, "resource_name": "t",
                            "configuration_keys": None}]},
     "00000001 02 " + TOPIC_T + " ffffffff"),
    (32, 2, {"resources": [{"resource_type": 2, "resource_name": "t",
                            "configuration_keys": ["a"]}], "include_synonyms": True},
     "00000001 02 " + TOPIC_T + " 00000001 0001 61 01"),
    # AlterConfigs, IncrementalAlterConfigs
    (33, 0, {"resources": [{"resource_type": 2, "resource_name": "t",
                            "configs": [{"name": "a", "value": None}]}], "validate_only": True},
     "00000001 02 " + TOPIC_T + " 00000001 0001 61 ffff 01"),  # null value
    (33, 1, {"resources": [], "validate_only": False}, "00000000 00"),
    (44, 0, {"resources": [{"resource_type": 2, "resource_name": "t", "configs": [
        {"name": "a", "config_operation": 2, "value": "x"}]}], "validate_only": False},
     "00000001 02 " + TOPIC_T + " 00000001 0001 61 02 0001 78 00"),  # APPEND "x"
    # CreatePartitions, DeleteGroups, OffsetDelete
    (37, 0, {"topics": [{"name": "t", "count": 3, "assignments": None}], "timeout_ms": 1000,
             "validate_only": True},
     "00000001 " + TOPIC_T + " 00000003 ffffffff 000003e8 01"),  # null assignments
    (37, 1, {"topics": [{"name": "t", "count": 2, "assignments": [{"broker_ids": [0]}]}],
             "timeout_ms": 5, "validate_only": False},
     "00000001 " + TOPIC_T + " 00000002 00000001 00000001 00000000 00000005 00"),
    (42, 0, {"groups_names": ["g"]}, "00000001 0001 67"),
    (42, 1, {"groups_names": []}, "00000000"),
    (47, 0, {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": 1}]}]},
     "0001 67 00000001 " + TOPIC_T + " 00000001 00000001"),
    # OffsetForLeaderEpoch
    (23, 0, {"topics": [{"topic": "t", "partitions": [{"partition": 1, "leader_epoch": 0}]}]},
     "00000001 " + TOPIC_T + " 00000001 00000001 00000000"),
    (23, 2, {"topics": [{"topic": "t", "partitions": [
        {"partition": 1, "current_leader_epoch": 5, "leader_epoch": 0}]}]},
     "00000001 " + TOPIC_T + " 00000001 00000001 00000005 00000000"),
    (23, 3, {"topics": [{"topic": "t", "partitions": [{"partition": 1, "leader_epoch": 0}]}]},
     "fffffffe 00000001 " + TOPIC_T + " 00000001 00000001 ffffffff 00000000"),  # defaults
    # DeleteRecords (flexible from v2; -1: up to the high watermark)
    (21, 0, {"topics": [{"name": "t", "partitions": [{"partition_index": 1, "offset": 5}]}],
             "timeout_ms": 100},
     "00000001 " + TOPIC_T + " 00000001 00000001 0000000000000005 00000064"),
    (21, 2, {"topics": [{"name": "t", "partitions": [{"partition_index": 1, "offset": -1}]}],
             "timeout_ms": 100},
     "02 02 74 02 00000001 ffffffffffffffff 00 00 00000064 00"),
    # DescribeLogDirs (flexible from v2)
    (35, 0, {"topics": None}, "ffffffff"),  # null: every partition
    (35, 4, {"topics": [{"topic": "t", "partitions": [1]}]}, "02 02 74 02 00000001 00 00"),
    # SaslHandshake, SaslAuthenticate (v2 flexible), the SCRAM credential APIs (flexible)
    (17, 0, {"mechanism": "PLAIN"}, "0005 504c41494e"),
    (17, 1, {"mechanism": "PLAIN"}, "0005 504c41494e"),
    (36, 0, {"auth_bytes": b"\x00a"}, "00000002 0061"),
    (36, 2, {"auth_bytes": b"\x00a"}, "03 0061 00"),
    (50, 0, {"users": None}, "00 00"),
    (50, 0, {"users": [{"name": "u"}]}, "02 0275 00 00"),
    (51, 0, {"deletions": [{"name": "u", "mechanism": 1}], "upsertions": [
        {"name": "u", "mechanism": 2, "iterations": 4096, "salt": b"s",
         "salted_password": b"p"}]},
     "02 0275 01 00 02 0275 02 00001000 0273 0270 00 00"),
    # DescribeCluster (flexible from v0)
    (60, 0, {"include_cluster_authorized_operations": True}, "01 00"),
    (60, 1, {"endpoint_type": 2}, "00 02 00"),
    # DescribeAcls / CreateAcls / DeleteAcls: v1 adds the pattern type, v2 is flexible
    (29, 0, {"resource_type_filter": 2, "resource_name_filter": "t", "principal_filter": None,
             "host_filter": "*", "operation": 1, "permission_type": 3},
     "02 0001 74 ffff 0001 2a 01 03"),
    (29, 1, {"resource_type_filter": 2, "resource_name_filter": "t", "pattern_type_filter": 4,
             "principal_filter": None, "host_filter": "*", "operation": 1, "permission_type": 3},
     "02 0001 74 04 ffff 0001 2a 01 03"),
    (29, 2, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
             "principal_filter": "User:a", "host_filter": None, "operation": 2,
             "permission_type": 1},
     "01 00 01 07 557365723a61 00 02 01 00"),
    (29, 3, {"resource_type_filter": 3, "resource_name_filter": "g", "pattern_type_filter": 2,
             "principal_filter": None, "host_filter": None, "operation": 8, "permission_type": 3},
     "03 02 67 02 00 00 08 03 00"),
    (30, 0, {"creations": [{"resource_type": 2, "resource_name": "t", "principal": "User:a",
                            "host": "*", "operation": 4, "permission_type": 3}]},
     "00000001 02 0001 74 0006 557365723a61 0001 2a 04 03"),
    (30, 1, {"creations": [{"resource_type": 2, "resource_name": "t", "resource_pattern_type": 4,
                            "principal": "User:a", "host": "*", "operation": 4,
                            "permission_type": 3}]},
     "00000001 02 0001 74 04 0006 557365723a61 0001 2a 04 03"),
    (30, 2, {"creations": [{"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3,
                            "principal": "User:a", "host": "*", "operation": 4,
                            "permission_type": 3}]},
     "02 02 02 74 03 07 557365723a61 02 2a 04 03 00 00"),
    (30, 3, {"creations": []}, "01 00"),
    (31, 0, {"filters": [{"resource_type_filter": 1, "resource_name_filter": None,
                          "principal_filter": None, "host_filter": None, "operation": 1,
                          "permission_type": 1}]},
     "00000001 01 ffff ffff ffff 01 01"),
    (31, 1, {"filters": [{"resource_type_filter": 1, "resource_name_filter": None,
                          "pattern_type_filter": 1, "principal_filter": None,
                          "host_filter": None, "operation": 1, "permission_type": 1}]},
     "00000001 01 ffff 01 ffff ffff 01 01"),
    (31, 2, {"filters": [{"resource_type_filter": 2, "resource_name_filter": "t",
                          "pattern_type_filter": 3, "principal_filter": "User:a",
                          "host_filter": "*", "operation": 3, "permission_type": 2}]},
     "02 02 02 74 03 07 557365723a61 02 2a 03 02 00 00"),
    (31, 3, {"filters": []}, "01 00"),
    # FindCoordinator
    (10, 0, {"key": "g"}, "0001 67"),
    (10, 2, {"key": "g", "key_type": 1}, "0001 67 01"),
    # JoinGroup
    (11, 0, {"group_id": "g", "session_timeout_ms": 10000, "member_id": "",
             "protocol_type": "consumer",
             "protocols": [{"name": "range", "metadata": b"\x00\x01"}]},
     "0001 67 00002710 0000 " + CONSUMER + " 00000001 " + RANGE + " 00000002 0001"),
    (11, 5, {"group_id": "g", "session_timeout_ms": 10000, "rebalance_timeout_ms": 300000,
             "member_id": "", "protocol_type": "consumer",
             "protocols": [{"name": "range", "metadata": b"\x00\x01"}]},
     "0001 67 00002710 000493e0 0000 ffff " + CONSUMER
     + " 00000001 " + RANGE + " 00000002 0001"),
    # SyncGroup
    (14, 0, {"group_id": "g", "generation_id": 1, "member_id": "m",
             "assignments": [{"member_id": "m", "assignment": b"\x01"}]},
     "0001 67 00000001 0001 6d 00000001 0001 6d 00000001 01"),
    (14, 3, {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": "i",
             "assignments": []},
     "0001 67 00000001 0001 6d 0001 69 00000000"),
    # Heartbeat
    (12, 0, {"group_id": "g", "generation_id": 1, "member_id": "m"},
     "0001 67 00000001 0001 6d"),
    (12, 3, {"group_id": "g", "generation_id": 1, "member_id": "m"},
     "0001 67 00000001 0001 6d ffff"),
    # LeaveGroup
    (13, 0, {"group_id": "g", "member_id": "m"}, "0001 67 0001 6d"),
    (13, 3, {"group_id": "g", "members": [{"member_id": "m", "group_instance_id": None}]},
     "0001 67 00000001 0001 6d ffff"),
    # OffsetCommit
    # v0 (KIP-896 removed it in Kafka 4.0): no generation, member or retention.
    (8, 0, {"group_id": "g", "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 5, "committed_metadata": "m"}]}]},
     "0001 67 00000001 " + TOPIC_T + " 00000001 00000000 0000000000000005 0001 6d"),
    # v1 (sarama 1.22): generation and member, and a commit timestamp per partition.
    (8, 1, {"group_id": "g", "generation_id_or_member_epoch": 1, "member_id": "m",
            "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 5, "commit_timestamp": 7,
                 "committed_metadata": None}]}]},
     "0001 67 00000001 0001 6d 00000001 " + TOPIC_T
     + " 00000001 00000000 0000000000000005 0000000000000007 ffff"),
    (8, 2, {"group_id": "g", "generation_id_or_member_epoch": 1, "member_id": "m",
            "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}]}]},
     "0001 67 00000001 0001 6d ffffffffffffffff"  # retention defaults to -1
     " 00000001 " + TOPIC_T + " 00000001 00000000 0000000000000005 0000"),
    (8, 5, {"group_id": "g", "generation_id_or_member_epoch": 1, "member_id": "m",
            "retention_time_ms": 99,
            "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}]}]},
     "0001 67 00000001 0001 6d 00000001 " + TOPIC_T
     + " 00000001 00000000 0000000000000005 0000"),
    (8, 7, {"group_id": "g", "generation_id_or_member_epoch": 1, "member_id": "m",
            "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 5}]}]},
     "0001 67 00000001 0001 6d ffff 00000001 " + TOPIC_T
     + " 00000001 00000000 0000000000000005 ffffffff ffff"),
    # OffsetFetch
    (9, 0, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]},
     "0001 67 00000001 " + TOPIC_T + " 00000001 00000000"),
    (9, 1, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1]}]},
     "0001 67 00000001 " + TOPIC_T + " 00000002 00000000 00000001"),
    (9, 2, {"group_id": "g", "topics": None}, "0001 67 ffffffff"),  # null = all topics
    (9, 5, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": []}]},
     "0001 67 00000001 " + TOPIC_T + " 00000000"),
    (9, 6, {"group_id": "g", "topics": None}, "02 67 00 00"),  # flexible: compact null
    (9, 7, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}],
            "require_stable": True},
     "02 67 02 02 74 02 00000000 00 01 00"),  # v7+: require_stable, before the tags
    # ListGroups has an empty body
    (16, 0, {}, ""),
    (16, 2, {}, ""),
    (16, 3, {}, "00"),  # flexible: an empty tag section
    (16, 4, {"states_filter": ["Stable"]}, "02 07 537461626c65 00"),
    # DescribeGroups
    (15, 0, {"groups": ["g"]}, "00000001 0001 67"),
    (15, 3, {"groups": ["g"], "include_authorized_operations": True}, "00000001 0001 67 01"),
    # --- remaining version boundaries (a field or its nullability starts here) ---
    (18, 3, {"client_software_name": "a", "client_software_version": "b"}, "02 61 02 62 00"),
    (19, 1, {"topics": [], "timeout_ms": 1}, "00000000 00000001 00"),  # validate_only
    (32, 1, {"resources": [], "include_synonyms": True}, "00000000 01"),
    (15, 4, {"groups": []}, "00000000 00"),
    (1, 5, {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": 0,
            "topics": [{"topic": "t", "partitions": [
                {"partition": 2, "log_start_offset": 5, "partition_max_bytes": 1}]}]},
     "ffffffff 00000000 00000000 00000000 00 00000001 " + TOPIC_T
     + " 00000001 00000002 0000000000000000 0000000000000005 00000001"),
    (1, 9, {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": 0,
            "topics": [{"topic": "t", "partitions": [
                {"partition": 2, "current_leader_epoch": 3, "partition_max_bytes": 1}]}]},
     "ffffffff 00000000 00000000 00000000 00 00000000 ffffffff 00000001 " + TOPIC_T
     + " 00000001 00000002 00000003 0000000000000000 ffffffffffffffff 00000001"
     " 00000000"),  # no forgotten topics
    (10, 1, {"key": "tx", "key_type": 1}, "0002 7478 01"),
    (11, 1, {"group_id": "g", "session_timeout_ms": 1, "rebalance_timeout_ms": 2,
             "member_id": "m", "protocol_type": "", "protocols": []},
     "0001 67 00000001 00000002 0001 6d 0000 00000000"),
    (2, 2, {"replica_id": -1, "isolation_level": 1, "topics": []}, "ffffffff 01 00000000"),
    (2, 4, {"replica_id": -1, "topics": [{"name": "t", "partitions": [
        {"partition_index": 1, "current_leader_epoch": 0, "timestamp": -2}]}]},
     "ffffffff 00 00000001 " + TOPIC_T + " 00000001 00000001 00000000 fffffffffffffffe"),
    (8, 6, {"group_id": "g", "member_id": "", "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": 4,
         "committed_metadata": "m"}]}]},
     "0001 67 ffffffff 0000 00000001 " + TOPIC_T
     + " 00000001 00000000 0000000000000001 00000004 0001 6d"),
    # Metadata v10-12 (flexible): topics named by id too; v11 drops the cluster's
    # authorized operations, v12 lets a topic go by id alone (null name).
    (3, 10, {"topics": [{"topic_id": UUID_U, "name": "t"}]},
     "02 " + U + " 0274 00 01 00 00 00"),
    (3, 11, {"topics": [{"topic_id": UUID_U, "name": "t"}]},
     "02 " + U + " 0274 00 01 00 00"),
    (3, 12, {"topics": [{"topic_id": UUID_U, "name": None}],
             "allow_auto_topic_creation": False},
     "02 " + U + " 00 00 00 00 00"),
    # Share groups (KIP-932), v1.
    (76, 1, {"group_id": "g", "member_id": "m", "member_epoch": 0, "rack_id": None,
             "subscribed_topic_names": ["t"]},
     "0267 026d 00000000 00 02 0274 00"),
    (77, 1, {"group_ids": ["g"], "include_authorized_operations": False}, "02 0267 00 00"),
    (78, 1, {"group_id": "g", "member_id": "m", "share_session_epoch": 0, "max_wait_ms": 500,
             "min_bytes": 1, "max_bytes": 1048576, "max_records": 500, "batch_size": 500,
             "topics": [{"topic_id": UUID_U, "partitions": [
                 {"partition_index": 0, "acknowledgement_batches": [
                     {"first_offset": 0, "last_offset": 1, "acknowledge_types": [1]}]}]}],
             "forgotten_topics_data": []},
     "0267 026d 00000000 000001f4 00000001 00100000 000001f4 000001f4"
     " 02 " + U + " 02 00000000 02 0000000000000000 0000000000000001 02 01 00 00 00"
     " 01 00"),
    (79, 1, {"group_id": "g", "member_id": "m", "share_session_epoch": 1,
             "topics": [{"topic_id": UUID_U, "partitions": [
                 {"partition_index": 0, "acknowledgement_batches": [
                     {"first_offset": 2, "last_offset": 2, "acknowledge_types": [3]}]}]}]},
     "0267 026d 00000001 02 " + U + " 02 00000000 02 0000000000000002 0000000000000002"
     " 02 03 00 00 00 00"),
    # KIP-848 boundaries (OffsetCommit/OffsetFetch v8-9, ListGroups v5,
    # ConsumerGroupHeartbeat/Describe), proven against librdkafka talking to the broker
    # (tests/kafka/test_consumer_protocol_clients.py).
    (8, 9, {'group_id': 't', 'generation_id_or_member_epoch': 1, 'member_id': 't', 'group_instance_id': 't', 'topics': [{'name': 't', 'partitions': [{'partition_index': 1, 'committed_offset': 1, 'committed_leader_epoch': 1, 'committed_metadata': 't'}]}]},  # noqa: E501
     '0274000000010274027402027402000000010000000000000001000000010274000000'),
    (9, 8, {'groups': [{'group_id': 't', 'topics': [{'name': 't', 'partition_indexes': [1]}]}], 'require_stable': True},  # noqa: E501
     '020274020274020000000100000100'),
    (9, 9, {'groups': [{'group_id': 't', 'member_id': 't', 'member_epoch': 1, 'topics': [{'name': 't', 'partition_indexes': [1]}]}], 'require_stable': True},  # noqa: E501
     '020274027400000001020274020000000100000100'),
    (16, 5, {'states_filter': ['t'], 'types_filter': ['t']},
     '02027402027400'),
    (68, 0, {'group_id': 't', 'member_id': 't', 'member_epoch': 1, 'instance_id': 't', 'rack_id': 't', 'rebalance_timeout_ms': 1, 'subscribed_topic_names': ['t'], 'server_assignor': 't', 'topic_partitions': [{'topic_id': b'\x00\x11"3DUfw\x88\x99\xaa\xbb\xcc\xdd\xee\xff', 'partitions': [1]}]},  # noqa: E501
     '0274027400000001027402740000000102027402740200112233445566778899aabbccddeeff02000000010000'),
    (68, 1, {'group_id': 't', 'member_id': 't', 'member_epoch': 1, 'instance_id': 't', 'rack_id': 't', 'rebalance_timeout_ms': 1, 'subscribed_topic_names': ['t'], 'subscribed_topic_regex': 't', 'server_assignor': 't', 'topic_partitions': [{'topic_id': b'\x00\x11"3DUfw\x88\x99\xaa\xbb\xcc\xdd\xee\xff', 'partitions': [1]}]},  # noqa: E501
     '02740274000000010274027400000001020274027402740200112233445566778899aabbccddeeff02000000010000'),
    (69, 0, {'group_ids': ['t'], 'include_authorized_operations': True},
     '0202740100'),
    # KIP-714: a uuid, then the body tags.
    (71, 0, {'client_instance_id': b'\x00\x11"3DUfw\x88\x99\xaa\xbb\xcc\xdd\xee\xff'},
     '00112233445566778899aabbccddeeff00'),
    (72, 0, {'client_instance_id': b'\x00\x11"3DUfw\x88\x99\xaa\xbb\xcc\xdd\xee\xff', 'subscription_id': 1, 'terminating': True, 'compression_type': 1, 'metrics': b't'},  # noqa: E501
     '00112233445566778899aabbccddeeff' '00000001' '01' '01' '0274' '00'),
]

# fmt: on

METADATA_BROKER = "00000001 0001 68 00002384"  # node 1, host "h", port 9092
METADATA_PARTITION_V0 = "0000 00000000 00000001 00000001 00000001 00000001 00000001"

# fmt: off
RESPONSE_VECTORS: list[tuple[int, int, dict[str, Any], str]] = [
    # ApiVersions
    (18, 0, {"api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}]},
     "0000 00000001 0012 0000 0004"),
    (18, 1, {"api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}]},
     "0000 00000001 0012 0000 0004 00000000"),
    (18, 3, {"api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}]},
     "0000 02 0012 0000 0004 00 00000000 00"),  # compact array, element tags, body tags
    (18, 4, {"error_code": 35, "api_keys": [], "throttle_time_ms": 1,
             "finalized_features_epoch": 5},
     "0023 01 00000001 01 01 08 0000000000000005"),  # one tagged field: tag 1, 8 bytes
    # Metadata
    (3, 0, {"brokers": [{"node_id": 1, "host": "h", "port": 9092}],
            "topics": [{"error_code": 0, "name": "t", "partitions": [
                {"partition_index": 0, "leader_id": 1, "replica_nodes": [1], "isr_nodes": [1]}]}]},
     "00000001 " + METADATA_BROKER + " 00000001 0000 " + TOPIC_T
     + " 00000001 " + METADATA_PARTITION_V0),
    (3, 1, {"brokers": [{"node_id": 1, "host": "h", "port": 9092}], "controller_id": 1,
            "topics": [{"error_code": 0, "name": "t", "partitions": [
                {"partition_index": 0, "leader_id": 1, "replica_nodes": [1], "isr_nodes": [1]}]}]},
     "00000001 " + METADATA_BROKER + " ffff"  # rack null
     " 00000001"  # controller id
     " 00000001 0000 " + TOPIC_T + " 00"  # is_internal false
     " 00000001 " + METADATA_PARTITION_V0),
    (3, 8, {"brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": "r"}],
            "cluster_id": "c", "controller_id": 1,
            "topics": [{"error_code": 3, "name": "t", "is_internal": True, "partitions": [
                {"partition_index": 0, "leader_id": 1, "leader_epoch": 0,
                 "replica_nodes": [1], "isr_nodes": [1]}]}]},
     "00000000 00000001 " + METADATA_BROKER + " 0001 72 0001 63 00000001"
     " 00000001 0003 " + TOPIC_T + " 01"
     " 00000001 0000 00000000 00000001 00000000 00000001 00000001 00000001 00000001 00000000"
     " 80000000 80000000"),  # topic and cluster authorized operations default INT32_MIN
    # Produce
    (0, 0, {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 5}]}]},
     "00000001 " + TOPIC_T + " 00000001 00000000 0000 0000000000000005"),  # nothing after
    (0, 1, {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 5}]}], "throttle_time_ms": 7},
     "00000001 " + TOPIC_T + " 00000001 00000000 0000 0000000000000005 00000007"),
    (0, 2, {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 5, "log_append_time_ms": 9}]}]},
     "00000001 " + TOPIC_T + " 00000001 00000000 0000 0000000000000005"
     " 0000000000000009 00000000"),
    (0, 3, {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 5}]}]},
     "00000001 " + TOPIC_T + " 00000001 00000000 0000 0000000000000005"
     " ffffffffffffffff 00000000"),  # log append time -1, throttle last
    (0, 5, {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 5, "log_start_offset": 0}]}],
            "throttle_time_ms": 7},
     "00000001 " + TOPIC_T + " 00000001 00000000 0000 0000000000000005"
     " ffffffffffffffff 0000000000000000 00000007"),
    (0, 8, {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 87, "base_offset": -1,
         "record_errors": [{"batch_index": 1, "batch_index_error_message": "bad"}],
         "error_message": None}]}]},
     "00000001 " + TOPIC_T + " 00000001 00000000 0057 ffffffffffffffff"
     " ffffffffffffffff ffffffffffffffff"
     " 00000001 00000001 0003 626164 ffff 00000000"),
    # Fetch
    (1, 0, {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "high_watermark": 3, "records": [b"\x01"]}]}]},
     "00000001 " + TOPIC_T + " 00000001 00000000 0000 0000000000000003 00000001 01"),
    (1, 1, {"throttle_time_ms": 2, "responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "high_watermark": 3, "records": None}]}]},
     "00000002 00000001 " + TOPIC_T + " 00000001 00000000 0000 0000000000000003 ffffffff"),
    (1, 4, {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "high_watermark": 3, "last_stable_offset": 3,
         "records": b"\x01\x02\x03"}]}]},
     "00000000 00000001 " + TOPIC_T + " 00000001 00000000 0000 0000000000000003"
     " 0000000000000003 ffffffff 00000003 010203"),  # aborted transactions null
    (1, 11, {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "high_watermark": 3, "last_stable_offset": 3,
         "log_start_offset": 0, "aborted_transactions": [{"producer_id": 1, "first_offset": 2}],
         "records": [b"\x01", b"\x02\x03"]}]}]},
     "00000000 0000 00000000 00000001 " + TOPIC_T + " 00000001 00000000 0000"
     " 0000000000000003 0000000000000003 0000000000000000"
     " 00000001 0000000000000001 0000000000000002"
     " ffffffff 00000003 010203"),  # preferred read replica -1, records joined
    # ListOffsets
    # v0: the offsets as a list, no timestamp (removed by KIP-896, still sent by sarama).
    (2, 0, {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "old_style_offsets": [10]}]}]},
     "00000001 " + TOPIC_T + " 00000001 00000000 0000 00000001 000000000000000a"),
    (2, 1, {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "offset": 10}]}]},
     "00000001 " + TOPIC_T + " 00000001 00000000 0000 ffffffffffffffff 000000000000000a"),
    (2, 5, {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "offset": 10, "leader_epoch": 0}]}]},
     "00000000 00000001 " + TOPIC_T + " 00000001 00000000 0000 ffffffffffffffff"
     " 000000000000000a 00000000"),
    # InitProducerId
    (22, 0, {"producer_id": 1000}, "00000000 0000 00000000000003e8 0000"),
    (22, 1, {"error_code": 15}, "00000000 000f ffffffffffffffff 0000"),
    (22, 4, {"error_code": 90}, "00000000 005a ffffffffffffffff 0000 00"),  # PRODUCER_FENCED
    # AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit
    (24, 0, {"results": [{"name": "t", "results": [{"partition_index": 0, "error_code": 0}]}]},
     "00000000 00000001 " + TOPIC_T + " 00000001 00000000 0000"),
    (24, 2, {"results": [{"name": "t", "results": [{"partition_index": 1, "error_code": 51}]}]},
     "00000000 00000001 " + TOPIC_T + " 00000001 00000001 0033"),
    (24, 3, {"results": [{"name": "t", "results": [{"partition_index": 0, "error_code": 0}]}]},
     "00000000 02 02 74 02 00000000 0000 00 00 00"),
    (25, 0, {"error_code": 0}, "00000000 0000"),
    (25, 2, {"error_code": 90}, "00000000 005a"),
    (25, 3, {"error_code": 0}, "00000000 0000 00"),
    (26, 0, {"error_code": 48}, "00000000 0030"),
    (26, 2, {"error_code": 0}, "00000000 0000"),
    (26, 3, {"error_code": 90}, "00000000 005a 00"),
    (28, 0, {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 0}]}]},
     "00000000 00000001 " + TOPIC_T + " 00000001 00000000 0000"),
    (28, 2, {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 47}]}]},
     "00000000 00000001 " + TOPIC_T + " 00000001 00000000 002f"),
    (28, 3, {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 22}]}]},
     "00000000 02 02 74 02 00000000 0016 00 00 00"),  # ILLEGAL_GENERATION
    (65, 0, {"transaction_states": [{"error_code": 0, "transactional_id": "x",
                                     "transaction_state": "Ongoing",
                                     "transaction_timeout_ms": 60000,
                                     "transaction_start_time_ms": 5, "producer_id": 1,
                                     "producer_epoch": 0,
                                     "topics": [{"topic": "t", "partitions": [0]}]}]},
     "00000000 02 0000 0278 084f6e676f696e67 0000ea60 0000000000000005 0000000000000001 0000"
     " 02 0274 02 00000000 00 00 00"),
    (66, 0, {"error_code": 0, "unknown_state_filters": [], "transaction_states": [
        {"transactional_id": "x", "producer_id": 1, "transaction_state": "Ongoing"}]},
     "00000000 0000 01 02 0278 0000000000000001 084f6e676f696e67 00 00"),
    (66, 1, {"error_code": 0, "unknown_state_filters": ["Bad"], "transaction_states": []},
     "00000000 0000 02 04 426164 01 00"),
    # CreateTopics
    (19, 0, {"topics": [{"name": "t", "error_code": 36}]}, "00000001 " + TOPIC_T + " 0024"),
    (19, 4, {"topics": [{"name": "t", "error_code": 0}]},
     "00000000 00000001 " + TOPIC_T + " 0000 ffff"),
    # DeleteTopics
    (20, 0, {"responses": [{"name": "a", "error_code": 3}]}, "00000001 0001 61 0003"),
    (20, 3, {"responses": []}, "00000000 00000000"),
    # DescribeConfigs
    (32, 0, {"results": [{"resource_type": 2, "resource_name": "t", "configs": [
        {"name": "k", "value": "v", "is_default": True}]}]},
     "00000000 00000001 0000 ffff 02 " + TOPIC_T + " 00000001 0001 6b 0001 76 00 01 00"),
    (32, 1, {"results": [{"resource_type": 2, "resource_name": "t", "configs": [
        {"name": "k", "value": "v", "read_only": True, "config_source": 5,
         "synonyms": [{"name": "k", "value": None, "source": 5}]}]}]},
     "00000000 00000001 0000 ffff 02 " + TOPIC_T
     + " 00000001 0001 6b 0001 76 01 05 00 00000001 0001 6b ffff 05"),
    # AlterConfigs, IncrementalAlterConfigs
    (33, 0, {"throttle_time_ms": 1, "responses": [{"error_code": 40, "error_message": "m",
                                                  "resource_type": 2, "resource_name": "t"}]},
     "00000001 00000001 0028 0001 6d 02 " + TOPIC_T),
    (33, 1, {"responses": [{"error_code": 0, "error_message": None, "resource_type": 4,
                            "resource_name": "0"}]},
     "00000000 00000001 0000 ffff 04 0001 30"),
    (44, 0, {"responses": [{"error_code": 0, "error_message": None, "resource_type": 2,
                            "resource_name": "t"}]},
     "00000000 00000001 0000 ffff 02 " + TOPIC_T),
    # CreatePartitions, DeleteGroups, OffsetDelete
    (37, 0, {"throttle_time_ms": 1, "results": [{"name": "t", "error_code": 37,
                                                "error_message": "m"}]},
     "00000001 00000001 " + TOPIC_T + " 0025 0001 6d"),
    (37, 1, {"results": [{"name": "t", "error_code": 0, "error_message": None}]},
     "00000000 00000001 " + TOPIC_T + " 0000 ffff"),
    (42, 0, {"throttle_time_ms": 1, "results": [{"group_id": "g", "error_code": 68}]},
     "00000001 00000001 0001 67 0044"),
    (42, 1, {"results": []}, "00000000 00000000"),
    (47, 0, {"throttle_time_ms": 2, "topics": [{"name": "t", "partitions": [
        {"partition_index": 1, "error_code": 86}]}]},
     "0000 00000002 00000001 " + TOPIC_T + " 00000001 00000001 0056"),
    # OffsetForLeaderEpoch
    (23, 0, {"topics": [{"topic": "t", "partitions": [
        {"error_code": 3, "partition": 1, "end_offset": -1}]}]},
     "00000001 " + TOPIC_T + " 00000001 0003 00000001 ffffffffffffffff"),
    (23, 1, {"topics": [{"topic": "t", "partitions": [
        {"error_code": 0, "partition": 0, "leader_epoch": 0, "end_offset": 3}]}]},
     "00000001 " + TOPIC_T + " 00000001 0000 00000000 00000000 0000000000000003"),
    (23, 2, {"throttle_time_ms": 1, "topics": []}, "00000001 00000000"),
    (23, 3, {"topics": []}, "00000000 00000000"),
    # DeleteRecords (flexible from v2)
    (21, 0, {"throttle_time_ms": 1, "topics": [{"name": "t", "partitions": [
        {"partition_index": 1, "low_watermark": 5, "error_code": 0}]}]},
     "00000001 00000001 " + TOPIC_T + " 00000001 00000001 0000000000000005 0000"),
    (21, 2, {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "low_watermark": -1, "error_code": 1}]}]},
     "00000000 02 02 74 02 00000000 ffffffffffffffff 0001 00 00 00"),
    # DescribeLogDirs (flexible from v2)
    (35, 0, {"throttle_time_ms": 1, "results": [{"error_code": 0, "log_dir": "d", "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "partition_size": 5, "offset_lag": 0,
                                      "is_future_key": False}]}]}]},
     "00000001 00000001 0000 0001 64 00000001 " + TOPIC_T
     + " 00000001 00000000 0000000000000005 0000000000000000 00"),
    (35, 3, {"error_code": 0, "results": []}, "00000000 0000 01 00"),
    (35, 4, {"results": [{"error_code": 0, "log_dir": "d", "topics": [], "total_bytes": 10,
                          "usable_bytes": 4}]},
     "00000000 0000 02 0000 02 64 01 000000000000000a 0000000000000004 00 00"),
    # SaslHandshake, SaslAuthenticate, the SCRAM credential APIs
    (17, 0, {"error_code": 0, "mechanisms": ["PLAIN"]}, "0000 00000001 0005 504c41494e"),
    (17, 1, {"error_code": 33, "mechanisms": []}, "0021 00000000"),
    (36, 0, {"error_code": 58, "error_message": "m", "auth_bytes": b""},
     "003a 0001 6d 00000000"),
    (36, 1, {"error_code": 0, "error_message": None, "auth_bytes": b"v",
             "session_lifetime_ms": 1000}, "0000 ffff 00000001 76 00000000000003e8"),
    (36, 2, {"error_code": 0, "error_message": None, "auth_bytes": b"v",
             "session_lifetime_ms": 0}, "0000 00 02 76 0000000000000000 00"),
    (50, 0, {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": [
        {"user": "u", "error_code": 0, "error_message": None,
         "credential_infos": [{"mechanism": 1, "iterations": 4096}]}]},
     "00000000 0000 00 02 0275 0000 00 02 01 00001000 00 00 00"),
    (51, 0, {"throttle_time_ms": 0, "results": [
        {"user_name": "u", "error_code": 93, "error_message": "m"}]},
     "00000000 02 0275 005d 026d 00 00"),
    # DescribeCluster (flexible from v0)
    (60, 0, {"cluster_id": "c", "controller_id": 0, "brokers": [
        {"broker_id": 0, "host": "h", "port": 9092, "rack": None}]},
     "00000000 0000 00 02 63 00000000 02 00000000 02 68 00002384 00 00 80000000 00"),
    (60, 1, {"error_code": 114, "error_message": "m", "endpoint_type": 2, "cluster_id": "",
             "brokers": []},
     "00000000 0072 02 6d 02 01 ffffffff 01 80000000 00"),  # controller_id defaults to -1
    # DescribeAcls / CreateAcls / DeleteAcls
    (29, 0, {"error_code": 0, "error_message": None, "resources": [
        {"resource_type": 2, "resource_name": "t", "acls": [
            {"principal": "User:a", "host": "*", "operation": 3, "permission_type": 3}]}]},
     "00000000 0000 ffff 00000001 02 0001 74 00000001 0006 557365723a61 0001 2a 03 03"),
    (29, 1, {"error_code": 0, "error_message": None, "resources": [
        {"resource_type": 2, "resource_name": "t", "pattern_type": 4, "acls": [
            {"principal": "User:a", "host": "*", "operation": 3, "permission_type": 3}]}]},
     "00000000 0000 ffff 00000001 02 0001 74 04 00000001 0006 557365723a61 0001 2a 03 03"),
    (29, 2, {"error_code": 0, "error_message": None, "resources": [
        {"resource_type": 2, "resource_name": "t", "pattern_type": 3, "acls": [
            {"principal": "User:a", "host": "*", "operation": 3, "permission_type": 3}]}]},
     "00000000 0000 00 02 02 02 74 03 02 07 557365723a61 02 2a 03 03 00 00 00"),
    (29, 3, {"error_code": 31, "error_message": "m", "resources": []},
     "00000000 001f 02 6d 01 00"),
    (30, 0, {"results": [{"error_code": 0, "error_message": None}]},
     "00000000 00000001 0000 ffff"),
    (30, 1, {"throttle_time_ms": 5, "results": [{"error_code": 42, "error_message": "m"}]},
     "00000005 00000001 002a 0001 6d"),
    (30, 2, {"results": [{"error_code": 0, "error_message": None}]},
     "00000000 02 0000 00 00 00"),
    (30, 3, {"results": []}, "00000000 01 00"),
    (31, 0, {"filter_results": [{"error_code": 0, "error_message": None, "matching_acls": [
        {"error_code": 0, "error_message": None, "resource_type": 2, "resource_name": "t",
         "principal": "User:a", "host": "*", "operation": 3, "permission_type": 3}]}]},
     "00000000 00000001 0000 ffff 00000001 0000 ffff 02 0001 74 0006 557365723a61 0001 2a"
     " 03 03"),
    (31, 1, {"filter_results": [{"error_code": 0, "error_message": None, "matching_acls": [
        {"error_code": 0, "error_message": None, "resource_type": 2, "resource_name": "t",
         "pattern_type": 4, "principal": "User:a", "host": "*", "operation": 3,
         "permission_type": 3}]}]},
     "00000000 00000001 0000 ffff 00000001 0000 ffff 02 0001 74 04 0006 557365723a61"
     " 0001 2a 03 03"),
    (31, 2, {"filter_results": [{"error_code": 31, "error_message": "m", "matching_acls": []}]},
     "00000000 02 001f 02 6d 01 00 00"),
    (31, 3, {"filter_results": [{"error_code": 0, "error_message": None, "matching_acls": [
        {"error_code": 0, "error_message": None, "resource_type": 3, "resource_name": "g",
         "pattern_type": 3, "principal": "User:a", "host": "*", "operation": 2,
         "permission_type": 2}]}]},
     "00000000 02 0000 00 02 0000 00 03 02 67 03 07 557365723a61 02 2a 02 02 00 00 00"),
    # FindCoordinator
    (10, 0, {"node_id": 1, "host": "h", "port": 9092}, "0000 00000001 0001 68 00002384"),
    (10, 1, {"error_code": 15, "node_id": -1, "host": "", "port": -1},
     "00000000 000f ffff ffffffff 0000 ffffffff"),
    # JoinGroup
    (11, 0, {"generation_id": 1, "protocol_name": "range", "leader": "m", "member_id": "m",
             "members": [{"member_id": "m", "metadata": b"\x00"}]},
     "0000 00000001 " + RANGE + " 0001 6d 0001 6d 00000001 0001 6d 00000001 00"),
    (11, 4, {"error_code": 79, "member_id": "m"},
     "00000000 004f ffffffff 0000 0000 0001 6d 00000000"),  # generation defaults to -1
    (11, 5, {"generation_id": 1, "protocol_name": "range", "leader": "m", "member_id": "m",
             "members": [{"member_id": "m", "metadata": b"\x00"}]},
     "00000000 0000 00000001 " + RANGE + " 0001 6d 0001 6d 00000001 0001 6d ffff 00000001 00"),
    # SyncGroup
    (14, 0, {"assignment": b"\x01"}, "0000 00000001 01"),
    (14, 3, {"error_code": 27}, "00000000 001b 00000000"),
    # Heartbeat
    (12, 0, {"error_code": 27}, "001b"),
    (12, 3, {"throttle_time_ms": 2}, "00000002 0000"),
    # LeaveGroup
    (13, 0, {}, "0000"),
    (13, 3, {"members": [{"member_id": "m", "group_instance_id": None, "error_code": 25}]},
     "00000000 0000 00000001 0001 6d ffff 0019"),
    # OffsetCommit
    (8, 0, {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 0}]}]},
     "00000001 " + TOPIC_T + " 00000001 00000000 0000"),
    (8, 2, {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 0}]}]},
     "00000001 " + TOPIC_T + " 00000001 00000000 0000"),
    (8, 7, {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 22}]}]},
     "00000000 00000001 " + TOPIC_T + " 00000001 00000000 0016"),
    # OffsetFetch
    (9, 0, {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 3, "metadata": "m", "error_code": 0}]}]},
     "00000001 " + TOPIC_T + " 00000001 00000000 0000000000000003 0001 6d 0000"),
    (9, 1, {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": -1, "metadata": "", "error_code": 0}]}]},
     "00000001 " + TOPIC_T + " 00000001 00000000 ffffffffffffffff 0000 0000"),
    (9, 5, {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 4, "metadata": None, "error_code": 0}]}],
            "error_code": 16},
     "00000000 00000001 " + TOPIC_T + " 00000001 00000000 0000000000000004 ffffffff ffff 0000"
     " 0010"),  # top-level error code comes last
    (9, 6, {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 4, "metadata": None, "error_code": 0}]}]},
     "00000000 02 02 74 02 00000000 0000000000000004 ffffffff 00 0000 00 00 0000 00"),
    (9, 7, {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": -1, "metadata": "", "error_code": 88}]}]},
     "00000000 02 02 74 02 00000000 ffffffffffffffff ffffffff 01 0058 00 00 0000 00"),
    # ListGroups
    (16, 0, {"groups": [{"group_id": "g", "protocol_type": "consumer"}]},
     "0000 00000001 0001 67 " + CONSUMER),
    (16, 2, {"groups": []}, "00000000 0000 00000000"),
    (16, 3, {"groups": [{"group_id": "g", "protocol_type": "consumer"}]},
     "00000000 0000 02 02 67 09 636f6e73756d6572 00 00"),
    (16, 4, {"groups": [{"group_id": "g", "protocol_type": "consumer", "group_state": "Stable"}]},
     "00000000 0000 02 02 67 09 636f6e73756d6572 07 537461626c65 00 00"),
    # DescribeGroups
    (15, 0, {"groups": [{"group_id": "g", "group_state": "Stable", "protocol_type": "consumer",
                         "protocol_data": "range", "members": [
                             {"member_id": "m", "client_id": "c", "client_host": "/h",
                              "member_metadata": b"\x01", "member_assignment": b"\x02"}]}]},
     "00000001 0000 0001 67 0006 537461626c65 " + CONSUMER + " " + RANGE
     + " 00000001 0001 6d 0001 63 0002 2f68 00000001 01 00000001 02"),
    (15, 4, {"groups": [{"error_code": 69, "group_id": "g", "members": [{"member_id": "m"}]}]},
     "00000000 00000001 0045 0001 67 0000 0000 0000"
     " 00000001 0001 6d ffff 0000 0000 00000000 00000000"
     " 80000000"),  # authorized operations default INT32_MIN
    # --- remaining version boundaries (a field or its nullability starts here) ---
    (19, 1, {"topics": [{"name": "t", "error_code": 0, "error_message": "ok"}]},
     "00000001 " + TOPIC_T + " 0000 0002 6f6b"),
    (19, 2, {"throttle_time_ms": 5, "topics": []}, "00000005 00000000"),
    (20, 1, {"throttle_time_ms": 5, "responses": [{"name": "a", "error_code": 0}]},
     "00000005 00000001 0001 61 0000"),
    (32, 2, {"throttle_time_ms": 1, "results": []}, "00000001 00000000"),
    (15, 1, {"throttle_time_ms": 1, "groups": []}, "00000001 00000000"),
    (15, 3, {"groups": [{"group_id": "g", "group_state": "Empty", "authorized_operations": 8}]},
     "00000000 00000001 0000 0001 67 0005 456d707479 0000 0000 00000000 00000008"),
    (1, 5, {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "error_code": 1, "high_watermark": 10, "last_stable_offset": 10,
         "log_start_offset": 2, "aborted_transactions": [], "records": None}]}]},
     "00000000 00000001 " + TOPIC_T + " 00000001 00000000 0001 000000000000000a"
     " 000000000000000a 0000000000000002 00000000 ffffffff"),  # no aborted txns, null records
    (1, 7, {"session_id": 9, "responses": []}, "00000000 0000 00000009 00000000"),
    (10, 2, {"throttle_time_ms": 1, "error_message": "ok", "node_id": 1, "host": "h", "port": 1},
     "00000001 0000 0002 6f6b 00000001 0001 68 00000001"),
    (12, 1, {"throttle_time_ms": 3}, "00000003 0000"),
    (11, 2, {"throttle_time_ms": 1, "generation_id": 2, "protocol_name": "range",
             "leader": "a", "member_id": "b"},
     "00000001 0000 00000002 " + RANGE + " 0001 61 0001 62 00000000"),
    (13, 1, {"throttle_time_ms": 1, "error_code": 25}, "00000001 0019"),
    (16, 1, {"throttle_time_ms": 1}, "00000001 0000 00000000"),
    (2, 2, {"throttle_time_ms": 1}, "00000001 00000000"),
    (2, 4, {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "timestamp": 1, "offset": 2, "leader_epoch": 3}]}]},
     "00000000 00000001 " + TOPIC_T + " 00000001 00000000 0000 0000000000000001"
     " 0000000000000002 00000003"),
    (3, 2, {"cluster_id": None, "controller_id": 1}, "00000000 ffff 00000001 00000000"),
    (3, 3, {"throttle_time_ms": 2, "controller_id": 1}, "00000002 00000000 ffff 00000001 00000000"),
    (3, 5, {"controller_id": 1, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "leader_id": 1, "offline_replicas": [2]}]}]},
     "00000000 00000000 ffff 00000001 00000001 0000 " + TOPIC_T + " 00"
     " 00000001 0000 00000000 00000001 00000000 00000000 00000001 00000002"),
    (3, 7, {"controller_id": 1, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "leader_id": 1, "leader_epoch": 5}]}]},
     "00000000 00000000 ffff 00000001 00000001 0000 " + TOPIC_T + " 00"
     " 00000001 0000 00000000 00000001 00000005 00000000 00000000 00000000"),
    (8, 3, {"throttle_time_ms": 1}, "00000001 00000000"),
    (9, 2, {"error_code": 16}, "00000000 0010"),
    (9, 3, {"throttle_time_ms": 1}, "00000001 00000000 0000"),
    (14, 1, {"throttle_time_ms": 1}, "00000001 0000 00000000"),
    # Metadata v10-12 (flexible): each topic's id after its name.
    (3, 10, {"brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
             "cluster_id": "c", "controller_id": 1,
             "topics": [{"error_code": 0, "name": "t", "topic_id": UUID_U, "partitions": [
                 {"partition_index": 0, "leader_id": 1, "leader_epoch": 0,
                  "replica_nodes": [1], "isr_nodes": [1]}]}]},
     "00000000 02 00000001 0268 00002384 00 00 0263 00000001"
     " 02 0000 0274 " + U + " 00"
     " 02 0000 00000000 00000001 00000000 02 00000001 02 00000001 01 00"
     " 80000000 00 80000000 00"),
    (3, 11, {"brokers": [], "cluster_id": None, "controller_id": 1,
             "topics": [{"error_code": 3, "name": "t", "topic_id": UUID_U, "partitions": []}]},
     "00000000 01 00 00000001 02 0003 0274 " + U + " 00 01 80000000 00 00"),
    (3, 12, {"brokers": [], "cluster_id": None, "controller_id": -1,
             "topics": [{"error_code": 100, "name": None, "topic_id": UUID_U,
                         "partitions": []}]},
     "00000000 01 00 ffffffff 02 0064 00 " + U + " 00 01 80000000 00 00"),
    # Share groups (KIP-932), v1. The heartbeat's Assignment is always present (01).
    (76, 1, {"error_code": 0, "member_id": "m", "member_epoch": 1,
             "heartbeat_interval_ms": 5000,
             "assignment": {"topic_partitions": [{"topic_id": UUID_U, "partitions": [0]}]}},
     "00000000 0000 00 026d 00000001 00001388 01 02 " + U + " 02 00000000 00 00 00"),
    (77, 1, {"groups": [{"error_code": 0, "group_id": "g", "group_state": "Stable",
                         "group_epoch": 1, "assignment_epoch": 1, "assignor_name": "simple",
                         "members": [{"member_id": "m", "rack_id": None, "member_epoch": 1,
                                      "client_id": "", "client_host": "",
                                      "subscribed_topic_names": ["t"],
                                      "assignment": {"topic_partitions": [
                                          {"topic_id": UUID_U, "topic_name": "t",
                                           "partitions": [0]}]}}]}]},
     "00000000 02 0000 00 0267 07 537461626c65 00000001 00000001 07 73696d706c65"
     " 02 026d 00 00000001 01 01 02 0274 02 " + U + " 0274 02 00000000 00 00 00"
     " 80000000 00 00"),
    (78, 1, {"error_code": 0, "acquisition_lock_timeout_ms": 30000,
             "responses": [{"topic_id": UUID_U, "partitions": [
                 {"partition_index": 0, "error_code": 0, "acknowledge_error_code": 0,
                  "current_leader": {"leader_id": 1, "leader_epoch": 0},
                  "records": b"\xaa",
                  "acquired_records": [
                      {"first_offset": 0, "last_offset": 0, "delivery_count": 1}]}]}],
             "node_endpoints": []},
     "00000000 0000 00 00007530 02 " + U + " 02 00000000 0000 00 0000 00"
     " 00000001 00000000 00 02 aa 02 0000000000000000 0000000000000000 0001 00 00 00"
     " 01 00"),
    (79, 1, {"error_code": 0,
             "responses": [{"topic_id": UUID_U, "partitions": [
                 {"partition_index": 0, "error_code": 121,
                  "current_leader": {"leader_id": 1, "leader_epoch": 0}}]}],
             "node_endpoints": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}]},
     "00000000 0000 00 02 " + U + " 02 00000000 0079 00 00000001 00000000 00 00 00"
     " 02 00000001 0268 00002384 00 00 00"),
    # KIP-848 boundaries (OffsetCommit/OffsetFetch v8-9, ListGroups v5,
    # ConsumerGroupHeartbeat/Describe), proven against librdkafka talking to the broker
    # (tests/kafka/test_consumer_protocol_clients.py).
    (8, 9, {'throttle_time_ms': 1, 'topics': [{'name': 't', 'partitions': [{'partition_index': 1, 'error_code': 1}]}]},  # noqa: E501
     '0000000102027402000000010001000000'),
    (9, 8, {'throttle_time_ms': 1, 'groups': [{'group_id': 't', 'topics': [{'name': 't', 'partitions': [{'partition_index': 1, 'committed_offset': 1, 'committed_leader_epoch': 1, 'metadata': 't', 'error_code': 1}]}], 'error_code': 1}]},  # noqa: E501
     '00000001020274020274020000000100000000000000010000000102740001000000010000'),
    (9, 9, {'throttle_time_ms': 1, 'groups': [{'group_id': 't', 'topics': [{'name': 't', 'partitions': [{'partition_index': 1, 'committed_offset': 1, 'committed_leader_epoch': 1, 'metadata': 't', 'error_code': 1}]}], 'error_code': 1}]},  # noqa: E501
     '00000001020274020274020000000100000000000000010000000102740001000000010000'),
    (16, 5, {'throttle_time_ms': 1, 'error_code': 1, 'groups': [{'group_id': 't', 'protocol_type': 't', 'group_state': 't', 'group_type': 't'}]},  # noqa: E501
     '0000000100010202740274027402740000'),
    (69, 0, {'throttle_time_ms': 1, 'groups': [{'error_code': 1, 'error_message': 't', 'group_id': 't', 'group_state': 't', 'group_epoch': 1, 'assignment_epoch': 1, 'assignor_name': 't', 'members': [{'member_id': 't', 'instance_id': 't', 'rack_id': 't', 'member_epoch': 1, 'client_id': 't', 'client_host': 't', 'subscribed_topic_names': ['t'], 'subscribed_topic_regex': 't', 'assignment': {'topic_partitions': [{'topic_id': b'\x00\x11"3DUfw\x88\x99\xaa\xbb\xcc\xdd\xee\xff', 'topic_name': 't', 'partitions': [1]}]}, 'target_assignment': {'topic_partitions': [{'topic_id': b'\x00\x11"3DUfw\x88\x99\xaa\xbb\xcc\xdd\xee\xff', 'topic_name': 't', 'partitions': [1]}]}}], 'authorized_operations': 1}]},  # noqa: E501
     '000000010200010274027402740000000100000001027402027402740274000000010274027402027402740200112233445566778899aabbccddeeff0274020000000100000200112233445566778899aabbccddeeff02740200000001000000000000010000'),
    (71, 0, {'throttle_time_ms': 1, 'error_code': 1, 'client_instance_id': b'\x00\x11"3DUfw\x88\x99\xaa\xbb\xcc\xdd\xee\xff', 'subscription_id': 1, 'accepted_compression_types': [1], 'push_interval_ms': 1, 'telemetry_max_bytes': 1, 'delta_temporality': True, 'requested_metrics': ['t']},  # noqa: E501
     '00000001' '0001' '00112233445566778899aabbccddeeff' '00000001' '0201' '00000001' '00000001' '01' '020274' '00'),  # noqa: E501
    (72, 0, {'throttle_time_ms': 1, 'error_code': 1},
     '00000001000100'),
    (68, 0, {'throttle_time_ms': 1, 'error_code': 1, 'error_message': 't', 'member_id': 't', 'member_epoch': 1, 'heartbeat_interval_ms': 1, 'assignment': {'topic_partitions': [{'topic_id': b'\x00\x11"3DUfw\x88\x99\xaa\xbb\xcc\xdd\xee\xff', 'partitions': [1]}]}},  # noqa: E501
     '000000010001027402740000000100000001010200112233445566778899aabbccddeeff0200000001000000'),
    (68, 1, {'throttle_time_ms': 1, 'error_code': 1, 'error_message': 't', 'member_id': 't', 'member_epoch': 1, 'heartbeat_interval_ms': 1, 'assignment': {'topic_partitions': [{'topic_id': b'\x00\x11"3DUfw\x88\x99\xaa\xbb\xcc\xdd\xee\xff', 'partitions': [1]}]}},  # noqa: E501
     '000000010001027402740000000100000001010200112233445566778899aabbccddeeff0200000001000000'),
    # A null Assignment (unchanged since the last answer): int8 -1, then the body tags.
    (68, 1, {"error_code": 0, "member_id": None, "member_epoch": 3,
             "heartbeat_interval_ms": 5000, "assignment": None},
     "00000000 0000 00 00 00000003 00001388 ff 00"),
]

# fmt: on


def _vector_id(v: tuple[int, int, dict[str, Any], str]) -> str:
    return f"{APIS[v[0]].name}-v{v[1]}"


@pytest.mark.parametrize("vector", REQUEST_VECTORS, ids=_vector_id)
def test_request_vectors(vector: tuple[int, int, dict[str, Any], str]) -> None:
    key, version, body, body_hex = vector
    expected = hx(req_header(key, version), body_hex)
    frame = encode_request(key, version, 1, "c", body)
    assert frame.hex() == expected.hex()
    header, pos = decode_request_header(frame)
    assert header == (key, version, 1, "c")
    decoded = norm(decode_request(key, version, frame, pos))
    present = {f.name for f in APIS[key].request.fields if f.present(version)}
    assert contains(decoded, {k: v for k, v in body.items() if k in present}), decoded


@pytest.mark.parametrize("vector", RESPONSE_VECTORS, ids=_vector_id)
def test_response_vectors(vector: tuple[int, int, dict[str, Any], str]) -> None:
    key, version, body, body_hex = vector
    header_tags = " 00" if APIS[key].response_header_version(version) == 1 else ""
    expected = hx(RESP_HEADER + header_tags, body_hex)
    frame = encode_response(key, version, 1, body)
    assert frame.hex() == expected.hex()
    correlation_id, decoded = decode_response(key, version, frame)
    assert correlation_id == 1
    decoded = norm(decoded)
    if key == ApiKey.FETCH:
        for topic in body["responses"]:  # records may be given as chunks; compare joined
            for partition in topic["partitions"]:
                if isinstance(partition["records"], list):
                    partition = partition.copy()
                    partition["records"] = b"".join(partition["records"])
        body = {k: v for k, v in body.items() if k != "responses"}
    assert contains(decoded, body), decoded


def _boundaries(st: Struct, lo: int, hi: int) -> set[int]:
    """Versions in [lo, hi] where some field (or its nullability) appears or disappears."""
    found = {lo, hi}
    for fld in st.fields:
        ranges = [fld.range] + ([fld.null_range] if fld.null_range else [])
        for first, last in ranges:
            if lo < first <= hi:
                found.add(first)
            if lo <= last < hi:
                found.add(last + 1)
        t = fld.type.item if isinstance(fld.type, Array) else fld.type
        if isinstance(t, Struct):
            found |= _boundaries(t, lo, hi)
    return found


@pytest.mark.parametrize("is_request", [True, False], ids=["requests", "responses"])
def test_every_version_boundary_has_a_hand_vector(is_request: bool) -> None:
    vectors = REQUEST_VECTORS if is_request else RESPONSE_VECTORS
    covered = {(k, v) for k, v, *_ in vectors}
    missing = sorted(
        (spec.name, v)
        for spec in APIS.values()
        for v in _boundaries(
            spec.request if is_request else spec.response, spec.min_version, spec.max_version
        )
        if (spec.key, v) not in covered
    )
    assert missing == []


# --- ApiVersions specifics -------------------------------------------------------------

KCAT_API_VERSIONS_V3 = hx(
    "0012 0003 00000001",  # key 18, version 3, correlation id 1
    "0004 6b636174",  # client id "kcat", classic int16 length even in header v2
    "00",  # header tag section
    "0b 6c696272646b61666b61",  # compact "librdkafka"
    "06 322e302e32",  # compact "2.0.2"
    "00",  # body tag section
)


@pytest.mark.clients
def test_kcat_api_versions_v3_request() -> None:
    header, pos = decode_request_header(KCAT_API_VERSIONS_V3)
    assert header == (18, 3, 1, "kcat")
    assert pos == 15
    body = decode_request(18, 3, KCAT_API_VERSIONS_V3, pos)
    assert body == {"client_software_name": "librdkafka", "client_software_version": "2.0.2"}
    assert encode_request(18, 3, 1, "kcat", body) == KCAT_API_VERSIONS_V3


def test_api_versions_request_skips_unknown_tags_in_header_and_body() -> None:
    frame = hx(
        "0012 0004 00000009 0001 63",
        "01 07 02 abcd",  # header: one unknown tag (7) with 2 bytes
        "02 61 02 62",  # "a", "b"
        "02 00 00 05 01 ff",  # body: unknown tags 0 (empty) and 5 (1 byte)
    )
    header, pos = decode_request_header(frame)
    assert header == (18, 4, 9, "c")
    assert decode_request(18, 4, frame, pos) == {
        "client_software_name": "a",
        "client_software_version": "b",
    }


def test_api_versions_response_skips_unknown_tags_inside_array_elements() -> None:
    frame = hx(
        "00000001 0000 02",
        "0012 0000 0004 01 09 01 aa",  # element with an unknown tag 9
        "00000000 01 03 01 01",  # body: known tag 3 (zk_migration_ready) = true
    )
    correlation_id, body = decode_response(18, 3, frame)
    assert correlation_id == 1
    assert body["api_keys"] == [{"api_key": 18, "min_version": 0, "max_version": 4}]
    assert body["zk_migration_ready"] is True


def test_api_versions_response_header_is_v0_even_when_flexible() -> None:
    frame = encode_response(18, 3, 0x01020304, {})
    assert frame[:4] == hx("01020304")
    assert frame[4:6] == hx("0000")  # error code directly after the correlation id


def test_api_versions_v3_response_with_supported_features() -> None:
    body = {
        "api_keys": [],
        "supported_features": [{"name": "f", "min_version": 0, "max_version": 1}],
    }
    frame = encode_response(18, 3, 1, body)
    assert frame == hx(
        "00000001 0000 01 00000000",  # error, empty compact array, throttle
        "01 00 08",  # one tagged field: tag 0, 8 bytes
        "02 02 66 0000 0001 00",  # compact array of 1: "f", 0, 1, element tags
    )
    assert decode_response(18, 3, frame)[1]["supported_features"] == body["supported_features"]


def test_api_versions_error_response_is_v0_layout_with_the_full_table() -> None:
    frame = api_versions_error_response(42)
    rows = "".join(
        f"{row['api_key']:04x}{row['min_version']:04x}{row['max_version']:04x}"
        for row in api_versions_table()
    )
    assert frame == hx("0000002a 0023", f"{len(EXPECTED_TABLE):08x}", rows)
    correlation_id, body = decode_response(18, 0, frame)
    assert correlation_id == 42
    assert body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    assert body["api_keys"] == api_versions_table()


def test_header_of_an_unsupported_flexible_api_versions_request_parses() -> None:
    frame = hx("0012 0007 00000003 0001 63 00", "ff ff")  # v7 body is unknown to us
    header, pos = decode_request_header(frame)
    assert header == (18, 7, 3, "c")
    assert pos == 12  # header v2 because 7 >= 3
    with pytest.raises(KafkaCodecError, match="not supported"):
        decode_request(18, 7, frame, pos)


# --- Produce / Fetch specifics ---------------------------------------------------------


def test_produce_records_are_a_zero_copy_view_of_the_request() -> None:
    batch = bytes(range(61)) * 3
    frame = encode_request(
        0,
        3,
        5,
        "p",
        {"acks": 1, "topic_data": [{"name": "t", "partition_data": [{"records": batch}]}]},
    )
    _, pos = decode_request_header(frame)
    body = decode_request(0, 3, frame, pos)
    records = body["topic_data"][0]["partition_data"][0]["records"]
    assert isinstance(records, memoryview)
    assert records.obj is frame
    assert records.tobytes() == batch
    assert body == {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 0,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}],
    }


def test_fetch_response_parts_keep_big_record_chunks_apart() -> None:
    big1, big2 = b"a" * BIG_CHUNK, memoryview(b"b" * (BIG_CHUNK + 1))
    body = {
        "responses": [
            {
                "topic": "t",
                "partitions": [
                    {"partition_index": 0, "high_watermark": 9, "records": [big1, big2]},
                    {"partition_index": 1, "records": b"small"},
                ],
            }
        ]
    }
    parts = encode_response_parts(1, 11, 3, body)
    assert parts[1] is big1 and parts[2] is big2
    joined = b"".join(parts)
    assert joined == encode_response(1, 11, 3, body)
    assert sum(len(bytes(p)) for p in parts) == len(joined)
    _, decoded = decode_response(1, 11, joined)
    partitions = decoded["responses"][0]["partitions"]
    assert partitions[0]["records"].tobytes() == big1 + big2.tobytes()
    assert partitions[1]["records"].tobytes() == b"small"


def test_small_responses_are_a_single_part() -> None:
    assert encode_response_parts(12, 0, 1, {}) == [hx("00000001 0000")]


# --- nullable vs empty -----------------------------------------------------------------


def test_metadata_null_means_all_topics_from_v1() -> None:
    for version in range(1, 9):
        frame = encode_request(3, version, 1, "c", {"topics": None})
        _, pos = decode_request_header(frame)
        assert frame[pos : pos + 4] == hx("ffffffff")
        assert decode_request(3, version, frame, pos)["topics"] is None
        frame = encode_request(3, version, 1, "c", {"topics": []})
        assert decode_request(3, version, frame, pos)["topics"] == []


def test_metadata_v0_has_no_null_topics() -> None:
    with pytest.raises(KafkaCodecError, match="not nullable"):
        encode_request(3, 0, 1, "c", {"topics": None})
    frame = hx(req_header(3, 0), "ffffffff")
    _, pos = decode_request_header(frame)
    with pytest.raises(KafkaCodecError, match="invalid array length -1"):
        decode_request(3, 0, frame, pos)
    assert decode_request(3, 0, encode_request(3, 0, 1, "c", {}), pos)["topics"] == []


def test_offset_fetch_null_topics_only_from_v2() -> None:
    with pytest.raises(KafkaCodecError, match="not nullable"):
        encode_request(9, 1, 1, "c", {"group_id": "g", "topics": None})
    frame = encode_request(9, 2, 1, "c", {"group_id": "g"})
    assert frame.endswith(hx("ffffffff"))  # nullable fields default to null


# --- generic sweeps over every declared (api, version, direction) ----------------------


def _rich(st: Struct, version: int, seed: list[int]) -> dict[str, Any]:
    """A body where every field present in `version` has a non-default value."""
    body: dict[str, Any] = {}
    for fld in st.fields:
        if not fld.present(version):
            continue
        body[fld.name] = _rich_value(fld.type, fld, version, seed)
    return body


def _rich_value(t: Any, fld: Field | None, version: int, seed: list[int]) -> Any:
    seed[0] += 1
    n = seed[0]
    if isinstance(t, Fixed):
        if t is UUID:
            return bytes((n + i) % 256 for i in range(16))
        if t.fmt == "?":
            return not (fld is not None and fld.default is True)
        if t.fmt == "d":
            return n + 0.5
        bits = {"b": 7, "h": 15, "H": 16, "i": 31, "q": 63}[t.fmt]
        return (n * 7919) % (2**bits - 1) + 1
    if t is RECORDS:
        return bytes([n % 256]) * (n % 5 + 1) + b"records"
    if isinstance(t, Array):
        return [_rich_value(t.item, None, version, seed) for _ in range(2)]
    if isinstance(t, Struct):
        return _rich(t, version, seed)
    if t.name == "bytes":
        return bytes([n % 256, 0xFF]) + (fld.name.encode() if fld else b"")
    return f"{fld.name if fld else 'item'}-{n}-é"


def _all_cases() -> list[tuple[int, int, bool]]:
    return [
        (key, version, is_request)
        for key, spec in sorted(APIS.items())
        for version in range(spec.min_version, spec.max_version + 1)
        for is_request in (True, False)
    ]


def _case_id(case: tuple[int, int, bool]) -> str:
    key, version, is_request = case
    return f"{APIS[key].name}{'Request' if is_request else 'Response'}-v{version}"


CASES = _all_cases()


def _frame(key: int, version: int, is_request: bool, body: dict[str, Any]) -> bytes:
    if is_request:
        return encode_request(key, version, 77, "client-é", body)
    return encode_response(key, version, 77, body)


def _decode(key: int, version: int, is_request: bool, frame: bytes) -> dict[str, Any]:
    if is_request:
        header, pos = decode_request_header(frame)
        assert header == (key, version, 77, "client-é")
        return decode_request(key, version, frame, pos)
    correlation_id, body = decode_response(key, version, frame)
    assert correlation_id == 77
    return body


def _struct(key: int, is_request: bool) -> Struct:
    spec = APIS[key]
    return spec.request if is_request else spec.response


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_round_trip_with_every_field_non_default(case: tuple[int, int, bool]) -> None:
    key, version, is_request = case
    st = _struct(key, is_request)
    body = _rich(st, version, [0])
    frame = _frame(key, version, is_request, body)
    decoded = _decode(key, version, is_request, frame)
    assert set(decoded) == {f.name for f in st.fields}
    assert contains(norm(decoded), body)
    # re-encoding what was decoded gives the same bytes (views are accepted as records)
    assert _frame(key, version, is_request, decoded) == frame
    # every top-level field really is encoded with a non-default value
    for name in body:
        without = {k: v for k, v in body.items() if k != name}
        assert _frame(key, version, is_request, without) != frame, name


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_empty_body_round_trips_to_defaults(case: tuple[int, int, bool]) -> None:
    key, version, is_request = case
    frame = _frame(key, version, is_request, {})
    decoded = _decode(key, version, is_request, frame)
    assert _frame(key, version, is_request, decoded) == frame


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_truncation_at_every_byte_raises_only_codec_errors(case: tuple[int, int, bool]) -> None:
    key, version, is_request = case
    frame = _frame(key, version, is_request, _rich(_struct(key, is_request), version, [0]))
    for cut in range(len(frame)):
        with pytest.raises(KafkaCodecError):
            _decode(key, version, is_request, frame[:cut])


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_corrupted_bytes_raise_only_codec_errors(case: tuple[int, int, bool]) -> None:
    key, version, is_request = case
    frame = _frame(key, version, is_request, _rich(_struct(key, is_request), version, [0]))
    for i in range(len(frame)):
        for byte in (0x00, 0x80, 0xFF):
            mutated = frame[:i] + bytes([byte]) + frame[i + 1 :]
            try:
                if is_request:
                    header, pos = decode_request_header(mutated)
                    if (header.api_key, header.api_version) == (key, version):
                        decode_request(key, version, mutated, pos)
                else:
                    decode_response(key, version, mutated)
            except KafkaCodecError:
                pass


# --- hostile lengths in real messages --------------------------------------------------


def _peak_bytes_while(fn: Any) -> int:
    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize(
    ("key", "version", "body_hex"),
    [
        (0, 3, "ffff 0001 00007530 7fffffff"),  # 2**31-1 topics
        (0, 3, "ffff 0001 00007530 00000001 " + TOPIC_T + " 00000001 00000000 7fffffff 00"),
        (1, 11, "ffffffff 000001f4 00000001 03200000 00 00000000 ffffffff 10000000 0000"),
        (3, 1, "7fffffff 0001"),
        (20, 0, "7fffffff 0000 0000"),  # 2**31-1 topic names
        (9, 1, "0001 67 00000001 " + TOPIC_T + " 7fffffff 00000000"),  # partition indexes
    ],
)
def test_absurd_lengths_in_requests_are_refused_before_allocating(
    key: int, version: int, body_hex: str
) -> None:
    frame = hx(req_header(key, version), body_hex)
    _, pos = decode_request_header(frame)

    def attempt() -> None:
        with pytest.raises(KafkaCodecError, match="exceeds"):
            decode_request(key, version, frame, pos)

    assert _peak_bytes_while(attempt) < 1_000_000


def test_absurd_array_length_in_api_versions_v3_compact_array() -> None:
    frame = hx("0012 0003 00000001 0001 63 00", "ffffffff07 00")  # compact string len 2**32
    _, pos = decode_request_header(frame)
    with pytest.raises(KafkaCodecError, match="exceeds"):
        decode_request(18, 3, frame, pos)


def test_truncated_request_headers_raise_codec_errors() -> None:
    for cut in range(len(KCAT_API_VERSIONS_V3[:15])):
        with pytest.raises(KafkaCodecError):
            decode_request_header(KCAT_API_VERSIONS_V3[:cut])


def test_null_client_id() -> None:
    frame = encode_request(12, 0, 4, None, {"group_id": "g"})
    assert frame[:10] == hx("000c 0000 00000004 ffff")
    assert decode_request_header(frame) == ((12, 0, 4, None), 10)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: decode_request(0, 9, b"", 0), "Produce v9 is not supported"),
        (lambda: encode_response(1, 12, 1, {}), "Fetch v12 is not supported"),
        (lambda: decode_response(3, 13, hx("00000001")), "Metadata v13 is not supported"),
        (lambda: encode_request(73, 0, 1, "c", {}), "unknown api key 73"),
        (lambda: encode_response(12, 0, 1, {"error_code": "x"}), "cannot encode Heartbeat"),
        (lambda: encode_response(12, 0, 2**40, {}), "correlation id"),
        (lambda: encode_request(12, 0, 1, "c", {"group_id": None}), "not nullable"),
    ],
)
def test_misuse_raises_codec_errors(call: Any, message: str) -> None:
    with pytest.raises(KafkaCodecError, match=message):
        call()
