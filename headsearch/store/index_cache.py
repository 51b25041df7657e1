"""The library's vector indexes, one per vector kind: a cache of the `vectors` table.

A kind lives in memory (`VectorIndex`: exact, then IVF; `vectors_<kind>.faiss`) while the memory the
library's loaded indexes measure together fits the budget (`vector_memory_budget`: $HEADSEARCH_VECTOR_MEMORY,
else an eighth of the machine's memory), else in on-disk segments (`SegmentedIndex`;
`vectors_<kind>.segments/`). A writer's save moves the largest in-memory kind to segments while the
budget is exceeded, and a segmented kind back to memory once it would fit in half the budget.

Each index is saved with the library generation it reflects. Loading one brings it up to date from the
database when the generations differ: vectors newer than the index are added, and when the count and
sum of the ids it holds differ from the database's, orphans are removed and missing vectors added. So a
run killed between a commit and a save costs a little work, never a wrong answer; this process's own
commits update the loaded indexes as they happen. A damaged index is rebuilt from the database.
"""
from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np
import sqlalchemy as sa

from headsearch.basics.settings import vector_memory_budget
from headsearch.store.layout import vector_index_file, vector_segments_folder
from headsearch.store.table_rows import generation
from headsearch.vectors.segment_files import MIN_VECTORS
from headsearch.vectors.segments import STATE, SegmentedIndex
from headsearch.vectors.vector_index import VectorIndex
from schemas import tables as t
from schemas.records import VectorKind

log = logging.getLogger(__name__)

SYNC_CHUNK = 50_000  # vectors read from the database at once when an index is brought up to date
TAIL_CAP = 256 * 2**20  # a segmented kind's in-memory tail is written as a segment past this (or an eighth of the budget)

Index = VectorIndex | SegmentedIndex


