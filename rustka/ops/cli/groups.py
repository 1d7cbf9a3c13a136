"""``rustka groups``: list groups, show their offsets, lag and members, or move them."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from rustka.errors import RustkaError
from rustka.ops.assignments import consumer_assignment
from rustka.ops.cli.common import (
    EXIT_OK,
    CommandError,
    add_client_parser,
    connect,
    emit,
    positive_int,
    run_client,
)

COMMANDS = ("groups",)


def add_parsers(sub: Any) -> None:
    g = add_client_parser(
        sub,
        "groups",
        "list groups, show their offsets and lag, or move them",
        "examples:\n  rustka groups list\n  rustka groups describe analytics\n"
        "  rustka groups reset analytics orders --to earliest\n"
        "  rustka groups reset analytics orders --partition 2 --to 1500\n"
        "  rustka groups delete workers          a share group's state (all topics)\n"
        "  rustka groups delete workers jobs     ... for one topic\n"
        "reset and delete of a share group need it idle: no members, no records held\n",
    )
    g.add_argument("action", choices=["list", "describe", "reset", "delete"])
    g.add_argument("group", nargs="?")
    g.add_argument("topic", nargs="?")
    g.add_argument("--partition", type=positive_int, default=None)
    g.add_argument("--to", default="earliest", help="earliest | latest | OFFSET")


def check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    if args.action in ("describe", "reset", "delete") and not args.group:
        parser.error(f"groups {args.action} needs a GROUP")
    if args.action == "reset" and not args.topic:
        parser.error("groups reset needs GROUP TOPIC")


def run(args: argparse.Namespace) -> int:
    return run_client(cmd_groups, args)


async def _kafka_groups(args: argparse.Namespace, group: str | None) -> Any:
    """Kafka's view through the same address: every group with its type and state
    (ListGroups), or one group (ConsumerGroupDescribe for a consumer-protocol group,
    else DescribeGroups), its description tagged with ``type``.

    Members, state and assignments live in the group coordinator, which answers
    them through Kafka's group APIs (docs/kafka.md, "Consumer groups", "Consumer
    groups (KIP-848)"); lag comes from the native DescribeGroup. None when the
    address does not speak Kafka (``kafka_enabled = false``): the native view is then
    all there is.
    """
    from twisted.internet import defer, reactor
    from twisted.internet.endpoints import connectProtocol
    from twisted.internet.error import ConnectError

    from rustka.client.protocol import client_endpoint
    from rustka.kafka.client import KafkaClientProtocol

    def bounded(d: Any) -> Any:
        return d.addTimeout(args.timeout, reactor)

    proto = KafkaClientProtocol("rustka-cli")
    try:
        await bounded(connectProtocol(client_endpoint(reactor, args.broker, args.timeout), proto))
        await bounded(defer.ensureDeferred(proto.negotiate()))
        if group is None:
            listed = await bounded(proto.request(16, {}))
            return {
                g["group_id"]: (g.get("group_type") or "classic", g.get("group_state", ""))
                for g in listed["groups"]
            }
        body = {"group_ids": [group], "include_authorized_operations": False}
        consumer = (await bounded(proto.request(_CONSUMER_GROUP_DESCRIBE, body)))["groups"][0]
        if consumer["error_code"] == 0:
            return {**consumer, "type": "consumer"}
        body = {"groups": [group], "include_authorized_operations": False}
        described = await bounded(proto.request(15, body))
        return {**described["groups"][0], "type": "classic"}
    except (RustkaError, ConnectError, OSError, defer.TimeoutError):
        return None
    finally:
        if proto.transport is not None:
            proto.transport.loseConnection()


_CONSUMER_GROUP_DESCRIBE = 69


def _consumer_group(desc: Any, kafka: dict[str, Any], group: str) -> dict[str, Any]:
    """A consumer-protocol group (KIP-848) for ``groups describe``: its epochs, each
    member's epoch, assignment and target assignment, beside the lag."""

    def partitions(assignment: Any) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for tp in (assignment or {}).get("topic_partitions", ()):
            out.setdefault(tp["topic_name"], []).extend(sorted(tp["partitions"]))
        return out

    members = [
        {
            "member_id": m["member_id"],
            "instance_id": m.get("instance_id"),
            "member_epoch": m["member_epoch"],
            "client_id": m["client_id"],
            "client_host": m["client_host"],
            "subscribed_topics": list(m.get("subscribed_topic_names") or ()),
            "subscribed_regex": m.get("subscribed_topic_regex"),
            "assignment": partitions(m.get("assignment")),
            "target_assignment": partitions(m.get("target_assignment")),
        }
        for m in kafka["members"]
    ]
    return {
        "group": group,
        "type": "consumer",
        "state": kafka["group_state"],
        "group_epoch": kafka["group_epoch"],
        "assignment_epoch": kafka["assignment_epoch"],
        "assignor": kafka["assignor_name"],
        "members": members,
        "offsets": _offset_rows(desc),
    }


def _consumer_table(data: dict[str, Any]) -> str:
    lines = [
        f"consumer group {data['group']}: state {data['state']}, epoch {data['group_epoch']} "
        f"(assignment {data['assignment_epoch']}), assignor {data['assignor']}, "
        f"{len(data['members'])} member(s)"
    ]
    if data["members"]:
        lines.append("MEMBER-ID\tEPOCH\tCLIENT-ID\tHOST\tASSIGNMENT\tTARGET")
        for m in data["members"]:
            lines.append(
                f"{m['member_id']}\t{m['member_epoch']}\t{m['client_id']}\t{m['client_host']}\t"
                f"{_partitions_text(m['assignment'])}\t{_partitions_text(m['target_assignment'])}"
            )
    lines.append("")
    lines.append("TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG")
    for d in data["offsets"]:
        lines.append(f"{d['topic']}\t{d['partition']}\t{d['committed']}\t{d['end']}\t{d['lag']}")
    return "\n".join(lines) + "\n"


