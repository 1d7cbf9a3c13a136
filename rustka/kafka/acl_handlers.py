"""DescribeAcls, CreateAcls and DeleteAcls: Kafka admin clients managing the broker's ACLs.

The ACLs themselves, their checks and their file are the core's
(`rustka.broker.access`); these handlers only turn Kafka's request fields into
its bindings and filters and back. With authorization off, every one answers
SECURITY_DISABLED, as Kafka does without an authorizer. Who may call them
(ALTER or DESCRIBE on the cluster) is checked before, in `rustka.kafka.apis.dispatch`.
"""

from __future__ import annotations

from collections.abc import Iterable

from twisted.internet import defer

from rustka.broker.access import SecurityDisabled
from rustka.kafka.context import Body, RequestContext
from rustka.kafka.errors import ErrorCode as E
from rustka.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    code_of,
)

__all__ = ["create_acls", "delete_acls", "describe_acls"]

_DISABLED = "no authorizer is enabled on this broker (authorizer_enabled = false)"


def _filter(f: Body, version: int) -> AclBindingFilter:
    return AclBindingFilter(
        resource_type=code_of(ResourceType, f["resource_type_filter"]),
        resource_name=f.get("resource_name_filter"),
        pattern_type=code_of(PatternType, f.get("pattern_type_filter", 3) if version else 3),
        principal=f.get("principal_filter"),
        host=f.get("host_filter"),
        operation=code_of(Operation, f["operation"]),
        permission=code_of(Permission, f["permission_type"]),
    )


def _entry(acl: AclBinding) -> Body:
    return {
        "principal": acl.principal,
        "host": acl.host,
        "operation": int(acl.operation),
        "permission_type": int(acl.permission),
    }


def _by_resource(acls: Iterable[AclBinding]) -> list[Body]:
    """DescribeAcls groups the ACLs under their resource pattern."""
    groups: dict[tuple[int, str, int], list[Body]] = {}
    for acl in acls:
        key = (int(acl.resource_type), acl.resource_name, int(acl.pattern_type))
        groups.setdefault(key, []).append(_entry(acl))
    return [
        {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": entries}
        for (t, n, p), entries in groups.items()
    ]


def describe_acls(ctx: RequestContext, version: int, body: Body) -> Body:
    try:
        found = ctx.broker.access.describe(_filter(body, version))
    except SecurityDisabled:
        return {"error_code": E.SECURITY_DISABLED, "error_message": _DISABLED, "resources": []}
    except AclError as e:
        return {"error_code": E.INVALID_REQUEST, "error_message": str(e), "resources": []}
    return {"error_code": 0, "error_message": None, "resources": _by_resource(found)}


def create_acls(ctx: RequestContext, version: int, body: Body) -> Body | defer.Deferred[Body]:
    creations = body.get("creations") or []
    bindings = [
        AclBinding(
            code_of(ResourceType, c["resource_type"]),
            c["resource_name"],
            code_of(PatternType, c.get("resource_pattern_type", 3) if version else 3),
            c["principal"],
            c["host"],
            code_of(Operation, c["operation"]),
            code_of(Permission, c["permission_type"]),
        )
        for c in creations
    ]
    try:
        done = ctx.broker.access.create(bindings, ctx.principal)
    except SecurityDisabled:
        refused = {"error_code": E.SECURITY_DISABLED, "error_message": _DISABLED}
        return {"results": [dict(refused) for _ in creations]}

    def answer(problems: list[str | None]) -> Body:
        return {
            "results": [
                {"error_code": 0, "error_message": None}
                if problem is None
                else {"error_code": E.INVALID_REQUEST, "error_message": problem}
                for problem in problems
            ]
        }

    return done.addCallback(answer)


def delete_acls(ctx: RequestContext, version: int, body: Body) -> Body | defer.Deferred[Body]:
    filters = body.get("filters") or []
    try:
        done = ctx.broker.access.delete([_filter(f, version) for f in filters], ctx.principal)
    except SecurityDisabled:
        refused = {"error_code": E.SECURITY_DISABLED, "error_message": _DISABLED}
        return {"filter_results": [{**refused, "matching_acls": []} for _ in filters]}

    def matched(acl: AclBinding) -> Body:
        return {
            "error_code": 0,
            "error_message": None,
            "resource_type": int(acl.resource_type),
            "resource_name": acl.resource_name,
            "pattern_type": int(acl.pattern_type),
            **_entry(acl),
        }

    def answer(results: list[list[AclBinding] | str]) -> Body:
        return {
            "filter_results": [
                {"error_code": E.INVALID_REQUEST, "error_message": r, "matching_acls": []}
                if isinstance(r, str)
                else {
                    "error_code": 0,
                    "error_message": None,
                    "matching_acls": [matched(a) for a in r],
                }
                for r in results
            ]
        }

    return done.addCallback(answer)
