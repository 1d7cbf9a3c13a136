"""``rustka acls``: add, list and remove the broker's ACLs (docs/security.md).

The same ACLs Kafka's ``kafka-acls.sh`` manages, in the same words: a principal
is allowed or denied operations on a topic, a group, a transactional id or the
cluster, by literal name or by prefix, from any host or one. The broker stores
them and enforces them on both protocols; the connection must be allowed ALTER
on the cluster to change them and DESCRIBE to list them.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from rustka.ops.cli.common import (
    EXIT_OK,
    CommandError,
    add_client_parser,
    connect,
    emit,
    run_client,
)
from rustka.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    parse_enum,
)

COMMANDS = ("acls",)

_OPERATIONS = [m.name.lower().replace("_", "-") for m in Operation if m.value > 1]


def add_parsers(sub: Any) -> None:
    a = add_client_parser(
        sub,
        "acls",
        "add, list or remove ACLs",
        "examples:\n"
        "  rustka acls add --allow User:alice --operation write --topic orders\n"
        "  rustka acls add --allow User:bob --operation read --topic app- --prefixed\n"
        "  rustka acls add --allow User:bob --operation read --group app-readers\n"
        "  rustka acls add --deny User:* --operation all --topic secret- --prefixed\n"
        "  rustka acls list                              every ACL\n"
        "  rustka acls list --topic orders --match       those that apply to topic orders\n"
        "  rustka acls remove --principal User:alice     every ACL of alice\n"
        f"operations: {', '.join(_OPERATIONS)}\n",
    )
    a.add_argument("action", choices=["add", "list", "remove"])
    who = a.add_mutually_exclusive_group()
    who.add_argument("--allow", metavar="PRINCIPAL", help="add: allow this principal")
    who.add_argument("--deny", metavar="PRINCIPAL", help="add: deny this principal")
    who.add_argument(
        "--principal", metavar="PRINCIPAL", help="list, remove: only this principal's ACLs"
    )
    a.add_argument(
        "--operation",
        action="append",
        default=[],
        metavar="OP",
        help="add: an operation (repeatable); list, remove: only this operation",
    )
    what = a.add_mutually_exclusive_group()
    what.add_argument("--topic", dest="topic_name", metavar="NAME")
    what.add_argument("--group", dest="group_name", metavar="NAME")
    what.add_argument("--transactional-id", dest="transactional_id", metavar="ID")
    what.add_argument("--cluster", action="store_true", help="the broker itself")
    how = a.add_mutually_exclusive_group()
    how.add_argument(
        "--prefixed", action="store_true", help="NAME is a prefix: every name starting with it"
    )
    how.add_argument(
        "--match",
        action="store_true",
        help="list, remove: every ACL that applies to NAME (literal, * and prefixes)",
    )
    a.add_argument("--host", default=None, help="add: only from this IP address (default any)")
    a.add_argument(
        "--all", action="store_true", help="remove: allow a filter that selects every ACL"
    )


def _resource(args: argparse.Namespace) -> tuple[ResourceType, str | None]:
    if args.topic_name is not None:
        return ResourceType.TOPIC, args.topic_name
    if args.group_name is not None:
        return ResourceType.GROUP, args.group_name
    if args.transactional_id is not None:
        return ResourceType.TRANSACTIONAL_ID, args.transactional_id
    if args.cluster:
        return ResourceType.CLUSTER, CLUSTER_NAME
    return ResourceType.ANY, None


def _operations(args: argparse.Namespace) -> list[Operation]:
    return [parse_enum(Operation, op) for op in args.operation]


def check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    try:
        operations = _operations(args)
    except AclError as e:
        parser.error(str(e))
    rtype, _ = _resource(args)
    if args.action == "add":
        if not (args.allow or args.deny):
            parser.error("acls add needs --allow PRINCIPAL or --deny PRINCIPAL")
        if not operations:
            parser.error("acls add needs --operation OP")
        if rtype == ResourceType.ANY:
            parser.error("acls add needs --topic, --group, --transactional-id or --cluster")
        if args.match:
            parser.error("acls add takes --prefixed, not --match")
    else:
        if args.allow or args.deny or args.host is not None:
            parser.error(f"acls {args.action} selects with --principal, not --allow/--deny/--host")
        if len(operations) > 1:
            parser.error(f"acls {args.action} takes one --operation")
        if (args.prefixed or args.match) and rtype == ResourceType.ANY:
            parser.error("--prefixed and --match need --topic, --group or --transactional-id")
    unfiltered = args.principal is None and rtype == ResourceType.ANY and not operations
    if args.action == "remove" and unfiltered and not args.all:
        parser.error("acls remove with no filter would remove every ACL: add --all")


def run(args: argparse.Namespace) -> int:
    return run_client(cmd_acls, args)


def _bindings(args: argparse.Namespace) -> list[AclBinding]:
    rtype, name = _resource(args)
    if name is None:
        raise CommandError("acls add needs --topic, --group, --transactional-id or --cluster")
    pattern = PatternType.PREFIXED if args.prefixed else PatternType.LITERAL
    permission, principal = (
        (Permission.ALLOW, args.allow) if args.allow else (Permission.DENY, args.deny)
    )
    return [
        AclBinding(rtype, name, pattern, principal, args.host or "*", op, permission)
        for op in _operations(args)
    ]


def _selector(args: argparse.Namespace) -> AclBindingFilter:
    rtype, name = _resource(args)
    if args.cluster:
        name = None
    pattern = PatternType.ANY
    if args.prefixed:
        pattern = PatternType.PREFIXED
    elif args.match:
        pattern = PatternType.MATCH
    elif name is not None:
        pattern = PatternType.LITERAL
    operations = _operations(args)
    return AclBindingFilter(
        resource_type=rtype,
        resource_name=name,
        pattern_type=pattern,
        principal=args.principal,
        operation=operations[0] if operations else Operation.ANY,
    )


def _as_data(acl: AclBinding) -> dict[str, str]:
    return {
        "principal": acl.principal,
        "permission": acl.permission.name.lower(),
        "operation": acl.operation.name.lower().replace("_", "-"),
        "resource_type": acl.resource_type.name.lower().replace("_", "-"),
        "pattern": acl.pattern_type.name.lower(),
        "name": acl.resource_name,
        "host": acl.host,
    }


def _table(rows: list[dict[str, str]]) -> str:
    if not rows:
        return "(no ACLs)\n"
    head = "PRINCIPAL\tPERMISSION\tOPERATION\tRESOURCE\tPATTERN\tNAME\tHOST\n"
    return head + "".join(
        f"{r['principal']}\t{r['permission']}\t{r['operation']}\t{r['resource_type']}"
        f"\t{r['pattern']}\t{r['name']}\t{r['host']}\n"
        for r in rows
    )


async def cmd_acls(args: argparse.Namespace, out: TextIO) -> int:
    client = await connect(args)
    try:
        if args.action == "add":
            try:
                added = await client.create_acls(_bindings(args))
            except AclError as e:
                raise CommandError(str(e)) from e
            rows = [_as_data(a) for a in added]
            emit(out, args, rows, lambda: f"added {len(rows)} ACLs\n" + _table(rows))
        elif args.action == "list":
            rows = [_as_data(a) for a in await client.describe_acls(_selector(args))]
            emit(out, args, rows, lambda: _table(rows))
        else:
            rows = [_as_data(a) for a in await client.delete_acls(_selector(args))]
            emit(out, args, rows, lambda: f"removed {len(rows)} ACLs\n" + _table(rows))
    finally:
        await client.close()
    return EXIT_OK
