"""The data path: Produce, Fetch, ListOffsets, DeleteRecords, OffsetForLeaderEpoch.

Each API's structs are followed by its one declaration (`api`), which registers it
in `APIS`; rustka/kafka/messages/__init__.py says how to read them.
"""

from __future__ import annotations

from rustka.kafka.schema import INT8, INT16, INT32, INT64, RECORDS, STRING, Array

from .registry import ApiKey, F, api, msg

# --- Produce (0) -----------------------------------------------------------------------

PRODUCE_REQUEST = msg(
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

PRODUCE_RESPONSE = msg(
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

# v0-2 carry magic 0/1 message sets, converted to a batch (docs/kafka.md, "Old versions").
api(ApiKey.PRODUCE, "Produce", (0, 8), 9, PRODUCE_REQUEST, PRODUCE_RESPONSE)

# --- Fetch (1) -------------------------------------------------------------------------

FETCH_REQUEST = msg(
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

FETCH_RESPONSE = msg(
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

# v0-3 answer magic 0/1 message sets, converted from the stored batches.
api(ApiKey.FETCH, "Fetch", (0, 11), 12, FETCH_REQUEST, FETCH_RESPONSE)

# --- ListOffsets (2) -------------------------------------------------------------------

LIST_OFFSETS_REQUEST = msg(
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
                    F("max_num_offsets", INT32, "0", default=1),
                ],
            ),
        ],
    ),
)

LIST_OFFSETS_RESPONSE = msg(
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
                    # v0: a list of offsets instead of one offset and its timestamp.
                    F("old_style_offsets", Array(INT64), "0", default=()),
                    F("timestamp", INT64, "1+", default=-1),
                    F("offset", INT64, "1+", default=-1),
                    F("leader_epoch", INT32, "4+", default=-1),
                ],
            ),
        ],
    ),
)

api(
    ApiKey.LIST_OFFSETS,
    "ListOffsets",
    (0, 5),
    6,
    LIST_OFFSETS_REQUEST,
    LIST_OFFSETS_RESPONSE,
)

# --- DeleteRecords (21) ----------------------------------------------------------------

DELETE_RECORDS_REQUEST = msg(
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

DELETE_RECORDS_RESPONSE = msg(
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

# v2 is flexible (docs/kafka.md, "APIs and versions"); v1 is v0.
api(
    ApiKey.DELETE_RECORDS,
    "DeleteRecords",
    (0, 2),
    2,
    DELETE_RECORDS_REQUEST,
    DELETE_RECORDS_RESPONSE,
)

# --- OffsetForLeaderEpoch (23) ---------------------------------------------------------

OFFSET_FOR_LEADER_EPOCH_REQUEST = msg(
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

OFFSET_FOR_LEADER_EPOCH_RESPONSE = msg(
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

api(
    ApiKey.OFFSET_FOR_LEADER_EPOCH,
    "OffsetForLeaderEpoch",
    (0, 3),
    4,
    OFFSET_FOR_LEADER_EPOCH_REQUEST,
    OFFSET_FOR_LEADER_EPOCH_RESPONSE,
)
