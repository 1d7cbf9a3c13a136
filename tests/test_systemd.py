"""The systemd units are valid, hardened, and the broker speaks systemd's protocols.

`systemd-analyze verify` exits 0 on unknown keys (it only prints a warning), so
these tests fail on *any* output. It also insists that the ExecStart binary and
the units it depends on exist, so it runs against a scratch root: a stub
executable at the ExecStart path and a copy of the distro's unit directory.
Socket activation and Type=notify are exercised for real with
`systemd-socket-activate` and a datagram socket standing in for systemd.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from rustka.native import codec as p
from tools.twistd_process import Twistd, call_many

pytestmark = pytest.mark.system

UNITS = Path(__file__).resolve().parent.parent / "systemd"
SERVICE = UNITS / "rustka.service"
SOCKET = UNITS / "rustka.socket"
DROP_IN = UNITS / "rustka-socket-activated.conf"
DISTRO_UNITS = next(
    (d for d in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")) if d.is_dir()),
    None,
)


def settings(path: Path) -> list[tuple[str, str, str]]:
    """(section, key, value) for every assignment, in order; repeated keys are kept."""
    section = ""
    result = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        result.append((section, key.strip(), value.strip()))
    return result


def values(path: Path, key: str, section: str = "Service") -> list[str]:
    return [v for s, k, v in settings(path) if s == section and k == key]


def exec_start(path: Path) -> list[str]:
    """The effective command line (the last non-empty ExecStart=)."""
    return shlex.split([v for v in values(path, "ExecStart") if v][-1])


def make_root(root: Path, service_text: str | None = None) -> Path:
    """A scratch root holding the units, the drop-in, a stub twistd and the distro's units."""
    assert DISTRO_UNITS is not None, "systemd's unit directory is missing; install systemd"
    shutil.copytree(DISTRO_UNITS, root / "usr/lib/systemd/system", symlinks=True)
    stub = root / exec_start(SERVICE)[0].lstrip("/")
    stub.parent.mkdir(parents=True)
    stub.write_text("#!/bin/sh\n")
    stub.chmod(0o755)
    units = root / "etc/systemd/system"
    units.mkdir(parents=True)
    (units / "rustka.service").write_text(service_text or SERVICE.read_text())
    shutil.copy(SOCKET, units / "rustka.socket")
    (units / "rustka.service.d").mkdir()
    shutil.copy(DROP_IN, units / "rustka.service.d" / DROP_IN.name)
    return root


