"""FAISS vector index with stable int64 ids (the ids of the `vectors` table) and atomic saves."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from headsearch.errors import LibraryError, is_disk_full
from headsearch.files import atomic_write, write_json_atomic
from headsearch.quiet import native_stderr_silenced

log = logging.getLogger(__name__)


def gpu_count() -> int:
    """GPUs that faiss can use (0 with faiss-cpu)."""
    import faiss

    try:
        return faiss.get_num_gpus() if hasattr(faiss, "StandardGpuResources") else 0
    except Exception:  # a faiss-gpu build without a usable driver
        return 0


# Past this many vectors a library switches from exact search to an IVF index (recall@10 against
# exact search is measured by `headsearch bench --speed`: 1.00 at 1e5, 0.83 at 1e6 with nprobe 16).
APPROXIMATE_FROM = 200_000
NPROBE = 16


def ivf_nlist(n: int) -> int:
    """Inverted lists for n vectors: ~4 sqrt(n)."""
    return max(1, round(4 * n ** 0.5))


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


class VectorIndex:
    """Inner-product search over L2-normalised vectors, keyed by external ids: exact while small,
    IVF once large (`approximate_from`).

    Searches run on a GPU copy when faiss-gpu sees a GPU; the CPU index stays the master copy.
    """

    def __init__(self, dim: int):
        import faiss

        self.dim = dim
        self._index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        self._gpu = None

    def __len__(self) -> int:
        return int(self._index.ntotal)

    @property
    def kind(self) -> str:
        """"flat" (exact) or "ivf" (approximate)."""
        import faiss

        return "ivf" if isinstance(faiss.downcast_index(self._index.index), faiss.IndexIVF) else "flat"

    def make_approximate_if_large(self, approximate_from: int = APPROXIMATE_FROM, nprobe: int = NPROBE) -> bool:
        """Rebuild as IVF (same ids) once the index holds `approximate_from` vectors; True if rebuilt."""
        import faiss

        if self.kind != "flat" or len(self) < approximate_from:
            return False
        ids = self.ids()
        vectors = self._index.index.reconstruct_n(0, len(self))
        ivf = build_ivf(vectors, ivf_nlist(len(self)), nprobe)
        index = faiss.IndexIDMap2(ivf)
        index.add_with_ids(vectors, ids)
        self._index, self._gpu = index, None
        log.info("vector index switched to IVF (nlist %d, nprobe %d) at %d vectors", ivf.nlist, ivf.nprobe, len(self))
        return True

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

        return faiss.vector_to_array(self._index.id_map).astype(np.int64)

    def _searcher(self):
        if self._gpu is None and gpu_count() > 0 and len(self) > 0:
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
        scores, ids = self._searcher().search(queries, k)
        return scores, ids

    def save(self, path: Path, generation: int) -> None:
        """Write the index and the library generation it reflects, atomically."""
        import faiss

        def write(tmp: Path) -> None:
            with native_stderr_silenced():
                faiss.write_index(self._index, str(tmp))

        try:
            atomic_write(path, write)
        except (RuntimeError, OSError) as e:
            reason = "disk full" if is_disk_full(e) else str(e).splitlines()[-1]
            raise LibraryError(f"{path}: cannot save the vector index ({reason}); it will be rebuilt from the database") from e
        write_json_atomic(path.with_suffix(".json"), {"generation": generation, "count": len(self), "dim": self.dim}, indent=None)

    @classmethod
    def load(cls, path: Path) -> tuple[VectorIndex, int]:
        """An index and the generation it was saved at (-1 when its state file is missing)."""
        import faiss

        index = cls.__new__(cls)
        index._index = faiss.read_index(str(path))
        index.dim = index._index.d
        index._gpu = None
        state = path.with_suffix(".json")
        try:
            generation = int(json.loads(state.read_text())["generation"])
        except (OSError, ValueError, KeyError):
            generation = -1
        return index, generation
