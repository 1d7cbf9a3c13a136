"""README.md's examples do what README.md says they do.

Each shell block a user would paste is run line by line against a real broker
(embedded defaults, an ephemeral port that ``$RUSTKA_BROKER`` and a rewrite of
``127.0.0.1:9092`` point at), in a fresh directory. A line annotated
``# -> TEXT`` must print exactly TEXT (``<TAB>`` is a tab); the Python examples
run as scripts and must print what the README implies. The Kafka example once
said ``rustka fetch orders 0 0`` after a kcat produce, and answered "no record"
because kcat's partitioner had put the records on partition 1.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet.threads import deferToThread

from rustka.partitioner import partition_for_key
from tests.conftest import RunningBroker

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BIN = Path(sys.executable).parent
DOC_ADDRESS = "127.0.0.1:9092"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)


def blocks(language: str) -> list[str]:
    return [body for lang, body in _FENCE.findall(README.read_text()) if lang == language]


def block_starting(language: str, prefix: str) -> str:
    found = [b for b in blocks(language) if b.startswith(prefix)]
    assert len(found) == 1, f"README.md has {len(found)} {language} blocks starting {prefix!r}"
    return found[0]


def expected(line: str) -> str | None:
    """The output a ``# -> TEXT`` annotation promises, or None."""
    if "# -> " not in line:
        return None
    return line.split("# -> ", 1)[1].replace("<TAB>", "\t")


def environment(broker: RunningBroker) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["RUSTKA_BROKER"] = broker.address
    return env


def run_line(line: str, broker: RunningBroker, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = line.replace(DOC_ADDRESS, broker.address)
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=environment(broker),
        capture_output=True,
        text=True,
        timeout=60,
    )


def read_line_within(proc: subprocess.Popen[str], seconds: float) -> str:
    """One line of a long-running command's output, or fail after ``seconds``."""
    assert proc.stdout is not None
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], deadline - time.monotonic())
        if ready:
            return proc.stdout.readline()
    raise AssertionError(f"no output from {proc.args} within {seconds} s")


def run_block(block: str, broker: RunningBroker, cwd: Path) -> list[str]:
    """Run each line; check its annotation; return each line's stdout."""
    outputs = []
    for line in block.splitlines():
        if not line.strip():
            continue
        if "--follow" in line:
            outputs.append(follow(line, broker, cwd))
            continue
        result = run_line(line, broker, cwd)
        assert result.returncode == 0, f"{line!r} failed:\n{result.stderr}"
        promised = expected(line)
        if promised is not None:
            assert result.stdout == promised + "\n", f"{line!r} printed {result.stdout!r}"
        outputs.append(result.stdout)
    return outputs


def follow(line: str, broker: RunningBroker, cwd: Path) -> str:
    """``consume --follow`` keeps waiting: a record produced meanwhile is printed."""
    command = line.split("#", 1)[0].split()
    with subprocess.Popen(
        command,
        cwd=cwd,
        env=environment(broker),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            topic, partition = command[3], command[4]
            produced = run_line(f"rustka produce {topic} user-1 later", broker, cwd)
            assert produced.returncode == 0, produced.stderr
            assert f"partition {partition}" in produced.stdout
            line = read_line_within(proc, 30)
        finally:
            proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
            _, err = proc.communicate(timeout=30)
        assert err == "", f"Ctrl-C on {command} printed {err!r}"
        return line


@pytest_twisted.ensureDeferred
async def test_using_it(broker: RunningBroker, tmp_path: Path) -> None:
    block = block_starting("sh", "rustka produce orders user-1")
    out = await deferToThread(run_block, block, broker, tmp_path)
    _, _, first, again, followed, topics, groups = out  # produce and fetch: annotated
    assert first == "0\tuser-1\tplaced order\n", "consume reads from the group's position"
    assert again == "", "the second consume only prints records produced since"
    assert followed == "1\tuser-1\tlater\n"
    assert "orders" in topics
    # Ctrl-C on --follow committed what it had printed: nothing is left to read.
    assert groups.splitlines()[1] == "orders\t2\t2\t2\t0", groups


@pytest_twisted.ensureDeferred
async def test_bulk_produce_and_consume_to_a_file(broker: RunningBroker, tmp_path: Path) -> None:
    block = block_starting("sh", "printf 'user-1")
    (tmp_path / "events.jsonl").write_text('{"key": "user-3", "value": "refunded"}\n')
    await deferToThread(run_block, block, broker, tmp_path)
    client = await broker.client()
    try:
        rows = []
        for partition in range(3):
            offset = 0
            while (record := await client.fetch("orders", partition, offset)) is not None:
                rows.append((partition, record.key, record.value))
                offset = record.offset + 1
    finally:
        await client.close()
    stored = sorted((key, value) for _, key, value in rows)
    assert stored == [(b"user-1", b"placed"), (b"user-2", b"paid"), (b"user-3", b"refunded")]
    written = (tmp_path / "orders-2.tsv").read_text().splitlines()
    on_two = [key for partition, key, _ in rows if partition == 2]
    assert [line.split("\t")[1].encode() for line in written] == on_two


@pytest_twisted.ensureDeferred
async def test_kafka_clients_kcat(broker: RunningBroker, tmp_path: Path) -> None:
    block = block_starting("sh", "kcat -b 127.0.0.1:9092 -L")
    out = await deferToThread(run_block, block, broker, tmp_path)
    assert out[2] == "one\ntwo\n", "kcat reads back what it produced to partition 0"


def run_python(source: str, broker: RunningBroker, cwd: Path) -> str:
    script = cwd / "example.py"
    script.write_text(source.replace(DOC_ADDRESS, broker.address))
    result = subprocess.run(
        [sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest_twisted.ensureDeferred
async def test_confluent_kafka_example(broker: RunningBroker, tmp_path: Path) -> None:
    source = block_starting("python", "from confluent_kafka import Consumer, Producer")
    out = await deferToThread(run_python, source, broker, tmp_path)
    assert out == "0 b'user-1' b'placed order'\n"


@pytest_twisted.ensureDeferred
async def test_kafka_python_example(broker: RunningBroker, tmp_path: Path) -> None:
    source = block_starting("python", "from kafka import KafkaConsumer")
    out = await deferToThread(run_python, source, broker, tmp_path)
    assert out == "0 b'login'\n"


@pytest_twisted.ensureDeferred
async def test_twisted_client_example(broker: RunningBroker, tmp_path: Path) -> None:
    source = block_starting("python", "from twisted.internet import defer, task")
    out = await deferToThread(run_python, source, broker, tmp_path)
    lines = out.splitlines()
    assert lines, "the consumer callback printed nothing"
    # The consumer reads the partition user-1's record went to, to its end: that record
    # plus every one of the 10,000 batched records whose key routes there too.
    home = partition_for_key(b"user-1", 3)
    same = sum(partition_for_key(b"user-%d" % i, 3) == home for i in range(10_000))
    assert sum(int(line.split()[0]) for line in lines) == 1 + same
    assert all(line.endswith(" records") for line in lines)
