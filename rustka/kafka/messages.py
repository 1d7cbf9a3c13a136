"""Declarations of every Kafka API rustka speaks, and the public codec entry points.

Each message is declared once, field by field, in wire order, with Kafka's own version
notation ("3+", "2-4") so that it can be checked line by line against Kafka's JSON schemas
(clients/src/main/resources/common/message/<Name>{Request,Response}.json). Field names are
the snake_case of Kafka's current field names; decoded messages are plain dicts/lists with
those keys, and encoders accept the same shape with missing keys taking the field default.

`APIS` is the single place the front-end learns what to advertise. Flexible versions are
declared only where an API needs them (docs/kafka.md, "APIs and versions", says which and
why); `flexible_from` records Kafka's threshold so headers of newer requests parse.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from typing import Any, Final

from .errors import ErrorCode
from .schema import (
    BOOL,
    BYTES,
    INT8,
    INT16,
    INT32,
    INT64,
    RECORDS,
    STRING,
    ApiSpec,
    Array,
    Field,
    KafkaCodecError,
    RequestHeader,
    Struct,
    read_request_header,
)

__all__ = [
    "APIS",
    "ApiKey",
    "ApiSpec",
    "KafkaCodecError",
    "RequestHeader",
    "api_versions_error_response",
    "api_versions_table",
    "count_response_errors",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_parts",
    "is_flexible",
]

F = Field
INT32_MIN: Final = -(2**31)


class ApiKey(IntEnum):
    """Kafka api keys of the declared APIs."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_CONFIGS = 32
    DESCRIBE_LOG_DIRS = 35
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    OFFSET_DELETE = 47
    DESCRIBE_CLUSTER = 60
    ALTER_CONFIGS = 33
    INCREMENTAL_ALTER_CONFIGS = 44
    SASL_HANDSHAKE = 17
    SASL_AUTHENTICATE = 36
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31


def _msg(name: str, *fields: Field) -> Struct:
    return Struct(fields, name)


# --- ApiVersions (18) ------------------------------------------------------------------

API_VERSIONS_REQUEST = _msg(
    "ApiVersionsRequest",
    F("client_software_name", STRING, "3+"),
    F("client_software_version", STRING, "3+"),
)
API_VERSIONS_RESPONSE = _msg(
    "ApiVersionsResponse",
    F("error_code", INT16),
    F("api_keys", [F("api_key", INT16), F("min_version", INT16), F("max_version", INT16)]),
    F("throttle_time_ms", INT32, "1+"),
    F(
        "supported_features",
        [F("name", STRING, "3+"), F("min_version", INT16, "3+"), F("max_version", INT16, "3+")],
        "3+",
        tag=0,
    ),
    F("finalized_features_epoch", INT64, "3+", tag=1, default=-1),
    F(
        "finalized_features",
        [
            F("name", STRING, "3+"),
            F("max_version_level", INT16, "3+"),
            F("min_version_level", INT16, "3+"),
        ],
        "3+",
        tag=2,
    ),
    F("zk_migration_ready", BOOL, "3+", tag=3),
)

# --- Metadata (3) ----------------------------------------------------------------------

METADATA_REQUEST = _msg(
    "MetadataRequest",
    # v0: an empty array means all topics; v1+: null means all, empty means none.
    F("topics", [F("name", STRING)], nullable="1+"),
    F("allow_auto_topic_creation", BOOL, "4+", default=True),
    F("include_cluster_authorized_operations", BOOL, "8-10"),
    F("include_topic_authorized_operations", BOOL, "8+"),
)
METADATA_RESPONSE = _msg(
    "MetadataResponse",
    F("throttle_time_ms", INT32, "3+"),
    F(
        "brokers",
        [
            F("node_id", INT32),
            F("host", STRING),
            F("port", INT32),
            F("rack", STRING, "1+", nullable="1+"),
        ],
    ),
    F("cluster_id", STRING, "2+", nullable="2+"),
    F("controller_id", INT32, "1+", default=-1),
    F(
        "topics",
        [
            F("error_code", INT16),
            F("name", STRING),
            F("is_internal", BOOL, "1+"),
            F(
                "partitions",
                [
                    F("error_code", INT16),
                    F("partition_index", INT32),
                    F("leader_id", INT32),
                    F("leader_epoch", INT32, "7+", default=-1),
                    F("replica_nodes", Array(INT32)),
                    F("isr_nodes", Array(INT32)),
                    F("offline_replicas", Array(INT32), "5+"),
                ],
            ),
            F("topic_authorized_operations", INT32, "8+", default=INT32_MIN),
        ],
    ),
    F("cluster_authorized_operations", INT32, "8-10", default=INT32_MIN),
)

# --- Produce (0) -----------------------------------------------------------------------

PRODUCE_REQUEST = _msg(
    "ProduceRequest",
    F("transactional_id", STRING, "3+", nullable="0+"),
    F("acks", INT16),
    F("timeout_ms", INT32),
    F(
        "topic_data",
        [
            F("name", STRING),
            F("partition_data", [F("index", INT32), F("records", RECORDS, nullable="0+")]),
        ],
    ),
)
PRODUCE_RESPONSE = _msg(
    "ProduceResponse",
    F(
        "responses",
        [
            F("name", STRING),
            F(
                "partition_responses",
                [
                    F("index", INT32),
                    F("error_code", INT16),
                    F("base_offset", INT64),
                    F("log_append_time_ms", INT64, "2+", default=-1),
                    F("log_start_offset", INT64, "5+", default=-1),
                    F(
                        "record_errors",
                        [
                            F("batch_index", INT32, "8+"),
                            F("batch_index_error_message", STRING, "8+", nullable="8+"),
                        ],
                        "8+",
                    ),
                    F("error_message", STRING, "8+", nullable="8+"),
                ],
            ),
        ],
    ),
    # Unlike most responses, the throttle time comes last here.
    F("throttle_time_ms", INT32, "1+"),
)

# --- Fetch (1) -------------------------------------------------------------------------

