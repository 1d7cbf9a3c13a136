"""``rustka topics``: list, describe, create, alter and delete topics, and their configs.

A topic's configs are Kafka topic configs by Kafka's names (docs/kafka.md, "Topic
configs"), the same a Kafka client sets: ``--config KEY=VALUE`` on create and alter,
``--delete-config KEY`` on alter; describe shows the topic's own. ``delete-records``
moves a partition's log start (Kafka's DeleteRecords, docs/kafka.md "DeleteRecords").
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any, TextIO

from rustka.native.codec import CONFIG_SOURCES
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
        "  rustka topics create state --partitions 1 --config cleanup.policy=compact\n"
        "  rustka topics alter payments --partitions 12\n"
        "  rustka topics alter payments --config retention.ms=-1 --delete-config segment.ms\n"
        "  rustka topics delete payments               removes every partition and record\n"
        "  rustka topics delete-records payments --partition 0 --before 1000\n"
        "  rustka topics delete-records payments --partition 0 --before end\n",
    )
    t.add_argument(
        "action", choices=["list", "describe", "create", "alter", "delete", "delete-records"]
    )
    t.add_argument("topic", nargs="?")
    t.add_argument("--partitions", type=positive_int, default=None)
    t.add_argument(
        "--config",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic config (create, alter); repeatable",
    )
    t.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="KEY",
        help="a topic config to drop, back to the broker's value (alter); repeatable",
    )
    t.add_argument("--partition", type=int, default=None, help="the partition (delete-records)")
    t.add_argument(
        "--before",
        type=offset_or_end,
        default=None,
        metavar="OFFSET",
        help="delete the records below OFFSET, or 'end' for all (delete-records)",
    )


def offset_or_end(text: str) -> int:
    """An offset >= 0, or ``end`` (-1, Kafka's value for it): up to the high watermark."""
    if text == "end":
        return -1
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an offset or 'end', got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"an offset is >= 0 (or 'end'), got {value}")
    return value


