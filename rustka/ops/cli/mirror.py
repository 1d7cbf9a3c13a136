"""``rustka mirror``: copy topics and group offsets into a Kafka-protocol cluster."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from rustka.ops.cli.common import add_client_parser, run_client

COMMANDS = ("mirror",)


def add_parsers(sub: Any) -> None:
    m = add_client_parser(
        sub,
        "mirror",
        "copy topics and group offsets into a Kafka-protocol cluster",
        "examples:\n  rustka mirror --to kafka-1:9092                 every topic, then stop\n"
        "  rustka mirror --to kafka-1:9092 orders payments  just these topics\n"
        "  rustka mirror --to kafka-1:9092 --follow         keep copying until Ctrl-C\n"
        "a second run resumes where the first stopped (see --state)\n",
    )
    m.add_argument("--to", required=True, metavar="BOOTSTRAP", help="target HOST:PORT[,...]")
    m.add_argument("topics", nargs="*", metavar="TOPIC", help="topics to copy (default: all)")
    m.add_argument("--follow", action="store_true", help="keep mirroring until stopped")
    m.add_argument(
        "--state",
        default="rustka-mirror.json",
        help="where to record progress, for resuming (default %(default)s)",
    )


def check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Nothing beyond argparse: topic names are checked with every command's."""


def run(args: argparse.Namespace) -> int:
    return run_client(_mirror, args)


async def _mirror(args: argparse.Namespace, out: TextIO) -> int:
    from rustka.ops.mirror import cmd_mirror

    return await cmd_mirror(args, out)
