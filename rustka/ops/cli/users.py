"""``rustka users``: add, list and remove the users SASL logins check (docs/security.md).

Works on the credential file directly, offline or while the broker runs: the file
is replaced whole under its writers' lock, and the broker re-reads it at the next
login (`rustka.security.credentials`). Only salted keys are stored; the password
is read from a prompt (asked twice), ``--password-file`` or ``$RUSTKA_NEW_PASSWORD``,
never from an argument, which ``ps`` would show. Kafka admin clients can do the same
over the wire (AlterUserScramCredentials, DescribeUserScramCredentials).

Every change writes one JSON audit line to stderr, as the broker logs its own.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from rustka.ops.cli.common import EXIT_ERROR, EXIT_OK, CommandError, positive_int, read_password
from rustka.security.credentials import (
    CredentialFileError,
    CredentialStore,
    check_user_name,
)
from rustka.security.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS, derive_credential

__all__ = ["COMMANDS", "add_parsers", "check", "run"]

COMMANDS = ("users",)
NEW_PASSWORD_ENV = "RUSTKA_NEW_PASSWORD"
_BOTH = "both"


def add_parsers(sub: Any) -> None:
    u = sub.add_parser(
        "users",
        help="add, list or remove SASL users (the credential file)",
        epilog="examples:\n"
        "  rustka users add alice                   prompts twice for the password\n"
        "  RUSTKA_NEW_PASSWORD=... rustka users add alice --mechanism SCRAM-SHA-512\n"
        "  rustka users list --data-dir /var/lib/rustka\n"
        "  rustka users remove alice\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    u.add_argument("action", choices=["add", "list", "remove"])
    u.add_argument("name", nargs="?", help="the user (add, remove)")
    where = u.add_mutually_exclusive_group()
    where.add_argument("--data-dir", default="data", help="the broker's data dir (default ./data)")
    where.add_argument("--credentials", metavar="FILE", help="the credential file itself")
    where.add_argument(
        "--config", metavar="FILE", help="the broker's config file (credentials_file, data_dir)"
    )
    u.add_argument(
        "--mechanism",
        choices=[*MECHANISMS, _BOTH],
        default=_BOTH,
        help="which SCRAM credential to add or remove (default both)",
    )
    u.add_argument(
        "--iterations",
        type=positive_int,
        default=MIN_ITERATIONS,
        help=f"PBKDF2 iterations, {MIN_ITERATIONS}..{MAX_ITERATIONS} (default %(default)s)",
    )
    u.add_argument("--password-file", metavar="FILE", help="add: the first line is the password")
    u.add_argument("--json", action="store_true", help="list: print JSON")


def check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    if args.action in ("add", "remove"):
        if not args.name:
            parser.error(f"users {args.action}: a user name is required")
        if (problem := check_user_name(args.name)) is not None:
            parser.error(f"users {args.action}: {problem}")
    elif args.name:
        parser.error("users list takes no name")
    if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
        parser.error(f"--iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}")


def credential_path(args: argparse.Namespace) -> Path:
    if args.credentials:
        return Path(args.credentials)
    if args.config:
        from rustka.config import Config, ConfigError

        try:
            config = Config.from_file(args.config)
        except ConfigError as e:
            raise CommandError(str(e)) from e
        return Path(config.credentials_file or Path(config.data_dir) / "credentials")
    return Path(args.data_dir) / "credentials"


def _audit(event: str, **fields: Any) -> None:
    line = {"audit_event": event, "time_ms": int(time.time() * 1000), **fields}
    sys.stderr.write(json.dumps(line) + "\n")


def _new_password(args: argparse.Namespace) -> str:
    if args.password_file or os.environ.get(NEW_PASSWORD_ENV) or not sys.stdin.isatty():
        return read_password(args.password_file, env=NEW_PASSWORD_ENV)
    first = getpass.getpass(f"Password for {args.name}: ")
    if first != getpass.getpass("Again: "):
        raise CommandError("the passwords differ")
    if not first:
        raise CommandError("the password is empty")
    return first


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        return _run(args, out)
    except CommandError as e:
        sys.stderr.write(f"rustka: {e}\n")
        return EXIT_ERROR
    except (CredentialFileError, OSError) as e:
        sys.stderr.write(f"rustka: the credential file: {e}\n")
        return EXIT_ERROR


def _run(args: argparse.Namespace, out: TextIO) -> int:
    path = credential_path(args)
    store = CredentialStore(path)
    if store.last_error is not None:
        raise CommandError(store.last_error)
    mechanisms = list(MECHANISMS) if args.mechanism == _BOTH else [args.mechanism]
    actor = getpass.getuser()
    if args.action == "list":
        users = store.users()
        rows = {
            user: {name: c.iterations for name, c in sorted(creds.items())}
            for user, creds in sorted(users.items())
        }
        if args.json:
            out.write(json.dumps(rows) + "\n")
        else:
            for user, creds in rows.items():
                described = ", ".join(f"{name} ({n} iterations)" for name, n in creds.items())
                out.write(f"{user}\t{described}\n")
        return EXIT_OK
    if args.action == "add":
        password = _new_password(args)
        for name in mechanisms:
            credential = derive_credential(MECHANISMS[name], password, iterations=args.iterations)
            store.upsert(args.name, name, credential)
            _audit(
                "user_upserted",
                user=args.name,
                mechanism=name,
                by=actor,
                via="rustka users",
                file=str(path),
            )
        out.write(f"{args.name}: {', '.join(mechanisms)} stored in {path}\n")
        return EXIT_OK
    removed = [name for name in mechanisms if store.delete(args.name, name)]
    for name in removed:
        _audit(
            "user_deleted",
            user=args.name,
            mechanism=name,
            by=actor,
            via="rustka users",
            file=str(path),
        )
    if not removed:
        raise CommandError(f"no {' or '.join(mechanisms)} credential for {args.name} in {path}")
    out.write(f"{args.name}: {', '.join(removed)} removed from {path}\n")
    return EXIT_OK
