"""``rustka produce``, ``fetch`` and ``consume``: records in and out from a shell."""

from __future__ import annotations

import argparse
import json
import stat
import sys
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO, TextIO

from rustka.ops.cli.common import (
    EXIT_OK,
    ClientCommand,
    CommandError,
    add_client_parser,
    connect,
    emit,
    positive_int,
    run_client,
    text_of,
)
from rustka.record.batch import Record

Headers = Sequence[tuple[str, bytes | None]]

COMMANDS = ("produce", "fetch", "consume")


def add_parsers(sub: Any) -> None:
    """Register produce, fetch and consume."""
    p = add_client_parser(
        sub,
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

    f = add_client_parser(
        sub,
        "fetch",
        "print the record at TOPIC PARTITION OFFSET",
        "examples:\n  rustka fetch orders 2 0\n  rustka fetch --json orders 0 17\n",
    )
    f.add_argument("topic")
    f.add_argument("partition", type=positive_int)
    f.add_argument("offset", type=positive_int)

    c = add_client_parser(
        sub,
        "consume",
        "read a partition as a consumer group, committing as it goes; or, with "
        "--share, take records of a topic as a share group's worker (a queue)",
        "examples:\n  rustka consume analytics orders 2\n"
        "  rustka consume analytics orders 2 --follow\n"
        "  rustka consume audit orders 0 --reset latest\n"
        "  rustka consume backup orders 0 --output orders-0.jsonl --json\n"
        "  rustka consume --share workers jobs --follow   one worker; start more at once\n"
        "output: one line per record, OFFSET<TAB>KEY<TAB>VALUE (--json: JSON lines);\n"
        "with --share PARTITION<TAB>OFFSET<TAB>KEY<TAB>VALUE, each record accepted once\n"
        "printed, so no other worker of the group prints it\n",
    )
    c.add_argument("group")
    c.add_argument("topic")
    c.add_argument("partition", type=positive_int, nargs="?")
    c.add_argument(
        "--share",
        action="store_true",
        help="GROUP is a share group: take records of any partition, several workers at once",
    )
    c.add_argument(
        "--from-beginning",
        action="store_true",
        help="--share: partitions the group never read start at their first record "
        "(default: the group's share.auto.offset.reset, latest)",
    )
    c.add_argument("--follow", action="store_true", help="keep waiting for new records")
    c.add_argument(
        "--reset",
        choices=["earliest", "latest", "error"],
        default="earliest",
        help="where to resume when the committed offset was deleted by retention",
    )
    c.add_argument("--max-records", type=positive_int, help="stop after this many records")
    c.add_argument("--max-bytes", type=positive_int, default=1024 * 1024)
    c.add_argument("--wait-ms", type=positive_int, default=5000, help="long-poll wait (--follow)")
    c.add_argument("--output", metavar="PATH", help="write the records to PATH and print a summary")


def check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """What argparse cannot say: produce takes KEY VALUE or --file, one of the two;
    consume takes a PARTITION, except with --share, which takes none."""
    if args.command == "consume":
        if args.share and args.partition is not None:
            parser.error("consume --share takes GROUP TOPIC: a share group reads every partition")
        if not args.share and args.partition is None:
            parser.error("consume needs GROUP TOPIC PARTITION (or --share GROUP TOPIC)")
        if args.from_beginning and not args.share:
            parser.error("--from-beginning goes with --share (consume uses --reset)")
    if args.command == "produce":
        if args.file is not None and (args.key is not None or args.value is not None):
            parser.error("produce takes KEY VALUE or --file PATH, not both")
        if args.file is None and (args.key is None or args.value is None):
            parser.error("produce needs KEY and VALUE (or --file PATH)")


def run(args: argparse.Namespace) -> int:
    return run_client(_COMMANDS[args.command], args)


def _print_record(out: TextIO, offset: int, key: bytes | None, value: bytes | None) -> None:
    out.write(f"{offset}\t{text_of(key)}\t{text_of(value)}\n")


async def cmd_produce(args: argparse.Namespace, out: TextIO) -> int:
    if args.file is not None:
        return await cmd_produce_file(args, out)
    client = await connect(args)
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
    client = await connect(args)
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
                {
                    "offset": record.offset,
                    "key": text_of(record.key),
                    "value": text_of(record.value),
                }
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
    client = await connect(args)
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
    emit(out, args, data, lambda: "".join(lines))
    return EXIT_OK


def _record_json(record: Record) -> str:
    return json.dumps(
        {
            "offset": record.offset,
            "key": None if record.key is None else text_of(record.key),
            "value": None if record.value is None else text_of(record.value),
            "headers": {k: None if v is None else text_of(v) for k, v in record.headers},
        }
    )


async def cmd_consume(args: argparse.Namespace, out: TextIO) -> int:
    """Read from the group's position to the end (or forever), committing after each batch."""
    if args.share:
        return await _consume_share(args, out)
    from rustka.client.consumer import Consumer
    from rustka.errors import OffsetOutOfRange
    from rustka.ops.progress import Progress

    err = sys.stderr
    sink = _open_sink(args, out)
    progress = Progress(err, label=f"consume {args.topic}/{args.partition}")
    first_last: list[int] = []
    client = await connect(args)

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
            sink.write(
                "".join(f"{r.offset}\t{text_of(r.key)}\t{text_of(r.value)}\n" for r in records)
            )
        sink.flush()
        if not first_last:
            first_last.append(records[0].offset or 0)
        start = consumer.start_offset or 0
        if consumer.high_watermark is not None and not args.follow:
            progress.total = consumer.high_watermark - start
        progress.update(consumer.delivered + len(records), (records[-1].offset or 0) + 1 - start)

    # Ctrl-C or SIGTERM: stop after the batch in hand and commit what was printed, so
    # the next run resumes after it and no error is reported for the closed connection.
    shutdown = _StopOnShutdown(consumer.stop)
    try:
        await consumer.start(deliver)
    except OffsetOutOfRange as e:
        raise CommandError(str(e)) from e
    finally:
        shutdown.remove()
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
        emit(
            out,
            args,
            data,
            lambda: (
                f"consumed {consumer.delivered} records from {args.topic} partition "
                f"{args.partition}{span} into {args.output}\n"
            ),
        )
    return EXIT_OK


async def _consume_share(args: argparse.Namespace, out: TextIO) -> int:
    """``consume --share``: one worker of a share group (docs/protocol.md 7.16). Each
    batch is printed, then accepted, so a record is printed by one worker only; without
    --follow it stops once a wait of --wait-ms brings nothing."""
    from rustka.client.share_consumer import ShareConsumer, ShareRecord

    sink = _open_sink(args, out)
    client = await connect(args)
    worker = ShareConsumer(
        client,
        args.group,
        args.topic,
        start="earliest" if args.from_beginning else None,
        max_wait_ms=args.wait_ms,
    )
    taken = 0
    as_json = args.json
    limit = args.max_records

    def deliver(records: list[ShareRecord]) -> None:
        nonlocal taken
        if as_json:
            sink.write("".join(_share_json(r) + "\n" for r in records))
        else:
            sink.write(
                "".join(
                    f"{r.partition}\t{r.record.offset}\t{text_of(r.record.key)}\t"
                    f"{text_of(r.record.value)}\n"
                    for r in records
                )
            )
        sink.flush()
        taken += len(records)

    shutdown = _StopOnShutdown(worker.stop)
    try:
        while not shutdown.fired and (limit is None or taken < limit):
            batch = await worker.poll(100 if limit is None else min(100, limit - taken))
            if not batch:
                if args.follow:
                    continue
                break
            deliver(batch)
            await worker.acknowledge(batch, "accept")
        if not shutdown.fired:
            await worker.stop()
    finally:
        shutdown.remove()
        if sink is not out:
            sink.close()
        await client.close()
    if args.output is not None:
        data = {"topic": args.topic, "group": args.group, "records": taken, "output": args.output}
        emit(
            out,
            args,
            data,
            lambda: f"took {taken} records of {args.topic} for {args.group} into {args.output}\n",
        )
    return EXIT_OK


def _open_sink(args: argparse.Namespace, out: TextIO) -> TextIO:
    """Where consumed records go: ``--output PATH`` (the caller closes it) or ``out``."""
    if args.output is None:
        return out
    try:
        return open(args.output, "w", encoding="utf-8")
    except OSError as e:
        raise CommandError(f"cannot write {args.output}: {e.strerror or e}") from e


class _StopOnShutdown:
    """Ctrl-C or SIGTERM while consuming: ``stop`` runs once, before the reactor stops;
    `remove` takes the trigger back when the run ends first."""

    def __init__(self, stop: Callable[[], Any]) -> None:
        from twisted.internet import reactor

        self.fired = False
        self._stop = stop
        self._reactor = reactor
        self._trigger = reactor.addSystemEventTrigger("before", "shutdown", self._fire)

    def _fire(self) -> Any:
        self.fired = True
        return self._stop()

    def remove(self) -> None:
        if not self.fired:  # a fired trigger is already gone
            self._reactor.removeSystemEventTrigger(self._trigger)


def _share_json(r: Any) -> str:
    record = r.record
    return json.dumps(
        {
            "partition": r.partition,
            "offset": record.offset,
            "delivery_count": r.delivery_count,
            "key": None if record.key is None else text_of(record.key),
            "value": None if record.value is None else text_of(record.value),
            "headers": {k: None if v is None else text_of(v) for k, v in record.headers},
        }
    )


_COMMANDS: dict[str, ClientCommand] = {
    "produce": cmd_produce,
    "fetch": cmd_fetch,
    "consume": cmd_consume,
}
