"""The Kafka framing of the fuzzer against an in-process broker, over real sockets.

The long run is `python -m tools.fuzz --kafka --frames N` against a `twistd`
process; the generator and the checks are the same code (docs/kafka.md,
"Versions outside the table").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import threads

from tests.conftest import within
from tools.fuzz import (
    KAFKA_MAX_WAIT_MS,
    KafkaFuzzer,
    KafkaFuzzReport,
    audit_end_offsets,
    audit_problems,
    kafka_fuzz,
    kafka_round_trip,
    prepare_audit_topics,
    round_trip,
)

MAX_FRAME = 64 * 1024


def test_kafka_generator_is_reproducible_and_covers_its_cases() -> None:
    """One seed, the same bytes; scripts hold every expectation, bad tails and audit produces."""
    a = list(KafkaFuzzer(5, MAX_FRAME).scripts(2000, (5, 40)))
    b = list(KafkaFuzzer(5, MAX_FRAME).scripts(2000, (5, 40)))
    assert [s.writes for s in a] == [s.writes for s in b]
    assert sum(len(s.frames) - 1 for s in a) == 2000
    frames = [f for s in a for f in s.frames]
    assert {f.expect for f in frames} == {"ok", "close", "any"}
    assert any(f.produce is not None and f.produce[2] for f in frames)
    assert any(f.produce is not None and not f.produce[2] for f in frames)
    assert {f.api_key for f in frames if f.expect == "ok"} >= {0, 1, 2, 3, 9, 10, 18, 19, 32}
    assert any(s.oversized for s in a) and any(s.incomplete_tail for s in a)
    assert any(len(w) == 1 for s in a for w in s.writes)


@pytest_twisted.ensureDeferred
async def test_broker_survives_kafka_fuzzing(broker_factory: Any, data_dir: Path) -> None:
    """2,000 hostile Kafka frames on 10 connections: answers in order and well-formed or a
    close, rejected produces store nothing, and both protocols still work afterwards."""
    running = await broker_factory(max_frame_bytes=MAX_FRAME, fetch_max_wait_ms=KAFKA_MAX_WAIT_MS)
    try:
        host, port = "127.0.0.1", running.port
        await within(threads.deferToThread(prepare_audit_topics, host, port))
        report: KafkaFuzzReport = await within(
            threads.deferToThread(
                kafka_fuzz,
                host,
                port,
                seed=20261130,
                frames=2000,
                max_frame_bytes=MAX_FRAME,
                concurrency=10,
                timeout=30,
            ),
            120,
        )
        assert report.problems == []
        assert report.frames == 2000
        assert report.closed > 0 and report.oversized > 0
        assert report.rejected_produces > 0 and sum(report.acked.values()) > 0
        ends = await within(threads.deferToThread(audit_end_offsets, host, port))
        assert audit_problems(report, ends) == []
        assert running.top.kafka_factory.bad_requests > 0
        await within(threads.deferToThread(kafka_round_trip, host, port))
        await within(threads.deferToThread(round_trip, host, port))
    finally:
        await running.stop()
