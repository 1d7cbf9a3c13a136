"""Each Kafka API's guard (rustka/kafka/authorization.py) on decoded request bodies,
with a real authorizer: what the handler is given and what the answer gains."""

from __future__ import annotations

from typing import Any

from rustka.broker.access import Access, Gate
from rustka.config import Config
from rustka.kafka.apis import HANDLERS
from rustka.kafka.authorization import GUARDS
from rustka.kafka.errors import ErrorCode as E
from rustka.kafka.messages import ApiKey
from rustka.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from rustka.security.authorizer import Authorizer

ME = "User:me"
T, G, C, X = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)


def allow(rtype: ResourceType, name: str, op: Operation) -> AclBinding:
    return AclBinding(rtype, name, PatternType.LITERAL, ME, "*", op, Permission.ALLOW)


def gate(*acls: AclBinding) -> Gate:
    access = Access(Config().updated({"authorizer_enabled": True}), io=None)  # type: ignore[arg-type]
    authorizer = Authorizer(acls)
    return Gate(access, authorizer, ME, "127.0.0.1")


def guard(key: ApiKey, g: Gate, body: dict[str, Any], version: int = 0) -> Any:
    return GUARDS[key](None, g, version, body)  # type: ignore[arg-type]


def test_every_api_served_has_a_guard() -> None:
    assert set(GUARDS) == set(HANDLERS)


def test_produce_writes_the_allowed_topics_and_answers_the_others() -> None:
    g = gate(allow(T, "ok", Operation.WRITE))
    body = {
        "acks": -1,
        "topic_data": [
            {"name": "ok", "partition_data": [{"index": 0, "records": b"r"}]},
            {"name": "no", "partition_data": [{"index": 1, "records": b"r"}]},
        ],
    }
    admitted, finish = guard(ApiKey.PRODUCE, g, body, 8)
    assert [t["name"] for t in admitted["topic_data"]] == ["ok"]
    answer = finish({"responses": [{"name": "ok", "partition_responses": [{"index": 0}]}]})
    assert answer["responses"][1] == {
        "name": "no",
        "partition_responses": [
            {
                "index": 1,
                "error_code": E.TOPIC_AUTHORIZATION_FAILED,
                "base_offset": -1,
                "log_append_time_ms": -1,
                "log_start_offset": -1,
            }
        ],
    }
    assert g._access.denials == {"WRITE": 1}


def test_produce_with_acks_0_refused_whole_still_answers_each_partition() -> None:
    """The guard answers acks=0 like any Produce; the acks=0 rule is dispatch's, which
    sees these errors and hangs up (test_handlers.py)."""
    body = {"acks": 0, "topic_data": [{"name": "no", "partition_data": [{"index": 0}]}]}
    admitted, finish = guard(ApiKey.PRODUCE, gate(), body, 8)
    assert admitted is None
    [entry] = finish(None)["responses"]
    assert entry["partition_responses"][0]["error_code"] == E.TOPIC_AUTHORIZATION_FAILED


def test_a_transactional_produce_needs_its_transactional_id() -> None:
    g = gate(allow(T, "ok", Operation.WRITE))
    body = {
        "acks": -1,
        "transactional_id": "tx",
        "topic_data": [{"name": "ok", "partition_data": [{"index": 0}]}],
    }
    admitted, finish = guard(ApiKey.PRODUCE, g, body, 8)
    assert admitted is None
    [entry] = finish(None)["responses"]
    assert entry["partition_responses"][0]["error_code"] == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_a_denied_fetch_partition_carries_empty_records() -> None:
    body = {"topics": [{"topic": "no", "partitions": [{"partition": 3}]}]}
    admitted, finish = guard(ApiKey.FETCH, gate(), body, 11)
    assert admitted is None
    part = finish(None)["responses"][0]["partitions"][0]
    assert part["partition_index"] == 3 and part["records"] == b""
    assert part["error_code"] == E.TOPIC_AUTHORIZATION_FAILED and part["high_watermark"] == -1


def test_offset_commit_needs_the_group_then_each_topic() -> None:
    body = {
        "group_id": "g",
        "topics": [{"name": "ok", "partitions": [{"partition_index": 0}]}],
    }
    admitted, finish = guard(ApiKey.OFFSET_COMMIT, gate(allow(T, "ok", Operation.READ)), body, 7)
    assert admitted is None
    part = finish(None)["topics"][0]["partitions"][0]
    assert part == {"partition_index": 0, "error_code": E.GROUP_AUTHORIZATION_FAILED}
    both = gate(allow(T, "ok", Operation.READ), allow(G, "g", Operation.READ))
    admitted, _ = guard(ApiKey.OFFSET_COMMIT, both, body, 7)
    assert admitted is body


