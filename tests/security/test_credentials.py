"""The credential file: salted keys only, mode 0600, crash-safe, re-read when changed."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from rustka.security.credentials import (
    CredentialFileError,
    CredentialStore,
    check_credential_file,
    decode_credentials,
)
from rustka.security.scram import MECHANISMS, derive_credential

SHA256 = MECHANISMS["SCRAM-SHA-256"]
SHA512 = MECHANISMS["SCRAM-SHA-512"]


def test_a_user_is_stored_as_salted_keys_only_in_a_0600_file(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path / "credentials")
    store.upsert("alice", "SCRAM-SHA-256", derive_credential(SHA256, "wonderland-pw"))
    path = tmp_path / "credentials"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert "wonderland-pw" not in text
    entry = json.loads(text)["users"]["alice"]["SCRAM-SHA-256"]
    assert set(entry) == {"salt", "iterations", "stored_key", "server_key"}
    assert entry["iterations"] == 4096
    assert not (tmp_path / "credentials.tmp").exists()


def test_a_second_store_sees_a_change_without_being_reopened(tmp_path: Path) -> None:
    path = tmp_path / "credentials"
    broker_view = CredentialStore(path)
    assert broker_view.lookup("bob", "SCRAM-SHA-512") is None
    writer = CredentialStore(path)
    cred = derive_credential(SHA512, "pw")
    writer.upsert("bob", "SCRAM-SHA-512", cred)
    assert broker_view.lookup("bob", "SCRAM-SHA-512") == cred
    writer.delete("bob")
    assert broker_view.lookup("bob", "SCRAM-SHA-512") is None


def test_writers_keep_each_others_changes(tmp_path: Path) -> None:
    path = tmp_path / "credentials"
    one, two = CredentialStore(path), CredentialStore(path)
    one.upsert("a", "SCRAM-SHA-256", derive_credential(SHA256, "x"))
    two.upsert("b", "SCRAM-SHA-256", derive_credential(SHA256, "y"))
    assert set(one.users()) == {"a", "b"}


def test_removing_one_mechanism_keeps_the_other(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path / "c")
    store.upsert("a", "SCRAM-SHA-256", derive_credential(SHA256, "x"))
    store.upsert("a", "SCRAM-SHA-512", derive_credential(SHA512, "x"))
    assert store.delete("a", "SCRAM-SHA-256")
    assert set(store.credentials_of("a")) == {"SCRAM-SHA-512"}
    assert not store.delete("a", "SCRAM-SHA-256")
    assert store.delete("a", "SCRAM-SHA-512")
    assert store.users() == {}
    assert not store.delete("nobody")


def test_a_damaged_file_keeps_the_last_good_users_and_says_why(tmp_path: Path) -> None:
    path = tmp_path / "credentials"
    store = CredentialStore(path)
    cred = derive_credential(SHA256, "x")
    store.upsert("a", "SCRAM-SHA-256", cred)
    path.write_text('{"format": "rustka-credentials", "version": 1, "users": {')
    assert store.lookup("a", "SCRAM-SHA-256") == cred
    assert store.last_error is not None and "not JSON" in store.last_error
    problems, _ = check_credential_file(path)
    assert problems and "not JSON" in problems[0]
    with pytest.raises(CredentialFileError):
        store.upsert("b", "SCRAM-SHA-256", cred)


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda e: e.update(iterations=100), "at least 4096"),
        (lambda e: e.update(salt="!!"), "not base64"),
        (lambda e: e.update(stored_key="AAAA"), "32 bytes"),
        (lambda e: e.update(salt=""), "empty salt"),
    ],
)
def test_bad_entries_are_named(tmp_path: Path, edit, why: str) -> None:  # type: ignore[no-untyped-def]
    store = CredentialStore(tmp_path / "c")
    store.upsert("a", "SCRAM-SHA-256", derive_credential(SHA256, "x"))
    document = json.loads((tmp_path / "c").read_text())
    edit(document["users"]["a"]["SCRAM-SHA-256"])
    with pytest.raises(CredentialFileError, match=why):
        decode_credentials(json.dumps(document).encode())


def test_check_names_a_file_others_may_read(tmp_path: Path) -> None:
    path = tmp_path / "c"
    CredentialStore(path).upsert("a", "SCRAM-SHA-256", derive_credential(SHA256, "x"))
    problems, notes = check_credential_file(path)
    assert problems == [] and any("1 users" in n for n in notes)
    os.chmod(path, 0o644)
    problems, _ = check_credential_file(path)
    assert problems and "0644" in problems[0]


def test_a_missing_file_means_no_users(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path / "none")
    assert store.users() == {} and store.last_error is None
    problems, notes = check_credential_file(tmp_path / "none")
    assert problems == [] and "no users" in notes[0]


def test_bad_user_names_are_refused(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path / "c")
    for name in ["", "a\nb", "x" * 300]:
        with pytest.raises(CredentialFileError):
            store.upsert(name, "SCRAM-SHA-256", derive_credential(SHA256, "x"))


def test_kill_9_during_writes_leaves_a_whole_file(tmp_path: Path) -> None:
    """A writer killed at an arbitrary point (SIGKILL after its 40th acknowledged write)
    leaves the old file or the new one, never a torn one, and no acknowledged user lost."""
    import signal
    import subprocess
    import sys

    path = tmp_path / "credentials"
    script = (
        "import sys\n"
        "from rustka.security.credentials import CredentialStore\n"
        "from rustka.security.scram import MECHANISMS, derive_credential\n"
        "store = CredentialStore(sys.argv[1])\n"
        "m = MECHANISMS['SCRAM-SHA-256']\n"
        "for i in range(10_000):\n"
        "    store.upsert(f'u{i}', 'SCRAM-SHA-256', derive_credential(m, 'pw'))\n"
        "    print(i, flush=True)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        acknowledged = -1
        for line in child.stdout:
            acknowledged = int(line)
            if acknowledged >= 40:
                break
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=30)
        if child.stdout is not None:
            child.stdout.close()
    users = decode_credentials(path.read_bytes())
    assert {f"u{i}" for i in range(acknowledged + 1)} <= set(users)
    problems, _ = check_credential_file(path)
    assert problems == []
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
