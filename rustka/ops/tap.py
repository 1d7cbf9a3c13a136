"""`twistd rustka`: command-line options and the service tree.

The plugin file in `twisted/plugins/` only names this module, so twistd stays
cheap to start and the reactor is never imported early. `rustka serve` builds
the very same tree through `build_service`.

Service order matters: the broker service (thread pool + storage) starts
first, then the listeners; stopping goes the other way, and the broker service
itself drains its lanes before the pool stops.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from twisted.application import service
from twisted.internet import defer, endpoints
from twisted.internet.interfaces import IListeningPort
from twisted.logger import Logger
from twisted.python import usage

from rustka.broker.core import BrokerService
from rustka.config import Config, ConfigError
from rustka.native.server import BrokerFactory


class ListenerService(service.Service):
    """Listen on one endpoint string; keeps the bound port public (tests use port 0)."""

    log = Logger()

    def __init__(self, description: str, setting: str, factory: Any, reactor: Any) -> None:
        self.description = description
        self.factory = factory
        self._reactor = reactor
        try:
            self.endpoint = endpoints.serverFromString(reactor, description)
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
        self.port: IListeningPort | None = None
        self.listening: defer.Deferred[IListeningPort] = defer.Deferred()

    def privilegedStartService(self) -> None:
        super().privilegedStartService()
        self._listen()

    def startService(self) -> None:
        super().startService()
        if self.port is None and not self.listening.called:
            self._listen()

    def _listen(self) -> None:
        if getattr(self, "_listen_started", False):
            return
        self._listen_started = True
        d = self.endpoint.listen(self.factory)

        def bound(port: IListeningPort) -> IListeningPort:
            self.port = port
            self.log.info("listening on {address}", address=str(port.getHost()))
            self.listening.callback(port)
            return port

        def failed(failure: Any) -> None:
            self.log.failure(
                "cannot listen on {description}", failure, description=self.description
            )
            self.listening.errback(failure)
            self._stop_reactor()

        d.addCallbacks(bound, failed)

    def _stop_reactor(self) -> None:
        if self._reactor.running:
            self._reactor.stop()
        else:
            self._reactor.callWhenRunning(self._reactor.stop)

    def stopService(self) -> defer.Deferred[None] | None:
        super().stopService()
        if self.port is not None:
            port, self.port = self.port, None
            return defer.maybeDeferred(port.stopListening)
        return None


class _ShutdownConnections(service.Service):
    """Placed after the listeners so it stops first: hang up clients before draining."""

    def __init__(self, factory: BrokerFactory) -> None:
        self.factory = factory

    def stopService(self) -> defer.Deferred[None]:
        super().stopService()
        return self.factory.close_all(self.factory.config.shutdown_timeout_ms / 1000)


def build_service(config: Config, reactor: Any = None) -> service.MultiService:
    """The whole broker as a service tree, for twistd, `rustka serve` and tests."""
    if reactor is None:
        from twisted.internet import reactor as default_reactor

        reactor = default_reactor
    top = service.MultiService()
    broker_service = BrokerService(config, reactor)
    broker_service.setServiceParent(top)
    factory = BrokerFactory(broker_service.broker, config, reactor)
    top.broker = broker_service.broker  # type: ignore[attr-defined]
    top.factory = factory  # type: ignore[attr-defined]
    top.listeners = []  # type: ignore[attr-defined]
    for description in config.listen:
        listener = ListenerService(description, "listen", factory, reactor)
        listener.setServiceParent(top)
        top.listeners.append(listener)  # type: ignore[attr-defined]
    _ShutdownConnections(factory).setServiceParent(top)
    if config.metrics:
        from rustka.ops.metrics import metrics_service

        metrics = metrics_service(config.metrics, top.broker, factory, broker_service.io, reactor)
        metrics.setServiceParent(top)
        top.metrics = metrics  # type: ignore[attr-defined]
    if config.manhole:
        from rustka.ops.manhole import admin_namespace, manhole_service

        assert config.manhole_authorized_keys is not None
        host_key = config.manhole_host_key or str(Path(config.data_dir) / "manhole_host_key")
        Path(host_key).parent.mkdir(parents=True, exist_ok=True)
        manhole = manhole_service(
            config.manhole,
            Path(config.manhole_authorized_keys),
            Path(host_key),
            admin_namespace(top.broker, factory, broker_service.io),
            reactor,
        )
        manhole.setServiceParent(top)
        top.manhole = manhole  # type: ignore[attr-defined]
    from rustka.ops.notify import NotifyService

    NotifyService(wait_for=[listener.listening for listener in top.listeners]).setServiceParent(top)
    return top


class Options(usage.Options):
    """Options of `twistd rustka`; each one overrides the config file."""

    synopsis = "[options]"
    longdesc = (
        "Run the rustka broker. Settings come from the embedded defaults, then the "
        "file named by --config (see etc/rustka.toml), then these flags."
    )
    optParameters = [
        ["config", "c", None, "TOML config file (default: none, embedded defaults)"],
        ["data-dir", "d", None, "Directory for topics and offsets (default: ./data)"],
        ["port", "p", None, "Shorthand for --listen tcp:PORT:interface=127.0.0.1", int],
        ["flush", None, None, "Durability: always | interval | never (default: always)"],
        ["max-segment-bytes", None, None, "Roll segments at this size (default 1GiB)"],
        ["retention-bytes", None, None, "Keep at most this much log per partition"],
        ["metrics", None, None, "Serve Prometheus /metrics on this endpoint (default: off)"],
        ["manhole", None, None, "SSH admin shell endpoint, e.g. tcp:9022:interface=127.0.0.1"],
        ["manhole-authorized-keys", None, None, "OpenSSH authorized_keys for the manhole"],
        ["manhole-host-key", None, None, "Manhole host key (default: DATA_DIR/manhole_host_key)"],
    ]

    def __init__(self) -> None:
        super().__init__()
        self["listen"] = []

    def opt_listen(self, description: str) -> None:
        """Listen on a Twisted endpoint (repeatable), default tcp:9092:interface=127.0.0.1"""
        self["listen"].append(description)

    def postOptions(self) -> None:
        try:
            self.config = config_from_options(self)
        except ConfigError as e:
            raise usage.UsageError(str(e)) from e


def config_from_options(opts: Any) -> Config:
    """Defaults, then the config file, then every flag that was given."""
    config = Config.from_file(opts["config"]) if opts.get("config") else Config()
    overrides: dict[str, Any] = {}
    if opts.get("data-dir"):
        overrides["data_dir"] = opts["data-dir"]
    listen = list(opts.get("listen") or [])
    if opts.get("port") is not None:
        listen.append(f"tcp:{opts['port']}:interface=127.0.0.1")
    if listen:
        overrides["listen"] = listen
    if opts.get("flush"):
        overrides["flush"] = opts["flush"]
    if opts.get("max-segment-bytes") is not None:
        overrides["segment_bytes"] = opts["max-segment-bytes"]
    if opts.get("retention-bytes") is not None:
        overrides["retention_bytes"] = opts["retention-bytes"]
    for flag in ("metrics", "manhole", "manhole-authorized-keys", "manhole-host-key"):
        if opts.get(flag):
            overrides[flag.replace("-", "_")] = opts[flag]
    return config.updated(overrides) if overrides else config


def makeService(options: Options) -> service.IService:
    """twistd's entry point."""
    try:
        return build_service(options.config)
    except ConfigError as e:
        raise SystemExit(f"twistd rustka: {e}") from None
