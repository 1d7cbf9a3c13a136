"""`twistd rustka` and `rustka serve`: one set of options and one service tree.

The plugin file in `twisted/plugins/` only names this module, so twistd stays
cheap to start and the reactor is never imported early. `rustka serve` parses
its arguments with the same `Options` and runs the same `makeService` under a
reactor (rustka.ops.cli), so each flag is defined once.

Start order (docs/operations.md, "Run it under systemd"): the metrics,
console and manhole listeners bind first, so they answer during a long recovery; the
broker service opens the storage; the broker's own listeners bind only once
the storage is open (a client that connects earlier waits in the kernel's
listen backlog); READY=1 goes to systemd once every broker listener is
listening. If the storage cannot be opened, or a broker listener cannot bind,
the process logs why and ends with status 1 with nothing left listening.
"""

from __future__ import annotations

import atexit
import contextlib
import getopt
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from twisted.application import service
from twisted.internet import defer
from twisted.logger import Logger
from twisted.python import usage
from twisted.python.failure import Failure

from rustka import fast_paths
from rustka.broker.core import Broker
from rustka.broker.service import BrokerService
from rustka.config import Config, ConfigError
from rustka.kafka.server import KafkaFactory
from rustka.native.server import BrokerFactory
from rustka.ops import lean_poll
from rustka.ops.listeners import Listener, SecuredFactory, effective_backlog
from rustka.ops.protocol_switch import ProtocolSwitchFactory
from rustka.security.audit import audit, authenticated
from rustka.security.session import ListenerSecurity, authenticator_from_config

_log = Logger(namespace="rustka.ops.tap")


class _ShutdownConnections(service.Service):
    """Placed after the listeners so it stops first: hang up clients before draining."""

    def __init__(self, factory: BrokerFactory) -> None:
        self.factory = factory

    def stopService(self) -> defer.Deferred[None]:
        super().stopService()
        return self.factory.close_all(self.factory.config.shutdown_timeout_ms / 1000)