def verify(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", "verify", f"--root={root}", "rustka.service", "rustka.socket"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_units_verify_without_a_single_message(tmp_path: Path) -> None:
    """systemd-analyze verify accepts the service, the socket and the drop-in, silently."""
    result = verify(make_root(tmp_path / "root"))
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_verify_harness_notices_an_unknown_key(tmp_path: Path) -> None:
    """The same harness reports a misspelt key, so silence above means something."""
    broken = SERVICE.read_text().replace("Type=notify", "Tpye=notify")
    result = verify(make_root(tmp_path / "root", broken))
    assert result.returncode == 0
    assert "Unknown key 'Tpye'" in result.stdout + result.stderr


def test_service_is_hardened(tmp_path: Path) -> None:
    """Type=notify, a dedicated user, a read-only system and a low exposure score."""
    one = {k: v for s, k, v in settings(SERVICE) if s == "Service"}
    assert one["Type"] == "notify" and one["NotifyAccess"] == "main"
    assert one["User"] == one["Group"] == "rustka"
    assert one["ProtectSystem"] == "strict" and one["NoNewPrivileges"] == "yes"
    assert int(one["LimitNOFILE"]) >= 20_000 + 1024
    command = exec_start(SERVICE)
    assert "--pidfile=" in command and "--nodaemon" in command
    data_dir = command[command.index("--data-dir") + 1]
    assert one["ReadWritePaths"] == data_dir == one["WorkingDirectory"]
    assert all(part.startswith("/") for part in (command[0], data_dir))

    root = make_root(tmp_path / "root")
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", f"--root={root}", "rustka.service"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    m = re.search(r"Overall exposure level for rustka.service: (\d+\.\d+)", result.stdout)
    assert m, result.stdout + result.stderr
    assert float(m.group(1)) <= 2.0


def test_socket_and_drop_in_agree_with_the_service() -> None:
    """The drop-in runs the service's command plus the socket's named listener."""
    name = values(SOCKET, "FileDescriptorName", "Socket")[0]
    assert values(SOCKET, "ListenStream", "Socket") == ["127.0.0.1:9092"]
    assert values(SOCKET, "NoDelay", "Socket") == ["true"]
    assert values(DROP_IN, "ExecStart")[0] == "", "the drop-in must reset ExecStart first"
    expected = [*exec_start(SERVICE), "--listen", f"systemd:domain=INET:name={name}"]
    assert exec_start(DROP_IN) == expected
    assert values(DROP_IN, "Requires", "Unit") == ["rustka.socket"]
    assert values(DROP_IN, "After", "Unit") == ["rustka.socket"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_socket_activation_serves_on_the_inherited_socket(tmp_path: Path) -> None:
    """Started by systemd-socket-activate, the broker serves on the socket it was handed."""
    port = free_port()
    activate = [
        "systemd-socket-activate",
        "--fdname=rustka",
        "-E",
        "PYTHONUNBUFFERED=1",
        "-l",
        f"127.0.0.1:{port}",
    ]
    args = ["--data-dir", str(tmp_path / "data"), "--listen", "systemd:domain=INET:name=rustka"]
    with Twistd(args, prefix=activate) as daemon:
        daemon.wait_for(f"Listening on 127.0.0.1:{port} as 3")
        responses = call_many(port, [p.Produce("activated", b"k", b"v%d" % i) for i in range(20)])
        assert all(isinstance(r, p.Produced) for r in responses)
        assert daemon.wait_port() == port
        assert daemon.stop() in (0, -signal.SIGTERM)
    assert any("broker stopped" in line for line in daemon.output), daemon.output


def test_systemd_listener_without_activation_names_the_setting(tmp_path: Path) -> None:
    """`--listen systemd:...` outside socket activation fails at startup, naming `listen`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LISTEN_")}
    with Twistd(
        ["--data-dir", str(tmp_path / "data"), "--listen", "systemd:domain=INET:name=rustka"],
        env=env,
    ) as daemon:
        status = daemon.proc.wait(timeout=60)
    output = "".join(daemon.output)
    assert status != 0
    assert "listen: 'systemd:domain=INET:name=rustka': systemd passed no matching socket" in output
    assert "Traceback" not in output, output


def test_notify_ready_after_listening_and_stopping_on_sigterm(tmp_path: Path) -> None:
    """READY=1 comes only once storage is open and the broker port accepts; SIGTERM: STOPPING=1.

    The broker port is fixed here, so the test connects the moment READY arrives
    without reading the log first: a READY sent before the bind would be refused.
    """
    address = f"rustka-test-notify-{os.getpid()}-{tmp_path.name}"
    port = free_port()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind("\0" + address)
        notify.settimeout(30)
        args = [
            "--data-dir",
            str(tmp_path / "data"),
            "--listen",
            f"tcp:{port}:interface=127.0.0.1",
            "--metrics",
            "tcp:0:interface=127.0.0.1",
        ]
        with Twistd(args, env={"NOTIFY_SOCKET": "@" + address}) as daemon:
            ready = notify.recv(4096).decode()
            assert "READY=1" in ready.splitlines()
            hello = call_many(port, [p.Hello(p.PROTOCOL_VERSION, "systemd-test")])[0]
            assert isinstance(hello, p.Welcome)
            daemon.wait_for(f"listening on .*port={port}\\)")
            lines = "".join(daemon.output)
            assert lines.index("storage ready") < lines.index(f"port={port})")
            daemon.proc.send_signal(signal.SIGTERM)
            stopping = notify.recv(4096).decode()
            assert "STOPPING=1" in stopping.splitlines()
            assert daemon.proc.wait(timeout=30) in (0, -signal.SIGTERM)


def test_no_ready_when_storage_cannot_open(tmp_path: Path) -> None:
    """Storage that cannot open: the process exits 1 and systemd never hears READY=1."""
    address = f"rustka-test-notready-{os.getpid()}-{tmp_path.name}"
    data = tmp_path / "data"
    data.write_text("not a directory")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind("\0" + address)
        args = ["--data-dir", str(data), "--listen", "tcp:0:interface=127.0.0.1"]
        with Twistd(args, env={"NOTIFY_SOCKET": "@" + address}) as daemon:
            status = daemon.proc.wait(timeout=60)
        notify.setblocking(False)
        messages = []
        with contextlib.suppress(BlockingIOError):
            while True:
                messages.append(notify.recv(4096).decode())
    assert status == 1, daemon.output
    assert not any("READY=1" in m for m in messages), messages
    assert "cannot open the storage" in "".join(daemon.output)
