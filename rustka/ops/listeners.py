"""Listeners: Twisted endpoint strings turned into endpoint services.

Every port the broker opens (the broker's own, /metrics, the manhole) is a
`Listener`, Twisted's `StreamServerEndpointService` plus the two things the
rest of rustka needs from it: the bound port (tests listen on port 0) and a
`listening` Deferred (readiness reporting waits on it). A broker listener is
given ``after``, a Deferred-returning call that gates accepting: it binds at
once but accepts only once the storage is open, so a client that connects
during recovery waits in the listen backlog and is then served, and never
reaches a broker that cannot answer (docs/operations.md, "Start order").

This module imports nothing else from rustka.ops, so the metrics and manhole
modules can build their listeners here without importing the tap.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twisted.application import service
from twisted.application.internet import StreamServerEndpointService
from twisted.internet import defer, endpoints
from twisted.internet.interfaces import IListeningPort
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from rustka.config import ConfigError

SOMAXCONN = Path("/proc/sys/net/core/somaxconn")
"""The kernel's cap on a listen backlog; a larger request is silently cut to it."""

_BACKLOG_TYPES = frozenset({"tcp", "tcp6", "ssl", "unix"})
"""Endpoint types whose string takes ``backlog=``; a systemd socket got its backlog from
the .socket unit (``Backlog=``), not from us."""