def test_offset_fetch_group_denial_by_version_and_hidden_topics() -> None:
    body = {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1]}]}
    _, finish = guard(ApiKey.OFFSET_FETCH, gate(), body, 1)
    parts = finish(None)["topics"][0]["partitions"]
    assert [p["error_code"] for p in parts] == [E.GROUP_AUTHORIZATION_FAILED] * 2
    _, finish = guard(ApiKey.OFFSET_FETCH, gate(), body, 5)
    assert finish(None) == {"error_code": E.GROUP_AUTHORIZATION_FAILED, "topics": []}
    g = gate(allow(G, "g", Operation.DESCRIBE), allow(T, "seen", Operation.READ))
    admitted, finish = guard(ApiKey.OFFSET_FETCH, g, {"group_id": "g", "topics": None}, 5)
    answer = finish({"topics": [{"name": "seen"}, {"name": "hidden"}], "error_code": 0})
    assert admitted["topics"] is None and [t["name"] for t in answer["topics"]] == ["seen"]
    assert g._access.denials == {}


def test_find_coordinator_of_a_group_or_a_transaction() -> None:
    _, finish = guard(ApiKey.FIND_COORDINATOR, gate(), {"key": "g", "key_type": 0}, 2)
    assert finish(None)["error_code"] == E.GROUP_AUTHORIZATION_FAILED
    _, finish = guard(ApiKey.FIND_COORDINATOR, gate(), {"key": "tx", "key_type": 1}, 2)
    denied = finish(None)
    assert denied["error_code"] == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert denied["node_id"] == -1
    admitted, _ = guard(
        ApiKey.FIND_COORDINATOR, gate(allow(G, "g", Operation.READ)), {"key": "g"}, 0
    )
    assert admitted == {"key": "g"}


def test_group_membership_needs_read_on_the_group() -> None:
    for key in (ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT, ApiKey.SYNC_GROUP, ApiKey.LEAVE_GROUP):
        admitted, finish = guard(key, gate(), {"group_id": "g"})
        assert admitted is None and finish(None) == {"error_code": E.GROUP_AUTHORIZATION_FAILED}
        admitted, _ = guard(key, gate(allow(G, "g", Operation.READ)), {"group_id": "g"})
        assert admitted == {"group_id": "g"}


def test_describe_and_delete_groups_answer_each_group() -> None:
    g = gate(allow(G, "a", Operation.DESCRIBE), allow(G, "a", Operation.DELETE))
    admitted, finish = guard(ApiKey.DESCRIBE_GROUPS, g, {"groups": ["a", "b"]})
    assert admitted == {"groups": ["a"]}
    assert finish({"groups": [{"group_id": "a"}]})["groups"][1] == {
        "group_id": "b",
        "error_code": E.GROUP_AUTHORIZATION_FAILED,
    }
    admitted, finish = guard(ApiKey.DELETE_GROUPS, g, {"groups_names": ["b"]})
    assert admitted is None
    assert finish(None)["results"] == [
        {"group_id": "b", "error_code": E.GROUP_AUTHORIZATION_FAILED}
    ]


def test_list_groups_shows_what_may_be_described_unless_the_cluster_may_be() -> None:
    listing = {"groups": [{"group_id": "a"}, {"group_id": "b"}]}
    _, finish = guard(ApiKey.LIST_GROUPS, gate(allow(G, "b", Operation.READ)), {})
    assert finish({"groups": list(listing["groups"])})["groups"] == [{"group_id": "b"}]
    _, finish = guard(ApiKey.LIST_GROUPS, gate(allow(C, "kafka-cluster", Operation.DESCRIBE)), {})
    assert finish(dict(listing)) == listing


def test_create_topics_by_cluster_or_by_topic() -> None:
    body = {"topics": [{"name": "a"}, {"name": "b"}]}
    admitted, _ = guard(
        ApiKey.CREATE_TOPICS, gate(allow(C, "kafka-cluster", Operation.CREATE)), body
    )
    assert admitted is body
    admitted, finish = guard(ApiKey.CREATE_TOPICS, gate(allow(T, "a", Operation.CREATE)), body)
    assert admitted == {"topics": [{"name": "a"}]}
    [denied] = finish({"topics": []})["topics"]
    assert denied["name"] == "b" and denied["error_code"] == E.TOPIC_AUTHORIZATION_FAILED
    assert "CREATE" in denied["error_message"]


