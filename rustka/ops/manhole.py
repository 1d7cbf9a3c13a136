"""An SSH admin shell (manhole) into the running broker, keys only.

Anyone who gets a prompt here can run arbitrary Python inside the broker, so
the shell is as strict as OpenSSH about its credentials: public keys from an
authorized_keys file the operator names, no passwords anywhere, and a host key
that must be private to the broker's user. Any user name is accepted when the
key is listed: the key is the credential, the name only a label in the log.

The stock ``TerminalSession`` cannot be scripted (``ssh ... <<EOF`` gets
nothing evaluated and exits 255), so a fixed subclass is used; see
`_AdminSession`. Helpers in `admin_namespace` print tables, because a repr of
a dict of partition logs is no way to read lag at 3 a.m.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from twisted.conch import manhole, manhole_ssh
from twisted.conch.checkers import IAuthorizedKeysDB, SSHPublicKeyChecker
from twisted.conch.error import ConchError
from twisted.conch.insults import insults
from twisted.conch.interfaces import IConchUser
from twisted.conch.ssh import keys
from twisted.conch.ssh.transport import DISCONNECT_BY_APPLICATION, SSHServerTransport
from twisted.cred.portal import Portal
from twisted.internet import defer
from twisted.internet.error import ProcessDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from rustka.config import ConfigError
from rustka.errors import UnknownTopic
from rustka.names import validate_topic
from rustka.native import codec as p
from rustka.ops.assignments import consumer_assignment, format_assignment
from rustka.ops.listeners import Listener

MAX_AUTHORIZED_KEYS_BYTES = 1024 * 1024
"""An authorized_keys file larger than this is a mistake (or an attack), not a key list."""

_log = Logger(namespace="rustka.ops.manhole")


# -- credentials --------------------------------------------------------------------


def load_authorized_keys(path: Path) -> list[keys.Key]:
    """Public keys from an OpenSSH authorized_keys file, refusing anything we cannot honour.

    Lines with options (``from="..." ssh-ed25519 ...``) are refused rather than
    read without their restrictions, which would silently widen access.
    """
    try:
        st = path.stat()
    except OSError as e:
        raise ConfigError(f"manhole_authorized_keys: cannot read {path}: {e.strerror}") from e
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(
            f"manhole_authorized_keys: {path} is writable by group or others "
            f"(mode {stat.S_IMODE(st.st_mode):04o}); anyone who can edit it gets a "
            f"Python shell inside the broker. Fix it with: chmod go-w {path}"
        )
    if st.st_size > MAX_AUTHORIZED_KEYS_BYTES:
        raise ConfigError(
            f"manhole_authorized_keys: {path} is {st.st_size} bytes, more than the "
            f"{MAX_AUTHORIZED_KEYS_BYTES} bytes an authorized_keys file may have"
        )
    try:
        text = path.read_bytes()[:MAX_AUTHORIZED_KEYS_BYTES]
    except OSError as e:
        raise ConfigError(f"manhole_authorized_keys: cannot read {path}: {e.strerror}") from e
    found: list[keys.Key] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(b"#"):
            continue
        where = f"manhole_authorized_keys: {path} line {number}"
        if not line.startswith((b"ssh-", b"ecdsa-")):
            raise ConfigError(
                f"{where}: expected 'TYPE BASE64 [comment]'; key options are not supported"
            )
        try:
            key = keys.Key.fromString(line)
        except (keys.BadKeyError, ValueError, IndexError) as e:
            raise ConfigError(f"{where}: not a usable public key: {e}") from e
        if not key.isPublic():
            raise ConfigError(f"{where}: a private key does not belong in authorized_keys")
        found.append(key)
    if not found:
        raise ConfigError(
            f"manhole_authorized_keys: {path} lists no keys, so nobody could log in; "
            "add an OpenSSH public key line or turn the manhole off"
        )
    return found


@implementer(IAuthorizedKeysDB)
class _SameKeysForEveryUser:
    """The user name is not a credential here: every name maps to the configured keys."""

    def __init__(self, authorized: Sequence[keys.Key]) -> None:
        self._keys = tuple(authorized)

    def getAuthorizedKeys(self, username: bytes) -> Iterable[keys.Key]:
        return iter(self._keys)


class _AuditedKeyChecker(SSHPublicKeyChecker):
    """Logs who got in (name and key fingerprint): a manhole login runs arbitrary code."""

    def requestAvatarId(self, credentials: Any) -> defer.Deferred[bytes]:
        d: defer.Deferred[bytes] = super().requestAvatarId(credentials)

        def granted(avatar_id: bytes) -> bytes:
            if credentials.signature is not None:
                _log.info(
                    "manhole login as {user!r} with key {fingerprint}",
                    user=avatar_id.decode("utf-8", "replace"),
                    fingerprint=keys.Key.fromString(credentials.blob).fingerprint(
                        keys.FingerprintFormats.SHA256_BASE64
                    ),
                )
            return avatar_id

        return d.addCallback(granted)


def load_or_create_host_key(path: Path) -> keys.Key:
    """The server's Ed25519 host key, created on first use and private to this user.

    Created with O_EXCL and mode 0600 so it is never readable by others, not even
    for an instant; an existing key readable by group or others is refused,
    because it would let them impersonate this broker to its operators.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    except OSError as e:
        raise ConfigError(f"manhole_host_key: cannot create {path}: {e.strerror}") from e
    else:
        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(pem)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            path.unlink(missing_ok=True)
            raise ConfigError(f"manhole_host_key: cannot write {path}: {e.strerror}") from e
        _log.info("generated a new manhole host key in {path}", path=str(path))
    try:
        st = path.stat()
    except OSError as e:
        raise ConfigError(f"manhole_host_key: cannot read {path}: {e.strerror}") from e
    if st.st_mode & 0o077:
        raise ConfigError(
            f"manhole_host_key: {path} is accessible by group or others "
            f"(mode {stat.S_IMODE(st.st_mode):04o}); it must be private. "
            f"Fix it with: chmod 600 {path}"
        )
    try:
        key = keys.Key.fromFile(str(path))
    except (keys.BadKeyError, keys.EncryptedKeyError, ValueError) as e:
        raise ConfigError(f"manhole_host_key: {path} is not a usable private key: {e}") from e
    except OSError as e:
        raise ConfigError(f"manhole_host_key: cannot read {path}: {e.strerror}") from e
    if key.isPublic():
        raise ConfigError(f"manhole_host_key: {path} holds a public key; a private key is needed")
    return key


