"""``rustka topics``: list, describe, create, alter and delete topics."""

from __future__ import annotations

import argparse
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
            meta = await client.metadata([args.topic] if args.topic is not None else [])
            data = [
                {
                    "topic": t.name,
                    "partitions": [
                        {"partition": i, "log_start": pm.log_start, "end": pm.high_watermark}
                        for i, pm in enumerate(t.partitions)
                    ],
                }
                for t in meta
            ]

            def table() -> str:
                lines = ["TOPIC\tPARTITION\tLOG-START\tEND\tRECORDS"]
                for t in data:
                    for pm in t["partitions"]:
                        lines.append(
                            f"{t['topic']}\t{pm['partition']}\t{pm['log_start']}\t{pm['end']}"
                            f"\t{pm['end'] - pm['log_start']}"
                        )
                return "\n".join(lines) + "\n"

            emit(out, args, data, table)
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
