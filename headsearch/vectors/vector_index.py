"""FAISS vector index with stable int64 ids (the ids of the `vectors` table) and atomic saves."""
from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from headsearch.basics.errors import LibraryError, is_disk_full
from headsearch.basics.files import atomic_write, write_json_atomic
from headsearch.basics.quiet import native_stderr_silenced

log = logging.getLogger(__name__)


def gpu_count() -> int:
    """GPUs that faiss can use (0 with faiss-cpu)."""
    import faiss

    try:
        return faiss.get_num_gpus() if hasattr(faiss, "StandardGpuResources") else 0
    except Exception:  # a faiss-gpu build without a usable driver
        return 0


# Past this many vectors a library switches from exact search to an IVF index. The recipe (chosen by
# measurement, `headsearch bench --speed`; see docs/benchmarks.md "Search at scale"): IndexIVFFlat with
# nlist ~4 sqrt(n) lists trained by spherical k-means, holding the library's ids itself, and nprobe
# tuned on the library's own vectors to the smallest value reaching TARGET_RECALL recall@10 against
# exact search. The index is retrained (and retuned) each time the library has grown RETRAIN_GROWTH
# times past the size it was trained at.
APPROXIMATE_FROM = 200_000
TARGET_RECALL = 0.97
TUNE_QUERIES = 500
RETRAIN_GROWTH = 2
NPROBE = 16  # the starting point of the tuning ladder
NPROBE_LADDER = (16, 24, 32, 48, 64, 96, 128, 192, 256, 320, 384, 448, 512, 640, 768, 1024, 1536, 2048, 3072, 4096)


# Bytes an IndexIDMap2 spends per vector besides the vector itself: its id table (8) and its reverse
# map (an unordered_map; measured: 564 bytes per 128-d vector in all, 2026-12, faiss 1.15.1).
IDMAP2_BYTES_PER_VECTOR = 52


# Searches of fewer queries than this run on one faiss thread: a single query gains little from a
# second thread, and when the other core is busy (an index run, another program) OpenMP's threads
# wait for it: flat search of one query over 1e5 vectors took 70-95 ms with 2 threads and 3-16 ms
# with 1 on a loaded 2-core machine.
SINGLE_THREAD_BELOW = 8


@contextlib.contextmanager
def faiss_threads(n: int) -> Iterator[None]:
    """Run faiss on n threads meanwhile."""
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(n)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def search_threads(n_queries: int):
    """The threads a search of n_queries queries runs on (one below SINGLE_THREAD_BELOW, else all)."""
    return faiss_threads(1) if n_queries < SINGLE_THREAD_BELOW else contextlib.nullcontext()


def ivf_nlist(n: int) -> int:
    """Inverted lists for n vectors: ~4 sqrt(n)."""
    return max(1, round(4 * n ** 0.5))


def float32_dot_error(dim: int) -> float:
    """Worst-case rounding error of a float32 dot product of two unit vectors: gamma_d = d u / (1 - d u), u = 2^-24."""
    du = dim * 2.0 ** -24
    return du / (1.0 - du)


def build_ivf(vectors: np.ndarray, nlist: int, nprobe: int = NPROBE, seed: int = 0, train_per_list: int = 40):
    """A trained, empty IndexIVFFlat (inner product, spherical k-means on a seeded sample)."""
    import faiss

    n, dim = vectors.shape
    quantizer = faiss.IndexFlatIP(dim)
    ivf = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
    ivf.cp.seed = seed
    ivf.cp.spherical = True
    sample = np.random.default_rng(seed + 1).choice(n, size=min(n, train_per_list * nlist), replace=False)
    with native_stderr_silenced():  # faiss warns about small training sets on stderr
        ivf.train(np.ascontiguousarray(vectors[np.sort(sample)], dtype=np.float32))
    ivf.nprobe = min(nprobe, nlist)
    return ivf


@dataclass
class Tuning:
    """How nprobe was chosen: recall@k on `queries` stored vectors (each excluding itself) per nprobe tried."""

    nprobe: int
    recall: float
    queries: int
    k: int
    tried: dict[int, float]


def tune_nprobe(index, vectors: np.ndarray, ids: np.ndarray, target: float = TARGET_RECALL, queries: int = TUNE_QUERIES,
                k: int = 10, seed: int = 0) -> Tuning:
    """Set the smallest nprobe of NPROBE_LADDER (or nlist) whose recall@k against exact search reaches `target`.

    The queries are a seeded sample of the stored vectors (`vectors[i]` stored under `ids[i]`); each
    one's own entry is left out of its answers. A found vector counts when its score ties the exact
    k-th best within float32 rounding.
    """
    import faiss

    ivf = faiss.extract_index_ivf(index)
    n = len(vectors)
    k = max(1, min(k, n - 1))
    rows = np.sort(np.random.default_rng(seed + 2).choice(n, size=min(n, queries), replace=False))
    q = np.ascontiguousarray(vectors[rows], dtype=np.float32)
    exact, _ = faiss.knn(q, np.ascontiguousarray(vectors, dtype=np.float32), k + 1, metric=faiss.METRIC_INNER_PRODUCT)
    kth = exact[:, k:k + 1] - 2 * float32_dot_error(vectors.shape[1])  # the (k+1)-th counting the query itself
    own = ids[rows][:, None]
    tried: dict[int, float] = {}
    ladder = [p for p in NPROBE_LADDER if p < ivf.nlist] + [ivf.nlist]
    for nprobe in ladder:
        ivf.nprobe = nprobe
        scores, found = index.search(q, k + 1)
        hits = np.minimum(((found != own) & (found >= 0) & (scores >= kth)).sum(axis=1), k)
        tried[nprobe] = float(hits.sum() / (len(q) * k))
        if tried[nprobe] >= target:
            break
    return Tuning(int(ivf.nprobe), tried[int(ivf.nprobe)], len(q), k, tried)