# -- the SSH session ----------------------------------------------------------------


class _AdminSession(manhole_ssh.TerminalSession):
    """`TerminalSession` with the gaps that break scripted and resized sessions filled.

    - ``width``/``height`` defaults, so ``ssh -T`` (no pty request) works;
    - ``windowChanged`` resizes the REPL instead of logging a traceback;
    - ``eofReceived`` ends the shell with exit status 0, so ``ssh ... <<EOF``
      evaluates its input and exits cleanly instead of dropping the connection;
    - ``execCommand`` says how to script the shell instead of a bare refusal.
    """

    width = 80
    height = 24
    _proto: Any = None
    _transport: Any = None

    def openShell(self, proto: Any) -> None:
        self._proto = proto
        self._transport = self.transportFactory(
            proto,
            self.chainedProtocolFactory(),
            IConchUser(self.original),
            self.width,
            self.height,
        )

    def execCommand(self, proto: Any, cmd: bytes) -> None:
        raise ConchError(
            "the manhole runs no commands; send Python on stdin instead: ssh -T HOST <<EOF"
        )

    def windowChanged(self, newWindowSize: Sequence[int]) -> None:
        rows, cols = newWindowSize[:2]
        self.height, self.width = rows, cols
        if self._transport is not None:
            self._transport.chainedProtocol.terminalProtocol.terminalSize(cols, rows)

    def eofReceived(self) -> None:
        if self._proto is not None:
            self._proto.processEnded(Failure(ProcessDone(0)))


