"""Search speed: synthetic, seeded, clustered unit vectors searched with an exact FAISS index
(IndexFlatIP) and the library's approximate one (IndexIVFFlat), measured against exact float64 search."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from headsearch.embedders import l2_normalise
from headsearch.errors import HeadsearchError
from headsearch.vector_index import NPROBE, build_ivf, ivf_nlist

SYNTHETIC_PER_CLUSTER = 100  # vectors per synthetic person
# Noise norm relative to the centre: same-cluster pairs at cosine ~ 1/(1+1^2) = 0.5 and other pairs at
# 0 +- 1/sqrt(dim), roughly ArcFace's genuine/impostor similarities. Larger spreads overlap the
# clusters and cost IVF recall (1.5: 0.98 at 1e5, 0.37 at 1e6 with nprobe 16).
SYNTHETIC_SPREAD = 1.0


def synthetic_vectors(n: int, n_queries: int, dim: int = 128, seed: int = 0, per_cluster: int = SYNTHETIC_PER_CLUSTER,
                      spread: float = SYNTHETIC_SPREAD) -> tuple[np.ndarray, np.ndarray]:
    """Seeded, clustered unit vectors and queries drawn from the same clusters.

    Like a library of people: ``n // per_cluster`` random unit centres, each vector a centre plus
    isotropic noise of expected norm ``spread`` (cosine to its centre ~ 1/sqrt(1+spread^2), two
    vectors of one cluster ~ 1/(1+spread^2)).
    """
    rng = np.random.default_rng(seed)
    n_clusters = max(1, n // per_cluster)
    centres = l2_normalise(rng.standard_normal((n_clusters, dim), dtype=np.float32))
    sigma = np.float32(spread / math.sqrt(dim))

    def draw(count: int) -> np.ndarray:
        out = np.empty((count, dim), np.float32)
        for start in range(0, count, 1 << 16):
            stop = min(count, start + (1 << 16))
            labels = rng.integers(0, n_clusters, stop - start)
            out[start:stop] = l2_normalise(centres[labels] + sigma * rng.standard_normal((stop - start, dim), dtype=np.float32))
        return out

    return draw(n), draw(n_queries)


def exact_top_k(db: np.ndarray, queries: np.ndarray, k: int, chunk: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k ids by inner product (float32 shortlist, rescored in float64) and the k-th best score."""
    k = min(k, len(db))
    extra = min(len(db), k + 32)
    ids = np.empty((len(queries), k), np.int64)
    kth = np.empty(len(queries), np.float64)
    for start in range(0, len(queries), chunk):
        q = queries[start:start + chunk]
        scores = q @ db.T
        cand = np.argpartition(-scores, extra - 1, axis=1)[:, :extra] if extra < len(db) else np.tile(np.arange(len(db)), (len(q), 1))
        exact = np.einsum("qd,qcd->qc", q.astype(np.float64), db[cand].astype(np.float64))
        order = np.argsort(-exact, axis=1, kind="stable")[:, :k]
        ids[start:start + chunk] = np.take_along_axis(cand, order, axis=1)
        kth[start:start + chunk] = np.take_along_axis(exact, order[:, -1:], axis=1)[:, 0]
    return ids, kth


def float32_dot_error(dim: int) -> float:
    """Worst-case rounding error of a float32 dot product of two unit vectors: gamma_d = d u / (1 - d u), u = 2^-24."""
    du = dim * 2.0 ** -24
    return du / (1.0 - du)


def recall_at_k(found: np.ndarray, truth: np.ndarray, db: np.ndarray, queries: np.ndarray, kth: np.ndarray) -> float:
    """Share of the true top-k found.

    A found vector outside the true top-k still counts when its exact score ties the true k-th
    best within float32 rounding (an index computing in float32 cannot order such near-ties).
    """
    k = truth.shape[1]
    tolerance = float32_dot_error(db.shape[1])
    hits = 0
    for q in range(len(found)):
        f = found[q][found[q] >= 0][:k]
        inside = np.isin(f, truth[q])
        if not inside.all():
            outside = f[~inside]
            exact = db[outside].astype(np.float64) @ queries[q].astype(np.float64)
            inside[~inside] = exact >= kth[q] - tolerance
        hits += int(inside.sum())
    return hits / (len(found) * k)


