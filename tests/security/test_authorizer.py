"""The authorizer's rules, each against the case that would break it."""

from __future__ import annotations

from rustka.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from rustka.security.authorizer import Authorizer

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
ALICE, BOB = "User:alice", "User:bob"
HOST = "127.0.0.1"


def acl(
    name: str,
    op: Operation,
    perm: Permission = ALLOW,
    *,
    principal: str = ALICE,
    rtype: ResourceType = T,
    pattern: PatternType = LIT,
    host: str = "*",
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def test_without_any_acl_the_default_decides() -> None:
    closed = Authorizer()
    opened = Authorizer(allow_if_no_acl=True)
    assert not closed.authorize(ALICE, HOST, Operation.READ, T, "orders")
    assert opened.authorize(ALICE, HOST, Operation.READ, T, "orders")


def test_an_acl_for_someone_else_closes_the_resource_even_when_no_acl_means_allow() -> None:
    auth = Authorizer([acl("orders", Operation.READ, principal=BOB)], allow_if_no_acl=True)
    assert auth.authorize(BOB, HOST, Operation.READ, T, "orders")
    assert not auth.authorize(ALICE, HOST, Operation.READ, T, "orders")
    assert auth.authorize(ALICE, HOST, Operation.READ, T, "payments")


def test_a_literal_acl_covers_its_name_only() -> None:
    auth = Authorizer([acl("orders", Operation.WRITE)])
    assert auth.authorize(ALICE, HOST, Operation.WRITE, T, "orders")
    assert not auth.authorize(ALICE, HOST, Operation.WRITE, T, "orders2")
    assert not auth.authorize(ALICE, HOST, Operation.WRITE, T, "order")
    assert not auth.authorize(ALICE, HOST, Operation.WRITE, G, "orders")


def test_prefixed_and_wildcard_patterns() -> None:
    auth = Authorizer(
        [
            acl("app-", Operation.READ, pattern=PRE),
            acl("*", Operation.DESCRIBE, principal=BOB),
        ]
    )
    assert auth.authorize(ALICE, HOST, Operation.READ, T, "app-events")
    assert auth.authorize(ALICE, HOST, Operation.READ, T, "app-")
    assert not auth.authorize(ALICE, HOST, Operation.READ, T, "ap")
    assert not auth.authorize(ALICE, HOST, Operation.READ, T, "other")
    assert auth.authorize(BOB, HOST, Operation.DESCRIBE, T, "anything")
    assert not auth.authorize(BOB, HOST, Operation.READ, T, "anything")


def test_deny_wins_over_allow_wherever_it_comes_from() -> None:
    auth = Authorizer(
        [
            acl("*", Operation.ALL),
            acl("secret-", Operation.READ, DENY, pattern=PRE),
        ]
    )
    assert auth.authorize(ALICE, HOST, Operation.READ, T, "public")
    assert not auth.authorize(ALICE, HOST, Operation.READ, T, "secret-plans")
    assert auth.authorize(ALICE, HOST, Operation.WRITE, T, "secret-plans")


def test_a_deny_for_every_user_applies_to_each() -> None:
    auth = Authorizer(
        [acl("orders", Operation.READ), acl("orders", Operation.READ, DENY, principal="User:*")]
    )
    assert not auth.authorize(ALICE, HOST, Operation.READ, T, "orders")


def test_implied_describe_comes_from_allows_only() -> None:
    auth = Authorizer(
        [
            acl("a", Operation.READ),
            acl("b", Operation.ALTER_CONFIGS),
            acl("c", Operation.DESCRIBE),
            acl("c", Operation.READ, DENY),
        ]
    )
    assert auth.authorize(ALICE, HOST, Operation.DESCRIBE, T, "a")
    assert not auth.authorize(ALICE, HOST, Operation.WRITE, T, "a")
    assert auth.authorize(ALICE, HOST, Operation.DESCRIBE_CONFIGS, T, "b")
    assert not auth.authorize(ALICE, HOST, Operation.DESCRIBE, T, "b")
    assert auth.authorize(ALICE, HOST, Operation.DESCRIBE, T, "c")
    assert not auth.authorize(ALICE, HOST, Operation.READ, T, "c")


def test_hosts_narrow_an_acl() -> None:
    auth = Authorizer([acl("orders", Operation.READ, host="10.0.0.5")])
    assert auth.authorize(ALICE, "10.0.0.5", Operation.READ, T, "orders")
    assert not auth.authorize(ALICE, HOST, Operation.READ, T, "orders")


def test_super_users_pass_even_a_deny() -> None:
    auth = Authorizer(
        [acl("*", Operation.ALL, DENY, principal="User:*")], super_users=["User:admin"]
    )
    assert auth.authorize("User:admin", HOST, Operation.DELETE, T, "x")
    assert not auth.authorize(ALICE, HOST, Operation.DELETE, T, "x")


def test_replace_drops_cached_answers() -> None:
    auth = Authorizer([acl("orders", Operation.READ)])
    assert auth.authorize(ALICE, HOST, Operation.READ, T, "orders")
    auth.replace([acl("orders", Operation.READ, DENY)])
    assert not auth.authorize(ALICE, HOST, Operation.READ, T, "orders")
    auth.replace([])
    assert not auth.authorize(ALICE, HOST, Operation.READ, T, "orders")


def test_many_prefixes_are_each_found() -> None:
    acls = [acl(f"team{i}-", Operation.WRITE, pattern=PRE) for i in range(300)]
    acls += [acl(f"topic{i}", Operation.READ) for i in range(300)]
    auth = Authorizer(acls)
    assert auth.authorize(ALICE, HOST, Operation.WRITE, T, "team123-x")
    assert auth.authorize(ALICE, HOST, Operation.WRITE, T, "team7-")
    assert not auth.authorize(ALICE, HOST, Operation.WRITE, T, "team300-x")
    assert auth.authorize(ALICE, HOST, Operation.READ, T, "topic299")
    assert not auth.authorize(ALICE, HOST, Operation.READ, T, "topic2999")


def test_authorize_any_finds_a_writable_topic_not_shadowed_by_a_deny() -> None:
    assert not Authorizer().authorize_any(ALICE, HOST, Operation.WRITE, T)
    assert Authorizer(allow_if_no_acl=True).authorize_any(ALICE, HOST, Operation.WRITE, T)
    assert Authorizer([acl("orders", Operation.WRITE)]).authorize_any(
        ALICE, HOST, Operation.WRITE, T
    )
    shadowed = Authorizer(
        [acl("orders", Operation.WRITE), acl("ord", Operation.WRITE, DENY, pattern=PRE)]
    )
    assert not shadowed.authorize_any(ALICE, HOST, Operation.WRITE, T)
    everywhere = Authorizer([acl("orders", Operation.WRITE), acl("*", Operation.WRITE, DENY)])
    assert not everywhere.authorize_any(ALICE, HOST, Operation.WRITE, T)
    other = Authorizer([acl("orders", Operation.WRITE, principal=BOB)])
    assert not other.authorize_any(ALICE, HOST, Operation.WRITE, T)
    assert Authorizer(super_users=[ALICE]).authorize_any(ALICE, HOST, Operation.WRITE, C)