class _ServerTransport(SSHServerTransport):
    """Logs an ordinary client hang-up at info: OpenSSH says "code 11" on every exit."""

    def receiveError(self, reasonCode: int, description: bytes) -> None:
        if reasonCode == DISCONNECT_BY_APPLICATION:
            _log.info("manhole client disconnected")
            return
        super().receiveError(reasonCode, description)


def _factory(
    authorized: Sequence[keys.Key], host_key: keys.Key, namespace: dict[str, Any]
) -> manhole_ssh.ConchFactory:
    def shell() -> insults.ServerProtocol:
        # a copy per session: one operator's variables never clobber another's
        return insults.ServerProtocol(manhole.ColoredManhole, dict(namespace))

    realm = manhole_ssh.TerminalRealm()
    realm.sessionFactory = _AdminSession
    realm.chainedProtocolFactory = shell
    checker = _AuditedKeyChecker(_SameKeysForEveryUser(authorized))
    factory = manhole_ssh.ConchFactory(Portal(realm, [checker]))
    factory.protocol = _ServerTransport
    # per-instance dicts: the class-level ones are shared by every ConchFactory
    factory.publicKeys = {host_key.sshType(): host_key.public()}
    factory.privateKeys = {host_key.sshType(): host_key}
    return factory


def manhole_service(
    endpoint: str,
    authorized_keys: Path,
    host_key: Path,
    namespace: dict[str, Any],
    reactor: Any,
    backlog: int | None = None,
) -> Listener:
    """The manhole as a listener service; keys are checked now, so a bad setup fails fast."""
    authorized = load_authorized_keys(Path(authorized_keys))
    key = load_or_create_host_key(Path(host_key))
    _log.info(
        "manhole host key {fingerprint}, {count} authorized key(s)",
        fingerprint=key.fingerprint(keys.FingerprintFormats.SHA256_BASE64),
        count=len(authorized),
    )
    factory = _factory(authorized, key, namespace)
    return Listener(endpoint, "manhole", factory, reactor, backlog=backlog)


# -- admin helpers ------------------------------------------------------------------


def _emit(text: str) -> None:
    """Write to the *current* sys.stdout, which the manhole redirects to the session."""
    sys.stdout.write(text + "\n")


