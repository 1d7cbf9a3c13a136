"""The transaction coordinator in a real broker: Kafka's rules, its durable log, restarts
with a transaction open, and a decision the log left prepared rolled forward at startup."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import task

from rustka.errors import (
    InvalidBatch,
    InvalidProducerIdMapping,
    InvalidTransactionTimeout,
    InvalidTxnState,
    ProducerFenced,
)
from rustka.record.batch import parse_header
from rustka.record.control import ABORT, COMMIT, marker_type
from rustka.storage.log_config import LogConfig
from rustka.storage.txn_log import TRANSACTIONS_DIR, TransactionLog, TxnState
from tests.conftest import start_broker, within
from tests.storage.test_transactions import txn_batch


def markers(plog: Any) -> list[tuple[int, int | None]]:
    out = []
    offset = plog.log_start_offset
    while offset < plog.end_offset:
        data = plog.read(offset, 1)
        header = parse_header(data)
        if header.attributes & 0x20:
            out.append((header.base_offset, marker_type(data)))
        offset = header.next_offset
    return out


async def failure_of(d: Any) -> BaseException:
    try:
        await within(d)
    except Exception as e:
        return e
    raise AssertionError("expected a failure")


@pytest_twisted.ensureDeferred
async def test_kafkas_rules_for_each_request(data_dir: Path) -> None:
    running = await start_broker(data_dir)
    try:
        core = running.broker
        txn = core.transactions
        await within(core.create_topic("t", 2))
        assert isinstance(
            await failure_of(txn.init_producer_id("a", 10_000_000)), InvalidTransactionTimeout
        )
        pid, epoch = await within(txn.init_producer_id("a", 60_000))
        assert epoch == 0
        # A batch before AddPartitionsToTxn, without the id, with another epoch.
        batch = txn_batch(pid, 0, epoch=epoch)
        assert isinstance(
            await failure_of(core.append("t", 0, batch, auto_create=False, transactional_id="a")),
            InvalidTxnState,
        )
        assert isinstance(
            await failure_of(core.append("t", 0, batch, auto_create=False)), InvalidBatch
        )
        await within(txn.add_partitions("a", pid, epoch, [("t", 0)]))
        assert txn.describe("a").state == TxnState.ONGOING  # type: ignore[union-attr]
        assert isinstance(
            await failure_of(txn.add_partitions("a", pid + 1, epoch, [("t", 1)])),
            InvalidProducerIdMapping,
        )
        assert isinstance(
            await failure_of(txn.add_partitions("a", pid, epoch + 1, [("t", 1)])), ProducerFenced
        )
        assert isinstance(
            await failure_of(core.append("t", 1, batch, auto_create=False, transactional_id="a")),
            InvalidTxnState,
        )
        await within(core.append("t", 0, batch, auto_create=False, transactional_id="a"))
        plog = core.partition("t", 0)
        assert plog.last_stable_offset == 0 and plog.end_offset == 2
        # Offsets staged before AddOffsetsToTxn are refused; after it they wait for the commit.
        assert isinstance(
            await failure_of(txn.txn_offset_commit("a", pid, epoch, "g", {("t", 1): (7, "m")})),
            InvalidTxnState,
        )
        await within(txn.add_offsets("a", pid, epoch, "g"))
        await within(txn.txn_offset_commit("a", pid, epoch, "g", {("t", 1): (7, "m")}))
        assert core.committed_offsets("g") == {}
        await within(txn.end_transaction("a", pid, epoch, True))
        # Answered once the markers and offsets are written; CompleteCommit follows.
        await within(txn.settled("a"))
        assert core.committed_offsets("g") == {("t", 1): 7}
        assert core.committed_metadata("g") == {("t", 1): "m"}
        assert plog.last_stable_offset == plog.end_offset == 3
        assert markers(plog) == [(2, COMMIT)]
        # A retried commit is answered as done; an abort of the committed one is not.
        await within(txn.end_transaction("a", pid, epoch, True))
        assert isinstance(
            await failure_of(txn.end_transaction("a", pid, epoch, False)), InvalidTxnState
        )
        # Re-initialising bumps the epoch; the old epoch is fenced everywhere.
        assert await within(txn.init_producer_id("a", 60_000)) == (pid, 1)
        assert isinstance(
            await failure_of(txn.add_partitions("a", pid, 0, [("t", 0)])), ProducerFenced
        )
    finally:
        await running.stop()


async def open_transaction(running: Any) -> tuple[int, int]:
    core = running.broker
    txn = core.transactions
    await within(core.create_topic("t", 1))
    pid, epoch = await within(txn.init_producer_id("b", 60_000))
    await within(txn.add_partitions("b", pid, epoch, [("t", 0)]))
    await within(txn.add_offsets("b", pid, epoch, "g"))
    await within(core.append("t", 0, txn_batch(pid, 0), auto_create=False, transactional_id="b"))
    await within(txn.txn_offset_commit("b", pid, epoch, "g", {("t", 0): (2, "")}))
    return pid, epoch


@pytest_twisted.ensureDeferred
async def test_staged_offsets_are_pending_until_the_transaction_ends(data_dir: Path) -> None:
    """What OffsetFetch's require_stable waits for: a group's partitions with an offset
    staged in a transaction that has not completed, for that group only; an added
    group with nothing staged yet holds nothing back; both outcomes end it."""
    running = await start_broker(data_dir)
    try:
        core = running.broker
        txn = core.transactions
        pid, epoch = await open_transaction(running)
        assert txn.pending_offsets("g") == {("t", 0)}
        assert txn.pending_offsets("other") == set()
        await within(txn.end_transaction("b", pid, epoch, False))
        await within(txn.settled("b"))  # the completion, just after EndTxn's answer
        assert txn.pending_offsets("g") == set()
        await within(txn.add_offsets("b", pid, epoch, "g"))
        assert txn.pending_offsets("g") == set()
        await within(txn.txn_offset_commit("b", pid, epoch, "g", {("t", 0): (3, "")}))
        assert txn.pending_offsets("g") == {("t", 0)}
        await within(txn.end_transaction("b", pid, epoch, True))
        await within(txn.settled("b"))
        assert txn.pending_offsets("g") == set()
        assert core.committed_offsets("g") == {("t", 0): 3}
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_an_open_transaction_survives_a_restart_and_commits_after_it(data_dir: Path) -> None:
    running = await start_broker(data_dir)
    try:
        pid, epoch = await open_transaction(running)
    finally:
        await running.stop()
    running = await start_broker(data_dir)
    try:
        core = running.broker
        meta = core.transactions.describe("b")
        assert meta is not None and meta.state == TxnState.ONGOING
        assert meta.partitions == {("t", 0)} and meta.offsets == {"g": {("t", 0): (2, "")}}
        plog = core.partition("t", 0)
        assert plog.last_stable_offset == 0 and plog.open_transactions() == {pid: 0}
        await within(core.transactions.end_transaction("b", pid, epoch, True))
        await within(core.transactions.settled("b"))
        assert plog.last_stable_offset == plog.end_offset == 3
        assert core.committed_offsets("g") == {("t", 0): 2}
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_prepared_commit_is_rolled_forward_at_startup(data_dir: Path) -> None:
    """A crash after PrepareCommit was durable and before any marker: the restart writes
    the markers and the offsets and completes the transaction (Kafka's coordinator
    loading its log completes PrepareCommit/PrepareAbort the same way)."""

    running = await start_broker(data_dir)
    try:
        pid, _epoch = await open_transaction(running)
    finally:
        await running.stop()
    store = TransactionLog.open(data_dir, LogConfig(flush="never"))
    meta = store.entries()["b"]
    store.write(meta.but(state=TxnState.PREPARE_COMMIT))
    store.close()
    assert (data_dir / TRANSACTIONS_DIR).is_dir()
    running = await start_broker(data_dir)
    try:
        core = running.broker
        await within(core.transactions.settled("b"))  # the roll-forward holds its lock
        meta = core.transactions.describe("b")
        assert meta is not None and meta.state == TxnState.COMPLETE_COMMIT
        plog = core.partition("t", 0)
        assert markers(plog) == [(2, COMMIT)]
        assert plog.last_stable_offset == plog.end_offset
        assert plog.open_transactions() == {}
        assert core.committed_offsets("g") == {("t", 0): 2}
        assert pid == meta.producer_id
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_prepared_abort_is_rolled_forward_and_writes_no_offsets(data_dir: Path) -> None:

    running = await start_broker(data_dir)
    try:
        pid, _epoch = await open_transaction(running)
    finally:
        await running.stop()
    store = TransactionLog.open(data_dir, LogConfig(flush="never"))
    store.write(store.entries()["b"].but(state=TxnState.PREPARE_ABORT))
    store.close()
    running = await start_broker(data_dir)
    try:
        core = running.broker
        await within(core.transactions.settled("b"))
        meta = core.transactions.describe("b")
        assert meta is not None and meta.state == TxnState.COMPLETE_ABORT
        plog = core.partition("t", 0)
        assert [t.producer_id for t in plog.aborted_transactions(0, plog.end_offset)] == [pid]
        assert core.committed_offsets("g") == {}
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_transaction_the_log_lost_is_aborted_at_startup(data_dir: Path) -> None:
    """With __transactions/ gone, the partition still holds the transaction open (its
    producer state says so); the restart aborts it there instead of leaving the last
    stable offset behind for ever."""
    import shutil

    from twisted.internet import reactor

    running = await start_broker(data_dir)
    try:
        pid, _epoch = await open_transaction(running)
    finally:
        await running.stop()
    shutil.rmtree(data_dir / TRANSACTIONS_DIR)
    running = await start_broker(data_dir)
    try:
        plog = running.broker.partition("t", 0)
        for _ in range(100):
            if not plog.open_transactions():
                break
            await task.deferLater(reactor, 0.05, lambda: None)
        assert plog.open_transactions() == {}
        assert plog.last_stable_offset == plog.end_offset
        assert [t.producer_id for t in plog.aborted_transactions(0, plog.end_offset)] == [pid]
        assert running.broker.committed_offsets("g") == {}
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_fencing_at_the_last_epoch_still_fences_and_gives_a_new_producer_id(
    data_dir: Path,
) -> None:
    """A producer holds epoch 32766, the last InitProducerId hands out: fencing its
    open transaction aborts it with epoch 32767 (never handed out, so the old
    producer is refused from then on) and the new producer gets a new producer id,
    as Kafka's coordinator does when fencing exhausts the epochs."""
    running = await start_broker(data_dir)
    try:
        await within(running.broker.create_topic("t", 1))
        await within(running.broker.transactions.init_producer_id("a", 60_000))
    finally:
        await running.stop()
    store = TransactionLog.open(data_dir, LogConfig(flush="never"))
    store.write(store.entries()["a"].but(producer_epoch=32766))
    store.close()
    running = await start_broker(data_dir)
    try:
        core = running.broker
        txn = core.transactions
        meta = txn.describe("a")
        assert meta is not None
        old = meta.producer_id
        await within(txn.add_partitions("a", old, 32766, [("t", 0)]))
        zombie = txn_batch(old, 0, epoch=32766)
        await within(core.append("t", 0, zombie, auto_create=False, transactional_id="a"))
        pid, epoch = await within(txn.init_producer_id("a", 60_000))
        assert pid != old and epoch == 0
        plog = core.partition("t", 0)
        assert plog.open_transactions() == {}
        header = parse_header(plog.read(2, 1))
        assert (header.producer_id, header.producer_epoch) == (old, 32767)
        assert marker_type(plog.read(2, 1)) == ABORT
        assert [t.producer_id for t in plog.aborted_transactions(0, plog.end_offset)] == [old]
        assert isinstance(
            await failure_of(txn.end_transaction("a", old, 32766, True)), InvalidProducerIdMapping
        )
        late = txn_batch(old, 2, epoch=32766)
        assert isinstance(
            await failure_of(core.append("t", 0, late, auto_create=False, transactional_id="a")),
            InvalidProducerIdMapping,
        )
        assert plog.end_offset == 3
        assert txn.outcomes.fenced == 1
    finally:
        await running.stop()


