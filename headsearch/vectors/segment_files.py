"""The file formats of one segment of `headsearch.vectors.segments.SegmentedIndex` and the recipe it is built by:
raw vectors (float32 rows read with pread), inverted lists on disk (faiss OnDiskInvertedLists: the table and
the codes with their ids) and codecs (a trained, empty IVF-PQ index shared by the segments); a segment written
(`write_segment`) and opened (`Segment`)."""
from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from headsearch.basics.errors import LibraryError
from headsearch.basics.files import fsync_folder
from headsearch.basics.quiet import native_stderr_silenced, native_stdout_silenced
from headsearch.vectors.vector_index import gpu_count, ivf_nlist

log = logging.getLogger("headsearch.vectors.segments")  # the segments' messages keep the name they had before the split

MIN_VECTORS = 32  # fewer cannot train codebooks of 5 bits: a smaller kind stays in memory
RAW_SUFFIX, IDS_SUFFIX, LISTS_SUFFIX, CODES_SUFFIX = ".f32", ".ids.npy", ".lists", ".ivfdata"
SEGMENT_SUFFIXES = (RAW_SUFFIX, IDS_SUFFIX, LISTS_SUFFIX, CODES_SUFFIX)


@dataclass(frozen=True)
class SegmentRecipe:
    """How segments are built, searched, merged and tuned (chosen by measurement; docs/benchmarks.md "Search at scale")."""

    pq_bytes: int | None = None  # sub-quantizers of a PQ code, 8 bits each (a code's bytes); None: `pq_size(dim)`
    rerank: int = 100  # a query's PQ shortlist beyond k, re-ranked exactly from the raw vectors
    train_per_list: int = 30  # training vectors per inverted list (a seeded sample)
    kmeans_iterations: int = 10
    encode_bytes: int = 256 * 2**20  # raw vectors read and encoded at once
    shard_vectors: int = 2_000_000  # codes held in memory while encoding before they go to a temporary file
    max_segments: int = 8  # more are merged, the adjacent pair with the fewest vectors first
    compact_share: float = 0.25  # a segment with a larger share of removed ids is written again without them
    retrain_growth: float = 4.0  # lists and codebooks are trained again when the store has grown this much
    target_recall: float = 0.96  # nprobe: the smallest reaching this recall@10 on the store's own vectors
    tune_queries: int = 500
    full_scan_bytes: int = 8 * 2**20  # while every code fits in this, every list is searched (a few ms)
    seed: int = 0


