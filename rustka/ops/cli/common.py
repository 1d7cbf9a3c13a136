"""What every `rustka` command family shares: exit codes, the one-line error, the
client arguments (--broker, --timeout, --json), connecting, and running a client
command on the reactor so that a failure is a message, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TextIO

from rustka.errors import RustkaError

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

DEFAULT_BROKER = "127.0.0.1:9092"
# Where every client command connects when --broker is not given, before the default.
BROKER_ENV = "RUSTKA_BROKER"
# Who the client commands log in as on a listener that requires it (docs/security.md);
# the password never comes from an argument, which ps would show.
USER_ENV = "RUSTKA_USER"
PASSWORD_ENV = "RUSTKA_PASSWORD"

ClientCommand = Callable[[argparse.Namespace, TextIO], Coroutine[Any, Any, int]]


class CommandError(Exception):
    """A one-line message for the user; the command exits with status 1."""


def text_of(data: bytes | None) -> str:
    """Bytes as a terminal shows them: UTF-8, with anything else escaped."""
    return "" if data is None else data.decode("utf-8", errors="backslashreplace")


def emit(out: TextIO, args: argparse.Namespace, data: Any, text: Callable[[], str]) -> None:
    if args.json:
        out.write(json.dumps(data, indent=None) + "\n")
    else:
        out.write(text())


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    return value


def add_client_parser(sub: Any, name: str, help: str, epilog: str) -> argparse.ArgumentParser:
    """A subcommand that talks to a broker: --broker, --timeout and --json come with it."""
    sp: argparse.ArgumentParser = sub.add_parser(
        name, help=help, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sp.add_argument(
        "--broker",
        default=os.environ.get(BROKER_ENV) or DEFAULT_BROKER,
        help=f"HOST:PORT or a Twisted client endpoint string (default ${BROKER_ENV}, "
        f"else {DEFAULT_BROKER})",
    )
    sp.add_argument(
        "--timeout",
        type=positive_seconds,
        default=10.0,
        help="seconds to wait for the connection and for each answer (a long-poll's "
        "own wait comes on top); default %(default)s",
    )
    sp.add_argument("--json", action="store_true", help="print JSON instead of text")
    sp.add_argument(
        "--user",
        default=os.environ.get(USER_ENV) or None,
        help=f"log in as this user (default ${USER_ENV}); the password comes from "
        f"${PASSWORD_ENV}, --password-file or a prompt",
    )
    sp.add_argument(
        "--password-file",
        metavar="FILE",
        help="read the password from the first line of FILE",
    )
    sp.add_argument(
        "--mechanism",
        choices=["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"],
        default="SCRAM-SHA-512",
        help="SASL mechanism for --user (default %(default)s)",
    )
    return sp


def read_password(
    password_file: str | None, env: str = PASSWORD_ENV, prompt: str = "Password: "
) -> str:
    """A password from a file, else the environment, else the terminal; never argv."""
    if password_file:
        try:
            with open(password_file, encoding="utf-8") as f:
                line = f.readline().rstrip("\r\n")
        except OSError as e:
            raise CommandError(f"cannot read {password_file}: {e.strerror}") from e
        if not line:
            raise CommandError(f"{password_file}: the first line (the password) is empty")
        return line
    from_env = os.environ.get(env)
    if from_env:
        return from_env
    if not sys.stdin.isatty():
        raise CommandError(f"no password: set ${env}, give --password-file or run on a terminal")
    import getpass

    return getpass.getpass(prompt)


async def connect(args: argparse.Namespace) -> Any:
    from twisted.internet import reactor

    from rustka.client.protocol import connect
    from rustka.errors import AuthenticationFailed

    user = getattr(args, "user", None)
    login: dict[str, Any] = {}
    if user:
        login = {
            "user": user,
            "password": read_password(getattr(args, "password_file", None)),
            "mechanism": args.mechanism,
        }
    try:
        return await connect(
            reactor, args.broker, timeout=args.timeout, request_timeout=args.timeout, **login
        )
    except AuthenticationFailed as e:
        raise CommandError(f"cannot log in to {args.broker} as {user}: {e}") from e
    except Exception as e:
        raise CommandError(f"cannot reach the broker at {args.broker}: {e}") from e


def run_client(command: ClientCommand, args: argparse.Namespace) -> int:
    """Run ``command`` under the reactor; every failure becomes one line on stderr."""
    from twisted.internet import defer, task

    from rustka.client.protocol import RequestTimedOut

    status = [EXIT_OK]

    async def run(reactor: Any) -> None:
        try:
            status[0] = await command(args, sys.stdout)
        except CommandError as e:
            sys.stderr.write(f"rustka: {e}\n")
            status[0] = EXIT_ERROR
        except RequestTimedOut as e:
            sys.stderr.write(f"rustka: {e}\n")
            status[0] = EXIT_ERROR
        except RustkaError as e:
            sys.stderr.write(f"rustka: the broker answered: {e}\n")
            status[0] = EXIT_ERROR
        except BrokenPipeError:
            status[0] = EXIT_OK
        except Exception as e:
            sys.stderr.write(f"rustka: {type(e).__name__}: {e}\n")
            status[0] = EXIT_ERROR

    with contextlib.suppress(SystemExit):
        task.react(lambda reactor: defer.ensureDeferred(run(reactor)))
    return status[0]