FETCH_REQUEST = _msg(
    "FetchRequest",
    F("replica_id", INT32, default=-1),
    F("max_wait_ms", INT32),
    F("min_bytes", INT32),
    F("max_bytes", INT32, "3+", default=0x7FFFFFFF),
    F("isolation_level", INT8, "4+"),
    F("session_id", INT32, "7+"),
    F("session_epoch", INT32, "7+", default=-1),
    F(
        "topics",
        [
            F("topic", STRING),
            F(
                "partitions",
                [
                    F("partition", INT32),
                    F("current_leader_epoch", INT32, "9+", default=-1),
                    F("fetch_offset", INT64),
                    F("log_start_offset", INT64, "5+", default=-1),
                    F("partition_max_bytes", INT32),
                ],
            ),
        ],
    ),
    F("forgotten_topics_data", [F("topic", STRING), F("partitions", Array(INT32))], "7+"),
    F("rack_id", STRING, "11+"),
)
FETCH_RESPONSE = _msg(
    "FetchResponse",
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16, "7+"),
    F("session_id", INT32, "7+"),
    F(
        "responses",
        [
            F("topic", STRING),
            F(
                "partitions",
                [
                    F("partition_index", INT32),
                    F("error_code", INT16),
                    F("high_watermark", INT64),
                    F("last_stable_offset", INT64, "4+", default=-1),
                    F("log_start_offset", INT64, "5+", default=-1),
                    F(
                        "aborted_transactions",
                        [F("producer_id", INT64), F("first_offset", INT64)],
                        "4+",
                        nullable="4+",
                    ),
                    F("preferred_read_replica", INT32, "11+", default=-1),
                    F("records", RECORDS, nullable="0+"),
                ],
            ),
        ],
    ),
)

# --- ListOffsets (2) -------------------------------------------------------------------

LIST_OFFSETS_REQUEST = _msg(
    "ListOffsetsRequest",
    F("replica_id", INT32),
    F("isolation_level", INT8, "2+"),
    F(
        "topics",
        [
            F("name", STRING),
            F(
                "partitions",
                [
                    F("partition_index", INT32),
                    F("current_leader_epoch", INT32, "4+", default=-1),
                    F("timestamp", INT64),
                ],
            ),
        ],
    ),
)
LIST_OFFSETS_RESPONSE = _msg(
    "ListOffsetsResponse",
    F("throttle_time_ms", INT32, "2+"),
    F(
        "topics",
        [
            F("name", STRING),
            F(
                "partitions",
                [
                    F("partition_index", INT32),
                    F("error_code", INT16),
                    F("timestamp", INT64, "1+", default=-1),
                    F("offset", INT64, "1+", default=-1),
                    F("leader_epoch", INT32, "4+", default=-1),
                ],
            ),
        ],
    ),
)

# --- InitProducerId (22) ---------------------------------------------------------------

# v2 is the first flexible version; v3 names the producer's id and epoch (KIP-360's
# epoch bump); v4 answers PRODUCER_FENCED. v5+ (KIP-890, Kafka 4) is not offered.
INIT_PRODUCER_ID_REQUEST = _msg(
    "InitProducerIdRequest",
    F("transactional_id", STRING, nullable="0+"),
    F("transaction_timeout_ms", INT32),
    F("producer_id", INT64, "3+", default=-1),
    F("producer_epoch", INT16, "3+", default=-1),
)
INIT_PRODUCER_ID_RESPONSE = _msg(
    "InitProducerIdResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("producer_id", INT64, default=-1),
    F("producer_epoch", INT16),
)

# --- Transactions: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
# TxnOffsetCommit (28); docs/kafka.md, "Transactions". v0-3: v1 and v2 change only
# throttling and the errors allowed, v3 is the first flexible version and (TxnOffsetCommit)
# adds the consumer's generation, member and instance ids (KIP-447). Not offered:
# AddPartitionsToTxn v4+ (broker-to-broker batching), the KIP-890 versions
# (AddOffsetsToTxn 4, EndTxn 4-5).