def test_delete_topics_names_are_plain_strings() -> None:
    admitted, finish = guard(
        ApiKey.DELETE_TOPICS, gate(allow(T, "a", Operation.DELETE)), {"topic_names": ["a", "b"]}
    )
    assert admitted == {"topic_names": ["a"]}
    assert finish({"responses": []})["responses"] == [
        {"name": "b", "error_code": E.TOPIC_AUTHORIZATION_FAILED}
    ]


def test_configs_of_a_topic_and_of_the_broker() -> None:
    body = {
        "resources": [
            {"resource_type": 2, "resource_name": "t"},
            {"resource_type": 4, "resource_name": "0"},
        ]
    }
    g = gate(allow(T, "t", Operation.ALTER_CONFIGS))
    admitted, finish = guard(ApiKey.DESCRIBE_CONFIGS, g, body)
    assert admitted["resources"] == [{"resource_type": 2, "resource_name": "t"}]
    [broker] = finish({"results": []})["results"]
    assert broker["error_code"] == E.CLUSTER_AUTHORIZATION_FAILED and broker["resource_name"] == "0"
    admitted, _ = guard(ApiKey.ALTER_CONFIGS, g, {"resources": body["resources"][:1]})
    assert admitted["resources"] == body["resources"][:1]


def test_init_producer_id_idempotent_and_transactional() -> None:
    _, finish = guard(ApiKey.INIT_PRODUCER_ID, gate(), {"transactional_id": None})
    assert finish(None)["error_code"] == E.CLUSTER_AUTHORIZATION_FAILED
    admitted, _ = guard(
        ApiKey.INIT_PRODUCER_ID, gate(allow(T, "any", Operation.WRITE)), {"transactional_id": None}
    )
    assert admitted is not None
    admitted, _ = guard(
        ApiKey.INIT_PRODUCER_ID,
        gate(allow(C, "kafka-cluster", Operation.IDEMPOTENT_WRITE)),
        {"transactional_id": None},
    )
    assert admitted is not None
    _, finish = guard(
        ApiKey.INIT_PRODUCER_ID, gate(allow(T, "any", Operation.WRITE)), {"transactional_id": "x"}
    )
    assert finish(None)["error_code"] == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    admitted, _ = guard(
        ApiKey.INIT_PRODUCER_ID, gate(allow(X, "x", Operation.WRITE)), {"transactional_id": "x"}
    )
    assert admitted is not None


def test_acl_changes_need_alter_on_the_cluster() -> None:
    body = {"creations": [{}, {}]}
    admitted, finish = guard(
        ApiKey.CREATE_ACLS, gate(allow(C, "kafka-cluster", Operation.DESCRIBE)), body
    )
    assert admitted is None
    assert [r["error_code"] for r in finish(None)["results"]] == [
        E.CLUSTER_AUTHORIZATION_FAILED
    ] * 2
    _, finish = guard(ApiKey.DELETE_ACLS, gate(), {"filters": [{}]})
    assert finish(None)["filter_results"][0]["matching_acls"] == []
    admitted, _ = guard(ApiKey.DESCRIBE_ACLS, gate(allow(C, "kafka-cluster", Operation.ALTER)), {})
    assert admitted == {}


def test_the_cluster_wide_reads_need_describe_on_the_cluster() -> None:
    for key, field in ((ApiKey.DESCRIBE_CLUSTER, "brokers"), (ApiKey.DESCRIBE_LOG_DIRS, "results")):
        admitted, finish = guard(key, gate(), {})
        denied = finish(None)
        assert admitted is None and denied["error_code"] == E.CLUSTER_AUTHORIZATION_FAILED
        assert denied[field] == []


def test_delete_records_and_offset_delete_need_delete() -> None:
    body = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "offset": 5}]}]}
    _, finish = guard(ApiKey.DELETE_RECORDS, gate(allow(T, "t", Operation.READ)), body)
    part = finish(None)["topics"][0]["partitions"][0]
    assert part == {
        "partition_index": 0,
        "error_code": E.TOPIC_AUTHORIZATION_FAILED,
        "low_watermark": -1,
    }
    od = {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]}
    _, finish = guard(ApiKey.OFFSET_DELETE, gate(allow(T, "t", Operation.READ)), od)
    assert finish(None) == {"error_code": E.GROUP_AUTHORIZATION_FAILED, "topics": []}
    admitted, _ = guard(
        ApiKey.OFFSET_DELETE,
        gate(allow(T, "t", Operation.READ), allow(G, "g", Operation.DELETE)),
        od,
    )
    assert admitted is od


