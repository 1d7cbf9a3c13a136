"""Compressed batches as real Kafka clients build them: decoded, validated, never crashing."""

from __future__ import annotations

import random
import struct
import warnings

import cramjam
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from crc32c import crc32c

from rustka.errors import CorruptBatch, InvalidBatch
from rustka.record.batch import (
    HEADER_SIZE,
    Record,
    compress_batch,
    decode_records,
    encode_batch,
    parse_header,
    validate_batches,
)
from rustka.record.compression import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    compress,
    decompress,
)

TS = 1_700_000_000_000
CODECS = [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]
NAMES = {CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy", CODEC_LZ4: "lz4", CODEC_ZSTD: "zstd"}


def expected(count: int) -> list[Record]:
    return [
        Record(
            key=None if i % 5 == 0 else b"key-%d" % i,
            value=b"value %d " % i * (1 + i % 40),
            headers=(("trace", b"t%d" % i),) if i % 3 == 0 else (),
            timestamp=TS + i,
            offset=i,
        )
        for i in range(count)
    ]


def aiokafka_batch(codec: int, count: int, *, producer_id: int = -1, sequence: int = -1) -> bytes:
    """A batch built by aiokafka's own record builder, which compresses with every codec."""
    builder = AioBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=sequence,
        batch_size=1 << 24,
    )
    for r in expected(count):
        headers = [(k, v) for k, v in r.headers]
        assert builder.append(
            r.offset, timestamp=r.timestamp, key=r.key, value=r.value, headers=headers
        )
    return bytes(builder.build())


@pytest.mark.clients
@pytest.mark.parametrize("codec", CODECS, ids=NAMES.get)
def test_aiokafka_batches_decode_and_validate(codec: int) -> None:
    """Each codec as aiokafka writes it (xerial snappy, LZ4 frames): records come back exactly."""
    batch = aiokafka_batch(codec, 300)
    header = parse_header(batch)
    assert header.attributes & 7 == codec
    [(pos, validated)] = validate_batches(batch)
    assert pos == 0 and validated.record_count == 300
    assert decode_records(batch) == expected(300)
    assert decode_records(batch, min_offset=290) == expected(300)[290:]


@pytest.mark.clients
def test_kafka_python_gzip_batch_decodes_and_validates() -> None:
    """kafka-python's builder (gzip: the codec it ships without optional packages)."""
    with warnings.catch_warnings():
        # kafka-python 3.0 imports its schemas with a deprecated importlib call.
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder

    builder = KafkaPythonBuilder(
        magic=2,
        compression_type=CODEC_GZIP,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 24,
    )
    for r in expected(50):
        builder.append(
            r.offset, timestamp=r.timestamp, key=r.key, value=r.value, headers=list(r.headers)
        )
    batch = bytes(builder.build())
    assert parse_header(batch).attributes & 7 == CODEC_GZIP
    assert validate_batches(batch)[0][1].record_count == 50
    assert decode_records(batch) == expected(50)


@pytest.mark.clients
def test_idempotent_compressed_batch_keeps_producer_fields() -> None:
    """Producer id, epoch and sequence of an idempotent client batch pass through."""
    batch = aiokafka_batch(CODEC_ZSTD, 10, producer_id=4242, sequence=7)
    header = validate_batches(batch)[0][1]
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 0, 7)


def test_raw_snappy_as_librdkafka_writes_it() -> None:
    """librdkafka sends snappy without xerial framing: a bare raw block."""
    plain = encode_batch(expected(20), timestamp=TS)
    records = bytes(cramjam.snappy.compress_raw(plain[HEADER_SIZE:]))
    batch = reseal(plain, records, CODEC_SNAPPY)
    assert validate_batches(batch)
    assert decode_records(batch) == expected(20)


@pytest.mark.clients
@pytest.mark.parametrize("codec", CODECS, ids=NAMES.get)
def test_compress_batch_round_trips_and_others_can_read_it(codec: int) -> None:
    """Our own compression is readable by aiokafka's reader, i.e. by Kafka clients."""
    from aiokafka.record.default_records import DefaultRecordBatch

    batch = compress_batch(encode_batch(expected(100), timestamp=TS), NAMES[codec])
    assert validate_batches(batch)
    assert decode_records(batch) == expected(100)
    theirs = DefaultRecordBatch(bytearray(batch))
    assert [(r.key, r.value) for r in theirs] == [(r.key, r.value) for r in expected(100)]


