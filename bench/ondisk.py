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
ground truth, training, each shard, the merge).

`--index library` measures the library's own store past memory on the same vectors, queries and ground
truth: its on-disk segments (`headsearch.vectors.segments`, the same codec recipe: `segment_files.train_codec`) built as a
library builds them and searched, in a fresh process, as the query engine searches them.
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
from pathlib import Path

import numpy as np

from bench.search import OnDiskRecipe, SearchPlan, SearchSpeed, Synthetic, recall_at_k, single_query_latencies
from headsearch.basics.errors import HeadsearchError
from headsearch.basics.files import atomic_write, write_json_atomic
from headsearch.basics.quiet import native_stdout_silenced
from headsearch.vectors.segment_files import CODES_SUFFIX, RAW_SUFFIX, RawVectors, SegmentRecipe, pq_size, train_codec
from headsearch.vectors.segments import STATE, SegmentedIndex
from headsearch.vectors.vector_index import VectorIndex


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
    db = RawVectors(vectors, dim)
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
        # the lists by spherical k-means, then the PQ codebooks on residuals: the library's segments' recipe
        index = train_codec(_sample(vectors, n, dim, rows), nlist, recipe.pq_bytes, 8, seed, recipe.kmeans_iterations)
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


def _measure_searches(search: Callable[[np.ndarray], np.ndarray], queries: np.ndarray, cold_queries: int,
                      latency_queries: int) -> dict:
    """Cold then warm single-query latency (the first `cold_queries`, then the next `latency_queries` twice:
    all they read is in the page cache the second time), then one batch of every query."""
    import faiss

    measured = queries[cold_queries:cold_queries + latency_queries]
    cold = single_query_latencies(search, queries[:cold_queries])
    first = single_query_latencies(search, measured)
    again = single_query_latencies(search, measured)
    t0 = time.perf_counter()
    found = search(queries)
    return {"found": found, "cold": cold, "first": first, "again": again, "batch_s": time.perf_counter() - t0,
            "threads": faiss.omp_get_max_threads()}


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

        got = _measure_searches(search, queries, cold_queries, latency_queries)
        pipe.send({**got, "memory": _status_mb(), "baseline": baseline})
    except Exception as e:  # reported by the parent
        pipe.send({"error": f"{type(e).__name__}: {e}"})


def _library_search_process(folder: str, queries_path: str, k: int, cold_queries: int, latency_queries: int, pipe) -> None:
    """The library's store in a fresh process, opened and searched as the query engine does (`search(q, k)`)."""
    try:
        _drop_from_page_cache(*[p for p in Path(folder).iterdir() if p.name.endswith((CODES_SUFFIX, RAW_SUFFIX))])
        baseline = _status_mb()
        store, _ = SegmentedIndex.open(Path(folder))
        loaded = _status_mb()
        queries = np.load(queries_path)
        got = _measure_searches(lambda q: store.search(q, k)[1], queries, cold_queries, latency_queries)
        pipe.send({**got, "memory": _status_mb(), "baseline": baseline, "loaded": loaded, "store": store.describe(),
                   "device": store.device})
    except Exception as e:  # reported by the parent
        pipe.send({"error": f"{type(e).__name__}: {e}"})


def ondisk_search_speed(n: int, plan: SearchPlan, progress: Callable[[str], None] | None = None) -> list[SearchSpeed]:
    """The on-disk IVF-PQ index over n synthetic vectors: one result per nprobe of the plan's recipe. With
    `progress`, progress lines go to it and long stages draw progress bars."""
    recipe = plan.recipe or OnDiskRecipe()
    dim, seed, k = plan.dim, plan.seed, plan.k
    show = progress is not None
    say = progress or (lambda m: None)
    if dim % recipe.pq_bytes:
        raise HeadsearchError(f"--pq-bytes {recipe.pq_bytes} must divide the dimension of the vectors ({dim})")
    with _prepared(n, plan, needs_gb(n, dim, recipe.pq_bytes), say, show) as (data, vectors, queries_path, queries, truth, kth):
        folder = data / f"ivfpq-nlist{recipe.lists(n)}-pq{recipe.pq_bytes}-tpl{recipe.train_per_list}-it{recipe.kmeans_iterations}"
        say(f"  IVF-PQ: nlist {recipe.lists(n)}, {recipe.pq_bytes}-byte codes, shards of {recipe.shard:,}")
        index_path = build_ondisk(folder, vectors, n, dim, recipe, seed, show)
        build = json.loads((folder / "build.json").read_text())
        disk = (index_path.stat().st_size + index_path.with_suffix(".ivfdata").stat().st_size) / 1e6
        results = []
        for nprobe in recipe.nprobe:
            say(f"  searching with nprobe {nprobe}, re-ranking {recipe.rerank} (fresh process, files dropped from the page cache)")
            got = _in_fresh_process(_search_process, (str(index_path), str(vectors), str(queries_path), nprobe, recipe.rerank, k,
                                                      min(20, plan.latency_queries), plan.latency_queries), f"nprobe {nprobe}")
            recall = recall_at_k(got["found"], truth, RawVectors(vectors, dim), queries, kth)
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


