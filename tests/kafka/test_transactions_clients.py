"""Kafka transactions as real clients see them (docs/kafka.md, "Transactions").

confluent-kafka (librdkafka 2.x) transactional producers against an in-process
broker: committed records reach read_committed consumers, aborted ones do not
(yet they are stored, with the control batches, which the partition's own
reader shows); send_offsets_to_transaction in a consume-transform-produce
loop commits the group's offsets with the output and only then; a newer
producer with the same transactional id fences the older one; a transaction
left open past its timeout is aborted by the broker; a consume-transform-produce
program SIGKILLed in the middle of a transaction and started again gives each
input exactly one output; a read_committed consumer waits for offsets a
transaction has staged. aiokafka's transactional producer commits and aborts too.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import task, threads

from rustka.record.batch import parse_header
from rustka.record.control import ABORT, COMMIT, marker_type
from rustka.storage.partition_log import PartitionLog
from rustka.storage.txn_log import TxnState
from tests.conftest import within

pytestmark = pytest.mark.clients

QUICK = {"socket.timeout.ms": 10000, "message.timeout.ms": 15000}
# librdkafka compresses a batch only when that makes it smaller.
PAD = b"." * 400


def transactional_producer(bootstrap: str, tid: str, **conf: Any) -> Any:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": tid, **QUICK, "linger.ms": 5, **conf}
    )
    producer.init_transactions(20)
    return producer


def read_all(bootstrap: str, topic: str, committed: bool, partitions: int = 1) -> list[bytes]:
    """Every value a consumer of that isolation level gets up to the end it sees."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "txn-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "socket.timeout.ms": 10000,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[bytes] = []
        at_end: set[int] = set()
        polls = 0
        while len(at_end) < partitions and polls < 300:
            polls += 1
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    at_end.add(msg.partition())
                    continue
                raise AssertionError(f"consumer: {msg.error()}")
            values.append(msg.value())
        assert len(at_end) == partitions, "the consumer never reached the end"
        return values
    finally:
        consumer.close()


def stored_batches(plog: PartitionLog) -> list[tuple[int, int, int, bytes]]:
    """(base offset, attributes, producer id, bytes) of every batch the log holds."""
    out = []
    offset = plog.log_start_offset
    while offset < plog.end_offset:
        data = plog.read(offset, 1)
        header = parse_header(data)
        out.append((header.base_offset, header.attributes, header.producer_id, data[: header.size]))
        offset = header.next_offset
    return out


def commit_and_abort(bootstrap: str) -> None:
    producer = transactional_producer(bootstrap, "t-commit", **{"compression.type": "lz4"})
    producer.begin_transaction()
    for i in range(3):
        producer.produce("txn", value=b"committed-%d" % i + PAD, partition=0)
    producer.commit_transaction(20)
    producer.begin_transaction()
    for i in range(2):
        producer.produce("txn", value=b"aborted-%d" % i + PAD, partition=0)
    producer.flush(20)
    producer.abort_transaction(20)
    producer.begin_transaction()
    producer.produce("txn", value=b"committed-last" + PAD, partition=0)
    producer.commit_transaction(20)


