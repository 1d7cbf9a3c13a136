"""Consumer groups: coordinator lookup, membership, committed offsets, listing and deleting.

Each API's structs are followed by its one declaration (`api`), which registers it
in `APIS`; rustka/kafka/messages/__init__.py says how to read them.
"""

from __future__ import annotations

from rustka.kafka.schema import BOOL, BYTES, INT8, INT16, INT32, INT64, STRING, UUID, Array

from .registry import INT32_MIN, ApiKey, F, api, msg

# --- FindCoordinator (10) --------------------------------------------------------------

FIND_COORDINATOR_REQUEST = msg(
    "FindCoordinatorRequest",
    F("key", STRING),
    F("key_type", INT8, "1+"),
)

FIND_COORDINATOR_RESPONSE = msg(
    "FindCoordinatorResponse",
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("error_message", STRING, "1+", nullable="1+"),
    F("node_id", INT32),
    F("host", STRING),
    F("port", INT32),
)

api(
    ApiKey.FIND_COORDINATOR,
    "FindCoordinator",
    (0, 2),
    3,
    FIND_COORDINATOR_REQUEST,
    FIND_COORDINATOR_RESPONSE,
)

# --- JoinGroup (11) --------------------------------------------------------------------

JOIN_GROUP_REQUEST = msg(
    "JoinGroupRequest",
    F("group_id", STRING),
    F("session_timeout_ms", INT32),
    F("rebalance_timeout_ms", INT32, "1+", default=-1),
    F("member_id", STRING),
    F("group_instance_id", STRING, "5+", nullable="5+"),
    F("protocol_type", STRING),
    F("protocols", [F("name", STRING), F("metadata", BYTES)]),
)

JOIN_GROUP_RESPONSE = msg(
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

api(ApiKey.JOIN_GROUP, "JoinGroup", (0, 5), 6, JOIN_GROUP_REQUEST, JOIN_GROUP_RESPONSE)

# --- SyncGroup (14) --------------------------------------------------------------------

SYNC_GROUP_REQUEST = msg(
    "SyncGroupRequest",
    F("group_id", STRING),
    F("generation_id", INT32),
    F("member_id", STRING),
    F("group_instance_id", STRING, "3+", nullable="3+"),
    F("assignments", [F("member_id", STRING), F("assignment", BYTES)]),
)

SYNC_GROUP_RESPONSE = msg(
    "SyncGroupResponse",
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("assignment", BYTES),
)

api(ApiKey.SYNC_GROUP, "SyncGroup", (0, 3), 4, SYNC_GROUP_REQUEST, SYNC_GROUP_RESPONSE)

# --- Heartbeat (12) --------------------------------------------------------------------

HEARTBEAT_REQUEST = msg(
    "HeartbeatRequest",
    F("group_id", STRING),
    F("generation_id", INT32),
    F("member_id", STRING),
    F("group_instance_id", STRING, "3+", nullable="3+"),
)

HEARTBEAT_RESPONSE = msg(
    "HeartbeatResponse",
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
)

api(ApiKey.HEARTBEAT, "Heartbeat", (0, 3), 4, HEARTBEAT_REQUEST, HEARTBEAT_RESPONSE)

# --- LeaveGroup (13) -------------------------------------------------------------------

LEAVE_GROUP_REQUEST = msg(
    "LeaveGroupRequest",
    F("group_id", STRING),
    F("member_id", STRING, "0-2"),
    F(
        "members",
        [F("member_id", STRING, "3+"), F("group_instance_id", STRING, "3+", nullable="3+")],
        "3+",
    ),
)

LEAVE_GROUP_RESPONSE = msg(
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

api(ApiKey.LEAVE_GROUP, "LeaveGroup", (0, 3), 4, LEAVE_GROUP_REQUEST, LEAVE_GROUP_RESPONSE)

# --- OffsetCommit (8) ------------------------------------------------------------------

OFFSET_COMMIT_REQUEST = msg(
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
                    # v1 only: the client's commit time; expiry is the broker's (v5+'s rule).
                    F("commit_timestamp", INT64, "1", default=-1),
                    F("committed_metadata", STRING, nullable="0+"),
                ],
            ),
        ],
    ),
)

