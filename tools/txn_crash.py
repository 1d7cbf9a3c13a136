"""SIGKILL a broker at each step of a transaction's commit, restart it, check the outcome.

A transaction spans three partitions and a group's offsets. Its commit is a
sequence of durable steps (docs/kafka.md, "Transactions"): the coordinator's
records in ``__transactions/`` (Empty, Ongoing as partitions and the group are
added, the staged offsets, PrepareCommit), a marker on each partition, the
offsets, then CompleteCommit (after the answer, before the producer's next
transaction may write). The child
(``python -m tools.txn_crash child DIR --die-after N``) runs a real broker
core in its own reactor and kills itself with SIGKILL right after the Nth of
those steps (a transaction-log write or a marker append) completes. Whatever
N, after a restart every partition must end the transaction the same way:
committed, with the group's offsets, when PrepareCommit was durable (the
restart rolls it forward); aborted, without them, when it was not (its
timeout aborts it); and no partition may keep it open. tests/test_txn_crash.py
runs the child once per step and checks each restart.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

TOPIC = "crash-txn"
PARTITIONS = 3
GROUP = "crash-group"
TXN_ID = "crash-txn-id"
TIMEOUT_MS = 1500
READY = "transacting"
DONE = "committed"


def _txn_batch(pid: int, epoch: int, seq: int, tag: str) -> bytes:
    import struct

    from crc32c import crc32c

    from rustka.record.batch import Record, encode_batch

    data = bytearray(encode_batch([Record(b"k", f"{tag}-{j}".encode()) for j in range(2)]))
    struct.pack_into(">h", data, 21, 0x10)
    struct.pack_into(">qhi", data, 43, pid, epoch, seq)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def settings(data_dir: Path) -> dict[str, Any]:
    return {
        "data_dir": str(data_dir),
        "listen": ["tcp:0:interface=127.0.0.1"],
        "flush": "never",
        "transaction_abort_interval_ms": 100,
    }


def child(data_dir: Path, die_after: int | None, then_next: bool = False) -> int:
    """Run one transaction to its commit, dying right after step ``die_after``.

    With ``then_next`` the producer goes straight on with a second transaction,
    writing to every partition, as a stream processor does; ``die_after`` 0
    then means dying once those records are appended."""
    from twisted.internet import defer, reactor

    from rustka.config import Config
    from rustka.ops.tap import build_service
    from rustka.storage.partition_log import PartitionLog
    from rustka.storage.txn_log import TransactionLog

    steps = 0

    def counted(original: Any) -> Any:
        def step(*args: Any, **kwargs: Any) -> Any:
            nonlocal steps
            result = original(*args, **kwargs)
            steps += 1
            if steps == die_after:
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        return step

    TransactionLog.write = counted(TransactionLog.write)  # type: ignore[method-assign]
    PartitionLog.append_marker = counted(PartitionLog.append_marker)  # type: ignore[method-assign]
    top = build_service(Config().updated(settings(data_dir)), reactor)

    async def run() -> None:
        top.startService()
        core = top.broker
        await core.when_ready()
        await core.create_topic(TOPIC, PARTITIONS)
        txn = core.transactions
        print(READY, flush=True)
        pid, epoch = await txn.init_producer_id(TXN_ID, TIMEOUT_MS)
        keys = [(TOPIC, p) for p in range(PARTITIONS)]
        await txn.add_partitions(TXN_ID, pid, epoch, keys)
        await txn.add_offsets(TXN_ID, pid, epoch, GROUP)
        for p in range(PARTITIONS):
            batch = _txn_batch(pid, epoch, 0, f"p{p}")
            await core.append(TOPIC, p, batch, auto_create=False, transactional_id=TXN_ID)
        await txn.txn_offset_commit(TXN_ID, pid, epoch, GROUP, {(TOPIC, 0): (2, "")})
        await txn.end_transaction(TXN_ID, pid, epoch, True)
        if then_next:
            await txn.add_partitions(TXN_ID, pid, epoch, keys)
            for p in range(PARTITIONS):
                batch = _txn_batch(pid, epoch, 2, f"next-p{p}")
                await core.append(TOPIC, p, batch, auto_create=False, transactional_id=TXN_ID)
            if die_after == 0:
                os.kill(os.getpid(), signal.SIGKILL)
        await txn.settled(TXN_ID)
        print(f"{DONE} {steps}", flush=True)

    def finished(result: Any) -> Any:
        reactor.stop()
        return result

    def go() -> None:
        defer.ensureDeferred(run()).addErrback(
            lambda f: print(f.getTraceback(), file=sys.stderr)
        ).addBoth(finished)

    reactor.callWhenRunning(go)
    reactor.run()
    return 0


def run_child(data_dir: Path, die_after: int | None, then_next: bool = False) -> tuple[bool, str]:
    """One child run; (killed by SIGKILL, its stdout)."""
    cmd = [sys.executable, "-m", "tools.txn_crash", "child", str(data_dir)]
    if die_after is not None:
        cmd += ["--die-after", str(die_after)]
    if then_next:
        cmd.append("--then-next")
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=root, timeout=120)
    if READY not in proc.stdout:
        raise RuntimeError(f"child failed: {proc.stdout[-1000:]} {proc.stderr[-2000:]}")
    if proc.returncode not in (0, -signal.SIGKILL):
        raise RuntimeError(f"child exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.returncode == -signal.SIGKILL, proc.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="mode")
    c = sub.add_parser("child")
    c.add_argument("data_dir", type=Path)
    c.add_argument("--die-after", type=int, default=None)
    c.add_argument("--then-next", action="store_true")
    args = ap.parse_args(argv)
    if args.mode == "child":
        return child(args.data_dir, args.die_after, args.then_next)
    ap.print_help()
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