@pytest_twisted.ensureDeferred
async def test_committed_records_are_read_and_aborted_ones_are_stored_but_dropped(
    broker: Any,
) -> None:
    core = broker.broker
    await within(core.create_topic("txn", 1))
    await within(threads.deferToThread(commit_and_abort, broker.address), 90)
    committed = await within(threads.deferToThread(read_all, broker.address, "txn", True), 90)
    committed = [v.removesuffix(PAD) for v in committed]
    assert committed == [b"committed-0", b"committed-1", b"committed-2", b"committed-last"]
    everything = await within(threads.deferToThread(read_all, broker.address, "txn", False), 90)
    assert [v.removesuffix(PAD) for v in everything] == [
        b"committed-0",
        b"committed-1",
        b"committed-2",
        b"aborted-0",
        b"aborted-1",
        b"committed-last",
    ]
    plog = core.partition("txn", 0)
    stored = stored_batches(plog)
    data = [(b, a) for b, a, _p, _d in stored if not a & 0x20]
    markers = [(b, marker_type(d)) for b, a, _p, d in stored if a & 0x20]
    # The producer's lz4 batches keep their codec and the transactional bit; each
    # transaction ends in a control batch (transactional + control) with its marker.
    assert data and all(a == 0x10 | 3 for _b, a in data)
    assert [kind for _b, kind in markers] == [COMMIT, ABORT, COMMIT]
    pids = {p for _b, _a, p, _d in stored}
    assert len(pids) == 1
    (pid,) = pids
    aborted = plog.aborted_transactions(0, plog.end_offset)
    assert [(t.producer_id, t.last_offset) for t in aborted] == [(pid, markers[1][0])]
    assert aborted[0].first_offset == 4  # after 3 records and the first marker
    assert plog.last_stable_offset == plog.end_offset == stored[-1][0] + 1
    await within(core.transactions.settled("t-commit"))
    meta = core.transactions.describe("t-commit")
    assert meta is not None and meta.state == TxnState.COMPLETE_COMMIT
    assert core.transactions.outcomes.committed == 2 and core.transactions.outcomes.aborted == 1


