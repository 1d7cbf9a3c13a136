"""``rustka serve``: the broker in the foreground, with twistd's own options."""

from __future__ import annotations

import sys
from typing import Any

from rustka.ops.cli.common import EXIT_ERROR, EXIT_OK, EXIT_USAGE, CommandError

COMMANDS = ("serve",)


def add_parsers(sub: Any) -> None:
    """Listed for --help only: main() hands ``serve ARGS`` to rustka.ops.tap.Options."""
    sub.add_parser("serve", help="run a broker in the foreground (rustka serve --help)")


def run(argv: list[str]) -> int:
    """Run the broker in the foreground until SIGINT/SIGTERM.

    The arguments are `twistd rustka`'s (rustka.ops.tap.Options, each flag
    defined once there), and the service tree is the one twistd runs.
    """
    from twisted.internet import reactor
    from twisted.logger import globalLogBeginner, textFileLogObserver
    from twisted.python import usage

    from rustka.ops.logs import json_observer
    from rustka.ops.tap import BrokerTree, Options, makeService

    options = Options()
    options.synopsis = "Usage: rustka serve " + Options.synopsis
    try:
        options.parseOptions(argv)
    except usage.UsageError as e:
        sys.stderr.write(f"{options.getSynopsis()}\nrustka serve: error: {e}\n")
        return EXIT_USAGE
    try:
        top = makeService(options)
    except SystemExit as e:
        raise CommandError(str(e.code).removeprefix("twistd rustka: ")) from None
    assert isinstance(top, BrokerTree)
    config = options.config
    observer = json_observer(sys.stderr) if config.log_format == "json" else None
    globalLogBeginner.beginLoggingTo(
        [observer or textFileLogObserver(sys.stderr)], redirectStandardIO=False
    )
    top.privilegedStartService()
    top.startService()
    reactor.addSystemEventTrigger("before", "shutdown", top.stopService)
    reactor.run()
    return EXIT_OK if top.failure is None else EXIT_ERROR
