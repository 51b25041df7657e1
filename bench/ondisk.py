"""Search beyond memory: an IVF-PQ index whose inverted lists live on disk (faiss contrib's on-disk
merge), with the raw vectors kept on disk to re-rank a shortlist exactly.

Built the way an archive too large for memory would be: the synthetic vectors are generated in
chunks into a raw float32 file; exact ground truth comes from chunked brute force over that file; the
IVF-PQ index is trained on a sample, filled shard by shard (one shard in memory at a time) and its
shards merged into one `.ivfdata` file of inverted lists. Each configuration is then searched in a
fresh process whose resident memory is read from /proc. The index's files are first dropped from the
page cache: the first 20 queries read from disk ("cold"), the next ones (p50/p95) find part of what
they need cached, and the same queries again find all of it cached ("cached").

With a work folder every stage is kept and a rerun resumes after the last finished one (vectors,
ground truth, training, each shard, the merge). The library itself does not use this index yet.
"""
from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.search import SearchPlan, SearchSpeed, Synthetic, recall_at_k, single_query_latencies
from headsearch.basics.errors import HeadsearchError
from headsearch.basics.files import atomic_write, write_json_atomic
from headsearch.basics.quiet import native_stderr_silenced, native_stdout_silenced
from headsearch.store.vector_index import ivf_nlist


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


def _progress(total: int, desc: str, unit: str, show: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, disable=None if show else True, leave=False)


def _rows(path: Path, start: int, stop: int, dim: int) -> np.ndarray:
    """Rows [start, stop) of a raw float32 file, read (not mapped)."""
    with open(path, "rb") as f:
        return np.fromfile(f, dtype=np.float32, count=(stop - start) * dim, offset=start * dim * 4).reshape(-1, dim)


def _write_index(index, path: Path) -> None:
    import faiss

    atomic_write(path, lambda tmp: faiss.write_index(index, str(tmp)), fsync=False)


def _write_npy(path: Path, **arrays: np.ndarray) -> None:
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            if len(arrays) == 1:
                np.save(f, next(iter(arrays.values())))
            else:
                np.savez(f, **arrays)

    atomic_write(path, write, fsync=False)


class RowFile:
    """Rows of a raw float32 file by index, read with pread: nothing is mapped into this process (a
    memory map of a few scattered rows maps whole runs of pages around each)."""

    def __init__(self, path: Path, n: int, dim: int):
        self.path, self.shape = Path(path), (n, dim)

    def __getitem__(self, rows) -> np.ndarray:
        rows = np.atleast_1d(np.asarray(rows, dtype=np.int64))
        size = self.shape[1] * 4
        fd = os.open(self.path, os.O_RDONLY)
        try:
            raw = b"".join(os.pread(fd, size, int(r) * size) for r in rows)
        finally:
            os.close(fd)
        return np.frombuffer(raw, np.float32).reshape(len(rows), self.shape[1])


def _sample(path: Path, n: int, dim: int, rows: np.ndarray, block: int = 1 << 18) -> np.ndarray:
    """The given sorted rows, read block by block."""
    out = np.empty((len(rows), dim), np.float32)
    for start in range(0, n, block):
        lo, hi = np.searchsorted(rows, [start, start + block])
        if hi > lo:
            out[lo:hi] = _rows(path, start, min(n, start + block), dim)[rows[lo:hi] - start]
    return out


def make_vectors(folder: Path, n: int, n_queries: int, dim: int, seed: int, show: bool) -> tuple[Path, Path]:
    """`vectors.f32` (n x dim float32, written chunk by chunk) and `queries.npy` of `Synthetic`."""
    vectors, queries = folder / "vectors.f32", folder / "queries.npy"
    if vectors.is_file() and queries.is_file():
        return vectors, queries
    synthetic = Synthetic(n, dim, seed)

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f, _progress(n, "vectors", "vec", show) as bar:
            for chunk in synthetic.chunks(n):
                f.write(chunk.tobytes())
                bar.update(len(chunk))

    atomic_write(vectors, write, fsync=False)
    _write_npy(queries, queries=synthetic.draw(n_queries))
    return vectors, queries