class _StopGroups(service.Service):
    """Answers every group request still waiting (JoinGroup, SyncGroup) before the drain."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def stopService(self) -> None:
        super().stopService()
        self.broker.groups.close()


class BrokerTree(service.MultiService):
    """The whole broker: storage, listeners, metrics, manhole and readiness.

    ``listeners`` are the broker's own (the ``listen`` setting); ``failure`` is
    set when the start failed for good (storage would not open, a broker
    listener could not bind). With ``stop_reactor_on_failure`` such a failure
    also stops the reactor, which is what a daemon wants; tests leave it off
    and see the failure through ``listeners[i].listening``.
    """

    def __init__(
        self,
        config: Config,
        reactor: Any,
        stop_reactor_on_failure: bool = False,
    ) -> None:
        super().__init__()
        self.config = config
        self._reactor = reactor
        self._stop_reactor_on_failure = stop_reactor_on_failure
        self.broker_service = BrokerService(config, reactor)
        self.broker = self.broker_service.broker
        # One credential store, one set of counters, for both protocols' connections.
        self.authenticator = authenticator_from_config(config, audit, authenticated)
        self.factory = BrokerFactory(self.broker, config, reactor, self.authenticator)
        self.kafka_factory: KafkaFactory | None = None
        if config.kafka_enabled:
            self.kafka_factory = KafkaFactory(
                self.broker, config, reactor, authenticator=self.authenticator
            )
        # What `listen` endpoints serve: both protocols, told apart by the first frame;
        # with Kafka off, the switch closes a Kafka client's connection (docs/kafka.md).
        self.serving_factory = ProtocolSwitchFactory(self.factory, self.kafka_factory)
        self.kafka_listeners: list[Listener] = []
        self.listeners: list[Listener] = []
        self.metrics: Listener | None = None
        self.manhole: Listener | None = None
        self.console: Any = None
        self.schema_registry: Any = None
        self.failure: Failure | None = None
        self._storage: defer.Deferred[None] | None = None
        self._storage_waiters: list[defer.Deferred[None]] = []
        self._storage_result: Any = None

    def when_storage_open(self) -> defer.Deferred[None]:
        """A new Deferred per caller: fires once the storage is open, fails with its cause."""
        d: defer.Deferred[None] = defer.Deferred()
        if self._storage is None:
            self._storage = self.broker_service.whenReady()
            self._storage.addCallbacks(self._storage_opened, self._storage_failed)
        if self._storage_result is None:
            self._storage_waiters.append(d)
        elif isinstance(self._storage_result, Failure):
            d.errback(self._storage_result)
        else:
            d.callback(None)
        return d

    def _storage_opened(self, _: object) -> None:
        self._storage_result = True
        waiters, self._storage_waiters = self._storage_waiters, []
        for d in waiters:
            d.callback(None)

    def _storage_failed(self, failure: Failure) -> None:
        self._storage_result = failure
        self.fail(f"cannot open the storage in {self.config.data_dir}", failure)
        waiters, self._storage_waiters = self._storage_waiters, []
        for d in waiters:
            d.errback(failure)

    def listener_failed(self, description: str, failure: Failure) -> None:
        """A broker listener did not bind; a storage failure was reported already."""
        storage = self._storage_result
        if isinstance(storage, Failure) and failure.value is storage.value:
            return
        self.fail(f"cannot listen on {description}", failure)

    def fail(self, what: str, failure: Failure) -> None:
        """Say once why the broker cannot serve, then (for a daemon) stop the reactor."""
        if self.failure is not None:
            return
        self.failure = failure
        error = failure.value
        reason = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        _log.critical("{what}: {reason}; stopping", what=what, reason=reason)
        if self._stop_reactor_on_failure:
            if self._reactor.running:
                self._reactor.stop()
            else:
                self._reactor.callWhenRunning(self._reactor.stop)


def build_service(
    config: Config, reactor: Any = None, *, stop_reactor_on_failure: bool = False
) -> BrokerTree:
    """The whole broker as a service tree, for twistd, `rustka serve` and tests."""
    if reactor is None:
        from twisted.internet import reactor as default_reactor

        reactor = default_reactor
    fast_paths.set_enabled(config.fast_paths)
    # No logging context per I/O event on the epoll reactor (rustka.ops.lean_poll).
    lean_poll.install(reactor)
    top = BrokerTree(config, reactor, stop_reactor_on_failure)
    backlog = effective_backlog(config.backlog)
    top.broker_service.setServiceParent(top)
    # `listen` endpoints speak both protocols; `kafka_listen` ones only Kafka's.
    endpoints: list[tuple[str, list[str], Any, list[Listener]]] = [
        ("listen", config.listen, top.serving_factory, top.listeners)
    ]
    if top.kafka_factory is not None:
        endpoints.append(
            ("kafka_listen", config.kafka_listen, top.kafka_factory, top.kafka_listeners)
        )
    for setting, descriptions, factory, listeners in endpoints:
        modes = config.listener_security(setting)
        for description, mode in zip(descriptions, modes, strict=True):
            listener = Listener(
                description,
                setting,
                factory if mode == "none" else SecuredFactory(factory, ListenerSecurity(mode)),
                reactor,
                backlog=backlog,
                after=top.when_storage_open,
                on_failure=lambda failure, d=description: top.listener_failed(d, failure),
                client_ca_file=config.ssl_client_ca_file if mode == "mtls" else None,
            )
            listener.setServiceParent(top)
            listeners.append(listener)
    if top.kafka_factory is not None:
        _ShutdownConnections(top.kafka_factory).setServiceParent(top)
    _ShutdownConnections(top.factory).setServiceParent(top)
    _StopGroups(top.broker).setServiceParent(top)
    if config.metrics:
        from rustka.ops.metrics import metrics_service

        top.metrics = metrics_service(
            config.metrics,
            top.broker,
            top.factory,
            top.broker_service.io,
            reactor,
            backlog,
            kafka_factory=top.kafka_factory,
        )
        top.metrics.setServiceParent(top)
    if config.schema_registry_listen:
        top.schema_registry = schema_registry_service(top, config, reactor, backlog)
    if config.console_listen:
        from rustka.ops.client_metrics import clients_json
        from rustka.ops.console import console_service

        broker = top.broker
        telemetry = broker.client_telemetry
        top.console = console_service(
            config,
            broker,
            top.factory,
            reactor,
            backlog,
            kafka_factory=top.kafka_factory,
            # Values framed with a registered schema id are shown decoded (docs/console.md).
            decode_value=None if top.schema_registry is None else top.schema_registry.decode_value,
            client_metrics=None
            if telemetry is None
            else lambda: clients_json(telemetry, int(reactor.seconds() * 1000)),
        )
        top.console.setServiceParent(top)
    if config.manhole:
        from rustka.ops.manhole import admin_namespace, manhole_service

        assert config.manhole_authorized_keys is not None
        host_key = config.manhole_host_key or str(Path(config.data_dir) / "manhole_host_key")
        try:
            Path(host_key).parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(
                f"manhole_host_key: cannot create the directory of {host_key}: {e.strerror}"
            ) from e
        top.manhole = manhole_service(
            config.manhole,
            Path(config.manhole_authorized_keys),
            Path(host_key),
            admin_namespace(
                top.broker, top.factory, top.broker_service.io, kafka_factory=top.kafka_factory
            ),
            reactor,
            backlog,
        )
        top.manhole.setServiceParent(top)
    from rustka.ops.notify import NotifyService

    wait_for = [listener.listening for listener in top.listeners + top.kafka_listeners]
    joined = _join_cluster(top, config)
    if joined is not None:
        wait_for.append(joined)
    NotifyService(wait_for=wait_for).setServiceParent(top)
    return top


def schema_registry_service(
    top: BrokerTree, config: Config, reactor: Any, backlog: int | None = None
) -> Any:
    """The schema registry (docs/schema-registry.md) on ``schema_registry_listen``; it
    replays ``_schemas`` once the storage is open and answers 503 until then."""
    from rustka.schema_registry.service import SchemaRegistryService

    registry = SchemaRegistryService(config, top.broker, reactor, top.authenticator.store)
    assert config.schema_registry_listen is not None
    registry.listener = Listener(
        config.schema_registry_listen,
        "schema_registry_listen",
        registry.site,
        reactor,
        backlog=backlog,
    )
    registry.setServiceParent(top)
    registry.listener.setServiceParent(top)
    return registry


def _join_cluster(top: BrokerTree, config: Config) -> defer.Deferred[Any] | None:
    """With a catalog, the broker joins its cluster once the first Kafka-speaking listener
    is bound, under the address clients are to use (``advertised_host``/``_port``, else
    the bound one); an id another live broker holds stops the start (docs/diskless.md)."""
    if not config.diskless_configured or top.kafka_factory is None:
        return None
    listener = (top.kafka_listeners or top.listeners or [None])[0]
    if listener is None:
        return None

    def bound(port: Any) -> defer.Deferred[None]:
        if top.broker.cluster is not None:
            top.broker.cluster.share_credentials(top.authenticator.store)
        address = port.getHost()
        host = config.advertised_host or getattr(address, "host", "") or "127.0.0.1"
        if host in ("0.0.0.0", "::"):
            import socket

            host = socket.getfqdn()
        number = config.advertised_port or getattr(address, "port", 9092)
        return top.broker.join_cluster(str(host), int(number))

    def failed(failure: Failure) -> Failure:
        top.fail("cannot join the cluster", failure)
        return failure

    joined: defer.Deferred[Any] = defer.Deferred()

    def relay(port: Any) -> Any:
        # The listener's own Deferred keeps its port for everyone else who waits on it.
        defer.maybeDeferred(bound, port).addErrback(failed).chainDeferred(joined)
        return port

    def not_bound(failure: Failure) -> Failure:
        joined.errback(failure)
        return failure

    listener.listening.addCallbacks(relay, not_bound)
    return joined


def _number(flag: str) -> Any:
    """A coercer whose error names the flag (Twisted's own says only "invalid literal")."""

    def coerce(text: str) -> int:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"--{flag}: expected a whole number, got {text!r}") from None

    coerce.coerceDoc = ""  # type: ignore[attr-defined]
    return coerce