def key_value(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` as a pair; the value may hold '=' and may be empty."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    if args.action != "list" and args.action != "describe" and not args.topic:
        parser.error(f"topics {args.action} needs a TOPIC")
    if args.action == "create" and not args.partitions:
        parser.error("topics create needs --partitions N (N >= 1)")
    if args.action == "alter" and not (args.partitions or args.config or args.delete_config):
        parser.error("topics alter needs --partitions N, --config KEY=VALUE or --delete-config KEY")
    if args.action not in ("create", "alter") and args.config:
        parser.error(f"topics {args.action} takes no --config")
    if args.action != "alter" and args.delete_config:
        parser.error(f"topics {args.action} takes no --delete-config")
    if args.action == "delete-records":
        if args.partition is None or args.partition < 0:
            parser.error("topics delete-records needs --partition P (P >= 0)")
        if args.before is None:
            parser.error("topics delete-records needs --before OFFSET (or --before end)")
    elif args.partition is not None or args.before is not None:
        parser.error(f"topics {args.action} takes no --partition or --before")
    keys = [k for k, _ in args.config] + list(args.delete_config)
    if len(set(keys)) != len(keys):
        parser.error(f"a config is named twice: {', '.join(keys)}")


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
            named = [args.topic] if args.topic is not None else []
            logs = await client.describe_logs(named)
            stable = await _stable_offsets(client, named)
            data = [_described(t, stable.get(t.name)) for t in logs]
            for topic in data:
                configs = await client.describe_topic_configs(topic["topic"])
                topic["configs"] = _own(configs)
            emit(out, args, data, lambda: _describe_table(data) + _configs_table(data))
        elif args.action == "create":
            configs = dict(args.config)
            count = await client.create_topic(args.topic, args.partitions, configs)
            data: dict[str, Any] = {"topic": args.topic, "partitions": count}
            if configs:
                data["configs"] = configs
            text = f"topic {args.topic} created {count} partitions\n" + _config_lines(configs)
            emit(out, args, data, lambda: text)
        elif args.action == "alter":
            data = {"topic": args.topic}
            lines: list[str] = []
            if args.partitions:
                count = await client.alter_topic(args.topic, args.partitions)
                data["partitions"] = count
                lines.append(f"topic {args.topic} now has {count} partitions\n")
            if args.config or args.delete_config:
                configs = await client.alter_topic_configs(
                    args.topic, dict(args.config), args.delete_config
                )
                own = _own(configs)
                data["configs"] = own
                lines.append(f"topic {args.topic} has configs of its own:\n")
                lines.append(_config_lines(own) or "  (none: the broker's settings)\n")
            emit(out, args, data, lambda: "".join(lines))
        elif args.action == "delete-records":
            start = await client.delete_records(args.topic, args.partition, args.before)
            data = {"topic": args.topic, "partition": args.partition, "log_start": start}
            text = f"topic {args.topic} partition {args.partition} now starts at offset {start}\n"
            emit(out, args, data, lambda: text)
        elif args.action == "delete":
            await client.delete_topic(args.topic)
            data = {"topic": args.topic, "deleted": True}
            emit(out, args, data, lambda: f"topic {args.topic} deleted with all its data\n")
    finally:
        await client.close()
    return EXIT_OK


async def _stable_offsets(client: Any, topics: list[str]) -> dict[str, Any]:
    """Topic -> its partitions' last stable offsets and open transactions (DescribeStableOffsets,
    docs/protocol.md 7.15); empty from a broker older than the op, which answers Error."""
    from rustka.client.protocol import BrokerError

    try:
        found = await client.describe_stable_offsets(topics)
    except BrokerError:
        return {}
    return {t.name: t.partitions for t in found}


def _described(topic: Any, stable: Any = None) -> dict[str, Any]:
    """A DescribeLogs topic as plain data: bounds and size per partition, its last stable
    offset and the transactions open on it (docs/kafka.md, "Transactions"), and on a
    compacted topic what the log cleaner knows (docs/kafka.md, "Log compaction")."""
    compacted = "compact" in topic.cleanup_policy.split(",")
    partitions = []
    for i, log in enumerate(topic.partitions):
        entry: dict[str, Any] = {
            "partition": i,
            "log_start": log.log_start,
            "end": log.high_watermark,
            "bytes": log.size_bytes,
            "segments": log.segments,
        }
        if stable is not None and i < len(stable):
            entry["last_stable"] = stable[i].last_stable_offset
            entry["open_transactions"] = [
                {
                    "producer_id": t.producer_id,
                    "producer_epoch": t.producer_epoch,
                    "first_offset": t.first_offset,
                }
                for t in stable[i].open
            ]
        if compacted:
            entry["cleaner"] = {
                "dirty_ratio": log.dirty_ratio_ppm / 1_000_000,
                "first_dirty": log.first_dirty,
                "bytes_read": log.cleaner_bytes_read,
                "bytes_written": log.cleaner_bytes_written,
                "last_clean": _when(log.last_clean_ms),
                "uncleanable": log.uncleanable or None,
            }
        partitions.append(entry)
    return {"topic": topic.name, "cleanup_policy": topic.cleanup_policy, "partitions": partitions}


def _when(ms: int) -> str | None:
    if not ms:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def _describe_table(data: list[dict[str, Any]]) -> str:
    cleaner = any("cleaner" in p for t in data for p in t["partitions"])
    head = "TOPIC\tPARTITION\tLOG-START\tEND\tLAST-STABLE\tOPEN-TXNS\tRECORDS\tBYTES"
    if cleaner:
        head += "\tPOLICY\tDIRTY\tLAST-CLEAN\tCLEANER-READ\tCLEANER-WRITTEN"
    lines = [head]
    for t in data:
        for pm in t["partitions"]:
            line = (
                f"{t['topic']}\t{pm['partition']}\t{pm['log_start']}\t{pm['end']}"
                f"\t{pm.get('last_stable', '-')}\t{_open_txns(pm)}"
                f"\t{pm['end'] - pm['log_start']}\t{pm['bytes']}"
            )
            if cleaner:
                c = pm.get("cleaner")
                if c is None:
                    line += f"\t{t['cleanup_policy']}\t-\t-\t-\t-"
                else:
                    last = c["last_clean"] or "never"
                    if c["uncleanable"]:
                        last = f"uncleanable: {c['uncleanable']}"
                    line += (
                        f"\t{t['cleanup_policy']}\t{c['dirty_ratio']:.1%}\t{last}"
                        f"\t{c['bytes_read']}\t{c['bytes_written']}"
                    )
            lines.append(line)
    return "\n".join(lines) + "\n"


def _open_txns(partition: dict[str, Any]) -> str:
    """How many transactions are open on the partition, with their producer ids."""
    txns = partition.get("open_transactions")
    if txns is None:
        return "-"
    if not txns:
        return "0"
    return f"{len(txns)} (producer {','.join(str(t['producer_id']) for t in txns)})"


def _own(configs: list[Any]) -> dict[str, str]:
    """The topic's own configs out of a TopicConfigs answer (source "topic")."""
    return {c.name: c.value for c in configs if CONFIG_SOURCES[c.source] == "topic"}


def _config_lines(configs: dict[str, str]) -> str:
    return "".join(f"  {key}={value}\n" for key, value in configs.items())


def _configs_table(data: list[dict[str, Any]]) -> str:
    """The topics' own configs after the partitions, when any topic has some."""
    rows = [(t["topic"], k, v) for t in data for k, v in t["configs"].items()]
    if not rows:
        return ""
    return "TOPIC\tCONFIG\tVALUE\n" + "".join(f"{t}\t{k}\t{v}\n" for t, k, v in rows)
