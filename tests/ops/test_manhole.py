"""The SSH manhole, driven by the system OpenSSH client against a real broker."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.conch.ssh import keys
from twisted.internet import defer
from twisted.protocols.basic import Int32StringReceiver

from rustka.config import ConfigError
from rustka.errors import InvalidName, UnknownTopic
from rustka.native import codec as p
from rustka.ops.manhole import (
    admin_namespace,
    load_authorized_keys,
    load_or_create_host_key,
    manhole_service,
)

TIMEOUT = 10
_ANSI = re.compile(rb"\x1b(\[[0-9;?]*[a-zA-Z]|c)")


def _keygen(path: Path) -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "test", "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path


class Manhole:
    """A broker with a manhole listening on it, plus a client key that may log in."""

    def __init__(self, running: Any, service: Any, client_key: Path, host_key: Path) -> None:
        self.running = running
        self.service = service
        self.client_key = client_key
        self.host_key = host_key

    @property
    def port(self) -> int:
        return self.service.port.getHost().port

    async def ssh(
        self,
        script: bytes,
        *,
        key: Path | None = None,
        user: str = "alice",
        tty: bool = True,
        command: str | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run the system ssh client in a thread, feeding ``script`` on stdin."""
        from twisted.internet.threads import deferToThread

        command = [
            "ssh",
            "-tt" if tty else "-T",
            "-p",
            str(self.port),
            "-i",
            str(key or self.client_key),
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            f"{user}@127.0.0.1",
            *([command] if command is not None else []),
        ]
        return await deferToThread(
            subprocess.run, command, input=script, capture_output=True, timeout=20
        )


def _text(result: subprocess.CompletedProcess[bytes]) -> str:
    return _ANSI.sub(b"", result.stdout).decode("utf-8", "replace").replace("\r", "")


async def _start_manhole(running: Any, tmp_path: Path, host_key: Path) -> Any:
    from twisted.internet import reactor

    client_key = tmp_path / "client_key"
    if not client_key.exists():
        _keygen(client_key)
    authorized = tmp_path / "authorized_keys"
    authorized.write_text(
        "# operators allowed into the broker\n\n" + (tmp_path / "client_key.pub").read_text()
    )
    namespace = admin_namespace(running.broker, running.factory, running.broker.io)
    service = manhole_service("tcp:0:interface=127.0.0.1", authorized, host_key, namespace, reactor)
    service.startService()
    await service.listening
    return Manhole(running, service, client_key, host_key)


@pytest_twisted.async_yield_fixture
async def manhole(broker_factory: Callable[..., Any], tmp_path: Path) -> AsyncIterator[Manhole]:
    running = await broker_factory(default_partitions=1)
    started = await _start_manhole(running, tmp_path, tmp_path / "host_key")
    try:
        yield started
    finally:
        await started.service.stopService()
        await running.stop()


async def _produce(running: Any, topic: str, *values: bytes) -> None:
    for value in values:
        response = await running.factory.handler.handle(p.Produce(topic, b"key", value))
        assert isinstance(response, p.Produced)


# -- over SSH -----------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_heredoc_session_evaluates_and_exits_zero(manhole: Manhole) -> None:
    """`ssh -tt ... <<EOF` evaluates every line against the live broker and exits 0."""
    await _produce(manhole.running, "orders", b"a", b"b", b"c")
    result = await manhole.ssh(
        b"broker.logs.topic('orders').partition(0).end_offset * 1000\n"
        b"factory is broker and 1 or 'same-' + 'broker'\n"
    )
    output = _text(result)
    assert result.returncode == 0, output
    assert "\n3000\n" in output
    assert "same-broker" in output


@pytest_twisted.ensureDeferred
async def test_no_pty_session(manhole: Manhole) -> None:
    """`ssh -T` (no pty request) gets a working shell too."""
    result = await manhole.ssh(b"6 * 7\n", tty=False)
    assert result.returncode == 0, _text(result)
    assert "\n42\n" in _text(result)


