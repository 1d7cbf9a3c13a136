"""Tests for the declaration machinery and primitive encodings (rustka.kafka.schema).

The structs here are test-only declarations chosen to cover every primitive, classic vs
compact encodings, tagged fields and version gating; expected bytes are written by hand.
"""

from __future__ import annotations

import contextlib
import tracemalloc
from typing import Any

import pytest

from rustka.kafka.schema import (
    BIG_CHUNK,
    BOOL,
    BYTES,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    RECORDS,
    STRING,
    UINT16,
    UUID,
    ApiSpec,
    Array,
    Field,
    KafkaCodecError,
    Struct,
    compile_error_counter,
    decode_struct,
    encode_struct,
    parse_versions,
    read_request_header,
    read_uvarint,
    skip_tagged_fields,
    write_uvarint,
)

F = Field


def hx(*chunks: str) -> bytes:
    """Hex with spaces allowed, so vectors can be split field by field."""
    return bytes.fromhex("".join(chunks).replace(" ", ""))


def enc(st: Struct, version: int, flexible: bool, body: dict[str, Any]) -> bytes:
    return b"".join(encode_struct(st, version, flexible, body))


def dec(st: Struct, version: int, flexible: bool, data: bytes) -> dict[str, Any]:
    value, end = decode_struct(st, version, flexible, data)
    assert end == len(data), "decoder must consume exactly the encoded bytes"
    return value


# --- version ranges --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("3+", (3, 0x7FFF)), ("2-4", (2, 4)), ("5", (5, 5)), ("none", None), (" 0+ ", (0, 0x7FFF))],
)
def test_parse_versions(spec: str, expected: tuple[int, int] | None) -> None:
    assert parse_versions(spec) == expected


@pytest.mark.parametrize("spec", ["", "x", "4-2", "-1", "3++", "1-2-3", "99999"])
def test_parse_versions_rejects(spec: str) -> None:
    with pytest.raises(ValueError):
        parse_versions(spec)


# --- declarations ----------------------------------------------------------------------


def test_declaration_rejects_duplicate_names() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        Struct([F("a", INT8), F("a", INT16)], "Dup")


def test_declaration_rejects_duplicate_tags() -> None:
    with pytest.raises(ValueError, match="duplicate tags"):
        Struct([F("a", INT8, tag=1), F("b", INT16, tag=1)], "Dup")


@pytest.mark.parametrize("name", ["CamelCase", "with space", "1x", ""])
def test_declaration_rejects_bad_names(name: str) -> None:
    with pytest.raises(ValueError, match="snake_case"):
        F(name, INT8)


def test_declaration_rejects_nullable_fixed_and_record_arrays() -> None:
    with pytest.raises(ValueError, match="null"):
        F("a", INT32, nullable="0+")
    with pytest.raises(ValueError, match="records"):
        Array(RECORDS)
    with pytest.raises(ValueError, match="no version"):
        F("a", INT32, "none")


# --- uvarint ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "8001"),
        (300, "ac02"),
        (16384, "808001"),
        (2**31 - 1, "ffffffff07"),
    ],
)
def test_uvarint_vectors(value: int, encoded: str) -> None:
    w = bytearray()
    write_uvarint(w, value)
    assert w.hex() == encoded
    assert read_uvarint(memoryview(bytes.fromhex(encoded)), 0) == (value, len(w))


def test_uvarint_longer_than_five_bytes_is_refused() -> None:
    with pytest.raises(KafkaCodecError, match="longer than 5"):
        read_uvarint(memoryview(hx("ffffffffff01")), 0)


def test_uvarint_negative_cannot_be_written() -> None:
    with pytest.raises(KafkaCodecError):
        write_uvarint(bytearray(), -1)


def test_skip_tagged_fields() -> None:
    # two unknown tags: tag 2 with 3 bytes, tag 9 with 0 bytes, then one trailing byte
    data = memoryview(hx("02 02 03 aabbcc 09 00 ee"))
    assert skip_tagged_fields(data, 0) == 8
    with pytest.raises(KafkaCodecError, match="overruns"):
        skip_tagged_fields(memoryview(hx("01 02 05 aabb")), 0)


# --- fixed-width primitives ------------------------------------------------------------

