"""The decision: may this principal, from this host, do this operation on this resource?

Kafka's StandardAuthorizer decides, and this follows it rule for rule
(docs/security.md, "Authorization (ACLs)"):

1. a super user may do everything;
2. of the ACLs whose pattern covers the resource (its literal name, the literal
   "*", every prefixed pattern the name starts with), one that applies to the
   principal (or "User:*") and host and DENYs the operation denies it — deny wins;
3. otherwise one that ALLOWs it (READ, WRITE, DELETE and ALTER imply DESCRIBE;
   ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows it;
4. otherwise, when no ACL at all covers the resource, the answer is
   ``allow_if_no_acl`` (Kafka's ``allow.everyone.if.no.acl.found``, off by default),
   and when some do, it is no.

Every request asks at least once, so answers are cached per question until the
ACLs change; the cache is bounded and simply emptied when full.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from rustka.security.acl import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

__all__ = ["AclIndex", "Authorizer"]

CACHE_ENTRIES: Final = 65_536
"""Answers kept before the cache is emptied; a question is a few hundred bytes."""


@dataclass(frozen=True, slots=True)
class _Section:
    """The ACLs of one resource type, by how their pattern is looked up."""

    literal: dict[str, list[AclBinding]] = field(default_factory=dict)
    wildcard: list[AclBinding] = field(default_factory=list)
    prefixed: dict[str, list[AclBinding]] = field(default_factory=dict)
    prefix_lengths: list[int] = field(default_factory=list)

    def covering(self, name: str) -> list[AclBinding]:
        found = list(self.wildcard)
        found.extend(self.literal.get(name, ()))
        for length in self.prefix_lengths:
            if length > len(name):
                break
            found.extend(self.prefixed.get(name[:length], ()))
        return found


class AclIndex:
    """An immutable set of ACLs, indexed so that a question looks at only the ACLs
    that cover its resource: one dict lookup per distinct prefix length."""

    def __init__(self, acls: Iterable[AclBinding] = ()) -> None:
        self.acls: frozenset[AclBinding] = frozenset(acls)
        self._sections: dict[ResourceType, _Section] = {}
        for acl in sorted(self.acls):
            section = self._sections.setdefault(acl.resource_type, _Section())
            if acl.pattern_type == PatternType.PREFIXED:
                section.prefixed.setdefault(acl.resource_name, []).append(acl)
            elif acl.resource_name == WILDCARD:
                section.wildcard.append(acl)
            else:
                section.literal.setdefault(acl.resource_name, []).append(acl)
        for section in self._sections.values():
            section.prefix_lengths.extend(sorted({len(p) for p in section.prefixed}))

    def covering(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """Every ACL whose pattern covers the resource, whoever it is for."""
        section = self._sections.get(resource_type)
        return section.covering(name) if section is not None else []

    def of_type(self, resource_type: ResourceType) -> list[AclBinding]:
        return [a for a in self.acls if a.resource_type == resource_type]


class Authorizer:
    """Answers authorization questions against the current ACLs; thread-safe, since
    ACL changes are written on the I/O pool while the reactor asks."""

    def __init__(
        self,
        acls: Iterable[AclBinding] = (),
        *,
        super_users: Iterable[str] = (),
        allow_if_no_acl: bool = False,
    ) -> None:
        self.super_users: frozenset[str] = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._index = AclIndex(acls)
        self._cache: dict[tuple[str, str, int, int, str], bool] = {}
        self._lock = threading.Lock()

    @property
    def acls(self) -> frozenset[AclBinding]:
        return self._index.acls

    def replace(self, acls: Iterable[AclBinding]) -> None:
        """Swap in a new set of ACLs; later questions see only the new set."""
        index = AclIndex(acls)
        with self._lock:
            self._index = index
            self._cache = {}

    def authorize(
        self,
        principal: str,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """Whether ``principal`` ("User:alice") from ``host`` may do ``operation`` to
        the resource; rules 1-4 of the module's docstring."""
        key = (principal, host, operation, resource_type, name)
        answer = self._cache.get(key)
        if answer is not None:
            return answer
        index = self._index
        answer = self._decide(index, principal, host, operation, resource_type, name)
        with self._lock:
            if index is self._index:
                if len(self._cache) >= CACHE_ENTRIES:
                    self._cache = {}
                self._cache[key] = answer
        return answer

    def _decide(
        self,
        index: AclIndex,
        principal: str,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        covering = index.covering(resource_type, name)
        if not covering:
            return self.allow_if_no_acl
        principals = frozenset((principal, WILDCARD_PRINCIPAL))
        allowed = False
        for acl in covering:
            if acl.decides(principals, host, operation):
                if acl.permission == Permission.DENY:
                    return False
                allowed = True
        return allowed

    def authorize_any(
        self,
        principal: str,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
    ) -> bool:
        """Whether ``operation`` is allowed on at least one resource of the type that no
        deny shadows (Kafka's ``authorizeByResourceType``: an idempotent producer may
        start if it may write to some topic)."""
        if principal in self.super_users:
            return True
        acls = self._index.of_type(resource_type)
        if not acls:
            return self.allow_if_no_acl
        principals = frozenset((principal, WILDCARD_PRINCIPAL))
        relevant = [
            a
            for a in acls
            if a.principal in principals
            and a.host in (WILDCARD, host)
            and a.operation in (operation, Operation.ALL)
        ]
        denies = [a for a in relevant if a.permission == Permission.DENY]
        if any(
            a.resource_name == WILDCARD and a.pattern_type != PatternType.PREFIXED for a in denies
        ):
            return False
        deny_literals = {a.resource_name for a in denies if a.pattern_type == PatternType.LITERAL}
        deny_prefixes = [a.resource_name for a in denies if a.pattern_type == PatternType.PREFIXED]
        for acl in relevant:
            if acl.permission != Permission.ALLOW:
                continue
            name = acl.resource_name
            if any(name.startswith(p) for p in deny_prefixes):
                continue
            if acl.pattern_type == PatternType.LITERAL and name in deny_literals:
                continue
            return True
        return False
