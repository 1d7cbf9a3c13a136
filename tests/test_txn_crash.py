"""kill -9 after each step of a transaction's commit: after a restart every partition ends
it the same way, committed (with the group's offsets) once PrepareCommit was durable,
aborted (without them) before; none keeps it open (tools/txn_crash.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted

from rustka.record.batch import parse_header
from rustka.record.control import ABORT, COMMIT, marker_type
from rustka.storage.txn_log import TxnMetadata, TxnState
from tests.conftest import start_broker, within
from tools.txn_crash import GROUP, PARTITIONS, TOPIC, TXN_ID, run_child

pytestmark = pytest.mark.system

# Steps of the child's transaction: transaction-log writes (Empty, Ongoing with the
# partitions, with the group, with the staged offsets, PrepareCommit), three markers,
# CompleteCommit (fsynced after the answer, before the id's next request is served).
PREPARED_AT = 5
ENDED = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT, TxnState.EMPTY)
STEPS = 9
# With a second transaction straight after: its Ongoing record is the tenth step.
NEXT_STEPS = 10


def batches(plog: object) -> list[tuple[int, bool, int | None]]:
    """(offset, is a control batch, its marker type) of every batch of the log."""
    out = []
    offset = plog.log_start_offset  # type: ignore[attr-defined]
    while offset < plog.end_offset:  # type: ignore[attr-defined]
        data = plog.read(offset, 1)  # type: ignore[attr-defined]
        header = parse_header(data)
        control = bool(header.attributes & 0x20)
        out.append((header.base_offset, control, marker_type(data) if control else None))
        offset = header.next_offset
    return out


def markers(plog: object) -> list[int | None]:
    return [kind for _offset, control, kind in batches(plog) if control]


@pytest_twisted.ensureDeferred
async def test_sigkill_at_each_commit_step_ends_the_transaction_everywhere_alike(
    tmp_path: Path,
) -> None:
    _, out = run_child(tmp_path / "whole", None)
    match = re.search(r"committed (\d+)", out)
    assert match and int(match.group(1)) == STEPS, out
    outcomes = []
    for step in range(1, STEPS + 1):
        data_dir = tmp_path / f"die-after-{step}"
        killed, _out = run_child(data_dir, step)
        assert killed, step
        running, meta = await restarted(data_dir)
        try:
            core = running.broker
            kinds = set()
            for p in range(PARTITIONS):
                plog = core.partition(TOPIC, p)
                assert plog.open_transactions() == {}, (step, p)
                assert plog.last_stable_offset == plog.end_offset, (step, p)
                kinds.update(markers(plog))
            committed = core.committed_offsets(GROUP)
            if step >= PREPARED_AT:
                assert meta.state == TxnState.COMPLETE_COMMIT, (step, meta.state)
                assert kinds == {COMMIT}, step
                assert committed == {(TOPIC, 0): 2}, step
            else:
                assert meta.state in (TxnState.COMPLETE_ABORT, TxnState.EMPTY), (step, meta.state)
                assert kinds <= {ABORT}, step
                assert committed == {}, step
            outcomes.append((step, meta.state.kafka_name))
        finally:
            await running.stop()
    print(outcomes)


async def restarted(data_dir: Path) -> tuple[Any, TxnMetadata]:
    """The broker on what the child left, once its startup has ended the transaction
    (the roll-forward or the abort runs under the id's lock: `settled` waits for it)."""
    running = await start_broker(data_dir, flush="never", transaction_abort_interval_ms=100)
    await within(running.broker.transactions.settled(TXN_ID))
    meta = running.broker.transactions.describe(TXN_ID)
    assert meta is not None and meta.state in ENDED, meta
    return running, meta


@pytest_twisted.ensureDeferred
async def test_sigkill_while_the_next_transaction_starts_never_commits_it(
    tmp_path: Path,
) -> None:
    """The producer commits and goes straight on with a second transaction on every
    partition. Killed after any step from PrepareCommit on, or once the second
    transaction's records are appended: the first is committed everywhere with its
    offsets, the second never committed anywhere (the restart rolls the first
    forward with markers of the same epoch, so it must not find the second's records
    behind a Prepare record: Complete is durable before they may be written)."""
    _, out = run_child(tmp_path / "whole", None, then_next=True)
    match = re.search(r"committed (\d+)", out)
    assert match and int(match.group(1)) == NEXT_STEPS, out
    for step in [*range(PREPARED_AT, NEXT_STEPS + 1), 0]:
        data_dir = tmp_path / f"next-die-after-{step}"
        killed, _out = run_child(data_dir, step, then_next=True)
        assert killed, step
        running, _meta = await restarted(data_dir)
        try:
            core = running.broker
            for p in range(PARTITIONS):
                plog = core.partition(TOPIC, p)
                assert plog.open_transactions() == {}, (step, p)
                found = batches(plog)
                # The first transaction's records end with a commit; whatever data
                # follows (the second's) ends with an abort. A marker with no records
                # before it (a roll-forward writing one again) changes nothing.
                ends, pending, marked = [], False, 0
                for _offset, control, kind in found:
                    if not control:
                        pending = True
                    elif pending:
                        ends.append(kind)
                        pending = False
                    marked += control
                assert marked and not pending, (step, p, found)
                assert ends[:1] == [COMMIT] and set(ends[1:]) <= {ABORT}, (step, p, found)
                assert found[-1][2] is not None, (step, p, found)
            assert core.committed_offsets(GROUP) == {(TOPIC, 0): 2}, step
        finally:
            await running.stop()
