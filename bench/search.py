"""Search speed: synthetic, seeded, clustered unit vectors searched with an exact FAISS index
(IndexFlatIP), the library's approximate one (IndexIVFFlat with its tuned nprobe), HNSW, a stand-alone
IVF-PQ index with on-disk inverted lists and the library's own store past memory (on-disk segments;
both `bench.ondisk`), measured against exact float64 search."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from headsearch.basics.errors import HeadsearchError
from headsearch.models import l2_normalise
from headsearch.vectors.vector_index import build_approximate, float32_dot_error, ivf_nlist, search_threads

SYNTHETIC_PER_CLUSTER = 100  # vectors per synthetic person
# Noise norm relative to the centre: same-cluster pairs at cosine ~ 1/(1+1^2) = 0.5 and other pairs at
# 0 +- 1/sqrt(dim), roughly ArcFace's genuine/impostor similarities. Larger spreads overlap the
# clusters and cost IVF recall (1.5: 0.98 at 1e5, 0.37 at 1e6 with nprobe 16).
SYNTHETIC_SPREAD = 1.0


class Synthetic:
    """Seeded, clustered unit vectors, drawn in chunks (a library of people).

    ``n // per_cluster`` random unit centres, each vector a centre plus isotropic noise of expected
    norm ``spread`` (cosine to its centre ~ 1/sqrt(1+spread^2), two vectors of one cluster
    ~ 1/(1+spread^2)). Draw the stored vectors first, then the queries, from the same clusters.
    """

    CHUNK = 1 << 16

    def __init__(self, n: int, dim: int = 128, seed: int = 0, per_cluster: int = SYNTHETIC_PER_CLUSTER,
                 spread: float = SYNTHETIC_SPREAD):
        self.rng = np.random.default_rng(seed)
        self.n_clusters = max(1, n // per_cluster)
        self.dim = dim
        self.centres = l2_normalise(self.rng.standard_normal((self.n_clusters, dim), dtype=np.float32))
        self.sigma = np.float32(spread / math.sqrt(dim))

    def chunks(self, count: int):
        """`count` vectors, in chunks of at most CHUNK rows."""
        for start in range(0, count, self.CHUNK):
            size = min(count, start + self.CHUNK) - start
            labels = self.rng.integers(0, self.n_clusters, size)
            yield l2_normalise(self.centres[labels] + self.sigma * self.rng.standard_normal((size, self.dim), dtype=np.float32))

    def draw(self, count: int) -> np.ndarray:
        out = np.empty((count, self.dim), np.float32)
        start = 0
        for chunk in self.chunks(count):
            out[start:start + len(chunk)] = chunk
            start += len(chunk)
        return out


def synthetic_vectors(n: int, n_queries: int, dim: int = 128, seed: int = 0, per_cluster: int = SYNTHETIC_PER_CLUSTER,
                      spread: float = SYNTHETIC_SPREAD) -> tuple[np.ndarray, np.ndarray]:
    """n stored vectors and n_queries queries of `Synthetic`."""
    synthetic = Synthetic(n, dim, seed, per_cluster, spread)
    return synthetic.draw(n), synthetic.draw(n_queries)


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


@dataclass(frozen=True)
class OnDiskRecipe:
    """The on-disk index's parameters (defaults chosen by measurement at 1e7, see README)."""

    nlist: int | None = None  # None: ~4 sqrt(n), as the library's IVF
    pq_bytes: int = 32  # PQ sub-quantizers of 8 bits: bytes per stored vector (plus an 8-byte id)
    nprobe: tuple[int, ...] = (2048,)
    rerank: int = 100  # shortlist re-ranked exactly from the raw vectors (0: PQ scores only)
    shard: int = 1_000_000
    train_per_list: int = 30
    kmeans_iterations: int = 10

    def lists(self, n: int) -> int:
        return min(n, self.nlist or ivf_nlist(n))


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
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"vectors": self.n, "index": self.index, "p50_ms": self.p50_ms, "p95_ms": self.p95_ms,
                f"recall_at_{self.k}": self.recall_at_k, "memory_mb": self.memory_bytes / 1e6, "dim": self.dim,
                "params": self.params, "build_s": self.build_s, "batch_qps": self.batch_qps, "k": self.k,
                "queries": self.queries, "threads": self.threads, **self.extra}

    def label(self) -> str:
        """The index and its parameters, for a table."""
        p = self.params
        if self.index == "flat":
            return "flat (exact)"
        if self.index == "ivf":
            return f"ivf (nlist {p['nlist']}, nprobe {p['nprobe']} tuned)"
        if self.index == "hnsw":
            return f"hnsw (M {p['M']}, efSearch {p['efSearch']})"
        if self.index == "library":
            return (f"library segments (nlist {p['nlist']}, nprobe {p['nprobe']} tuned, PQ {p['pq_bytes']} B, re-rank k+{p['rerank']}, "
                    f"{p['segments']} segments)")
        rerank = f", re-rank {p['rerank']}" if p.get("rerank") else ""
        return f"{self.index} (nlist {p['nlist']}, nprobe {p['nprobe']}, PQ {p['pq_bytes']} B{rerank})"


def index_bytes(index) -> int:
    """Size of a faiss index in memory, taken as the size of its serialisation."""
    import faiss

    return int(faiss.serialize_index(index).nbytes)