EXAMPLES = """\
examples:
  rustka serve                                start a broker on 127.0.0.1:9092, data in ./data
  rustka serve 1000000 50000000               1 MB segments, keep 50 MB per partition
  rustka serve --data-dir /tmp/rk --port 19092
  rustka serve --config etc/rustka.toml
  twistd --nodaemon --pidfile= rustka --config /etc/rustka/rustka.toml
"""


class Options(usage.Options):
    """Options of `twistd rustka` and `rustka serve`; each one overrides the config file.

    Two optional positional arguments, MAX_SEGMENT_BYTES and RETENTION_BYTES,
    are the seed's `rustka serve` form. Options and positionals may be mixed in
    any order, as with every other `rustka` command.
    """

    synopsis = "[options] [MAX_SEGMENT_BYTES [RETENTION_BYTES]]"
    longdesc = (
        "Run the rustka broker. Settings come from the embedded defaults, then the "
        "file named by --config (see etc/rustka.toml), then these flags."
    )
    optParameters = [
        ["config", "c", None, "TOML config file (default: none, embedded defaults)"],
        ["data-dir", "d", None, "Directory for topics and offsets (default: ./data)"],
        ["port", "p", None, "Shorthand for --listen tcp:PORT:interface=127.0.0.1", _number("port")],
        ["flush", None, None, "Durability: always | interval | never (default: always)"],
        ["max-segment-bytes", None, None, "Roll segments at this size (default 1GiB)"],
        ["retention-bytes", None, None, "Keep at most this much log per partition"],
        [
            "backlog",
            None,
            None,
            "Listen backlog of TCP listeners (default 1024)",
            _number("backlog"),
        ],
        ["metrics", None, None, "Serve Prometheus /metrics on this endpoint (default: off)"],
        ["manhole", None, None, "SSH admin shell endpoint, e.g. tcp:9022:interface=127.0.0.1"],
        ["manhole-authorized-keys", None, None, "OpenSSH authorized_keys for the manhole"],
        ["manhole-host-key", None, None, "Manhole host key (default: DATA_DIR/manhole_host_key)"],
    ]

    def __init__(self) -> None:
        super().__init__()
        self["listen"] = []
        self.config = Config()

    def opt_listen(self, description: str) -> None:
        """Listen on a Twisted endpoint (repeatable), default tcp:9092:interface=127.0.0.1"""
        self["listen"].append(description)

    def parseOptions(self, options: Sequence[str] | None = None) -> None:
        """Options first, wherever they stand, then the positionals (GNU style)."""
        argv = list(sys.argv[1:] if options is None else options)
        if len(argv) > 1 and argv[-2] == "--_shell-completion":
            super().parseOptions(argv)
            return
        try:
            pairs, positionals = getopt.gnu_getopt(argv, self.shortOpt, self.longOpt)
        except getopt.GetoptError as e:
            raise usage.UsageError(str(e)) from e
        ordered: list[str] = []
        for flag, value in pairs:
            if flag.startswith("--"):
                ordered.append(f"{flag}={value}" if f"{flag[2:]}=" in self.longOpt else flag)
            else:
                ordered.append(flag + value if f"{flag[1]}:" in self.shortOpt else flag)
        super().parseOptions([*ordered, "--", *positionals])

    def parseArgs(
        self, max_segment_bytes: str | None = None, retention_bytes: str | None = None
    ) -> None:
        if max_segment_bytes is not None:
            self["max-segment-bytes"] = max_segment_bytes
        if retention_bytes is not None:
            self["retention-bytes"] = retention_bytes

    def getUsage(self, width: int | None = None) -> str:
        return super().getUsage(width) + "\n" + EXAMPLES

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
    if opts.get("backlog") is not None:
        overrides["backlog"] = opts["backlog"]
    for flag in ("metrics", "manhole", "manhole-authorized-keys", "manhole-host-key"):
        if opts.get(flag):
            overrides[flag.replace("-", "_")] = opts[flag]
    return config.updated(overrides) if overrides else config


def _exit_status_on_failure(top: BrokerTree) -> None:
    """At interpreter exit: status 1 if the broker never served (twistd itself exits 0)."""
    if top.failure is not None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(1)


def makeService(options: Options) -> service.IService:
    """twistd's entry point (and `rustka serve`'s): a tree that ends the process on failure."""
    try:
        top = build_service(options.config, stop_reactor_on_failure=True)
    except ConfigError as e:
        raise SystemExit(f"twistd rustka: {e}") from None
    atexit.register(_exit_status_on_failure, top)
    return top
