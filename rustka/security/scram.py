"""SCRAM (RFC 5802, RFC 7677) as Kafka's ScramSaslServer and ScramSaslClient speak it.

Pure: the key derivation, the four messages' grammar, and the server's and the
client's side of one exchange as small state machines that take a message and
return the next. Both front-ends (the Kafka SaslAuthenticate API and the native
protocol's Authenticate ops) drive the same `ScramServer`; the Kafka client of
`rustka mirror` and the native client library drive `ScramClient`.

What Kafka does and this follows: no channel binding (the GS2 header is ``n,,``,
or ``n,a=<user>,`` with the user's own name; ``y`` and ``p`` are refused); the
password is its UTF-8 bytes (Kafka applies no SASLprep); the only extension
Kafka knows, ``tokenauth``, is for delegation tokens, which rustka has not, so
every extension is refused; the final nonce must be the client's nonce followed
by the server's (or, for librdkafka before 2.2, the client's nonce once more in
front of that); a credential with fewer iterations than the mechanism's
minimum (4096) is refused. Proofs are compared in constant time.

Where rustka goes beyond Kafka: an unknown user gets a server-first message
like a known one (a salt derived from the name and a per-process secret, the
usual iteration count), and fails only at the proof, so the answers do not
tell which user names exist.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = [
    "MECHANISMS",
    "MIN_ITERATIONS",
    "Mechanism",
    "ScramClient",
    "ScramCredential",
    "ScramError",
    "ScramServer",
    "client_final_message",
    "derive_credential",
    "parse_client_final",
    "parse_client_first",
    "parse_server_final",
    "parse_server_first",
    "salted_password",
]

MIN_ITERATIONS: Final = 4096
"""Kafka's minimum for both mechanisms (ScramMechanism.minIterations)."""

MAX_ITERATIONS: Final = 1_000_000
"""A bound on what a client accepts from a server (and `users add` stores): each
iteration is an HMAC, and a hostile server must not make the client spin."""

MAX_MESSAGE_BYTES: Final = 4096
"""No SCRAM message of a sane client comes near this; a longer one is refused unread."""


class ScramError(Exception):
    """The exchange failed; the message says why in words a log reader can act on."""


@dataclass(frozen=True, slots=True)
class Mechanism:
    """One SCRAM mechanism: its SASL name and hash."""

    name: str
    hash_name: str

    def digest(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size


SCRAM_SHA_256: Final = Mechanism("SCRAM-SHA-256", "sha256")
SCRAM_SHA_512: Final = Mechanism("SCRAM-SHA-512", "sha512")
MECHANISMS: Final[dict[str, Mechanism]] = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the broker keeps of a password: never the password, only what proves it."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def salted_password(mechanism: Mechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with the mechanism's HMAC."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)


def derive_credential(
    mechanism: Mechanism, password: str, salt: bytes | None = None, iterations: int = MIN_ITERATIONS
) -> ScramCredential:
    """The stored form of ``password``: a fresh random salt unless one is given."""
    if iterations < MIN_ITERATIONS:
        raise ScramError(
            f"{mechanism.name} needs at least {MIN_ITERATIONS} iterations, got {iterations}"
        )
    if iterations > MAX_ITERATIONS:
        raise ScramError(f"at most {MAX_ITERATIONS} iterations, got {iterations}")
    if salt is None:
        salt = secrets.token_bytes(mechanism.digest_size)
    salted = salted_password(mechanism, password, salt, iterations)
    client_key = mechanism.hmac(salted, b"Client Key")
    return ScramCredential(
        salt=salt,
        iterations=iterations,
        stored_key=mechanism.digest(client_key),
        server_key=mechanism.hmac(salted, b"Server Key"),
    )


# -- the messages -----------------------------------------------------------------------

# A SCRAM attribute value: printable ASCII without ',' (RFC 5802's "value", as Kafka's
# regular expressions read it); a nonce excludes nothing else.
_VALUE = r"[\x21-\x2b\x2d-\x7e]+"
_SASLNAME = r"(?:[^\x00,=]|=2C|=3D)+"
_BASE64 = r"[A-Za-z0-9+/]*={0,2}"
_CLIENT_FIRST = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_SASLNAME}))?,)"
    rf"n=(?P<user>{_SASLNAME}),r=(?P<nonce>{_VALUE})(?P<ext>(?:,[a-zA-Z]={_VALUE})*)"
)
_SERVER_FIRST = re.compile(
    rf"(?:m={_VALUE},)?r=(?P<nonce>{_VALUE}),s=(?P<salt>{_BASE64}),i=(?P<iterations>[0-9]{{1,10}})"
    rf"(?:,{_VALUE})*"
)
_CLIENT_FINAL = re.compile(
    rf"c=(?P<binding>{_BASE64}),r=(?P<nonce>{_VALUE})(?:,[a-oq-zA-Z]={_VALUE})*,p=(?P<proof>{_BASE64})"
)
_SERVER_FINAL = re.compile(rf"(?:e=(?P<error>{_VALUE})|v=(?P<signature>{_BASE64}))(?:,{_VALUE})*")