FIXED = Struct(
    [
        F("a", INT8),
        F("b", INT16),
        F("c", UINT16),
        F("d", INT32),
        F("e", INT64),
        F("f", FLOAT64),
        F("g", BOOL),
        F("u", UUID),
    ],
    "Fixed",
)
FIXED_BODY = {
    "a": -1,
    "b": -2,
    "c": 65535,
    "d": -3,
    "e": 2**40,
    "f": 1.5,
    "g": True,
    "u": bytes(range(16)),
}
FIXED_HEX = hx(
    "ff",  # a int8 -1
    "fffe",  # b int16 -2
    "ffff",  # c uint16 65535
    "fffffffd",  # d int32 -3
    "0000010000000000",  # e int64 2**40
    "3ff8000000000000",  # f float64 1.5
    "01",  # g bool true
    "000102030405060708090a0b0c0d0e0f",  # u uuid
)


def test_fixed_primitives_classic() -> None:
    assert enc(FIXED, 0, False, FIXED_BODY) == FIXED_HEX
    assert dec(FIXED, 0, False, FIXED_HEX) == FIXED_BODY


def test_fixed_primitives_flexible_add_only_the_tag_section() -> None:
    assert enc(FIXED, 0, True, FIXED_BODY) == FIXED_HEX + hx("00")
    assert dec(FIXED, 0, True, FIXED_HEX + hx("00")) == FIXED_BODY


def test_fixed_defaults_when_body_is_empty() -> None:
    expected = hx("00 0000 0000 00000000 0000000000000000 0000000000000000 00") + bytes(16)
    assert enc(FIXED, 0, False, {}) == expected


def test_bool_decodes_any_nonzero_as_true() -> None:
    st = Struct([F("flag", BOOL)], "B")
    assert dec(st, 0, False, hx("02")) == {"flag": True}


# --- variable-length primitives: classic vs compact -------------------------------------

VARS = Struct(
    [
        F("s", STRING),
        F("ns", STRING, nullable="0+"),
        F("by", BYTES),
        F("nb", BYTES, nullable="0+"),
        F("rec", RECORDS, nullable="0+"),
        F("ints", Array(INT32)),
        F("strs", Array(STRING)),
        F("items", [F("x", INT16)], nullable="0+"),
    ],
    "Vars",
)
VARS_BODY = {
    "s": "hé",
    "ns": None,
    "by": b"\x01\x02",
    "nb": None,
    "rec": b"R",
    "ints": [1, -1],
    "strs": ["a"],
    "items": [{"x": 7}],
}
VARS_CLASSIC = hx(
    "0003 68c3a9",  # s: int16 length 3, "hé" in UTF-8
    "ffff",  # ns: null string
    "00000002 0102",  # by: int32 length 2
    "ffffffff",  # nb: null bytes
    "00000001 52",  # rec: int32 length 1, "R"
    "00000002 00000001 ffffffff",  # ints: count 2, 1, -1
    "00000001 0001 61",  # strs: count 1, "a"
    "00000001 0007",  # items: count 1, x=7
)
VARS_COMPACT = hx(
    "04 68c3a9",  # s: uvarint(3+1)
    "00",  # ns: null
    "03 0102",  # by: uvarint(2+1)
    "00",  # nb: null
    "02 52",  # rec: uvarint(1+1)
    "03 00000001 ffffffff",  # ints: uvarint(2+1)
    "02 02 61",  # strs: uvarint(1+1), compact "a"
    "02 0007 00",  # items: uvarint(1+1), x=7, element tag section
    "00",  # struct tag section
)


def _norm(value: Any) -> Any:
    """Records decode to memoryviews; compare them as bytes."""
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_norm(v) for v in value]
    return value


def test_variable_primitives_classic() -> None:
    assert enc(VARS, 0, False, VARS_BODY) == VARS_CLASSIC
    assert _norm(dec(VARS, 0, False, VARS_CLASSIC)) == VARS_BODY


def test_variable_primitives_compact() -> None:
    assert enc(VARS, 0, True, VARS_BODY) == VARS_COMPACT
    assert _norm(dec(VARS, 0, True, VARS_COMPACT)) == VARS_BODY


def test_nullable_array_null_vs_empty() -> None:
    body = dict(VARS_BODY, items=None)
    assert enc(VARS, 0, False, body).endswith(hx("ffffffff"))
    assert enc(VARS, 0, True, body).endswith(hx("00 00"))
    body = dict(VARS_BODY, items=[])
    assert enc(VARS, 0, False, body).endswith(hx("00000000"))
    assert enc(VARS, 0, True, body).endswith(hx("01 00"))
    assert dec(VARS, 0, False, enc(VARS, 0, False, body))["items"] == []
    assert dec(VARS, 0, True, enc(VARS, 0, True, dict(body, items=None)))["items"] is None


