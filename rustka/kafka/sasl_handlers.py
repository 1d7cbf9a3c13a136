"""SaslHandshake, SaslAuthenticate and the SCRAM credential APIs (docs/kafka.md,
"Authentication").

The exchange itself is `rustka.security`'s; these handlers carry its tokens in
Kafka's messages and apply Kafka's rules around them, as its
SaslServerAuthenticator does: a handshake names the mechanism (an unsupported
one is answered with the enabled list, then the connection is closed); each
SaslAuthenticate carries one token; a failure is SASL_AUTHENTICATION_FAILED
with a message, answered only after ``connection_failed_authentication_delay_ms``
and followed by the hang-up; success reports the session lifetime (KIP-368),
after which the client may authenticate again on the same connection, as the
same principal. On a listener without SASL both APIs answer ILLEGAL_SASL_STATE,
as Kafka's KafkaApis does on a PLAINTEXT listener.

After SaslHandshake v0 the client sends its tokens as bare length-prefixed
frames with no Kafka header; `raw_token` serves those for the front-end.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

from twisted.internet import defer, task, threads

from rustka.kafka.context import Body, Connection, RequestContext
from rustka.kafka.errors import ErrorCode as E
from rustka.security.credentials import CredentialStore
from rustka.security.sasl import AuthenticationFailed, SaslServer, UnsupportedMechanism
from rustka.security.scram import MECHANISMS, MIN_ITERATIONS, ScramCredential
from rustka.security.session import Authenticator, ConnectionAuth, attempt

__all__ = [
    "MECHANISM_CODES",
    "alter_user_scram_credentials",
    "describe_user_scram_credentials",
    "raw_token",
    "sasl_authenticate",
    "sasl_handshake",
]

MECHANISM_CODES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
"""Kafka's ScramMechanism type codes (0 is UNKNOWN)."""
CODE_OF = {name: code for code, name in MECHANISM_CODES.items()}
MAX_ITERATIONS = 16384
"""Kafka's ScramMechanism.maxIterations: a credential may not ask more of a login."""


class AuthConnection(Connection, Protocol):
    """What these handlers need of a connection besides `Connection`."""

    auth: ConnectionAuth
    raw_sasl: bool
    peer: str


def _conn(ctx: RequestContext) -> AuthConnection:
    return cast(AuthConnection, ctx.connection)


def _authenticator(ctx: RequestContext) -> Authenticator:
    return cast(Authenticator, ctx.factory.authenticator)


def _later(ctx: RequestContext, body: Body) -> defer.Deferred[Body]:
    """``body`` after the failure delay: a guesser waits for every answer."""
    delay = _authenticator(ctx).failure_delay_s
    return task.deferLater(ctx.factory.reactor, delay, lambda: body)


# -- SaslHandshake (17) -----------------------------------------------------------------


def sasl_handshake(ctx: RequestContext, version: int, body: Body) -> Body:
    conn = _conn(ctx)
    auth = conn.auth
    enabled = list(_authenticator(ctx).mechanisms)
    if auth.security.mode != "sasl":
        return {"error_code": E.ILLEGAL_SASL_STATE, "mechanisms": []}
    if auth.server is not None:
        conn.close_after_answers("a second SaslHandshake during a SASL exchange")
        return {"error_code": E.ILLEGAL_SASL_STATE, "mechanisms": enabled}
    try:
        auth.start(body["mechanism"], conn.peer)
    except UnsupportedMechanism:
        conn.close_after_answers(f"unsupported SASL mechanism {body['mechanism']!r}")
        return {"error_code": E.UNSUPPORTED_SASL_MECHANISM, "mechanisms": enabled}
    if version == 0:
        conn.raw_sasl = True
    return {"error_code": E.NONE, "mechanisms": enabled}


# -- SaslAuthenticate (36) --------------------------------------------------------------


