"""The library's FAISS indexes, one per vector kind: a cache of the `vectors` table.

Each index is saved beside the database with the library generation it reflects. Loading one
brings it up to date from the database when the generations differ (missing vectors added,
orphans removed), so a run killed between a commit and a save costs a little work, never a wrong
answer; this process's own commits update the loaded indexes as they happen.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np
import sqlalchemy as sa

from headsearch.store.layout import vector_index_file
from headsearch.store.table_rows import generation
from headsearch.store.vector_index import VectorIndex
from schemas import tables as t
from schemas.records import VectorKind

log = logging.getLogger(__name__)

SYNC_CHUNK = 50_000  # vectors read from the database at once when an index is brought up to date


class IndexCache:
    """The loaded FAISS indexes of one library, kept in step with its database."""

    def __init__(self, root: Path, reader: Callable[[], AbstractContextManager[sa.Connection]]):
        self.root = root
        self._reader = reader  # a short read connection to the library's database
        self._indexes: dict[VectorKind, VectorIndex] = {}
        self._generations: dict[VectorKind, int] = {}  # the generation each loaded index reflects

    def path(self, kind: VectorKind) -> Path:
        return self.root / vector_index_file(kind)

    def load(self, kind: VectorKind, dim: int) -> VectorIndex:
        """The index of one vector kind, brought up to date with the database (loaded once)."""
        if kind in self._indexes:
            return self._indexes[kind]
        path = self.path(kind)
        index, saved_generation = None, -1
        if path.is_file():
            try:
                index, saved_generation = VectorIndex.load(path)
            except Exception as e:  # a damaged cache is rebuilt from the database
                log.warning("%s: unreadable vector index, rebuilding it (%s)", path, e)
        if index is None:
            index = VectorIndex(dim)
        with self._reader() as conn:
            current = generation(conn)
            if saved_generation != current:
                _sync(conn, index, kind)
        self._generations[kind] = current
        self._indexes[kind] = index
        return index

    def refresh(self) -> None:
        """Bring the loaded indexes up to date with commits made since they were loaded (by a running
        index, say); cheap when nothing changed."""
        if not self._indexes:
            return
        with self._reader() as conn:
            current = generation(conn)
            for kind, index in self._indexes.items():
                if self._generations.get(kind) != current:
                    _sync(conn, index, kind)
                    self._generations[kind] = current

    def save(self) -> None:
        """Save every loaded index with the current generation."""
        if not self._indexes:
            return
        with self._reader() as conn:
            current = generation(conn)
        for kind, index in self._indexes.items():
            index.make_approximate_if_large()
            index.save(self.path(kind), current)

    def apply(self, removed: dict[VectorKind, np.ndarray], added: dict[VectorKind, tuple[np.ndarray, np.ndarray]]) -> None:
        """A commit's vectors: removed ones by id, added ones as (ids, vectors), into the loaded indexes."""
        for kind, ids in removed.items():
            if kind in self._indexes:
                self._indexes[kind].remove(ids)
        for kind, (ids, vecs) in added.items():
            if kind in self._indexes:
                self._indexes[kind].add(ids, vecs)

    def clear(self) -> None:
        self._indexes.clear()
        self._generations.clear()


def _sync(conn: sa.Connection, index: VectorIndex, kind: VectorKind) -> None:
    """Make the index hold exactly the database's vectors of its kind."""
    db_ids = np.array([r[0] for r in conn.execute(sa.select(t.vectors.c.id).where(t.vectors.c.kind == str(kind)))], dtype=np.int64)
    have = index.ids()
    extra = np.setdiff1d(have, db_ids)
    missing = np.setdiff1d(db_ids, have)
    if len(extra):
        index.remove(extra)
    for start in range(0, len(missing), SYNC_CHUNK):
        chunk = missing[start : start + SYNC_CHUNK]
        rows = conn.execute(sa.select(t.vectors.c.id, t.vectors.c.embedding).where(t.vectors.c.id.in_([int(i) for i in chunk]))).fetchall()
        index.add(np.array([r.id for r in rows], np.int64), np.stack([np.frombuffer(r.embedding, dtype="<f4") for r in rows]))
    if len(extra) or len(missing):
        log.info("vector index %s brought up to date: %d added, %d removed", kind, len(missing), len(extra))
