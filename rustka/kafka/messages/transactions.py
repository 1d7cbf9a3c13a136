"""Idempotent and transactional producers (docs/kafka.md, "Transactions").

Each API's structs are followed by its one declaration (`api`), which registers it
in `APIS`; rustka/kafka/messages/__init__.py says how to read them.
"""

from __future__ import annotations

from rustka.kafka.schema import BOOL, INT16, INT32, INT64, STRING, Array

from .registry import ApiKey, F, api, msg

# --- InitProducerId (22) ---------------------------------------------------------------

# v2 is the first flexible version; v3 names the producer's id and epoch (KIP-360's
# epoch bump); v4 answers PRODUCER_FENCED. v5+ (KIP-890, Kafka 4) is not offered.
INIT_PRODUCER_ID_REQUEST = msg(
    "InitProducerIdRequest",
    F("transactional_id", STRING, nullable="0+"),
    F("transaction_timeout_ms", INT32),
    F("producer_id", INT64, "3+", default=-1),
    F("producer_epoch", INT16, "3+", default=-1),
)

INIT_PRODUCER_ID_RESPONSE = msg(
    "InitProducerIdResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("producer_id", INT64, default=-1),
    F("producer_epoch", INT16),
)

api(
    ApiKey.INIT_PRODUCER_ID,
    "InitProducerId",
    (0, 4),
    2,
    INIT_PRODUCER_ID_REQUEST,
    INIT_PRODUCER_ID_RESPONSE,
)

# --- Transactions: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
# TxnOffsetCommit (28); docs/kafka.md, "Transactions". v0-3: v1 and v2 change only
# throttling and the errors allowed, v3 is the first flexible version and (TxnOffsetCommit)
# adds the consumer's generation, member and instance ids (KIP-447). Not offered:
# AddPartitionsToTxn v4+ (broker-to-broker batching), the KIP-890 versions
# (AddOffsetsToTxn 4, EndTxn 4-5).

ADD_PARTITIONS_TO_TXN_REQUEST = msg(
    "AddPartitionsToTxnRequest",
    F("transactional_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("topics", [F("name", STRING), F("partitions", Array(INT32))]),
)

ADD_PARTITIONS_TO_TXN_RESPONSE = msg(
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

# Transactions (docs/kafka.md, "Transactions"): v3 is flexible.
api(
    ApiKey.ADD_PARTITIONS_TO_TXN,
    "AddPartitionsToTxn",
    (0, 3),
    3,
    ADD_PARTITIONS_TO_TXN_REQUEST,
    ADD_PARTITIONS_TO_TXN_RESPONSE,
)

ADD_OFFSETS_TO_TXN_REQUEST = msg(
    "AddOffsetsToTxnRequest",
    F("transactional_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("group_id", STRING),
)

ADD_OFFSETS_TO_TXN_RESPONSE = msg(
    "AddOffsetsToTxnResponse", F("throttle_time_ms", INT32), F("error_code", INT16)
)

api(
    ApiKey.ADD_OFFSETS_TO_TXN,
    "AddOffsetsToTxn",
    (0, 3),
    3,
    ADD_OFFSETS_TO_TXN_REQUEST,
    ADD_OFFSETS_TO_TXN_RESPONSE,
)

END_TXN_REQUEST = msg(
    "EndTxnRequest",
    F("transactional_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("committed", BOOL),
)

END_TXN_RESPONSE = msg("EndTxnResponse", F("throttle_time_ms", INT32), F("error_code", INT16))

api(ApiKey.END_TXN, "EndTxn", (0, 3), 3, END_TXN_REQUEST, END_TXN_RESPONSE)

TXN_OFFSET_COMMIT_REQUEST = msg(
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

TXN_OFFSET_COMMIT_RESPONSE = msg(
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

api(
    ApiKey.TXN_OFFSET_COMMIT,
    "TxnOffsetCommit",
    (0, 3),
    3,
    TXN_OFFSET_COMMIT_REQUEST,
    TXN_OFFSET_COMMIT_RESPONSE,
)

# DescribeTransactions (65) and ListTransactions (66): flexible from v0 (KIP-664).
DESCRIBE_TRANSACTIONS_REQUEST = msg(
    "DescribeTransactionsRequest", F("transactional_ids", Array(STRING))
)

DESCRIBE_TRANSACTIONS_RESPONSE = msg(
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

api(
    ApiKey.DESCRIBE_TRANSACTIONS,
    "DescribeTransactions",
    (0, 0),
    0,
    DESCRIBE_TRANSACTIONS_REQUEST,
    DESCRIBE_TRANSACTIONS_RESPONSE,
)

LIST_TRANSACTIONS_REQUEST = msg(
    "ListTransactionsRequest",
    F("state_filters", Array(STRING)),
    F("producer_id_filters", Array(INT64)),
    F("duration_filter", INT64, "1+", default=-1),
)

LIST_TRANSACTIONS_RESPONSE = msg(
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

# v2's transactional-id pattern (Kafka 4.1) is not offered.
api(
    ApiKey.LIST_TRANSACTIONS,
    "ListTransactions",
    (0, 1),
    0,
    LIST_TRANSACTIONS_REQUEST,
    LIST_TRANSACTIONS_RESPONSE,
)
