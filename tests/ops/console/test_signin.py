"""Signing in to the console as a broker user, and reads authorized as that user,
over real HTTP (``console_authentication = "users"`` with the authorizer on)."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted

from rustka.ops.console.sessions import LOGIN_COOKIE
from rustka.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from rustka.security.credentials import CredentialStore
from rustka.security.scram import MECHANISMS, derive_credential
from tests.conftest import within
from tests.ops.console.conftest import Console, get_json, http, start_console

PASSWORD = "alice-secret-pw"


def allow(principal: str, rtype: ResourceType, name: str, operation: Operation) -> AclBinding:
    return AclBinding(rtype, name, PatternType.LITERAL, principal, "*", operation, Permission.ALLOW)


@pytest_twisted.async_yield_fixture
async def signed(data_dir: Path) -> AsyncIterator[Console]:
    """alice (SCRAM-SHA-256) may read topic "visible" and describe group "mine";
    the topic "hidden" and group "theirs" are another user's."""
    data_dir.mkdir(parents=True, exist_ok=True)
    store = CredentialStore(data_dir / "credentials")
    store.upsert("alice", "SCRAM-SHA-256", derive_credential(MECHANISMS["SCRAM-SHA-256"], PASSWORD))
    made = await start_console(
        data_dir,
        None,
        console_authentication="users",
        authorizer_enabled=True,
        super_users="User:root",
    )
    try:
        broker = made.running.broker
        for name in ("visible", "hidden"):
            await within(broker.create_topic(name, 1, {}))
        await within(broker.commit_offsets("mine", {("visible", 0): 0}))
        await within(broker.commit_offsets("theirs", {("hidden", 0): 0}))
        await within(
            broker.access.create(
                [
                    allow("User:alice", ResourceType.TOPIC, "visible", Operation.READ),
                    allow("User:alice", ResourceType.GROUP, "mine", Operation.DESCRIBE),
                ],
                "User:root",
            )
        )
        yield made
    finally:
        await made.console.stopService()
        await made.running.stop()


async def sign_in(console: Console, user: str, password: str) -> tuple[int, Any, Any]:
    code, headers, body = await http(
        console, "/api/login", "POST", {"user": user, "password": password}
    )
    return code, headers, json.loads(body)


def cookie_of(headers: Any) -> tuple[str, list[str]]:
    [raw] = headers.getRawHeaders(b"set-cookie")
    text = raw.decode()
    first, *attributes = [part.strip() for part in text.split(";")]
    name, _, value = first.partition("=")
    assert name == LOGIN_COOKIE.decode()
    return value, [a.lower() for a in attributes]


@pytest_twisted.ensureDeferred
async def test_sign_in_sets_a_strict_cookie(signed: Console) -> None:
    code, headers, body = await sign_in(signed, "alice", PASSWORD)
    assert code == 200 and body["user"] == "alice" and body["principal"] == "User:alice"
    value, attributes = cookie_of(headers)
    assert len(value) >= 32
    assert "httponly" in attributes and "samesite=strict" in attributes
    assert "path=/" in attributes and any(a.startswith("max-age=") for a in attributes)
    assert "secure" not in attributes, "plain HTTP: a Secure cookie would never come back"
    session = await get_json_with(signed, "/api/session", value)
    assert session["user"] == "alice" and session["csrf"] == body["csrf"]


@pytest_twisted.ensureDeferred
async def test_wrong_password_or_user_is_refused(signed: Console) -> None:
    for user, password in (("alice", "wrong"), ("nobody", PASSWORD), ("alice", "")):
        code, headers, body = await sign_in(signed, user, password)
        assert code == 401 and body == {"error": "wrong user name or password"}
        assert headers.getRawHeaders(b"set-cookie") is None


@pytest_twisted.ensureDeferred
async def test_reads_need_a_session(signed: Console) -> None:
    for path in ("/api/overview", "/api/topics", "/api/groups", "/api/topics/visible"):
        code, _, body = await http(signed, path)
        assert code == 401 and "sign in" in json.loads(body)["error"], path
    session = await get_json(signed, "/api/session")
    assert session["authentication"] == "users" and session["user"] is None
    code, _, _ = await http(
        signed, "/api/topics", headers={"Cookie": "rustka_console_user=made-up"}
    )
    assert code == 401


async def get_json_with(console: Console, path: str, cookie: str) -> Any:
    code, _, body = await http(console, path, headers={"Cookie": f"rustka_console_user={cookie}"})
    assert code == 200, body
    return json.loads(body)


