"""The `vectors` table as the source the library's vector indexes cache (`headsearch.vectors.index_cache`):
its generation, its vectors of a kind in chunks, and an index brought up to date with it."""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import numpy as np
import sqlalchemy as sa

from headsearch.store.table_rows import generation
from headsearch.vectors.index_cache import SYNC_CHUNK, Index
from schemas import tables as t
from schemas.records import VectorKind

log = logging.getLogger(__name__)


class DatabaseVectors:
    """A library database's vectors, read on short connections (`reader`), for its `IndexCache`."""

    def __init__(self, reader: Callable[[], AbstractContextManager[sa.Connection]]):
        self._reader = reader  # a short read connection to the library's database

    def generation(self) -> int:
        with self._reader() as conn:
            return generation(conn)

    def count(self, kind: VectorKind) -> int:
        with self._reader() as conn:
            return conn.execute(sa.select(sa.func.count()).select_from(t.vectors).where(t.vectors.c.kind == str(kind))).scalar_one()

    def chunks(self, kind: VectorKind) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(ids, vectors) of one kind from the database, ids ascending, SYNC_CHUNK at a time (one connection,
        closed when the last chunk has been read)."""
        with self._reader() as conn:
            yield from _vectors_in_order(conn, t.vectors.c.kind == str(kind))

    def catch_up(self, indexes: dict[VectorKind, tuple[Index, int | None]]) -> int:
        """Bring every index whose generation is not the database's up to date, on one connection; returns
        the database's generation."""
        with self._reader() as conn:
            current = generation(conn)
            for kind, (index, reflected) in indexes.items():
                if reflected != current:
                    _sync(conn, index, kind)
        return current


def _embeddings(rows) -> tuple[np.ndarray, np.ndarray]:
    return np.array([r[0] for r in rows], np.int64), np.stack([np.frombuffer(r[1], dtype="<f4") for r in rows])


def _vectors_in_order(conn: sa.Connection, *where) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(ids, vectors) of the rows of `vectors` that `where` picks, ids ascending, SYNC_CHUNK at a time."""
    result = conn.execute(sa.select(t.vectors.c.id, t.vectors.c.embedding).where(*where).order_by(t.vectors.c.id))
    while rows := result.fetchmany(SYNC_CHUNK):
        yield _embeddings(rows)


def _sync(conn: sa.Connection, index: Index, kind: VectorKind) -> None:
    """Make the index hold exactly the database's vectors of its kind. Ids are never reused, so the vectors
    newer than the index's largest id are the ones added since; the others changed only when the count and
    sum of its ids differ from the database's (a removal), and are then compared one by one."""
    of_kind = t.vectors.c.kind == str(kind)
    top = index.max_id()
    count, total = conn.execute(sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(t.vectors.c.id), 0))
                                .where(of_kind, t.vectors.c.id <= top)).one()
    removed = added = 0
    if (int(count), int(total)) != index.id_checksum():
        db_ids = np.array([r[0] for r in conn.execute(sa.select(t.vectors.c.id).where(of_kind, t.vectors.c.id <= top))], dtype=np.int64)
        have = index.ids()
        extra, missing = np.setdiff1d(have, db_ids), np.setdiff1d(db_ids, have)
        removed = index.remove(extra) if len(extra) else 0
        for start in range(0, len(missing), SYNC_CHUNK):
            chunk = [int(i) for i in missing[start:start + SYNC_CHUNK]]
            index.add(*_embeddings(conn.execute(sa.select(t.vectors.c.id, t.vectors.c.embedding).where(t.vectors.c.id.in_(chunk))).fetchall()))
            added += len(chunk)
    for ids, vectors in _vectors_in_order(conn, of_kind, t.vectors.c.id > top):
        index.add(ids, vectors)
        added += len(ids)
    if removed or added:
        log.info("vector index %s brought up to date: %d added, %d removed", kind, added, removed)
