"""The `rustka` command: run a broker, and talk to one from a shell.

Client commands are thin: parse arguments, connect with `rustka.client`, make
one or a few calls, print. Everything a user sees on failure is one line on
stderr and a non-zero exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TextIO

from rustka import __version__
from rustka.errors import RustkaError

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

DEFAULT_BROKER = "127.0.0.1:9092"


def _text(data: bytes | None) -> str:
    return "" if data is None else data.decode("utf-8", errors="backslashreplace")


def _print_record(out: TextIO, offset: int, key: bytes | None, value: bytes | None) -> None:
    out.write(f"{offset}\t{_text(key)}\t{_text(value)}\n")


class CommandError(Exception):
    """A one-line message for the user; the command exits with status 1."""


# -- serve ----------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the broker in the foreground until SIGINT/SIGTERM."""
    from twisted.internet import reactor
    from twisted.logger import globalLogBeginner, textFileLogObserver

    from rustka.config import ConfigError
    from rustka.logs import json_observer
    from rustka.tap import build_service, config_from_options

    opts = {
        "config": args.config,
        "data-dir": args.data_dir,
        "listen": args.listen,
        "port": args.port,
        "flush": args.flush,
        "max-segment-bytes": args.max_segment_bytes,
        "retention-bytes": args.retention_bytes,
        "metrics": args.metrics,
        "manhole": args.manhole,
        "manhole-authorized-keys": args.manhole_authorized_keys,
        "manhole-host-key": args.manhole_host_key,
    }
    try:
        config = config_from_options(opts)
        top = build_service(config, reactor)
    except ConfigError as e:
        raise CommandError(str(e)) from e
    observer = json_observer(sys.stderr) if config.log_format == "json" else None
    globalLogBeginner.beginLoggingTo(
        [observer or textFileLogObserver(sys.stderr)], redirectStandardIO=False
    )
    top.privilegedStartService()
    top.startService()
    reactor.addSystemEventTrigger("before", "shutdown", top.stopService)
    reactor.run()
    return EXIT_OK


# -- client commands ----------------------------------------------------------


async def _connect(args: argparse.Namespace) -> Any:
    from twisted.internet import reactor

    from rustka.client import connect

    try:
        return await connect(reactor, args.broker, timeout=args.timeout)
    except Exception as e:
        raise CommandError(f"cannot reach the broker at {args.broker}: {e}") from e


async def cmd_produce(args: argparse.Namespace, out: TextIO) -> int:
    client = await _connect(args)
    try:
        partition, offset = await client.produce(args.topic, args.key.encode(), args.value.encode())
    finally:
        await client.close()
    if args.json:
        out.write(json.dumps({"topic": args.topic, "partition": partition, "offset": offset}))
        out.write("\n")
    else:
        out.write(f"produced to {args.topic} partition {partition} at offset {offset}\n")
    return EXIT_OK


async def cmd_fetch(args: argparse.Namespace, out: TextIO) -> int:
    client = await _connect(args)
    try:
        record = await client.fetch(args.topic, args.partition, args.offset)
    finally:
        await client.close()
    if record is None:
        out.write(
            f"no record at {args.topic} partition {args.partition} offset {args.offset} "
            "(the partition ends before it)\n"
        )
        return EXIT_OK
    if args.json:
        out.write(
            json.dumps(
                {"offset": record.offset, "key": _text(record.key), "value": _text(record.value)}
            )
            + "\n"
        )
    else:
        _print_record(out, args.offset, record.key, record.value)
    return EXIT_OK


async def cmd_consume(args: argparse.Namespace, out: TextIO) -> int:
    """Read from the group's position to the end (or forever), committing as it goes."""
    from rustka.errors import OffsetOutOfRange

    client = await _connect(args)
    err = sys.stderr
    try:
        committed = await client.committed(args.group, args.topic, args.partition)
        if committed is None:
            meta = await client.metadata([args.topic])
            parts = meta[0].partitions
            if args.partition >= len(parts):
                raise CommandError(
                    f"topic {args.topic!r} has no partition {args.partition} (it has {len(parts)})"
                )
            position = parts[args.partition].log_start
        else:
            position = committed
        delivered = 0
        while args.max_records is None or delivered < args.max_records:
            try:
                result = await client.fetch_batch(
                    args.topic,
                    args.partition,
                    position,
                    max_bytes=args.max_bytes,
                    max_wait_ms=args.wait_ms if args.follow else 0,
                )
            except OffsetOutOfRange as e:
                if args.reset == "error" or position > e.end:
                    raise CommandError(str(e)) from e
                new_position = e.log_start if args.reset == "earliest" else e.end
                err.write(
                    f"rustka: committed offset {position} of group {args.group!r} was deleted by "
                    f"retention; skipped {new_position - position} offsets, resuming at "
                    f"{new_position} ({args.reset})\n"
                )
                position = new_position
                continue
            records = result.records
            if args.max_records is not None:
                records = records[: args.max_records - delivered]
            for record in records:
                _print_record(out, record.offset, record.key, record.value)
            out.flush()
            if records:
                delivered += len(records)
                position = records[-1].offset + 1
                await client.commit(args.group, args.topic, args.partition, position)
            elif result.next_offset > position:
                position = result.next_offset
                await client.commit(args.group, args.topic, args.partition, position)
            elif not args.follow:
                break
    finally:
        await client.close()
    return EXIT_OK