def test_records_decode_is_a_zero_copy_view() -> None:
    data = bytes(VARS_CLASSIC)
    rec = decode_struct(VARS, 0, False, data)[0]["rec"]
    assert isinstance(rec, memoryview)
    assert rec.obj is data
    assert rec.tobytes() == b"R"


def test_records_accept_chunks_and_keep_big_ones_apart() -> None:
    st = Struct([F("a", INT32), F("rec", RECORDS, nullable="0+"), F("b", INT16)], "R")
    big = b"x" * BIG_CHUNK
    body = {"a": 1, "rec": [b"ab", memoryview(big), bytearray(b"cd")], "b": 2}
    parts = encode_struct(st, 0, False, body)
    total = 2 + BIG_CHUNK + 2
    # header bytes, the big chunk itself (not copied), then the small tail with b
    assert [bytes(p) for p in parts] == [
        hx("00000001") + total.to_bytes(4, "big") + b"ab",
        big,
        b"cd" + hx("0002"),
    ]
    assert isinstance(parts[1], memoryview)
    small = encode_struct(st, 0, True, {"a": 1, "rec": [b"ab", b"cd"], "b": 2})
    assert small == [hx("00000001 05 61626364 0002 00")]


def test_empty_struct_encodes_to_nothing_or_a_tag_byte() -> None:
    st = Struct([], "Empty")
    assert enc(st, 0, False, {}) == b""
    assert enc(st, 0, True, {}) == hx("00")
    assert dec(st, 0, True, hx("00")) == {}


# --- version gating --------------------------------------------------------------------

VERSIONED = Struct(
    [
        F("a", INT32),
        F("b", INT16, "1-2", default=-1),
        F("c", STRING, "2+", nullable="2+"),
        F("d", [F("x", INT8), F("y", INT8, "2+")], "1+"),
    ],
    "Versioned",
)


def test_fields_absent_in_a_version_are_skipped_on_encode() -> None:
    body = {"a": 1, "b": 5, "c": "x", "d": [{"x": 1, "y": 2}]}
    assert enc(VERSIONED, 0, False, body) == hx("00000001")
    assert enc(VERSIONED, 1, False, body) == hx("00000001 0005 00000001 01")
    assert enc(VERSIONED, 2, False, body) == hx("00000001 0005 0001 78 00000001 01 02")
    assert enc(VERSIONED, 3, False, body) == hx("00000001 0001 78 00000001 01 02")


def test_fields_absent_in_a_version_get_their_default_on_decode() -> None:
    assert dec(VERSIONED, 0, False, hx("00000001")) == {"a": 1, "b": -1, "c": "", "d": []}
    assert dec(VERSIONED, 3, False, hx("00000001 ffff 00000001 01 02")) == {
        "a": 1,
        "b": -1,
        "c": None,
        "d": [{"x": 1, "y": 2}],
    }
    assert dec(VERSIONED, 1, False, hx("00000001 0005 00000001 01")) == {
        "a": 1,
        "b": 5,
        "c": "",
        "d": [{"x": 1, "y": 0}],
    }


def test_missing_keys_take_the_field_default_on_encode() -> None:
    # b defaults to -1, c is nullable in v2 so it defaults to null, d to an empty array
    assert enc(VERSIONED, 2, False, {}) == hx("00000000 ffff ffff 00000000")


def test_nested_single_struct() -> None:
    inner = Struct([F("leader_id", INT32, default=-1), F("epoch", INT32)], "Inner")
    st = Struct([F("p", INT8), F("leader", inner, "1+")], "Outer")
    assert enc(st, 1, False, {"p": 1, "leader": {"epoch": 3}}) == hx("01 ffffffff 00000003")
    assert enc(st, 1, True, {"p": 1}) == hx("01 ffffffff 00000000 00 00")
    assert dec(st, 0, False, hx("01")) == {"p": 1, "leader": {"leader_id": -1, "epoch": 0}}
    assert dec(st, 1, True, hx("01 00000002 00000003 00 00")) == {
        "p": 1,
        "leader": {"leader_id": 2, "epoch": 3},
    }