def transform(bootstrap: str, count: int, abort_first: bool) -> None:
    """Read ``in`` as group ``ctp``, write each value upper-cased to ``out``, and commit
    the group's offsets inside each transaction; the first one is aborted if asked."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "ctp",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "socket.timeout.ms": 10000,
        }
    )
    producer = transactional_producer(bootstrap, "t-ctp")
    try:
        consumer.subscribe(["in"])
        done = 0
        aborted = not abort_first
        polls = 0
        while done < count and polls < 400:
            polls += 1
            batch = consumer.consume(5, 0.5)
            if not batch:
                continue
            producer.begin_transaction()
            for msg in batch:
                assert not msg.error(), msg.error()
                producer.produce("out", value=msg.value().upper(), partition=0)
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 20
            )
            if not aborted:
                # Sent before the abort, so the aborted outputs are stored (an abort
                # purges what librdkafka has not sent yet).
                producer.flush(20)
                producer.abort_transaction(20)
                aborted = True
                # Back to the last committed position: the aborted input is read again.
                committed = consumer.committed(consumer.assignment(), 10)
                for tp in committed:
                    consumer.seek(tp if tp.offset >= 0 else tp.__class__(tp.topic, tp.partition, 0))
                continue
            producer.commit_transaction(20)
            done += len(batch)
        assert done == count, f"transformed {done} of {count}"
    finally:
        consumer.close()


@pytest_twisted.ensureDeferred
async def test_consume_transform_produce_commits_offsets_with_the_output(broker: Any) -> None:
    core = broker.broker
    await within(core.create_topic("in", 1))
    await within(core.create_topic("out", 1))
    from tests.kafka import real_clients as rc

    inputs = [(None, b"record-%d" % i) for i in range(12)]
    await within(threads.deferToThread(rc.confluent_produce, broker.address, "in", inputs), 60)
    await within(threads.deferToThread(transform, broker.address, 12, True), 120)
    out = await within(threads.deferToThread(read_all, broker.address, "out", True), 90)
    # Each input exactly once, although the first transaction's output was aborted.
    assert out == [b"RECORD-%d" % i for i in range(12)]
    raw = await within(threads.deferToThread(read_all, broker.address, "out", False), 90)
    assert len(raw) > 12  # the aborted outputs are stored
    await within(core.transactions.settled("t-ctp"))
    assert core.committed_offsets("ctp") == {("in", 0): 12}
    assert core.transactions.describe("t-ctp").offsets == {}  # type: ignore[union-attr]


def zombie(bootstrap: str) -> str:
    """An older producer is fenced by a newer one with its transactional id."""
    from confluent_kafka import KafkaException

    old = transactional_producer(bootstrap, "t-zombie")
    old.begin_transaction()
    old.produce("fence", value=b"zombie", partition=0)
    old.flush(20)
    new = transactional_producer(bootstrap, "t-zombie")
    new.begin_transaction()
    new.produce("fence", value=b"new", partition=0)
    new.commit_transaction(20)
    try:
        old.produce("fence", value=b"zombie-2", partition=0)
        old.commit_transaction(20)
    except KafkaException as e:
        return e.args[0].name()
    return "no error"


@pytest_twisted.ensureDeferred
async def test_a_newer_producer_fences_the_older_one(broker: Any) -> None:
    core = broker.broker
    await within(core.create_topic("fence", 1))
    error = await within(threads.deferToThread(zombie, broker.address), 90)
    assert error in ("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"), error
    values = await within(threads.deferToThread(read_all, broker.address, "fence", True), 90)
    assert values == [b"new"]
    plog = core.partition("fence", 0)
    # The zombie's open transaction was aborted by the fencing, with the new epoch.
    stored = stored_batches(plog)
    markers = [
        (parse_header(d).producer_epoch, marker_type(d)) for _b, a, _p, d in stored if a & 0x20
    ]
    assert markers == [(1, ABORT), (1, COMMIT)]
    assert core.transactions.outcomes.fenced == 1


def open_and_wait(bootstrap: str) -> Any:
    producer = transactional_producer(
        bootstrap,
        "t-timeout",
        **{"transaction.timeout.ms": 2000, "socket.timeout.ms": 1900, "message.timeout.ms": 2000},
    )
    producer.begin_transaction()
    producer.produce("slow", value=b"too-late", partition=0)
    producer.flush(20)
    return producer


def try_commit(producer: Any) -> str:
    from confluent_kafka import KafkaException

    try:
        producer.commit_transaction(20)
    except KafkaException as e:
        return e.args[0].name()
    return "committed"


@pytest_twisted.ensureDeferred
async def test_a_transaction_open_past_its_timeout_is_aborted(broker_factory: Any) -> None:
    from twisted.internet import reactor

    running = await broker_factory(transaction_abort_interval_ms=100)
    try:
        core = running.broker
        await within(core.create_topic("slow", 1))
        producer = await within(threads.deferToThread(open_and_wait, running.address), 60)
        plog = core.partition("slow", 0)
        assert plog.last_stable_offset == 0 < plog.end_offset
        for _ in range(100):
            meta = core.transactions.describe("t-timeout")
            if meta is not None and meta.state == TxnState.COMPLETE_ABORT:
                break
            await task.deferLater(reactor, 0.1, lambda: None)
        assert meta is not None and meta.state == TxnState.COMPLETE_ABORT
        assert core.transactions.outcomes.timed_out == 1
        assert plog.last_stable_offset == plog.end_offset
        assert [t.first_offset for t in plog.aborted_transactions(0, plog.end_offset)] == [0]
        outcome = await within(threads.deferToThread(try_commit, producer), 60)
        assert outcome != "committed"
        values = await within(threads.deferToThread(read_all, running.address, "slow", True), 60)
        assert values == []
    finally:
        await running.stop()


def aiokafka_transactions(bootstrap: str) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="t-aio")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait("aio", b"aio-committed", partition=0)
            await producer.begin_transaction()
            await producer.send_and_wait("aio", b"aio-aborted", partition=0)
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(run())


@pytest_twisted.ensureDeferred
async def test_aiokafka_commits_and_aborts(broker: Any) -> None:
    core = broker.broker
    await within(core.create_topic("aio", 1))
    await within(threads.deferToThread(aiokafka_transactions, broker.address), 90)
    values = await within(threads.deferToThread(read_all, broker.address, "aio", True), 60)
    assert values == [b"aio-committed"]
    plog = core.partition("aio", 0)
    kinds = [marker_type(d) for _b, a, _p, d in stored_batches(plog) if a & 0x20]
    assert kinds == [COMMIT, ABORT]


def kafka_python_views(bootstrap: str) -> tuple[Any, Any, Any]:
    """kafka-python's KIP-664 admin calls: ListTransactions (all, then Ongoing only, then
    running over an hour) and DescribeTransactions."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        every = admin.list_transactions()
        ongoing = admin.list_transactions(state_filters=["Ongoing"], duration_filter_ms=3_600_000)
        described = admin.describe_transactions(["t-open", "t-done"])
        return every, ongoing, described
    finally:
        admin.close()


