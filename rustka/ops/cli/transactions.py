"""``rustka transactions``: list, describe and abort Kafka transactions (docs/kafka.md,
"Transactions"), and find hanging ones.

Modelled on Kafka's ``kafka-transactions.sh``: ``list`` shows every transactional id
with its producer and state (``--state``/``--producer-id`` select, as
ListTransactions' filters do), ``describe ID`` one id's transaction with its
partitions, ``abort ID`` ends its open transaction as its timeout would (the
producer is fenced, a read_committed consumer gets past it), ``find-hanging`` the
transactions that hold a last stable offset back when nothing will end them: open
longer than their timeout, or open on a partition whose producer no transactional
id's transaction covers. Unlike Kafka's tool, abort takes the transactional id, not a
partition and producer: rustka's coordinator knows both (docs/protocol.md 7.15).
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from typing import Any, TextIO

from rustka.native import codec as p
from rustka.ops.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    add_client_parser,
    connect,
    emit,
    positive_int,
    run_client,
)

COMMANDS = ("transactions",)

OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort")
"""States in which a transaction holds its partitions' last stable offsets back."""


def add_parsers(sub: Any) -> None:
    t = add_client_parser(
        sub,
        "transactions",
        "list, describe or abort transactions, or find hanging ones",
        "examples:\n"
        "  rustka transactions list                      every transactional id\n"
        "  rustka transactions list --state Ongoing      those with a transaction open\n"
        "  rustka transactions describe payments-1       its state and partitions\n"
        "  rustka transactions abort payments-1          abort it, fencing its producer\n"
        "  rustka transactions find-hanging              open past their timeout, or unknown\n",
    )
    t.add_argument("action", choices=["list", "describe", "abort", "find-hanging"])
    t.add_argument("transactional_id", nargs="?", metavar="ID")
    t.add_argument(
        "--state",
        action="append",
        default=[],
        metavar="STATE",
        help="list: only this state (Kafka's name: Empty, Ongoing, PrepareCommit, "
        "PrepareAbort, CompleteCommit, CompleteAbort, Dead); repeatable",
    )
    t.add_argument(
        "--producer-id",
        type=positive_int,
        action="append",
        default=[],
        metavar="PID",
        help="list: only this producer id; repeatable",
    )


def check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    needs_id = args.action in ("describe", "abort")
    if needs_id and not args.transactional_id:
        parser.error(f"transactions {args.action} needs a transactional ID")
    if not needs_id and args.transactional_id is not None:
        parser.error(f"transactions {args.action} takes no ID")
    if args.action != "list" and (args.state or args.producer_id):
        parser.error(f"transactions {args.action} takes no --state or --producer-id")


def run(args: argparse.Namespace) -> int:
    return run_client(cmd_transactions, args)


def _when(ms: int) -> str | None:
    if ms == p.NO_TIME:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def _open_for_ms(state: str, start_ms: int, now_ms: int) -> int | None:
    """How long the transaction has been open, by this machine's clock (None: not open)."""
    if state not in OPEN_STATES or start_ms == p.NO_TIME:
        return None
    return max(0, now_ms - start_ms)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _listed(t: p.ListedTransaction, now_ms: int) -> dict[str, Any]:
    return {
        "transactional_id": t.transactional_id,
        "producer_id": t.producer_id,
        "producer_epoch": t.producer_epoch,
        "state": t.state,
        "timeout_ms": t.timeout_ms,
        "started": _when(t.start_ms),
        "open_ms": _open_for_ms(t.state, t.start_ms, now_ms),
    }


def _partitions(parts: tuple[p.TxnPartition, ...]) -> list[str]:
    return [f"{x.topic}-{x.partition}" for x in parts]


def _described(d: p.TransactionDescribed, now_ms: int) -> dict[str, Any]:
    return {
        "transactional_id": d.transactional_id,
        "producer_id": d.producer_id,
        "producer_epoch": d.producer_epoch,
        "state": d.state,
        "timeout_ms": d.timeout_ms,
        "started": _when(d.start_ms),
        "open_ms": _open_for_ms(d.state, d.start_ms, now_ms),
        "last_update": _when(d.last_update_ms),
        "partitions": _partitions(d.partitions),
        "groups": list(d.groups),
    }


def _dash(value: Any) -> str:
    return "-" if value is None or value == [] else str(value)


def _table(head: tuple[str, ...], rows: list[tuple[Any, ...]], empty: str) -> str:
    if not rows:
        return f"({empty})\n"
    lines = ["\t".join(head)] + ["\t".join(_dash(v) for v in row) for row in rows]
    return "\n".join(lines) + "\n"


