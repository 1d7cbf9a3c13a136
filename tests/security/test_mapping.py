"""Certificate subjects to principal names, as Kafka's ssl.principal.mapping.rules."""

from __future__ import annotations

import pytest

from rustka.security.mapping import MappingError, PrincipalMapper, rfc2253


def test_the_subject_is_written_most_specific_first_with_rfc_2253_escapes() -> None:
    assert rfc2253([("C", "US"), ("O", "Example, Inc"), ("CN", "alice")]) == (
        "CN=alice,O=Example\\, Inc,C=US"
    )
    assert rfc2253([("CN", "#x ")]) == "CN=\\#x\\ "


def test_default_is_the_subject_itself() -> None:
    assert PrincipalMapper("DEFAULT").name("CN=alice,O=x") == "CN=alice,O=x"


def test_rules_are_tried_in_order_and_the_first_match_decides() -> None:
    mapper = PrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, RULE:^CN=([^,]*),.*$/user-$1/U,DEFAULT"
    )
    assert mapper.name("CN=Kafka-Svc,OU=ServiceUsers,O=x") == "kafka-svc"
    assert mapper.name("CN=bob,O=x") == "USER-BOB"
    assert mapper.name("O=x") == "O=x"


def test_a_slash_inside_a_rule_is_escaped() -> None:
    assert PrincipalMapper(r"RULE:^CN=(.*)\/(.*)$/$2\/$1/").name("CN=a/b") == "b/a"


def test_no_matching_rule_is_an_error() -> None:
    with pytest.raises(MappingError, match="no rule applies"):
        PrincipalMapper("RULE:^CN=(.*)$/$1/").name("O=x")


@pytest.mark.parametrize("rules", ["", "RULE:abc", "NOPE", "RULE:(/$1/", "RULE:^a$/$2/"])
def test_bad_rules_are_refused(rules: str) -> None:
    with pytest.raises(MappingError):
        PrincipalMapper(rules)
