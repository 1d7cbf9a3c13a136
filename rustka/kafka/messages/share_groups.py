"""Share groups (KIP-932): heartbeat, describe, fetch and acknowledge.

Version 0 of these APIs was Kafka 4.0's early access and is gone from Kafka 4.1; version
1 is the stable one, the only version librdkafka 2.16's share consumer sends, and the
only one declared here (docs/kafka.md, "Share groups (KIP-932)"). All are flexible.

Each API's structs are followed by its one declaration (`api`), which registers it
in `APIS`; rustka/kafka/messages/__init__.py says how to read them.
"""

from __future__ import annotations

from rustka.kafka.schema import BOOL, INT8, INT16, INT32, INT64, RECORDS, STRING, UUID, Array

from .registry import INT32_MIN, ApiKey, F, api, msg

_NODE_ENDPOINTS = F(
    "node_endpoints",
    [
        F("node_id", INT32),
        F("host", STRING),
        F("port", INT32),
        F("rack", STRING, nullable="0+"),
    ],
)

_CURRENT_LEADER = F(
    "current_leader",
    msg("LeaderIdAndEpoch", F("leader_id", INT32, default=-1), F("leader_epoch", INT32)),
)

_ACK_BATCHES = F(
    "acknowledgement_batches",
    [
        F("first_offset", INT64),
        F("last_offset", INT64),
        F("acknowledge_types", Array(INT8)),
    ],
)

# --- ShareGroupHeartbeat (76) ----------------------------------------------------------

SHARE_GROUP_HEARTBEAT_REQUEST = msg(
    "ShareGroupHeartbeatRequest",
    F("group_id", STRING),
    F("member_id", STRING),
    F("member_epoch", INT32),
    F("rack_id", STRING, nullable="0+"),
    F("subscribed_topic_names", Array(STRING), nullable="0+"),
)

SHARE_GROUP_HEARTBEAT_RESPONSE = msg(
    "ShareGroupHeartbeatResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+"),
    F("member_id", STRING, nullable="0+"),
    F("member_epoch", INT32),
    F("heartbeat_interval_ms", INT32),
    # Kafka's Assignment is a nullable struct: an int8 (-1 null, 1 present) before it. The
    # codec has no nullable structs, so rustka always sends it present (1): librdkafka
    # compares it with the assignment it has and ignores an unchanged one.
    F("assignment_present", INT8, default=1),
    F(
        "assignment",
        msg(
            "Assignment",
            F("topic_partitions", [F("topic_id", UUID), F("partitions", Array(INT32))]),
        ),
    ),
)

api(
    ApiKey.SHARE_GROUP_HEARTBEAT,
    "ShareGroupHeartbeat",
    (1, 1),
    0,
    SHARE_GROUP_HEARTBEAT_REQUEST,
    SHARE_GROUP_HEARTBEAT_RESPONSE,
)

# --- ShareGroupDescribe (77) -----------------------------------------------------------

SHARE_GROUP_DESCRIBE_REQUEST = msg(
    "ShareGroupDescribeRequest",
    F("group_ids", Array(STRING)),
    F("include_authorized_operations", BOOL),
)

SHARE_GROUP_DESCRIBE_RESPONSE = msg(
    "ShareGroupDescribeResponse",
    F("throttle_time_ms", INT32),
    F(
        "groups",
        [
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
            F("group_id", STRING),
            F("group_state", STRING),
            F("group_epoch", INT32),
            F("assignment_epoch", INT32),
            F("assignor_name", STRING),
            F(
                "members",
                [
                    F("member_id", STRING),
                    F("rack_id", STRING, nullable="0+"),
                    F("member_epoch", INT32),
                    F("client_id", STRING),
                    F("client_host", STRING),
                    F("subscribed_topic_names", Array(STRING)),
                    F(
                        "assignment",
                        msg(
                            "Assignment",
                            F(
                                "topic_partitions",
                                [
                                    F("topic_id", UUID),
                                    F("topic_name", STRING),
                                    F("partitions", Array(INT32)),
                                ],
                            ),
                        ),
                    ),
                ],
            ),
            F("authorized_operations", INT32, default=INT32_MIN),
        ],
    ),
)

api(
    ApiKey.SHARE_GROUP_DESCRIBE,
    "ShareGroupDescribe",
    (1, 1),
    0,
    SHARE_GROUP_DESCRIBE_REQUEST,
    SHARE_GROUP_DESCRIBE_RESPONSE,
)

# --- ShareFetch (78) -------------------------------------------------------------------

SHARE_FETCH_REQUEST = msg(
    "ShareFetchRequest",
    F("group_id", STRING, nullable="0+"),
    F("member_id", STRING, nullable="0+"),
    F("share_session_epoch", INT32),
    F("max_wait_ms", INT32),
    F("min_bytes", INT32),
    F("max_bytes", INT32, default=0x7FFFFFFF),
    F("max_records", INT32, "1+"),
    F("batch_size", INT32, "1+"),
    F(
        "topics",
        [
            F("topic_id", UUID),
            F(
                "partitions",
                [
                    F("partition_index", INT32),
                    F("partition_max_bytes", INT32, "0"),
                    _ACK_BATCHES,
                ],
            ),
        ],
    ),
    F("forgotten_topics_data", [F("topic_id", UUID), F("partitions", Array(INT32))]),
)

SHARE_FETCH_RESPONSE = msg(
    "ShareFetchResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+"),
    F("acquisition_lock_timeout_ms", INT32, "1+"),
    F(
        "responses",
        [
            F("topic_id", UUID),
            F(
                "partitions",
                [
                    F("partition_index", INT32),
                    F("error_code", INT16),
                    F("error_message", STRING, nullable="0+"),
                    F("acknowledge_error_code", INT16),
                    F("acknowledge_error_message", STRING, nullable="0+"),
                    _CURRENT_LEADER,
                    F("records", RECORDS, nullable="0"),
                    F(
                        "acquired_records",
                        [
                            F("first_offset", INT64),
                            F("last_offset", INT64),
                            F("delivery_count", INT16),
                        ],
                    ),
                ],
            ),
        ],
    ),
    _NODE_ENDPOINTS,
)

api(
    ApiKey.SHARE_FETCH,
    "ShareFetch",
    (1, 1),
    0,
    SHARE_FETCH_REQUEST,
    SHARE_FETCH_RESPONSE,
)

# --- ShareAcknowledge (79) -------------------------------------------------------------

SHARE_ACKNOWLEDGE_REQUEST = msg(
    "ShareAcknowledgeRequest",
    F("group_id", STRING, nullable="0+"),
    F("member_id", STRING, nullable="0+"),
    F("share_session_epoch", INT32),
    F(
        "topics",
        [
            F("topic_id", UUID),
            F("partitions", [F("partition_index", INT32), _ACK_BATCHES]),
        ],
    ),
)

SHARE_ACKNOWLEDGE_RESPONSE = msg(
    "ShareAcknowledgeResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+"),
    F(
        "responses",
        [
            F("topic_id", UUID),
            F(
                "partitions",
                [
                    F("partition_index", INT32),
                    F("error_code", INT16),
                    F("error_message", STRING, nullable="0+"),
                    _CURRENT_LEADER,
                ],
            ),
        ],
    ),
    _NODE_ENDPOINTS,
)

api(
    ApiKey.SHARE_ACKNOWLEDGE,
    "ShareAcknowledge",
    (1, 1),
    0,
    SHARE_ACKNOWLEDGE_REQUEST,
    SHARE_ACKNOWLEDGE_RESPONSE,
)
