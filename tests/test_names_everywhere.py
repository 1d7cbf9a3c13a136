"""Traversal and odd names through every entry point: nothing escapes the data dir.

Topic names become directory names, so each way a name can enter - the native
protocol (every op that carries one), the CLI, the config and startup scan,
and the manhole helpers - must refuse a bad one with an error and create
nothing, neither outside the data dir nor as a stray directory inside it.
Group names never become paths; they are checked for what they may not hold.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import threads

from rustka.errors import InvalidName
from rustka.record.batch import Record, encode_batch
from tests.conftest import RunningBroker, start_broker
from tools.wire import SyncClient, frame

BIN = Path(sys.executable).parent
GOOD = "good"

BAD_TOPICS = [
    "../x",
    "../../x",
    "/etc",
    "/tmp/rustka-escape",
    "a/b",
    "a\\b",
    "..",
    ".",
    "",
    "x" * 250,
    "x" * 300,
    "__offsets",
    "__private",
    "con\x00trol",
    "ü",
    ".clean-shutdown",
    "sp ace",
    "new\nline",
    "tab\there",
]
BAD_GROUPS = ["", "con\x00trol", "new\nline", "x" * 256, "del\x7f"]

SEED_OPS = (1, 2, 3, 4)
TOPIC_OPS = (1, 2, 3, 4, 6, 7, 8, 9, 10)


def _s(text: str | bytes) -> bytes:
    raw = text if isinstance(text, bytes) else text.encode("utf-8")
    return struct.pack("!I", len(raw)) + raw


def _batch() -> bytes:
    return encode_batch([Record(key=b"k", value=b"v")], timestamp=1_700_000_000_000)


def request(op: int, topic: str | bytes = GOOD, group: str | bytes = "g") -> bytes:
    """A well-formed frame payload of ``op`` carrying ``topic`` / ``group``."""
    t, g = _s(topic), _s(group)
    bodies = {
        1: t + _s(b"k") + _s(b"v"),
        2: t + struct.pack("!IQ", 0, 0),
        3: g + t + struct.pack("!IQ", 0, 1),
        4: g + t + struct.pack("!I", 0),
        6: t + struct.pack("!I", 0) + _s(_batch()),
        7: t + struct.pack("!IQII", 0, 0, 1024, 0),
        8: struct.pack("!I", 2) + _s(GOOD) + t,
        9: t + struct.pack("!I", 1),
        10: t + struct.pack("!I", 9),
        11: b"",
        12: g,
    }
    return bytes([op]) + bodies[op]


def ask(port: int, payloads: list[bytes]) -> list[bytes]:
    """Pipeline ``payloads`` on one connection; the raw response payloads, in order."""
    client = SyncClient("127.0.0.1", port)
    try:
        client.send_raw(b"".join(frame(x) for x in payloads))
        return [client.recv_payload() for _ in payloads]
    finally:
        client.close()


def failure_code(answer: bytes) -> int:
    assert answer[0] == 14, answer
    return int(struct.unpack_from("!H", answer, 1)[0])


def tree(root: Path) -> set[str]:
    found = {str(root)}
    for dirpath, dirnames, filenames in os.walk(root):
        found.update(os.path.join(dirpath, n) for n in dirnames + filenames)
    return found


ESCAPES = [Path("/etc/0"), Path("/etc/1"), Path("/etc/2"), Path("/tmp/rustka-escape")]


@pytest.fixture
def watched(tmp_path: Path, data_dir: Path) -> Iterator[None]:
    """After the test: nothing new outside the data dir, no stray topic dir inside it."""
    assert not any(p.exists() for p in ESCAPES)
    outside = tree(tmp_path.parent) - tree(data_dir)
    yield
    assert tree(tmp_path.parent) - tree(data_dir) == outside
    assert not any(p.exists() for p in ESCAPES)
    assert not (tmp_path / "x").exists() and not (tmp_path.parent / "x").exists()
    if data_dir.exists():
        stray = {e.name for e in os.scandir(data_dir) if e.is_dir()} - {GOOD, "__offsets"}
        assert stray == set()
        assert not (data_dir / "a").exists()


@pytest_twisted.ensureDeferred
async def test_native_ops_refuse_bad_topic_names(broker: RunningBroker, watched: None) -> None:
    """Every op that carries a topic answers a bad name with an error and creates nothing."""
    [created] = await threads.deferToThread(ask, broker.port, [request(9, GOOD)])
    assert created[0] == 11
    payloads = [request(op, name) for name in BAD_TOPICS for op in TOPIC_OPS]
    payloads += [request(op, b"\xff\xfe..") for op in TOPIC_OPS]
    answers = await threads.deferToThread(ask, broker.port, payloads)
    cases = [(name, op) for name in BAD_TOPICS for op in TOPIC_OPS]
    cases += [("<invalid utf-8>", op) for op in TOPIC_OPS]
    for (name, op), answer in zip(cases, answers, strict=True):
        if name == "<invalid utf-8>" or op in SEED_OPS:
            assert answer[0] == 4, (name, op, answer)
        else:
            assert failure_code(answer) == InvalidName.code, (name, op, answer)
    assert sorted(broker.broker.logs.topics) == [GOOD]


@pytest_twisted.ensureDeferred
async def test_native_ops_refuse_bad_group_names(broker: RunningBroker, watched: None) -> None:
    """Commit, OffsetFetch and DescribeGroup refuse control characters and bad lengths."""
    await threads.deferToThread(ask, broker.port, [request(9, GOOD)])
    ops = (3, 4, 12)
    answers = await threads.deferToThread(
        ask, broker.port, [request(op, GOOD, group) for group in BAD_GROUPS for op in ops]
    )
    cases = [(group, op) for group in BAD_GROUPS for op in ops]
    for (group, op), answer in zip(cases, answers, strict=True):
        if op == 12:
            assert failure_code(answer) == InvalidName.code, (group, answer)
        else:
            assert answer[0] == 4, (group, op, answer)
    assert broker.broker.offsets.groups() == {}
    # traversal-looking groups are legal (groups never become paths) and stay in __offsets
    [ok, listed] = await threads.deferToThread(
        ask, broker.port, [request(3, GOOD, "../../etc"), request(11)]
    )
    assert ok == b"\x05" and b"../../etc" in listed


def _cli(port: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "rustka"), args[0], "--broker", f"127.0.0.1:{port}", *args[1:]],
        capture_output=True,
        text=True,
        timeout=60,
    )


# `groups reset` leaves the name to the broker, so each case costs a round trip: a sample
RESET_SAMPLE = ("../x", "/etc", "..", "__offsets", ".clean-shutdown", "x" * 300)


def _cli_cases() -> list[tuple[str, ...]]:
    cases: list[tuple[str, ...]] = [("groups", "reset", "g", name) for name in RESET_SAMPLE]
    for name in BAD_TOPICS:
        if "\x00" in name:
            continue
        cases += [
            ("produce", name, "k", "v"),
            ("fetch", name, "0", "0"),
            ("consume", "g", name, "0"),
            ("topics", "create", name, "--partitions", "1"),
            ("topics", "alter", name, "--partitions", "5"),
        ]
        cases.append(("topics", "describe", name))
    for group in BAD_GROUPS:
        if "\x00" in group:
            continue
        cases += [("groups", "describe", group), ("consume", group, GOOD, "0")]
    return cases


@pytest_twisted.ensureDeferred
async def test_cli_refuses_bad_names(broker: RunningBroker, watched: None) -> None:
    """`rustka produce/fetch/consume/topics/groups` exit non-zero with a message on bad names."""
    await threads.deferToThread(ask, broker.port, [request(9, GOOD)])
    cases = _cli_cases()

    def run_all() -> list[subprocess.CompletedProcess[str]]:
        with ThreadPoolExecutor(max_workers=8) as pool:
            return list(pool.map(lambda case: _cli(broker.port, *case), cases))

    results = await threads.deferToThread(run_all)
    for case, result in zip(cases, results, strict=True):
        assert result.returncode != 0, (case, result.stdout)
        assert result.stderr.strip(), case
        assert result.stdout == "", (case, result.stdout)
    # a NUL cannot even reach the CLI: the OS refuses it in argv
    with pytest.raises(ValueError, match="null"):
        _cli(broker.port, "produce", "con\x00trol", "k", "v")
    assert sorted(broker.broker.logs.topics) == [GOOD]


@pytest_twisted.ensureDeferred
async def test_manhole_helpers_refuse_bad_names(broker: RunningBroker, watched: None) -> None:
    """partitions(name) in the admin shell validates the name before looking anything up."""
    from rustka.ops.manhole import admin_namespace

    await threads.deferToThread(ask, broker.port, [request(9, GOOD)])
    namespace = admin_namespace(broker.broker, broker.factory, broker.broker.io)
    for name in BAD_TOPICS:
        with pytest.raises(InvalidName):
            namespace["partitions"](name)
    namespace["partitions"](GOOD)
    assert sorted(broker.broker.logs.topics) == [GOOD]


@pytest_twisted.ensureDeferred
async def test_config_data_dir_is_free_but_odd_dirs_inside_are_not_topics(
    tmp_path: Path,
) -> None:
    """An odd data_dir is the operator's choice; badly named dirs inside it never load as topics."""
    data_dir = tmp_path / "odd dir ü" / "sub" / ".." / "data"
    odd = ["sp ace", "ü", "__fz", "new\nline", "a:b", "x" * 250]
    for name in odd:
        (data_dir / name / "0").mkdir(parents=True, exist_ok=True)
    outside = tree(tmp_path) - tree(data_dir.resolve())
    running = await start_broker(data_dir)
    try:
        assert running.broker.logs.topics == {}
        names = odd
        answers = await threads.deferToThread(
            ask,
            running.port,
            [request(1, GOOD)] + [request(op, n) for n in names for op in (1, 2, 8)],
        )
        assert answers[0][0] == 1
        assert all(a[0] in (4, 14) for a in answers[1:]), answers
        assert sorted(running.broker.logs.topics) == [GOOD]
    finally:
        await running.stop()
    resolved = data_dir.resolve()
    assert (resolved / GOOD / "0").is_dir()
    assert all((resolved / n / "0").is_dir() for n in odd)
    assert tree(tmp_path) - tree(resolved) == outside
