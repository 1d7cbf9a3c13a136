"""``rustka transactions`` (rustka/ops/cli/transactions.py) and the transaction columns
of ``rustka topics describe``, against transactions a real confluent-kafka
transactional producer leaves open, commits and has aborted under it."""

from __future__ import annotations

import json
from typing import Any

import pytest_twisted
from twisted.internet import task, threads

from rustka.storage.txn_log import TxnState
from tests.conftest import RunningBroker, within
from tests.kafka.test_transactions_clients import read_all, transactional_producer, try_commit
from tests.ops.cli import cli, ok


def commit_one_and_leave_one_open(bootstrap: str) -> Any:
    done = transactional_producer(bootstrap, "t-done")
    done.begin_transaction()
    done.produce("pay", value=b"committed-0", partition=0)
    done.commit_transaction(20)
    left = transactional_producer(bootstrap, "t-open")
    left.begin_transaction()
    left.produce("pay", value=b"open-0", partition=0)
    left.produce("pay", value=b"open-1", partition=0)
    left.flush(20)
    return left


def commit_after(bootstrap: str) -> None:
    later = transactional_producer(bootstrap, "t-after")
    later.begin_transaction()
    later.produce("pay", value=b"committed-1", partition=0)
    later.commit_transaction(20)


@pytest_twisted.ensureDeferred
async def test_list_describe_and_abort_an_open_transaction(broker: RunningBroker) -> None:
    """list shows the open transaction, describe its partition, topics describe the last
    stable offset it holds back; abort ends it: a read_committed consumer gets past it
    without its records, and the producer's commit then fails."""
    core = broker.broker
    await within(core.create_topic("pay", 1))
    producer = await within(
        threads.deferToThread(commit_one_and_leave_one_open, broker.address), 90
    )
    await within(core.transactions.settled("t-done"))
    meta = core.transactions.describe("t-open")
    assert meta is not None and meta.state == TxnState.ONGOING
    pid, epoch = meta.producer_id, meta.producer_epoch

    table = (await ok(broker, "transactions", "list")).splitlines()
    assert table[0] == "TRANSACTIONAL-ID\tPRODUCER-ID\tEPOCH\tSTATE\tTIMEOUT-MS\tOPEN-MS"
    assert [row.split("\t")[:5] for row in table[1:]] == [
        [
            "t-done",
            str(core.transactions.describe("t-done").producer_id),
            "0",
            "CompleteCommit",
            "60000",
        ],
        ["t-open", str(pid), str(epoch), "Ongoing", "60000"],
    ]
    assert table[1].endswith("\t-") and int(table[2].split("\t")[5]) >= 0
    ongoing = json.loads(await ok(broker, "transactions", "list", "--state", "Ongoing", "--json"))
    assert [(t["transactional_id"], t["producer_id"], t["state"]) for t in ongoing] == [
        ("t-open", pid, "Ongoing")
    ]
    by_pid = json.loads(
        await ok(broker, "transactions", "list", "--producer-id", str(pid), "--json")
    )
    assert [t["transactional_id"] for t in by_pid] == ["t-open"]
    typo = await cli(broker, "transactions", "list", "--state", "Open")
    assert typo.returncode == 1 and "unknown transaction state 'Open'" in typo.stderr

    described = json.loads(await ok(broker, "transactions", "describe", "t-open", "--json"))
    assert described["state"] == "Ongoing" and described["partitions"] == ["pay-0"]
    assert described["producer_id"] == pid and described["timeout_ms"] == 60_000
    assert described["started"].startswith("20") and described["groups"] == []
    text = (await ok(broker, "transactions", "describe", "t-open")).splitlines()
    assert text[0].split("\t")[-2:] == ["PARTITIONS", "GROUPS"]
    assert text[1].split("\t")[-2:] == ["pay-0", "-"]

    # The committed record (0) and its marker (1), then the open transaction from 2.
    topic = json.loads(await ok(broker, "topics", "describe", "pay", "--json"))
    [part] = topic[0]["partitions"]
    assert (part["end"], part["last_stable"]) == (4, 2)
    assert part["open_transactions"] == [
        {"producer_id": pid, "producer_epoch": epoch, "first_offset": 2}
    ]
    row = (await ok(broker, "topics", "describe", "pay")).splitlines()[1].split("\t")
    assert row[3:6] == ["4", "2", f"1 (producer {pid})"]
    hanging = await cli(broker, "transactions", "find-hanging")
    assert (hanging.returncode, hanging.stdout) == (0, "(no hanging transactions)\n")

    aborted = await ok(broker, "transactions", "abort", "t-open")
    assert aborted == (
        f"aborted the transaction of 't-open' (producer {pid}, fenced at epoch {epoch + 1})"
        " on pay-0\n"
    )
    assert core.transactions.describe("t-open").state == TxnState.COMPLETE_ABORT
    topic = json.loads(await ok(broker, "topics", "describe", "pay", "--json"))
    [part] = topic[0]["partitions"]
    assert (part["end"], part["last_stable"], part["open_transactions"]) == (5, 5, [])

    # A transaction committed after the aborted one: read_committed reads past the
    # aborted records to it; they are stored, and read_uncommitted shows them.
    await within(threads.deferToThread(commit_after, broker.address), 90)
    committed = await within(threads.deferToThread(read_all, broker.address, "pay", True), 90)
    assert committed == [b"committed-0", b"committed-1"]
    everything = await within(threads.deferToThread(read_all, broker.address, "pay", False), 90)
    assert everything == [b"committed-0", b"open-0", b"open-1", b"committed-1"]
    outcome = await within(threads.deferToThread(try_commit, producer), 60)
    assert outcome in ("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"), outcome

    again = await cli(broker, "transactions", "abort", "t-open")
    assert again.returncode == 1
    assert "'t-open' has no open transaction (CompleteAbort)" in again.stderr
    for action in ("abort", "describe"):
        unknown = await cli(broker, "transactions", action, "nosuch")
        assert unknown.returncode == 1 and "no transactional id 'nosuch'" in unknown.stderr
    usage = await cli(broker, "transactions", "describe")
    assert usage.returncode == 2 and "needs a transactional ID" in usage.stderr
    usage = await cli(broker, "transactions", "list", "t-open")
    assert usage.returncode == 2 and "takes no ID" in usage.stderr


