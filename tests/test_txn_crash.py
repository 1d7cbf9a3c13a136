"""kill -9 after each step of a transaction's commit: after a restart every partition ends
it the same way, committed (with the group's offsets) once PrepareCommit was durable,
aborted (without them) before; none keeps it open (tools/txn_crash.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest_twisted
from twisted.internet import task

from rustka.record.batch import parse_header
from rustka.record.control import ABORT, COMMIT, marker_type
from rustka.storage.txn_log import TxnState
from tests.conftest import start_broker
from tools.txn_crash import GROUP, PARTITIONS, TOPIC, TXN_ID, run_child

# Steps of the child's transaction: transaction-log writes (Empty, Ongoing with the
# partitions, with the group, with the staged offsets, PrepareCommit), three markers.
# CompleteCommit is not on the commit's path: it is written later (with the id's next
# record, the next pass or at shutdown), so the child, killed or not, never writes it.
PREPARED_AT = 5
STEPS = 8


def markers(plog: object) -> list[int | None]:
    out = []
    offset = plog.log_start_offset  # type: ignore[attr-defined]
    while offset < plog.end_offset:  # type: ignore[attr-defined]
        data = plog.read(offset, 1)  # type: ignore[attr-defined]
        header = parse_header(data)
        if header.attributes & 0x20:
            out.append(marker_type(data))
        offset = header.next_offset
    return out


@pytest_twisted.ensureDeferred
async def test_sigkill_at_each_commit_step_ends_the_transaction_everywhere_alike(
    tmp_path: Path,
) -> None:
    from twisted.internet import reactor

    _, out = run_child(tmp_path / "whole", None)
    match = re.search(r"committed (\d+)", out)
    assert match and int(match.group(1)) == STEPS, out
    outcomes = []
    for step in range(1, STEPS + 1):
        data_dir = tmp_path / f"die-after-{step}"
        killed, _out = run_child(data_dir, step)
        assert killed, step
        running = await start_broker(data_dir, flush="never", transaction_abort_interval_ms=100)
        try:
            core = running.broker
            meta = None
            for _ in range(100):
                meta = core.transactions.describe(TXN_ID)
                if meta is not None and meta.state in (
                    TxnState.COMPLETE_COMMIT,
                    TxnState.COMPLETE_ABORT,
                    TxnState.EMPTY,
                ):
                    break
                await task.deferLater(reactor, 0.05, lambda: None)
            assert meta is not None, step
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
