"""``rustka acls`` (rustka/ops/cli/acls.py) against a broker with authorization on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest_twisted

from rustka.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from rustka.security.acl_store import ACL_FILE, load_acls
from tests.conftest import start_broker
from tests.ops.cli import cli, ok


@pytest_twisted.ensureDeferred
async def test_add_list_remove_and_what_the_file_then_holds(data_dir: Path) -> None:
    # The CLI connects as User:ANONYMOUS; as a super user it may manage the ACLs.
    running = await start_broker(data_dir, authorizer_enabled=True, super_users="User:ANONYMOUS")
    try:
        added = await ok(
            running,
            "acls",
            "add",
            "--allow",
            "User:alice",
            "--operation",
            "write",
            "--operation",
            "describe",
            "--topic",
            "orders",
        )
        assert added.startswith("added 2 ACLs\nPRINCIPAL\tPERMISSION")
        await ok(
            running,
            "acls",
            "add",
            "--deny",
            "User:*",
            "--operation",
            "all",
            "--topic",
            "secret-",
            "--prefixed",
        )
        await ok(
            running,
            "acls",
            "add",
            "--allow",
            "User:bob",
            "--operation",
            "read",
            "--group",
            "readers",
            "--host",
            "10.0.0.7",
        )
        listed = json.loads(await ok(running, "acls", "list", "--json"))
        assert len(listed) == 4
        assert {
            "principal": "User:bob",
            "permission": "allow",
            "operation": "read",
            "resource_type": "group",
            "pattern": "literal",
            "name": "readers",
            "host": "10.0.0.7",
        } in listed
        applying = json.loads(
            await ok(running, "acls", "list", "--topic", "secret-plans", "--match", "--json")
        )
        assert [(a["principal"], a["name"], a["pattern"]) for a in applying] == [
            ("User:*", "secret-", "prefixed")
        ]
        removed = json.loads(
            await ok(running, "acls", "remove", "--principal", "User:alice", "--json")
        )
        assert sorted(a["operation"] for a in removed) == ["describe", "write"]
        stored = load_acls(data_dir / ACL_FILE)
        assert stored == {
            AclBinding(
                ResourceType.TOPIC,
                "secret-",
                PatternType.PREFIXED,
                "User:*",
                "*",
                Operation.ALL,
                Permission.DENY,
            ),
            AclBinding(
                ResourceType.GROUP,
                "readers",
                PatternType.LITERAL,
                "User:bob",
                "10.0.0.7",
                Operation.READ,
                Permission.ALLOW,
            ),
        }
        everything = await cli(running, "acls", "remove")
        assert everything.returncode == 2 and "--all" in everything.stderr
        bad = await cli(
            running, "acls", "add", "--allow", "alice", "--operation", "read", "--topic", "t"
        )
        assert bad.returncode == 1
        assert "Type:name" in bad.stderr and bad.stderr.count("\n") == 1
        assert load_acls(data_dir / ACL_FILE) == stored
        unknown_op = await cli(
            running, "acls", "add", "--allow", "User:a", "--operation", "reed", "--topic", "t"
        )
        assert unknown_op.returncode == 2 and "one of:" in unknown_op.stderr
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_without_authorization_the_broker_says_so(data_dir: Path) -> None:
    running = await start_broker(data_dir)
    try:
        result = await cli(running, "acls", "list")
        assert result.returncode == 1
        assert "authorizer_enabled = false" in result.stderr
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_principal_without_cluster_alter_may_not_change_acls(data_dir: Path) -> None:
    running = await start_broker(data_dir, authorizer_enabled=True)
    try:
        result = await cli(
            running, "acls", "add", "--allow", "User:ANONYMOUS", "--operation", "all", "--cluster"
        )
        assert result.returncode == 1
        assert "not authorized" in result.stderr and "ALTER" in result.stderr
        assert not (data_dir / ACL_FILE).exists()
    finally:
        await running.stop()
