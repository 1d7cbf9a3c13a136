"""File names, the recovery-point file, the cleaner's files and the topic-config file
(rustka/storage/log_files.py)."""

from __future__ import annotations

import pytest

from rustka.storage.log_files import (
    RECOVERY_POINT_SIZE,
    CleanerCheckpoint,
    CleanerSwap,
    DamagedFile,
    DamagedRecoveryPoint,
    base_offset_of,
    decode_cleaner_checkpoint,
    decode_cleaner_swap,
    decode_recovery_point,
    decode_topic_config,
    encode_cleaner_checkpoint,
    encode_cleaner_swap,
    encode_recovery_point,
    encode_topic_config,
    index_name,
    log_name,
    segment_file_name,
    time_index_name,
)


def test_names_are_twenty_digit_base_offsets_and_parse_back() -> None:
    assert log_name(42) == "00000000000000000042.log"
    assert index_name(42) == "00000000000000000042.index"
    assert time_index_name(2**63 - 1) == "09223372036854775807.timeindex"
    assert segment_file_name(7, ".deleted") == "00000000000000000007.deleted"
    assert base_offset_of(log_name(123)) == 123
    assert base_offset_of(index_name(5), ".index") == 5


@pytest.mark.parametrize(
    "name", ["42.log", "0000000000000000042.log", "00000000000000000042.log~", "notes.txt", ""]
)
def test_stray_files_are_not_segments(name: str) -> None:
    assert base_offset_of(name) is None


def test_recovery_point_round_trips_and_damage_is_named() -> None:
    data = encode_recovery_point(1234)
    assert len(data) == RECOVERY_POINT_SIZE == 12
    assert decode_recovery_point(data) == 1234
    with pytest.raises(DamagedRecoveryPoint, match="checksum mismatch") as bad_crc:
        decode_recovery_point(data[:8] + bytes(4))
    assert bad_crc.value.position == 8
    with pytest.raises(DamagedRecoveryPoint, match="11 bytes, expected 12") as torn:
        decode_recovery_point(data[:11])
    assert torn.value.position is None


def test_cleaner_checkpoint_round_trips_and_damage_is_detected() -> None:
    checkpoint = CleanerCheckpoint(first_dirty=900, cleaned_below=850, horizon=-1)
    data = encode_cleaner_checkpoint(checkpoint)
    assert decode_cleaner_checkpoint(data) == checkpoint
    flipped = bytearray(data)
    flipped[7] ^= 1
    for bad in (data[:-1], bytes(flipped), b""):
        with pytest.raises(DamagedFile):
            decode_cleaner_checkpoint(bad)


def test_cleaner_swap_round_trips_and_damage_is_detected() -> None:
    swap = CleanerSwap(base=10, replaced=(10, 40, 70), cleaned_below=100)
    data = encode_cleaner_swap(swap)
    assert decode_cleaner_swap(data) == swap
    flipped = bytearray(data)
    flipped[9] ^= 1
    foreign = encode_cleaner_swap(CleanerSwap(5, (10, 40), 100))
    for bad in (data[:-2], bytes(flipped), b"RKCS", foreign):
        with pytest.raises(DamagedFile):
            decode_cleaner_swap(bad)


def test_topic_config_round_trips_in_name_order() -> None:
    configs = {"retention.ms": "-1", "cleanup.policy": "compact,delete", "é.x": "ü"}
    data = encode_topic_config(configs)
    assert decode_topic_config(data) == configs
    assert list(decode_topic_config(data)) == sorted(configs)
    assert decode_topic_config(encode_topic_config({})) == {}


def test_a_damaged_topic_config_file_is_never_read_as_configs() -> None:
    data = encode_topic_config({"segment.bytes": "1000", "retention.ms": "5"})
    for cut in range(len(data)):
        with pytest.raises(DamagedFile):
            decode_topic_config(data[:cut])
    for i in range(len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 0x01
        with pytest.raises(DamagedFile):
            decode_topic_config(bytes(flipped))
    with pytest.raises(DamagedFile, match="not a version 1"):
        decode_topic_config(_with_crc(b"RKTX\x01" + bytes(4)))
    twice = b"RKTC\x01" + (2).to_bytes(4, "big") + 2 * (b"\x00\x01a" + bytes(4))
    with pytest.raises(DamagedFile, match="appears twice"):
        decode_topic_config(_with_crc(twice))
    with pytest.raises(DamagedFile, match="follow the last"):
        decode_topic_config(_with_crc(b"RKTC\x01" + bytes(4) + b"x"))


def _with_crc(body: bytes) -> bytes:
    from crc32c import crc32c

    return body + crc32c(body).to_bytes(4, "big")
