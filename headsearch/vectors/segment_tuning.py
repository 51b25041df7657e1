"""nprobe for `headsearch.vectors.segments.SegmentedIndex`: every list while its codes are small, else the smallest
nprobe whose recall@10 on the store's own vectors against exact search reaches the recipe's target."""
from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from headsearch.vectors.segment_files import member
from headsearch.vectors.vector_index import float32_dot_error


class SegmentedIndex(Protocol):
    """What the tuner reads and sets of `headsearch.vectors.segments.SegmentedIndex` (named, not imported: the index
    imports the tuner)."""

    recipe: Any
    nlist: int
    nprobe: int
    tuning: dict
    dim: int
    folder: Path
    _codec: Any
    _segments: list
    _removed: np.ndarray

    def _segment_count(self) -> int: ...

    def _search_segments(self, queries: np.ndarray, k: int, nprobe: int) -> tuple[np.ndarray, np.ndarray]: ...

    def _vectors_of(self, ids: np.ndarray, segments: list) -> np.ndarray: ...

    def _live_chunks(self, segments: list, with_tail: bool = True) -> Iterator[tuple[np.ndarray, np.ndarray]]: ...

log = logging.getLogger("headsearch.vectors.segments")  # the segments' messages keep the name they had before the split

# nprobe values tried when tuning: 16 x 2^(i/4), finer than the in-memory IVF's ladder where a step costs
# most (at 1e7 the stand-alone index took 41 ms a query at nprobe 2048 and 71 ms at 4096 on 2 cores)
NPROBE_LADDER = tuple(round(16 * 2 ** (i / 4)) for i in range(64))


def tune(store: SegmentedIndex) -> None:
    """Set the store's nprobe and tuning: every list while the codes are small (the answers of exact search),
    else the smallest of NPROBE_LADDER whose recall@10 on `tune_queries` of the store's own vectors (each
    leaving itself out) against exact search reaches target_recall (found by bisection: recall grows with nprobe)."""
    r = store.recipe
    n = store._segment_count()
    if store._codec is None or n == 0:
        return
    if n * store._codec.code_size <= r.full_scan_bytes:
        store.nprobe, store.tuning = store.nlist, {"full_scan": True, "at": n}
        return
    if store.tuning.get("at") and not store.tuning.get("full_scan") and n < 2 * store.tuning["at"] and \
            store.tuning.get("nlist") == store.nlist:
        return  # tuned at this size already (again each time the segments have doubled)
    k = 10
    queries, own = sample_queries(store, min(r.tune_queries, n))
    kth = exact_kth(store, queries, k + 1) - 2 * float32_dot_error(store.dim)
    ladder = [p for p in NPROBE_LADDER if p < store.nlist] + [store.nlist]
    tried: dict[int, float] = {}

    def recall(nprobe: int) -> float:
        if nprobe not in tried:
            scores, found = store._search_segments(queries, k + 1, nprobe)
            hits = np.minimum(((found != own[:, None]) & (found >= 0) & (scores >= kth[:, None])).sum(axis=1), k)
            tried[nprobe] = float(hits.sum() / (len(queries) * k))
        return tried[nprobe]

    lo, hi = 0, len(ladder) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if recall(ladder[mid]) >= r.target_recall:
            hi = mid
        else:
            lo = mid + 1
    store.nprobe = ladder[lo]
    store.tuning = {"recall": recall(store.nprobe), "queries": len(queries), "at": n, "nlist": store.nlist,
                    "tried": {str(p): v for p, v in sorted(tried.items())}}
    log.info("vector segments %s: nprobe %d of %d lists (recall@%d %.3f on %d of its vectors)", store.folder.name,
             store.nprobe, store.nlist, k, store.tuning["recall"], len(queries))


def sample_queries(store: SegmentedIndex, count: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded sample of the segments' live vectors and their ids."""
    ids = np.concatenate([np.asarray(s.ids)[~member(np.asarray(s.ids), store._removed)] for s in store._segments])
    chosen = np.sort(np.random.default_rng(store.recipe.seed + 2).choice(ids, size=count, replace=False))
    return store._vectors_of(chosen, store._segments), chosen


def exact_kth(store: SegmentedIndex, queries: np.ndarray, k: int) -> np.ndarray:
    """The exact k-th best score of each query over the segments' live vectors (chunked brute force)."""
    import faiss

    best = np.full((len(queries), k), -np.inf, np.float32)
    for _, vectors in store._live_chunks(store._segments, with_tail=False):
        scores, _ = faiss.knn(queries, vectors, min(k, len(vectors)), metric=faiss.METRIC_INNER_PRODUCT)
        best = -np.sort(-np.concatenate([best, scores], axis=1), axis=1)[:, :k]
    return best[:, k - 1]