@pytest_twisted.ensureDeferred
async def test_kafka_admin_clients_list_and_describe_transactions(broker: Any) -> None:
    from tests.storage.test_transactions import txn_batch

    core = broker.broker
    txn = core.transactions
    await within(core.create_topic("viewed", 2))
    pid, epoch = await within(txn.init_producer_id("t-open", 60_000))
    await within(txn.add_partitions("t-open", pid, epoch, [("viewed", 1)]))
    await within(
        core.append("viewed", 1, txn_batch(pid, 0), auto_create=False, transactional_id="t-open")
    )
    done, done_epoch = await within(txn.init_producer_id("t-done", 60_000))
    await within(txn.add_partitions("t-done", done, done_epoch, [("viewed", 0)]))
    await within(txn.end_transaction("t-done", done, done_epoch, True))
    await within(txn.settled("t-done"))
    every, ongoing, described = await within(
        threads.deferToThread(kafka_python_views, broker.address), 60
    )
    (listing,) = every.values()
    assert sorted((t.transactional_id, t.producer_id, t.state.value) for t in listing) == [
        ("t-done", done, "CompleteCommit"),
        ("t-open", pid, "Ongoing"),
    ]
    assert list(ongoing.values()) == [[]]  # open for less than an hour
    open_one = described["t-open"]
    assert open_one.state.value == "Ongoing" and open_one.producer_id == pid
    assert open_one.transaction_timeout_ms == 60_000 and open_one.transaction_start_time_ms > 0
    assert {(tp.topic, tp.partition) for tp in open_one.topic_partitions} == {("viewed", 1)}
    assert described["t-done"].state.value == "CompleteCommit"
    assert described["t-done"].topic_partitions == set()


@pytest_twisted.ensureDeferred
async def test_kcat_reads_only_committed_records(broker: Any) -> None:
    """Debian's kcat (librdkafka 2.0, read_committed by default) skips the aborted
    records and the control batches, and with isolation.level=read_uncommitted sees the
    aborted ones too; its offsets are the stored ones, markers' offsets skipped."""
    from tests.kafka import real_clients as rc

    core = broker.broker
    await within(core.create_topic("txn", 1))
    await within(threads.deferToThread(commit_and_abort, broker.address), 90)
    args = ("-b", broker.address, "-C", "-t", "txn", "-p", "0", "-o", "beginning", "-e")
    committed = await within(threads.deferToThread(rc.kcat, *args, "-f", "%o %s\\n"), 60)
    rows = [line.split(" ", 1) for line in committed.splitlines() if line]
    assert [(int(o), v.removesuffix(PAD.decode())) for o, v in rows] == [
        (0, "committed-0"),
        (1, "committed-1"),
        (2, "committed-2"),
        (7, "committed-last"),
    ]
    everything = await within(
        threads.deferToThread(
            rc.kcat, *args, "-X", "isolation.level=read_uncommitted", "-f", "%o %s\\n"
        ),
        60,
    )
    offsets = [int(line.split(" ", 1)[0]) for line in everything.splitlines() if line]
    assert offsets == [0, 1, 2, 4, 5, 7]


def open_with_offsets(bootstrap: str) -> Any:
    """A transaction left open with group ``stable-g``'s offset 7 on ``stable``-0 staged."""
    from confluent_kafka import Consumer, TopicPartition

    group = Consumer({"bootstrap.servers": bootstrap, "group.id": "stable-g"})
    producer = transactional_producer(bootstrap, "t-stable")
    producer.begin_transaction()
    producer.produce("stable", value=b"output", partition=0)
    producer.send_offsets_to_transaction(
        [TopicPartition("stable", 0, 7)], group.consumer_group_metadata(), 20
    )
    group.close()
    return producer