@pytest_twisted.ensureDeferred
async def test_helpers_print_tables_over_ssh(manhole: Manhole) -> None:
    """partitions() and groups() print readable tables with the live offsets and lag."""
    await _produce(manhole.running, "orders", b"a", b"b", b"c", b"d")
    committed = await manhole.running.factory.handler.handle(p.Commit("billing", "orders", 0, 1))
    assert committed == p.CommitOk()
    result = await manhole.ssh(b"partitions('orders')\ngroups()\n", user="admin")
    output = _text(result)
    assert result.returncode == 0, output
    lines = [line.split() for line in output.splitlines()]
    assert ["topic", "partition", "log_start", "end", "segments", "bytes"] in lines
    assert any(line[:5] == ["orders", "0", "0", "4", "1"] for line in lines), output
    assert ["group", "topic", "partition", "committed", "end", "lag"] in lines
    assert ["billing", "orders", "0", "1", "4", "3"] in lines


@pytest_twisted.ensureDeferred
async def test_remote_command_is_refused(manhole: Manhole) -> None:
    """`ssh host 'expr'` is refused (nothing runs); only the shell on stdin is offered."""
    result = await manhole.ssh(b"", command="broker.accepting = False")
    assert result.returncode != 0
    assert manhole.running.broker.accepting is True


@pytest_twisted.ensureDeferred
async def test_unlisted_key_is_refused(manhole: Manhole, tmp_path: Path) -> None:
    """A key that is not in authorized_keys gets no shell and ssh exits non-zero."""
    stranger = _keygen(tmp_path / "stranger")
    result = await manhole.ssh(b"6 * 7\n", key=stranger)
    assert result.returncode == 255
    assert "42" not in _text(result)
    assert b"Permission denied" in result.stderr


@pytest_twisted.ensureDeferred
async def test_host_key_is_private_and_survives_restart(
    broker_factory: Callable[..., Any], tmp_path: Path
) -> None:
    """The generated host key has mode 0600 and the same fingerprint after a restart."""
    running = await broker_factory()
    host_key = tmp_path / "host_key"
    try:
        first = await _start_manhole(running, tmp_path, host_key)
        served = first.service.factory.publicKeys[b"ssh-ed25519"].fingerprint()
        await first.service.stopService()
        assert os.stat(host_key).st_mode & 0o777 == 0o600
        content = host_key.read_bytes()
        second = await _start_manhole(running, tmp_path, host_key)
        try:
            assert second.service.factory.publicKeys[b"ssh-ed25519"].fingerprint() == served
            assert host_key.read_bytes() == content
            result = await second.ssh(b"1 + 1\n")
            assert result.returncode == 0
        finally:
            await second.service.stopService()
    finally:
        await running.stop()
    listed = subprocess.run(
        ["ssh-keygen", "-l", "-E", "md5", "-f", str(host_key)], capture_output=True, check=True
    )
    assert served.encode() in listed.stdout


# -- credentials --------------------------------------------------------------------


def test_group_readable_host_key_is_refused(tmp_path: Path) -> None:
    """An existing host key readable by group or others stops the manhole from starting."""
    host_key = tmp_path / "host_key"
    load_or_create_host_key(host_key)
    host_key.chmod(0o640)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_or_create_host_key(host_key)


def test_garbage_host_key_is_refused(tmp_path: Path) -> None:
    """A host key file that holds no key gives a clear error, not a traceback from deep inside."""
    host_key = tmp_path / "host_key"
    host_key.write_bytes(b"not a key\n")
    host_key.chmod(0o600)
    with pytest.raises(ConfigError, match="not a usable private key"):
        load_or_create_host_key(host_key)