def _partitions_text(assignment: dict[str, list[int]]) -> str:
    return " ".join(f"{t}[{','.join(map(str, ps))}]" for t, ps in sorted(assignment.items())) or "-"


def _offset_rows(desc: Any) -> list[dict[str, Any]]:
    return [
        {
            "topic": e.topic,
            "partition": e.partition,
            "committed": e.committed,
            "end": e.high_watermark,
            "lag": max(0, e.high_watermark - max(e.committed, e.log_start)),
        }
        for e in desc
    ]


def _describe_group(desc: Any, kafka: Any, group: str) -> dict[str, Any]:
    """One group for ``groups describe``: coordinator state and members beside the lag."""
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
    offsets = _offset_rows(desc)
    state = kafka["group_state"] if kafka else ("Empty" if offsets else "Dead")
    return {
        "group": group,
        "type": "classic",
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


def _share_group(desc: Any) -> dict[str, Any]:
    """A share group for ``groups describe`` (docs/protocol.md 7.16): its members and
    each started partition's in-flight window."""
    members = []
    for m in desc.members:
        assignment: dict[str, list[int]] = {}
        for tp in m.assignment:
            assignment.setdefault(tp.topic, []).append(tp.partition)
        members.append(
            {"member_id": m.member_id, "member_epoch": m.member_epoch, "assignment": assignment}
        )
    return {
        "group": desc.group,
        "type": "share",
        "state": desc.state,
        "group_epoch": desc.group_epoch,
        "members": members,
        "partitions": [dict(zip(w._fields, w, strict=True)) for w in desc.partitions],
    }


def _share_table(data: dict[str, Any]) -> str:
    lines = [
        f"share group {data['group']}: state {data['state']}, epoch {data['group_epoch']}, "
        f"{len(data['members'])} member(s)"
    ]
    if data["members"]:
        lines.append("MEMBER-ID\tEPOCH\tASSIGNMENT")
        for m in data["members"]:
            assigned = " ".join(
                f"{t}[{','.join(map(str, ps))}]" for t, ps in sorted(m["assignment"].items())
            )
            lines.append(f"{m['member_id']}\t{m['member_epoch']}\t{assigned or '-'}")
    lines.append("")
    lines.append("TOPIC\tPARTITION\tSTART\tEND\tAVAILABLE\tACQUIRED\tACKNOWLEDGED\tARCHIVED")
    for w in data["partitions"]:
        lines.append(
            "\t".join(
                str(w[k])
                for k in (
                    "topic",
                    "partition",
                    "start_offset",
                    "end_offset",
                    "available",
                    "acquired",
                    "acknowledged",
                    "archived",
                )
            )
        )
    return "\n".join(lines) + "\n"


async def _delete_share_group(client: Any, args: argparse.Namespace, out: TextIO) -> None:
    """``groups delete``: a share group's state, for one topic or all (the group too)."""
    if (await client.describe_share_group(args.group)).state == "Dead":
        raise CommandError(
            f"{args.group!r} is not a share group; a consumer group is deleted with Kafka's "
            "DeleteGroups (kafka-consumer-groups --delete) once it is empty"
        )
    topics = [args.topic] if args.topic else []
    await client.delete_share_group_offsets(args.group, topics)
    what = f"topic {args.topic} of " if args.topic else ""
    data = {"group": args.group, "deleted": topics or "all"}
    emit(out, args, data, lambda: f"deleted the state of {what}share group {args.group}\n")


async def cmd_groups(args: argparse.Namespace, out: TextIO) -> int:
    client = await connect(args)
    try:
        if args.action == "list":
            listed = await _kafka_groups(args, None) or {}
            # Groups with offsets only (the native protocol's) are classic and Empty.
            for name in await client.list_groups():
                listed.setdefault(name, ("classic", "Empty"))
            groups = [
                {"group": name, "type": kind, "state": state}
                for name, (kind, state) in sorted(listed.items())
            ]
            emit(
                out,
                args,
                groups,
                lambda: "".join(f"{g['group']}\t{g['type']}\t{g['state']}\n" for g in groups),
            )
        elif args.action == "describe":
            share = await client.describe_share_group(args.group)
            if share.state != "Dead":
                shared = _share_group(share)
                emit(out, args, shared, lambda: _share_table(shared))
                return EXIT_OK
            desc = await client.describe_group(args.group)
            kafka = await _kafka_groups(args, args.group)
            if kafka is not None and kafka["type"] == "consumer":
                consumer = _consumer_group(desc, kafka, args.group)
                emit(out, args, consumer, lambda: _consumer_table(consumer))
                return EXIT_OK
            data = _describe_group(desc, kafka, args.group)
            table = _group_table(data)
            del data["_owner"]
            emit(out, args, data, lambda: table)
        elif args.action == "delete":
            await _delete_share_group(client, args, out)
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
                data.append({"topic": args.topic, "partition": partition, "offset": offset})
            if (await client.describe_share_group(args.group)).state != "Dead":
                offsets = [(d["topic"], d["partition"], d["offset"]) for d in data]
                await client.alter_share_group_offsets(args.group, offsets)
            else:
                for d in data:
                    await client.commit(args.group, d["topic"], d["partition"], d["offset"])
            emit(
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