def build_approximate(vectors: np.ndarray, ids: np.ndarray, seed: int = 0, target: float = TARGET_RECALL,
                      tune_queries: int = TUNE_QUERIES):
    """The library's approximate index over `vectors` stored under `ids`: a trained IndexIVFFlat
    (nlist = ivf_nlist(n)) holding the ids itself, with nprobe tuned to `target` recall@10.

    Returns (index, Tuning). Bench measures this same recipe."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    ivf = build_ivf(vectors, min(ivf_nlist(len(vectors)), len(vectors)), seed=seed)
    ivf.add_with_ids(vectors, ids)
    return ivf, tune_nprobe(ivf, vectors, ids, target, tune_queries, seed=seed)


def _ivf_contents(ivf) -> tuple[np.ndarray, np.ndarray]:
    """(ids, vectors) stored in an IndexIVFFlat, list by list."""
    import faiss

    invlists = ivf.invlists
    ids, vectors = [], []
    for list_no in range(ivf.nlist):
        size = invlists.list_size(list_no)
        if size == 0:
            continue
        ids.append(faiss.rev_swig_ptr(invlists.get_ids(list_no), size).copy())
        vectors.append(faiss.rev_swig_ptr(invlists.get_codes(list_no), size * ivf.code_size).view(np.float32).reshape(size, ivf.d).copy())
    if not ids:
        return np.empty(0, np.int64), np.empty((0, ivf.d), np.float32)
    return np.concatenate(ids).astype(np.int64), np.concatenate(vectors)


class VectorIndex:
    """Inner-product search over L2-normalised vectors, keyed by external ids: exact while small
    (IndexIDMap2 over IndexFlatIP), IVF once large (`approximate_from`; an IndexIVFFlat holding the
    ids itself, since IndexIDMap2's id table goes wrong when vectors are removed from an IVF).

    Searches run on a GPU copy when faiss-gpu sees a GPU; the CPU index stays the master copy, and
    any GPU failure (copy or search) falls back to it.
    """

    def __init__(self, dim: int):
        import faiss

        self.dim = dim
        self._index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        self._gpu = None
        self.tuning: Tuning | None = None

    def __len__(self) -> int:
        return int(self._index.ntotal)

    @property
    def kind(self) -> str:
        """"flat" (exact) or "ivf" (approximate)."""
        import faiss

        return "ivf" if isinstance(faiss.downcast_index(self._index), faiss.IndexIVF) else "flat"

    @property
    def nlist(self) -> int | None:
        return int(self._index.nlist) if self.kind == "ivf" else None

    @property
    def nprobe(self) -> int | None:
        return int(self._index.nprobe) if self.kind == "ivf" else None

    def describe(self) -> dict:
        """Kind, size and search parameters (saved beside the index)."""
        out = {"count": len(self), "dim": self.dim, "kind": self.kind}
        if self.kind == "ivf":
            out.update(nlist=self.nlist, nprobe=self.nprobe)
            if self.tuning is not None:
                out.update(tuned_recall=self.tuning.recall, tuned_queries=self.tuning.queries)
        return out

    def memory_bytes(self) -> int:
        """What the index holds in memory: its vectors, its ids (and id map), its coarse centroids."""
        n = len(self)
        if self.kind == "ivf":
            return n * (self.dim * 4 + 8) + int(self.nlist) * self.dim * 4
        return n * (self.dim * 4 + IDMAP2_BYTES_PER_VECTOR)

    @staticmethod
    def memory_bytes_for(n: int, dim: int) -> int:
        """What an exact index of n vectors would hold (see `memory_bytes`)."""
        return n * (dim * 4 + IDMAP2_BYTES_PER_VECTOR)

    def max_id(self) -> int:
        """The largest stored id (-1 when empty)."""
        ids = self.ids()
        return int(ids.max()) if len(ids) else -1

    def id_checksum(self) -> tuple[int, int]:
        """(count, sum) of the stored ids: compared with the database's to tell whether they hold the same ids."""
        ids = self.ids()
        return len(ids), int(ids.sum(dtype=np.int64)) if len(ids) else 0

    def make_approximate_if_large(self, approximate_from: int = APPROXIMATE_FROM) -> bool:
        """Rebuild as IVF (same ids) once the index holds `approximate_from` vectors, and again each
        time it has grown RETRAIN_GROWTH times since its lists were trained; True if rebuilt."""
        n = len(self)
        if n < approximate_from:
            return False
        if self.kind == "ivf" and ivf_nlist(n) ** 2 < RETRAIN_GROWTH * self.nlist ** 2:
            return False
        ids, vectors = self.contents()
        self._index, self.tuning = build_approximate(vectors, ids)
        self._gpu = None
        log.info("vector index rebuilt as IVF at %d vectors: nlist %d, nprobe %d (recall@%d %.3f on %d of its vectors)",
                 n, self.nlist, self.nprobe, self.tuning.k, self.tuning.recall, self.tuning.queries)
        return True

    def contents(self) -> tuple[np.ndarray, np.ndarray]:
        """All stored (ids, vectors)."""
        if self.kind == "ivf":
            return _ivf_contents(self._index)
        return self.ids(), self._index.index.reconstruct_n(0, len(self))

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Add vectors under the given ids."""
        if len(ids) == 0:
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.shape[1] != self.dim:
            raise ValueError(f"vector dimension {vectors.shape[1]} != index dimension {self.dim}")
        self._index.add_with_ids(vectors, np.ascontiguousarray(ids, dtype=np.int64))
        self._gpu = None

    def remove(self, ids: np.ndarray) -> int:
        """Remove vectors by id; returns how many were removed."""
        import faiss

        if len(ids) == 0:
            return 0
        self._gpu = None
        return int(self._index.remove_ids(faiss.IDSelectorBatch(np.ascontiguousarray(ids, dtype=np.int64))))

    def ids(self) -> np.ndarray:
        """All stored ids."""
        import faiss

        if self.kind == "ivf":
            invlists = self._index.invlists
            parts = [faiss.rev_swig_ptr(invlists.get_ids(i), invlists.list_size(i)).copy()
                     for i in range(self._index.nlist) if invlists.list_size(i)]
            return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, np.int64)
        return faiss.vector_to_array(self._index.id_map).astype(np.int64)

    def _searcher(self):
        if self._gpu is None and len(self) > 0 and gpu_count() > 0:
            import faiss

            try:
                self._gpu = faiss.index_cpu_to_all_gpus(self._index)
            except Exception as e:  # fall back to the CPU index
                log.warning("faiss GPU search unavailable, using the CPU: %s", e)
                self._gpu = False
        return self._gpu or self._index

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, ids) per query; missing slots have id -1."""
        queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        k = max(1, min(k, len(self)))
        if len(self) == 0:
            return np.full((len(queries), k), -np.inf, np.float32), np.full((len(queries), k), -1, np.int64)
        searcher = self._searcher()
        if searcher is not self._index:
            try:
                return searcher.search(queries, k)
            except Exception as e:  # e.g. GPU memory, or an nprobe or k past what the GPU allows
                log.warning("faiss GPU search failed, using the CPU: %s", e)
                self._gpu = False
        with search_threads(len(queries)):
            return self._index.search(queries, k)

    def write(self, path: Path) -> None:
        """Write the index file alone, atomically (`load` reads it back with generation -1)."""
        import faiss

        def write(tmp: Path) -> None:
            with native_stderr_silenced():
                faiss.write_index(self._index, str(tmp))

        atomic_write(path, write)

    def save(self, path: Path, generation: int) -> None:
        """Write the index and the library generation it reflects, atomically."""
        try:
            self.write(path)
        except (RuntimeError, OSError) as e:
            reason = "disk full" if is_disk_full(e) else str(e).splitlines()[-1]
            raise LibraryError(f"{path}: cannot save the vector index ({reason}); it will be rebuilt from the database") from e
        write_json_atomic(path.with_suffix(".json"), {"generation": generation, **self.describe()}, indent=None)

    @classmethod
    def load(cls, path: Path) -> tuple[VectorIndex, int]:
        """An index and the generation it was saved at (-1 when its state file is missing, or when
        the file holds an index to rebuild: then the index comes back empty)."""
        import faiss

        index = cls.__new__(cls)
        index._index = faiss.read_index(str(path))
        index.dim = index._index.d
        index._gpu = None
        index.tuning = None
        if isinstance(index._index, faiss.IndexIDMap2) and isinstance(faiss.downcast_index(index._index.index), faiss.IndexIVF):
            # Written by headsearch 0.1.0: after a removal its id table no longer matches its vectors.
            log.warning("%s: an IVF index of an older headsearch, rebuilding it from the database", path)
            return cls(index.dim), -1
        state = path.with_suffix(".json")
        try:
            saved = json.loads(state.read_text())
            generation = int(saved["generation"])
        except (OSError, ValueError, KeyError, TypeError):
            return index, -1
        if index.kind == "ivf" and "tuned_recall" in saved:
            index.tuning = Tuning(index.nprobe, float(saved["tuned_recall"]), int(saved.get("tuned_queries", 0)), 10, {})
        return index, generation