def single_query_latencies(search, queries: np.ndarray) -> list[float]:
    """Seconds per query, one query at a time, on the threads the library searches one query with."""
    latencies = []
    with search_threads(1):
        for q in queries:
            t0 = time.perf_counter()
            search(q[None, :])
            latencies.append(time.perf_counter() - t0)
    return latencies


def _measure(name: str, index, params: dict, build_s: float, db: np.ndarray, queries: np.ndarray, truth: np.ndarray,
             kth: np.ndarray, k: int, latency_queries: int) -> SearchSpeed:
    import faiss

    latencies = single_query_latencies(lambda q: index.search(q, k), queries[:latency_queries])
    t0 = time.perf_counter()
    _, found = index.search(queries, k)
    batch_s = time.perf_counter() - t0
    return SearchSpeed(name, int(index.ntotal), int(index.d), params, build_s,
                       float(np.percentile(latencies, 50) * 1e3), float(np.percentile(latencies, 95) * 1e3),
                       len(queries) / batch_s if batch_s > 0 else float("inf"),
                       recall_at_k(found, truth, db, queries, kth), k, index_bytes(index), len(queries),
                       faiss.omp_get_max_threads())


IN_MEMORY = ("flat", "ivf", "hnsw")
ON_DISK = ("ivfpq-ondisk", "library")
INDEXES = IN_MEMORY + ON_DISK
HNSW_M, HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH = 32, 40, 64


@dataclass(frozen=True)
class SearchPlan:
    """What the search benchmark measures: each index at each size, over seeded synthetic vectors."""

    sizes: tuple[int, ...] = (10_000, 100_000, 1_000_000)  # stored vector counts
    indexes: tuple[str, ...] = ("flat", "ivf")  # names of INDEXES
    dim: int = 128  # dimension of the synthetic vectors
    queries: int = 1000  # queries per size (recall and batch speed over all of them)
    latency_queries: int = 200  # the first queries, searched one at a time for p50/p95
    k: int = 10  # neighbours per query (recall@k)
    seed: int = 0  # seed of the synthetic vectors
    recipe: OnDiskRecipe | None = None  # ivfpq-ondisk's parameters (None: OnDiskRecipe's defaults)
    work_dir: Path | None = None  # ivfpq-ondisk's files, kept so a rerun resumes (None: a temporary folder)


def search_speed(n: int, plan: SearchPlan) -> list[SearchSpeed]:
    """The plan's in-memory indexes over n synthetic clustered vectors: exact (IndexFlatIP), the library's
    approximate recipe (`headsearch.vectors.vector_index.build_approximate`), HNSW (not used by the library:
    it cannot remove vectors)."""
    import faiss

    dim, k, indexes, latency_queries = plan.dim, plan.k, plan.indexes, plan.latency_queries
    db, queries = synthetic_vectors(n, plan.queries, dim, plan.seed)
    truth, kth = exact_top_k(db, queries, k)
    results = []
    if "flat" in indexes:
        t0 = time.perf_counter()
        flat = faiss.IndexFlatIP(dim)
        flat.add(db)
        results.append(_measure("flat", flat, {}, time.perf_counter() - t0, db, queries, truth, kth, k, latency_queries))
        del flat
    if "ivf" in indexes:
        t0 = time.perf_counter()
        ivf, tuning = build_approximate(db, np.arange(n, dtype=np.int64), plan.seed)  # the library's own recipe
        params = {"nlist": int(ivf.nlist), "nprobe": int(ivf.nprobe), "tuned_recall": tuning.recall,
                  "tuned_on": tuning.queries, "tried": {str(p): r for p, r in tuning.tried.items()}}
        results.append(_measure("ivf", ivf, params, time.perf_counter() - t0, db, queries, truth, kth, k, latency_queries))
        del ivf
    if "hnsw" in indexes:
        t0 = time.perf_counter()
        hnsw = faiss.IndexHNSWFlat(dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        hnsw.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        hnsw.add(db)
        hnsw.hnsw.efSearch = HNSW_EF_SEARCH
        params = {"M": HNSW_M, "efConstruction": HNSW_EF_CONSTRUCTION, "efSearch": HNSW_EF_SEARCH}
        results.append(_measure("hnsw", hnsw, params, time.perf_counter() - t0, db, queries, truth, kth, k, latency_queries))
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


def check_memory(n: int, dim: int, indexes: tuple[str, ...]) -> None:
    """Refuse sizes whose in-memory benchmark would not fit in the memory available now."""
    try:
        with open("/proc/meminfo") as f:
            available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return
    # the vectors, the index's copy, exact-search scores and serialising the index to measure it
    need = n * dim * 4 * (2 + len(indexes)) + n * 8 * len(indexes)
    if need > available:
        raise HeadsearchError(f"search at {n:,} vectors in memory ({', '.join(indexes)}) needs about {need / 1e9:.1f} GB, "
                              f"{available / 1e9:.1f} GB is available: measure that size with --index library or ivfpq-ondisk")


def parse_indexes(text: str) -> tuple[str, ...]:
    """'flat,ivf' -> ('flat', 'ivf'), each checked."""
    names = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    unknown = [name for name in names if name not in INDEXES]
    if unknown or not names:
        raise HeadsearchError(f"--index: {', '.join(unknown) or 'nothing'} is not one of {', '.join(INDEXES)}")
    return names
