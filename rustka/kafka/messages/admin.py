"""ApiVersions, Metadata and the admin APIs: topics, partitions, configs, log dirs, the cluster.

Each API's structs are followed by its one declaration (`api`), which registers it
in `APIS`; rustka/kafka/messages/__init__.py says how to read them.
"""

from __future__ import annotations

from rustka.kafka.schema import BOOL, INT8, INT16, INT32, INT64, STRING, UUID, Array

from .registry import INT32_MIN, ApiKey, F, api, msg

# --- ApiVersions (18) ------------------------------------------------------------------

API_VERSIONS_REQUEST = msg(
    "ApiVersionsRequest",
    F("client_software_name", STRING, "3+"),
    F("client_software_version", STRING, "3+"),
)

API_VERSIONS_RESPONSE = msg(
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

api(
    ApiKey.API_VERSIONS,
    "ApiVersions",
    (0, 4),
    3,
    API_VERSIONS_REQUEST,
    API_VERSIONS_RESPONSE,
    response_header_v0_always=True,
)

# --- Metadata (3) ----------------------------------------------------------------------

METADATA_REQUEST = msg(
    "MetadataRequest",
    # v0: an empty array means all topics; v1+: null means all, empty means none.
    # v10+ carries a topic id; v12 looks a topic up by it (its name then null).
    F(
        "topics",
        [F("topic_id", UUID, "10+"), F("name", STRING, nullable="10+")],
        nullable="1+",
    ),
    F("allow_auto_topic_creation", BOOL, "4+", default=True),
    F("include_cluster_authorized_operations", BOOL, "8-10"),
    F("include_topic_authorized_operations", BOOL, "8+"),
)

METADATA_RESPONSE = msg(
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
            F("name", STRING, nullable="12+"),
            F("topic_id", UUID, "10+"),
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

# v10+ name topics by id too (rustka.kafka.topic_ids), which KIP-848 and KIP-932 need.
api(ApiKey.METADATA, "Metadata", (0, 12), 9, METADATA_REQUEST, METADATA_RESPONSE)

# --- CreateTopics (19) -----------------------------------------------------------------

CREATE_TOPICS_REQUEST = msg(
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

CREATE_TOPICS_RESPONSE = msg(
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

api(
    ApiKey.CREATE_TOPICS,
    "CreateTopics",
    (0, 4),
    5,
    CREATE_TOPICS_REQUEST,
    CREATE_TOPICS_RESPONSE,
)

# --- DeleteTopics (20) -----------------------------------------------------------------

DELETE_TOPICS_REQUEST = msg(
    "DeleteTopicsRequest",
    F("topic_names", Array(STRING)),
    F("timeout_ms", INT32),
)

DELETE_TOPICS_RESPONSE = msg(
    "DeleteTopicsResponse",
    F("throttle_time_ms", INT32, "1+"),
    F("responses", [F("name", STRING), F("error_code", INT16)]),
)

api(
    ApiKey.DELETE_TOPICS,
    "DeleteTopics",
    (0, 3),
    4,
    DELETE_TOPICS_REQUEST,
    DELETE_TOPICS_RESPONSE,
)

# --- DescribeConfigs (32) --------------------------------------------------------------

DESCRIBE_CONFIGS_REQUEST = msg(
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

DESCRIBE_CONFIGS_RESPONSE = msg(
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

api(
    ApiKey.DESCRIBE_CONFIGS,
    "DescribeConfigs",
    (0, 2),
    4,
    DESCRIBE_CONFIGS_REQUEST,
    DESCRIBE_CONFIGS_RESPONSE,
)

# --- AlterConfigs (33), IncrementalAlterConfigs (44) -----------------------------------

ALTER_CONFIGS_REQUEST = msg(
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

ALTER_CONFIGS_RESPONSE = msg(
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

# Topic configs (docs/kafka.md, "Topic configs"): the non-flexible versions.
api(
    ApiKey.ALTER_CONFIGS,
    "AlterConfigs",
    (0, 1),
    2,
    ALTER_CONFIGS_REQUEST,
    ALTER_CONFIGS_RESPONSE,
)

INCREMENTAL_ALTER_CONFIGS_REQUEST = msg(
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

INCREMENTAL_ALTER_CONFIGS_RESPONSE = msg(
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

api(
    ApiKey.INCREMENTAL_ALTER_CONFIGS,
    "IncrementalAlterConfigs",
    (0, 0),
    1,
    INCREMENTAL_ALTER_CONFIGS_REQUEST,
    INCREMENTAL_ALTER_CONFIGS_RESPONSE,
)

# --- CreatePartitions (37): docs/kafka.md, "Admin APIs" --------------------------------

CREATE_PARTITIONS_REQUEST = msg(
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

CREATE_PARTITIONS_RESPONSE = msg(
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

# The non-flexible versions.
api(
    ApiKey.CREATE_PARTITIONS,
    "CreatePartitions",
    (0, 1),
    2,
    CREATE_PARTITIONS_REQUEST,
    CREATE_PARTITIONS_RESPONSE,
)

# --- DescribeLogDirs (35) --------------------------------------------------------------

DESCRIBE_LOG_DIRS_REQUEST = msg(
    "DescribeLogDirsRequest",
    # null: every partition.
    F("topics", [F("topic", STRING), F("partitions", Array(INT32))], nullable="0+"),
)

DESCRIBE_LOG_DIRS_RESPONSE = msg(
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

# v2+ flexible (docs/kafka.md, "APIs and versions"); v4 adds the disk's totals.
api(
    ApiKey.DESCRIBE_LOG_DIRS,
    "DescribeLogDirs",
    (0, 4),
    2,
    DESCRIBE_LOG_DIRS_REQUEST,
    DESCRIBE_LOG_DIRS_RESPONSE,
)

# --- DescribeCluster (60) --------------------------------------------------------------

DESCRIBE_CLUSTER_REQUEST = msg(
    "DescribeClusterRequest",
    F("include_cluster_authorized_operations", BOOL),
    # v1: which listeners to list, 1 brokers' or 2 controllers' (this node has only the first).
    F("endpoint_type", INT8, "1+", default=1),
)

DESCRIBE_CLUSTER_RESPONSE = msg(
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

# Flexible from v0 (docs/kafka.md, "APIs and versions"); v2's fenced brokers are not.
api(
    ApiKey.DESCRIBE_CLUSTER,
    "DescribeCluster",
    (0, 1),
    0,
    DESCRIBE_CLUSTER_REQUEST,
    DESCRIBE_CLUSTER_RESPONSE,
)
