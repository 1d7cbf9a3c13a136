"""The native transaction ops (docs/protocol.md 7.15) over TCP with the client library:
ListTransactions, DescribeTransaction, AbortTransaction and DescribeStableOffsets on
transactions a real confluent-kafka transactional producer left open, committed or
aborted; and each op refused, or its listing filtered, under ACLs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import threads

from rustka.errors import InvalidRequest, InvalidTxnState, NotAuthorized, TransactionalIdNotFound
from rustka.native import codec as p
from rustka.record.batch import parse_header
from rustka.record.control import ABORT, marker_type
from rustka.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from rustka.security.acl_store import ACL_FILE, save_acls
from rustka.storage.txn_log import TxnState
from tests.conftest import RunningBroker, start_broker, within
from tests.kafka.test_transactions_clients import stored_batches, transactional_producer

ANON = "User:ANONYMOUS"


def open_one_commit_another(bootstrap: str, topic: str) -> Any:
    """ "t-done" commits one record on partition 0; "t-open" writes two records, one on
    each partition, and leaves its transaction open. Returns the open producer."""
    done = transactional_producer(bootstrap, "t-done")
    done.begin_transaction()
    done.produce(topic, value=b"committed", partition=0)
    done.commit_transaction(20)
    left = transactional_producer(bootstrap, "t-open")
    left.begin_transaction()
    left.produce(topic, value=b"open-0", partition=0)
    left.produce(topic, value=b"open-1", partition=1)
    left.flush(20)
    return left


async def opened(running: RunningBroker, topic: str = "txn") -> Any:
    await within(running.broker.create_topic(topic, 2))
    producer = await within(
        threads.deferToThread(open_one_commit_another, running.address, topic), 90
    )
    await within(running.broker.transactions.settled("t-done"))
    return producer


@pytest_twisted.ensureDeferred
async def test_list_describe_and_stable_offsets_show_an_open_transaction(
    broker: RunningBroker,
) -> None:
    await opened(broker)
    core = broker.broker
    meta = core.transactions.describe("t-open")
    assert meta is not None
    client = await broker.client()
    try:
        listed = await within(client.list_transactions())
        assert [(t.transactional_id, t.state) for t in listed] == [
            ("t-done", "CompleteCommit"),
            ("t-open", "Ongoing"),
        ]
        ongoing = await within(client.list_transactions(["Ongoing"]))
        assert ongoing == [
            p.ListedTransaction(
                "t-open", meta.producer_id, meta.producer_epoch, "Ongoing", 60_000, meta.start_ms
            )
        ]
        by_pid = await within(client.list_transactions((), [meta.producer_id]))
        assert [t.transactional_id for t in by_pid] == ["t-open"]
        assert await within(client.list_transactions(["CompleteAbort"])) == []
        with pytest.raises(InvalidRequest, match="unknown transaction state 'Open'"):
            await within(client.list_transactions(["Open"]))

        described = await within(client.describe_transaction("t-open"))
        assert described.state == "Ongoing" and described.producer_id == meta.producer_id
        assert described.timeout_ms == 60_000 and described.start_ms == meta.start_ms > 0
        assert described.partitions == (p.TxnPartition("txn", 0), p.TxnPartition("txn", 1))
        assert described.groups == ()
        done = await within(client.describe_transaction("t-done"))
        assert done.state == "CompleteCommit" and done.partitions == ()
        with pytest.raises(TransactionalIdNotFound, match="no transactional id 'nosuch'"):
            await within(client.describe_transaction("nosuch"))

        [stable] = await within(client.describe_stable_offsets(["txn"]))
        p0, p1 = stable.partitions
        # Partition 0: the committed record and its marker (0, 1), then the open one at 2.
        assert (p0.last_stable_offset, p0.high_watermark) == (2, 3)
        assert p0.open == (p.OpenTransaction(meta.producer_id, meta.producer_epoch, 2),)
        assert (p1.last_stable_offset, p1.high_watermark) == (0, 1)
        assert p1.open == (p.OpenTransaction(meta.producer_id, meta.producer_epoch, 0),)
        everything = await within(client.describe_stable_offsets())
        assert [t.name for t in everything] == ["txn"]
    finally:
        await client.close()


@pytest_twisted.ensureDeferred
async def test_abort_ends_the_open_transaction_and_says_what_it_aborted(
    broker: RunningBroker,
) -> None:
    await opened(broker)
    core = broker.broker
    before = core.transactions.describe("t-open")
    assert before is not None
    client = await broker.client()
    try:
        aborted = await within(client.abort_transaction("t-open"))
        assert aborted == p.TransactionAborted(
            "t-open",
            before.producer_id,
            before.producer_epoch + 1,
            "CompleteAbort",
            (p.TxnPartition("txn", 0), p.TxnPartition("txn", 1)),
        )
        assert core.transactions.outcomes.aborted == 1
        meta = core.transactions.describe("t-open")
        assert meta is not None and meta.state == TxnState.COMPLETE_ABORT
        # Both partitions got an abort marker of the bumped epoch: the producer is fenced.
        for index in (0, 1):
            plog = core.partition("txn", index)
            assert plog.last_stable_offset == plog.end_offset
            last = stored_batches(plog)[-1][3]
            assert marker_type(last) == ABORT
            assert parse_header(last).producer_epoch == before.producer_epoch + 1
        [stable] = await within(client.describe_stable_offsets(["txn"]))
        assert [(s.last_stable_offset, s.high_watermark, s.open) for s in stable.partitions] == [
            (4, 4, ()),
            (2, 2, ()),
        ]
        with pytest.raises(InvalidTxnState, match="'t-open' has no open transaction"):
            await within(client.abort_transaction("t-open"))
        with pytest.raises(InvalidTxnState, match="CompleteCommit"):
            await within(client.abort_transaction("t-done"))
        with pytest.raises(TransactionalIdNotFound, match="'nosuch'"):
            await within(client.abort_transaction("nosuch"))
    finally:
        await client.close()


def allow(rtype: ResourceType, name: str, op: Operation) -> AclBinding:
    return AclBinding(rtype, name, PatternType.LITERAL, ANON, "*", op, Permission.ALLOW)


@pytest_twisted.ensureDeferred
async def test_each_transaction_op_under_acls(data_dir: Path) -> None:
    """DESCRIBE on the transactional id for list (filtered) and describe; CLUSTER_ACTION
    on the cluster or WRITE on the id for abort; DESCRIBE on the topic for the stable
    offsets (filtered when all topics are asked)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    # The Kafka producers (also User:ANONYMOUS) need their own rights to make the data.
    save_acls(
        data_dir / ACL_FILE,
        [
            allow(ResourceType.TRANSACTIONAL_ID, "t-open", Operation.WRITE),
            allow(ResourceType.TRANSACTIONAL_ID, "t-done", Operation.WRITE),
            allow(ResourceType.TOPIC, "txn", Operation.WRITE),
            allow(ResourceType.TOPIC, "txn", Operation.READ),
            allow(ResourceType.CLUSTER, "kafka-cluster", Operation.CREATE),
            allow(ResourceType.CLUSTER, "kafka-cluster", Operation.IDEMPOTENT_WRITE),
        ],
    )
    running = await start_broker(data_dir, authorizer_enabled=True)
    try:
        await opened(running)
        core = running.broker
        await within(core.create_topic("secret", 1))
        client = await running.client()
        try:
            # WRITE on an id implies DESCRIBE (Kafka's rule): both ids are listed.
            listed = await within(client.list_transactions())
            assert [t.transactional_id for t in listed] == ["t-done", "t-open"]
            assert [t.name for t in await within(client.describe_stable_offsets())] == ["txn"]
            with pytest.raises(NotAuthorized, match="DESCRIBE on topic 'secret'"):
                await within(client.describe_stable_offsets(["secret"]))
            # Take WRITE on t-open away: it leaves the listing and cannot be described
            # or aborted; with CLUSTER_ACTION on the cluster it can be aborted again.
            from rustka.security.acl import AclBindingFilter

            gone = AclBindingFilter(
                ResourceType.TRANSACTIONAL_ID, "t-open", PatternType.LITERAL, ANON
            )
            await within(core.access.delete([gone], "User:admin"))
            listed = await within(client.list_transactions())
            assert [t.transactional_id for t in listed] == ["t-done"]
            with pytest.raises(NotAuthorized, match="DESCRIBE on transactional_id 't-open'"):
                await within(client.describe_transaction("t-open"))
            with pytest.raises(
                NotAuthorized,
                match="CLUSTER_ACTION on cluster 'kafka-cluster' or WRITE on "
                "transactional_id 't-open'",
            ):
                await within(client.abort_transaction("t-open"))
            meta = core.transactions.describe("t-open")
            assert meta is not None and meta.state == TxnState.ONGOING
            # The connection is still served, and WRITE on the id allows the abort.
            done = await within(client.describe_transaction("t-done"))
            assert done.state == "CompleteCommit"
            with pytest.raises(InvalidTxnState):
                await within(client.abort_transaction("t-done"))
            await within(
                core.access.create(
                    [allow(ResourceType.CLUSTER, "kafka-cluster", Operation.CLUSTER_ACTION)],
                    "User:admin",
                )
            )
            aborted = await within(client.abort_transaction("t-open"))
            assert aborted.state == "CompleteAbort"
        finally:
            await client.close()
    finally:
        await running.stop()
