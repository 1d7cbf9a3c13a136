"""Debian's python3-kafka (kafka-python 2.0.2) against a real rustka broker (issue 16).

Debian ships an older kafka-python than the PyPI one the venv holds, with its own
version probing: it infers broker 2.5 from rustka's ApiVersions (DescribeAcls v2 is
listed) and then writes RecordBatch v2 in Produce v7, fetches with v4, joins with v2
and commits with v2.
It runs under the system interpreter in a subprocess
(tests/kafka/debian_kafka_python.py) so the two kafka-pythons never meet.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import threads

from rustka.record.batch import Record
from tests.conftest import RunningBroker, within
from tests.kafka.stored import codec_of, stored_batches

pytestmark = pytest.mark.clients

SYSTEM_PYTHON = Path("/usr/bin/python3")
DRIVER = Path(__file__).parent / "debian_kafka_python.py"
DEBIAN_KAFKA = "/usr/lib/python3/dist-packages/kafka/__init__.py"
BASE_TS = 1_700_000_000_000


def run_driver(*args: str) -> Any:
    """One driver run under the system Python (isolated: no venv, no PYTHONPATH)."""
    done = subprocess.run(
        [str(SYSTEM_PYTHON), "-I", str(DRIVER), *args],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    if done.returncode != 0:
        if "No module named 'kafka'" in done.stderr:
            pytest.fail(
                "Debian's python3-kafka is missing for /usr/bin/python3: scripts/test "
                "installs it (apt-get install python3-kafka); run scripts/test once"
            )
        raise AssertionError(f"debian_kafka_python {' '.join(args)}: {done.stderr.strip()}")
    result = json.loads(done.stdout)
    # The Debian package answered, not a kafka-python that happens to be on a path.
    assert (result["version"], result["file"]) == ("2.0.2", DEBIAN_KAFKA)
    return result


async def driver(*args: str) -> Any:
    return await within(threads.deferToThread(run_driver, *args), 120)


async def make_topic(running: RunningBroker, topic: str, partitions: int) -> None:
    c = await running.client()
    try:
        await within(c.create_topic(topic, partitions))
    finally:
        await within(c.close())


def expected(i: int) -> Record:
    """Record i as the driver sends it: key, value, two headers, its own CreateTime."""
    return Record(
        f"key-{i}".encode(),
        f"v-{i}".encode(),
        (("trace", f"t-{i}".encode()), ("empty", b"")),
        BASE_TS + i * 1000,
    )


@pytest.fixture
def system_python() -> Path:
    if not SYSTEM_PYTHON.exists():
        pytest.fail("/usr/bin/python3 is missing: Debian's python3-kafka runs under it")
    return SYSTEM_PYTHON


@pytest.mark.parametrize("codec", ["none", "gzip"])
@pytest_twisted.ensureDeferred
async def test_debian_kafka_python_produces_what_is_stored_and_a_group_resumes_from_its_commit(
    broker: RunningBroker, system_python: Path, codec: str
) -> None:
    topic, group = f"deb-kp-{codec}", f"g-deb-kp-{codec}"
    await make_topic(broker, topic, 2)
    produced = await driver("produce", broker.address, topic, "10", codec)
    assert produced["api_version"] == [2, 5, 0]
    # Record i went to partition i % 2, in order.
    assert produced["delivered"] == [[i % 2, i // 2] for i in range(10)]

    for partition in (0, 1):
        mine = list(range(partition, 10, 2))
        batches = await stored_batches(broker, topic, partition)
        assert {(h.magic, codec_of(h)) for h, _ in batches} == {(2, codec)}
        records = [r for _, batch in batches for r in batch]
        assert [r._replace(offset=None) for r in records] == [expected(i) for i in mine]
        assert [r.offset for r in records] == list(range(5))
        for header, batch in batches:
            assert header.max_timestamp == max(r.timestamp for r in batch)

    first = await driver("group", broker.address, topic, group, "10")
    assert sorted((r["partition"], r["offset"]) for r in first["records"]) == [
        (p, o) for p in (0, 1) for o in range(5)
    ]
    assert sorted(r["value"] for r in first["records"]) == sorted(f"v-{i}" for i in range(10))
    assert all(r["headers"][0] == ["trace", f"t-{r['key'][4:]}"] for r in first["records"])
    assert {r["timestamp_ms"] for r in first["records"]} == {BASE_TS + i * 1000 for i in range(10)}
    assert broker.broker.committed_offsets(group) == {(topic, 0): 5, (topic, 1): 5}

    await driver("produce", broker.address, topic, "4", codec)
    again = await driver("group", broker.address, topic, group, "4")
    assert sorted((r["partition"], r["offset"]) for r in again["records"]) == [
        (p, o) for p in (0, 1) for o in (5, 6)
    ]
    assert broker.broker.committed_offsets(group) == {(topic, 0): 7, (topic, 1): 7}
