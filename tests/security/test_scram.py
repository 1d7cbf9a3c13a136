"""SCRAM against RFC 7677's test vector, and the server's refusals."""

from __future__ import annotations

import base64

import pytest

from rustka.security.scram import (
    MECHANISMS,
    MIN_ITERATIONS,
    ScramClient,
    ScramCredential,
    ScramError,
    ScramServer,
    derive_credential,
    parse_client_first,
)

SHA256 = MECHANISMS["SCRAM-SHA-256"]
SHA512 = MECHANISMS["SCRAM-SHA-512"]

# RFC 7677, section 3: user "user", password "pencil".
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_credential() -> ScramCredential:
    return derive_credential(SHA256, "pencil", SALT, 4096)


def rfc_server(credential: ScramCredential | None = None) -> ScramServer:
    stored = credential or rfc_credential()
    return ScramServer(
        SHA256, lambda user, mech: stored if user == "user" else None, lambda: SERVER_NONCE
    )


def test_the_server_answers_rfc_7677s_exchange_byte_for_byte() -> None:
    server = rfc_server()
    assert server.step(CLIENT_FIRST) == SERVER_FIRST
    assert server.step(CLIENT_FINAL) == SERVER_FINAL
    assert server.complete and server.user == "user"


def test_the_client_writes_rfc_7677s_messages_byte_for_byte() -> None:
    client = ScramClient(SHA256, "user", "pencil", lambda: CLIENT_NONCE)
    assert client.first() == CLIENT_FIRST
    assert client.final(SERVER_FIRST) == CLIENT_FINAL
    client.verify(SERVER_FINAL)


def test_a_wrong_server_signature_is_refused_by_the_client() -> None:
    client = ScramClient(SHA256, "user", "pencil", lambda: CLIENT_NONCE)
    client.first()
    client.final(SERVER_FIRST)
    with pytest.raises(ScramError, match="signature"):
        client.verify(b"v=" + base64.b64encode(b"\0" * 32))
    with pytest.raises(ScramError, match="refused: invalid-proof"):
        client.verify(b"e=invalid-proof")


@pytest.mark.parametrize("mechanism", [SHA256, SHA512], ids=lambda m: m.name)
def test_client_and_server_agree_and_a_wrong_password_fails(mechanism) -> None:  # type: ignore[no-untyped-def]
    stored = derive_credential(mechanism, "s3cret", iterations=MIN_ITERATIONS)

    def run(password: str) -> str | None:
        server = ScramServer(mechanism, lambda u, m: stored if u == "alice" else None)
        client = ScramClient(mechanism, "alice", password)
        first = server.step(client.first())
        final = server.step(client.final(first))
        client.verify(final)
        return server.user

    assert run("s3cret") == "alice"
    with pytest.raises(ScramError, match="invalid credentials"):
        run("S3cret")


def test_an_unknown_user_is_answered_like_a_known_one_and_fails_at_the_proof() -> None:
    server = rfc_server()
    first = ScramClient(SHA256, "nobody", "pencil").first()
    answer = server.step(first)
    assert b",s=" in answer and answer.endswith(b",i=4096")
    again = rfc_server().step(first)
    assert again.split(b",")[1] == answer.split(b",")[1], "the same salt for the same name"
    client = ScramClient(SHA256, "nobody", "pencil")
    server = rfc_server()
    final = client.final(server.step(client.first()))
    with pytest.raises(ScramError, match="invalid credentials"):
        server.step(final)
    assert not server.complete


def test_a_replayed_client_final_message_fails() -> None:
    """The RFC's recorded client-final, sent to a server with a fresh nonce."""
    server = ScramServer(SHA256, lambda u, m: rfc_credential())
    server.step(CLIENT_FIRST)
    with pytest.raises(ScramError, match="nonce"):
        server.step(CLIENT_FINAL)
    assert not server.complete