def pq_size(dim: int) -> int:
    """Bytes per PQ code for `dim`-d vectors: the largest divisor of dim up to max(32, dim / 16)."""
    top = max(32, dim // 16)
    return max(m for m in range(1, min(top, dim) + 1) if dim % m == 0)


def new_tag() -> str:
    return uuid.uuid4().hex[:12]


def member(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """values[i] in sorted_set, elementwise."""
    if not len(sorted_set) or not len(values):
        return np.zeros(len(values), bool)
    pos = np.searchsorted(sorted_set, values)
    return sorted_set[np.minimum(pos, len(sorted_set) - 1)] == values


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ----- raw vectors ------------------------------------------------------------------------------
class RawVectors:
    """The float32 rows of a file, read with pread: nothing is mapped into the process (a memory map of a
    few scattered rows maps whole runs of pages around each), so a search stays small."""

    def __init__(self, path: Path, dim: int):
        self.path, self.dim, self.row_bytes = Path(path), dim, dim * 4
        self._fd = os.open(self.path, os.O_RDONLY)
        self.count = os.fstat(self._fd).st_size // self.row_bytes

    def range(self, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop)."""
        size = (stop - start) * self.row_bytes
        data = os.pread(self._fd, size, start * self.row_bytes)
        if len(data) != size:
            raise LibraryError(f"{self.path}: truncated vector file")
        return np.frombuffer(data, np.float32).reshape(stop - start, self.dim)

    def rows(self, rows: np.ndarray) -> np.ndarray:
        """The given rows (ascending), runs of consecutive rows read at once."""
        rows = np.asarray(rows, np.int64)
        if not len(rows):
            return np.empty((0, self.dim), np.float32)
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        starts, stops = np.r_[0, breaks], np.r_[breaks, len(rows)]
        parts = [self.range(int(rows[a]), int(rows[b - 1]) + 1) for a, b in zip(starts, stops, strict=True)]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    @property
    def shape(self) -> tuple[int, int]:
        return self.count, self.dim

    def __getitem__(self, rows) -> np.ndarray:
        """Rows in any order (as numpy's fancy indexing)."""
        rows = np.atleast_1d(np.asarray(rows, np.int64))
        order = np.argsort(rows, kind="stable")
        out = np.empty((len(rows), self.dim), np.float32)
        out[order] = self.rows(rows[order])
        return out

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()


# ----- inverted lists on disk -------------------------------------------------------------------
def write_lists(path: Path, nlist: int, code_size: int, sources: list[tuple[object, np.ndarray | None]]) -> int:
    """Write the inverted lists of `sources` (faiss InvertedLists, each with the ascending ids to leave
    out or None), list by list in their order, as `path` (codes and ids) and `path.with_suffix(".lists")`
    (the list table, naming `path` by its file name so the folder can move); returns the count written."""
    import faiss

    def view(il, j):
        m = il.list_size(j)
        if not m:
            return None, None
        ids = faiss.rev_swig_ptr(il.get_ids(j), m)
        codes = faiss.rev_swig_ptr(il.get_codes(j), m * code_size).reshape(m, code_size)
        return ids, codes

    sizes = np.zeros(nlist, np.uint64)
    for il, drop in sources:
        for j in range(nlist):
            m = il.list_size(j)
            if m and drop is not None and len(drop):
                m -= int(member(view(il, j)[0], drop).sum())
            sizes[j] += m
    total = int(sizes.sum())
    if total == 0:
        raise ValueError("an empty segment is never written")
    out = faiss.OnDiskInvertedLists(nlist, code_size, str(path))
    out.set_all_lists_sizes(faiss.swig_ptr(sizes))
    with native_stdout_silenced():  # faiss prints its file resizing on stdout
        out.update_totsize(total * (code_size + 8))
    for j in range(nlist):
        if not sizes[j]:
            continue
        at = 0
        for il, drop in sources:
            ids, codes = view(il, j)
            if ids is None:
                continue
            if drop is not None and len(drop):
                keep = ~member(ids, drop)
                ids, codes = ids[keep], codes[keep]
            ids, codes = np.ascontiguousarray(ids, np.int64), np.ascontiguousarray(codes)
            if len(ids):
                out.update_entries(j, at, len(ids), faiss.swig_ptr(ids), faiss.swig_ptr(codes))
                at += len(ids)
    out.filename = path.name
    writer = faiss.FileIOWriter(str(path.with_suffix(LISTS_SUFFIX)))
    faiss.write_InvertedLists(out, writer)
    del writer, out  # closes the table, unmaps the codes
    _fsync(path)
    _fsync(path.with_suffix(LISTS_SUFFIX))
    return total


def read_lists(path: Path, count: int, code_size: int):
    """The on-disk inverted lists written by `write_lists` (`path` is the .lists file), mapped read-only."""
    import faiss

    codes = path.with_suffix(CODES_SUFFIX)
    # a short codes file would be mapped past its end: the first read there kills the process (SIGBUS)
    if codes.stat().st_size != count * (code_size + 8):
        raise LibraryError(f"{codes}: {codes.stat().st_size} bytes, {count * (code_size + 8)} expected")
    with native_stdout_silenced():  # faiss says where it found the codes file on stdout
        return faiss.read_InvertedLists(faiss.FileIOReader(str(path)), faiss.IO_FLAG_ONDISK_SAME_DIR | faiss.IO_FLAG_READ_ONLY)


def train_codec(sample: np.ndarray, nlist: int, pq_m: int, nbits: int = 8, seed: int = 0, iterations: int = 10):
    """A trained, empty IndexIVFPQ (inner product): nlist lists by spherical k-means, then PQ codebooks of
    `pq_m` sub-quantizers of `nbits` bits on the residuals."""
    import faiss

    dim = sample.shape[1]
    codec = faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, nlist, pq_m, nbits, faiss.METRIC_INNER_PRODUCT)
    codec.cp.seed, codec.cp.spherical, codec.cp.niter = seed, True, iterations
    codec.pq.cp.seed = seed
    with native_stderr_silenced():  # faiss warns about small training sets on stderr
        codec.train(np.ascontiguousarray(sample, dtype=np.float32))
    return codec


def _on_cpu(index):
    """The CPU index of an encoder (a GPU one copied back)."""
    import faiss

    return index if isinstance(index, faiss.IndexIVFPQ) else faiss.index_gpu_to_cpu(index)


def _ivf_over(codec, invlists, count: int):
    """An IndexIVFPQ searching `invlists` with the codec's coarse quantizer (shared, not copied) and codebooks."""
    import faiss

    ivf = faiss.IndexIVFPQ(codec.quantizer, codec.d, codec.nlist, codec.pq.M, codec.pq.nbits, codec.metric_type)
    ivf.pq = codec.pq
    ivf.by_residual = codec.by_residual
    ivf.is_trained = True
    ivf.replace_invlists(invlists, True)
    invlists.this.disown()  # the index owns (and frees) the lists
    ivf.ntotal = count
    return ivf


# ----- segments ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class SegmentInfo:
    """One segment as state.json names it."""

    name: str
    count: int
    first_id: int
    last_id: int
    id_sum: int

    def files(self) -> list[str]:
        return [self.name + suffix for suffix in SEGMENT_SUFFIXES]


class Segment:
    """An immutable segment, opened: its ids (mapped), raw vectors (pread) and PQ codes (mapped)."""

    def __init__(self, folder: Path, info: SegmentInfo, codec):
        self.info = info
        self.ids = np.load(folder / (info.name + IDS_SUFFIX), mmap_mode="r")
        self.raw = RawVectors(folder / (info.name + RAW_SUFFIX), codec.d)
        if len(self.ids) != info.count or self.raw.count != info.count:
            self.raw.close()
            raise LibraryError(f"{folder / info.name}: {len(self.ids)} ids and {self.raw.count} vectors, {info.count} expected")
        self.index = _ivf_over(codec, read_lists(folder / (info.name + LISTS_SUFFIX), info.count, codec.code_size), info.count)

    def rows_of(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows, found) of the given ids in this segment."""
        rows = np.searchsorted(self.ids, ids)
        found = (rows < len(self.ids)) & (np.asarray(self.ids[np.minimum(rows, len(self.ids) - 1)]) == ids)
        return rows, found

    def close(self) -> None:
        self.raw.close()
        self.index = None


# ----- writing a segment -------------------------------------------------------------------------
def write_segment(folder: Path, dim: int, recipe: SegmentRecipe, chunks: Iterable[tuple[np.ndarray, np.ndarray]], codec,
                  codec_name: str | None, lists: list[tuple[object, np.ndarray | None]] | None = None,
                  gpu: bool = True) -> tuple[SegmentInfo, object, str]:
    """Write a new segment's files in `folder` from (ids, vectors) chunks, ids ascending: the raw vectors and ids,
    then codes copied from `lists` or encoded with `codec` (file `codec_name`; trained first on a sample when
    None, encoding on a GPU when `gpu` and faiss-gpu sees one). Returns (info, codec, codec file name)."""
    import faiss

    name = f"seg-{new_tag()}"
    raw_path = folder / (name + RAW_SUFFIX)
    parts: list[np.ndarray] = []
    last = None
    with open(raw_path, "wb") as f:
        for ids, vectors in chunks:
            if not len(ids):
                continue
            ids = np.asarray(ids, np.int64)
            if (last is not None and ids[0] <= last) or (len(ids) > 1 and not (np.diff(ids) > 0).all()):
                raise AssertionError("segment ids must ascend")
            f.write(np.ascontiguousarray(vectors, dtype="<f4").tobytes())
            parts.append(ids)
            last = int(ids[-1])
        f.flush()
        os.fsync(f.fileno())
    ids = np.concatenate(parts) if parts else np.empty(0, np.int64)
    if not len(ids):
        raise ValueError("an empty segment is never written")
    with open(folder / (name + IDS_SUFFIX), "wb") as f:
        np.save(f, ids)
        f.flush()
        os.fsync(f.fileno())
    raw = RawVectors(raw_path, dim)
    try:
        if codec is None:
            codec = _train(raw, dim, recipe)
            codec_name = f"codec-{new_tag()}.faiss"
            with native_stderr_silenced():
                faiss.write_index(codec, str(folder / codec_name))
            _fsync(folder / codec_name)
        codes = folder / (name + CODES_SUFFIX)
        if lists is not None:
            written = write_lists(codes, codec.nlist, codec.code_size, lists)
            if written != len(ids):
                raise LibraryError(f"{codes}: {written} codes for {len(ids)} vectors")
        else:
            _encode(raw, ids, codec, codes, recipe, gpu)
    finally:
        raw.close()
    fsync_folder(folder)
    return SegmentInfo(name, len(ids), int(ids[0]), int(ids[-1]), int(ids.sum(dtype=np.int64))), codec, codec_name

def _train(raw: RawVectors, dim: int, recipe: SegmentRecipe):
    """A codec trained on a seeded sample of `raw`: nlist ~4 sqrt(n), as the in-memory IVF."""
    r = recipe
    n = raw.count
    nlist = max(1, min(ivf_nlist(n), n // 39 or 1))  # at least 39 training vectors per list
    # PQ codebooks of 256 entries want some thousands of vectors even when the lists are few; a store of
    # fewer than 256 vectors gets codebooks of fewer bits (at least MIN_VECTORS = 2^5)
    rows = np.sort(np.random.default_rng(r.seed + 1).choice(n, size=min(n, max(r.train_per_list * nlist, 20_000)), replace=False))
    nbits = min(8, int(np.log2(n)))
    return train_codec(raw.rows(rows), nlist, r.pq_bytes or pq_size(dim), nbits, r.seed, r.kmeans_iterations)

def _encode(raw: RawVectors, ids: np.ndarray, codec, codes: Path, recipe: SegmentRecipe, gpu: bool) -> None:
    """Encode `raw` chunk by chunk into `codes`; past shard_vectors the codes so far go to a temporary file."""

    rows = max(1, recipe.encode_bytes // (raw.dim * 4))
    shards: list[tuple[Path, object]] = []
    current = None
    try:
        for start in range(0, raw.count, rows):
            stop = min(raw.count, start + rows)
            if current is None:
                current = _encoder(codec, gpu)
            current.add_with_ids(raw.range(start, stop), ids[start:stop])
            if current.ntotal >= recipe.shard_vectors and stop < raw.count:
                shard = codes.with_name(f"{codes.stem}.shard{len(shards)}{CODES_SUFFIX}")
                encoded = _on_cpu(current)  # held: its lists die with it
                count = write_lists(shard, codec.nlist, codec.code_size, [(encoded.invlists, None)])
                shards.append((shard, _ivf_over(codec, read_lists(shard.with_suffix(LISTS_SUFFIX), count, codec.code_size), count)))
                current = None
        last = _on_cpu(current) if current is not None else None
        sources = [(s.invlists, None) for _, s in shards] + ([(last.invlists, None)] if last is not None else [])
        write_lists(codes, codec.nlist, codec.code_size, sources)
    finally:
        for shard, _ in shards:
            shard.unlink(missing_ok=True)
            shard.with_suffix(LISTS_SUFFIX).unlink(missing_ok=True)

def _encoder(codec, gpu: bool):
    """An empty copy of the codec to encode with: on the GPU when faiss-gpu sees one (the coarse assignment
    is most of the work: 20 minutes for 1e7 vectors on 2 cores), else here."""
    import faiss

    if gpu and gpu_count() > 0:
        try:
            return faiss.index_cpu_to_all_gpus(faiss.clone_index(codec))
        except Exception as e:  # e.g. codes the GPU index does not support: fewer than 8 bits
            log.warning("faiss GPU encoding unavailable, encoding on the CPU: %s", e)
    return faiss.clone_index(codec)