OFFSET_COMMIT_RESPONSE = msg(
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

# v0-1: Kafka 4.0 removed them (KIP-896); sarama still sends v1 (docs/kafka.md).
api(
    ApiKey.OFFSET_COMMIT,
    "OffsetCommit",
    (0, 9),
    8,
    OFFSET_COMMIT_REQUEST,
    OFFSET_COMMIT_RESPONSE,
)

# --- OffsetFetch (9) -------------------------------------------------------------------

OFFSET_FETCH_REQUEST = msg(
    "OffsetFetchRequest",
    F("group_id", STRING, "0-7"),
    # v2+: null means every topic the group has offsets for.
    F(
        "topics",
        [F("name", STRING), F("partition_indexes", Array(INT32))],
        "0-7",
        nullable="2-7",
    ),
    # v8+: several groups at once; v9 names the consumer protocol's member and epoch.
    F(
        "groups",
        [
            F("group_id", STRING),
            F("member_id", STRING, "9+", nullable="9+"),
            F("member_epoch", INT32, "9+", default=-1),
            F(
                "topics",
                [F("name", STRING), F("partition_indexes", Array(INT32))],
                nullable="8+",
            ),
        ],
        "8+",
    ),
    # v7: answer UNSTABLE_OFFSET_COMMIT where a transaction has an offset staged.
    F("require_stable", BOOL, "7+"),
)

_OFFSET_FETCH_PARTITIONS_V8 = [
    F("partition_index", INT32),
    F("committed_offset", INT64),
    F("committed_leader_epoch", INT32, default=-1),
    F("metadata", STRING, nullable="8+"),
    F("error_code", INT16),
]

OFFSET_FETCH_RESPONSE = msg(
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
        "0-7",
    ),
    F("error_code", INT16, "2-7"),
    F(
        "groups",
        [
            F("group_id", STRING),
            F("topics", [F("name", STRING), F("partitions", _OFFSET_FETCH_PARTITIONS_V8)]),
            F("error_code", INT16),
        ],
        "8+",
    ),
)

api(
    ApiKey.OFFSET_FETCH,
    "OffsetFetch",
    (0, 9),
    6,
    OFFSET_FETCH_REQUEST,
    OFFSET_FETCH_RESPONSE,
)

# --- ListGroups (16) -------------------------------------------------------------------

LIST_GROUPS_REQUEST = msg(
    "ListGroupsRequest",
    # v4: only groups in one of these states (empty: every state).
    F("states_filter", Array(STRING), "4+"),
    # v5: only groups of these types ("classic", "consumer"; empty: every type).
    F("types_filter", Array(STRING), "5+"),
)

LIST_GROUPS_RESPONSE = msg(
    "ListGroupsResponse",
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F(
        "groups",
        [
            F("group_id", STRING),
            F("protocol_type", STRING),
            F("group_state", STRING, "4+"),
            F("group_type", STRING, "5+"),
        ],
    ),
)

# v3-4 are flexible (docs/kafka.md, "APIs and versions"); v4 filters by state.
api(ApiKey.LIST_GROUPS, "ListGroups", (0, 5), 3, LIST_GROUPS_REQUEST, LIST_GROUPS_RESPONSE)

# --- DescribeGroups (15) ---------------------------------------------------------------

DESCRIBE_GROUPS_REQUEST = msg(
    "DescribeGroupsRequest",
    F("groups", Array(STRING)),
    F("include_authorized_operations", BOOL, "3+"),
)