def test_transactional_requests_need_write_on_their_transactional_id() -> None:
    """Kafka's KafkaApis: WRITE on the TRANSACTIONAL_ID for AddPartitionsToTxn (then WRITE
    on each topic: a denied one fails the request, the rest OPERATION_NOT_ATTEMPTED),
    AddOffsetsToTxn (then READ on the group), EndTxn and TxnOffsetCommit (then READ on
    the group and on each topic)."""
    add = {
        "transactional_id": "tx",
        "producer_id": 1,
        "producer_epoch": 0,
        "topics": [{"name": "ok", "partitions": [0]}, {"name": "no", "partitions": [1]}],
    }
    admitted, finish = guard(ApiKey.ADD_PARTITIONS_TO_TXN, gate(), add)
    assert admitted is None
    codes = {r["name"]: r["results"][0]["error_code"] for r in finish(None)["results"]}
    assert codes == {
        "ok": E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        "no": E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
    writer = gate(allow(X, "tx", Operation.WRITE), allow(T, "ok", Operation.WRITE))
    admitted, finish = guard(ApiKey.ADD_PARTITIONS_TO_TXN, writer, add)
    codes = {r["name"]: r["results"][0]["error_code"] for r in finish(None)["results"]}
    assert admitted is None
    assert codes == {"ok": E.OPERATION_NOT_ATTEMPTED, "no": E.TOPIC_AUTHORIZATION_FAILED}
    only_ok = {**add, "topics": add["topics"][:1]}
    assert guard(ApiKey.ADD_PARTITIONS_TO_TXN, writer, only_ok)[0] is only_ok

    offsets = {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0, "group_id": "g"}
    admitted, finish = guard(ApiKey.ADD_OFFSETS_TO_TXN, writer, offsets)
    assert admitted is None and finish(None)["error_code"] == E.GROUP_AUTHORIZATION_FAILED
    reader = gate(allow(X, "tx", Operation.WRITE), allow(G, "g", Operation.READ))
    assert guard(ApiKey.ADD_OFFSETS_TO_TXN, reader, offsets)[0] is offsets

    end = {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0, "committed": True}
    admitted, finish = guard(ApiKey.END_TXN, gate(), end)
    assert admitted is None
    assert finish(None)["error_code"] == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert guard(ApiKey.END_TXN, reader, end)[0] is end

    commit = {
        "transactional_id": "tx",
        "group_id": "g",
        "producer_id": 1,
        "producer_epoch": 0,
        "topics": [{"name": "ok", "partitions": [{"partition_index": 0}]}],
    }
    admitted, finish = guard(ApiKey.TXN_OFFSET_COMMIT, writer, commit)
    assert admitted is None
    part = finish(None)["topics"][0]["partitions"][0]
    assert part == {"partition_index": 0, "error_code": E.GROUP_AUTHORIZATION_FAILED}
    admitted, finish = guard(ApiKey.TXN_OFFSET_COMMIT, reader, commit)
    assert admitted is None
    part = finish(None)["topics"][0]["partitions"][0]
    assert part == {"partition_index": 0, "error_code": E.TOPIC_AUTHORIZATION_FAILED}
    everything = gate(
        allow(X, "tx", Operation.WRITE),
        allow(G, "g", Operation.READ),
        allow(T, "ok", Operation.READ),
    )
    assert guard(ApiKey.TXN_OFFSET_COMMIT, everything, commit)[0] is commit


def test_transaction_views_need_describe_on_each_transactional_id() -> None:
    body = {"transactional_ids": ["seen", "hidden"]}
    g = gate(allow(X, "seen", Operation.DESCRIBE))
    admitted, finish = guard(ApiKey.DESCRIBE_TRANSACTIONS, g, body)
    assert admitted == {"transactional_ids": ["seen"]}
    answer = finish(
        {
            "throttle_time_ms": 0,
            "transaction_states": [
                {"transactional_id": "seen", "topics": [{"topic": "t", "partitions": [0]}]}
            ],
        }
    )
    states = {s["transactional_id"]: s for s in answer["transaction_states"]}
    assert states["seen"]["topics"] == []  # no DESCRIBE on topic t
    assert states["hidden"]["error_code"] == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    admitted, finish = guard(ApiKey.LIST_TRANSACTIONS, g, {})
    listed = finish(
        {"transaction_states": [{"transactional_id": "seen"}, {"transactional_id": "hidden"}]}
    )
    assert listed["transaction_states"] == [{"transactional_id": "seen"}]
