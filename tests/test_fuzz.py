"""Seeded hostile frames over real sockets against an in-process broker.

The long version is `python -m tools.fuzz` (a million frames against a
`twistd` process); the generator and the checks are the same code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import threads

from rustka.kafka import messages
from rustka.ops.protocol_switch import first_frame_protocol, is_kafka_request
from tools.frames import TOPIC_RE, FrameFuzzer, creatable_topic, frame
from tools.fuzz import FuzzReport, KafkaFuzzer, fuzz, round_trip, unexpected_topic_dirs

MAX_FRAME = 64 * 1024


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


def _tree(root: Path) -> set[str]:
    found: set[str] = {str(root)}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            found.add(os.path.join(dirpath, name))
    return found


def test_generator_is_reproducible_and_covers_every_op() -> None:
    """One seed gives the same bytes; the scripts hold every op, splits and bad endings."""
    a = list(FrameFuzzer(7, MAX_FRAME).scripts(3000, (20, 200)))
    b = list(FrameFuzzer(7, MAX_FRAME).scripts(3000, (20, 200)))
    assert [s.writes for s in a] == [s.writes for s in b]
    assert sum(s.expected_responses for s in a) == 3000
    ops = {f[0] for s in a for f in s.frames if f}
    assert set(range(1, 13)) <= ops
    assert any(len(w) == 1 for s in a for w in s.writes)
    assert any(s.oversized for s in a) and any(s.incomplete_tail for s in a)
    assert any(f == b"" for s in a for f in s.frames)
    assert any(creatable_topic(f) for s in a for f in s.frames)
    assert not TOPIC_RE.fullmatch("..") and not TOPIC_RE.fullmatch("__offsets")
    assert TOPIC_RE.fullmatch("fz.2") and not TOPIC_RE.fullmatch("a/b")


def test_native_scripts_open_with_op_0_often_and_never_with_a_kafka_request() -> None:
    """The switch is tried with first frames as close to Kafka's as a native frame gets.

    About a quarter of the connections open with a Kafka lookalike (op 0, a header of
    a served API, one rule of docs/protocol.md broken), none with a frame that rule
    gives to Kafka: every first frame is native, so each must get its native answer.
    """
    scripts = list(FrameFuzzer(11, MAX_FRAME).scripts(40_000, (20, 200)))
    firsts = [s.frames[0] for s in scripts]
    op_0 = [f for f in firsts if f[:1] == b"\x00"]
    assert len(op_0) > len(firsts) // 5, (len(op_0), len(firsts))
    lookalikes = [f for f in op_0 if len(f) >= 10 and int.from_bytes(f[:2]) in messages.APIS]
    assert len(lookalikes) > len(firsts) // 10
    assert not any(is_kafka_request(f) for f in firsts)
    assert all(first_frame_protocol(frame(f), MAX_FRAME) == "native" for f in firsts)
    lookalike = FrameFuzzer(12, MAX_FRAME)
    assert not any(is_kafka_request(lookalike.kafka_lookalike()) for _ in range(20_000))


def test_kafka_scripts_open_with_a_request_the_switch_gives_to_kafka() -> None:
    """A Kafka fuzz connection is Kafka's from its first frame, as a real client's is."""
    for script in KafkaFuzzer(5, MAX_FRAME).scripts(2000, (5, 40)):
        assert first_frame_protocol(b"".join(script.writes), MAX_FRAME) == "kafka"


@pytest_twisted.ensureDeferred
async def test_broker_survives_seeded_fuzzing(
    broker_factory: Any, data_dir: Path, tmp_path: Path
) -> None:
    """5,000 hostile frames on 20 connections: all answered, nothing escapes, broker still works."""
    outside_before = _tree(tmp_path.parent) - _tree(data_dir)
    cwd_before = set(os.listdir("."))
    running = await broker_factory(max_frame_bytes=MAX_FRAME)
    try:
        rss_before = _rss_kib()
        report: FuzzReport = await threads.deferToThread(
            fuzz,
            "127.0.0.1",
            running.port,
            seed=20260303,
            frames=5000,
            max_frame_bytes=MAX_FRAME,
            concurrency=20,
            per_connection=(20, 120),
            timeout=60,
        )
        rss_after = _rss_kib()
        assert report.problems == []
        assert report.frames == 5000
        assert report.connections >= 20
        assert report.oversized > 0 and report.dropped == report.oversized
        assert report.incomplete > 0
        # Malformed first frames starting with 0x00 were sent, and answered like the rest.
        assert report.first_op_0 > 0
        await threads.deferToThread(round_trip, "127.0.0.1", running.port)
        assert (rss_after - rss_before) < 100 * 1024, (rss_before, rss_after)
        assert unexpected_topic_dirs(data_dir, report.creatable) == []
        on_disk = {e.name for e in os.scandir(data_dir) if e.is_dir()} - {"__offsets"}
        assert on_disk, "the fuzzer's valid produces created no topic at all"
    finally:
        await running.stop()
    outside_after = _tree(tmp_path.parent) - _tree(data_dir)
    assert outside_after == outside_before
    assert set(os.listdir(".")) == cwd_before
    assert not Path("/tmp/fz").exists()
