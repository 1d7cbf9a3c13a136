"""Declarations: a topic override is parsed by the same Setting as the broker setting."""

from __future__ import annotations

import pytest

from rustka.settings import ConfigError, Group, Kind, Setting, join_list, split_list

_G = Group("test")


def declared(kind: Kind, default: object, **details: object) -> Setting:
    return Setting(kind, default, "doc", _G, name="x", topic_config="x.y", **details)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "items"),
    [("", []), ("  ", []), ("a", ["a"]), ("a,b", ["a", "b"]), (" a , b ", ["a", "b"])],
)
def test_lists_split_as_kafka_splits_them(text: str, items: list[str]) -> None:
    assert split_list(text) == items
    assert join_list(items) == ",".join(items)


def test_a_list_setting_takes_a_string_or_a_toml_list_and_checks_each_item() -> None:
    policy = declared(Kind.LIST, "delete", choices=("compact", "delete"))
    assert policy.parse("compact, delete") == "compact,delete"
    assert policy.parse(["delete", "compact"]) == "delete,compact"
    with pytest.raises(ConfigError, match=r"^x: each item must be one of compact, delete, got 'x'"):
        policy.parse("compact,x")


@pytest.mark.parametrize(
    ("kind", "text", "value"),
    [
        (Kind.BOOL, " TRUE ", True),
        (Kind.BOOL, "false", False),
        (Kind.INT, " 42 ", 42),
        (Kind.DURATION, "+5", 5),
        (Kind.RATIO, "0.25", 0.25),
        (Kind.RATIO, "1", 1.0),
        (Kind.STRING, " s ", "s"),
        (Kind.LIST, "delete , compact", "delete,compact"),
    ],
)
def test_topic_values_are_spelled_as_kafka_spells_them(
    kind: Kind, text: str, value: object
) -> None:
    assert declared(kind, None).parse_topic(text) == value


@pytest.mark.parametrize(
    ("kind", "text", "why"),
    [
        (Kind.BOOL, "yes", "Expected value to be either true or false"),
        (Kind.INT, "1MiB", "Not a number of type LONG"),
        (Kind.INT, "1.5", "Not a number of type LONG"),
        (Kind.INT, str(2**63), "Not a number of type LONG"),
        (Kind.RATIO, "nan", "Not a number of type DOUBLE"),
        (Kind.RATIO, "1_0", "Not a number of type DOUBLE"),
    ],
)
def test_a_topic_value_of_the_wrong_type_names_the_kafka_key(
    kind: Kind, text: str, why: str
) -> None:
    with pytest.raises(ConfigError) as e:
        declared(kind, None).parse_topic(text)
    assert str(e.value) == f"Invalid value {text} for configuration x.y: {why}"


def test_topic_ranges_default_to_the_broker_ones_and_may_be_kafkas_own() -> None:
    broker_range = declared(Kind.SIZE, 100, minimum=1, maximum=1000)
    assert broker_range.parse_topic("1") == 1
    with pytest.raises(ConfigError, match=r"Value must be no more than 1000$"):
        broker_range.parse_topic("1001")
    kafka_range = declared(Kind.SIZE, 100, minimum=1, topic_minimum=14, topic_maximum=2**31 - 1)
    assert kafka_range.kafka_type == "INT"
    with pytest.raises(ConfigError, match=r"x.y: Value must be at least 14$"):
        kafka_range.parse_topic("13")
    with pytest.raises(ConfigError, match=r"x.y: Not a number of type INT$"):
        kafka_range.parse_topic(str(2**31))


def test_an_optional_setting_is_unset_by_kafkas_spelling_of_no_limit() -> None:
    retention = declared(Kind.DURATION, None, optional=True, minimum=0)
    assert retention.parse_topic("-1") is None
    assert retention.topic_text(None) == "-1"
    with pytest.raises(ConfigError, match=r"Value must be at least 0"):
        retention.parse_topic("-2")
    lag = declared(Kind.DURATION, None, optional=True, minimum=1, topic_unset=2**63 - 1)
    assert lag.parse_topic(str(2**63 - 1)) is None
    assert lag.topic_text(None) == str(2**63 - 1)
    with pytest.raises(ConfigError, match=r"Value must be at least 1"):
        lag.parse_topic("-1")


def test_choices_checks_and_null_are_refused_in_kafkas_words() -> None:
    choice = declared(Kind.CHOICE, "a", choices=("a", "b"))
    with pytest.raises(ConfigError, match=r"^Invalid value c for configuration x.y: String must"):
        choice.parse_topic("c")
    checked = declared(Kind.BOOL, False, check=lambda v: "no" if v else None)
    with pytest.raises(ConfigError, match=r"^Invalid value true for configuration x.y: no$"):
        checked.parse_topic("true")
    with pytest.raises(ConfigError, match=r"^Null value not supported for topic configs: x.y$"):
        choice.parse_topic(None)


@pytest.mark.parametrize(
    ("value", "text"), [(True, "true"), (0.5, "0.5"), (1.0, "1.0"), (7, "7"), ("a,b", "a,b")]
)
def test_topic_text_is_what_describe_configs_reports(value: object, text: str) -> None:
    assert declared(Kind.STRING, None).topic_text(value) == text
