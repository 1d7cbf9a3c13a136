"""The transaction APIs over a real socket at the versions newer clients send.

A real broker core and a real Kafka listener on 127.0.0.1 port 0; requests are
encoded by `rustka.kafka.messages` as a client sends them. InitProducerId v3+
(KIP-360: a producer names its id and epoch to bump its own epoch) and
TxnOffsetCommit v3 (KIP-447: the consumer's generation and member fence the
commit) follow Kafka's TransactionCoordinator and GroupCoordinator; the
coordinator's other rules are in tests/broker/test_transactions.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_twisted

from rustka.kafka.errors import ErrorCode as E
from rustka.record.control import ABORT
from tests.broker.test_transactions import markers
from tests.conftest import RunningBroker, within
from tests.kafka.wire import call, kafka_wire

TOPIC = "orders"
GROUP = "billing"
INIT, ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_COMMIT = 22, 24, 25, 26, 28


@pytest_twisted.async_yield_fixture
async def kafka(tmp_path: Path) -> AsyncIterator[tuple[RunningBroker, Any]]:
    async with kafka_wire(tmp_path, TOPIC, client_id="w") as running_and_client:
        yield running_and_client


async def init(client: Any, version: int, tid: str | None, pid: int = -1, epoch: int = -1) -> Any:
    body = {
        "transactional_id": tid,
        "transaction_timeout_ms": 60_000,
        "producer_id": pid,
        "producer_epoch": epoch,
    }
    answer = await call(client, INIT, body, version)
    return answer["error_code"], answer["producer_id"], answer["producer_epoch"]


@pytest_twisted.ensureDeferred
async def test_init_producer_id_v3_bumps_the_named_epoch_and_fences_stale_ones(
    kafka: tuple[RunningBroker, Any],
) -> None:
    running, client = kafka
    code, pid, epoch = await init(client, 4, "a")
    assert (code, epoch) == (0, 0)
    # The current producer bumps its own epoch; a retry whose answer was lost gets the
    # same bumped epoch, not a fence.
    assert await init(client, 4, "a", pid, 0) == (0, pid, 1)
    assert await init(client, 4, "a", pid, 0) == (0, pid, 1)
    # Any other epoch, or another producer id, was fenced: PRODUCER_FENCED from v4,
    # INVALID_PRODUCER_EPOCH for v3, which predates that code.
    assert await init(client, 4, "a", pid, 7) == (E.PRODUCER_FENCED, -1, -1)
    assert await init(client, 3, "a", pid, 7) == (E.INVALID_PRODUCER_EPOCH, -1, -1)
    assert await init(client, 4, "a", pid + 1, 1) == (E.PRODUCER_FENCED, -1, -1)
    # A new producer (no id named) fences the one before; that one's bump is refused.
    assert await init(client, 4, "a") == (0, pid, 2)
    assert await init(client, 4, "a", pid, 1) == (E.PRODUCER_FENCED, -1, -1)
    # An id without an epoch (or the reverse) is a malformed request, as Kafka answers.
    assert (await init(client, 4, "a", pid, -1))[0] == E.INVALID_REQUEST
    assert (await init(client, 4, "a", -1, 2))[0] == E.INVALID_REQUEST
    # An idempotent producer asking for a bump gets a new producer id, as from Kafka.
    code, other, other_epoch = await init(client, 4, None, pid, 2)
    assert (code, other_epoch) == (0, 0) and other != pid
    assert running.broker.transactions.describe("a").producer_epoch == 2  # type: ignore[union-attr]


@pytest_twisted.ensureDeferred
async def test_init_producer_id_v3_with_a_transaction_open_aborts_it_and_fences_the_retry(
    kafka: tuple[RunningBroker, Any],
) -> None:
    """Kafka's order: the open transaction is aborted with the epoch bumped and
    CONCURRENT_TRANSACTIONS answered; the producer's retry names an epoch that is no
    longer current and no bump's, so it is fenced."""
    running, client = kafka
    _, pid, epoch = await init(client, 4, "b")
    add = {
        "transactional_id": "b",
        "producer_id": pid,
        "producer_epoch": epoch,
        "topics": [{"name": TOPIC, "partitions": [0]}],
    }
    added = await call(client, ADD_PARTITIONS, add, 3)
    assert added["results"][0]["results"] == [{"partition_index": 0, "error_code": 0}]
    assert await init(client, 4, "b", pid, epoch) == (E.CONCURRENT_TRANSACTIONS, -1, -1)
    await within(running.broker.transactions.settled("b"))
    assert markers(running.broker.partition(TOPIC, 0)) == [(0, ABORT)]
    meta = running.broker.transactions.describe("b")
    assert meta is not None and meta.producer_epoch == epoch + 1
    assert await init(client, 4, "b", pid, epoch) == (E.PRODUCER_FENCED, -1, -1)
    assert await init(client, 4, "b") == (0, pid, epoch + 2)