def _list_text(rows: list[dict[str, Any]]) -> str:
    return _table(
        ("TRANSACTIONAL-ID", "PRODUCER-ID", "EPOCH", "STATE", "TIMEOUT-MS", "OPEN-MS"),
        [
            (
                r["transactional_id"],
                r["producer_id"],
                r["producer_epoch"],
                r["state"],
                r["timeout_ms"],
                r["open_ms"],
            )
            for r in rows
        ],
        "no transactional ids",
    )


def _describe_text(r: dict[str, Any]) -> str:
    head = (
        "TRANSACTIONAL-ID",
        "PRODUCER-ID",
        "EPOCH",
        "STATE",
        "TIMEOUT-MS",
        "STARTED",
        "OPEN-MS",
        "PARTITIONS",
        "GROUPS",
    )
    row = (
        r["transactional_id"],
        r["producer_id"],
        r["producer_epoch"],
        r["state"],
        r["timeout_ms"],
        r["started"],
        r["open_ms"],
        ",".join(r["partitions"]) or None,
        ",".join(r["groups"]) or None,
    )
    return _table(head, [row], "")


async def _hanging(client: Any, now_ms: int) -> list[dict[str, Any]]:
    """Open transactions past their timeout (the coordinator's timeout pass should have
    aborted them), and partitions holding a transaction open that no open transactional
    id covers (nothing will ever end it; the broker aborts those at its next start)."""
    listed = await client.list_transactions(OPEN_STATES)
    found: list[dict[str, Any]] = []
    covered: dict[tuple[int, str, int], str] = {}
    for t in listed:
        opened = _open_for_ms(t.state, t.start_ms, now_ms)
        described = await client.describe_transaction(t.transactional_id)
        for part in described.partitions:
            covered[(described.producer_id, part.topic, part.partition)] = t.transactional_id
        if opened is not None and opened > t.timeout_ms:
            found.append(
                {
                    "transactional_id": t.transactional_id,
                    "producer_id": t.producer_id,
                    "producer_epoch": t.producer_epoch,
                    "partitions": _partitions(described.partitions),
                    "open_ms": opened,
                    "reason": f"open for {opened} ms, past its timeout of {t.timeout_ms} ms",
                }
            )
    for topic in await client.describe_stable_offsets([]):
        for index, part in enumerate(topic.partitions):
            for txn in part.open:
                if (txn.producer_id, topic.name, index) in covered:
                    continue
                found.append(
                    {
                        "transactional_id": None,
                        "producer_id": txn.producer_id,
                        "producer_epoch": txn.producer_epoch,
                        "partitions": [f"{topic.name}-{index}"],
                        "open_ms": None,
                        "reason": f"open on {topic.name}-{index} from offset "
                        f"{txn.first_offset} (last stable offset {part.last_stable_offset}) "
                        "with no open transactional id covering it",
                    }
                )
    return found


def _hanging_text(rows: list[dict[str, Any]]) -> str:
    return _table(
        ("TRANSACTIONAL-ID", "PRODUCER-ID", "EPOCH", "PARTITIONS", "REASON"),
        [
            (
                r["transactional_id"],
                r["producer_id"],
                r["producer_epoch"],
                ",".join(r["partitions"]) or None,
                r["reason"],
            )
            for r in rows
        ],
        "no hanging transactions",
    )


async def cmd_transactions(args: argparse.Namespace, out: TextIO) -> int:
    client = await connect(args)
    status = EXIT_OK
    try:
        now_ms = _now_ms()
        data: Any
        if args.action == "list":
            listed = await client.list_transactions(args.state, args.producer_id)
            data = [_listed(t, now_ms) for t in listed]
            text = _list_text(data)
        elif args.action == "describe":
            data = _described(await client.describe_transaction(args.transactional_id), now_ms)
            text = _describe_text(data)
        elif args.action == "abort":
            a = await client.abort_transaction(args.transactional_id)
            data = {
                "transactional_id": a.transactional_id,
                "producer_id": a.producer_id,
                "producer_epoch": a.producer_epoch,
                "state": a.state,
                "partitions": _partitions(a.partitions),
            }
            verb = "aborted" if a.state == "CompleteAbort" else f"completed ({a.state})"
            parts = ", ".join(data["partitions"]) or "no partitions"
            text = (
                f"{verb} the transaction of {a.transactional_id!r} (producer {a.producer_id}, "
                f"fenced at epoch {a.producer_epoch}) on {parts}\n"
            )
        else:
            data = await _hanging(client, now_ms)
            text = _hanging_text(data)
            # Like a check: something to act on is a non-zero status for scripts.
            status = EXIT_ERROR if data else EXIT_OK
        emit(out, args, data, lambda: text)
    finally:
        await client.close()
    return status