# --- tagged fields ---------------------------------------------------------------------

TAGGED = Struct(
    [
        F("a", INT32),
        F("t_int", INT32, tag=1, default=-1),
        F("t_str", STRING, tag=0, nullable="0+"),
        F("t_arr", [F("k", INT8)], tag=7),
        F("late", INT16, "1+", tag=2, tagged_versions="1+"),
    ],
    "Tagged",
)


def test_tagged_fields_at_default_are_not_written() -> None:
    assert enc(TAGGED, 0, True, {"a": 1}) == hx("00000001 00")
    assert enc(TAGGED, 0, True, {"a": 1, "t_int": -1, "t_str": None, "t_arr": []}) == hx(
        "00000001 00"
    )


def test_tagged_fields_are_written_in_ascending_tag_order() -> None:
    body = {"a": 1, "t_int": 5, "t_str": "z", "t_arr": [{"k": 2}]}
    expected = hx(
        "00000001",  # a
        "03",  # three tagged fields
        "00 02 02 7a",  # tag 0, 2 bytes: compact "z"
        "01 04 00000005",  # tag 1, 4 bytes: int32 5
        "07 03 02 02 00",  # tag 7, 3 bytes: compact array of 1, k=2, element tags
    )
    assert enc(TAGGED, 0, True, body) == expected
    assert dec(TAGGED, 0, True, expected) == dict(body, late=0)


def test_tagged_field_outside_its_tagged_versions_is_absent() -> None:
    assert enc(TAGGED, 0, True, {"a": 1, "late": 9}) == hx("00000001 00")
    assert enc(TAGGED, 1, True, {"a": 1, "late": 9}) == hx("00000001 01 02 02 0009")


def test_unknown_tags_are_skipped() -> None:
    data = hx("00000001 03", "03 02 abcd", "01 04 00000009", "63 00")  # tags 3 and 99 unknown
    assert dec(TAGGED, 0, True, data) == {
        "a": 1,
        "t_int": 9,
        "t_str": None,
        "t_arr": [],
        "late": 0,
    }


def test_tagged_fields_are_absent_in_classic_encoding() -> None:
    assert enc(TAGGED, 0, False, {"a": 1, "t_int": 5}) == hx("00000001")
    assert dec(TAGGED, 0, False, hx("00000001"))["t_int"] == -1


def test_tagged_field_with_a_wrong_length_is_refused() -> None:
    with pytest.raises(KafkaCodecError, match="wrong length"):
        decode_struct(TAGGED, 0, True, hx("00000001 01 01 05 0000000900"))
    with pytest.raises(KafkaCodecError, match="overruns"):
        decode_struct(TAGGED, 0, True, hx("00000001 01 01 09 00000009"))


# --- hostile input ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("st", "flexible", "data"),
    [
        (FIXED, False, FIXED_HEX),
        (FIXED, True, FIXED_HEX + hx("00")),
        (VARS, False, VARS_CLASSIC),
        (VARS, True, VARS_COMPACT),
        (TAGGED, True, hx("00000001 03 00 02 02 7a 01 04 00000005 07 03 02 02 00")),
    ],
    ids=["fixed", "fixed-flex", "vars", "vars-flex", "tagged"],
)
def test_truncation_at_every_byte_raises_only_codec_errors(
    st: Struct, flexible: bool, data: bytes
) -> None:
    for cut in range(len(data)):
        with pytest.raises(KafkaCodecError):
            decode_struct(st, 0, flexible, data[:cut])


def _peak_bytes_while(fn: Any) -> int:
    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize(
    ("st", "flexible", "data", "message"),
    [
        (VARS, False, hx("7fff 00"), "string of 32767 bytes"),
        (VARS, True, hx("ffffffff07 00"), "compact string"),
        (Struct([F("b", BYTES)]), False, hx("7fffffff 00"), "bytes of 2147483647"),
        (Struct([F("r", RECORDS)]), True, hx("ffffffff07"), "compact records"),
        (Struct([F("i", Array(INT32))]), False, hx("7fffffff 00000001"), "2147483647 elements"),
        (Struct([F("i", Array(INT64))]), True, hx("ffffffff07 00"), "elements exceeds"),
        (Struct([F("s", [F("x", INT8)])]), False, hx("7fffffff 01"), "elements exceeds"),
        (Struct([F("s", Array(STRING))]), False, hx("40000000 0000 0000"), "elements exceeds"),
    ],
)
def test_absurd_lengths_are_refused_before_allocating(
    st: Struct, flexible: bool, data: bytes, message: str
) -> None:
    def attempt() -> None:
        with pytest.raises(KafkaCodecError, match=message):
            decode_struct(st, 0, flexible, data)

    assert _peak_bytes_while(attempt) < 1_000_000


