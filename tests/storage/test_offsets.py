"""OffsetsStore: commits as a log, replay with last-value-wins, compaction."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from rustka.errors import InvalidName, InvalidRequest
from rustka.record.batch import Record, encode_batch
from rustka.storage.log_config import LogConfig
from rustka.storage.offsets import (
    OffsetsStore,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)


def _config() -> LogConfig:
    return LogConfig(segment_bytes=64 * 1024, flush="never", retention_ms=1, retention_bytes=1)


def _open(data_dir: Path, **kwargs: int) -> OffsetsStore:
    return OffsetsStore.open(data_dir, _config(), **kwargs)  # type: ignore[arg-type]


def test_key_encoding_round_trips() -> None:
    """A version-1 key decodes to the same (group, topic, partition), non-ASCII included."""
    key = encode_key("grüppe", "orders", 4_000_000_000)
    assert key[:2] == b"\x00\x01"
    assert decode_key(key) == ("grüppe", "orders", 4_000_000_000)
    assert decode_key(key + b"x") is None
    assert decode_key(key[:-1]) is None
    assert decode_key(b"\x00\x02" + key[2:]) is None


def test_commit_then_read_back(tmp_path: Path) -> None:
    """A commit is visible immediately; an uncommitted partition reads as None."""
    store = _open(tmp_path)
    try:
        store.commit("analytics", "orders", 2, 17)
        assert store.committed("analytics", "orders", 2) == 17
        assert store.committed("analytics", "orders", 1) is None
        assert store.committed("other", "orders", 2) is None
        assert store.committed_at("analytics", "orders", 2) is not None
    finally:
        store.close()


def test_log_lives_in_offsets_folder(tmp_path: Path) -> None:
    """Segments sit directly in data_dir/__offsets, as in the seed's layout."""
    store = _open(tmp_path)
    store.commit("g", "orders", 0, 1)
    store.close()
    assert os.listdir(tmp_path) == ["__offsets"]
    assert any(name.endswith(".log") for name in os.listdir(tmp_path / "__offsets"))


def test_last_value_wins_across_reopen(tmp_path: Path) -> None:
    """Replay keeps the newest commit of each key, including commits that went backwards."""
    store = _open(tmp_path)
    store.commit("g", "orders", 0, 5)
    store.commit("g", "orders", 0, 9)
    store.commit_many([("g", "orders", 1, 3), ("g", "orders", 0, 7)])
    store.close()

    reopened = _open(tmp_path)
    try:
        assert reopened.committed("g", "orders", 0) == 7
        assert reopened.committed("g", "orders", 1) == 3
        assert reopened.records_in_log == 4
        assert reopened.replay_skipped == 0
    finally:
        reopened.close()


def test_commit_many_appends_one_batch(tmp_path: Path) -> None:
    """commit_many writes its whole list as a single batch at consecutive offsets."""
    store = _open(tmp_path)
    try:
        store.commit_many([("g", "t", p, p * 10) for p in range(5)])
        assert store.log.end_offset == 5
        data = store.log.read(0, 1 << 20)
        assert struct.unpack_from(">i", data, 57)[0] == 5
        assert len(data) == struct.unpack_from(">i", data, 8)[0] + 12
    finally:
        store.close()


def test_many_groups_survive_reopen(tmp_path: Path) -> None:
    """Hundreds of groups and partitions replay into the same groups() view."""
    store = _open(tmp_path)
    for round_ in range(3):
        store.commit_many(
            [
                (f"group-{g}", f"topic-{g % 7}", p, round_ * 100 + g + p)
                for g in range(200)
                for p in range(3)
            ]
        )
    expected = store.groups()
    store.close()

    reopened = _open(tmp_path)
    try:
        groups = reopened.groups()
        assert groups == expected
        assert len(groups) == 200
        assert groups["group-13"] == {("topic-6", 0): 213, ("topic-6", 1): 214, ("topic-6", 2): 215}
    finally:
        reopened.close()


@pytest.mark.parametrize(
    ("commit", "error"),
    [
        (("", "orders", 0, 1), InvalidName),
        (("g\n", "orders", 0, 1), InvalidName),
        (("g", "../etc", 0, 1), InvalidName),
        (("g", "orders", -1, 1), InvalidRequest),
        (("g", "orders", 1 << 32, 1), InvalidRequest),
        (("g", "orders", 0, -1), InvalidRequest),
        (("g", "orders", 0, 1 << 64), InvalidRequest),
    ],
)
def test_invalid_commit_writes_nothing(
    tmp_path: Path, commit: tuple[str, str, int, int], error: type[Exception]
) -> None:
    """A batch with any invalid commit raises and appends nothing, even its valid entries."""
    store = _open(tmp_path)
    try:
        with pytest.raises(error):
            store.commit_many([("good", "orders", 0, 1), commit])
        assert store.log.end_offset == 0
        assert store.committed("good", "orders", 0) is None
    finally:
        store.close()


