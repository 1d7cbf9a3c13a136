"""The ACL model: what may be stored, and what a filter selects."""

from __future__ import annotations

import pytest

from rustka.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    parse_enum,
    validate_binding,
)

T, LIT, PRE = ResourceType.TOPIC, PatternType.LITERAL, PatternType.PREFIXED


def binding(**changes: object) -> AclBinding:
    fields: dict[str, object] = {
        "resource_type": T,
        "resource_name": "orders",
        "pattern_type": LIT,
        "principal": "User:alice",
        "host": "*",
        "operation": Operation.READ,
        "permission": Permission.ALLOW,
    }
    fields.update(changes)
    return AclBinding(**fields)  # type: ignore[arg-type]


def test_a_whole_binding_is_valid() -> None:
    validate_binding(binding())
    validate_binding(binding(resource_type=ResourceType.CLUSTER, resource_name="kafka-cluster"))
    validate_binding(binding(pattern_type=PRE, resource_name="app-"))


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"resource_type": ResourceType.ANY}, "resource type ANY"),
        ({"pattern_type": PatternType.MATCH}, "pattern type MATCH"),
        ({"operation": Operation.ANY}, "operation ANY"),
        ({"permission": Permission.ANY}, "permission ANY"),
        ({"resource_name": ""}, "resource name is empty"),
        ({"pattern_type": PRE, "resource_name": "*"}, "PREFIXED"),
        ({"resource_type": ResourceType.CLUSTER, "resource_name": "x"}, "kafka-cluster"),
        ({"principal": "alice"}, "Type:name"),
        ({"principal": "User:"}, "Type:name"),
        ({"host": ""}, "host is empty"),
    ],
)
def test_what_cannot_be_stored_is_refused_with_the_reason(changes: dict, says: str) -> None:
    with pytest.raises(AclError, match=says):
        validate_binding(binding(**changes))


def test_filters_select_by_each_field() -> None:
    a = binding()
    b = binding(principal="User:bob", permission=Permission.DENY)
    c = binding(pattern_type=PRE, resource_name="ord")
    d = binding(resource_name="*")
    e = binding(resource_type=ResourceType.GROUP)
    everything = [a, b, c, d, e]

    def chosen(f: AclBindingFilter) -> set[AclBinding]:
        return {x for x in everything if f.matches(x)}

    assert chosen(AclBindingFilter()) == set(everything)
    assert chosen(AclBindingFilter(resource_type=ResourceType.GROUP)) == {e}
    assert chosen(AclBindingFilter(principal="User:bob")) == {b}
    assert chosen(AclBindingFilter(permission=Permission.DENY)) == {b}
    assert chosen(AclBindingFilter(resource_type=T, resource_name="orders")) == {a, b}
    assert chosen(AclBindingFilter(pattern_type=PRE)) == {c}
    assert chosen(
        AclBindingFilter(resource_type=T, resource_name="orders", pattern_type=PatternType.MATCH)
    ) == {a, b, c, d}
    assert chosen(AclBindingFilter(operation=Operation.WRITE)) == set()


def test_an_unknown_code_in_a_filter_is_refused() -> None:
    with pytest.raises(AclError, match="UNKNOWN"):
        AclBindingFilter(operation=Operation.UNKNOWN).validate()
    AclBindingFilter().validate()


def test_enum_names_parse_as_the_cli_writes_them() -> None:
    assert parse_enum(Operation, "describe-configs") is Operation.DESCRIBE_CONFIGS
    assert parse_enum(ResourceType, "Topic") is ResourceType.TOPIC
    with pytest.raises(AclError, match=r"one of: .*read"):
        parse_enum(Operation, "reed")


def test_an_unknown_wire_code_reads_as_unknown_and_is_refused() -> None:
    from rustka.security.acl import code_of

    assert code_of(Operation, 4) is Operation.WRITE
    assert code_of(Operation, 99) is Operation.UNKNOWN
    with pytest.raises(AclError, match="operation UNKNOWN"):
        validate_binding(binding(operation=code_of(Operation, 99)))
