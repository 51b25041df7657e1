"""The `vectors` table as the source the library's vector indexes cache (`headsearch.vectors.index_cache`):
its generation, its vectors of a kind in chunks, and an index brought up to date with it. Read in DuckDB's
own SQL on plain connections, as a query's look-ups are (`headsearch.store.query_reader`)."""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

import numpy as np

from headsearch.store.database import GENERATION_SQL, IN_IDS
from headsearch.vectors.index_cache import SYNC_CHUNK, Index
from schemas.records import VectorKind

if TYPE_CHECKING:
    import duckdb

log = logging.getLogger(__name__)


class DatabaseVectors:
    """A library database's vectors, read on short plain connections (`plain`), for its `IndexCache`."""

    def __init__(self, plain: Callable[[], AbstractContextManager[duckdb.DuckDBPyConnection]]):
        self._plain = plain  # a short read connection to the library's database

    def generation(self) -> int:
        with self._plain() as conn:
            return _generation(conn)

    def count(self, kind: VectorKind) -> int:
        with self._plain() as conn:
            return int(conn.execute("SELECT count(*) FROM vectors WHERE kind = ?", [str(kind)]).fetchone()[0])

    def chunks(self, kind: VectorKind) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(ids, vectors) of one kind from the database, ids ascending, SYNC_CHUNK at a time (one connection,
        closed when the last chunk has been read)."""
        with self._plain() as conn:
            yield from _vectors_in_order(conn, "kind = ?", str(kind))

    def catch_up(self, indexes: dict[VectorKind, tuple[Index, int | None]]) -> int:
        """Bring every index whose generation is not the database's up to date, on one connection; returns
        the database's generation."""
        with self._plain() as conn:
            current = _generation(conn)
            for kind, (index, reflected) in indexes.items():
                if reflected != current:
                    _sync(conn, index, kind)
        return current


def _generation(conn: duckdb.DuckDBPyConnection) -> int:
    return int(conn.execute(GENERATION_SQL).fetchone()[0])


def _embeddings(rows) -> tuple[np.ndarray, np.ndarray]:
    return np.array([r[0] for r in rows], np.int64), np.stack([np.frombuffer(r[1], dtype="<f4") for r in rows])


def _vectors_in_order(conn: duckdb.DuckDBPyConnection, where: str, *params) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(ids, vectors) of the rows of `vectors` that `where` picks, ids ascending, SYNC_CHUNK at a time."""
    result = conn.execute(f"SELECT id, embedding FROM vectors WHERE {where} ORDER BY id", list(params))
    while rows := result.fetchmany(SYNC_CHUNK):
        yield _embeddings(rows)


def _sync(conn: duckdb.DuckDBPyConnection, index: Index, kind: VectorKind) -> None:
    """Make the index hold exactly the database's vectors of its kind. Ids are never reused, so the vectors
    newer than the index's largest id are the ones added since; the others changed only when the count and
    sum of its ids differ from the database's (a removal), and are then compared one by one."""
    top = int(index.max_id())
    count, total = conn.execute("SELECT count(*), coalesce(sum(id), 0) FROM vectors WHERE kind = ? AND id <= ?",
                                [str(kind), top]).fetchone()
    removed = added = 0
    if (int(count), int(total)) != index.id_checksum():
        db_ids = np.array([r[0] for r in conn.execute("SELECT id FROM vectors WHERE kind = ? AND id <= ?", [str(kind), top]).fetchall()],
                          dtype=np.int64)
        have = index.ids()
        extra, missing = np.setdiff1d(have, db_ids), np.setdiff1d(db_ids, have)
        removed = index.remove(extra) if len(extra) else 0
        for start in range(0, len(missing), SYNC_CHUNK):
            chunk = [int(i) for i in missing[start:start + SYNC_CHUNK]]
            index.add(*_embeddings(conn.execute(f"SELECT id, embedding FROM vectors WHERE id {IN_IDS}",
                                                [chunk]).fetchall()))
            added += len(chunk)
    for ids, vectors in _vectors_in_order(conn, "kind = ? AND id > ?", str(kind), top):
        index.add(ids, vectors)
        added += len(ids)
    if removed or added:
        log.info("vector index %s brought up to date: %d added, %d removed", kind, added, removed)
