"""The `rustka` command: run a broker, and talk to one from a shell.

Each command family is a module with ``COMMANDS``, ``add_parsers(sub)``,
``check(args, parser)`` and ``run(args)``; this module only assembles them.
Client commands are thin: parse arguments, connect with `rustka.client.protocol`,
make one or a few calls, print. Everything a user sees on failure is one line
on stderr and a non-zero exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from types import ModuleType

from rustka import __version__
from rustka.errors import RustkaError
from rustka.ops.cli import (
    acls,
    groups,
    inspect,
    mirror,
    records,
    serve,
    topics,
    transactions,
    users,
)
from rustka.ops.cli.common import EXIT_ERROR, CommandError

__all__ = ["build_parser", "main"]

# In --help order.
FAMILIES: tuple[ModuleType, ...] = (
    serve,
    inspect,
    records,
    topics,
    groups,
    transactions,
    acls,
    users,
    mirror,
)
_FAMILY_OF = {command: family for family in FAMILIES for command in family.COMMANDS}

_EPILOG = """\
examples:
  rustka serve                                start a broker on 127.0.0.1:9092, data in ./data
  rustka serve 1000000 50000000               1 MB segments, keep 50 MB per partition
  rustka produce orders user-1 "placed order" append a record (topic auto-created)
  rustka fetch orders 2 0                     read partition 2 of orders at offset 0
  rustka consume analytics orders 2           read partition 2 as group analytics, resume later
  rustka consume analytics orders 2 --follow  ...and keep waiting for new records
  rustka topics describe orders               log start and end offset per partition
  rustka groups describe analytics            committed offsets and lag
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rustka",
        description="rustka: a small Kafka-style event streaming broker.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rustka {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for family in FAMILIES:
        family.add_parsers(sub)
    return parser


def _check_names(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Topic and group names are refused here as the broker would refuse them."""
    from rustka.names import validate_group, validate_topic

    try:
        if getattr(args, "topic", None) is not None:
            validate_topic(args.topic)
        if getattr(args, "group", None) is not None:
            validate_group(args.group)
    except RustkaError as e:
        parser.error(str(e))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        try:
            return serve.run(argv[1:])
        except CommandError as e:
            sys.stderr.write(f"rustka: {e}\n")
            return EXIT_ERROR
    parser = build_parser()
    args = parser.parse_args(argv)
    family = _FAMILY_OF[args.command]
    family.check(args, parser)
    if family is not inspect:
        _check_names(args, parser)
    try:
        code: int = family.run(args)
    except CommandError as e:
        sys.stderr.write(f"rustka: {e}\n")
        return EXIT_ERROR
    return code