def _emit(out: TextIO, args: argparse.Namespace, data: Any, text: Callable[[], str]) -> None:
    if args.json:
        out.write(json.dumps(data, indent=None) + "\n")
    else:
        out.write(text())


async def cmd_topics(args: argparse.Namespace, out: TextIO) -> int:
    client = await _connect(args)
    try:
        if args.action == "list":
            meta = await client.metadata([])
            data = [{"topic": t.name, "partitions": len(t.partitions)} for t in meta]
            _emit(out, args, data, lambda: "".join(f"{t['topic']}\n" for t in data))
        elif args.action == "describe":
            meta = await client.metadata([args.topic] if args.topic else [])
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

            _emit(out, args, data, table)
        elif args.action in ("create", "alter"):
            call = client.create_topic if args.action == "create" else client.alter_topic
            count = await call(args.topic, args.partitions)
            data = {"topic": args.topic, "partitions": count}
            verb = "created" if args.action == "create" else "now has"
            _emit(out, args, data, lambda: f"topic {args.topic} {verb} {count} partitions\n")
    finally:
        await client.close()
    return EXIT_OK


async def cmd_groups(args: argparse.Namespace, out: TextIO) -> int:
    client = await _connect(args)
    try:
        if args.action == "list":
            groups = await client.list_groups()
            _emit(out, args, list(groups), lambda: "".join(f"{g}\n" for g in groups))
        elif args.action == "describe":
            desc = await client.describe_group(args.group)
            data = [
                {
                    "topic": e.topic,
                    "partition": e.partition,
                    "committed": e.committed,
                    "end": e.high_watermark,
                    "lag": max(0, e.high_watermark - max(e.committed, e.log_start)),
                }
                for e in desc.entries
            ]

            def table() -> str:
                lines = ["TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG"]
                lines += [
                    f"{d['topic']}\t{d['partition']}\t{d['committed']}\t{d['end']}\t{d['lag']}"
                    for d in data
                ]
                return "\n".join(lines) + "\n"

            _emit(out, args, data, table)
        elif args.action == "reset":
            meta = await client.metadata([args.topic])
            parts = meta[0].partitions
            targets = range(len(parts)) if args.partition is None else [args.partition]
            data = []
            for partition in targets:
                if partition >= len(parts):
                    raise CommandError(f"topic {args.topic!r} has no partition {partition}")
                pm = parts[partition]
                if args.to == "earliest":
                    offset = pm.log_start
                elif args.to == "latest":
                    offset = pm.high_watermark
                else:
                    try:
                        offset = int(args.to)
                    except ValueError as e:
                        raise CommandError(
                            f"--to must be earliest, latest or an offset, got {args.to!r}"
                        ) from e
                await client.commit(args.group, args.topic, partition, offset)
                data.append({"topic": args.topic, "partition": partition, "offset": offset})
            _emit(
                out,
                args,
                data,
                lambda: "".join(
                    f"group {args.group} {d['topic']} partition {d['partition']} -> {d['offset']}\n"
                    for d in data
                ),
            )
    finally:
        await client.close()
    return EXIT_OK