def sasl_authenticate(ctx: RequestContext, version: int, body: Body) -> Body | defer.Deferred[Body]:
    conn = _conn(ctx)
    auth = conn.auth
    if auth.security.mode != "sasl" or auth.server is None or conn.raw_sasl:
        # Kafka's KafkaApis answers this on a listener without SASL and after a
        # completed authentication; only an exchange that has not begun is fatal.
        if not auth.authenticated:
            conn.close_after_answers("SaslAuthenticate without a SaslHandshake before it")
        return {
            "error_code": E.ILLEGAL_SASL_STATE,
            "error_message": "SaslAuthenticate must follow a SaslHandshake v1",
            "auth_bytes": b"",
        }
    server = auth.exchange()
    token = bytes(body["auth_bytes"])
    if server.costly:
        # PLAIN's key derivation takes milliseconds: off the reactor, so a flood of
        # logins delays only themselves. Requests behind this one wait for its answer.
        reactor = ctx.factory.reactor
        d = threads.deferToThreadPool(reactor, reactor.getThreadPool(), attempt, server, token)
        return d.addCallback(lambda outcome: _authenticated(ctx, server, outcome))
    return _authenticated(ctx, server, attempt(server, token))


def _authenticated(
    ctx: RequestContext, server: SaslServer, outcome: bytes | AuthenticationFailed
) -> Body | defer.Deferred[Body]:
    conn = _conn(ctx)
    auth = conn.auth
    try:
        answer = auth.settle(server, outcome, conn.peer)
    except AuthenticationFailed as e:
        conn.close_after_answers(f"authentication failed: {e}")
        return _later(
            ctx,
            {
                "error_code": E.SASL_AUTHENTICATION_FAILED,
                "error_message": str(e),
                "auth_bytes": b"",
            },
        )
    lifetime = auth.session_lifetime_ms if auth.server is None else 0
    return {
        "error_code": E.NONE,
        "error_message": None,
        "auth_bytes": answer,
        "session_lifetime_ms": lifetime,
    }


def raw_token(conn: AuthConnection, reactor: Any, token: bytes) -> defer.Deferred[bytes | None]:
    """The answer to a token sent after SaslHandshake v0, or None: the exchange failed
    and, v0 having no error field, the connection must close (after the delay).

    Fired at once unless the exchange is costly (PLAIN), whose step runs on a thread.
    """
    auth = conn.auth
    try:
        server = auth.exchange()
    except AuthenticationFailed:
        conn.raw_sasl = False
        return defer.succeed(None)

    def settled(outcome: bytes | AuthenticationFailed) -> bytes | None:
        try:
            answer = auth.settle(server, outcome, conn.peer)
        except AuthenticationFailed:
            conn.raw_sasl = False
            return None
        if auth.server is None:
            conn.raw_sasl = False
        return answer

    if server.costly:
        d = threads.deferToThreadPool(reactor, reactor.getThreadPool(), attempt, server, token)
        return d.addCallback(settled)
    return defer.succeed(settled(attempt(server, token)))


# -- DescribeUserScramCredentials (50) ---------------------------------------------------


def describe_user_scram_credentials(ctx: RequestContext, version: int, body: Body) -> Body:
    store = _authenticator(ctx).store
    users = store.users()
    asked = body.get("users")
    results: list[dict[str, Any]] = []
    if not asked:
        # Null or empty: every user, as Kafka's ScramControlManager answers.
        names = sorted(users)
        duplicates: set[str] = set()
    else:
        names = [u["name"] for u in asked]
        duplicates = {n for n in names if names.count(n) > 1}
    for name in dict.fromkeys(names):
        if name in duplicates:
            results.append(
                _user_result(
                    name,
                    E.DUPLICATE_RESOURCE,
                    "Cannot describe SCRAM credentials for the same user twice in a single request",
                )
            )
        elif name not in users:
            results.append(
                _user_result(
                    name,
                    E.RESOURCE_NOT_FOUND,
                    "Attempt to describe a user credential that does not exist",
                )
            )
        else:
            infos = [
                {"mechanism": CODE_OF[m], "iterations": c.iterations}
                for m, c in sorted(users[name].items())
            ]
            results.append({**_user_result(name, E.NONE, None), "credential_infos": infos})
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": results}


def _user_result(name: str, code: int, message: str | None) -> dict[str, Any]:
    return {"user": name, "error_code": code, "error_message": message, "credential_infos": []}


# -- AlterUserScramCredentials (51) ------------------------------------------------------


