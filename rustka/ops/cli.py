"""The `rustka` command: run a broker, and talk to one from a shell.

Client commands are thin: parse arguments, connect with `rustka.client.protocol`, make
one or a few calls, print. Everything a user sees on failure is one line on
stderr and a non-zero exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import stat
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, BinaryIO, TextIO

from rustka import __version__
from rustka.errors import RustkaError
from rustka.storage.record_batch import Record

Headers = Sequence[tuple[str, bytes | None]]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

DEFAULT_BROKER = "127.0.0.1:9092"
# Where every client command connects when --broker is not given, before the default.
BROKER_ENV = "RUSTKA_BROKER"


def _text(data: bytes | None) -> str:
    return "" if data is None else data.decode("utf-8", errors="backslashreplace")


def _print_record(out: TextIO, offset: int, key: bytes | None, value: bytes | None) -> None:
    out.write(f"{offset}\t{_text(key)}\t{_text(value)}\n")


class CommandError(Exception):
    """A one-line message for the user; the command exits with status 1."""


# -- serve ----------------------------------------------------------------------


def cmd_serve(argv: list[str]) -> int:
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


# -- client commands ----------------------------------------------------------


async def _connect(args: argparse.Namespace) -> Any:
    from twisted.internet import reactor

    from rustka.client.protocol import connect

    try:
        return await connect(
            reactor, args.broker, timeout=args.timeout, request_timeout=args.timeout
        )
    except Exception as e:
        raise CommandError(f"cannot reach the broker at {args.broker}: {e}") from e


async def cmd_produce(args: argparse.Namespace, out: TextIO) -> int:
    if args.file is not None:
        return await cmd_produce_file(args, out)
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


def _parse_line(line: bytes, fmt: str, lineno: int) -> tuple[bytes | None, bytes, Headers]:
    """One input line as (key, value, headers); CommandError names the line if it is bad."""
    if fmt == "tsv":
        key, tab, value = line.partition(b"\t")
        return (key, value, ()) if tab else (None, line, ())
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise CommandError(f"line {lineno}: not valid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise CommandError(f"line {lineno}: expected a JSON object with key/value/headers")
    key, value, headers = obj.get("key"), obj.get("value"), obj.get("headers") or {}
    if key is not None and not isinstance(key, str):
        raise CommandError(f"line {lineno}: key must be a string or null")
    if not isinstance(value, str):
        raise CommandError(f"line {lineno}: value must be a string")
    if not isinstance(headers, dict) or not all(
        isinstance(v, str) or v is None for v in headers.values()
    ):
        raise CommandError(f"line {lineno}: headers must map names to strings or null")
    return (
        None if key is None else key.encode(),
        value.encode(),
        tuple((str(k), None if v is None else v.encode()) for k, v in headers.items()),
    )


async def cmd_produce_file(args: argparse.Namespace, out: TextIO) -> int:
    """Send one record per input line through the batching producer, then summarise."""
    import os

    from rustka.client.producer import BatchingProducer
    from rustka.ops.progress import Progress

    if args.file == "-":
        source: BinaryIO = sys.stdin.buffer
    else:
        try:
            source = open(args.file, "rb")  # noqa: SIM115 - closed in the finally below
        except OSError as e:
            raise CommandError(f"cannot read {args.file}: {e.strerror or e}") from e
    try:
        st = os.fstat(source.fileno())
        total = st.st_size if stat.S_ISREG(st.st_mode) and st.st_size else None
    except (OSError, ValueError):
        total = None
    progress = Progress(sys.stderr, label=f"produce {args.topic}", total=total)
    ranges: dict[int, list[int]] = {}
    errors: list[BaseException] = []
    client = await _connect(args)
    try:
        producer = BatchingProducer(client)

        def acked(result: tuple[int, int]) -> None:
            partition, offset = result
            r = ranges.get(partition)
            if r is None:
                ranges[partition] = [offset, offset, 1]
            else:
                if offset < r[0]:
                    r[0] = offset
                if offset > r[1]:
                    r[1] = offset
                r[2] += 1

        def failed(failure: Any) -> None:
            errors.append(failure.value)

        send, topic, fmt = producer.send, args.topic, args.format
        sent = read = 0
        bad_line: CommandError | None = None
        for lineno, raw in enumerate(source, 1):
            read += len(raw)
            line = raw.rstrip(b"\n").rstrip(b"\r")
            if not line:
                continue
            try:
                key, value, headers = _parse_line(line, fmt, lineno)
            except CommandError as e:
                bad_line = e
                break
            send(topic, key, value, headers).addCallbacks(acked, failed)
            sent += 1
            if producer.buffered_bytes >= producer.buffer_bytes:
                await producer.wait_for_room()
                progress.update(sent, read)
        await producer.close()
        progress.update(sent, read)
        progress.finish()
    finally:
        if source is not sys.stdin.buffer:
            source.close()
        await client.close()
    written = sum(r[2] for r in ranges.values())
    if bad_line is not None:
        raise CommandError(f"{bad_line}; stopped there after producing {written} records")
    if errors:
        raise CommandError(
            f"{len(errors)} of {sent} records failed ({errors[0]}); {written} were produced"
        )
    parts = [
        {"partition": p, "first": r[0], "last": r[1], "records": r[2]}
        for p, r in sorted(ranges.items())
    ]
    data = {"topic": args.topic, "records": written, "partitions": parts}
    lines = [f"produced {written} records to {args.topic}\n"]
    lines += [
        f"  partition {d['partition']}: offsets {d['first']}-{d['last']} ({d['records']} records)\n"
        for d in parts
    ]
    _emit(out, args, data, lambda: "".join(lines))
    return EXIT_OK


def _record_json(record: Record) -> str:
    return json.dumps(
        {
            "offset": record.offset,
            "key": None if record.key is None else _text(record.key),
            "value": None if record.value is None else _text(record.value),
            "headers": {k: None if v is None else _text(v) for k, v in record.headers},
        }
    )


async def cmd_consume(args: argparse.Namespace, out: TextIO) -> int:
    """Read from the group's position to the end (or forever), committing after each batch."""
    from rustka.client.consumer import Consumer
    from rustka.errors import OffsetOutOfRange
    from rustka.ops.progress import Progress

    err = sys.stderr
    sink: TextIO = out
    if args.output is not None:
        try:
            sink = open(args.output, "w", encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError as e:
            raise CommandError(f"cannot write {args.output}: {e.strerror or e}") from e
    progress = Progress(err, label=f"consume {args.topic}/{args.partition}")
    first_last: list[int] = []
    client = await _connect(args)

    def on_reset(old: int, new: int) -> None:
        if new >= old:
            why = f"was deleted by retention; skipped {new - old} offsets"
        else:
            why = "is past the end of the log"
        err.write(
            f"rustka: committed offset {old} of group {args.group!r} {why}, resuming at "
            f"{new} ({args.reset})\n"
        )

    consumer = Consumer(
        client,
        args.group,
        args.topic,
        args.partition,
        reset=args.reset,
        commit_every_records=1,
        max_bytes=max(1, args.max_bytes),
        max_wait_ms=args.wait_ms,
        until_end=not args.follow,
        max_records=args.max_records,
        on_reset=on_reset,
    )
    as_json = args.json

    def deliver(records: list[Record]) -> None:
        if as_json:
            sink.write("".join(_record_json(r) + "\n" for r in records))
        else:
            sink.write("".join(f"{r.offset}\t{_text(r.key)}\t{_text(r.value)}\n" for r in records))
        sink.flush()
        if not first_last:
            first_last.append(records[0].offset or 0)
        start = consumer.start_offset or 0
        if consumer.high_watermark is not None and not args.follow:
            progress.total = consumer.high_watermark - start
        progress.update(consumer.delivered + len(records), (records[-1].offset or 0) + 1 - start)

    from twisted.internet import reactor

    # Ctrl-C or SIGTERM: stop after the batch in hand and commit what was printed, so
    # the next run resumes after it and no error is reported for the closed connection.
    stopped_by_shutdown: list[bool] = []

    def stop() -> Any:
        stopped_by_shutdown.append(True)
        return consumer.stop()

    trigger = reactor.addSystemEventTrigger("before", "shutdown", stop)
    try:
        await consumer.start(deliver)
    except OffsetOutOfRange as e:
        raise CommandError(str(e)) from e
    finally:
        if not stopped_by_shutdown:  # a fired trigger is already gone
            reactor.removeSystemEventTrigger(trigger)
        progress.finish()
        if sink is not out:
            sink.close()
        await client.close()
    if args.output is not None:
        data = {
            "topic": args.topic,
            "partition": args.partition,
            "records": consumer.delivered,
            "first": first_last[0] if first_last else None,
            "last": (consumer.position or 0) - 1 if first_last else None,
            "output": args.output,
        }
        span = f" (offsets {data['first']}-{data['last']})" if first_last else ""
        _emit(
            out,
            args,
            data,
            lambda: (
                f"consumed {consumer.delivered} records from {args.topic} partition "
                f"{args.partition}{span} into {args.output}\n"
            ),
        )
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

            _emit(out, args, data, table)
        elif args.action in ("create", "alter"):
            call = client.create_topic if args.action == "create" else client.alter_topic
            count = await call(args.topic, args.partitions)
            data = {"topic": args.topic, "partitions": count}
            verb = "created" if args.action == "create" else "now has"
            _emit(out, args, data, lambda: f"topic {args.topic} {verb} {count} partitions\n")
        elif args.action == "delete":
            await client.delete_topic(args.topic)
            data = {"topic": args.topic, "deleted": True}
            _emit(out, args, data, lambda: f"topic {args.topic} deleted with all its data\n")
    finally:
        await client.close()
    return EXIT_OK


async def _kafka_groups(args: argparse.Namespace, group: str | None) -> Any:
    """Kafka's view through the same address: ListGroups names, or one DescribeGroups entry.

    Members, state and assignments live in the group coordinator, which answers
    them through Kafka's group APIs (docs/kafka.md, "Consumer groups"); lag comes
    from the native DescribeGroup. None when the address does not speak Kafka
    (``kafka_enabled = false``): the native view is then all there is.
    """
    from twisted.internet import defer, reactor
    from twisted.internet.endpoints import connectProtocol
    from twisted.internet.error import ConnectError

    from rustka.client.protocol import _endpoint
    from rustka.kafka.client import KafkaClientProtocol

    def bounded(d: Any) -> Any:
        return d.addTimeout(args.timeout, reactor)

    proto = KafkaClientProtocol("rustka-cli")
    try:
        await bounded(connectProtocol(_endpoint(reactor, args.broker, args.timeout), proto))
        await bounded(defer.ensureDeferred(proto.negotiate()))
        if group is None:
            listed = await bounded(proto.request(16, {}))
            return [g["group_id"] for g in listed["groups"]]
        body = {"groups": [group], "include_authorized_operations": False}
        described = await bounded(proto.request(15, body))
        return described["groups"][0]
    except (RustkaError, ConnectError, OSError, defer.TimeoutError):
        return None
    finally:
        if proto.transport is not None:
            proto.transport.loseConnection()


def _describe_group(desc: Any, kafka: Any, group: str) -> dict[str, Any]:
    """One group for ``groups describe``: coordinator state and members beside the lag."""
    from rustka.broker.groups import consumer_assignment

    members = []
    owner: dict[tuple[str, int], dict[str, Any]] = {}
    for m in (kafka or {}).get("members", []):
        assignment = consumer_assignment(m["member_assignment"]) or {}
        member = {
            "member_id": m["member_id"],
            "instance_id": m.get("group_instance_id"),
            "client_id": m["client_id"],
            "client_host": m["client_host"],
            "assignment": assignment,
        }
        members.append(member)
        for topic, partitions in assignment.items():
            for partition in partitions:
                owner[(topic, partition)] = member
    offsets = []
    for e in desc:
        row = {
            "topic": e.topic,
            "partition": e.partition,
            "committed": e.committed,
            "end": e.high_watermark,
            "lag": max(0, e.high_watermark - max(e.committed, e.log_start)),
        }
        offsets.append(row)
    state = kafka["group_state"] if kafka else ("Empty" if offsets else "Dead")
    return {
        "group": group,
        "state": state,
        "protocol_type": (kafka or {}).get("protocol_type", ""),
        "protocol": (kafka or {}).get("protocol_data", ""),
        "members": members,
        "offsets": offsets,
        "_owner": owner,
    }


def _group_table(data: dict[str, Any]) -> str:
    """The offsets table; while members are active, their state, owners and assignments too."""
    owner = data["_owner"]
    active = bool(data["members"]) or data["state"] not in ("Empty", "Dead")
    lines = []
    if active:
        lines.append(
            f"group {data['group']}: state {data['state']}, protocol "
            f"{data['protocol_type']}/{data['protocol'] or '-'}, {len(data['members'])} member(s)"
        )
        lines.append("CLIENT-ID\tHOST\tASSIGNMENT\tMEMBER-ID")
        for m in data["members"]:
            assigned = " ".join(
                f"{t}[{','.join(map(str, ps))}]" for t, ps in sorted(m["assignment"].items())
            )
            lines.append(
                f"{m['client_id']}\t{m['client_host']}\t{assigned or '-'}\t{m['member_id']}"
            )
        lines.append("")
    header = "TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG"
    lines.append(header + ("\tCLIENT-ID\tHOST" if active else ""))
    for d in data["offsets"]:
        row = f"{d['topic']}\t{d['partition']}\t{d['committed']}\t{d['end']}\t{d['lag']}"
        if active:
            m = owner.get((d["topic"], d["partition"]))
            row += f"\t{m['client_id']}\t{m['client_host']}" if m else "\t-\t-"
        lines.append(row)
    return "\n".join(lines) + "\n"


async def cmd_groups(args: argparse.Namespace, out: TextIO) -> int:
    client = await _connect(args)
    try:
        if args.action == "list":
            native = await client.list_groups()
            groups = sorted(set(native) | set(await _kafka_groups(args, None) or ()))
            _emit(out, args, groups, lambda: "".join(f"{g}\n" for g in groups))
        elif args.action == "describe":
            desc = await client.describe_group(args.group)
            data = _describe_group(desc, await _kafka_groups(args, args.group), args.group)
            table = _group_table(data)
            del data["_owner"]
            _emit(out, args, data, lambda: table)
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


async def _mirror(args: argparse.Namespace, out: TextIO) -> int:
    from rustka.ops.mirror import cmd_mirror

    return await cmd_mirror(args, out)


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


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
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
            default=os.environ.get(BROKER_ENV) or DEFAULT_BROKER,
            help=f"HOST:PORT or a Twisted client endpoint string (default ${BROKER_ENV}, "
            f"else {DEFAULT_BROKER})",
        )
        sp.add_argument(
            "--timeout",
            type=_positive_seconds,
            default=10.0,
            help="seconds to wait for the connection and for each answer (a long-poll's "
            "own wait comes on top); default %(default)s",
        )
        sp.add_argument("--json", action="store_true", help="print JSON instead of text")
        return sp

    # listed for --help only: main() hands `serve ARGS` to rustka.ops.tap.Options
    sub.add_parser("serve", help="run a broker in the foreground (rustka serve --help)")
    from rustka.ops import inspect_cli

    inspect_cli.add_parsers(sub)

    p = client_parser(
        "produce",
        "append one record; prints its partition and offset",
        'examples:\n  rustka produce orders user-1 "placed order"\n'
        "  rustka produce --broker 10.0.0.5:9092 orders user-2 shipped\n"
        "  rustka produce orders --file orders.tsv       one KEY<TAB>VALUE per line\n"
        "  rustka produce orders --file - --format json  JSON lines from stdin\n"
        "a progress line is shown on stderr when it is a terminal\n",
    )
    p.add_argument("topic")
    p.add_argument("key", nargs="?")
    p.add_argument("value", nargs="?")
    p.add_argument(
        "--file", metavar="PATH", help="send one record per line of PATH ('-' for stdin)"
    )
    p.add_argument(
        "--format",
        choices=["tsv", "json"],
        default="tsv",
        help="--file lines: KEY<TAB>VALUE (no tab: value only) or JSON "
        '{"key": ..., "value": ..., "headers": {...}} (default %(default)s)',
    )

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
        "  rustka consume backup orders 0 --output orders-0.jsonl --json\n"
        "output: one line per record, OFFSET<TAB>KEY<TAB>VALUE (--json: JSON lines)\n",
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
    c.add_argument("--output", metavar="PATH", help="write the records to PATH and print a summary")

    t = client_parser(
        "topics",
        "list, describe, create, alter or delete topics",
        "examples:\n  rustka topics list\n  rustka topics describe orders\n"
        "  rustka topics create payments --partitions 6\n"
        "  rustka topics alter payments --partitions 12\n"
        "  rustka topics delete payments               removes every partition and record\n",
    )
    t.add_argument("action", choices=["list", "describe", "create", "alter", "delete"])
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

    m = client_parser(
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
    return parser


_CLIENT_COMMANDS: dict[str, Callable[[argparse.Namespace, TextIO], Coroutine[Any, Any, int]]] = {
    "produce": cmd_produce,
    "fetch": cmd_fetch,
    "consume": cmd_consume,
    "topics": cmd_topics,
    "groups": cmd_groups,
    "mirror": _mirror,
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
    if args.command == "produce":
        if args.file is not None and (args.key is not None or args.value is not None):
            parser.error("produce takes KEY VALUE or --file PATH, not both")
        if args.file is None and (args.key is None or args.value is None):
            parser.error("produce needs KEY and VALUE (or --file PATH)")
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
            return cmd_serve(argv[1:])
        except CommandError as e:
            sys.stderr.write(f"rustka: {e}\n")
            return EXIT_ERROR
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in ("dump", "check"):
        from rustka.ops import inspect_cli

        return inspect_cli.run(args)
    _check(args, parser)
    try:
        return _run_client(_CLIENT_COMMANDS[args.command], args)
    except CommandError as e:
        sys.stderr.write(f"rustka: {e}\n")
        return EXIT_ERROR


def _run_client(
    command: Callable[[argparse.Namespace, TextIO], Coroutine[Any, Any, int]],
    args: argparse.Namespace,
) -> int:
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


if __name__ == "__main__":
    sys.exit(main())