def exact_top_k_on_disk(vectors: Path, n: int, queries: np.ndarray, k: int, block: int = 1 << 18,
                        show: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k ids and k-th best score by chunked brute force over a raw file (a float32
    shortlist of k+32 per query, rescored in float64), as `bench.search.exact_top_k` in memory."""
    import faiss

    dim = queries.shape[1]
    keep = min(n, k + 32)
    best_s = np.full((len(queries), keep), -np.inf, np.float32)
    best_i = np.full((len(queries), keep), -1, np.int64)
    with _progress(n, "ground truth", "vec", show) as bar:
        for start in range(0, n, block):
            rows = _rows(vectors, start, min(n, start + block), dim)
            s, i = faiss.knn(queries, rows, min(keep, len(rows)), metric=faiss.METRIC_INNER_PRODUCT)
            all_s, all_i = np.concatenate([best_s, s], axis=1), np.concatenate([best_i, i + start], axis=1)
            top = np.argpartition(-all_s, keep - 1, axis=1)[:, :keep]
            best_s, best_i = np.take_along_axis(all_s, top, axis=1), np.take_along_axis(all_i, top, axis=1)
            bar.update(len(rows))
    db = RowFile(vectors, n, dim)
    k = min(k, n)
    ids = np.empty((len(queries), k), np.int64)
    kth = np.empty(len(queries), np.float64)
    for q in range(len(queries)):
        cand = np.sort(best_i[q])
        exact = db[cand].astype(np.float64) @ queries[q].astype(np.float64)
        order = np.argsort(-exact, kind="stable")[:k]
        ids[q], kth[q] = cand[order], exact[order[-1]]
    return ids, kth


def ground_truth(folder: Path, vectors: Path, n: int, queries: np.ndarray, k: int, show: bool) -> tuple[np.ndarray, np.ndarray]:
    path = folder / f"truth-k{k}.npz"
    if not path.is_file():
        ids, kth = exact_top_k_on_disk(vectors, n, queries, k, show=show)
        _write_npy(path, ids=ids, kth=kth)
    saved = np.load(path)
    return saved["ids"], saved["kth"]


def _stage(folder: Path, name: str, seconds: float) -> None:
    path = folder / "build.json"
    times = json.loads(path.read_text()) if path.is_file() else {}
    times[name] = seconds
    write_json_atomic(path, times)


def build_ondisk(folder: Path, vectors: Path, n: int, dim: int, recipe: OnDiskRecipe, seed: int, show: bool) -> Path:
    """Train an IndexIVFPQ, fill it shard by shard and merge the shards into on-disk inverted lists:
    `index.faiss` + `index.ivfdata` in `folder` (resuming after the last finished stage)."""
    import faiss
    from faiss.contrib.ondisk import merge_ondisk

    folder.mkdir(parents=True, exist_ok=True)
    index_path = folder / "index.faiss"
    if index_path.is_file():
        return index_path
    nlist = recipe.lists(n)
    trained = folder / "trained.faiss"
    if not trained.is_file():
        t0 = time.perf_counter()
        rows = np.sort(np.random.default_rng(seed + 1).choice(n, size=min(n, recipe.train_per_list * nlist), replace=False))
        sample = _sample(vectors, n, dim, rows)
        index = faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, nlist, recipe.pq_bytes, 8, faiss.METRIC_INNER_PRODUCT)
        index.cp.seed, index.cp.spherical, index.cp.niter = seed, True, recipe.kmeans_iterations
        with native_stderr_silenced():  # faiss warns about small training sets on stderr
            index.train(sample)  # the lists by spherical k-means, then the PQ codebooks on residuals
        del sample
        _write_index(index, trained)
        _stage(folder, "train", time.perf_counter() - t0)
    shards = []
    with _progress(n, "filling shards", "vec", show) as bar:
        for number, start in enumerate(range(0, n, recipe.shard)):
            stop = min(n, start + recipe.shard)
            shard = folder / f"shard-{number:04d}.faiss"
            shards.append(shard)
            if not shard.is_file():
                t0 = time.perf_counter()
                index = faiss.read_index(str(trained))
                index.add_with_ids(_rows(vectors, start, stop, dim), np.arange(start, stop, dtype=np.int64))
                _write_index(index, shard)
                del index
                _stage(folder, f"shard-{number:04d}", time.perf_counter() - t0)
            bar.update(stop - start)
    t0 = time.perf_counter()
    index = faiss.read_index(str(trained))
    ivfdata = folder / "index.ivfdata"
    ivfdata.unlink(missing_ok=True)  # a merge cut short
    with native_stdout_silenced():  # faiss prints its list resizing on stdout
        merge_ondisk(index, [str(s) for s in shards], str(ivfdata))
        _write_index(index, index_path)
    del index
    for shard in shards:
        shard.unlink()
    _stage(folder, "merge", time.perf_counter() - t0)
    return index_path


def _status_mb() -> dict:
    """This process's resident memory from /proc/self/status, in MB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) / 1e3  # kB -> MB
    return out


def _drop_from_page_cache(*paths: Path) -> None:
    """Evict these files' cached pages (POSIX_FADV_DONTNEED: affects nothing else on the machine)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _search_process(index_path: str, vectors_path: str, queries_path: str, nprobe: int, rerank: int, k: int,
                    cold_queries: int, latency_queries: int, pipe) -> None:
    """One configuration in a fresh process: cold then warm single-query latency, a batch of all
    queries, and this process's resident memory."""
    import faiss

    dim_bytes = None
    try:
        _drop_from_page_cache(Path(index_path).with_suffix(".ivfdata"), Path(vectors_path))
        baseline = _status_mb()
        with native_stdout_silenced():  # faiss says where it found the .ivfdata file on stdout
            index = faiss.read_index(index_path, faiss.IO_FLAG_ONDISK_SAME_DIR)
        index.nprobe = nprobe
        queries = np.load(queries_path)
        dim_bytes = index.d * 4
        fd = os.open(vectors_path, os.O_RDONLY)

        def search(q: np.ndarray) -> np.ndarray:
            scores, ids = index.search(q, max(rerank, k))
            if not rerank:
                return ids[:, :k]
            out = np.full((len(q), k), -1, np.int64)
            for row in range(len(q)):
                cand = np.sort(ids[row][ids[row] >= 0])
                raw = b"".join(os.pread(fd, dim_bytes, int(c) * dim_bytes) for c in cand)
                exact = np.frombuffer(raw, np.float32).reshape(len(cand), -1) @ q[row]
                top = np.argsort(-exact, kind="stable")[:k]
                out[row, :len(top)] = cand[top]
            return out

        measured = queries[cold_queries:cold_queries + latency_queries]
        cold = single_query_latencies(search, queries[:cold_queries])
        first = single_query_latencies(search, measured)
        again = single_query_latencies(search, measured)  # all they read is in the page cache now
        t0 = time.perf_counter()
        found = search(queries)
        batch_s = time.perf_counter() - t0
        pipe.send({"found": found, "cold": cold, "first": first, "again": again, "batch_s": batch_s, "memory": _status_mb(),
                   "baseline": baseline, "threads": faiss.omp_get_max_threads()})
    except Exception as e:  # reported by the parent
        pipe.send({"error": f"{type(e).__name__}: {e}"})


def ondisk_search_speed(n: int, plan: SearchPlan, progress: Callable[[str], None] | None = None) -> list[SearchSpeed]:
    """The on-disk IVF-PQ index over n synthetic vectors: one result per nprobe of the plan's recipe. With
    `progress`, progress lines go to it and long stages draw progress bars."""
    recipe = plan.recipe or OnDiskRecipe()
    dim, seed, n_queries, k, work_dir = plan.dim, plan.seed, plan.queries, plan.k, plan.work_dir
    show = progress is not None
    say = progress or (lambda m: None)
    if dim % recipe.pq_bytes:
        raise HeadsearchError(f"--pq-bytes {recipe.pq_bytes} must divide the dimension of the vectors ({dim})")
    keep = work_dir is not None
    root = Path(work_dir) if keep else Path(tempfile.mkdtemp(prefix="headsearch-ondisk-"))
    data = root / f"n{n}-d{dim}-seed{seed}-q{n_queries}"
    folder = data / f"ivfpq-nlist{recipe.lists(n)}-pq{recipe.pq_bytes}-tpl{recipe.train_per_list}-it{recipe.kmeans_iterations}"
    try:
        data.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(data).free / 1e9
        if not (data / "vectors.f32").is_file() and free < needs_gb(n, dim, recipe.pq_bytes):
            raise HeadsearchError(f"{root}: {free:.1f} GB free, the on-disk benchmark at {n:,} vectors needs about "
                                  f"{needs_gb(n, dim, recipe.pq_bytes):.1f} GB (choose another --work-dir)")
        say(f"  {n:,} vectors of {dim} floats in {data} ({n * dim * 4 / 1e9:.1f} GB)")
        vectors, queries_path = make_vectors(data, n, n_queries, dim, seed, show)
        queries = np.load(queries_path)
        say("  exact ground truth by chunked brute force")
        truth, kth = ground_truth(data, vectors, n, queries, k, show)
        say(f"  IVF-PQ: nlist {recipe.lists(n)}, {recipe.pq_bytes}-byte codes, shards of {recipe.shard:,}")
        index_path = build_ondisk(folder, vectors, n, dim, recipe, seed, show)
        build = json.loads((folder / "build.json").read_text())
        disk = (index_path.stat().st_size + index_path.with_suffix(".ivfdata").stat().st_size) / 1e6
        results = []
        for nprobe in recipe.nprobe:
            say(f"  searching with nprobe {nprobe}, re-ranking {recipe.rerank} (fresh process, files dropped from the page cache)")
            got = _in_fresh_process(index_path, vectors, queries_path, nprobe, recipe.rerank, k, plan.latency_queries)
            recall = recall_at_k(got["found"], truth, RowFile(vectors, n, dim), queries, kth)
            memory, cold, first, again = got["memory"], got["cold"], got["first"], got["again"]
            params = {"nlist": recipe.lists(n), "nprobe": nprobe, "pq_bytes": recipe.pq_bytes, "rerank": recipe.rerank,
                      "train_per_list": recipe.train_per_list, "kmeans_iterations": recipe.kmeans_iterations, "shard": recipe.shard}
            extra = {"cold_p50_ms": float(np.percentile(cold, 50) * 1e3), "cold_queries": len(cold),
                     "cached_p50_ms": float(np.percentile(again, 50) * 1e3), "cached_p95_ms": float(np.percentile(again, 95) * 1e3),
                     "rss_mb": memory["VmRSS"], "peak_rss_mb": memory["VmHWM"], "rss_anon_mb": memory["RssAnon"],
                     "rss_file_mb": memory["RssFile"], "baseline_rss_mb": got["baseline"]["VmRSS"],
                     "index_rss_mb": memory["VmRSS"] - got["baseline"]["VmRSS"], "disk_mb": disk,
                     "raw_vectors_mb": vectors.stat().st_size / 1e6, "build_stages_s": build}
            results.append(SearchSpeed("ivfpq-ondisk", n, dim, params, float(sum(build.values())),
                                       float(np.percentile(first, 50) * 1e3), float(np.percentile(first, 95) * 1e3),
                                       len(queries) / got["batch_s"], recall, k, int(memory["VmRSS"] * 1e6), len(queries),
                                       got["threads"], extra))
        return results
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def _in_fresh_process(index_path: Path, vectors: Path, queries: Path, nprobe: int, rerank: int, k: int, latency_queries: int) -> dict:
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_search_process, args=(str(index_path), str(vectors), str(queries), nprobe, rerank, k,
                                                            min(20, latency_queries), latency_queries, send), daemon=True)
    process.start()
    send.close()
    try:
        got = receive.recv()
    except EOFError:
        got = {"error": f"the search process ended with code {process.join() or process.exitcode}"}
    finally:
        with contextlib.suppress(Exception):
            process.join(timeout=60)
    if "error" in got:
        raise HeadsearchError(f"on-disk search (nprobe {nprobe}) failed: {got['error']}")
    return got


def needs_gb(n: int, dim: int, pq_bytes: int) -> float:
    """Disk the on-disk benchmark needs at n vectors: the raw vectors and the index, in GB."""
    return (n * dim * 4 + 2 * n * (pq_bytes + 8)) / 1e9  # shards and merged lists side by side