async def static_member(client: Any, instance: str) -> tuple[str, int]:
    """A static member of GROUP (JoinGroup v5 and SyncGroup v3): its id and generation."""
    join = {
        "group_id": GROUP,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 10_000,
        "member_id": "",
        "group_instance_id": instance,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"sub"}],
    }
    joined = await call(client, 11, join, 5)
    assert joined["error_code"] == 0, joined
    member, generation = joined["member_id"], joined["generation_id"]
    sync = {
        "group_id": GROUP,
        "generation_id": generation,
        "member_id": member,
        "group_instance_id": instance,
        "assignments": [{"member_id": member, "assignment": b"all"}],
    }
    assert (await call(client, 14, sync, 3))["error_code"] == 0
    return member, generation


@pytest_twisted.ensureDeferred
async def test_txn_offset_commit_v3_is_fenced_by_the_groups_generation_and_member(
    kafka: tuple[RunningBroker, Any],
) -> None:
    """KIP-447: a producer whose consumer was rebalanced away (an old generation, a member
    the group no longer has, a static instance taken over) cannot commit offsets in its
    transaction, as Kafka's GroupCoordinator fences transactional commits; the current
    member can, and v2 (no member named) still can. Only accepted offsets are committed."""
    running, client = kafka
    member, generation = await static_member(client, "i")
    _, pid, epoch = await init(client, 4, "c")
    ids = {"transactional_id": "c", "producer_id": pid, "producer_epoch": epoch}
    added = await call(client, ADD_OFFSETS, {**ids, "group_id": GROUP}, 3)
    assert added["error_code"] == 0

    async def commit(
        version: int, partition: int, generation_id: int, member_id: str, instance: str | None
    ) -> int:
        body = {
            **ids,
            "group_id": GROUP,
            "generation_id": generation_id,
            "member_id": member_id,
            "group_instance_id": instance,
            "topics": [
                {
                    "name": TOPIC,
                    "partitions": [
                        {
                            "partition_index": partition,
                            "committed_offset": 10 + partition,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        }
        answer = await call(client, TXN_COMMIT, body, version)
        [code] = [p["error_code"] for t in answer["topics"] for p in t["partitions"]]
        return int(code)

    assert await commit(3, 0, generation + 1, member, "i") == E.ILLEGAL_GENERATION
    assert await commit(3, 0, generation, "gone", None) == E.UNKNOWN_MEMBER_ID
    assert await commit(3, 0, generation, "gone", "i") == E.FENCED_INSTANCE_ID
    assert await commit(3, 0, -1, "", None) == 0  # names no member: accepted (v0-2's rule)
    assert await commit(3, 1, generation, member, "i") == 0
    assert await commit(2, 0, generation + 5, "gone", None) == 0  # v2 carries neither
    end = {**ids, "committed": True}
    assert (await call(client, END_TXN, end, 3))["error_code"] == 0
    await within(running.broker.transactions.settled("c"))
    # The fenced commits staged nothing: offset 10 of partition 0 is the accepted one's.
    assert running.broker.committed_offsets(GROUP) == {(TOPIC, 0): 10, (TOPIC, 1): 11}


@pytest_twisted.ensureDeferred
async def test_txn_offset_commit_v3_to_a_group_without_members(
    kafka: tuple[RunningBroker, Any],
) -> None:
    """Generation -1 commits to an empty or unknown group (a producer that does not use
    group management); naming a member of a group that has none is UNKNOWN_MEMBER_ID."""
    running, client = kafka
    _, pid, epoch = await init(client, 4, "d")
    ids = {"transactional_id": "d", "producer_id": pid, "producer_epoch": epoch}
    assert (await call(client, ADD_OFFSETS, {**ids, "group_id": "solo"}, 3))["error_code"] == 0
    part = {"partition_index": 0, "committed_offset": 3, "committed_metadata": None}
    body = {**ids, "group_id": "solo", "topics": [{"name": TOPIC, "partitions": [part]}]}
    named = {**body, "generation_id": 1, "member_id": "m"}
    answer = await call(client, TXN_COMMIT, named, 3)
    assert answer["topics"][0]["partitions"][0]["error_code"] == E.UNKNOWN_MEMBER_ID
    answer = await call(client, TXN_COMMIT, body, 3)
    assert answer["topics"][0]["partitions"][0]["error_code"] == 0
    assert (await call(client, END_TXN, {**ids, "committed": True}, 3))["error_code"] == 0
    await within(running.broker.transactions.settled("d"))
    assert running.broker.committed_offsets("solo") == {(TOPIC, 0): 3}
