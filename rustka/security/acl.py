"""Kafka's ACL model: who may do what to which resource, and the filters that find ACLs.

An ACL binds a resource pattern (type, name, literal or prefixed) to an entry
(principal, host, operation, allow or deny). The codes of every enum are Kafka's
own wire codes (`org.apache.kafka.common.acl` and `.resource`), so CreateAcls,
DescribeAcls and DeleteAcls carry them unchanged, and the native protocol and
the ACL file use the same numbers (docs/security.md, "Authorization (ACLs)").

Plain data and pure functions: the authorizer (`rustka.security.authorizer`)
answers questions with them and the store (`rustka.security.acl_store`) keeps them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Final, TypeVar

__all__ = [
    "CLUSTER_NAME",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclBinding",
    "AclBindingFilter",
    "AclError",
    "Operation",
    "PatternType",
    "Permission",
    "ResourceType",
    "code_of",
    "parse_enum",
    "validate_binding",
]

WILDCARD: Final = "*"
"""A literal resource name or a host that matches every one."""

WILDCARD_PRINCIPAL: Final = "User:*"
"""The principal of an ACL that applies to every user."""

CLUSTER_NAME: Final = "kafka-cluster"
"""The one cluster resource's name, as Kafka's tools write it."""


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class AclError(ValueError):
    """An ACL or a filter that cannot be stored or applied, with the reason."""


_IMPLIES_DESCRIBE: Final = frozenset(
    {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
)
_IMPLIES_DESCRIBE_CONFIGS: Final = frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS})


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """One stored ACL. ``principal`` is "Type:name" ("User:alice", "User:*");
    ``host`` an IP address or "*"."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this ACL's pattern covers the resource ``name`` of ``resource_type``."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name == name or self.resource_name == WILDCARD

    def decides(self, principals: frozenset[str], host: str, operation: Operation) -> bool:
        """Whether this ACL (its resource already matched) applies to the request.

        An ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE, and an
        ALLOW of ALTER_CONFIGS allows DESCRIBE_CONFIGS; a DENY denies only what
        it names (or everything, for ALL), as Kafka's authorizer has it.
        """
        if self.principal not in principals:
            return False
        if self.host != WILDCARD and self.host != host:
            return False
        if self.operation == Operation.ALL or self.operation == operation:
            return True
        if self.permission != Permission.ALLOW:
            return False
        if operation == Operation.DESCRIBE:
            return self.operation in _IMPLIES_DESCRIBE
        if operation == Operation.DESCRIBE_CONFIGS:
            return self.operation in _IMPLIES_DESCRIBE_CONFIGS
        return False

    def describe(self) -> str:
        """One line for logs and the CLI."""
        return (
            f"{self.permission.name} {self.principal} from {self.host} "
            f"{self.operation.name} {self.resource_type.name} "
            f"{self.pattern_type.name}:{self.resource_name}"
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls select: None (or ANY) for a field matches all.

    A ``pattern_type`` of MATCH selects, for the given name, every ACL that
    would apply to that resource: the literal name, the literal "*" and every
    prefix of it.
    """

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, acl.resource_type):
            return False
        if not self._matches_pattern(acl):
            return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation not in (Operation.ANY, acl.operation):
            return False
        return self.permission in (Permission.ANY, acl.permission)

    def _matches_pattern(self, acl: AclBinding) -> bool:
        if self.pattern_type == PatternType.MATCH:
            if self.resource_name is None:
                return True
            return acl.matches_resource(acl.resource_type, self.resource_name)
        if self.pattern_type not in (PatternType.ANY, acl.pattern_type):
            return False
        return self.resource_name is None or self.resource_name == acl.resource_name

    def validate(self) -> None:
        """Refuse what matches nothing by construction (UNKNOWN codes)."""
        for value in (self.resource_type, self.pattern_type, self.operation, self.permission):
            if value == 0:
                raise AclError(f"{type(value).__name__} UNKNOWN matches no ACL")


def validate_binding(acl: AclBinding) -> None:
    """The checks Kafka makes before it stores an ACL; AclError says which failed."""
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise AclError(f"resource type {acl.resource_type.name} cannot be stored")
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise AclError(f"pattern type {acl.pattern_type.name} cannot be stored")
    if acl.operation in (Operation.UNKNOWN, Operation.ANY):
        raise AclError(f"operation {acl.operation.name} cannot be stored")
    if acl.permission not in (Permission.ALLOW, Permission.DENY):
        raise AclError(f"permission {acl.permission.name} cannot be stored")
    if not acl.resource_name:
        raise AclError("the resource name is empty")
    if acl.pattern_type == PatternType.PREFIXED and acl.resource_name == WILDCARD:
        raise AclError('a PREFIXED pattern of "*" is not allowed; use LITERAL "*"')
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        raise AclError(f'the cluster resource is named "{CLUSTER_NAME}"')
    kind, sep, name = acl.principal.partition(":")
    if not sep or not kind or not name:
        raise AclError(f"principal {acl.principal!r} is not of the form Type:name")
    if not acl.host:
        raise AclError("the host is empty (use * for any host)")


E = TypeVar("E", bound=IntEnum)


def parse_enum(kind: type[E], text: str) -> E:
    """An enum member from its name in any case, with '-' for '_' ("describe-configs")."""
    key = text.strip().upper().replace("-", "_")
    try:
        return kind[key]
    except KeyError:
        names = ", ".join(m.name.lower() for m in kind if m.value > 1)
        raise AclError(f"unknown {kind.__name__} {text!r}; one of: {names}") from None


def code_of(kind: type[E], value: int) -> E:
    """The member of a wire code; a code the enum does not know is UNKNOWN (0), which
    every check then refuses, so a client's unknown code is an error, never a crash."""
    try:
        return kind(value)
    except ValueError:
        return kind(0)
