"""Stored batches to the console's JSON records: formats, bounds, control batches."""

from __future__ import annotations

from rustka.ops.console.records import Page, decode_page, show_bytes
from rustka.record.batch import Record, compress_batch, encode_batch, set_base_offset


def _batch(base: int, records: list[Record], codec: str | None = None) -> bytes:
    data = bytearray(encode_batch(records, timestamp=1_700_000_000_000))
    set_base_offset(data, 0, base)
    return compress_batch(bytes(data), codec) if codec else bytes(data)


def test_text_json_and_hex() -> None:
    assert show_bytes(None, "text", 10) is None
    assert show_bytes(b"caf\xc3\xa9", "text", 10) == {"size": 5, "text": "café"}
    assert show_bytes(b"\xff\x00", "text", 10) == {"size": 2, "hex": "ff00"}
    assert show_bytes(b'{"a": [1]}', "json", 100) == {
        "size": 10,
        "text": '{"a": [1]}',
        "json": {"a": [1]},
    }
    assert show_bytes(b"not json", "json", 100) == {"size": 8, "text": "not json"}
    assert show_bytes(b"[" * 100_000, "json", 200_000) == {"size": 100_000, "text": "[" * 100_000}
    assert show_bytes(b"abc", "hex", 10) == {"size": 3, "hex": "616263"}
    for not_json in (b"[1e999]", b"NaN", b"[-Infinity]"):
        assert show_bytes(not_json, "json", 100) == {
            "size": len(not_json),
            "text": not_json.decode(),
        }
    assert show_bytes(b"[1.5e3]", "json", 100)["json"] == [1500.0]


def test_a_cut_keeps_whole_characters() -> None:
    shown = show_bytes("ééé".encode(), "text", 3)
    assert shown == {"size": 6, "truncated": True, "text": "é"}
    assert show_bytes(b'{"a": 1}', "json", 4) == {"size": 8, "truncated": True, "text": '{"a"'}


def test_pages_stop_at_the_record_limit_and_resume() -> None:
    chunks = [_batch(0, [Record(b"k%d" % i, b"v%d" % i) for i in range(5)])]
    page = decode_page(chunks, 1, 2, 10_000, "text", Page(next_offset=1))
    assert [r["offset"] for r in page.records] == [1, 2]
    assert page.next_offset == 3
    assert page.records[0]["key"] == {"size": 2, "text": "k1"}


def test_pages_stop_at_the_byte_limit_but_always_move_on() -> None:
    chunks = [_batch(0, [Record(b"k", b"x" * 100) for _ in range(3)])]
    page = decode_page(chunks, 0, 10, 150, "text", Page())
    assert [r["offset"] for r in page.records] == [0]
    assert page.truncated and page.next_offset == 1
    tiny = decode_page(chunks, 0, 10, 10, "text", Page())
    [only] = tiny.records
    assert only["value"]["truncated"] and len(only["value"]["text"]) <= 10
    assert tiny.bytes <= 10 and tiny.next_offset == 1


def test_compressed_batches_and_headers() -> None:
    records = [Record(b"k", b"hello", (("h", b"v"), ("n", None)))]
    page = decode_page([_batch(7, records, "zstd")], 7, 10, 1000, "text", Page(next_offset=7))
    [record] = page.records
    assert record["offset"] == 7 and record["value"]["text"] == "hello"
    assert record["headers"] == [
        {"key": "h", "value": {"size": 1, "text": "v"}},
        {"key": "n", "value": None},
    ]
    assert record["timestamp"] == 1_700_000_000_000


def test_a_partial_batch_at_the_end_is_left_for_the_next_read() -> None:
    whole = _batch(0, [Record(b"a", b"1")])
    second = _batch(1, [Record(b"b", b"2")])
    page = decode_page([whole + second[:-5]], 0, 10, 1000, "text", Page())
    assert [r["offset"] for r in page.records] == [0]
    assert page.next_offset == 1