@dataclass(frozen=True, slots=True)
class ClientFirst:
    gs2_header: str
    user: str
    nonce: str
    bare: str
    """The message without its GS2 header: the start of the AuthMessage."""


@dataclass(frozen=True, slots=True)
class ClientFinal:
    channel_binding: bytes
    nonce: str
    proof: bytes
    without_proof: str


@dataclass(frozen=True, slots=True)
class ServerFirst:
    nonce: str
    salt: bytes
    iterations: int


def _text(message: bytes, what: str) -> str:
    if len(message) > MAX_MESSAGE_BYTES:
        raise ScramError(f"{what} of {len(message)} bytes is longer than {MAX_MESSAGE_BYTES}")
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError(f"{what} is not UTF-8") from None


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ScramError(f"{what} is not base64") from None


def _decode_name(saslname: str) -> str:
    """RFC 5802's saslname: '=2C' is ',', '=3D' is '='."""
    return saslname.replace("=2C", ",").replace("=3D", "=")


def encode_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def parse_client_first(message: bytes) -> ClientFirst:
    text = _text(message, "client-first message")
    m = _CLIENT_FIRST.fullmatch(text)
    if m is None:
        if text[:1] in ("y", "p"):
            raise ScramError("channel binding is not supported (the GS2 header must be 'n,,')")
        raise ScramError("malformed client-first message")
    user = _decode_name(m["user"])
    authzid = m["authzid"]
    if authzid is not None and _decode_name(authzid) != user:
        raise ScramError("the authorization id differs from the user name")
    if m["ext"]:
        names = [item.split("=", 1)[0] for item in m["ext"][1:].split(",")]
        raise ScramError(f"unsupported SCRAM extensions: {', '.join(names)}")
    return ClientFirst(m["gs2"], user, m["nonce"], text[len(m["gs2"]) :])


def parse_client_final(message: bytes) -> ClientFinal:
    text = _text(message, "client-final message")
    m = _CLIENT_FINAL.fullmatch(text)
    if m is None:
        raise ScramError("malformed client-final message")
    return ClientFinal(
        channel_binding=_b64(m["binding"], "channel binding"),
        nonce=m["nonce"],
        proof=_b64(m["proof"], "client proof"),
        without_proof=text[: m.start("proof") - len(",p=")],
    )


def parse_server_first(message: bytes) -> ServerFirst:
    text = _text(message, "server-first message")
    m = _SERVER_FIRST.fullmatch(text)
    if m is None or text.startswith("m="):
        raise ScramError("malformed server-first message")
    return ServerFirst(m["nonce"], _b64(m["salt"], "salt"), int(m["iterations"]))


def parse_server_final(message: bytes) -> bytes:
    """The server signature; ScramError with the server's error if it sent one."""
    text = _text(message, "server-final message")
    m = _SERVER_FINAL.fullmatch(text)
    if m is None:
        raise ScramError("malformed server-final message")
    if m["error"] is not None:
        raise ScramError(f"the server refused: {m['error']}")
    return _b64(m["signature"], "server signature")


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def _auth_message(
    client_first_bare: str, server_first: str, client_final_without_proof: str
) -> bytes:
    return f"{client_first_bare},{server_first},{client_final_without_proof}".encode()


def client_final_message(
    mechanism: Mechanism,
    password: str,
    client_first_bare: str,
    server_first: str,
    gs2_header: str = "n,,",
) -> tuple[bytes, bytes]:
    """The client-final message and the server signature the client must then see."""
    parsed = parse_server_first(server_first.encode())
    salted = salted_password(mechanism, password, parsed.salt, parsed.iterations)
    client_key = mechanism.hmac(salted, b"Client Key")
    stored_key = mechanism.digest(client_key)
    binding = base64.b64encode(gs2_header.encode()).decode()
    without_proof = f"c={binding},r={parsed.nonce}"
    auth = _auth_message(client_first_bare, server_first, without_proof)
    proof = _xor(client_key, mechanism.hmac(stored_key, auth))
    server_signature = mechanism.hmac(mechanism.hmac(salted, b"Server Key"), auth)
    final = f"{without_proof},p={base64.b64encode(proof).decode()}"
    return final.encode(), server_signature


# -- the server's side ------------------------------------------------------------------

CredentialLookup = Callable[[str, str], "ScramCredential | None"]
"""(user, mechanism name) -> the user's credential for it, or None."""

_PROCESS_SECRET: Final = secrets.token_bytes(32)


def _stand_in(mechanism: Mechanism, user: str) -> ScramCredential:
    """What an unknown user is answered with: the same salt every time for one name, so
    a repeated probe does not tell it from a real one, and keys no proof can match."""
    salt = hmac.new(_PROCESS_SECRET, user.encode(), "sha256").digest()[:16]
    junk = hmac.new(_PROCESS_SECRET, b"no key " + user.encode(), mechanism.hash_name).digest()
    return ScramCredential(salt, MIN_ITERATIONS, junk, junk)


