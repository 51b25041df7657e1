"""The library's vector indexes, one per vector kind: a cache of the vectors its database keeps (`VectorSource`:
`headsearch.store.vector_source` reads them from the `vectors` table).

A kind lives in memory (`VectorIndex`: exact, then IVF; `vectors_<kind>.faiss`) while the memory the
library's loaded indexes measure together fits the budget (`vector_memory_budget`: $HEADSEARCH_VECTOR_MEMORY,
else an eighth of the machine's memory), else in on-disk segments (`SegmentedIndex`;
`vectors_<kind>.segments/`). A writer's save moves the largest in-memory kind to segments while the
budget is exceeded, and a segmented kind back to memory once it would fit in half the budget.

Each index is saved with the library generation it reflects. Loading one brings it up to date from the
database (the source) when the generations differ: vectors newer than the index are added, and when the count and
sum of the ids it holds differ from the database's, orphans are removed and missing vectors added. So a
run killed between a commit and a save costs a little work, never a wrong answer; this process's own
commits update the loaded indexes as they happen. A damaged index is rebuilt from the database.
"""
from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import numpy as np

from headsearch.basics.settings import vector_memory_budget
from headsearch.vectors.segment_files import MIN_VECTORS
from headsearch.vectors.segments import STATE, SegmentedIndex
from headsearch.vectors.vector_index import VectorIndex
from schemas.records import VectorKind

log = logging.getLogger(__name__)

SYNC_CHUNK = 50_000  # vectors read from the source, or moved to segments, at once
TAIL_CAP = 256 * 2**20  # a segmented kind's in-memory tail is written as a segment past this (or an eighth of the budget)
VECTOR_INDEX_GLOB = "vectors_*"  # the library folder's FAISS caches, one per vector kind: a file in memory, a folder in segments

Index = VectorIndex | SegmentedIndex


def vector_index_file(kind: str) -> str:
    return f"vectors_{kind}.faiss"


def vector_segments_folder(kind: str) -> str:
    return f"vectors_{kind}.segments"


class VectorSource(Protocol):
    """Where a library keeps its vectors for good (its database), by id and kind, with the generation of
    what it holds: the indexes are a cache of it."""

    def generation(self) -> int:
        """The generation of what the source holds now."""

    def count(self, kind: VectorKind) -> int:
        """How many vectors of a kind the source holds."""

    def chunks(self, kind: VectorKind) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(ids, vectors) of one kind, ids ascending, SYNC_CHUNK at a time."""

    def catch_up(self, indexes: dict[VectorKind, tuple[Index, int | None]]) -> int:
        """Make each index whose generation (the second of its pair) is not the source's hold exactly the
        source's vectors of its kind, in one read; returns the source's generation."""


class IndexCache:
    """The loaded vector indexes of one library, kept in step with its database."""

    def __init__(self, root: Path, source: VectorSource, writable: bool = False):
        self.root = root
        self._source = source  # the library's database
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
        self._generations[kind] = self._source.catch_up({kind: (index, saved_generation)})
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
        current = self._source.generation()
        if self._source.count(kind) < MIN_VECTORS:
            return None
        store = SegmentedIndex.create(self.segments_folder(kind), dim, self._source.chunks(kind), current)
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
        current = self._source.catch_up({kind: (index, self._generations.get(kind)) for kind, index in self._indexes.items()})
        self._generations.update(dict.fromkeys(self._indexes, current))

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
        current = self._source.generation()
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

    def rewrite(self, kind: VectorKind, dim: int) -> None:
        """Write one kind's saved index again from the source alone, in the form it had (segments while the source
        holds enough vectors for them, else one file), and delete every file of the old one: vectors removed from
        a saved index may stay in its files (a segment keeps a removed vector's raw bytes and codes until it is
        compacted), and its lists and codebooks were trained on them. The writer's, under the writer lock."""
        loaded = self._indexes.pop(kind, None)
        self._generations.pop(kind, None)
        if isinstance(loaded, SegmentedIndex):
            loaded.close()
        folder, path = self.segments_folder(kind), self.path(kind)
        current = self._source.generation()
        index: Index
        if (folder / STATE).is_file() and self._source.count(kind) >= MIN_VECTORS:
            index = SegmentedIndex.create(folder, dim, self._source.chunks(kind), current)
            for stale in (path, path.with_suffix(".json")):
                stale.unlink(missing_ok=True)
        else:
            index = VectorIndex(dim)
            for ids, vectors in self._source.chunks(kind):
                index.add(ids, vectors)
            index.make_approximate_if_large()
            index.save(path, current)
            if folder.exists():
                shutil.rmtree(folder)
        self._indexes[kind], self._generations[kind] = index, current

    def clear(self) -> None:
        for index in self._indexes.values():
            if isinstance(index, SegmentedIndex):
                index.close()
        self._indexes.clear()
        self._generations.clear()