async def restarted_after_a_crash(data_dir: Path, tid: str) -> tuple[Any, Any]:
    """Start the broker as a crash leaves the data dir (no clean-shutdown marker) and
    wait for what the startup queued for ``tid``; (the running broker, tid's state)."""
    (data_dir / ".clean-shutdown").unlink()
    running = await start_broker(data_dir)
    await within(running.broker.transactions.settled(tid))
    return running, running.broker.transactions.describe(tid)


@pytest_twisted.ensureDeferred
async def test_a_crash_aborts_each_open_transaction_and_fences_its_producer(
    data_dir: Path,
) -> None:
    """Without a clean shutdown the log's Ongoing states may lack what was answered
    after the last fsync (they are written without one), so the restart aborts every
    open transaction with the epoch bumped; the producer's commit is then refused."""
    running = await start_broker(data_dir)
    try:
        pid, epoch = await open_transaction(running)
    finally:
        await running.stop()
    running, meta = await restarted_after_a_crash(data_dir, "b")
    try:
        core = running.broker
        assert meta.state == TxnState.COMPLETE_ABORT
        assert (meta.producer_id, meta.producer_epoch) == (pid, epoch + 1)
        plog = core.partition("t", 0)
        assert plog.open_transactions() == {}
        assert plog.last_stable_offset == plog.end_offset
        assert [t.producer_id for t in plog.aborted_transactions(0, plog.end_offset)] == [pid]
        assert core.committed_offsets("g") == {}
        assert core.transactions.outcomes.fenced == 1
        refused = await failure_of(core.transactions.end_transaction("b", pid, epoch, True))
        assert isinstance(refused, ProducerFenced)
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_crash_that_lost_the_ongoing_record_still_aborts_the_partitions(
    data_dir: Path,
) -> None:
    """The Ongoing record naming the partition never reached the disk: the partition's
    producer state still holds the transaction open, and the restart aborts it under
    the id whose producer it is, fencing that producer."""
    running = await start_broker(data_dir)
    try:
        pid, epoch = await open_transaction(running)
    finally:
        await running.stop()
    store = TransactionLog.open(data_dir, LogConfig(flush="never"))
    before = store.entries()["b"].but(state=TxnState.EMPTY, partitions=frozenset(), offsets={})
    store.write(before)
    store.close()
    running, meta = await restarted_after_a_crash(data_dir, "b")
    try:
        core = running.broker
        assert (meta.state, meta.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 1)
        plog = core.partition("t", 0)
        assert plog.open_transactions() == {}
        assert [t.producer_id for t in plog.aborted_transactions(0, plog.end_offset)] == [pid]
        refused = await failure_of(
            core.append("t", 0, txn_batch(pid, 1), auto_create=False, transactional_id="b")
        )
        assert isinstance(refused, ProducerFenced)
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_endtxn_answers_once_readers_see_the_outcome_and_the_next_transaction_waits(
    data_dir: Path,
) -> None:
    """EndTxn is answered once PrepareCommit is durable, the marker written and the
    staged offsets committed, so a read_committed reader and OffsetFetch see the
    outcome as soon as the producer does; the producer's next request waits until
    CompleteCommit replaced PrepareCommit in the log (a Prepare record left last
    would be rolled forward with markers of the same epoch, which would end the
    next transaction's records too)."""
    import threading

    from twisted.internet import defer

    running = await start_broker(data_dir)
    release = threading.Event()
    try:
        core = running.broker
        txn = core.transactions
        await within(core.create_topic("t", 1))
        pid, epoch = await within(txn.init_producer_id("a", 60_000))
        await within(txn.add_partitions("a", pid, epoch, [("t", 0)]))
        await within(txn.add_offsets("a", pid, epoch, "g"))
        await within(
            core.append("t", 0, txn_batch(pid, 0), auto_create=False, transactional_id="a")
        )
        await within(txn.txn_offset_commit("a", pid, epoch, "g", {("t", 0): (2, "")}))
        # Hold the partition's lane, so the commit marker cannot be written yet, and
        # see the coordinator ask for it (once PrepareCommit is durable).
        held = core.lanes.lane("t", 0).submit(release.wait, 30)
        asked: defer.Deferred[None] = defer.Deferred()
        write_marker = core.write_marker

        def marker_asked_for(*args: Any) -> Any:
            asked.callback(None)
            return write_marker(*args)

        core.write_marker = marker_asked_for  # type: ignore[method-assign]
        answered: list[None] = []
        ended = txn.end_transaction("a", pid, epoch, True).addCallback(answered.append)
        await within(asked)
        assert core.txn_log.entries()["a"].state == TxnState.PREPARE_COMMIT
        plog = core.partition("t", 0)
        assert not answered and plog.last_stable_offset == 0
        release.set()
        await within(held)
        await within(ended)
        assert plog.last_stable_offset == plog.end_offset == 3  # two records, the marker
        assert core.committed_offsets("g") == {("t", 0): 2}
        added = txn.add_partitions("a", pid, epoch, [("t", 0)])
        await within(added)
        assert core.txn_log.entries()["a"].state in (TxnState.COMPLETE_COMMIT, TxnState.ONGOING)
        await within(
            core.append("t", 0, txn_batch(pid, 2), auto_create=False, transactional_id="a")
        )
        await within(txn.settled("a"))
        assert markers(plog) == [(2, COMMIT)]  # the second transaction's batch follows it
        assert plog.open_transactions() == {pid: 3}
        assert core.txn_log.entries()["a"].state == TxnState.ONGOING
        assert txn.outcomes.committed == 1
    finally:
        release.set()
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_idle_transactional_ids_expire_and_stay_gone_after_a_restart(
    data_dir: Path,
) -> None:
    """transactional_id_expiration_ms, on a clock the test gives (Kafka's
    TransactionStateManager rule): an id whose last update (its Empty or Complete state)
    is that old is tombstoned in the log and forgotten; an open transaction never expires,
    however old. The tombstones are durable, compaction leaves no record of the expired
    ids, and a later InitProducerId of an expired id gets a new producer id."""
    from rustka.storage.offsets import salvage
    from rustka.storage.txn_log import decode_key

    running = await start_broker(data_dir)
    try:
        core = running.broker
        txn = core.transactions
        await within(core.create_topic("t", 1))
        idle_pid, _ = await within(txn.init_producer_id("idle", 60_000))
        pid, epoch = await within(txn.init_producer_id("done", 60_000))
        await within(txn.add_partitions("done", pid, epoch, [("t", 0)]))
        await within(txn.end_transaction("done", pid, epoch, True))
        await within(txn.settled("done"))
        open_pid, open_epoch = await within(txn.init_producer_id("open", 60_000))
        await within(txn.add_partitions("open", open_pid, open_epoch, [("t", 0)]))
        updated = [txn.describe(t).last_update_ms for t in ("idle", "done")]  # type: ignore[union-attr]
        hour = 3_600_000
        assert await within(txn.expire_ids(min(updated) + hour - 1, hour)) == []
        last = max(updated)
        assert await within(txn.expire_ids(last + hour, hour)) == ["done", "idle"]
        assert txn.describe("idle") is None and txn.describe("done") is None
        meta = txn.describe("open")
        assert meta is not None and meta.state == TxnState.ONGOING
        # Years later the open transaction is still there (its timeout aborts it, not this).
        assert await within(txn.expire_ids(last + 1000 * hour, hour)) == []
        assert core.txn_log is not None and set(core.txn_log.entries()) == {"open"}
    finally:
        await running.stop()
    running = await start_broker(data_dir)
    try:
        txn = running.broker.transactions
        assert [m.transactional_id for m in txn.transactions()] == ["open"]
        assert running.broker.txn_log is not None
        running.broker.txn_log.compact()
        records, skipped = salvage(data_dir / TRANSACTIONS_DIR)
        assert skipped == [] and {decode_key(r.key) for r in records if r.key} == {"open"}
        again, epoch = await within(txn.init_producer_id("idle", 60_000))
        assert again != idle_pid and epoch == 0
    finally:
        await running.stop()