DESCRIBE_GROUPS_RESPONSE = msg(
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

api(
    ApiKey.DESCRIBE_GROUPS,
    "DescribeGroups",
    (0, 4),
    5,
    DESCRIBE_GROUPS_REQUEST,
    DESCRIBE_GROUPS_RESPONSE,
)

# --- DeleteGroups (42), OffsetDelete (47): docs/kafka.md, "Admin APIs" -----------------
# The non-flexible versions.

DELETE_GROUPS_REQUEST = msg("DeleteGroupsRequest", F("groups_names", Array(STRING)))

DELETE_GROUPS_RESPONSE = msg(
    "DeleteGroupsResponse",
    F("throttle_time_ms", INT32),
    F("results", [F("group_id", STRING), F("error_code", INT16)]),
)

api(
    ApiKey.DELETE_GROUPS,
    "DeleteGroups",
    (0, 1),
    2,
    DELETE_GROUPS_REQUEST,
    DELETE_GROUPS_RESPONSE,
)

OFFSET_DELETE_REQUEST = msg(
    "OffsetDeleteRequest",
    F("group_id", STRING),
    F("topics", [F("name", STRING), F("partitions", [F("partition_index", INT32)])]),
)

OFFSET_DELETE_RESPONSE = msg(
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

api(
    ApiKey.OFFSET_DELETE,
    "OffsetDelete",
    (0, 0),
    None,
    OFFSET_DELETE_REQUEST,
    OFFSET_DELETE_RESPONSE,
)

# --- ConsumerGroupHeartbeat (68), ConsumerGroupDescribe (69): KIP-848 -------------------
# docs/kafka.md, "Consumer groups (KIP-848)". v1 of the heartbeat adds the regex.

_TOPIC_PARTITIONS = [F("topic_id", UUID), F("partitions", Array(INT32))]

CONSUMER_GROUP_HEARTBEAT_REQUEST = msg(
    "ConsumerGroupHeartbeatRequest",
    F("group_id", STRING),
    F("member_id", STRING),
    F("member_epoch", INT32),
    F("instance_id", STRING, nullable="0+"),
    F("rack_id", STRING, nullable="0+"),
    F("rebalance_timeout_ms", INT32, default=-1),
    F("subscribed_topic_names", Array(STRING), nullable="0+"),
    F("subscribed_topic_regex", STRING, "1+", nullable="1+"),
    F("server_assignor", STRING, nullable="0+"),
    F("topic_partitions", _TOPIC_PARTITIONS, nullable="0+"),
)

CONSUMER_GROUP_HEARTBEAT_RESPONSE = msg(
    "ConsumerGroupHeartbeatResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+"),
    F("member_id", STRING, nullable="0+"),
    F("member_epoch", INT32),
    F("heartbeat_interval_ms", INT32),
    # null unless the request was a full one or the assignment changed (as Kafka).
    F("assignment", msg("Assignment", F("topic_partitions", _TOPIC_PARTITIONS)), nullable="0+"),
)

api(
    ApiKey.CONSUMER_GROUP_HEARTBEAT,
    "ConsumerGroupHeartbeat",
    (0, 1),
    0,
    CONSUMER_GROUP_HEARTBEAT_REQUEST,
    CONSUMER_GROUP_HEARTBEAT_RESPONSE,
)

_DESCRIBED_ASSIGNMENT = msg(
    "Assignment",
    F(
        "topic_partitions",
        [F("topic_id", UUID), F("topic_name", STRING), F("partitions", Array(INT32))],
    ),
)

CONSUMER_GROUP_DESCRIBE_REQUEST = msg(
    "ConsumerGroupDescribeRequest",
    F("group_ids", Array(STRING)),
    F("include_authorized_operations", BOOL),
)

CONSUMER_GROUP_DESCRIBE_RESPONSE = msg(
    "ConsumerGroupDescribeResponse",
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
                    F("instance_id", STRING, nullable="0+"),
                    F("rack_id", STRING, nullable="0+"),
                    F("member_epoch", INT32),
                    F("client_id", STRING),
                    F("client_host", STRING),
                    F("subscribed_topic_names", Array(STRING)),
                    F("subscribed_topic_regex", STRING, nullable="0+"),
                    F("assignment", _DESCRIBED_ASSIGNMENT),
                    F("target_assignment", _DESCRIBED_ASSIGNMENT),
                ],
            ),
            F("authorized_operations", INT32, default=INT32_MIN),
        ],
    ),
)

api(
    ApiKey.CONSUMER_GROUP_DESCRIBE,
    "ConsumerGroupDescribe",
    (0, 0),
    0,
    CONSUMER_GROUP_DESCRIBE_REQUEST,
    CONSUMER_GROUP_DESCRIBE_RESPONSE,
)
