"""The vector store's cache (`headsearch.vectors.index_cache.IndexCache`) on a source of plain arrays, no database:
an index is caught up with its source once when loaded and when the source's generation moves, saved with that
generation and reopened without catching up, moved to on-disk segments past the memory budget, and rebuilt from
the source when its segments are damaged."""
from __future__ import annotations

import numpy as np

from headsearch.vectors import index_cache
from headsearch.vectors.index_cache import IndexCache
from headsearch.vectors.segments import SegmentedIndex
from headsearch.vectors.vector_index import VectorIndex
from schemas.records import VectorKind

DIM = 16


class ArraySource:
    """A `VectorSource` of one kind's ids and vectors in memory, with a generation moved by hand."""

    def __init__(self, n: int):
        rng = np.random.default_rng(0)
        vectors = rng.standard_normal((n, DIM)).astype(np.float32)
        self.vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        self.ids = np.arange(1, n + 1, dtype=np.int64)
        self.at = 0
        self.caught_up: list[VectorKind] = []

    def remove(self, ids: np.ndarray) -> None:
        keep = ~np.isin(self.ids, ids)
        self.ids, self.vectors = self.ids[keep], self.vectors[keep]
        self.at += 1

    def generation(self) -> int:
        return self.at

    def count(self, kind: VectorKind) -> int:
        return len(self.ids)

    def chunks(self, kind: VectorKind):
        yield self.ids, self.vectors

    def catch_up(self, indexes) -> int:
        for kind, (index, reflected) in indexes.items():
            if reflected != self.at:
                self.caught_up.append(kind)
                if len(index):
                    index.remove(index.ids())
                index.add(self.ids, self.vectors)
        return self.at


def test_an_index_is_caught_up_with_its_source_saved_and_reopened(tmp_path):
    source = ArraySource(20)
    cache = IndexCache(tmp_path, source, writable=True)
    index = cache.load(VectorKind.ID, DIM)
    assert isinstance(index, VectorIndex) and np.array_equal(np.sort(index.ids()), source.ids)
    assert cache.load(VectorKind.ID, DIM) is index and source.caught_up == [VectorKind.ID]  # loaded once
    cache.save()
    assert cache.path(VectorKind.ID).is_file()

    again = IndexCache(tmp_path, source)
    assert np.array_equal(np.sort(again.load(VectorKind.ID, DIM).ids()), source.ids)
    assert source.caught_up == [VectorKind.ID]  # saved at the source's generation: nothing to catch up
    source.remove(source.ids[:5])
    again.refresh()
    assert source.caught_up == [VectorKind.ID] * 2
    assert np.array_equal(np.sort(again.load(VectorKind.ID, DIM).ids()), source.ids)


def test_past_the_budget_a_kind_moves_to_segments_and_damaged_ones_are_rebuilt_from_the_source(tmp_path, monkeypatch):
    source = ArraySource(200)
    monkeypatch.setattr(index_cache, "vector_memory_budget", lambda: 0)
    cache = IndexCache(tmp_path, source, writable=True)
    cache.load(VectorKind.ID, DIM)
    cache.save()
    cache.clear()
    folder = cache.segments_folder(VectorKind.ID)
    assert not cache.path(VectorKind.ID).exists() and folder.is_dir()
    stored = IndexCache(tmp_path, source).load(VectorKind.ID, DIM)
    assert isinstance(stored, SegmentedIndex) and np.array_equal(np.sort(stored.ids()), source.ids)
    stored.close()

    codes = next(folder.glob("*.ivfdata"))
    codes.write_bytes(codes.read_bytes()[:-8])  # cut short
    rebuilt = IndexCache(tmp_path, source, writable=True).load(VectorKind.ID, DIM)
    assert isinstance(rebuilt, SegmentedIndex) and np.array_equal(np.sort(rebuilt.ids()), source.ids)
    assert not codes.exists()
    rebuilt.close()
