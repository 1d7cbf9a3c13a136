"""PLAIN against the SCRAM store, and the mechanism choice."""

from __future__ import annotations

import pytest

from rustka.security.sasl import (
    ALL_MECHANISMS,
    AuthenticationFailed,
    UnsupportedMechanism,
    new_server,
    verify_password,
)
from rustka.security.scram import MECHANISMS, ScramClient, derive_credential

STORED = {
    ("alice", "SCRAM-SHA-512"): derive_credential(MECHANISMS["SCRAM-SHA-512"], "pw-a"),
    ("bob", "SCRAM-SHA-256"): derive_credential(MECHANISMS["SCRAM-SHA-256"], "pw-b"),
}


def lookup(user: str, mechanism: str):  # type: ignore[no-untyped-def]
    return STORED.get((user, mechanism))


def test_plain_verifies_against_either_scram_credential() -> None:
    for user, password in (("alice", "pw-a"), ("bob", "pw-b")):
        server = new_server("PLAIN", ALL_MECHANISMS, lookup)
        assert server.step(f"\0{user}\0{password}".encode()) == b""
        assert server.complete and server.user == user
    assert verify_password(lookup, "alice", "pw-a")
    assert not verify_password(lookup, "alice", "pw-b")
    assert not verify_password(lookup, "carol", "pw-a")


@pytest.mark.parametrize(
    ("token", "why"),
    [
        (b"\0alice\0wrong", "Invalid username or password"),
        (b"\0carol\0pw-a", "Invalid username or password"),
        (b"bob\0alice\0pw-a", "authorization id"),
        (b"\0\0pw-a", "username not specified"),
        (b"\0alice\0", "password not specified"),
        (b"alice\0pw-a", "3 tokens"),
        (b"\0alice\0pw\0x", "3 tokens"),
        (b"\0\xff\0x", "UTF-8"),
    ],
)
def test_plain_refusals(token: bytes, why: str) -> None:
    server = new_server("PLAIN", ALL_MECHANISMS, lookup)
    with pytest.raises(AuthenticationFailed, match=why):
        server.step(token)
    assert not server.complete


def test_an_authzid_equal_to_the_user_is_accepted() -> None:
    server = new_server("PLAIN", ALL_MECHANISMS, lookup)
    server.step(b"alice\0alice\0pw-a")
    assert server.user == "alice"


def test_mechanisms_not_enabled_or_unknown_are_unsupported() -> None:
    with pytest.raises(UnsupportedMechanism, match="enabled: SCRAM-SHA-256"):
        new_server("PLAIN", ("SCRAM-SHA-256",), lookup)
    with pytest.raises(UnsupportedMechanism):
        new_server("GSSAPI", ALL_MECHANISMS, lookup)


def test_a_scram_exchange_through_the_sasl_interface() -> None:
    server = new_server("SCRAM-SHA-512", ALL_MECHANISMS, lookup)
    client = ScramClient(MECHANISMS["SCRAM-SHA-512"], "alice", "pw-a")
    client.verify(server.step(client.final(server.step(client.first()))))
    assert server.complete and server.user == "alice"
    bad = new_server("SCRAM-SHA-512", ALL_MECHANISMS, lookup)
    with pytest.raises(AuthenticationFailed, match="too long"):
        bad.step(b"n,,n=alice,r=" + b"x" * 9000)