def test_replay_skips_unknown_versions(tmp_path: Path) -> None:
    """Records with an unknown key version or malformed value are skipped and counted."""
    store = _open(tmp_path)
    store.commit("g", "orders", 0, 4)
    future_key = b"\x00\x02" + encode_key("g", "orders", 0)[2:]
    store.log.append(
        encode_batch(
            [
                Record(future_key, encode_value(99, 0)),
                Record(encode_key("g", "orders", 0), b"short"),
                Record(None, None),
            ]
        )
    )
    store.close()

    reopened = _open(tmp_path)
    try:
        assert reopened.replay_skipped == 3
        assert reopened.committed("g", "orders", 0) == 4
    finally:
        reopened.close()


def test_retention_settings_do_not_delete_commits(tmp_path: Path) -> None:
    """The broker's retention limits never apply to the offsets log."""
    store = _open(tmp_path)
    try:
        store.commit("g", "orders", 0, 1)
        for i in range(2000):
            store.commit("g", "orders", 1, i)
        assert store.log.enforce_retention(now_ms=1 << 60) == []
        assert store.committed("g", "orders", 0) == 1
    finally:
        store.close()


def test_compact_rewrites_live_state_and_survives_reopen(tmp_path: Path) -> None:
    """compact() drops superseded records and the state is identical after reopen."""
    store = _open(tmp_path, compact_ratio=2, compact_min_records=10)
    for i in range(30):
        store.commit_many([("g1", "orders", 0, i), ("g2", "orders", 1, 100 + i)])
    store.commit("g3", "payments", 0, 7)
    assert store.records_in_log == 61
    assert store.needs_compaction()
    before = store.groups()
    end_before = store.log.end_offset

    assert store.compact() is True
    assert store.records_in_log == 3
    assert store.log.log_start_offset == end_before
    assert store.log.end_offset == end_before + 3
    assert store.groups() == before
    assert not store.needs_compaction()
    store.commit("g1", "orders", 0, 500)
    store.close()

    reopened = _open(tmp_path)
    try:
        assert reopened.committed("g1", "orders", 0) == 500
        assert reopened.committed("g2", "orders", 1) == 129
        assert reopened.committed("g3", "payments", 0) == 7
        assert reopened.records_in_log == 4
        logs = [n for n in os.listdir(tmp_path / "__offsets") if n.endswith(".log")]
        assert len(logs) == 1
    finally:
        reopened.close()


def test_compact_is_a_no_op_below_threshold(tmp_path: Path) -> None:
    """compact() leaves a log alone while it is not mostly superseded records."""
    store = _open(tmp_path, compact_ratio=4, compact_min_records=10)
    try:
        for p in range(8):
            store.commit("g", "orders", p, 1)
        assert store.compact() is False
        assert store.log.log_start_offset == 0
        assert store.records_in_log == 8
    finally:
        store.close()


def test_forced_compact_of_empty_store(tmp_path: Path) -> None:
    """A forced compaction of an empty store leaves a usable, empty log."""
    store = _open(tmp_path)
    assert store.compact(force=True) is True
    store.commit("g", "orders", 0, 3)
    store.close()
    reopened = _open(tmp_path)
    try:
        assert reopened.groups() == {"g": {("orders", 0): 3}}
    finally:
        reopened.close()


def _three_commit_batches(data_dir: Path) -> tuple[Path, int, int]:
    """Three commits in three batches; returns (segment, start and end of the middle batch)."""
    store = _open(data_dir)
    store.commit("g", "before", 0, 11)
    store.commit("g", "middle", 0, 22)
    store.commit("g", "after", 0, 33)
    store.close()
    [segment] = sorted((data_dir / "__offsets").glob("*.log"))
    data = segment.read_bytes()
    first = struct.unpack_from(">i", data, 8)[0] + 12
    second = struct.unpack_from(">i", data, first + 8)[0] + 12
    return segment, first, first + second


def test_startup_survives_every_flipped_byte_of_a_commit_batch(tmp_path: Path) -> None:
    """Flip each byte of the middle commit batch in turn: opening never raises, the commits
    before and after it still apply, the damage is counted with its file and position, and
    the next start is clean with the surviving commits kept."""
    segment, start, end = _three_commit_batches(tmp_path / "pristine")
    pristine = segment.read_bytes()
    counted = 0
    for i in range(start, end):
        data_dir = tmp_path / f"flip{i}"
        (data_dir / "__offsets").mkdir(parents=True)
        damaged = bytearray(pristine)
        damaged[i] ^= 0xFF
        (data_dir / "__offsets" / segment.name).write_bytes(bytes(damaged))
        store = _open(data_dir)
        try:
            assert store.committed("g", "before", 0) == 11, i
            assert store.committed("g", "after", 0) == 33, i
            if store.corrupt_batches_skipped:
                counted += 1
                [skip] = store.skipped_batches
                assert skip.file.name == segment.name
                assert skip.position == start, (i, str(skip))
            elif not 12 <= i - start < 16:
                # Only partitionLeaderEpoch is neither checked nor covered by the CRC.
                raise AssertionError(f"flip at {i} went unnoticed")
        finally:
            store.close()
        again = _open(data_dir)
        try:
            assert again.corrupt_batches_skipped == 0, i
            assert again.committed("g", "before", 0) == 11
            assert again.committed("g", "after", 0) == 33
        finally:
            again.close()
    assert counted == (end - start) - 4


