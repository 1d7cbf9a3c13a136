"""Committed offsets of a cluster's consumer groups, in the catalog's ``group_offsets``.

The group coordinator of a cluster writes each commit here before its own offsets
store takes it (`rustka.storage.offsets.OffsetsMirror`), so a commit is
acknowledged only once it is in PostgreSQL; when the role passes to another broker,
that broker loads the table and the groups go on from their committed offsets
(docs/diskless.md, "Consumer groups in a cluster").
"""

from __future__ import annotations

from collections.abc import Sequence

from rustka.storage.diskless.catalog import Catalog
from rustka.storage.offsets import Commit, OffsetKey

__all__ = ["GroupOffsets"]


class GroupOffsets:
    """The table, as an `OffsetsMirror` and as what a new coordinator loads."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    def write(self, commits: Sequence[Commit], now_ms: int) -> None:
        """Upsert the commits and delete the tombstones (3-tuples), in one transaction."""
        upserts = [c for c in commits if len(c) > 3]
        deletes = [c for c in commits if len(c) == 3]
        with self.catalog.session() as conn:
            if upserts:
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO group_offsets (group_id, topic, partition, "
                        "committed_offset, metadata, commit_ms) VALUES (%s, %s, %s, %s, %s, %s) "
                        "ON CONFLICT (group_id, topic, partition) DO UPDATE SET "
                        "committed_offset = EXCLUDED.committed_offset, "
                        "metadata = EXCLUDED.metadata, commit_ms = EXCLUDED.commit_ms",
                        [
                            (c[0], c[1], c[2], c[3], c[4] if len(c) > 4 else "", now_ms)
                            for c in upserts
                        ],  # type: ignore[misc]
                    )
            if deletes:
                with conn.cursor() as cur:
                    cur.executemany(
                        "DELETE FROM group_offsets WHERE group_id = %s AND topic = %s "
                        "AND partition = %s",
                        [tuple(c) for c in deletes],
                    )

    def load(self) -> dict[OffsetKey, tuple[int, int, str]]:
        """Every group's commits: (offset, commit ms, metadata) by (group, topic, partition)."""
        with self.catalog.session() as conn:
            rows = conn.execute(
                "SELECT group_id, topic, partition, committed_offset, commit_ms, metadata "
                "FROM group_offsets"
            ).fetchall()
        return {(g, t, p): (o, ms, meta) for g, t, p, o, ms, meta in rows}
