"""A library's vectors of one kind past memory: immutable on-disk IVF-PQ segments, an in-memory tail of
new vectors and a set of removed ids (`SegmentedIndex`), searched as one index with exact re-ranking.

A library keeps a vector kind in memory (`headsearch.vectors.vector_index.VectorIndex`) while the memory its
indexes measure fits its budget, and here past it (`headsearch.vectors.index_cache` decides). The folder
`vectors_<kind>.segments/` holds:

  state.json          the current set: the library generation it reflects, the codec, the segments, the
                      removed ids, the tail, nprobe. Replaced in one rename; the files it names are complete
                      and never change, so a kill at any moment leaves the last good set (what an unfinished
                      save wrote is deleted by the next one).
  codec-<tag>.faiss   a trained, empty IndexIVFPQ (lists by spherical k-means, PQ codebooks on the residuals)
                      shared by every segment: segments merge by copying codes, never by encoding again
  seg-<tag>.lists     a segment's inverted-list table (faiss OnDiskInvertedLists)
  seg-<tag>.ivfdata   its PQ codes and ids list by list, memory-mapped read-only by searches
  seg-<tag>.ids.npy   its ids, ascending
  seg-<tag>.f32       its vectors (float32, row i holds ids[i]): each query's PQ shortlist is re-ranked
                      exactly from them, read with pread
  removed-<tag>.npy   ids removed since their segments were written (ascending), skipped by every search
  tail-<tag>.faiss    the vectors added since the last flush (exact search)

Searching needs no database, so a query answers from these files while an index run holds it.
Writers (one at a time, under the library's writer lock) flush the tail into a segment once its measured
memory passes the cap they are given, merge segments past `SegmentRecipe.max_segments` or with many removed
ids into new files, and train new lists and codebooks (encoding every vector again) when the store has
grown `retrain_growth` times since its lists were trained.

A segment's files are written and read by `headsearch.vectors.segment_files`; nprobe is tuned by
`headsearch.vectors.segment_tuning`.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from pathlib import Path

import numpy as np

from headsearch.basics.errors import LibraryError, is_disk_full
from headsearch.basics.files import fsync_folder, write_json_atomic
from headsearch.vectors.segment_files import MIN_VECTORS, Segment, SegmentInfo, SegmentRecipe, member, new_tag, pq_size, write_segment
from headsearch.vectors.segment_tuning import tune
from headsearch.vectors.vector_index import VectorIndex, gpu_count, search_threads

log = logging.getLogger(__name__)

STATE = "state.json"
STATE_FORMAT = 1


class SegmentedIndex:
    """Inner-product search over the vectors of one kind held in on-disk segments, a tail and a removed set,
    with the interface of `VectorIndex` (len, add, remove, search, ids) and exact scores: each query's PQ
    shortlist (k + `rerank`) is re-ranked from the raw vectors, and the tail is searched exactly.

    Searches run on a GPU copy of the codes when faiss-gpu sees a GPU (re-ranking stays on the CPU); any
    GPU failure falls back to the CPU."""

    kind = "segments"

    def __init__(self, folder: Path, dim: int, recipe: SegmentRecipe | None = None):
        self.folder, self.dim, self.recipe = Path(folder), dim, recipe or SegmentRecipe()
        self._codec = None
        self._codec_name: str | None = None
        self.trained_on = 0  # live vectors when the codec was trained
        self._segments: list[Segment] = []
        self._removed = np.empty(0, np.int64)  # ascending; only ids inside segments
        self._removed_name: str | None = None  # file holding `_removed` as saved (None: changed since)
        self._tail = VectorIndex(dim)
        self._tail_name: str | None = None
        self.nprobe = 1
        self.tuning: dict = {}
        self._stamp: tuple | None = None  # state.json as loaded or saved (tells a replaced set)
        self._old: list[Segment] = []  # replaced segments, closed once the set naming them is replaced on disk
        self._saved_generation = -1
        self._selector = None
        self._gpu = None

    # ----- opening, creating -----------------------------------------------------------------
    @classmethod
    def open(cls, folder: Path, recipe: SegmentRecipe | None = None) -> tuple[SegmentedIndex, int]:
        """The store saved in `folder` and the generation it reflects. Raises on a missing or damaged set."""
        for attempt in range(5):
            try:
                return cls._open_once(Path(folder), recipe)
            except FileNotFoundError:
                if attempt == 4 or not (Path(folder) / STATE).is_file():
                    raise
                time.sleep(0.1)  # a writer replaced the set meanwhile and deleted the old files: read the new one
        raise AssertionError("unreachable")

    @classmethod
    def _open_once(cls, folder: Path, recipe: SegmentRecipe | None) -> tuple[SegmentedIndex, int]:
        import faiss

        path = folder / STATE
        stamp = _stamp(path)
        state = json.loads(path.read_text())
        if state.get("format") != STATE_FORMAT:
            raise LibraryError(f"{path}: unknown segment state format {state.get('format')!r}")
        store = cls(folder, int(state["dim"]), recipe)
        store._stamp, store._saved_generation = stamp, int(state["generation"])
        store.nprobe, store.tuning, store.trained_on = int(state["nprobe"]), dict(state.get("tuning") or {}), int(state["trained_on"])
        try:
            if state["codec"]:
                codec = faiss.read_index(str(folder / state["codec"]))
                if not isinstance(codec, faiss.IndexIVFPQ) or codec.d != store.dim:
                    raise LibraryError(f"{folder / state['codec']}: not the store's IVF-PQ codec")
                store._codec, store._codec_name = codec, state["codec"]
            for entry in state["segments"]:
                store._segments.append(Segment(folder, SegmentInfo(**entry), store._codec))
            if state["removed"]:
                store._removed = np.load(folder / state["removed"]).astype(np.int64)
                store._removed_name = state["removed"]
            if state["tail"]:
                tail, _ = VectorIndex.load(folder / state["tail"])
                if tail.dim != store.dim:
                    raise LibraryError(f"{folder / state['tail']}: {tail.dim}-d vectors in a {store.dim}-d store")
                store._tail, store._tail_name = tail, state["tail"]
        except BaseException:
            store.close()
            raise
        if len(store) != int(state["count"]):
            store.close()
            raise LibraryError(f"{folder}: {len(store)} vectors, {state['count']} expected")
        return store, store._saved_generation

    @classmethod
    def create(cls, folder: Path, dim: int, chunks: Iterable[tuple[np.ndarray, np.ndarray]], generation: int,
               recipe: SegmentRecipe | None = None) -> SegmentedIndex:
        """A new store in `folder` (replacing any set there) holding the vectors of `chunks`: (ids, vectors)
        pairs, ids ascending across them. Its lists and codebooks are trained on a sample of them."""
        store = cls(folder, dim, recipe)
        store.folder.mkdir(parents=True, exist_ok=True)
        info, codec, codec_name = store._write_segment(chunks, codec=None)
        store._install(codec, codec_name, [info], retrained=True)
        store._write_state(generation)
        store.collect_garbage()
        return store

    def replaced_on_disk(self) -> bool:
        """Whether state.json changed since this store was loaded or saved (a writer saved another set)."""
        return _stamp(self.folder / STATE) != self._stamp

    def close(self) -> None:
        for segment in self._segments:
            segment.close()
        self._segments, self._gpu = [], None

    # ----- what it holds -----------------------------------------------------------------------
    def __len__(self) -> int:
        return self._segment_count() + len(self._tail)

    def _segment_count(self) -> int:
        return sum(s.info.count for s in self._segments) - len(self._removed)

    @property
    def nlist(self) -> int | None:
        return int(self._codec.nlist) if self._codec is not None else None

    @property
    def pq_bytes(self) -> int:
        return int(self._codec.code_size) if self._codec is not None else (self.recipe.pq_bytes or pq_size(self.dim))

    def describe(self) -> dict:
        """Kind, size and search parameters (saved in state.json)."""
        return {"count": len(self), "dim": self.dim, "kind": self.kind, "nlist": self.nlist, "nprobe": self.nprobe,
                "pq_bytes": self.pq_bytes, "rerank": self.recipe.rerank, "segments": len(self._segments),
                "segment_vectors": [s.info.count for s in self._segments], "removed": len(self._removed),
                "tail": len(self._tail), "trained_on": self.trained_on, **{f"tuned_{k}": v for k, v in self.tuning.items()}}

    def memory_bytes(self) -> int:
        """What the store holds in memory: the tail, the removed ids, the coarse centroids and codebooks
        (the segments' codes, ids and vectors stay on disk)."""
        held = self._tail.memory_bytes() + self._removed.nbytes * 4  # the sorted ids and the search's hash set
        if self._codec is not None:
            held += (self._codec.nlist + 2 ** self._codec.pq.nbits) * self.dim * 4  # the centroids and codebooks
        return held

    def tail_bytes(self) -> int:
        return self._tail.memory_bytes()

    def ids(self) -> np.ndarray:
        """All stored ids."""
        parts = [np.asarray(s.ids)[~member(np.asarray(s.ids), self._removed)] for s in self._segments] + [self._tail.ids()]
        return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, np.int64)

    def max_id(self) -> int:
        """The largest id the store has held since its segments were written (-1 when empty)."""
        return max([s.info.last_id for s in self._segments] + [self._tail.max_id()])

    def id_checksum(self) -> tuple[int, int]:
        """(count, sum) of the stored ids, without reading them."""
        _, tail_sum = self._tail.id_checksum()
        total = sum(s.info.id_sum for s in self._segments) - int(self._removed.sum(dtype=np.int64)) + tail_sum
        return len(self), total

    def contents(self) -> tuple[np.ndarray, np.ndarray]:
        """All stored (ids, vectors), in memory."""
        parts = list(self._live_chunks(self._segments, with_tail=True))
        if not parts:
            return np.empty(0, np.int64), np.empty((0, self.dim), np.float32)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    # ----- changes -----------------------------------------------------------------------------
    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Add vectors under the given ids (to the in-memory tail)."""
        if len(ids):
            self._tail.add(ids, vectors)
            self._tail_name = None

    def remove(self, ids: np.ndarray) -> int:
        """Remove vectors by id; returns how many were removed."""
        ids = np.unique(np.asarray(ids, np.int64))
        if not len(ids):
            return 0
        in_segments = np.zeros(len(ids), bool)
        for segment in self._segments:
            in_segments |= segment.rows_of(ids)[1]
        newly = ids[in_segments & ~member(ids, self._removed)]
        if len(newly):
            self._removed = np.union1d(self._removed, newly)
            self._removed_name, self._selector, self._gpu = None, None, None
        removed = self._tail.remove(ids[~in_segments]) if (~in_segments).any() else 0
        if removed:
            self._tail_name = None
        return len(newly) + removed

    # ----- search ------------------------------------------------------------------------------
    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, ids) per query, scores exact; missing slots have id -1."""
        queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        k = max(1, min(k, len(self)))
        if len(self) == 0:
            return np.full((len(queries), k), -np.inf, np.float32), np.full((len(queries), k), -1, np.int64)
        parts = []
        with search_threads(len(queries)):
            if self._segment_count() > 0:
                parts.append(self._search_segments(queries, k, self.nprobe))
            if len(self._tail):
                parts.append(self._tail.search(queries, k))
        if len(parts) == 1:
            return parts[0]
        scores, ids = np.concatenate([p[0] for p in parts], axis=1), np.concatenate([p[1] for p in parts], axis=1)
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(scores, order, axis=1), np.take_along_axis(ids, order, axis=1)

    def _search_segments(self, queries: np.ndarray, k: int, nprobe: int) -> tuple[np.ndarray, np.ndarray]:
        """The segments' top k per query: a PQ shortlist of k + rerank, scored again exactly."""
        import faiss

        nq = len(queries)
        shortlist = min(self._segment_count(), k + self.recipe.rerank)
        nprobe = max(1, min(nprobe, self.nlist))
        found = self._gpu_shortlist(queries, shortlist, nprobe)
        if found is None:
            coarse_scores, coarse = self._codec.quantizer.search(queries, nprobe)
            params = faiss.SearchParametersIVF()
            params.nprobe = nprobe
            if len(self._removed):
                params.sel = self._removed_selector()
            scores, found = [], []
            for segment in self._segments:
                d = np.empty((nq, shortlist), np.float32)
                i = np.empty((nq, shortlist), np.int64)
                segment.index.search_preassigned_c(nq, faiss.swig_ptr(queries), shortlist, faiss.swig_ptr(coarse),
                                                   faiss.swig_ptr(coarse_scores), faiss.swig_ptr(d), faiss.swig_ptr(i), False, params)
                scores.append(d)
                found.append(i)
            found = found[0] if len(found) == 1 else np.take_along_axis(
                np.concatenate(found, axis=1), np.argsort(-np.concatenate(scores, axis=1), axis=1, kind="stable")[:, :shortlist], axis=1)
        out_scores = np.full((nq, k), -np.inf, np.float32)
        out_ids = np.full((nq, k), -1, np.int64)
        for row in range(nq):
            candidates = found[row][found[row] >= 0]
            if not len(candidates):
                continue
            # faiss.knn scores one query exactly as IndexFlatIP does: the same answers as the in-memory library's
            exact, at = faiss.knn(queries[row:row + 1], self._vectors_of(candidates, self._segments),
                                  min(k, len(candidates)), metric=faiss.METRIC_INNER_PRODUCT)
            out_scores[row, :exact.shape[1]] = exact[0]
            out_ids[row, :exact.shape[1]] = candidates[at[0]]
        return out_scores, out_ids

    def _removed_selector(self):
        import faiss

        if self._selector is None:
            batch = faiss.IDSelectorBatch(self._removed)
            self._selector = (faiss.IDSelectorNot(batch), batch)  # the batch must outlive the Not selector
        return self._selector[0]

    def _vectors_of(self, ids: np.ndarray, segments: list[Segment]) -> np.ndarray:
        """The raw vectors of the given ids (each in one of `segments`), in their order."""
        out = np.empty((len(ids), self.dim), np.float32)
        todo = np.ones(len(ids), bool)
        for segment in segments:
            inside = todo & (ids >= segment.info.first_id) & (ids <= segment.info.last_id)
            if not inside.any():
                continue
            where = np.flatnonzero(inside)
            rows, found = segment.rows_of(ids[where])
            where, rows = where[found], rows[found]
            order = np.argsort(rows, kind="stable")
            out[where[order]] = segment.raw.rows(rows[order])
            todo[where] = False
        if todo.any():
            raise LibraryError(f"{self.folder}: vectors {ids[todo][:5].tolist()} are in no segment (a damaged store)")
        return out

    def _gpu_shortlist(self, queries: np.ndarray, shortlist: int, nprobe: int) -> np.ndarray | None:
        """The PQ shortlist from a GPU copy of the live codes (None: no usable GPU, use the CPU)."""
        if self._gpu is False or gpu_count() == 0:
            return None
        import faiss

        try:
            if self._gpu is None:
                gpu = faiss.index_cpu_to_all_gpus(faiss.clone_index(self._codec))
                for ids, vectors in self._live_chunks(self._segments, with_tail=False):
                    gpu.add_with_ids(vectors, ids)  # encoded on the GPU
                self._gpu = gpu
            faiss.GpuParameterSpace().set_index_parameter(self._gpu, "nprobe", nprobe)
            return self._gpu.search(queries, shortlist)[1]
        except Exception as e:  # no CUDA libraries, GPU memory, a k or nprobe past what the GPU allows
            log.warning("faiss GPU search of the segments unavailable, using the CPU: %s", e)
            self._gpu = False
            return None

    @property
    def device(self) -> str:
        return "gpu" if self._gpu not in (None, False) else "cpu"

    # ----- saving ------------------------------------------------------------------------------
    def save(self, generation: int, tail_cap: int) -> None:
        """Write this store as the folder's current set (the writer's, under the library's writer lock):
        flush the tail into a segment once its memory passes `tail_cap` bytes, merge, tune, then replace
        state.json in one rename and delete what no set names."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            changed = self._reorganise(tail_cap)
            tail_saved = self._tail_name is not None or not len(self._tail)
            removed_saved = self._removed_name is not None or not len(self._removed)
            if not changed and tail_saved and removed_saved and generation == self._saved_generation and not self.replaced_on_disk():
                return
            self._write_state(generation)
        except (RuntimeError, OSError) as e:
            reason = "disk full" if is_disk_full(e) else str(e).splitlines()[-1]
            raise LibraryError(f"{self.folder}: cannot save the vector segments ({reason}); the last saved set stays "
                               "and is brought up to date from the database") from e
        self.collect_garbage()

    def _reorganise(self, tail_cap: int) -> bool:
        """Flush, merge, retrain and tune as due; True when the segments changed."""
        changed = False
        grown = self._codec is not None and len(self) > self.recipe.retrain_growth * max(self.trained_on, 1)
        if self._codec is None or grown:
            if len(self) < MIN_VECTORS and self._codec is None:
                return False  # too few to train: the tail holds them
            self._retrain()
            return True
        if len(self._tail) and self._tail.memory_bytes() > tail_cap:
            self._flush_tail()
            changed = True
        changed |= self._merge()
        if changed:
            tune(self)
        return changed

    def _install(self, codec, codec_name: str, infos: list[SegmentInfo], retrained: bool, keep: list[Segment] | None = None,
                 removed: np.ndarray | None = None) -> None:
        """Use new segments (opened from `infos`) beside `keep`; the old ones stay open until garbage is collected."""
        opened = [Segment(self.folder, info, codec) for info in infos]
        self._old = [s for s in self._segments if s not in (keep or [])]
        self._segments = sorted((keep or []) + opened, key=lambda s: (s.info.first_id, s.info.last_id))
        self._codec, self._codec_name = codec, codec_name
        if removed is not None:
            self._removed, self._removed_name = removed, None
        self._selector, self._gpu = None, None
        if retrained:
            self.trained_on, self.tuning = self._segment_count(), {}
            tune(self)

    def _retrain(self) -> None:
        """Train new lists and codebooks on the store's vectors and write them all as one segment."""
        if len(self._tail) and self._segments and int(self._tail.ids().min()) < max(s.info.last_id for s in self._segments):
            self._flush_tail()  # ids out of order (a store brought up to date by a full comparison): keep each part ordered
        sources = list(self._segments)
        chunks = self._ordered_chunks(sources, with_tail=True)
        info, codec, codec_name = self._write_segment(chunks, codec=None)
        self._tail, self._tail_name = VectorIndex(self.dim), None
        self._install(codec, codec_name, [info], retrained=True, removed=np.empty(0, np.int64))
        log.info("vector segments %s: lists and codebooks trained on %d vectors (nlist %d, nprobe %d)", self.folder.name,
                 info.count, self.nlist, self.nprobe)

    def _flush_tail(self) -> None:
        """Write the tail as a new segment (encoded with the current codec)."""
        ids, vectors = self._tail.contents()
        order = np.argsort(ids)
        ids, vectors = ids[order], vectors[order]
        step = max(1, self.recipe.encode_bytes // (self.dim * 4))
        info, _, _ = self._write_segment(((ids[a:a + step], vectors[a:a + step]) for a in range(0, len(ids), step)), codec=self._codec)
        self._tail, self._tail_name = VectorIndex(self.dim), None
        self._install(self._codec, self._codec_name, [info], retrained=False, keep=list(self._segments))

    def _merge(self) -> bool:
        """Write segments with many removed ids again without them, then merge adjacent pairs (the
        smallest first) until at most max_segments remain; True when anything was written."""
        changed = False
        for segment in list(self._segments):
            gone = int(segment.rows_of(self._removed)[1].sum()) if len(self._removed) else 0
            if gone and (gone == segment.info.count or gone > self.recipe.compact_share * segment.info.count):
                self._merge_segments([segment])
                changed = True
        while len(self._segments) > self.recipe.max_segments:
            live = [self._live_count(s) for s in self._segments]
            i = min(range(len(live) - 1), key=lambda j: live[j] + live[j + 1])
            self._merge_segments(self._segments[i:i + 2])
            changed = True
        return changed

    def _live_count(self, segment: Segment) -> int:
        return segment.info.count - (int(segment.rows_of(self._removed)[1].sum()) if len(self._removed) else 0)

    def _merge_segments(self, sources: list[Segment]) -> None:
        """Replace `sources` by one segment of their live vectors, their codes copied (none when all were removed)."""
        inside = np.zeros(len(self._removed), bool)
        for s in sources:
            inside |= s.rows_of(self._removed)[1]
        drop = self._removed[inside]
        keep = [s for s in self._segments if s not in sources]
        infos = []
        if sum(s.info.count for s in sources) > len(drop):
            info, _, _ = self._write_segment(self._ordered_chunks(sources, with_tail=False), codec=self._codec,
                                             lists=[(s.index.invlists, drop) for s in sources])
            infos.append(info)
        self._install(self._codec, self._codec_name, infos, retrained=False, keep=keep, removed=self._removed[~inside])

    def _live_chunks(self, segments: list[Segment], with_tail: bool, rows: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(ids, vectors) of the live vectors of `segments` (each segment in its order), then of the tail."""
        rows = rows or max(1, self.recipe.encode_bytes // (self.dim * 4))
        for segment in segments:
            for start in range(0, segment.info.count, rows):
                stop = min(segment.info.count, start + rows)
                ids = np.asarray(segment.ids[start:stop], np.int64)
                keep = ~member(ids, self._removed)
                if keep.any():
                    yield ids[keep], segment.raw.range(start, stop)[keep]
        if with_tail and len(self._tail):
            ids, vectors = self._tail.contents()
            order = np.argsort(ids)
            yield ids[order], vectors[order]

    def _ordered_chunks(self, segments: list[Segment], with_tail: bool) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The live vectors of `segments` (and the tail), ids ascending across all of them."""
        ordered = all(a.info.last_id < b.info.first_id for a, b in zip(segments, segments[1:], strict=False))
        if ordered:
            yield from self._live_chunks(segments, with_tail)
            return
        ids = np.sort(np.concatenate([np.asarray(s.ids)[~member(np.asarray(s.ids), self._removed)] for s in segments]))
        rows = max(1, self.recipe.encode_bytes // (self.dim * 4))
        for start in range(0, len(ids), rows):
            chunk = ids[start:start + rows]
            yield chunk, self._vectors_of(chunk, segments)
        if with_tail and len(self._tail):
            yield from self._live_chunks([], with_tail=True)

    def _write_segment(self, chunks: Iterable[tuple[np.ndarray, np.ndarray]], codec,
                       lists: list[tuple[object, np.ndarray | None]] | None = None) -> tuple[SegmentInfo, object, str]:
        """A new segment's files in the folder (`write_segment`); returns (info, codec, codec file name)."""
        return write_segment(self.folder, self.dim, self.recipe, chunks, codec, self._codec_name, lists, gpu=self._gpu is not False)

    def _write_state(self, generation: int) -> None:
        """Write the removed ids and the tail when changed, then state.json (one rename: the set is replaced)."""
        if self._removed_name is None and len(self._removed):
            name = f"removed-{new_tag()}.npy"
            with open(self.folder / name, "wb") as f:
                np.save(f, self._removed)
                f.flush()
                os.fsync(f.fileno())
            self._removed_name = name
        if self._tail_name is None and len(self._tail):
            name = f"tail-{new_tag()}.faiss"
            self._tail.write(self.folder / name)
            self._tail_name = name
        state = {"format": STATE_FORMAT, "generation": generation, **self.describe(),
                 "codec": self._codec_name, "tuning": self.tuning,
                 "segments": [asdict(s.info) for s in self._segments],
                 "removed": self._removed_name if len(self._removed) else None,
                 "tail": self._tail_name if len(self._tail) else None}
        write_json_atomic(self.folder / STATE, state)
        fsync_folder(self.folder)
        self._stamp, self._saved_generation = _stamp(self.folder / STATE), generation

    def named_files(self) -> set[str]:
        """The files the current set names."""
        names = {STATE}
        names.update(f for s in self._segments for f in s.info.files())
        names.update(n for n in (self._codec_name, self._removed_name if len(self._removed) else None,
                                 self._tail_name if len(self._tail) else None) if n)
        return names

    def collect_garbage(self) -> int:
        """Delete what the saved set does not name (replaced sets, an unfinished save's files); close replaced segments."""
        for segment in getattr(self, "_old", []):
            segment.close()
        self._old = []
        keep = self.named_files()
        removed = 0
        for p in self.folder.iterdir():
            if p.name not in keep and p.is_file():
                with contextlib.suppress(OSError):
                    p.unlink()
                    removed += 1
        return removed


def _stamp(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size