@contextlib.contextmanager
def _prepared(n: int, plan: SearchPlan, disk_gb: float, say: Callable[[str], None], show: bool):
    """The synthetic vectors of a size on disk, its queries and exact ground truth, in the plan's work folder
    (kept) or a temporary one (removed afterwards): yields (folder, vectors, queries path, queries, truth, k-th best)."""
    dim, seed, n_queries, work_dir = plan.dim, plan.seed, plan.queries, plan.work_dir
    keep = work_dir is not None
    root = Path(work_dir) if keep else Path(tempfile.mkdtemp(prefix="headsearch-ondisk-"))
    data = root / f"n{n}-d{dim}-seed{seed}-q{n_queries}"
    try:
        data.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(data).free / 1e9
        if not (data / "vectors.f32").is_file() and free < disk_gb:
            raise HeadsearchError(f"{root}: {free:.1f} GB free, the on-disk benchmark at {n:,} vectors needs about "
                                  f"{disk_gb:.1f} GB (choose another --work-dir)")
        say(f"  {n:,} vectors of {dim} floats in {data} ({n * dim * 4 / 1e9:.1f} GB)")
        vectors, queries_path = make_vectors(data, n, n_queries, dim, seed, show)
        queries = np.load(queries_path)
        say("  exact ground truth by chunked brute force")
        truth, kth = ground_truth(data, vectors, n, queries, plan.k, show)
        yield data, vectors, queries_path, queries, truth, kth
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


LIBRARY_ADDED_SHARE = 100  # the library store's last n/100 vectors are added as index runs add them...
LIBRARY_ADD_BATCHES = 10  # ...in this many saves
SAME_AS_EXACT_UP_TO = 1_000_000  # sizes whose answers are compared one by one with an exact in-memory index


def build_library_store(folder: Path, vectors: Path, n: int, dim: int, seed: int) -> dict:
    """The library's own vector store (`headsearch.vectors.segments.SegmentedIndex`, ids = row numbers) in
    `folder`, built as a library builds it: created from all but the last n/100 vectors, as when a kind moves
    past the memory budget to segments (lists and codebooks trained on a sample, every vector encoded, nprobe
    tuned), then the last ones added in 10 saves as index runs add them (each save writes the tail as a
    segment; past 8 segments the smallest neighbours merge). Returns its build record, kept beside it: a
    finished store is reused, an unfinished one built again."""
    record = folder.with_name(folder.name + ".build.json")
    if record.is_file() and (folder / STATE).is_file():
        return json.loads(record.read_text())
    shutil.rmtree(folder, ignore_errors=True)
    raw = RawVectors(vectors, dim)
    added = n // LIBRARY_ADDED_SHARE if n >= LIBRARY_ADDED_SHARE * LIBRARY_ADD_BATCHES else 0
    step = 1 << 18
    t0 = time.perf_counter()
    store = SegmentedIndex.create(folder, dim, ((np.arange(a, min(a + step, n - added)), raw.range(a, min(a + step, n - added)))
                                                for a in range(0, n - added, step)), 0, SegmentRecipe(seed=seed))
    created = time.perf_counter() - t0
    t0 = time.perf_counter()
    bounds = np.linspace(n - added, n, LIBRARY_ADD_BATCHES + 1).astype(int) if added else []
    for number, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        store.add(np.arange(a, b), raw.range(a, b))
        store.save(number + 1, tail_cap=0)
    out = {"created_s": created, "created_from": n - added, "added_s": time.perf_counter() - t0, "added": added,
           "saves": len(bounds) - 1 if added else 0, "store": store.describe()}
    store.close()
    raw.close()
    write_json_atomic(record, out)
    return out


