"""What a real-client test reads back from the broker's own log, not through a client.

A client reading back what it wrote proves little when the broker rewrites or drops
parts of it (codec, timestamps, headers): these helpers read the stored batches
from the broker core (`Broker.read`), so a test can compare them with what the
client sent.
"""

from __future__ import annotations

from typing import Any

from rustka.record.batch import BatchHeader, Record, decode_records, parse_header
from tests.conftest import RunningBroker, within

#: The low three bits of a batch's attributes name its codec (Kafka's RecordBatch v2).
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


async def stored_batches(
    running: RunningBroker, topic: str, partition: int
) -> list[tuple[BatchHeader, list[Record]]]:
    """Every batch of a partition, as stored: its header and its decoded records."""
    result: Any = await within(running.broker.read(topic, partition, 0, 64 * 1024 * 1024))
    data = b"".join(result.chunks)
    batches: list[tuple[BatchHeader, list[Record]]] = []
    pos = 0
    while pos < len(data):
        header = parse_header(data, pos)
        batches.append((header, decode_records(data, pos)))
        pos += header.size
    return batches


def codec_of(header: BatchHeader) -> str:
    return CODECS[header.attributes & 0x07]
