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
        "  rustka mirror --to kafka-1:9092 --to-user mirror   log in to a SASL listener\n"
        "a second run resumes where the first stopped (see --state)\n",
    )
    m.add_argument("--to", required=True, metavar="BOOTSTRAP", help="target HOST:PORT[,...]")
    m.add_argument("topics", nargs="*", metavar="TOPIC", help="topics to copy (default: all)")
    m.add_argument("--follow", action="store_true", help="keep mirroring until stopped")
    m.add_argument(
        "--to-user",
        metavar="USER",
        help="log in to the target as USER (SASL_PLAINTEXT); the password comes from "
        "$RUSTKA_TO_PASSWORD, --to-password-file or a prompt",
    )
    m.add_argument("--to-password-file", metavar="FILE", help="the target password's file")
    m.add_argument(
        "--to-mechanism",
        choices=["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"],
        default="SCRAM-SHA-512",
        help="SASL mechanism for --to-user (default %(default)s)",
    )
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