async def status_with(console: Console, path: str, cookie: str) -> int:
    code, _, _ = await http(console, path, headers={"Cookie": f"rustka_console_user={cookie}"})
    return code


@pytest_twisted.ensureDeferred
async def test_a_user_sees_only_what_the_acls_allow(signed: Console) -> None:
    _, headers, _ = await sign_in(signed, "alice", PASSWORD)
    cookie, _ = cookie_of(headers)
    topics = await get_json_with(signed, "/api/topics", cookie)
    assert [t["name"] for t in topics["topics"]] == ["visible"]
    groups = await get_json_with(signed, "/api/groups", cookie)
    assert [g["group"] for g in groups["groups"]] == ["mine"]
    assert await status_with(signed, "/api/topics/visible", cookie) == 200
    assert await status_with(signed, "/api/topics/visible/partitions/0/messages", cookie) == 200
    assert await status_with(signed, "/api/topics/hidden", cookie) == 403
    assert await status_with(signed, "/api/topics/hidden/partitions/0/messages", cookie) == 403
    assert await status_with(signed, "/api/topics/hidden/partitions/0/tail", cookie) == 403
    assert await status_with(signed, "/api/groups/theirs", cookie) == 403
    assert await status_with(signed, "/api/groups/mine", cookie) == 200
    # an admin action is authorized as alice too: no CREATE for her
    code, _, body = await http(
        signed,
        "/api/admin/topics",
        "POST",
        {"name": "new-one", "partitions": 1},
        headers={
            "Cookie": f"rustka_console_user={cookie}",
            "X-Console-CSRF": (await get_json_with(signed, "/api/session", cookie))["csrf"],
        },
    )
    assert code == 403 and "User:alice" in json.loads(body)["error"], body
    # signed out, the cookie opens nothing
    code, _, _ = await http(
        signed, "/api/logout", "POST", {}, headers={"Cookie": f"rustka_console_user={cookie}"}
    )
    assert code == 200
    assert await status_with(signed, "/api/topics", cookie) == 401


@pytest.mark.filterwarnings(
    # Twisted's ssl: endpoint hands pyOpenSSL objects to pyOpenSSL (as in tests/test_tls.py)
    "ignore:Passing pyOpenSSL X509 objects is deprecated:DeprecationWarning",
    "ignore:Passing pyOpenSSL PKey objects is deprecated:DeprecationWarning",
)
@pytest_twisted.ensureDeferred
async def test_over_tls_the_cookie_is_secure(data_dir: Path, tmp_path: Path) -> None:
    from twisted.internet import reactor
    from twisted.internet.ssl import Certificate, optionsForClientTLS
    from twisted.web.client import Agent, FileBodyProducer, readBody
    from twisted.web.http_headers import Headers
    from twisted.web.iweb import IPolicyForHTTPS
    from zope.interface import implementer

    from tests.test_tls import make_certificate

    key, cert = make_certificate(tmp_path / "tls")
    trusted = Certificate.loadPEM(cert.read_bytes())

    @implementer(IPolicyForHTTPS)
    class TrustTheTestCertificate:
        def creatorForNetloc(self, hostname: bytes, port: int) -> Any:
            return optionsForClientTLS(hostname.decode(), trustRoot=trusted)

    data_dir.mkdir(parents=True, exist_ok=True)
    store = CredentialStore(data_dir / "credentials")
    store.upsert("alice", "SCRAM-SHA-512", derive_credential(MECHANISMS["SCRAM-SHA-512"], PASSWORD))
    made = await start_console(
        data_dir,
        None,
        console_listen=f"ssl:0:interface=127.0.0.1:privateKey={key}:certKey={cert}",
        console_authentication="users",
    )
    try:
        body = json.dumps({"user": "alice", "password": PASSWORD}).encode()
        response = await within(
            Agent(reactor, contextFactory=TrustTheTestCertificate()).request(
                b"POST",
                f"https://127.0.0.1:{made.port}/api/login".encode(),
                Headers({"Content-Type": ["application/json"]}),
                FileBodyProducer(io.BytesIO(body)),
            )
        )
        answer = json.loads(await within(readBody(response)))
        assert response.code == 200 and answer["user"] == "alice"
        _, attributes = cookie_of(response.headers)
        assert "secure" in attributes and "httponly" in attributes
    finally:
        await made.console.stopService()
        await made.running.stop()
