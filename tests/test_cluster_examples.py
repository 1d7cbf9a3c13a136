"""The systemd template of a cluster's brokers (systemd/rustka@.service) runs each
example broker (etc/cluster/) with its config and data dir, keeps rustka.service's
hardening, and verifies without a message. tests/test_config.py checks the configs."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from rustka.config import Config

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = ROOT / "etc" / "cluster"
TEMPLATE = ROOT / "systemd" / "rustka@.service"
BROKERS = (1, 2, 3)


def broker(n: int) -> Config:
    return Config.from_file(CLUSTER / f"broker-{n}.toml")


def unit_of(n: int) -> dict[str, list[str]]:
    """The [Service] settings of instance rustka@n (%i expanded), repeated keys kept."""
    found: dict[str, list[str]] = {}
    section = ""
    for raw in TEMPLATE.read_text().replace("%i", str(n)).splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service":
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def test_the_template_runs_each_broker_with_its_config_and_its_data_dir() -> None:
    for n in BROKERS:
        service = unit_of(n)
        command = shlex.split(service["ExecStart"][-1])
        assert command[command.index("rustka") + 1 :] == [
            "--config",
            f"/etc/rustka/broker-{n}.toml",
        ]
        assert "--nodaemon" in command and "--pidfile=" in command
        data_dir = broker(n).data_dir
        assert service["WorkingDirectory"] == [data_dir]
        assert service["StateDirectory"] == [data_dir.removeprefix("/var/lib/")]
        [writable] = service["ReadWritePaths"]
        assert Path(data_dir).is_relative_to(writable)
        assert service["Type"] == ["notify"] and service["User"] == ["rustka"]


def test_the_template_is_hardened_exactly_as_the_single_brokers_unit() -> None:
    """Two copies of the hardening cannot drift: every [Service] line of
    systemd/rustka.service is in the template, but for what names the broker's files."""
    own = {"ExecStart", "WorkingDirectory", "StateDirectory", "ReadWritePaths"}
    single: dict[str, list[str]] = {}
    section = ""
    for raw in (ROOT / "systemd" / "rustka.service").read_text().splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service" and line and not line.startswith("#"):
            key, _, value = line.partition("=")
            single.setdefault(key.strip(), []).append(value.strip())
    template = unit_of(1)
    assert {k: v for k, v in template.items() if k not in own | {"EnvironmentFile"}} == {
        k: v for k, v in single.items() if k not in own
    }
    mine, theirs = shlex.split(template["ExecStart"][0]), shlex.split(single["ExecStart"][0])
    # The same twistd with the same options; only the plugin's arguments differ.
    assert mine[: mine.index("rustka") + 1] == theirs[: theirs.index("rustka") + 1]


@pytest.mark.system
def test_the_template_verifies_without_a_message_and_is_hardened(tmp_path: Path) -> None:
    """systemd-analyze accepts instance rustka@2 silently and scores it as exposed as
    little as the single broker's unit."""
    distro = next(
        (d for d in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")) if d.is_dir()),
        None,
    )
    assert distro is not None, "systemd's unit directory is missing; install systemd"
    root = tmp_path / "root"
    shutil.copytree(distro, root / "usr/lib/systemd/system", symlinks=True)
    stub = root / shlex.split(unit_of(2)["ExecStart"][-1])[0].lstrip("/")
    stub.parent.mkdir(parents=True)
    stub.write_text("#!/bin/sh\n")
    stub.chmod(0o755)
    units = root / "etc/systemd/system"
    units.mkdir(parents=True)
    shutil.copy(TEMPLATE, units / TEMPLATE.name)

    def analyze(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["systemd-analyze", *args, f"--root={root}", "rustka@2.service"],
            capture_output=True,
            text=True,
            timeout=60,
        )

    verified = analyze("verify")
    assert (verified.returncode, verified.stdout, verified.stderr) == (0, "", "")
    security = analyze("security", "--offline=true")
    line = [x for x in security.stdout.splitlines() if "Overall exposure level" in x]
    assert line and float(line[0].split(": ")[1].split()[0]) <= 2.0, security.stdout
    (units / TEMPLATE.name).write_text(TEMPLATE.read_text().replace("Type=", "Tpye="))
    assert "Unknown key 'Tpye'" in analyze("verify").stderr