def reseal(plain: bytes, records: bytes, codec: int) -> bytes:
    """``plain``'s header around ``records`` with codec bits, a fresh length and CRC."""
    header = bytearray(plain[:HEADER_SIZE])
    struct.pack_into(">h", header, 21, codec)
    struct.pack_into(">i", header, 8, HEADER_SIZE - 12 + len(records))
    struct.pack_into(">I", header, 17, crc32c(bytes(header[21:]) + records))
    return bytes(header) + records


@pytest.mark.clients
@pytest.mark.parametrize("codec", CODECS, ids=NAMES.get)
def test_damaged_compressed_payloads_are_invalid_batch(codec: int) -> None:
    """Truncated or flipped compressed bytes behind a valid CRC: always InvalidBatch when
    validating and CorruptBatch when decoding, never another exception."""
    good = aiokafka_batch(codec, 60)
    plain = good[:HEADER_SIZE]
    records = good[HEADER_SIZE:]
    rng = random.Random(codec)
    variants = [records[:cut] for cut in (0, 1, 5, len(records) // 2, len(records) - 1)]
    for _ in range(150):
        damaged = bytearray(records)
        damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
        variants.append(bytes(damaged))
    outcomes = {"rejected": 0}
    for body in variants:
        batch = reseal(plain, body, codec)
        try:
            validate_batches(batch)
        except InvalidBatch:
            outcomes["rejected"] += 1
            with pytest.raises(CorruptBatch):
                decode_records(batch)
            continue
        # Damage the codec cannot see (e.g. inside an unchecked literal) must still decode.
        assert len(decode_records(batch)) == 60
    assert outcomes["rejected"] >= 5


@pytest.mark.parametrize("codec", CODECS, ids=NAMES.get)
def test_zip_bomb_is_refused_at_the_limit(codec: int) -> None:
    """A block that expands beyond the limit fails without being expanded in full."""
    bomb = compress(codec, b"\0" * (32 * 1024 * 1024))
    with pytest.raises(InvalidBatch, match=r"more than the 1048576-byte limit"):
        decompress(codec, bomb, 1024 * 1024)
    assert len(decompress(codec, compress(codec, b"\1" * 1024 * 1024), 1024 * 1024)) == 1 << 20


def test_validate_applies_its_decompression_limit() -> None:
    """validate_batches passes its limit down: a batch over it is InvalidBatch."""
    batch = compress_batch(encode_batch(expected(400), timestamp=TS), "zstd")
    with pytest.raises(InvalidBatch, match="batch 0 at position 0: zstd records decompress"):
        validate_batches(batch, max_decompressed_bytes=1000)
    assert validate_batches(batch)


def test_bad_xerial_framing_is_invalid_batch() -> None:
    """A xerial block length pointing past the payload is named, not crashed on."""
    plain = encode_batch(expected(5), timestamp=TS)
    framed = compress(CODEC_SNAPPY, plain[HEADER_SIZE:])
    broken = framed[:16] + struct.pack(">i", 10_000) + framed[20:]
    with pytest.raises(InvalidBatch, match="xerial block of 10000 bytes"):
        validate_batches(reseal(plain, broken, CODEC_SNAPPY))
    with pytest.raises(InvalidBatch, match="truncated xerial"):
        validate_batches(reseal(plain, framed[:10], CODEC_SNAPPY))


def test_compressed_records_are_validated_too() -> None:
    """A bad record inside a compressed block is found after decompression."""
    plain = bytearray(encode_batch(expected(3), timestamp=TS))
    # The first record's offset delta byte (after length, attributes, timestampDelta).
    plain[HEADER_SIZE + 3] = 0x04
    batch = reseal(bytes(plain), compress(CODEC_LZ4, bytes(plain[HEADER_SIZE:])), CODEC_LZ4)
    with pytest.raises(InvalidBatch, match=r"record 0 .*offset delta 2, expected 0"):
        validate_batches(batch)