def test_empty_struct_arrays_still_count_one_byte_per_element() -> None:
    st = Struct([F("s", [F("x", INT8, "5+")])], "E")  # elements are empty in v0
    with pytest.raises(KafkaCodecError, match="elements exceeds"):
        decode_struct(st, 0, False, hx("7fffffff"))


@pytest.mark.parametrize(
    ("st", "data", "message"),
    [
        (Struct([F("s", STRING)]), hx("ffff"), "invalid string length -1"),
        (Struct([F("s", STRING, nullable="0+")]), hx("fffe"), "invalid string length -2"),
        (Struct([F("b", BYTES)]), hx("ffffffff"), "invalid bytes length"),
        (Struct([F("r", RECORDS)]), hx("fffffff0"), "invalid records length"),
        (Struct([F("a", Array(INT8))]), hx("ffffffff"), "invalid array length -1"),
        (Struct([F("a", Array(INT8), nullable="0+")]), hx("80000000"), "invalid array length"),
        (Struct([F("s", STRING)]), hx("0002 c328"), "malformed"),  # invalid UTF-8
    ],
)
def test_invalid_lengths_and_nulls_are_refused(st: Struct, data: bytes, message: str) -> None:
    with pytest.raises(KafkaCodecError, match=message):
        decode_struct(st, 0, False, data)


@pytest.mark.parametrize(
    ("st", "data"),
    [
        (Struct([F("s", STRING)]), hx("00")),
        (Struct([F("b", BYTES)]), hx("00")),
        (Struct([F("r", RECORDS)]), hx("00")),
        (Struct([F("a", Array(INT8))]), hx("00")),
    ],
)
def test_compact_null_for_non_nullable_is_refused(st: Struct, data: bytes) -> None:
    with pytest.raises(KafkaCodecError, match="null"):
        decode_struct(st, 0, True, data + hx("00"))


def test_every_single_byte_corruption_raises_only_codec_errors() -> None:
    for st, flexible, data in [
        (VARS, False, VARS_CLASSIC),
        (VARS, True, VARS_COMPACT),
        (TAGGED, True, hx("00000001 03 00 02 02 7a 01 04 00000005 07 03 02 02 00")),
    ]:
        for i in range(len(data)):
            for byte in (0x00, 0x7F, 0x80, 0xFF):
                mutated = data[:i] + bytes([byte]) + data[i + 1 :]
                with contextlib.suppress(KafkaCodecError):
                    decode_struct(st, 0, flexible, mutated)


# --- encoding errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("st", "body", "message"),
    [
        (Struct([F("s", STRING)], "S"), {"s": None}, "not nullable"),
        (Struct([F("b", BYTES)], "S"), {"b": None}, "not nullable"),
        (Struct([F("a", Array(INT8))], "S"), {"a": None}, "not nullable"),
        (Struct([F("r", RECORDS)], "S"), {"r": None}, "not nullable"),
        (Struct([F("i", INT16)], "S"), {"i": 40000}, "cannot encode S"),
        (Struct([F("i", INT32)], "S"), {"i": "1"}, "cannot encode S"),
        (Struct([F("s", STRING)], "S"), {"s": 5}, "cannot encode S"),
        (Struct([F("s", STRING)], "S"), {"s": "x" * 40000}, "longer than 32767"),
        (Struct([F("a", [F("x", INT8)])], "S"), {"a": [None]}, "cannot encode S"),
    ],
)
def test_unencodable_bodies_raise_codec_errors(
    st: Struct, body: dict[str, Any], message: str
) -> None:
    with pytest.raises(KafkaCodecError, match=message):
        encode_struct(st, 0, False, body)


# --- ApiSpec headers -------------------------------------------------------------------

FAKE = ApiSpec(
    key=99,
    name="Fake",
    min_version=0,
    max_version=2,
    flexible_from=1,
    request=Struct([F("name", STRING)], "FakeRequest"),
    response=Struct([F("error_code", INT16)], "FakeResponse"),
)


