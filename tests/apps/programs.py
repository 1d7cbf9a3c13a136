"""What the stream-processing program tests share: their venvs, the runs, the checks.

The programs run as their users run them, each a subprocess of its own
virtualenv's interpreter (tools/app_venvs.py), against a `twistd rustka`
started with tools/twistd_process.py. The test itself talks to the broker with
the project's own real clients (confluent-kafka from the test extras): it
creates the input topic, feeds it with a real producer, reads the program's
output and asks the broker what it stored.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from rustka.config import Config
from rustka.storage.offsets import OffsetsStore
from rustka.storage.topic import read_topic_config
from tests.kafka.real_clients import Record, confluent_committed, confluent_read, kcat
from tools import app_venvs
from tools.twistd_process import OutputProcess, Twistd, start_broker

HERE = Path(__file__).resolve().parent

#: Bound of one program's start-up (venv imports, topic creation, group join, recovery).
START_S = 60.0
#: Bound of a graceful stop (a last commit and the group leave).
STOP_S = 60.0


#: Broker settings under which a compacted topic is cleaned within seconds of its last
#: write, as tests/kafka/test_compaction_clients.py has them: an idle segment rolls after
#: segment_ms, and max_compaction_lag_ms makes even a barely dirty log due for cleaning.
COMPACTING = {
    "segment_ms": 300,
    "max_compaction_lag_ms": 1000,
    "retention_check_interval_ms": 100,
    "cleaner_backoff_ms": 100,
}
#: Bound of the wait for the cleaner to compact a changelog.
COMPACTED_S = 30.0
#: Bound of the wait for a program's periodic commit.
COMMITTED_S = 30.0


def start_compacting_broker(data_dir: Path) -> Twistd:
    """`twistd rustka` (tools/twistd_process.py) with COMPACTING in its --config file."""
    config = data_dir.with_name("rustka.toml")
    config.write_text("".join(f"{key} = {value}\n" for key, value in COMPACTING.items()))
    return start_broker(data_dir, "--config", str(config))


def app_python(name: str) -> Path:
    """The program's venv interpreter, or a failure that says how to build it."""
    try:
        return app_venvs.python_of(name)
    except app_venvs.AppVenvError as exc:
        why = str(exc)
    pytest.fail(why)


def start_program(
    python: Path, script: str, args: Sequence[str], env: dict[str, str], cwd: Path
) -> OutputProcess:
    return OutputProcess([str(python), str(HERE / script), *args], env=env, cwd=cwd)


def stop_program(program: OutputProcess) -> int:
    """SIGTERM, as a supervisor stops it; the exit status, once it has exited."""
    return program.stop(signal.SIGTERM, timeout=STOP_S)


def words(counts: dict[str, int]) -> list[Record]:
    """Each word ``counts[word]`` times, interleaved, keyed by the word."""
    out: list[Record] = []
    left = dict(counts)
    while any(left.values()):
        for word in sorted(left):
            if left[word]:
                left[word] -= 1
                out.append((word.encode(), b"seen"))
    return out


def create_topics(bootstrap: str, partitions: dict[str, int]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, n, 1) for t, n in partitions.items()])
    for future in futures.values():
        future.result(30)


def topic_configs(bootstrap: str, topic: str) -> dict[str, tuple[str, str]]:
    """DescribeConfigs of a topic: each config's value and source name."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(30)
    return {name: (e.value, ConfigSource(e.source).name) for name, e in entries.items()}


def partitions_of(bootstrap: str, topic: str) -> int:
    """How many partitions Metadata says the topic has."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    return len(admin.list_topics(topic, timeout=30).topics[topic].partitions)


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    """The group's committed offsets of the topic's partitions (OffsetFetch)."""
    return confluent_committed(bootstrap, group, topic, partitions)


def wait_committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    """Poll the group's commits until they reach the topic's end offsets (or COMMITTED_S).

    A program commits on its own schedule (faust every 2.8 s); a test that hands
    partitions over waits for it, as an operator scales out a program that has
    caught up.
    """
    deadline = time.monotonic() + COMMITTED_S
    while True:
        fed = end_offsets(bootstrap, topic, partitions)
        done = committed(bootstrap, group, topic, partitions)
        if done == fed:
            return done
        if time.monotonic() > deadline:
            raise AssertionError(f"{group} committed {done} of {fed} within {COMMITTED_S} s")


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "rustka-test-watermarks"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def read_counts(bootstrap: str, topic: str, expected: int) -> dict[str, list[int]]:
    """The counts the program wrote (its output: one partition), per word in order.

    Reads until ``expected`` records are there (bounded by confluent_read's
    polls), then checks the partition holds no more than that: a record
    counted twice would be one more.
    """
    records = confluent_read(bootstrap, topic, 0, expected)
    assert len(records) == expected, f"{len(records)} of {expected} counts: {records}"
    [end] = end_offsets(bootstrap, topic, 1)
    if end != expected:
        extra = confluent_read(bootstrap, topic, 0, end - expected, offset=expected)
        raise AssertionError(f"{end} counts where {expected} were due: {records} then {extra}")
    seen: dict[str, list[int]] = {}
    for _, key, value in records:
        assert value is not None
        count = json.loads(value)
        assert key is not None and count["word"] == key.decode()
        seen.setdefault(count["word"], []).append(count["count"])
    return seen


def read_topic(bootstrap: str, topic: str) -> list[tuple[int, int, str, str]]:
    """kcat, every partition from the beginning to the end: (partition, offset, key, value)."""
    out = kcat(
        "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%p\t%o\t%k\t%s\n"
    )
    rows = []
    for line in out.splitlines():
        partition, offset, key, value = line.split("\t")
        rows.append((int(partition), int(offset), key, value))
    return rows


def wait_compacted(bootstrap: str, topic: str) -> dict[str, str]:
    """Read the topic until it holds one record per key; then each key's value.

    The cleaner runs on the broker's own schedule, so the topic is read again
    (each read is a kcat run to the end) until then, or COMPACTED_S is up.
    """
    deadline = time.monotonic() + COMPACTED_S
    while True:
        rows = read_topic(bootstrap, topic)
        latest = {key: value for _, _, key, value in rows}
        if len(rows) == len(latest):
            return latest
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic} not compacted within {COMPACTED_S} s: {rows}")


def exact_counts(totals: dict[str, int]) -> dict[str, list[int]]:
    """What a counter that never lost nor repeated a record wrote: 1..n for each word."""
    return {word: list(range(1, n + 1)) for word, n in totals.items()}


def stored_offsets(data_dir: Path, group: str, topic: str, partitions: int) -> list[int | None]:
    """The commits in rustka's offsets store on disk (the broker stopped)."""
    store = OffsetsStore.open(data_dir, Config().log_config())
    try:
        return [store.committed(group, topic, p) for p in range(partitions)]
    finally:
        store.close()


def stored_topic_config(data_dir: Path, topic: str) -> dict[str, str]:
    """The configs stored with the topic on disk (the broker stopped)."""
    return read_topic_config(data_dir / topic)