def committed_offset(bootstrap: str, isolation: str) -> int:
    """What a consumer of group ``stable-g`` finds committed for ``stable``-0."""
    from tests.kafka import real_clients as rc

    [offset] = rc.confluent_committed(
        bootstrap, "stable-g", "stable", **{"isolation.level": isolation}
    )
    return offset


@pytest_twisted.ensureDeferred
async def test_a_read_committed_consumer_waits_for_offsets_a_transaction_staged(
    broker: Any,
) -> None:
    """KIP-447: librdkafka's read_committed consumer asks OffsetFetch v7 for stable
    offsets. While a transaction holds an offset for its group it is answered
    UNSTABLE_OFFSET_COMMIT and asks again, so a consumer taking over a partition
    starts from the transaction's offset, not the one before it (which would read
    the transaction's input twice); read_uncommitted gets the committed one at once."""
    from tests.conftest import reactor_turns

    core = broker.broker
    await within(core.create_topic("stable", 1))
    producer = await within(threads.deferToThread(open_with_offsets, broker.address), 60)
    assert core.transactions.pending_offsets("stable-g") == {("stable", 0)}
    uncommitted = threads.deferToThread(committed_offset, broker.address, "read_uncommitted")
    assert await within(uncommitted, 60) == -1001  # nothing committed yet: OFFSET_INVALID
    offset_fetch = broker.top.kafka_factory.request_stats.of(9)
    unstable_before = offset_fetch.error_codes.get(88, 0)
    waiting = threads.deferToThread(committed_offset, broker.address, "read_committed")
    await reactor_turns(lambda: offset_fetch.error_codes.get(88, 0) >= unstable_before + 2, 30)
    assert not waiting.called, "the consumer took an offset while the transaction held one"
    await within(threads.deferToThread(producer.commit_transaction, 20), 60)
    assert await within(waiting, 60) == 7
    assert core.transactions.pending_offsets("stable-g") == set()


def test_consume_transform_produce_killed_in_a_transaction_gives_each_input_once(
    tmp_path: Path,
) -> None:
    """Issue 20's crash in the middle: tests/kafka/transform_program.py commits one
    transaction, then is SIGKILLed with the next one's output stored and its offsets
    staged. Started again with the same transactional id, it fences and aborts that
    transaction, resumes from the offsets the first one committed and finishes: a
    read_committed reader sees each input exactly once, in order, the aborted output
    is stored but skipped, and the group's offset is the input's end."""
    from tests.kafka import real_clients as rc
    from tools.twistd_process import OutputProcess, start_broker

    program = [sys.executable, str(Path(__file__).with_name("transform_program.py"))]
    inputs = [(None, b"record-%d" % i) for i in range(12)]
    with start_broker(tmp_path / "data") as daemon:
        bootstrap = f"127.0.0.1:{daemon.port}"
        env = {"BOOTSTRAP": bootstrap, "END": "12"}
        rc.confluent_produce(bootstrap, "ctp-in", inputs)
        with OutputProcess(program, env={**env, "STOP_AFTER": "1"}) as first:
            first.wait_for("in the middle of a transaction", 90)
            first.kill()
        stored = read_all(bootstrap, "ctp-out", False)
        assert len(stored) >= 3  # the first transaction's output and the killed one's
        with OutputProcess(program, env=env) as second:
            second.wait_for("done after", 120)
            assert second.proc.wait(timeout=60) == 0, "".join(second.output)
        assert read_all(bootstrap, "ctp-out", True) == [b"RECORD-%d" % i for i in range(12)]
        assert len(read_all(bootstrap, "ctp-out", False)) > 12  # the aborted output stays
        assert rc.confluent_committed(bootstrap, "ctp-kill", "ctp-in") == [12]