class IndexCache:
    """The loaded vector indexes of one library, kept in step with its database."""

    def __init__(self, root: Path, reader: Callable[[], AbstractContextManager[sa.Connection]], writable: bool = False):
        self.root = root
        self._reader = reader  # a short read connection to the library's database
        self.writable = writable  # a damaged segment set is rebuilt on disk only by a writer
        self._indexes: dict[VectorKind, Index] = {}
        self._generations: dict[VectorKind, int] = {}  # the generation each loaded index reflects

    def path(self, kind: VectorKind) -> Path:
        return self.root / vector_index_file(kind)

    def segments_folder(self, kind: VectorKind) -> Path:
        return self.root / vector_segments_folder(kind)

    def load(self, kind: VectorKind, dim: int) -> Index:
        """The index of one vector kind, brought up to date with the database (loaded once)."""
        if kind in self._indexes:
            return self._indexes[kind]
        index, saved_generation = self._open(kind, dim)
        with self._reader() as conn:
            current = generation(conn)
            if saved_generation != current:
                _sync(conn, index, kind)
        self._generations[kind] = current
        self._indexes[kind] = index
        return index

    def _open(self, kind: VectorKind, dim: int) -> tuple[Index, int]:
        """The saved index of a kind and its generation: the segments when a set is saved, else the
        in-memory file, else an empty index (generation -1)."""
        folder = self.segments_folder(kind)
        if (folder / STATE).is_file():
            try:
                return SegmentedIndex.open(folder)
            except Exception as e:  # a damaged cache is rebuilt from the database
                log.warning("%s: unreadable vector segments, rebuilding them from the database (%s)", folder, e)
                if self.writable:
                    rebuilt = self._rebuild_segments(kind, dim)
                    if rebuilt is not None:
                        return rebuilt
        path = self.path(kind)
        if path.is_file():
            try:
                return VectorIndex.load(path)
            except Exception as e:
                log.warning("%s: unreadable vector index, rebuilding it (%s)", path, e)
        return VectorIndex(dim), -1

    def _rebuild_segments(self, kind: VectorKind, dim: int) -> tuple[SegmentedIndex, int] | None:
        """Segments written again from the database, read in one pass (None: too few vectors for segments)."""
        with self._reader() as conn:
            current = generation(conn)
            count = conn.execute(sa.select(sa.func.count()).select_from(t.vectors).where(t.vectors.c.kind == str(kind))).scalar_one()
        if count < MIN_VECTORS:
            return None
        store = SegmentedIndex.create(self.segments_folder(kind), dim, _database_chunks(self._reader, kind, dim), current)
        log.info("vector segments of %s rebuilt from the database: %d vectors", kind, len(store))
        return store, current

    def refresh(self) -> None:
        """Bring the loaded indexes up to date with what a writer saved and committed since they were
        loaded (a running index, say); cheap when nothing changed."""
        if not self._indexes:
            return
        for kind, index in list(self._indexes.items()):
            if self._saved_elsewhere(kind, index):
                if isinstance(index, SegmentedIndex):
                    index.close()
                self._indexes[kind], self._generations[kind] = self._open(kind, index.dim)
        with self._reader() as conn:
            current = generation(conn)
            for kind, index in self._indexes.items():
                if self._generations.get(kind) != current:
                    _sync(conn, index, kind)
                    self._generations[kind] = current

    def _saved_elsewhere(self, kind: VectorKind, index: Index) -> bool:
        """Whether a writer saved this kind in another form since it was loaded here."""
        if isinstance(index, SegmentedIndex):
            return index.replaced_on_disk()
        return (self.segments_folder(kind) / STATE).is_file()

    def save(self) -> None:
        """Save every loaded index with the current generation, each kind in memory or in segments as the
        budget says (the writer's, under the library's writer lock)."""
        if not self._indexes:
            return
        with self._reader() as conn:
            current = generation(conn)
        budget = vector_memory_budget()
        self._place(budget, current)
        tail_cap = min(TAIL_CAP, budget // 8)
        for kind, index in self._indexes.items():
            if isinstance(index, SegmentedIndex):
                index.save(current, tail_cap)
                for stale in (self.path(kind), self.path(kind).with_suffix(".json")):
                    stale.unlink(missing_ok=True)
            else:
                index.make_approximate_if_large()
                index.save(self.path(kind), current)
                if self.segments_folder(kind).exists():
                    shutil.rmtree(self.segments_folder(kind), ignore_errors=True)

    def _place(self, budget: int, current: int) -> None:
        """Move the largest in-memory kind to segments while the loaded indexes measure more than `budget`
        bytes together; move a segmented kind back to memory when all would then measure at most half of it."""
        held = {kind: index.memory_bytes() for kind, index in self._indexes.items()}
        while sum(held.values()) > budget:
            movable = [k for k, i in self._indexes.items() if isinstance(i, VectorIndex) and len(i) >= MIN_VECTORS]
            if not movable:
                break
            kind = max(movable, key=held.__getitem__)
            index = self._indexes[kind]
            ids, vectors = index.contents()
            order = np.argsort(ids)
            step = SYNC_CHUNK
            chunks = ((ids[order[a:a + step]], vectors[order[a:a + step]]) for a in range(0, len(ids), step))
            store = SegmentedIndex.create(self.segments_folder(kind), index.dim, chunks, current)
            log.info("vector index %s moved to on-disk segments: %d vectors, %.0f MB in memory over a budget of %.0f MB",
                     kind, len(store), sum(held.values()) / 1e6, budget / 1e6)
            self._indexes[kind], held[kind] = store, store.memory_bytes()
        for kind, index in list(self._indexes.items()):
            if not isinstance(index, SegmentedIndex):
                continue
            in_memory = VectorIndex.memory_bytes_for(len(index), index.dim)
            if sum(held.values()) - held[kind] + in_memory > budget / 2:
                continue
            back = VectorIndex(index.dim)
            back.add(*index.contents())
            index.close()
            log.info("vector index %s moved back to memory: %d vectors, %.0f MB", kind, len(back), in_memory / 1e6)
            self._indexes[kind], held[kind] = back, back.memory_bytes()

    def apply(self, removed: dict[VectorKind, np.ndarray], added: dict[VectorKind, tuple[np.ndarray, np.ndarray]]) -> None:
        """A commit's vectors: removed ones by id, added ones as (ids, vectors), into the loaded indexes."""
        for kind, ids in removed.items():
            if kind in self._indexes:
                self._indexes[kind].remove(ids)
        for kind, (ids, vecs) in added.items():
            if kind in self._indexes:
                self._indexes[kind].add(ids, vecs)

    def clear(self) -> None:
        for index in self._indexes.values():
            if isinstance(index, SegmentedIndex):
                index.close()
        self._indexes.clear()
        self._generations.clear()


def _embeddings(rows) -> tuple[np.ndarray, np.ndarray]:
    return np.array([r[0] for r in rows], np.int64), np.stack([np.frombuffer(r[1], dtype="<f4") for r in rows])


def _database_chunks(reader: Callable[[], AbstractContextManager[sa.Connection]], kind: VectorKind,
                     dim: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(ids, vectors) of one kind from the database, ids ascending, SYNC_CHUNK at a time (one connection,
    closed when the last chunk has been read)."""
    with reader() as conn:
        result = conn.execute(sa.select(t.vectors.c.id, t.vectors.c.embedding).where(t.vectors.c.kind == str(kind)).order_by(t.vectors.c.id))
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
    result = conn.execute(sa.select(t.vectors.c.id, t.vectors.c.embedding).where(of_kind, t.vectors.c.id > top).order_by(t.vectors.c.id))
    while rows := result.fetchmany(SYNC_CHUNK):
        index.add(*_embeddings(rows))
        added += len(rows)
    if removed or added:
        log.info("vector index %s brought up to date: %d added, %d removed", kind, added, removed)
