"""``rustka topics``: list, describe, create, alter and delete topics."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any, TextIO

from rustka.ops.cli.common import (
    EXIT_OK,
    add_client_parser,
    connect,
    emit,
    positive_int,
    run_client,
)

COMMANDS = ("topics",)


def add_parsers(sub: Any) -> None:
    t = add_client_parser(
        sub,
        "topics",
        "list, describe, create, alter or delete topics",
        "examples:\n  rustka topics list\n  rustka topics describe orders\n"
        "  rustka topics create payments --partitions 6\n"
        "  rustka topics alter payments --partitions 12\n"
        "  rustka topics delete payments               removes every partition and record\n",
    )
    t.add_argument("action", choices=["list", "describe", "create", "alter", "delete"])
    t.add_argument("topic", nargs="?")
    t.add_argument("--partitions", type=positive_int, default=None)


def check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    if args.action != "list" and args.action != "describe" and not args.topic:
        parser.error(f"topics {args.action} needs a TOPIC")
    if args.action in ("create", "alter") and not args.partitions:
        parser.error(f"topics {args.action} needs --partitions N (N >= 1)")


def run(args: argparse.Namespace) -> int:
    return run_client(cmd_topics, args)


async def cmd_topics(args: argparse.Namespace, out: TextIO) -> int:
    client = await connect(args)
    try:
        if args.action == "list":
            meta = await client.metadata([])
            data = [{"topic": t.name, "partitions": len(t.partitions)} for t in meta]
            emit(out, args, data, lambda: "".join(f"{t['topic']}\n" for t in data))
        elif args.action == "describe":
            logs = await client.describe_logs([args.topic] if args.topic is not None else [])
            data = [_described(t) for t in logs]
            emit(out, args, data, lambda: _describe_table(data))
        elif args.action in ("create", "alter"):
            call = client.create_topic if args.action == "create" else client.alter_topic
            count = await call(args.topic, args.partitions)
            data = {"topic": args.topic, "partitions": count}
            verb = "created" if args.action == "create" else "now has"
            emit(out, args, data, lambda: f"topic {args.topic} {verb} {count} partitions\n")
        elif args.action == "delete":
            await client.delete_topic(args.topic)
            data = {"topic": args.topic, "deleted": True}
            emit(out, args, data, lambda: f"topic {args.topic} deleted with all its data\n")
    finally:
        await client.close()
    return EXIT_OK


def _described(topic: Any) -> dict[str, Any]:
    """A DescribeLogs topic as plain data: bounds and size per partition, and on a
    compacted topic what the log cleaner knows (docs/kafka.md, "Log compaction")."""
    compacted = "compact" in topic.cleanup_policy.split(",")
    partitions = []
    for i, log in enumerate(topic.partitions):
        entry: dict[str, Any] = {
            "partition": i,
            "log_start": log.log_start,
            "end": log.high_watermark,
            "bytes": log.size_bytes,
            "segments": log.segments,
        }
        if compacted:
            entry["cleaner"] = {
                "dirty_ratio": log.dirty_ratio_ppm / 1_000_000,
                "first_dirty": log.first_dirty,
                "bytes_read": log.cleaner_bytes_read,
                "bytes_written": log.cleaner_bytes_written,
                "last_clean": _when(log.last_clean_ms),
                "uncleanable": log.uncleanable or None,
            }
        partitions.append(entry)
    return {"topic": topic.name, "cleanup_policy": topic.cleanup_policy, "partitions": partitions}


def _when(ms: int) -> str | None:
    if not ms:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def _describe_table(data: list[dict[str, Any]]) -> str:
    cleaner = any("cleaner" in p for t in data for p in t["partitions"])
    head = "TOPIC\tPARTITION\tLOG-START\tEND\tRECORDS\tBYTES"
    if cleaner:
        head += "\tPOLICY\tDIRTY\tLAST-CLEAN\tCLEANER-READ\tCLEANER-WRITTEN"
    lines = [head]
    for t in data:
        for pm in t["partitions"]:
            line = (
                f"{t['topic']}\t{pm['partition']}\t{pm['log_start']}\t{pm['end']}"
                f"\t{pm['end'] - pm['log_start']}\t{pm['bytes']}"
            )
            if cleaner:
                c = pm.get("cleaner")
                if c is None:
                    line += f"\t{t['cleanup_policy']}\t-\t-\t-\t-"
                else:
                    last = c["last_clean"] or "never"
                    if c["uncleanable"]:
                        last = f"uncleanable: {c['uncleanable']}"
                    line += (
                        f"\t{t['cleanup_policy']}\t{c['dirty_ratio']:.1%}\t{last}"
                        f"\t{c['bytes_read']}\t{c['bytes_written']}"
                    )
            lines.append(line)
    return "\n".join(lines) + "\n"