# -- argument parsing -----------------------------------------------------------

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


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rustka",
        description="rustka: a small Kafka-style event streaming broker.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rustka {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def client_parser(name: str, help: str, epilog: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(
            name, help=help, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        sp.add_argument(
            "--broker",
            default=DEFAULT_BROKER,
            help="HOST:PORT or a Twisted client endpoint string (default %(default)s)",
        )
        sp.add_argument("--timeout", type=float, default=10.0, help="connect timeout in seconds")
        sp.add_argument("--json", action="store_true", help="print JSON instead of text")
        return sp

    s = sub.add_parser(
        "serve",
        help="run a broker in the foreground",
        epilog="examples:\n  rustka serve\n  rustka serve 1000000 50000000\n"
        "  rustka serve --data-dir /tmp/rk --port 19092\n"
        "  rustka serve --config etc/rustka.toml\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("max_segment_bytes", nargs="?", help="roll segments at this many bytes")
    s.add_argument("retention_bytes", nargs="?", help="keep at most this many bytes per partition")
    s.add_argument("--config", help="TOML config file (see etc/rustka.toml)")
    s.add_argument("--data-dir", help="data directory (default ./data)")
    s.add_argument("--listen", action="append", default=[], help="Twisted endpoint (repeatable)")
    s.add_argument("--port", type=int, help="shorthand for --listen tcp:PORT:interface=127.0.0.1")
    s.add_argument("--flush", choices=["always", "interval", "never"], help="durability policy")
    s.add_argument("--metrics", help="serve Prometheus /metrics on this endpoint")
    s.add_argument("--manhole", help="SSH admin shell endpoint (needs authorized keys)")
    s.add_argument("--manhole-authorized-keys", help="OpenSSH authorized_keys file")
    s.add_argument("--manhole-host-key", help="host key path (default DATA_DIR/manhole_host_key)")

    p = client_parser(
        "produce",
        "append one record; prints its partition and offset",
        'examples:\n  rustka produce orders user-1 "placed order"\n'
        "  rustka produce --broker 10.0.0.5:9092 orders user-2 shipped\n",
    )
    p.add_argument("topic")
    p.add_argument("key")
    p.add_argument("value")

    f = client_parser(
        "fetch",
        "print the record at TOPIC PARTITION OFFSET",
        "examples:\n  rustka fetch orders 2 0\n  rustka fetch --json orders 0 17\n",
    )
    f.add_argument("topic")
    f.add_argument("partition", type=_positive_int)
    f.add_argument("offset", type=_positive_int)

    c = client_parser(
        "consume",
        "read a partition as a consumer group, committing as it goes",
        "examples:\n  rustka consume analytics orders 2\n"
        "  rustka consume analytics orders 2 --follow\n"
        "  rustka consume audit orders 0 --reset latest\n"
        "output: one line per record, OFFSET<TAB>KEY<TAB>VALUE\n",
    )
    c.add_argument("group")
    c.add_argument("topic")
    c.add_argument("partition", type=_positive_int)
    c.add_argument("--follow", action="store_true", help="keep waiting for new records")
    c.add_argument(
        "--reset",
        choices=["earliest", "latest", "error"],
        default="earliest",
        help="where to resume when the committed offset was deleted by retention",
    )
    c.add_argument("--max-records", type=_positive_int, help="stop after this many records")
    c.add_argument("--max-bytes", type=_positive_int, default=1024 * 1024)
    c.add_argument("--wait-ms", type=_positive_int, default=5000, help="long-poll wait (--follow)")

    t = client_parser(
        "topics",
        "list, describe, create or alter topics",
        "examples:\n  rustka topics list\n  rustka topics describe orders\n"
        "  rustka topics create payments --partitions 6\n"
        "  rustka topics alter payments --partitions 12\n",
    )
    t.add_argument("action", choices=["list", "describe", "create", "alter"])
    t.add_argument("topic", nargs="?")
    t.add_argument("--partitions", type=_positive_int, default=None)

    g = client_parser(
        "groups",
        "list groups, show their offsets and lag, or move them",
        "examples:\n  rustka groups list\n  rustka groups describe analytics\n"
        "  rustka groups reset analytics orders --to earliest\n"
        "  rustka groups reset analytics orders --partition 2 --to 1500\n",
    )
    g.add_argument("action", choices=["list", "describe", "reset"])
    g.add_argument("group", nargs="?")
    g.add_argument("topic", nargs="?")
    g.add_argument("--partition", type=_positive_int, default=None)
    g.add_argument("--to", default="earliest", help="earliest | latest | OFFSET")
    return parser


_CLIENT_COMMANDS: dict[str, Callable[[argparse.Namespace, TextIO], Coroutine[Any, Any, int]]] = {
    "produce": cmd_produce,
    "fetch": cmd_fetch,
    "consume": cmd_consume,
    "topics": cmd_topics,
    "groups": cmd_groups,
}


def _check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    if args.command == "topics":
        if args.action != "list" and args.action != "describe" and not args.topic:
            parser.error(f"topics {args.action} needs a TOPIC")
        if args.action in ("create", "alter") and not args.partitions:
            parser.error(f"topics {args.action} needs --partitions N (N >= 1)")
    if args.command == "groups":
        if args.action in ("describe", "reset") and not args.group:
            parser.error(f"groups {args.action} needs a GROUP")
        if args.action == "reset" and not args.topic:
            parser.error("groups reset needs GROUP TOPIC")
    if args.command in ("produce", "fetch", "consume", "topics") and getattr(args, "topic", None):
        from rustka.names import validate_topic

        try:
            validate_topic(args.topic)
        except RustkaError as e:
            parser.error(str(e))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _check(args, parser)
    try:
        if args.command == "serve":
            return cmd_serve(args)
        return _run_client(_CLIENT_COMMANDS[args.command], args)
    except CommandError as e:
        sys.stderr.write(f"rustka: {e}\n")
        return EXIT_ERROR


def _run_client(
    command: Callable[[argparse.Namespace, TextIO], Coroutine[Any, Any, int]],
    args: argparse.Namespace,
) -> int:
    from twisted.internet import defer, task

    status = [EXIT_OK]

    async def run(reactor: Any) -> None:
        try:
            status[0] = await command(args, sys.stdout)
        except CommandError as e:
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


if __name__ == "__main__":
    sys.exit(main())