class ScramServer:
    """The server's side of one SCRAM exchange: two client messages, two answers.

    ``step`` takes the client's next message and returns the server's answer;
    it raises ScramError on anything wrong, after which the exchange is over.
    ``complete`` and ``user`` say how it ended. The server nonce is fresh for
    each instance, so a client-final message recorded from another exchange
    (a replay) can never match.
    """

    def __init__(
        self,
        mechanism: Mechanism,
        lookup: CredentialLookup,
        nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24),
    ) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._server_nonce = nonce()
        self._state = "first"
        self._first: ClientFirst | None = None
        self._server_first = ""
        self._credential: ScramCredential | None = None
        self._known = False
        self.user: str | None = None
        self.claimed_user: str | None = None
        """The name the client gave, whether or not it proved it (for the audit log)."""
        self.complete = False

    def step(self, message: bytes) -> bytes:
        state, self._state = self._state, "failed"
        if state == "first":
            answer = self._first_step(message)
            self._state = "final"
            return answer
        if state == "final":
            answer = self._final_step(message)
            self._state = "done"
            return answer
        raise ScramError(f"no SCRAM message is expected now (the exchange is {state})")

    def _first_step(self, message: bytes) -> bytes:
        first = parse_client_first(message)
        self.claimed_user = first.user
        credential = self._lookup(first.user, self.mechanism.name)
        self._known = credential is not None
        if credential is None:
            credential = _stand_in(self.mechanism, first.user)
        elif credential.iterations < MIN_ITERATIONS:
            raise ScramError(
                f"the stored credential of {first.user!r} has {credential.iterations} "
                f"iterations, fewer than {self.mechanism.name}'s minimum {MIN_ITERATIONS}"
            )
        self._first = first
        self._credential = credential
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = (
            f"r={first.nonce}{self._server_nonce},s={salt},i={credential.iterations}"
        )
        return self._server_first.encode()

    def _final_step(self, message: bytes) -> bytes:
        first, credential = self._first, self._credential
        assert first is not None and credential is not None
        final = parse_client_final(message)
        if final.channel_binding != first.gs2_header.encode():
            raise ScramError("the channel binding differs from the client-first GS2 header")
        combined = first.nonce + self._server_nonce
        if not (
            hmac.compare_digest(final.nonce, combined)
            # librdkafka before 2.2 (Debian's kcat) sends its own nonce once more in front
            # of the combined one; older Kafka brokers accepted that (they compared with
            # endsWith). The fresh server nonce must still be there whole, so a replayed
            # message fails all the same.
            or hmac.compare_digest(final.nonce, first.nonce + combined)
        ):
            raise ScramError("the nonce is not the one this exchange agreed")
        mech = self.mechanism
        auth = _auth_message(first.bare, self._server_first, final.without_proof)
        signature = mech.hmac(credential.stored_key, auth)
        if len(final.proof) != len(signature):
            raise ScramError("invalid credentials")
        client_key = _xor(final.proof, signature)
        matches = hmac.compare_digest(mech.digest(client_key), credential.stored_key)
        if not (matches and self._known):
            raise ScramError("invalid credentials")
        self.user = first.user
        self.complete = True
        server_signature = mech.hmac(credential.server_key, auth)
        return b"v=" + base64.b64encode(server_signature)


# -- the client's side ------------------------------------------------------------------


class ScramClient:
    """The client's side: ``first()``, then ``final(server_first)``, then ``verify``."""

    def __init__(
        self,
        mechanism: Mechanism,
        user: str,
        password: str,
        nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24),
    ) -> None:
        self.mechanism = mechanism
        self.user = user
        self._password = password
        self._nonce = nonce()
        self._bare = f"n={encode_name(user)},r={self._nonce}"
        self._server_signature: bytes | None = None

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        parsed = parse_server_first(server_first)
        if not parsed.nonce.startswith(self._nonce) or len(parsed.nonce) == len(self._nonce):
            raise ScramError("the server's nonce does not extend the client's")
        if not MIN_ITERATIONS <= parsed.iterations <= MAX_ITERATIONS:
            raise ScramError(
                f"the server asks for {parsed.iterations} iterations, outside "
                f"{MIN_ITERATIONS}..{MAX_ITERATIONS}"
            )
        message, self._server_signature = client_final_message(
            self.mechanism, self._password, self._bare, server_first.decode()
        )
        return message

    def verify(self, server_final: bytes) -> None:
        """ScramError unless the server proved it knows the credential too."""
        signature = parse_server_final(server_final)
        if self._server_signature is None or not hmac.compare_digest(
            signature, self._server_signature
        ):
            raise ScramError("the server's signature is wrong: it does not know the credential")