@dataclass
class SearchSpeed:
    """One index type at one size."""

    index: str
    n: int
    dim: int
    params: dict
    build_s: float
    p50_ms: float
    p95_ms: float
    batch_qps: float
    recall_at_k: float
    k: int
    memory_bytes: int
    queries: int
    threads: int

    def to_dict(self) -> dict:
        return {"index": self.index, "n": self.n, "dim": self.dim, "params": self.params, "build_s": self.build_s,
                "p50_ms": self.p50_ms, "p95_ms": self.p95_ms, "batch_qps": self.batch_qps,
                f"recall@{self.k}": self.recall_at_k, "memory_bytes": self.memory_bytes,
                "queries": self.queries, "threads": self.threads}


def _index_bytes(index) -> int:
    import faiss

    return int(faiss.serialize_index(index).nbytes)


def _measure(name: str, index, params: dict, build_s: float, db: np.ndarray, queries: np.ndarray, truth: np.ndarray,
             kth: np.ndarray, k: int, latency_queries: int) -> SearchSpeed:
    import faiss

    latencies = []
    for q in queries[:latency_queries]:
        t0 = time.perf_counter()
        index.search(q[None, :], k)
        latencies.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    _, found = index.search(queries, k)
    batch_s = time.perf_counter() - t0
    return SearchSpeed(name, int(index.ntotal), int(index.d), params, build_s,
                       float(np.percentile(latencies, 50) * 1e3), float(np.percentile(latencies, 95) * 1e3),
                       len(queries) / batch_s if batch_s > 0 else float("inf"),
                       recall_at_k(found, truth, db, queries, kth), k, _index_bytes(index), len(queries),
                       faiss.omp_get_max_threads())


def search_speed(n: int, dim: int = 128, seed: int = 0, n_queries: int = 1000, latency_queries: int = 200, k: int = 10,
                 nprobe: int = NPROBE, train_per_list: int = 40) -> list[SearchSpeed]:
    """Exact (IndexFlatIP) and approximate (IndexIVFFlat) search over n synthetic clustered vectors."""
    import faiss

    db, queries = synthetic_vectors(n, n_queries, dim, seed)
    truth, kth = exact_top_k(db, queries, k)
    results = []
    t0 = time.perf_counter()
    flat = faiss.IndexFlatIP(dim)
    flat.add(db)
    results.append(_measure("flat", flat, {}, time.perf_counter() - t0, db, queries, truth, kth, k, latency_queries))
    del flat
    nlist = ivf_nlist(n)
    t0 = time.perf_counter()
    ivf = build_ivf(db, nlist, nprobe, seed, train_per_list)  # the library's own IVF recipe
    ivf.add(db)
    params = {"nlist": nlist, "nprobe": int(ivf.nprobe), "trained_on": int(min(n, train_per_list * nlist))}
    results.append(_measure("ivf", ivf, params, time.perf_counter() - t0, db, queries, truth, kth, k, latency_queries))
    return results


def parse_sizes(text: str) -> list[int]:
    """'1e4,1e5' -> [10000, 100000]."""
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = float(part)
        except ValueError:
            raise HeadsearchError(f"--sizes: {part!r} is not a number (e.g. --sizes 1e4,1e5)") from None
        if value != int(value) or value < 1:
            raise HeadsearchError(f"--sizes: {part!r} is not a positive whole number")
        sizes.append(int(value))
    if not sizes:
        raise HeadsearchError("--sizes: give at least one size (e.g. --sizes 1e4,1e5)")
    return sizes