def open_with_short_timeout(bootstrap: str) -> Any:
    producer = transactional_producer(
        bootstrap,
        "t-slow",
        **{"transaction.timeout.ms": 2000, "socket.timeout.ms": 1900, "message.timeout.ms": 2000},
    )
    producer.begin_transaction()
    producer.produce("slow", value=b"stuck", partition=0)
    producer.flush(20)
    return producer


@pytest_twisted.ensureDeferred
async def test_find_hanging_reports_a_transaction_open_past_its_timeout(
    broker_factory: Any,
) -> None:
    """With the coordinator's timeout pass an hour away, a transaction outlives its
    2-second timeout; find-hanging names it (exit status 1) until it is aborted."""
    from twisted.internet import reactor

    running = await broker_factory(transaction_abort_interval_ms=3_600_000)
    try:
        core = running.broker
        await within(core.create_topic("slow", 1))
        await within(threads.deferToThread(open_with_short_timeout, running.address), 60)
        meta = core.transactions.describe("t-slow")
        assert meta is not None and meta.state == TxnState.ONGOING
        # Waiting for the timeout to pass is what is tested, so the wait is on the clock.
        for _ in range(100):
            if int(reactor.seconds() * 1000) - meta.start_ms > meta.timeout_ms + 100:
                break
            await task.deferLater(reactor, 0.1, lambda: None)
        found = await cli(running, "transactions", "find-hanging", "--json")
        assert found.returncode == 1, found.stderr
        [hanging] = json.loads(found.stdout)
        assert hanging["transactional_id"] == "t-slow"
        assert hanging["partitions"] == ["slow-0"]
        assert hanging["reason"].endswith("past its timeout of 2000 ms")
        text = await cli(running, "transactions", "find-hanging")
        assert text.returncode == 1
        assert text.stdout.splitlines()[1].startswith(f"t-slow\t{meta.producer_id}\t")
        await ok(running, "transactions", "abort", "t-slow")
        cleared = await cli(running, "transactions", "find-hanging")
        assert (cleared.returncode, cleared.stdout) == (0, "(no hanging transactions)\n")
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_find_hanging_reports_a_partition_open_for_no_transactional_id(
    broker_factory: Any,
) -> None:
    """A transactional batch the coordinator never saw (written to the partition's log
    beneath it, as a lost transaction log would leave it) holds the last stable offset
    back with no id to abort: find-hanging names the partition and producer; the next
    start aborts it (the log is the truth), and nothing hangs any more."""
    from tests.storage.test_transactions import txn_batch

    running = await broker_factory()
    try:
        core = running.broker
        await within(core.create_topic("orphan", 1))
        plog = core.partition("orphan", 0)
        await within(core.run(plog.append, txn_batch(999_999, 0)))
        found = await cli(running, "transactions", "find-hanging", "--json")
        assert found.returncode == 1, found.stderr
        [hanging] = json.loads(found.stdout)
        assert (hanging["transactional_id"], hanging["producer_id"]) == (None, 999_999)
        assert hanging["partitions"] == ["orphan-0"]
        assert (
            "from offset 0 (last stable offset 0) with no open transactional id"
            in (hanging["reason"])
        )
        row = (await ok(running, "topics", "describe", "orphan")).splitlines()[1].split("\t")
        assert row[3:6] == ["2", "0", "1 (producer 999999)"]
    finally:
        await running.stop()
    running = await broker_factory()
    try:
        cleared = await cli(running, "transactions", "find-hanging")
        assert (cleared.returncode, cleared.stdout) == (0, "(no hanging transactions)\n")
        plog = running.broker.partition("orphan", 0)
        assert plog.last_stable_offset == plog.end_offset == 3
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_refusals_under_acls_are_one_line(broker_factory: Any) -> None:
    """With ACLs on and none granted, list shows nothing (it is filtered, as Kafka's
    ListTransactions is), and describe and abort are refused before the id is looked
    up, so a refusal does not tell whether the id exists."""
    running = await broker_factory(authorizer_enabled=True)
    try:
        assert await ok(running, "transactions", "list") == "(no transactional ids)\n"
        described = await cli(running, "transactions", "describe", "t-any")
        assert described.returncode == 1 and described.stdout == ""
        assert described.stderr == (
            "rustka: the broker answered: not authorized: no ACL allows DESCRIBE on "
            "transactional_id 't-any'\n"
        )
        aborted = await cli(running, "transactions", "abort", "t-any")
        assert aborted.returncode == 1 and aborted.stderr.count("\n") == 1
        assert "CLUSTER_ACTION on cluster 'kafka-cluster' or WRITE on transactional_id" in (
            aborted.stderr
        )
        hanging = await cli(running, "transactions", "find-hanging")
        assert (hanging.returncode, hanging.stdout) == (0, "(no hanging transactions)\n")
    finally:
        await running.stop()
