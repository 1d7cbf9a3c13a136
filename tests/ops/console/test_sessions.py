"""The console's sign-in logic on its own: password checks and the session table."""

from __future__ import annotations

from rustka.ops.console.sessions import SessionTable, check_password
from rustka.security.scram import MECHANISMS, derive_credential


def test_password_checked_against_stored_keys() -> None:
    credentials = {
        name: derive_credential(mechanism, "right pw") for name, mechanism in MECHANISMS.items()
    }
    assert check_password(credentials, "right pw")
    assert not check_password(credentials, "right pw ")
    assert not check_password({}, "right pw")
    only_512 = {"SCRAM-SHA-512": credentials["SCRAM-SHA-512"]}
    assert check_password(only_512, "right pw")
    assert not check_password(only_512, "x" * 5000)


def test_sessions_expire_end_and_stay_bounded() -> None:
    table = SessionTable(ttl_s=10, limit=2)
    token, session = table.start("alice", now=100)
    assert table.find(token, now=109.9) == session and session.principal == "User:alice"
    assert table.find(token, now=110) is None and len(table) == 0
    first, _ = table.start("a", now=0)
    second, _ = table.start("b", now=0)
    third, _ = table.start("c", now=0)
    assert table.find(first, now=1) is None, "the oldest went to make room"
    assert table.find(second, now=1) is not None and table.find(third, now=1) is not None
    table.end(second)
    assert table.find(second, now=1) is None
    assert table.find(b"", now=1) is None and table.find(b"x" * 500, now=1) is None
    assert first != second != third
