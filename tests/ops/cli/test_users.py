"""``rustka users`` (rustka/ops/cli/users.py) on the credential file, and the client
commands' --user login (rustka/ops/cli/common.py) against a broker that requires it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest_twisted
from twisted.internet.threads import deferToThread

from rustka.security.credentials import CredentialStore
from tests.conftest import start_broker
from tests.ops.cli import RUSTKA

CLEAN_ENV = {
    k: v
    for k, v in os.environ.items()
    if k not in ("RUSTKA_PASSWORD", "RUSTKA_NEW_PASSWORD", "RUSTKA_USER", "RUSTKA_BROKER")
}


def users(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RUSTKA, "users", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**CLEAN_ENV, **(env or {})},
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_add_list_remove_store_salted_keys_only_and_audit_each_change(tmp_path: Path) -> None:
    data = tmp_path / "data"
    added = users("add", "alice", "--data-dir", str(data), env={"RUSTKA_NEW_PASSWORD": "pw-a1"})
    assert added.returncode == 0, added.stderr
    path = data / "credentials"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "pw-a1" not in path.read_text()
    audit = [json.loads(line) for line in added.stderr.splitlines()]
    assert [(a["audit_event"], a["user"], a["mechanism"]) for a in audit] == [
        ("user_upserted", "alice", "SCRAM-SHA-256"),
        ("user_upserted", "alice", "SCRAM-SHA-512"),
    ]
    secret = tmp_path / "bob.pw"
    secret.write_text("pw-bob\n")
    bob = users(
        "add", "bob", "--data-dir", str(data), "--password-file", str(secret),
        "--mechanism", "SCRAM-SHA-512", "--iterations", "8192",
    )  # fmt: skip
    assert bob.returncode == 0, bob.stderr
    listed = users("list", "--data-dir", str(data), "--json")
    assert json.loads(listed.stdout) == {
        "alice": {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 4096},
        "bob": {"SCRAM-SHA-512": 8192},
    }
    removed = users("remove", "alice", "--data-dir", str(data), "--mechanism", "SCRAM-SHA-256")
    assert removed.returncode == 0 and "user_deleted" in removed.stderr
    assert set(CredentialStore(path).users()["alice"]) == {"SCRAM-SHA-512"}
    again = users("remove", "carol", "--data-dir", str(data))
    assert again.returncode == 1 and "no SCRAM-SHA-256 or SCRAM-SHA-512 credential" in again.stderr


def test_no_password_without_a_terminal_is_a_clear_error(tmp_path: Path) -> None:
    result = users("add", "alice", "--data-dir", str(tmp_path))
    assert result.returncode == 1
    assert "no password: set $RUSTKA_NEW_PASSWORD" in result.stderr
    assert not (tmp_path / "credentials").exists()
    bad = users("add", "a\tb", "--data-dir", str(tmp_path), env={"RUSTKA_NEW_PASSWORD": "x"})
    assert bad.returncode == 2 and "control characters" in bad.stderr
    low = users("add", "x", "--iterations", "100", env={"RUSTKA_NEW_PASSWORD": "x"})
    assert low.returncode == 2 and "--iterations" in low.stderr


def test_a_damaged_file_is_reported_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "credentials"
    path.write_text("{not json")
    result = users("add", "a", "--credentials", str(path), env={"RUSTKA_NEW_PASSWORD": "x"})
    assert result.returncode == 1 and "not JSON" in result.stderr
    assert path.read_text() == "{not json"


@pytest_twisted.ensureDeferred
async def test_client_commands_log_in_with_user_and_a_password_from_env_or_file(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    users("add", "alice", "--data-dir", str(data), env={"RUSTKA_NEW_PASSWORD": "pw-a1"})
    running = await start_broker(data, listen_security="sasl")
    secret = tmp_path / "alice.pw"
    secret.write_text("pw-a1\n")

    def rustka(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        argv = [RUSTKA, args[0], "--broker", running.address, *args[1:]]
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
            env={**CLEAN_ENV, **env}, check=False,
        )  # fmt: skip

    try:
        made = await deferToThread(
            rustka, "topics", "create", "orders", "--partitions", "1", "--user", "alice",
            env={"RUSTKA_PASSWORD": "pw-a1"},
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        produced = await deferToThread(
            rustka, "produce", "orders", "k", "v", "--user", "alice", "--password-file",
            str(secret), "--mechanism", "SCRAM-SHA-256", env={},
        )  # fmt: skip
        assert produced.returncode == 0, produced.stderr
        wrong = await deferToThread(
            rustka, "topics", "list", "--user", "alice", env={"RUSTKA_PASSWORD": "nope"}
        )
        assert wrong.returncode == 1
        assert "cannot log in to" in wrong.stderr and "as alice" in wrong.stderr
        anonymous = await deferToThread(rustka, "topics", "list", env={})
        assert anonymous.returncode == 1 and "requires authentication" in anonymous.stderr
        no_password = await deferToThread(rustka, "topics", "list", "--user", "alice", env={})
        assert no_password.returncode == 1 and "no password" in no_password.stderr
        assert list(running.broker.topics) == ["orders"]
    finally:
        await running.stop()