def test_request_header_v1_and_v2() -> None:
    # v0 is not flexible: header v1, classic client id, classic body string
    frame = FAKE.encode_request(0, 7, "c", {"name": "n"})
    assert frame == hx("0063 0000 00000007 0001 63", "0001 6e")
    # v1 is flexible: header v2 keeps the classic client id and adds a tag byte
    frame = FAKE.encode_request(1, 7, None, {"name": "n"})
    assert frame == hx("0063 0001 00000007 ffff 00", "02 6e 00")
    header, pos = read_request_header(frame, {99: FAKE})
    assert header == (99, 1, 7, None)
    assert FAKE.decode_request(1, frame, pos) == {"name": "n"}


def test_request_header_v2_skips_unknown_header_tags() -> None:
    frame = hx("0063 0002 00000007 0001 63 01 05 02 abcd", "02 6e 00")
    header, pos = read_request_header(frame, {99: FAKE})
    assert header.client_id == "c"
    assert pos == 16  # 8 fixed + 3 client id + 5 tag section
    assert FAKE.decode_request(2, frame, pos) == {"name": "n"}


def test_request_header_of_unknown_api_reads_as_v1() -> None:
    header, pos = read_request_header(hx("03e7 0005 00000001 0000 ff"), {})
    assert header == (999, 5, 1, "")
    assert pos == 10


def test_response_header_v0_and_v1() -> None:
    assert FAKE.encode_response(0, 7, {"error_code": 3}) == hx("00000007 0003")
    assert FAKE.encode_response(1, 7, {"error_code": 3}) == hx("00000007 00 0003 00")
    assert FAKE.decode_response(1, hx("00000007 01 00 00 0003 00")) == (7, {"error_code": 3})
    always_v0 = ApiSpec(
        key=98,
        name="AlwaysV0",
        min_version=0,
        max_version=1,
        flexible_from=1,
        request=FAKE.request,
        response=FAKE.response,
        response_header_v0_always=True,
    )
    assert always_v0.encode_response(1, 7, {"error_code": 3}) == hx("00000007 0003 00")


def test_unsupported_versions_are_refused() -> None:
    with pytest.raises(KafkaCodecError, match="not supported"):
        FAKE.encode_response(3, 1, {})
    with pytest.raises(KafkaCodecError, match="not supported"):
        FAKE.decode_request(3, hx("0000"), 0)


def test_codecs_are_compiled_once() -> None:
    first = FAKE.codec(1, True)
    assert FAKE.codec(1, True) is first


_ERRORS_DECLARED = Struct(
    [
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field(
            "topics",
            [
                Field("name", STRING),
                Field(
                    "partitions",
                    [Field("index", INT32), Field("error_code", INT16, "1+")],
                ),
                Field("notes", [Field("text", STRING)]),
            ],
        ),
        Field("extra", [Field("error_code", INT16)], "1+", tag=0),
    ],
    "Errors",
)


def _errors_body() -> dict[str, Any]:
    return {
        "throttle_time_ms": 0,
        "error_code": 7,
        "topics": [
            {"name": "a", "partitions": [{"index": 0, "error_code": 3}, {"index": 1}]},
            {"name": "b", "partitions": [{"index": 0, "error_code": 3}], "notes": []},
            {"name": "c", "partitions": [{"index": 0, "error_code": 0}]},
        ],
        "extra": [{"error_code": 9}],
    }


def test_error_counter_counts_what_the_version_sends() -> None:
    """The counter derived from a declaration counts each non-zero error_code the
    encoder would send: nested arrays, defaults and zeros skipped, fields absent from the
    version (partitions' codes before v1, the tagged array outside flexible versions)
    not counted, and counts added to what ``out`` holds."""
    body = _errors_body()
    out: dict[int, int] = {3: 1}
    compile_error_counter(_ERRORS_DECLARED, 1, True)(body, out)
    assert out == {3: 3, 7: 1, 9: 1}
    old = {}
    compile_error_counter(_ERRORS_DECLARED, 0, False)(body, old)
    assert old == {7: 1}
    not_flexible = {}
    compile_error_counter(_ERRORS_DECLARED, 1, False)(body, not_flexible)
    assert not_flexible == {3: 2, 7: 1}
    empty = {}
    compile_error_counter(_ERRORS_DECLARED, 1, True)({"topics": None}, empty)
    assert empty == {}