@pytest.mark.parametrize(
    ("message", "why"),
    [
        (b"y,,n=user,r=abc", "channel binding"),
        (b"p=tls-unique,,n=user,r=abc", "channel binding"),
        (b"n,a=other,n=user,r=abc", "authorization id"),
        (b"n,,n=user,r=abc,tokenauth=true", "malformed"),
        (b"n,,n=user,r=abc,x=1", "extensions"),
        (b"n,,n=,r=abc", "malformed"),
        (b"n,,n=user", "malformed"),
        (b"n,,n=us,er,r=abc", "malformed"),
        (b"\xff\xfe", "UTF-8"),
        (b"n,,n=user,r=" + b"a" * 5000, "longer"),
    ],
)
def test_bad_client_first_messages_are_refused(message: bytes, why: str) -> None:
    with pytest.raises(ScramError, match=why):
        rfc_server().step(message)


def test_the_escaped_name_is_decoded_and_an_equal_authzid_is_accepted() -> None:
    first = parse_client_first(b"n,a=a=2Cb=3Dc,n=a=2Cb=3Dc,r=xyz")
    assert first.user == "a,b=c" and first.bare == "n=a=2Cb=3Dc,r=xyz"


def test_a_channel_binding_other_than_the_gs2_header_fails() -> None:
    server = rfc_server()
    server.step(CLIENT_FIRST)
    bad = CLIENT_FINAL.replace(b"c=biws", b"c=" + base64.b64encode(b"y,,"))
    with pytest.raises(ScramError, match="channel binding"):
        server.step(bad)


def test_a_credential_below_the_minimum_iterations_is_refused() -> None:
    weak = ScramCredential(SALT, 1024, b"k" * 32, b"k" * 32)
    with pytest.raises(ScramError, match="fewer than"):
        rfc_server(weak).step(CLIENT_FIRST)
    with pytest.raises(ScramError, match="at least 4096"):
        derive_credential(SHA256, "pw", iterations=4095)


def test_no_message_is_taken_after_the_exchange_ends_or_fails() -> None:
    server = rfc_server()
    server.step(CLIENT_FIRST)
    server.step(CLIENT_FINAL)
    with pytest.raises(ScramError, match="no SCRAM message"):
        server.step(CLIENT_FINAL)
    failed = rfc_server()
    with pytest.raises(ScramError):
        failed.step(b"garbage")
    with pytest.raises(ScramError, match="failed"):
        failed.step(CLIENT_FIRST)


def test_a_short_proof_fails_without_an_exception_other_than_scram_error() -> None:
    server = rfc_server()
    server.step(CLIENT_FIRST)
    short = CLIENT_FINAL.split(b",p=")[0] + b",p=" + base64.b64encode(b"x")
    with pytest.raises(ScramError, match="invalid credentials"):
        server.step(short)


def test_the_client_refuses_a_nonce_that_does_not_extend_its_own() -> None:
    client = ScramClient(SHA256, "user", "pencil", lambda: CLIENT_NONCE)
    client.first()
    with pytest.raises(ScramError, match="nonce"):
        client.final(b"r=other,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    with pytest.raises(ScramError, match="iterations"):
        client.final(SERVER_FIRST.replace(b"i=4096", b"i=99999999"))


def _final_with_nonce(server_first: bytes, nonce: str) -> bytes:
    """A client-final message for "pencil" that echoes ``nonce``, its proof over it."""
    import hashlib
    import hmac

    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", SALT, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored = hashlib.sha256(client_key).digest()
    without_proof = f"c=biws,r={nonce}"
    auth = f"n=user,r={CLIENT_NONCE},{server_first.decode()},{without_proof}".encode()
    signature = hmac.new(stored, auth, "sha256").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


@pytest.mark.clients
def test_librdkafka_2_0s_doubled_client_nonce_is_accepted_but_nothing_else() -> None:
    """Debian's kcat (librdkafka 2.0) echoes its nonce, then the combined one."""
    combined = CLIENT_NONCE + SERVER_NONCE
    server = rfc_server()
    server_first = server.step(CLIENT_FIRST)
    assert server.step(_final_with_nonce(server_first, CLIENT_NONCE + combined)).startswith(b"v=")
    assert server.complete and server.user == "user"
    for nonce in ("x" + combined, CLIENT_NONCE * 2 + combined, combined[1:]):
        other = rfc_server()
        first = other.step(CLIENT_FIRST)
        with pytest.raises(ScramError, match="nonce"):
            other.step(_final_with_nonce(first, nonce))
