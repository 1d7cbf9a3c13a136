"""Documents a cluster's brokers share, in the catalog's ``cluster_documents``: the ACLs
and the SCRAM credentials, each kept whole in the encoding of the single broker's
file, so a cluster gives the same answers from every broker (docs/diskless.md,
"Security in a cluster").

A change is made under the document's row lock, on the latest version, so two
brokers changing it at once never lose either change; every broker learns of a
change from the versions its heartbeat reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rustka.storage.diskless.catalog import Catalog

__all__ = ["Draft", "SharedDocuments"]


@dataclass(slots=True)
class Draft:
    """A document being changed: ``body`` is what is stored (None: nothing yet); set it
    to what must be stored."""

    body: bytes | None
    version: int


class SharedDocuments:
    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    def versions(self) -> dict[str, int]:
        with self.catalog.session() as conn:
            return dict(conn.execute("SELECT name, version FROM cluster_documents").fetchall())

    def read(self, name: str) -> Draft:
        with self.catalog.session() as conn:
            row = conn.execute(
                "SELECT body, version FROM cluster_documents WHERE name = %s", (name,)
            ).fetchone()
        return Draft(None, 0) if row is None else Draft(bytes(row[0]), int(row[1]))

    @contextmanager
    def changing(self, name: str) -> Iterator[Draft]:
        """The document under its lock; what the block leaves in the draft's body is
        stored, with the next version, if it differs."""
        with self.catalog.session() as conn:
            # The lock covers a document not stored yet, which has no row to lock.
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('rustka-doc:' || %s))", (name,))
            row = conn.execute(
                "SELECT body, version FROM cluster_documents WHERE name = %s", (name,)
            ).fetchone()
            before = None if row is None else bytes(row[0])
            draft = Draft(before, 0 if row is None else int(row[1]))
            yield draft
            if draft.body is not None and draft.body != before:
                draft.version += 1
                conn.execute(
                    "INSERT INTO cluster_documents (name, version, body) VALUES (%s, %s, %s) "
                    "ON CONFLICT (name) DO UPDATE SET version = EXCLUDED.version, "
                    "body = EXCLUDED.body",
                    (name, draft.version, draft.body),
                )
