"""The credential file: each user's SCRAM salted keys, never a password.

One small JSON file the broker owns (mode 0600), by default ``<data_dir>/credentials``::

    {"format": "rustka-credentials", "version": 1,
     "users": {"alice": {"SCRAM-SHA-256": {"salt": "<base64>", "iterations": 4096,
                                           "stored_key": "<base64>",
                                           "server_key": "<base64>"}}}}

It is replaced whole (`rustka.storage.file_io.replace_file`: temporary file, fsync,
rename, directory fsync), so a crash leaves the old file or the new one. Writers
(the broker's AlterUserScramCredentials, an offline ``rustka users add``) hold an
exclusive lock on ``<file>.lock`` around read-modify-write, so two of them never
lose each other's change. Readers notice a change by the file's inode, size and
modification time, checked on every lookup (one stat), so a user added while the
broker runs can log in at once, without a restart.

Plain blocking Python, like storage: the broker calls the writing half off the
reactor.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rustka.security.scram import MECHANISMS, MIN_ITERATIONS, ScramCredential
from rustka.storage.file_io import replace_file

__all__ = [
    "CredentialFileError",
    "CredentialStore",
    "check_credential_file",
    "check_user_name",
    "decode_credentials",
    "encode_credentials",
]

FORMAT: Final = "rustka-credentials"
VERSION: Final = 1
MODE: Final = 0o600
MAX_USER_NAME: Final = 255

Users = dict[str, dict[str, ScramCredential]]
"""user -> mechanism name -> credential."""


class CredentialFileError(Exception):
    """The credential file cannot be read or is not what this module writes."""


def check_user_name(name: str) -> str | None:
    """Why ``name`` cannot be a user name, or None if it can."""
    if not name:
        return "a user name must not be empty"
    if len(name.encode()) > MAX_USER_NAME:
        return f"a user name is at most {MAX_USER_NAME} bytes"
    if any(ord(c) < 0x20 or c == "\x7f" for c in name):
        return "a user name must not contain control characters"
    return None


def _b64(value: Any, where: str) -> bytes:
    if not isinstance(value, str):
        raise CredentialFileError(f"{where}: expected a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise CredentialFileError(f"{where}: not base64") from None


def decode_credentials(data: bytes) -> Users:
    """The file's bytes as users; CredentialFileError naming what is wrong."""
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CredentialFileError(f"not JSON: {e}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CredentialFileError(f"not a {FORMAT} file")
    if document.get("version") != VERSION:
        raise CredentialFileError(f"version {document.get('version')!r}, expected {VERSION}")
    users = document.get("users")
    if not isinstance(users, dict):
        raise CredentialFileError("'users' is not an object")
    out: Users = {}
    for user, mechanisms in users.items():
        if (problem := check_user_name(user)) is not None:
            raise CredentialFileError(f"user {user!r}: {problem}")
        if not isinstance(mechanisms, dict) or not mechanisms:
            raise CredentialFileError(f"user {user!r}: no credentials")
        for name, entry in mechanisms.items():
            where = f"user {user!r}, {name}"
            mechanism = MECHANISMS.get(name)
            if mechanism is None:
                raise CredentialFileError(f"{where}: unknown mechanism")
            if not isinstance(entry, dict):
                raise CredentialFileError(f"{where}: not an object")
            iterations = entry.get("iterations")
            if (
                not isinstance(iterations, int)
                or isinstance(iterations, bool)
                or iterations < MIN_ITERATIONS
            ):
                raise CredentialFileError(
                    f"{where}: iterations must be an integer of at least {MIN_ITERATIONS}"
                )
            salt = _b64(entry.get("salt"), f"{where}, salt")
            stored = _b64(entry.get("stored_key"), f"{where}, stored_key")
            server = _b64(entry.get("server_key"), f"{where}, server_key")
            if not salt:
                raise CredentialFileError(f"{where}: empty salt")
            size = mechanism.digest_size
            if len(stored) != size or len(server) != size:
                raise CredentialFileError(f"{where}: keys must be {size} bytes")
            out.setdefault(user, {})[name] = ScramCredential(salt, iterations, stored, server)
    return out


def encode_credentials(users: Users) -> bytes:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    document = {
        "format": FORMAT,
        "version": VERSION,
        "users": {
            user: {
                name: {
                    "salt": b64(c.salt),
                    "iterations": c.iterations,
                    "stored_key": b64(c.stored_key),
                    "server_key": b64(c.server_key),
                }
                for name, c in sorted(mechanisms.items())
            }
            for user, mechanisms in sorted(users.items())
            if mechanisms
        },
    }
    return (json.dumps(document, indent=1) + "\n").encode()


@dataclass(frozen=True, slots=True)
class _Version:
    inode: int
    size: int
    mtime_ns: int


class CredentialStore:
    """The credential file, read when it changes and written whole.

    A file that is missing means no users. If a changed file cannot be read the
    last good copy stays in use and `last_error` says why, so a half-edited file
    never locks every user out (and never lets anyone in).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._users: Users = {}
        self._version: _Version | None = None
        self.last_error: str | None = None
        self.reloads = 0
        self.shared: Callable[[], AbstractContextManager[Any]] | None = None
        """In a cluster: the catalog's copy under its lock, a draft whose ``body`` is the
        stored encoding (docs/diskless.md, "Security in a cluster")."""
        self.refresh()

    def _stat(self) -> _Version | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return _Version(st.st_ino, st.st_size, st.st_mtime_ns)

    def refresh(self) -> None:
        """Re-read the file if it changed since it was last read."""
        try:
            version = self._stat()
        except OSError as e:
            self.last_error = f"cannot stat {self.path}: {e.strerror}"
            return
        if version == self._version:
            return
        if version is None:
            self._users, self._version, self.last_error = {}, None, None
            self.reloads += 1
            return
        try:
            users = decode_credentials(self.path.read_bytes())
        except OSError as e:
            self.last_error = f"cannot read {self.path}: {e.strerror}"
            return
        except CredentialFileError as e:
            self.last_error = f"{self.path}: {e}"
            return
        self._users, self._version, self.last_error = users, version, None
        self.reloads += 1

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        self.refresh()
        return self._users.get(user, {}).get(mechanism)

    def credentials_of(self, user: str) -> dict[str, ScramCredential]:
        self.refresh()
        return dict(self._users.get(user, {}))

    def users(self) -> Users:
        self.refresh()
        return {user: dict(mechanisms) for user, mechanisms in self._users.items()}

    # -- writing (blocking: off the reactor) --------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[Users]:
        """The current users under the writers' lock; what the block leaves in the dict
        is written back if it changed. In a cluster the catalog's copy is the current one
        and is written first (under its own lock); the file follows as this broker's copy."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = decode_credentials(self.path.read_bytes())
            except FileNotFoundError:
                current = {}
            on_file = encode_credentials(current)
            if self.shared is None:
                yield current
                after = encode_credentials(current)
            else:
                with self.shared() as draft:
                    if draft.body is not None:
                        current = decode_credentials(draft.body)
                    # The first change in a cluster stores this broker's users as well.
                    before = draft.body
                    yield current
                    after = encode_credentials(current)
                    if after != before:
                        draft.body = after
            if after != on_file or not self.path.exists():
                replace_file(self.path, after, MODE)
        finally:
            os.close(fd)
        self.refresh()

    def install(self, data: bytes) -> None:
        """Take ``data`` (the cluster's copy, in the file's encoding) as the users: written
        to the file under the writers' lock, then read as any change of the file is."""
        if not decode_credentials(data) and not self.path.exists():
            return  # no users anywhere: no file to make
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            replace_file(self.path, data, MODE)
        finally:
            os.close(fd)
        self.refresh()

    def encoded(self) -> bytes:
        """The users in the file's encoding (what a new cluster starts from)."""
        return encode_credentials(self.users())

    def upsert(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        """Set ``user``'s credential for ``mechanism`` (its other mechanisms stay)."""
        if (problem := check_user_name(user)) is not None:
            raise CredentialFileError(problem)
        if mechanism not in MECHANISMS:
            raise CredentialFileError(f"unknown mechanism {mechanism!r}")
        with self._locked() as users:
            users.setdefault(user, {})[mechanism] = credential

    def delete(self, user: str, mechanism: str | None = None) -> bool:
        """Remove one mechanism's credential of ``user``, or all; whether any was there."""
        with self._locked() as users:
            mechanisms = users.get(user)
            if not mechanisms:
                return False
            if mechanism is None:
                del users[user]
                return True
            if mechanisms.pop(mechanism, None) is None:
                return False
            if not mechanisms:
                del users[user]
            return True


def check_credential_file(path: str | Path) -> tuple[list[str], list[str]]:
    """(problems, notes) for ``rustka check``: readable, well-formed, only the owner may
    read it, owned by the user running the check."""
    path = Path(path)
    problems: list[str] = []
    notes: list[str] = []
    try:
        st = os.stat(path)
    except FileNotFoundError:
        notes.append(f"{path}: no credential file (no users)")
        return problems, notes
    except OSError as e:
        return [f"{path}: cannot stat: {e.strerror}"], notes
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        problems.append(f"{path}: mode {mode:04o} lets others read it; it must be 0600")
    if st.st_uid != os.geteuid():
        notes.append(f"{path}: owned by uid {st.st_uid}, not by the user running the check")
    try:
        users = decode_credentials(path.read_bytes())
    except OSError as e:
        problems.append(f"{path}: cannot read: {e.strerror}")
        return problems, notes
    except CredentialFileError as e:
        problems.append(f"{path}: {e}")
        return problems, notes
    leftover = path.with_name(path.name + ".tmp")
    if leftover.exists():
        notes.append(f"{leftover}: leftover of an interrupted write (the file itself is whole)")
    count = sum(len(m) for m in users.values())
    notes.append(f"{path}: {len(users)} users, {count} credentials")
    return problems, notes