def alter_user_scram_credentials(
    ctx: RequestContext, version: int, body: Body
) -> defer.Deferred[Body]:
    """Kafka's checks per user, then every accepted change in one write off the reactor.

    The client sends the salt and the salted password (Hi of RFC 5802), never the
    password; the stored and server keys are derived from them here.
    """
    authn = _authenticator(ctx)
    store = authn.store
    deletions = body.get("deletions") or []
    upsertions = body.get("upsertions") or []
    named = [d["name"] for d in deletions] + [u["name"] for u in upsertions]
    twice = {n for n in named if named.count(n) > 1}
    errors: dict[str, tuple[int, str]] = {}
    for name in twice:
        errors[name] = (
            E.DUPLICATE_RESOURCE,
            "A user credential cannot be altered twice in the same request",
        )
    current = store.users()
    for entry in deletions:
        name = entry["name"]
        mechanism = MECHANISM_CODES.get(entry["mechanism"])
        if name in errors:
            continue
        if not name:
            errors[name] = (E.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mechanism is None:
            errors[name] = (E.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif mechanism not in current.get(name, {}):
            errors[name] = (
                E.RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist",
            )
    for entry in upsertions:
        name = entry["name"]
        mechanism = MECHANISM_CODES.get(entry["mechanism"])
        if name in errors:
            continue
        if not name:
            errors[name] = (E.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mechanism is None:
            errors[name] = (E.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif entry["iterations"] < MIN_ITERATIONS:
            errors[name] = (E.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif entry["iterations"] > MAX_ITERATIONS:
            errors[name] = (E.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        elif not entry["salt"] or len(entry["salted_password"]) != (
            MECHANISMS[mechanism].digest_size
        ):
            errors[name] = (E.UNACCEPTABLE_CREDENTIAL, "Salt or salted password is invalid")
    changes: list[tuple[str, str, ScramCredential | None]] = []
    for entry in deletions:
        if entry["name"] not in errors:
            changes.append((entry["name"], MECHANISM_CODES[entry["mechanism"]], None))
    for entry in upsertions:
        if entry["name"] not in errors:
            mechanism = MECHANISM_CODES[entry["mechanism"]]
            credential = _credential(
                mechanism,
                bytes(entry["salt"]),
                entry["iterations"],
                bytes(entry["salted_password"]),
            )
            changes.append((entry["name"], mechanism, credential))

    def write() -> None:
        _apply(store, changes)

    def answer(_: object) -> Body:
        for name, mechanism, credential in changes:
            authn.audit(
                "user_deleted" if credential is None else "user_upserted",
                {
                    "user": name,
                    "mechanism": mechanism,
                    "by": str(ctx.connection.principal),
                    "via": "AlterUserScramCredentials",
                },
            )
        return _alter_answer(named, errors)

    def failed(failure: Any) -> Body:
        why = failure.getErrorMessage()
        for name, _, _ in changes:
            errors[name] = (E.UNKNOWN_SERVER_ERROR, f"cannot write the credential file: {why}")
        return _alter_answer(named, errors)

    if not changes:
        return defer.succeed(_alter_answer(named, errors))
    d: defer.Deferred[None] = threads.deferToThreadPool(
        ctx.factory.reactor, ctx.factory.reactor.getThreadPool(), write
    )
    return d.addCallbacks(answer, failed)


def _credential(mechanism: str, salt: bytes, iterations: int, salted: bytes) -> ScramCredential:
    m = MECHANISMS[mechanism]
    return ScramCredential(
        salt=salt,
        iterations=iterations,
        stored_key=m.digest(m.hmac(salted, b"Client Key")),
        server_key=m.hmac(salted, b"Server Key"),
    )


def _apply(store: CredentialStore, changes: list[tuple[str, str, ScramCredential | None]]) -> None:
    for name, mechanism, credential in changes:
        if credential is None:
            store.delete(name, mechanism)
        else:
            store.upsert(name, mechanism, credential)


def _alter_answer(named: list[str], errors: dict[str, tuple[int, str]]) -> Body:
    results = []
    for name in dict.fromkeys(named):
        code, message = errors.get(name, (E.NONE, None))
        results.append({"user_name": name, "error_code": code, "error_message": message})
    return {"throttle_time_ms": 0, "results": results}