def test_startup_survives_garbage_and_truncation(tmp_path: Path) -> None:
    """Garbage spliced between batches and a cut-off middle batch are skipped and reported."""
    segment, start, end = _three_commit_batches(tmp_path)
    data = segment.read_bytes()
    segment.write_bytes(data[:start] + b"\x02" * 100 + data[start : end - 10] + data[end:])
    store = _open(tmp_path)
    try:
        assert store.committed("g", "before", 0) == 11
        assert store.committed("g", "after", 0) == 33
        assert store.committed("g", "middle", 0) is None
        assert store.corrupt_batches_skipped >= 1
        assert all(s.position >= start for s in store.skipped_batches)
        assert "__offsets" in str(store.skipped_batches[0])
    finally:
        store.close()


def test_torn_tail_after_a_crash_is_not_counted(tmp_path: Path) -> None:
    """An incomplete last batch after an unclean stop is recovery's business, not damage."""
    segment, _start, _end = _three_commit_batches(tmp_path)
    data = segment.read_bytes()
    segment.write_bytes(data[:-7])
    store = OffsetsStore.open(tmp_path, _config(), recover=True)
    try:
        assert store.corrupt_batches_skipped == 0
        assert store.committed("g", "middle", 0) == 22
        assert store.committed("g", "after", 0) is None
    finally:
        store.close()


def test_metadata_round_trips_and_survives_reopen_and_compaction(tmp_path: Path) -> None:
    """A commit's metadata is stored in its value, replayed, and kept by compaction."""
    store = _open(tmp_path)
    store.commit("g", "orders", 0, 5, "checkpoint é")
    store.commit("g", "orders", 1, 6)
    assert store.committed_metadata("g", "orders", 0) == "checkpoint é"
    assert store.committed_metadata("g", "orders", 1) == ""
    assert store.committed_metadata("g", "orders", 2) is None
    store.close()
    reopened = _open(tmp_path)
    try:
        assert reopened.group_metadata("g") == {("orders", 0): "checkpoint é", ("orders", 1): ""}
        assert reopened.committed("g", "orders", 0) == 5
        assert reopened.compact(force=True)
    finally:
        reopened.close()
    compacted = _open(tmp_path)
    try:
        assert compacted.group_metadata("g")[("orders", 0)] == "checkpoint é"
    finally:
        compacted.close()


def test_value_without_metadata_keeps_the_original_16_byte_format(tmp_path: Path) -> None:
    """Logs written before metadata was kept (16-byte values) replay with metadata ""."""
    assert encode_value(7, 9) == struct.pack(">QQ", 7, 9)
    assert decode_value(struct.pack(">QQ", 7, 9)) == (7, 9, "")
    assert decode_value(encode_value(7, 9, "m")) == (7, 9, "m")
    assert decode_value(encode_value(7, 9, "m") + b"x") is None
    store = _open(tmp_path)
    store.log.append(
        encode_batch([Record(encode_key("old", "orders", 0), struct.pack(">QQ", 3, 1))])
    )
    store.close()
    reopened = _open(tmp_path)
    try:
        assert reopened.committed("old", "orders", 0) == 3
        assert reopened.committed_metadata("old", "orders", 0) == ""
        assert reopened.replay_skipped == 0
    finally:
        reopened.close()


def test_too_long_metadata_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    """Metadata past Kafka's offset.metadata.max.bytes (4096) is refused before any write."""
    store = _open(tmp_path)
    try:
        with pytest.raises(InvalidRequest, match="4096"):
            store.commit_many([("g", "orders", 0, 1, ""), ("g", "orders", 1, 1, "x" * 4097)])
        assert store.log.end_offset == 0
        store.commit("g", "orders", 1, 1, "x" * 4096)
        assert store.committed_metadata("g", "orders", 1) == "x" * 4096
    finally:
        store.close()


def test_a_bare_key_deletes_the_commit_across_reopen(tmp_path: Path) -> None:
    """A (group, topic, partition) commit is a tombstone; replay and compaction honour it."""
    store = _open(tmp_path)
    store.commit_many([("g", "orders", 0, 5), ("g", "orders", 1, 6)])
    store.commit_many([("g", "orders", 0)])
    assert store.group_partitions("g") == [("orders", 1)]
    store.close()
    reopened = _open(tmp_path)
    try:
        assert reopened.groups() == {"g": {("orders", 1): 6}}
        assert reopened.replay_skipped == 0
    finally:
        reopened.close()


def test_orphaned_lists_the_commits_of_topics_that_are_gone(tmp_path: Path) -> None:
    store = _open(tmp_path)
    try:
        store.commit_many([("g", "gone", 1, 4), ("g", "kept", 0, 2), ("h", "gone", 0, 9)])
        assert store.orphaned({"kept"}) == [("g", "gone", 1), ("h", "gone", 0)]
        assert store.orphaned({"kept", "gone"}) == []
    finally:
        store.close()
