"""Drive Debian's python3-kafka (kafka-python 2.0.2) for tests/kafka/test_debian_kafka_python.py.

Run by the system interpreter (``/usr/bin/python3 -I``), never imported by the
suite: the venv holds the PyPI kafka-python, and one process cannot hold both.
Each subcommand prints one JSON document on stdout; a failure is an exception
and a non-zero exit, with the traceback on stderr.

    produce BOOTSTRAP TOPIC COUNT [CODEC]   records i = key-i, value v-i, two headers,
                                            CreateTime 1_700_000_000_000 + i s, partition i % 2
    group BOOTSTRAP TOPIC GROUP COUNT       subscribe, read COUNT records, commit, leave
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import kafka

BASE_TIMESTAMP_MS = 1_700_000_000_000


def about() -> dict[str, Any]:
    """Which kafka-python answered, so the test can insist it is Debian's."""
    return {"version": kafka.__version__, "file": kafka.__file__}


def produce(bootstrap: str, topic: str, count: int, codec: str | None) -> dict[str, Any]:
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap, acks="all", compression_type=codec, linger_ms=20
    )
    try:
        futures = [
            producer.send(
                topic,
                key=f"key-{i}".encode(),
                value=f"v-{i}".encode(),
                headers=[("trace", f"t-{i}".encode()), ("empty", b"")],
                partition=i % 2,
                timestamp_ms=BASE_TIMESTAMP_MS + i * 1000,
            )
            for i in range(count)
        ]
        producer.flush(30)
        delivered = [f.get(timeout=30) for f in futures]
        return {
            **about(),
            "api_version": list(producer.config["api_version"]),
            "delivered": [[m.partition, m.offset] for m in delivered],
        }
    finally:
        producer.close(10)


def group(bootstrap: str, topic: str, group_id: str, count: int) -> dict[str, Any]:
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group_id,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        consumer.subscribe([topic])
        records: list[dict[str, Any]] = []
        deadline = time.monotonic() + 45
        while len(records) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                records.extend(
                    {
                        "partition": m.partition,
                        "offset": m.offset,
                        "key": None if m.key is None else m.key.decode(),
                        "value": None if m.value is None else m.value.decode(),
                        "headers": [[k, v.decode()] for k, v in m.headers],
                        "timestamp_ms": m.timestamp,
                    }
                    for m in batch
                )
        if len(records) < count:
            raise SystemExit(f"read {len(records)} of {count} records within 45 s")
        consumer.commit()
        return {**about(), "records": records}
    finally:
        consumer.close()


def main(argv: list[str]) -> None:
    command, args = argv[0], argv[1:]
    if command == "produce":
        codec = args[3] if len(args) > 3 else "none"
        result = produce(args[0], args[1], int(args[2]), None if codec == "none" else codec)
    elif command == "group":
        result = group(args[0], args[1], args[2], int(args[3]))
    else:
        raise SystemExit(f"unknown command {command!r}")
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