def test_authorized_keys_skips_comments_and_blank_lines(tmp_path: Path) -> None:
    """Comments and blank lines are ignored; every key line is loaded."""
    one, two = _keygen(tmp_path / "one"), _keygen(tmp_path / "two")
    path = tmp_path / "authorized_keys"
    path.write_text(
        f"# first\n\n   \n{(tmp_path / 'one.pub').read_text()}"
        f"  # second, indented comment\n{(tmp_path / 'two.pub').read_text()}"
    )
    loaded = load_authorized_keys(path)
    expected = [keys.Key.fromFile(str(k)).public() for k in (one, two)]
    assert loaded == expected


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("# nobody\n\n", "lists no keys"),
        ('from="10.0.0.1" ssh-ed25519 AAAA test\n', "key options are not supported"),
        ("ssh-ed25519 bm90IGEga2V5 broken\n", "line 1: not a usable public key"),
    ],
)
def test_bad_authorized_keys_are_refused(tmp_path: Path, content: str, message: str) -> None:
    """Files without keys, with key options or with broken keys are refused with the line."""
    path = tmp_path / "authorized_keys"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_authorized_keys(path)


def test_world_writable_authorized_keys_are_refused(tmp_path: Path) -> None:
    """An authorized_keys file others can edit would hand them a shell, so it is refused."""
    _keygen(tmp_path / "one")
    path = tmp_path / "authorized_keys"
    path.write_text((tmp_path / "one.pub").read_text())
    path.chmod(0o666)
    with pytest.raises(ConfigError, match="writable by group or others"):
        load_authorized_keys(path)


def test_missing_authorized_keys(tmp_path: Path) -> None:
    """A missing authorized_keys file is named in the error."""
    with pytest.raises(ConfigError, match=r"authorized_keys.*No such file"):
        load_authorized_keys(tmp_path / "authorized_keys")


# -- helpers in process ---------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_helpers_print_and_return_none(manhole: Manhole, capsys: Any) -> None:
    """Each helper prints a table of live state and returns None (so the REPL echoes nothing)."""
    running = manhole.running
    await _produce(running, "orders", b"a", b"bb")
    await _produce(running, "audit", b"x")
    assert await running.factory.handler.handle(p.Commit("billing", "orders", 0, 2)) == p.CommitOk()
    ns = admin_namespace(running.broker, running.factory, running.broker.io)
    assert ns["broker"] is running.broker and ns["factory"] is running.factory

    assert ns["topics"]() is None
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert rows[0] == ["topic", "partitions", "records", "segments", "bytes"]
    assert [r[:4] for r in rows[1:]] == [["audit", "1", "1", "1"], ["orders", "1", "2", "1"]]

    assert ns["partitions"]() is None
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert [r[:5] for r in rows[1:]] == [
        ["audit", "0", "0", "1", "1"],
        ["orders", "0", "0", "2", "1"],
    ]

    assert ns["groups"]() is None
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert rows[1:] == [["billing", "orders", "0", "2", "2", "0"]]

    assert ns["connections"]() is None
    assert capsys.readouterr().out.splitlines() == ["peer  principal  requests  pending", "(none)"]

    assert ns["pool"]() is None
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert rows[0] == ["queue_depth", "threads", "busy", "max_threads", "submitted"]
    assert rows[1][0] == "0"
    assert rows[1][3] == str(running.config.io_threads)


class _HelloClient(Int32StringReceiver):
    """Says Hello once, so the broker has surely registered the connection."""

    def __init__(self) -> None:
        self.answered: defer.Deferred[bytes] = defer.Deferred()
        self.closed: defer.Deferred[None] = defer.Deferred()

    def connectionMade(self) -> None:
        self.sendString(p.encode_request(p.Hello(2, "manhole-test")))

    def stringReceived(self, payload: bytes) -> None:
        self.answered.callback(payload)

    def connectionLost(self, reason: Any = None) -> None:
        self.closed.callback(None)


@pytest_twisted.ensureDeferred
async def test_connections_lists_clients(manhole: Manhole, capsys: Any) -> None:
    """connections() shows each connected client's address and request counts."""
    from twisted.internet import reactor
    from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol

    running = manhole.running
    client = _HelloClient()
    await connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", running.port), client)
    try:
        await client.answered.addTimeout(TIMEOUT, reactor)
        local = client.transport.getHost()
        ns = admin_namespace(running.broker, running.factory, running.broker.io)
        ns["connections"]()
        rows = [line.split() for line in capsys.readouterr().out.splitlines()]
        assert rows == [
            ["peer", "principal", "requests", "pending"],
            [f"127.0.0.1:{local.port}", "User:ANONYMOUS", "1", "0"],
        ]
    finally:
        client.transport.loseConnection()
        await client.closed