def format_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A plain-text table; numbers are right-aligned so digits line up."""
    cells = [[str(h) for h in headers]]
    numeric = [True] * len(headers)
    for row in rows:
        cells.append([str(v) for v in row])
        for i, v in enumerate(row):
            if not isinstance(v, int | float):
                numeric[i] = False
    if len(cells) == 1:
        return "  ".join(cells[0]) + "\n(none)"
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        parts = [
            v.rjust(w) if numeric[i] and n > 0 else v.ljust(w)
            for i, (v, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _address(address: Any) -> str:
    """``127.0.0.1:54321`` rather than ``IPv4Address(type='TCP', host=..., port=...)``."""
    host, port = getattr(address, "host", None), getattr(address, "port", None)
    if host is None or port is None:
        return str(address)
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def _partition_rows(broker: Any, topic: str | None) -> list[tuple[str, int, int, int, int, int]]:
    logs = broker.logs
    if logs is None:
        return []
    if topic is None:
        names = sorted(logs.topics)
    else:
        validate_topic(topic)
        if topic not in logs.topics:
            raise UnknownTopic(f"unknown topic {topic!r}")
        names = [topic]
    rows: list[tuple[str, int, int, int, int, int]] = []
    for name in names:
        for index, plog in enumerate(logs.topics[name].partitions):
            rows.append(
                (
                    name,
                    index,
                    plog.log_start_offset,
                    plog.end_offset,
                    len(plog.segments),
                    plog.size_bytes,
                )
            )
    return rows


def group_offsets(broker: Any) -> list[tuple[str, p.GroupOffset]]:
    """Every committed offset with its partition bounds, the same lag rule as DescribeGroup."""
    if broker.offsets is None or broker.logs is None:
        return []
    return [
        (group, offset)
        for group in sorted(broker.offsets.groups())
        for offset in broker.group_offsets(group)
    ]


GroupRow = tuple[str, str, int, str, str, str, str, int]


def kafka_group_rows(broker: Any) -> list[GroupRow]:
    """One row per live group member: (group, state, generation, client id, host,
    assignment, member id, lag); a group without members gets one row with empty
    member fields and the whole group's lag. The coordinator's `describe`, as
    DescribeGroups shows it, beside `Broker.group_offsets` (docs/kafka.md,
    "Consumer groups"). A member's lag covers the partitions assigned to it; one
    without a commit counts from its log start.
    """
    coordinator = broker.groups
    if broker.logs is None:
        return []
    rows: list[GroupRow] = []
    for group_id, _ptype, _state in coordinator.list_groups():
        desc = coordinator.describe(group_id)
        lags = {(o.topic, o.partition): o.lag for o in broker.group_offsets(group_id)}
        if not desc.members:
            rows.append(
                (group_id, desc.state, desc.generation_id, "", "", "", "", sum(lags.values()))
            )
        for m in desc.members:
            assigned = consumer_assignment(m.assignment) or {}
            lag = sum(
                lags.get((topic, partition), _uncommitted_lag(broker, topic, partition))
                for topic, partitions in assigned.items()
                for partition in partitions
            )
            rows.append(
                (
                    group_id,
                    desc.state,
                    desc.generation_id,
                    m.client_id,
                    m.client_host,
                    format_assignment(m.assignment),
                    m.member_id,
                    lag,
                )
            )
    return rows


def _uncommitted_lag(broker: Any, topic: str, partition: int) -> int:
    """Records a member with no commit for a partition has yet to read: all it holds."""
    t = broker.logs.topics.get(topic)
    if t is None or partition >= len(t.partitions):
        return 0
    plog = t.partitions[partition]
    return int(plog.end_offset - plog.log_start_offset)


def admin_namespace(
    broker: Any, factory: Any, io: Any, kafka_factory: Any = None
) -> dict[str, Any]:
    """What a manhole session starts with: the live objects plus table-printing helpers.

    ``kafka_factory`` is the Kafka front-end's (None when Kafka is off): its
    connections are listed by `kafka_connections`, native ones by `connections`.
    """

    def topics() -> None:
        """One line per topic: partitions, records held, segments and bytes on disk."""
        per_topic: dict[str, list[int]] = {}
        for name, _, start, end, segments, size in _partition_rows(broker, None):
            totals = per_topic.setdefault(name, [0, 0, 0, 0])
            totals[0] += 1
            totals[1] += end - start
            totals[2] += segments
            totals[3] += size
        _emit(
            format_table(
                ("topic", "partitions", "records", "segments", "bytes"),
                [(name, *totals) for name, totals in per_topic.items()],
            )
        )

    def partitions(topic: str | None = None) -> None:
        """Log start/end offsets, segment count and size of every partition (or one topic's)."""
        _emit(
            format_table(
                ("topic", "partition", "log_start", "end", "segments", "bytes"),
                _partition_rows(broker, topic),
            )
        )

    def groups() -> None:
        """Committed offset, end offset and lag per group, topic and partition."""
        _emit(
            format_table(
                ("group", "topic", "partition", "committed", "end", "lag"),
                [
                    (g, o.topic, o.partition, o.committed, o.high_watermark, o.lag)
                    for g, o in group_offsets(broker)
                ],
            )
        )

    def kafka_groups() -> None:
        """Every group's state and generation, and its members: client id, host,
        assignment and the lag of the partitions assigned to them."""
        _emit(
            format_table(
                ("group", "state", "generation", "client_id", "host", "assignment", "lag"),
                [(*row[:6], row[7]) for row in kafka_group_rows(broker)],
            )
        )

    def connections() -> None:
        """Connected clients: who they authenticated as (User:ANONYMOUS on a listener
        without security), their request counts and unanswered requests."""
        rows = sorted(
            (
                _address(conn.transport.getPeer()),
                str(conn.principal),
                conn.requests,
                conn.pending,
            )
            for conn in list(factory.connections)
        )
        _emit(format_table(("peer", "principal", "requests", "pending"), rows))

    def kafka_connections() -> None:
        """Kafka clients: principal, client id, software name and version (ApiVersions
        v3+), requests."""
        conns = list(kafka_factory.connections) if kafka_factory is not None else []
        rows = []
        for conn in conns:
            software, version = conn.software or ("-", "-")
            rows.append(
                (
                    _address(conn.transport.getPeer()),
                    str(conn.principal),
                    conn.client_id or "-",
                    software or "-",
                    version or "-",
                    conn.requests,
                    conn.pending,
                )
            )
        _emit(
            format_table(
                ("peer", "principal", "client_id", "software", "version", "requests", "pending"),
                sorted(rows),
            )
        )

    def pool() -> None:
        """The I/O thread pool: queued work and threads (a deep queue means slow disks)."""
        tp = io.pool
        _emit(
            format_table(
                ("queue_depth", "threads", "busy", "max_threads", "submitted"),
                [(io.queue_depth, tp.workers, len(tp.working), tp.max, io.submitted)],
            )
        )

    def transactions() -> None:
        """Every transactional id: producer id and epoch, state, how long its transaction
        has been open, and its partitions (docs/kafka.md, "Transactions")."""
        now = int(broker.reactor.seconds() * 1000)
        rows = [
            (
                m.transactional_id,
                m.producer_id,
                m.producer_epoch,
                m.state.kafka_name,
                (now - m.start_ms) // 1000
                if m.start_ms >= 0 and m.state.name == "ONGOING"
                else "-",
                ",".join(f"{t}-{p}" for t, p in sorted(m.partitions)) or "-",
            )
            for m in broker.transactions.transactions()
        ]
        _emit(
            format_table(
                ("transactional_id", "producer_id", "epoch", "state", "open_s", "partitions"),
                rows,
            )
        )

    def open_transactions() -> None:
        """Per partition with an open transaction: its last stable offset, its end, and
        each open producer id with the offset its transaction starts at."""
        logs = broker.logs
        rows = []
        for name in sorted(logs.topics) if logs is not None else []:
            for index, plog in enumerate(logs.topics[name].partitions):
                for pid, first in sorted(plog.open_transactions().items()):
                    rows.append((name, index, plog.last_stable_offset, plog.end_offset, pid, first))
        _emit(
            format_table(("topic", "partition", "lso", "end", "producer_id", "first_offset"), rows)
        )

    def abort_transaction(transactional_id: str) -> None:
        """Abort ``transactional_id``'s open transaction now, fencing its producer (the
        operator's way out of a hanging one, Kafka's kafka-transactions.sh abort)."""

        def done(_: object) -> None:
            _emit(f"aborted the transaction of {transactional_id!r}")

        def failed(failure: Any) -> None:
            _emit(f"not aborted: {failure.getErrorMessage()}")

        broker.transactions.abort(transactional_id).addCallbacks(done, failed)

    helpers: dict[str, Callable[..., None]] = {
        "topics": topics,
        "partitions": partitions,
        "groups": groups,
        "kafka_groups": kafka_groups,
        "connections": connections,
        "kafka_connections": kafka_connections,
        "pool": pool,
        "transactions": transactions,
        "open_transactions": open_transactions,
        "abort_transaction": abort_transaction,
    }
    return {
        "broker": broker,
        "factory": factory,
        "kafka_factory": kafka_factory,
        "io": io,
        **helpers,
    }