def library_search_speed(n: int, plan: SearchPlan, progress: Callable[[str], None] | None = None) -> list[SearchSpeed]:
    """The library's own vector store past memory (on-disk segments) over n synthetic vectors, built by
    `build_library_store` and searched by a fresh process as the query engine searches it."""
    dim, k = plan.dim, plan.k
    show = progress is not None
    say = progress or (lambda m: None)
    pq = pq_size(dim)
    with _prepared(n, plan, needs_gb(n, dim, pq) + n * dim * 4 / 1e9, say, show) as (data, vectors, queries_path, queries, truth, kth):
        folder = data / f"library-store-seed{plan.seed}"
        say(f"  the library's store: segments of {pq}-byte codes built from the vectors (at 1e7 about half an hour on 2 cores)")
        build = build_library_store(folder, vectors, n, dim, plan.seed)
        say("  searching it (fresh process, its files dropped from the page cache)")
        got = _in_fresh_process(_library_search_process, (str(folder), str(queries_path), k, min(20, plan.latency_queries),
                                                          plan.latency_queries), "library store")
        recall = recall_at_k(got["found"], truth, RawVectors(vectors, dim), queries, kth)
        memory, cold, first, again, store = got["memory"], got["cold"], got["first"], got["again"], got["store"]
        params = {key: store[key] for key in ("nlist", "nprobe", "pq_bytes", "rerank", "segments", "tuned_recall") if key in store}
        extra = {"cold_p50_ms": float(np.percentile(cold, 50) * 1e3), "cold_queries": len(cold),
                 "cached_p50_ms": float(np.percentile(again, 50) * 1e3), "cached_p95_ms": float(np.percentile(again, 95) * 1e3),
                 "rss_mb": memory["VmRSS"], "peak_rss_mb": memory["VmHWM"], "rss_anon_mb": memory["RssAnon"],
                 "rss_file_mb": memory["RssFile"], "baseline_rss_mb": got["baseline"]["VmRSS"], "loaded_rss_mb": got["loaded"]["VmRSS"],
                 "index_rss_mb": memory["VmRSS"] - got["baseline"]["VmRSS"], "device": got["device"], "store": store,
                 "disk_mb": sum(p.stat().st_size for p in folder.iterdir()) / 1e6, "build": build}
        if n <= SAME_AS_EXACT_UP_TO:
            say("  the same queries on an exact in-memory index (the library's below its budget), one at a time")
            extra["same_as_exact"] = same_answers(got["found"], vectors, n, dim, queries, k)
        return [SearchSpeed("library", n, dim, params, build["created_s"] + build["added_s"], float(np.percentile(first, 50) * 1e3),
                            float(np.percentile(first, 95) * 1e3), len(queries) / got["batch_s"], recall, k,
                            int(memory["VmRSS"] * 1e6), len(queries), got["threads"], extra)]


def same_answers(found: np.ndarray, vectors: Path, n: int, dim: int, queries: np.ndarray, k: int) -> float:
    """Share of queries whose top k (ids in order) equal those of an exact in-memory index (`VectorIndex`, the
    library's below its budget) over the same vectors, each query searched alone as the query engine does."""
    exact = VectorIndex(dim)
    exact.add(np.arange(n), RawVectors(vectors, dim).range(0, n))
    same = sum(np.array_equal(exact.search(q[None, :], k)[1][0], found[i][:k]) for i, q in enumerate(queries))
    return same / len(queries)


def _in_fresh_process(target: Callable, args: tuple, what: str) -> dict:
    """`target(*args, pipe)` in a fresh (spawned) process; what it sends back."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=target, args=(*args, send), daemon=True)
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
        raise HeadsearchError(f"on-disk search ({what}) failed: {got['error']}")
    return got


def needs_gb(n: int, dim: int, pq_bytes: int) -> float:
    """Disk the on-disk benchmark needs at n vectors: the raw vectors and the index, in GB."""
    return (n * dim * 4 + 2 * n * (pq_bytes + 8)) / 1e9  # shards and merged lists side by side