ADD_PARTITIONS_TO_TXN_REQUEST = _msg(
    "AddPartitionsToTxnRequest",
    F("transactional_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("topics", [F("name", STRING), F("partitions", Array(INT32))]),
)
ADD_PARTITIONS_TO_TXN_RESPONSE = _msg(
    "AddPartitionsToTxnResponse",
    F("throttle_time_ms", INT32),
    F(
        "results",
        [
            F("name", STRING),
            F("results", [F("partition_index", INT32), F("error_code", INT16)]),
        ],
    ),
)
ADD_OFFSETS_TO_TXN_REQUEST = _msg(
    "AddOffsetsToTxnRequest",
    F("transactional_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("group_id", STRING),
)
ADD_OFFSETS_TO_TXN_RESPONSE = _msg(
    "AddOffsetsToTxnResponse", F("throttle_time_ms", INT32), F("error_code", INT16)
)
END_TXN_REQUEST = _msg(
    "EndTxnRequest",
    F("transactional_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("committed", BOOL),
)
END_TXN_RESPONSE = _msg("EndTxnResponse", F("throttle_time_ms", INT32), F("error_code", INT16))
TXN_OFFSET_COMMIT_REQUEST = _msg(
    "TxnOffsetCommitRequest",
    F("transactional_id", STRING),
    F("group_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("generation_id", INT32, "3+", default=-1),
    F("member_id", STRING, "3+", default=""),
    F("group_instance_id", STRING, "3+", nullable="3+", default=None),  # Kafka: "null"
    F(
        "topics",
        [
            F("name", STRING),
            F(
                "partitions",
                [
                    F("partition_index", INT32),
                    F("committed_offset", INT64),
                    F("committed_leader_epoch", INT32, "2+", default=-1),
                    F("committed_metadata", STRING, nullable="0+"),
                ],
            ),
        ],
    ),
)
TXN_OFFSET_COMMIT_RESPONSE = _msg(
    "TxnOffsetCommitResponse",
    F("throttle_time_ms", INT32),
    F(
        "topics",
        [
            F("name", STRING),
            F("partitions", [F("partition_index", INT32), F("error_code", INT16)]),
        ],
    ),
)

# DescribeTransactions (65) and ListTransactions (66): flexible from v0 (KIP-664).
DESCRIBE_TRANSACTIONS_REQUEST = _msg(
    "DescribeTransactionsRequest", F("transactional_ids", Array(STRING))
)
DESCRIBE_TRANSACTIONS_RESPONSE = _msg(
    "DescribeTransactionsResponse",
    F("throttle_time_ms", INT32),
    F(
        "transaction_states",
        [
            F("error_code", INT16),
            F("transactional_id", STRING),
            F("transaction_state", STRING),
            F("transaction_timeout_ms", INT32),
            F("transaction_start_time_ms", INT64),
            F("producer_id", INT64),
            F("producer_epoch", INT16),
            F("topics", [F("topic", STRING), F("partitions", Array(INT32))]),
        ],
    ),
)
LIST_TRANSACTIONS_REQUEST = _msg(
    "ListTransactionsRequest",
    F("state_filters", Array(STRING)),
    F("producer_id_filters", Array(INT64)),
    F("duration_filter", INT64, "1+", default=-1),
)
LIST_TRANSACTIONS_RESPONSE = _msg(
    "ListTransactionsResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("unknown_state_filters", Array(STRING)),
    F(
        "transaction_states",
        [
            F("transactional_id", STRING),
            F("producer_id", INT64),
            F("transaction_state", STRING),
        ],
    ),
)

# --- CreateTopics (19) -----------------------------------------------------------------

CREATE_TOPICS_REQUEST = _msg(
    "CreateTopicsRequest",
    F(
        "topics",
        [
            F("name", STRING),
            F("num_partitions", INT32),
            F("replication_factor", INT16),
            F("assignments", [F("partition_index", INT32), F("broker_ids", Array(INT32))]),
            F("configs", [F("name", STRING), F("value", STRING, nullable="0+")]),
        ],
    ),
    F("timeout_ms", INT32, default=60000),
    F("validate_only", BOOL, "1+"),
)
CREATE_TOPICS_RESPONSE = _msg(
    "CreateTopicsResponse",
    F("throttle_time_ms", INT32, "2+"),
    F(
        "topics",
        [
            F("name", STRING),
            F("error_code", INT16),
            F("error_message", STRING, "1+", nullable="0+"),
        ],
    ),
)

# --- DeleteTopics (20) -----------------------------------------------------------------

DELETE_TOPICS_REQUEST = _msg(
    "DeleteTopicsRequest",
    F("topic_names", Array(STRING)),
    F("timeout_ms", INT32),
)
DELETE_TOPICS_RESPONSE = _msg(
    "DeleteTopicsResponse",
    F("throttle_time_ms", INT32, "1+"),
    F("responses", [F("name", STRING), F("error_code", INT16)]),
)

# --- DescribeConfigs (32) --------------------------------------------------------------

DESCRIBE_CONFIGS_REQUEST = _msg(
    "DescribeConfigsRequest",
    F(
        "resources",
        [
            F("resource_type", INT8),
            F("resource_name", STRING),
            F("configuration_keys", Array(STRING), nullable="0+"),
        ],
    ),
    F("include_synonyms", BOOL, "1+"),
)
DESCRIBE_CONFIGS_RESPONSE = _msg(
    "DescribeConfigsResponse",
    F("throttle_time_ms", INT32),
    F(
        "results",
        [
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
            F("resource_type", INT8),
            F("resource_name", STRING),
            F(
                "configs",
                [
                    F("name", STRING),
                    F("value", STRING, nullable="0+"),
                    F("read_only", BOOL),
                    F("is_default", BOOL, "0"),
                    F("config_source", INT8, "1+", default=-1),
                    F("is_sensitive", BOOL),
                    F(
                        "synonyms",
                        [
                            F("name", STRING, "1+"),
                            F("value", STRING, "1+", nullable="0+"),
                            F("source", INT8, "1+"),
                        ],
                        "1+",
                    ),
                ],
            ),
        ],
    ),
)

# --- AlterConfigs (33), IncrementalAlterConfigs (44) -----------------------------------

ALTER_CONFIGS_REQUEST = _msg(
    "AlterConfigsRequest",
    F(
        "resources",
        [
            F("resource_type", INT8),
            F("resource_name", STRING),
            F("configs", [F("name", STRING), F("value", STRING, nullable="0+")]),
        ],
    ),
    F("validate_only", BOOL),
)
ALTER_CONFIGS_RESPONSE = _msg(
    "AlterConfigsResponse",
    F("throttle_time_ms", INT32),
    F(
        "responses",
        [
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
            F("resource_type", INT8),
            F("resource_name", STRING),
        ],
    ),
)
INCREMENTAL_ALTER_CONFIGS_REQUEST = _msg(
    "IncrementalAlterConfigsRequest",
    F(
        "resources",
        [
            F("resource_type", INT8),
            F("resource_name", STRING),
            F(
                "configs",
                [
                    F("name", STRING),
                    F("config_operation", INT8),
                    F("value", STRING, nullable="0+"),
                ],
            ),
        ],
    ),
    F("validate_only", BOOL),
)
INCREMENTAL_ALTER_CONFIGS_RESPONSE = _msg(
    "IncrementalAlterConfigsResponse",
    F("throttle_time_ms", INT32),
    F(
        "responses",
        [
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
            F("resource_type", INT8),
            F("resource_name", STRING),
        ],
    ),
)

# --- FindCoordinator (10) --------------------------------------------------------------

FIND_COORDINATOR_REQUEST = _msg(
    "FindCoordinatorRequest",
    F("key", STRING),
    F("key_type", INT8, "1+"),
)
FIND_COORDINATOR_RESPONSE = _msg(
    "FindCoordinatorResponse",
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("error_message", STRING, "1+", nullable="1+"),
    F("node_id", INT32),
    F("host", STRING),
    F("port", INT32),
)

# --- JoinGroup (11) --------------------------------------------------------------------

JOIN_GROUP_REQUEST = _msg(
    "JoinGroupRequest",
    F("group_id", STRING),
    F("session_timeout_ms", INT32),
    F("rebalance_timeout_ms", INT32, "1+", default=-1),
    F("member_id", STRING),
    F("group_instance_id", STRING, "5+", nullable="5+"),
    F("protocol_type", STRING),
    F("protocols", [F("name", STRING), F("metadata", BYTES)]),
)
JOIN_GROUP_RESPONSE = _msg(
    "JoinGroupResponse",
    F("throttle_time_ms", INT32, "2+"),
    F("error_code", INT16),
    F("generation_id", INT32, default=-1),
    F("protocol_name", STRING),
    F("leader", STRING),
    F("member_id", STRING),
    F(
        "members",
        [
            F("member_id", STRING),
            F("group_instance_id", STRING, "5+", nullable="5+"),
            F("metadata", BYTES),
        ],
    ),
)

# --- SyncGroup (14) --------------------------------------------------------------------

SYNC_GROUP_REQUEST = _msg(
    "SyncGroupRequest",
    F("group_id", STRING),
    F("generation_id", INT32),
    F("member_id", STRING),
    F("group_instance_id", STRING, "3+", nullable="3+"),
    F("assignments", [F("member_id", STRING), F("assignment", BYTES)]),
)
SYNC_GROUP_RESPONSE = _msg(
    "SyncGroupResponse",
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("assignment", BYTES),
)

# --- Heartbeat (12) --------------------------------------------------------------------

HEARTBEAT_REQUEST = _msg(
    "HeartbeatRequest",
    F("group_id", STRING),
    F("generation_id", INT32),
    F("member_id", STRING),
    F("group_instance_id", STRING, "3+", nullable="3+"),
)
HEARTBEAT_RESPONSE = _msg(
    "HeartbeatResponse",
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
)

# --- LeaveGroup (13) -------------------------------------------------------------------

LEAVE_GROUP_REQUEST = _msg(
    "LeaveGroupRequest",
    F("group_id", STRING),
    F("member_id", STRING, "0-2"),
    F(
        "members",
        [F("member_id", STRING, "3+"), F("group_instance_id", STRING, "3+", nullable="3+")],
        "3+",
    ),
)
LEAVE_GROUP_RESPONSE = _msg(
    "LeaveGroupResponse",
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F(
        "members",
        [
            F("member_id", STRING, "3+"),
            F("group_instance_id", STRING, "3+", nullable="3+"),
            F("error_code", INT16, "3+"),
        ],
        "3+",
    ),
)

# --- OffsetCommit (8) ------------------------------------------------------------------

OFFSET_COMMIT_REQUEST = _msg(
    "OffsetCommitRequest",
    F("group_id", STRING),
    F("generation_id_or_member_epoch", INT32, "1+", default=-1),
    F("member_id", STRING, "1+"),
    F("group_instance_id", STRING, "7+", nullable="7+"),
    F("retention_time_ms", INT64, "2-4", default=-1),
    F(
        "topics",
        [
            F("name", STRING),
            F(
                "partitions",
                [
                    F("partition_index", INT32),
                    F("committed_offset", INT64),
                    F("committed_leader_epoch", INT32, "6+", default=-1),
                    F("committed_metadata", STRING, nullable="0+"),
                ],
            ),
        ],
    ),
)
OFFSET_COMMIT_RESPONSE = _msg(
    "OffsetCommitResponse",
    F("throttle_time_ms", INT32, "3+"),
    F(
        "topics",
        [
            F("name", STRING),
            F("partitions", [F("partition_index", INT32), F("error_code", INT16)]),
        ],
    ),
)

# --- OffsetFetch (9) -------------------------------------------------------------------

OFFSET_FETCH_REQUEST = _msg(
    "OffsetFetchRequest",
    F("group_id", STRING),
    # v2+: null means every topic the group has offsets for.
    F(
        "topics",
        [F("name", STRING), F("partition_indexes", Array(INT32))],
        nullable="2+",
    ),
    # v7: answer UNSTABLE_OFFSET_COMMIT where a transaction has an offset staged.
    F("require_stable", BOOL, "7+"),
)
OFFSET_FETCH_RESPONSE = _msg(
    "OffsetFetchResponse",
    F("throttle_time_ms", INT32, "3+"),
    F(
        "topics",
        [
            F("name", STRING),
            F(
                "partitions",
                [
                    F("partition_index", INT32),
                    F("committed_offset", INT64),
                    F("committed_leader_epoch", INT32, "5+", default=-1),
                    F("metadata", STRING, nullable="0+"),
                    F("error_code", INT16),
                ],
            ),
        ],
    ),
    F("error_code", INT16, "2+"),
)

# --- ListGroups (16) -------------------------------------------------------------------

LIST_GROUPS_REQUEST = _msg(
    "ListGroupsRequest",
    # v4: only groups in one of these states (empty: every state).
    F("states_filter", Array(STRING), "4+"),
)
LIST_GROUPS_RESPONSE = _msg(
    "ListGroupsResponse",
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F(
        "groups",
        [F("group_id", STRING), F("protocol_type", STRING), F("group_state", STRING, "4+")],
    ),
)

# --- DescribeGroups (15) ---------------------------------------------------------------

DESCRIBE_GROUPS_REQUEST = _msg(
    "DescribeGroupsRequest",
    F("groups", Array(STRING)),
    F("include_authorized_operations", BOOL, "3+"),
)
DESCRIBE_GROUPS_RESPONSE = _msg(
    "DescribeGroupsResponse",
    F("throttle_time_ms", INT32, "1+"),
    F(
        "groups",
        [
            F("error_code", INT16),
            F("group_id", STRING),
            F("group_state", STRING),
            F("protocol_type", STRING),
            F("protocol_data", STRING),
            F(
                "members",
                [
                    F("member_id", STRING),
                    F("group_instance_id", STRING, "4+", nullable="4+"),
                    F("client_id", STRING),
                    F("client_host", STRING),
                    F("member_metadata", BYTES),
                    F("member_assignment", BYTES),
                ],
            ),
            F("authorized_operations", INT32, "3+", default=INT32_MIN),
        ],
    ),
)

# --- Admin APIs of issue 18 item 3: CreatePartitions (37), DeleteGroups (42), ----------
# --- OffsetDelete (47) -----------------------------------------------------------------

CREATE_PARTITIONS_REQUEST = _msg(
    "CreatePartitionsRequest",
    F(
        "topics",
        [
            F("name", STRING),
            F("count", INT32),
            F("assignments", [F("broker_ids", Array(INT32))], nullable="0+"),
        ],
    ),
    F("timeout_ms", INT32, default=60000),
    F("validate_only", BOOL),
)
CREATE_PARTITIONS_RESPONSE = _msg(
    "CreatePartitionsResponse",
    F("throttle_time_ms", INT32),
    F(
        "results",
        [
            F("name", STRING),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
        ],
    ),
)
DELETE_GROUPS_REQUEST = _msg("DeleteGroupsRequest", F("groups_names", Array(STRING)))
DELETE_GROUPS_RESPONSE = _msg(
    "DeleteGroupsResponse",
    F("throttle_time_ms", INT32),
    F("results", [F("group_id", STRING), F("error_code", INT16)]),
)
OFFSET_DELETE_REQUEST = _msg(
    "OffsetDeleteRequest",
    F("group_id", STRING),
    F("topics", [F("name", STRING), F("partitions", [F("partition_index", INT32)])]),
)
OFFSET_DELETE_RESPONSE = _msg(
    "OffsetDeleteResponse",
    F("error_code", INT16),
    F("throttle_time_ms", INT32),
    F(
        "topics",
        [
            F("name", STRING),
            F("partitions", [F("partition_index", INT32), F("error_code", INT16)]),
        ],
    ),
)

# --- DeleteRecords (21) ----------------------------------------------------------------

DELETE_RECORDS_REQUEST = _msg(
    "DeleteRecordsRequest",
    F(
        "topics",
        [
            F("name", STRING),
            # offset -1: up to the high watermark.
            F("partitions", [F("partition_index", INT32), F("offset", INT64)]),
        ],
    ),
    F("timeout_ms", INT32, default=60000),
)
DELETE_RECORDS_RESPONSE = _msg(
    "DeleteRecordsResponse",
    F("throttle_time_ms", INT32),
    F(
        "topics",
        [
            F("name", STRING),
            F(
                "partitions",
                [
                    F("partition_index", INT32),
                    F("low_watermark", INT64, default=-1),
                    F("error_code", INT16),
                ],
            ),
        ],
    ),
)

# --- OffsetForLeaderEpoch (23) ---------------------------------------------------------

OFFSET_FOR_LEADER_EPOCH_REQUEST = _msg(
    "OffsetForLeaderEpochRequest",
    F("replica_id", INT32, "3+", default=-2),
    F(
        "topics",
        [
            F("topic", STRING),
            F(
                "partitions",
                [
                    F("partition", INT32),
                    F("current_leader_epoch", INT32, "2+", default=-1),
                    F("leader_epoch", INT32),
                ],
            ),
        ],
    ),
)
OFFSET_FOR_LEADER_EPOCH_RESPONSE = _msg(
    "OffsetForLeaderEpochResponse",
    F("throttle_time_ms", INT32, "2+"),
    F(
        "topics",
        [
            F("topic", STRING),
            F(
                "partitions",
                [
                    F("error_code", INT16),
                    F("partition", INT32),
                    F("leader_epoch", INT32, "1+", default=-1),
                    F("end_offset", INT64, default=-1),
                ],
            ),
        ],
    ),
)

# --- DescribeLogDirs (35) --------------------------------------------------------------

DESCRIBE_LOG_DIRS_REQUEST = _msg(
    "DescribeLogDirsRequest",
    # null: every partition.
    F("topics", [F("topic", STRING), F("partitions", Array(INT32))], nullable="0+"),
)
DESCRIBE_LOG_DIRS_RESPONSE = _msg(
    "DescribeLogDirsResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16, "3+"),
    F(
        "results",
        [
            F("error_code", INT16),
            F("log_dir", STRING),
            F(
                "topics",
                [
                    F("name", STRING),
                    F(
                        "partitions",
                        [
                            F("partition_index", INT32),
                            F("partition_size", INT64),
                            F("offset_lag", INT64),
                            F("is_future_key", BOOL),
                        ],
                    ),
                ],
            ),
            F("total_bytes", INT64, "4+", default=-1),
            F("usable_bytes", INT64, "4+", default=-1),
        ],
    ),
)

# --- DescribeCluster (60) --------------------------------------------------------------

DESCRIBE_CLUSTER_REQUEST = _msg(
    "DescribeClusterRequest",
    F("include_cluster_authorized_operations", BOOL),
    # v1: which listeners to list, 1 brokers' or 2 controllers' (this node has only the first).
    F("endpoint_type", INT8, "1+", default=1),
)
DESCRIBE_CLUSTER_RESPONSE = _msg(
    "DescribeClusterResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+"),
    F("endpoint_type", INT8, "1+", default=1),
    F("cluster_id", STRING),
    F("controller_id", INT32, default=-1),
    F(
        "brokers",
        [
            F("broker_id", INT32),
            F("host", STRING),
            F("port", INT32),
            F("rack", STRING, nullable="0+"),
        ],
    ),
    F("cluster_authorized_operations", INT32, default=INT32_MIN),
)

# --- ACLs: DescribeAcls (29), CreateAcls (30), DeleteAcls (31) ------------------------
# Codes are Kafka's (rustka.security.acl); a pattern type absent before v1 is LITERAL.

_ACL_ENTRY = (
    F("principal", STRING),
    F("host", STRING),
    F("operation", INT8),
    F("permission_type", INT8),
)
_ACL_FILTER = (
    F("resource_type_filter", INT8),
    F("resource_name_filter", STRING, nullable="0+"),
    F("pattern_type_filter", INT8, "1+", default=3),
    F("principal_filter", STRING, nullable="0+"),
    F("host_filter", STRING, nullable="0+"),
    F("operation", INT8),
    F("permission_type", INT8),
)

DESCRIBE_ACLS_REQUEST = _msg("DescribeAclsRequest", *_ACL_FILTER)
DESCRIBE_ACLS_RESPONSE = _msg(
    "DescribeAclsResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+"),
    F(
        "resources",
        [
            F("resource_type", INT8),
            F("resource_name", STRING),
            F("pattern_type", INT8, "1+", default=3),
            F("acls", list(_ACL_ENTRY)),
        ],
    ),
)
CREATE_ACLS_REQUEST = _msg(
    "CreateAclsRequest",
    F(
        "creations",
        [
            F("resource_type", INT8),
            F("resource_name", STRING),
            F("resource_pattern_type", INT8, "1+", default=3),
            *_ACL_ENTRY,
        ],
    ),
)
CREATE_ACLS_RESPONSE = _msg(
    "CreateAclsResponse",
    F("throttle_time_ms", INT32),
    F("results", [F("error_code", INT16), F("error_message", STRING, nullable="0+")]),
)
DELETE_ACLS_REQUEST = _msg("DeleteAclsRequest", F("filters", list(_ACL_FILTER)))
DELETE_ACLS_RESPONSE = _msg(
    "DeleteAclsResponse",
    F("throttle_time_ms", INT32),
    F(
        "filter_results",
        [
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
            F(
                "matching_acls",
                [
                    F("error_code", INT16),
                    F("error_message", STRING, nullable="0+"),
                    F("resource_type", INT8),
                    F("resource_name", STRING),
                    F("pattern_type", INT8, "1+", default=3),
                    *_ACL_ENTRY,
                ],
            ),
        ],
    ),
)

# --- SASL (17, 36) and SCRAM credentials (50, 51): docs/kafka.md, "Authentication" ----

SASL_HANDSHAKE_REQUEST = _msg("SaslHandshakeRequest", F("mechanism", STRING))
SASL_HANDSHAKE_RESPONSE = _msg(
    "SaslHandshakeResponse", F("error_code", INT16), F("mechanisms", Array(STRING))
)
SASL_AUTHENTICATE_REQUEST = _msg("SaslAuthenticateRequest", F("auth_bytes", BYTES))
SASL_AUTHENTICATE_RESPONSE = _msg(
    "SaslAuthenticateResponse",
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+"),
    F("auth_bytes", BYTES),
    F("session_lifetime_ms", INT64, "1+"),
)
DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST = _msg(
    "DescribeUserScramCredentialsRequest",
    F("users", [F("name", STRING)], nullable="0+"),
)
DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE = _msg(
    "DescribeUserScramCredentialsResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+"),
    F(
        "results",
        [
            F("user", STRING),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
            F("credential_infos", [F("mechanism", INT8), F("iterations", INT32)]),
        ],
    ),
)
ALTER_USER_SCRAM_CREDENTIALS_REQUEST = _msg(
    "AlterUserScramCredentialsRequest",
    F("deletions", [F("name", STRING), F("mechanism", INT8)]),
    F(
        "upsertions",
        [
            F("name", STRING),
            F("mechanism", INT8),
            F("iterations", INT32),
            F("salt", BYTES),
            F("salted_password", BYTES),
        ],
    ),
)
ALTER_USER_SCRAM_CREDENTIALS_RESPONSE = _msg(
    "AlterUserScramCredentialsResponse",
    F("throttle_time_ms", INT32),
    F(
        "results",
        [
            F("user_name", STRING),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
        ],
    ),
)

# --- The table -------------------------------------------------------------------------


def _api(
    key: ApiKey,
    name: str,
    versions: tuple[int, int],
    flexible_from: int | None,
    request: Struct,
    response: Struct,
    *,
    response_header_v0_always: bool = False,
    advertised_min_version: int | None = None,
) -> tuple[int, ApiSpec]:
    spec = ApiSpec(
        key=int(key),
        name=name,
        min_version=versions[0],
        max_version=versions[1],
        flexible_from=flexible_from,
        request=request,
        response=response,
        response_header_v0_always=response_header_v0_always,
        advertised_min_version=advertised_min_version,
    )
    return spec.key, spec


APIS: Final[dict[int, ApiSpec]] = dict(
    [
        # Accepted from v3 (RecordBatch v2 only), listed from v0: see ApiSpec.
        _api(
            ApiKey.PRODUCE,
            "Produce",
            (3, 8),
            9,
            PRODUCE_REQUEST,
            PRODUCE_RESPONSE,
            advertised_min_version=0,
        ),
        _api(ApiKey.FETCH, "Fetch", (4, 11), 12, FETCH_REQUEST, FETCH_RESPONSE),
        _api(
            ApiKey.LIST_OFFSETS,
            "ListOffsets",
            (1, 5),
            6,
            LIST_OFFSETS_REQUEST,
            LIST_OFFSETS_RESPONSE,
        ),
        _api(ApiKey.METADATA, "Metadata", (0, 8), 9, METADATA_REQUEST, METADATA_RESPONSE),
        _api(
            ApiKey.OFFSET_COMMIT,
            "OffsetCommit",
            (2, 7),
            8,
            OFFSET_COMMIT_REQUEST,
            OFFSET_COMMIT_RESPONSE,
        ),
        _api(
            ApiKey.OFFSET_FETCH,
            "OffsetFetch",
            (1, 7),
            6,
            OFFSET_FETCH_REQUEST,
            OFFSET_FETCH_RESPONSE,
        ),
        _api(
            ApiKey.FIND_COORDINATOR,
            "FindCoordinator",
            (0, 2),
            3,
            FIND_COORDINATOR_REQUEST,
            FIND_COORDINATOR_RESPONSE,
        ),
        _api(ApiKey.JOIN_GROUP, "JoinGroup", (0, 5), 6, JOIN_GROUP_REQUEST, JOIN_GROUP_RESPONSE),
        _api(ApiKey.HEARTBEAT, "Heartbeat", (0, 3), 4, HEARTBEAT_REQUEST, HEARTBEAT_RESPONSE),
        _api(
            ApiKey.LEAVE_GROUP, "LeaveGroup", (0, 3), 4, LEAVE_GROUP_REQUEST, LEAVE_GROUP_RESPONSE
        ),
        _api(ApiKey.SYNC_GROUP, "SyncGroup", (0, 3), 4, SYNC_GROUP_REQUEST, SYNC_GROUP_RESPONSE),
        _api(
            ApiKey.DESCRIBE_GROUPS,
            "DescribeGroups",
            (0, 4),
            5,
            DESCRIBE_GROUPS_REQUEST,
            DESCRIBE_GROUPS_RESPONSE,
        ),
        # v3-4 are flexible (docs/kafka.md, "APIs and versions"); v4 filters by state.
        _api(
            ApiKey.LIST_GROUPS, "ListGroups", (0, 4), 3, LIST_GROUPS_REQUEST, LIST_GROUPS_RESPONSE
        ),
        _api(
            ApiKey.API_VERSIONS,
            "ApiVersions",
            (0, 4),
            3,
            API_VERSIONS_REQUEST,
            API_VERSIONS_RESPONSE,
            response_header_v0_always=True,
        ),
        _api(
            ApiKey.CREATE_TOPICS,
            "CreateTopics",
            (0, 4),
            5,
            CREATE_TOPICS_REQUEST,
            CREATE_TOPICS_RESPONSE,
        ),
        _api(
            ApiKey.DELETE_TOPICS,
            "DeleteTopics",
            (0, 3),
            4,
            DELETE_TOPICS_REQUEST,
            DELETE_TOPICS_RESPONSE,
        ),
        _api(
            ApiKey.INIT_PRODUCER_ID,
            "InitProducerId",
            (0, 4),
            2,
            INIT_PRODUCER_ID_REQUEST,
            INIT_PRODUCER_ID_RESPONSE,
        ),
        # Transactions (docs/kafka.md, "Transactions"): v3 is flexible.
        _api(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            "AddPartitionsToTxn",
            (0, 3),
            3,
            ADD_PARTITIONS_TO_TXN_REQUEST,
            ADD_PARTITIONS_TO_TXN_RESPONSE,
        ),
        _api(
            ApiKey.ADD_OFFSETS_TO_TXN,
            "AddOffsetsToTxn",
            (0, 3),
            3,
            ADD_OFFSETS_TO_TXN_REQUEST,
            ADD_OFFSETS_TO_TXN_RESPONSE,
        ),
        _api(ApiKey.END_TXN, "EndTxn", (0, 3), 3, END_TXN_REQUEST, END_TXN_RESPONSE),
        _api(
            ApiKey.DESCRIBE_TRANSACTIONS,
            "DescribeTransactions",
            (0, 0),
            0,
            DESCRIBE_TRANSACTIONS_REQUEST,
            DESCRIBE_TRANSACTIONS_RESPONSE,
        ),
        # v2's transactional-id pattern (Kafka 4.1) is not offered.
        _api(
            ApiKey.LIST_TRANSACTIONS,
            "ListTransactions",
            (0, 1),
            0,
            LIST_TRANSACTIONS_REQUEST,
            LIST_TRANSACTIONS_RESPONSE,
        ),
        _api(
            ApiKey.TXN_OFFSET_COMMIT,
            "TxnOffsetCommit",
            (0, 3),
            3,
            TXN_OFFSET_COMMIT_REQUEST,
            TXN_OFFSET_COMMIT_RESPONSE,
        ),
        _api(
            ApiKey.DESCRIBE_CONFIGS,
            "DescribeConfigs",
            (0, 2),
            4,
            DESCRIBE_CONFIGS_REQUEST,
            DESCRIBE_CONFIGS_RESPONSE,
        ),
        # Admin APIs (docs/kafka.md, "Admin APIs"): the non-flexible versions.
        _api(
            ApiKey.CREATE_PARTITIONS,
            "CreatePartitions",
            (0, 1),
            2,
            CREATE_PARTITIONS_REQUEST,
            CREATE_PARTITIONS_RESPONSE,
        ),
        _api(
            ApiKey.DELETE_GROUPS,
            "DeleteGroups",
            (0, 1),
            2,
            DELETE_GROUPS_REQUEST,
            DELETE_GROUPS_RESPONSE,
        ),
        _api(
            ApiKey.OFFSET_DELETE,
            "OffsetDelete",
            (0, 0),
            None,
            OFFSET_DELETE_REQUEST,
            OFFSET_DELETE_RESPONSE,
        ),
        # v2 is flexible (docs/kafka.md, "APIs and versions"); v1 is v0.
        _api(
            ApiKey.DELETE_RECORDS,
            "DeleteRecords",
            (0, 2),
            2,
            DELETE_RECORDS_REQUEST,
            DELETE_RECORDS_RESPONSE,
        ),
        _api(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            "OffsetForLeaderEpoch",
            (0, 3),
            4,
            OFFSET_FOR_LEADER_EPOCH_REQUEST,
            OFFSET_FOR_LEADER_EPOCH_RESPONSE,
        ),
        # v2+ flexible (docs/kafka.md, "APIs and versions"); v4 adds the disk's totals.
        _api(
            ApiKey.DESCRIBE_LOG_DIRS,
            "DescribeLogDirs",
            (0, 4),
            2,
            DESCRIBE_LOG_DIRS_REQUEST,
            DESCRIBE_LOG_DIRS_RESPONSE,
        ),
        # Flexible from v0 (docs/kafka.md, "APIs and versions"); v2's fenced brokers are not.
        _api(
            ApiKey.DESCRIBE_CLUSTER,
            "DescribeCluster",
            (0, 1),
            0,
            DESCRIBE_CLUSTER_REQUEST,
            DESCRIBE_CLUSTER_RESPONSE,
        ),
        # ACLs (docs/security.md, "Authorization (ACLs)"): v0-3, flexible from v2.
        _api(
            ApiKey.DESCRIBE_ACLS,
            "DescribeAcls",
            (0, 3),
            2,
            DESCRIBE_ACLS_REQUEST,
            DESCRIBE_ACLS_RESPONSE,
        ),
        _api(
            ApiKey.CREATE_ACLS,
            "CreateAcls",
            (0, 3),
            2,
            CREATE_ACLS_REQUEST,
            CREATE_ACLS_RESPONSE,
        ),
        _api(
            ApiKey.DELETE_ACLS,
            "DeleteAcls",
            (0, 3),
            2,
            DELETE_ACLS_REQUEST,
            DELETE_ACLS_RESPONSE,
        ),
        # Topic configs (docs/kafka.md, "Topic configs"): the non-flexible versions.
        _api(
            ApiKey.ALTER_CONFIGS,
            "AlterConfigs",
            (0, 1),
            2,
            ALTER_CONFIGS_REQUEST,
            ALTER_CONFIGS_RESPONSE,
        ),
        _api(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            "IncrementalAlterConfigs",
            (0, 0),
            1,
            INCREMENTAL_ALTER_CONFIGS_REQUEST,
            INCREMENTAL_ALTER_CONFIGS_RESPONSE,
        ),
        # Authentication (docs/kafka.md, "Authentication"): SaslAuthenticate v2 and the
        # SCRAM credential APIs are flexible.
        _api(
            ApiKey.SASL_HANDSHAKE,
            "SaslHandshake",
            (0, 1),
            None,
            SASL_HANDSHAKE_REQUEST,
            SASL_HANDSHAKE_RESPONSE,
        ),
        _api(
            ApiKey.SASL_AUTHENTICATE,
            "SaslAuthenticate",
            (0, 2),
            2,
            SASL_AUTHENTICATE_REQUEST,
            SASL_AUTHENTICATE_RESPONSE,
        ),
        _api(
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
            "DescribeUserScramCredentials",
            (0, 0),
            0,
            DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST,
            DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE,
        ),
        _api(
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
            "AlterUserScramCredentials",
            (0, 0),
            0,
            ALTER_USER_SCRAM_CREDENTIALS_REQUEST,
            ALTER_USER_SCRAM_CREDENTIALS_RESPONSE,
        ),
    ]
)


# --- Public entry points ---------------------------------------------------------------


def _spec(api_key: int) -> ApiSpec:
    spec = APIS.get(api_key)
    if spec is None:
        raise KafkaCodecError(f"unknown api key {api_key}")
    return spec


def is_flexible(api_key: int, version: int) -> bool:
    """Whether (api, version) uses compact encodings and tagged fields (Kafka's threshold)."""
    return _spec(api_key).is_flexible(version)


def decode_request_header(buf: bytes | memoryview) -> tuple[RequestHeader, int]:
    """Parse a request header (v1 or v2); returns it and the body offset.

    Raises only KafkaCodecError. Unknown api keys and unsupported versions still parse, so
    the front-end can answer them (ApiVersions) or drop the connection.
    """
    return read_request_header(buf, APIS)


def decode_request(api_key: int, version: int, buf: bytes | memoryview, pos: int) -> dict[str, Any]:
    """Decode a request body starting at `pos` (from `decode_request_header`).

    `buf` must end where the request ends. Records come back as memoryview slices of `buf`
    (no copy) or None; trailing bytes after the body are ignored, as Kafka does.
    """
    return _spec(api_key).decode_request(version, buf, pos)


def encode_request(
    api_key: int,
    version: int,
    correlation_id: int,
    client_id: str | None,
    body: Mapping[str, Any],
) -> bytes:
    """Header plus body of a request, without the 4-byte size prefix (for the mirror client)."""
    return _spec(api_key).encode_request(version, correlation_id, client_id, body)


def encode_response_parts(
    api_key: int, version: int, correlation_id: int, body: Mapping[str, Any]
) -> list[Any]:
    """A response (header + body, no size prefix) as bytes-like parts.

    Records chunks of at least `schema.BIG_CHUNK` bytes are passed through as their own
    parts instead of being copied, so a Fetch response can go out with writeSequence.
    The total length is `sum(len(p) for p in parts)`.
    """
    return _spec(api_key).encode_response_parts(version, correlation_id, body)


def count_response_errors(
    api_key: int, version: int, body: Mapping[str, Any], out: dict[int, int]
) -> None:
    """Add each non-zero ``error_code`` of a response body to ``out`` (code -> times)."""
    _spec(api_key).response_error_counter(version)(body, out)


def encode_response(
    api_key: int, version: int, correlation_id: int, body: Mapping[str, Any]
) -> bytes:
    """`b"".join(encode_response_parts(...))`: header + body, no size prefix."""
    return _spec(api_key).encode_response(version, correlation_id, body)


def decode_response(
    api_key: int, version: int, buf: bytes | memoryview
) -> tuple[int, dict[str, Any]]:
    """Parse a response frame (no size prefix); returns (correlation_id, body)."""
    return _spec(api_key).decode_response(version, buf)


def api_versions_table() -> list[dict[str, int]]:
    """The ApiVersions `api_keys` array advertising every declared API, sorted by key."""
    return [
        {"api_key": s.key, "min_version": s.advertised_min, "max_version": s.max_version}
        for s in sorted(APIS.values(), key=lambda s: s.key)
    ]


def api_versions_error_response(correlation_id: int) -> bytes:
    """Kafka's answer to an ApiVersions version it does not know.

    A v0-layout body (header v0, error UNSUPPORTED_VERSION, the full table) that every client
    can parse whatever version it sent; clients then retry with a listed version.
    """
    body = {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": api_versions_table()}
    return APIS[ApiKey.API_VERSIONS].encode_response(0, correlation_id, body)