def somaxconn(path: Path = SOMAXCONN) -> int | None:
    """The kernel's listen backlog cap, or None where /proc does not say."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def effective_backlog(configured: int, cap: int | None = None) -> int:
    """``configured``, cut to somaxconn: asking for more only hides what the kernel grants."""
    limit = somaxconn() if cap is None else cap
    return configured if limit is None else max(1, min(configured, limit))


def _split(description: str) -> list[str]:
    """The colon-separated fields of an endpoint string, escapes (``\\:``) kept as written."""
    fields: list[str] = []
    current: list[str] = []
    chars = iter(description)
    for char in chars:
        if char == "\\":
            current.append(char)
            current.append(next(chars, ""))
        elif char == ":":
            fields.append("".join(current))
            current = []
        else:
            current.append(char)
    fields.append("".join(current))
    return fields


def with_backlog(description: str, backlog: int) -> str:
    """``description`` with ``backlog=N`` added when it is a TCP, TLS or UNIX listener
    that names none; a backlog the string names itself is left alone.

    Twisted's default backlog is 50, which a reconnect storm overflows at once
    (docs/operations.md, "Listeners and TLS").
    """
    fields = _split(description)
    if fields[0].strip().lower() not in _BACKLOG_TYPES:
        return description
    if any(f.strip().lower().startswith("backlog=") for f in fields[1:]):
        return description
    return f"{description}:backlog={backlog}"


def server_endpoint(reactor: Any, description: str, setting: str) -> Any:
    """A server endpoint for ``description``; ConfigError naming ``setting`` if it is bad."""
    try:
        return endpoints.serverFromString(reactor, description)
    except (KeyError, IndexError) as e:
        if not description.startswith("systemd:"):
            raise ConfigError(f"{setting}: bad endpoint {description!r}: {e!r}") from e
        names = os.environ.get("LISTEN_FDNAMES", "(not set)")
        raise ConfigError(
            f"{setting}: {description!r}: systemd passed no matching socket "
            f"(LISTEN_FDNAMES={names}); start rustka through its .socket unit"
        ) from e
    except (ValueError, TypeError, ImportError) as e:
        raise ConfigError(f"{setting}: bad endpoint {description!r}: {e}") from e


class SecuredFactory(Factory):
    """A listener's factory: the shared one, with what this listener requires written on
    every connection it builds (``protocol.security``), so one broker factory serves
    listeners of different security (docs/security.md)."""

    def __init__(self, inner: Factory, security: Any) -> None:
        self.inner = inner
        self.security = security

    def doStart(self) -> None:
        self.inner.doStart()

    def doStop(self) -> None:
        self.inner.doStop()

    def buildProtocol(self, addr: Any) -> Protocol | None:
        protocol = self.inner.buildProtocol(addr)
        if protocol is not None:
            protocol.security = self.security  # type: ignore[attr-defined]
        return protocol


def require_client_certificates(endpoint: Any, ca_file: str, setting: str) -> None:
    """Make an ``ssl:`` endpoint demand a client certificate signed by a CA in ``ca_file``
    (Kafka's ssl.client.auth=required); the handshake fails without one.

    Twisted's ``ssl:`` strings cannot say this, so the endpoint's own options (key,
    certificate, chain, DH parameters, method) are kept and only verification is added.
    """
    import re

    from twisted.internet import ssl

    options = getattr(endpoint, "_sslContextFactory", None)
    if options is None:
        raise ConfigError(f"{setting}: mtls needs an ssl: endpoint")
    try:
        text = Path(ca_file).read_text()
    except OSError as e:
        raise ConfigError(f"ssl_client_ca_file: cannot read {ca_file}: {e.strerror}") from e
    blocks = re.findall(
        r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", text, flags=re.DOTALL
    )
    try:
        cas = [ssl.Certificate.loadPEM(block.encode()).original for block in blocks]
    except Exception as e:
        raise ConfigError(f"ssl_client_ca_file: {ca_file}: not a PEM certificate: {e}") from e
    if not cas:
        raise ConfigError(f"ssl_client_ca_file: {ca_file} holds no PEM certificate")
    endpoint._sslContextFactory = ssl.CertificateOptions(
        privateKey=options.privateKey,
        certificate=options.certificate,
        extraCertChain=options.extraCertChain or None,
        dhParameters=getattr(options, "dhParameters", None),
        verify=True,
        caCerts=cas,
        requireCertificate=True,
    )


class Listener(StreamServerEndpointService):
    """Twisted's endpoint service, keeping the bound port and a `listening` Deferred.

    Without ``after`` it binds in ``privilegedStartService`` like its base. With
    ``after`` it binds in ``startService`` and starts accepting once ``after()``
    fires; if that fails, the port is closed and ``listening`` fails with the same
    cause. ``on_failure``
    hears every failure to listen (a port in use, storage that would not open),
    so the tap can end the process instead of leaving it up without a listener.
    """

    log = Logger()

    def __init__(
        self,
        description: str,
        setting: str,
        factory: Any,
        reactor: Any,
        *,
        backlog: int | None = None,
        after: Callable[[], defer.Deferred[Any]] | None = None,
        on_failure: Callable[[Failure], None] | None = None,
        client_ca_file: str | None = None,
    ) -> None:
        self.description = description if backlog is None else with_backlog(description, backlog)
        self.setting = setting
        endpoint = server_endpoint(reactor, self.description, setting)
        if client_ca_file is not None:
            require_client_certificates(endpoint, client_ca_file, setting)
        super().__init__(endpoint, factory)
        self.port: IListeningPort | None = None
        self.listening: defer.Deferred[IListeningPort] = defer.Deferred()
        self._after = after
        self._on_failure = on_failure

    def privilegedStartService(self) -> None:
        service.Service.privilegedStartService(self)
        if self._after is None:
            self._listen()

    def startService(self) -> None:
        service.Service.startService(self)
        if self._waitingForPort is None:
            self._listen()

    def _listen(self) -> None:
        if self._after is None:
            d = self.endpoint.listen(self.factory)
        else:
            # Bind now but accept nothing yet: clients that connect during a long
            # recovery complete their handshake in the kernel's backlog and wait there,
            # instead of being refused, until the storage is open.
            d = self.endpoint.listen(self.factory).addCallback(self._hold_until_after)
        self._waitingForPort = d
        d.addCallbacks(self._bound, self._failed)

    def _hold_until_after(self, port: IListeningPort) -> defer.Deferred[IListeningPort]:
        pause = getattr(port, "stopReading", None)
        if pause is not None:
            pause()
        # our own Deferred, so stopping early cancels this wait, not the caller's
        gate: defer.Deferred[Any] = defer.Deferred()

        def relay(result: Any) -> None:
            if not gate.called:
                if isinstance(result, Failure):
                    gate.errback(result)
                else:
                    gate.callback(result)

        assert self._after is not None
        self._after().addBoth(relay)

        def accept(_: object) -> IListeningPort:
            resume = getattr(port, "startReading", None)
            if resume is not None:
                resume()
            return port

        def close(failure: Failure) -> Failure:
            port.stopListening()
            return failure

        return gate.addCallbacks(accept, close)

    def _bound(self, port: IListeningPort) -> IListeningPort:
        self.port = port
        self.log.info("listening on {address}", address=str(port.getHost()))
        self.listening.callback(port)
        return port

    def _failed(self, failure: Failure) -> None:
        if failure.check(defer.CancelledError):
            # stopped before it could listen: not a fault
            self.listening.errback(failure)
            return None
        self.listening.errback(failure)
        if self._on_failure is not None:
            self._on_failure(failure)
        else:
            self.log.failure(
                "cannot listen on {description}", failure, description=self.description
            )
        return None

    def stopService(self) -> defer.Deferred[None]:
        if self._waitingForPort is None:
            service.Service.stopService(self)
            return defer.succeed(None)
        self.port = None
        result: defer.Deferred[None] = super().stopService()
        return result