@pytest_twisted.ensureDeferred
async def test_helpers_validate_topic_names(manhole: Manhole) -> None:
    """partitions() refuses illegal names and reports unknown topics clearly."""
    running = manhole.running
    ns = admin_namespace(running.broker, running.factory, running.broker.io)
    with pytest.raises(InvalidName):
        ns["partitions"]("../etc")
    with pytest.raises(UnknownTopic, match="nope"):
        ns["partitions"]("nope")


@pytest_twisted.ensureDeferred
async def test_kafka_connections_lists_client_id_and_software(
    manhole: Manhole, capsys: Any
) -> None:
    """kafka_connections() shows each Kafka client's id and the software it announced."""
    from twisted.internet import reactor

    from rustka.kafka.client import connect_kafka

    running = manhole.running
    ns = admin_namespace(
        running.broker, running.factory, running.broker.io, running.top.kafka_factory
    )
    ns["kafka_connections"]()
    assert capsys.readouterr().out.splitlines() == [
        "peer  principal  client_id  software  version  requests  pending",
        "(none)",
    ]
    k = await connect_kafka(reactor, f"127.0.0.1:{running.port}", client_id="billing-app")
    try:
        body = {"client_software_name": "rustka-tests", "client_software_version": "1.2.3"}
        answer = await k.request(18, body, version=3).addTimeout(TIMEOUT, reactor)
        assert answer["error_code"] == 0
        local = k.transport.getHost()
        ns["kafka_connections"]()
        rows = [line.split() for line in capsys.readouterr().out.splitlines()]
        assert rows[1:] == [
            [
                f"127.0.0.1:{local.port}",
                "User:ANONYMOUS",
                "billing-app",
                "rustka-tests",
                "1.2.3",
                "2",
                "0",
            ]
        ]
    finally:
        await k.close()


@pytest_twisted.ensureDeferred
async def test_transaction_helpers_list_and_abort_a_hanging_transaction(
    manhole: Manhole, capsys: Any
) -> None:
    """transactions() and open_transactions() show an open transaction and where it holds
    the last stable offset back; abort_transaction() ends it and fences its producer."""
    from tests.storage.test_transactions import txn_batch

    core = manhole.running.broker
    ns = admin_namespace(core, manhole.running.factory, core.io)
    await core.create_topic("held", 1)
    pid, epoch = await core.transactions.init_producer_id("stuck", 60_000)
    await core.transactions.add_partitions("stuck", pid, epoch, [("held", 0)])
    await core.append("held", 0, txn_batch(pid, 0), auto_create=False, transactional_id="stuck")
    assert ns["transactions"]() is None
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert rows[0] == ["transactional_id", "producer_id", "epoch", "state", "open_s", "partitions"]
    assert rows[1][:4] == ["stuck", str(pid), "0", "Ongoing"] and rows[1][5] == "held-0"
    assert ns["open_transactions"]() is None
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert rows[1] == ["held", "0", "0", "2", str(pid), "0"]
    assert ns["abort_transaction"]("stuck") is None
    assert (await next_output(capsys)).strip() == "aborted the transaction of 'stuck'"
    meta = core.transactions.describe("stuck")
    assert (
        meta is not None and meta.state.kafka_name == "CompleteAbort" and meta.producer_epoch == 1
    )
    assert core.partition("held", 0).last_stable_offset == 3
    ns["abort_transaction"]("stuck")
    assert "not aborted" in await next_output(capsys)


async def next_output(capsys: Any) -> str:
    """What the helper prints once its Deferred fired (bounded: 5 s)."""
    from twisted.internet import reactor, task

    for _ in range(250):
        out = capsys.readouterr().out
        if out:
            return str(out)
        await task.deferLater(reactor, 0.02, lambda: None)
    raise AssertionError("the helper printed nothing")
