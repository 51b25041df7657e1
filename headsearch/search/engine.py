"""The query engine: a query's vectors in, the k best distinct head tracks of a library out, tiered and ranked."""
from __future__ import annotations

import logging

import numpy as np

from headsearch.evaluation.thresholds import Thresholds
from headsearch.evaluation.track_scores import PhotoQuery, TrackScore, score_track
from headsearch.models.registry import find_spec
from headsearch.search.ranking import rank_hits
from headsearch.store.library import Library
from headsearch.store.query_reader import LibraryReader
from headsearch.store.rows import HitRow
from headsearch.vectors.index_cache import Index
from schemas.records import SearchHit, VectorKind

log = logging.getLogger(__name__)


class QueryEngine:
    """Searches one library's vectors: the k best distinct tracks for a query's vectors, tiered and ranked."""

    def __init__(self, library: Library, thresholds: Thresholds | None = None, ranking: str = "appearance"):
        self.library = library
        self.thresholds = thresholds
        self.ranking = ranking  # headsearch.search.ranking: appearance (tiers, then head score) or identity

    def search_vectors(self, query: dict[VectorKind, np.ndarray], k: int) -> list[SearchHit]:
        """The k best distinct tracks for a query's vectors (`k` after tiering and ranking)."""
        spec = find_spec(self.library.model)
        if spec is not None and spec.sees_whole_head and VectorKind.HEAD in self.library.model.kinds and VectorKind.HEAD in query:
            return WholeHeadSearch(self, spec.appearance_dims).search(query, k)
        return self._search_faces(query, k)

    def _search_faces(self, query: dict[VectorKind, np.ndarray], k: int) -> list[SearchHit]:
        """Models that see faces only: tracks found by their identity vectors, the head score of the sighting that matched."""
        index = self.library.vector_index(VectorKind.ID)
        if len(index) == 0 or k <= 0:
            return []
        # Appearance ranking re-orders the best tracks by identity: consider more of them than k.
        wanted = k if self.ranking == "identity" or self.thresholds is None else max(4 * k, 32)
        with self.library.reading() as reader:
            ranked = nearest_tracks(reader, index, query[VectorKind.ID], wanted)
            rows = reader.hits([(track_id, obs_id) for track_id, (_, obs_id) in ranked])
            hits = [self._hit(reader, rows[track_id, obs_id], track_id, score, obs_id, query) for track_id, (score, obs_id) in ranked]
        return rank_hits(hits, self.ranking)[:k]

    def _hit(self, reader: LibraryReader, row: HitRow, track_id: int, score: float, obs_id: int,
             query: dict[VectorKind, np.ndarray]) -> SearchHit:
        head_score = None
        if VectorKind.HEAD in query:
            stored = reader.vector(obs_id, VectorKind.HEAD)
            if stored is not None:
                head_score = float(np.dot(stored, query[VectorKind.HEAD]))
        tier = self.thresholds.tier(score, head_score) if self.thresholds else None
        return SearchHit(track_id=track_id, video=row.path, start=row.start, end=row.end, time=row.time,
                         score=score, thumbnail=str((self.library.root / row.thumbnail).resolve()), tier=tier, head_score=head_score,
                         observation_id=obs_id, id_score=score, yaw=row.yaw)


class WholeHeadSearch:
    """A search with a model that sees whole heads: tracks are found by their identity vectors (sightings with a
    face) and by their head vectors (every sighting), then each candidate track is scored on all its sightings'
    vectors against the photo by the scorer people's moments use too (`headsearch.evaluation.track_scores`): its
    best identity score, its best head score where both sides show a face, and its best appearance score where
    either side does not. A track can then be the person by its face, or, above a strict bar of its own, by the
    look of the head alone (`Thresholds.tier`)."""

    def __init__(self, engine: QueryEngine, appearance_dims: int):
        self.engine = engine
        self.library = engine.library
        self.appearance_dims = appearance_dims

    def search(self, query: dict[VectorKind, np.ndarray], k: int) -> list[SearchHit]:
        q_id = query.get(VectorKind.ID)
        face = q_id is not None and bool(np.any(q_id))
        wanted = max(4 * k, 32)
        candidates: list[int] = []
        with self.library.reading() as reader:
            for kind, vector in ((VectorKind.ID, q_id if face else None), (VectorKind.HEAD, query[VectorKind.HEAD])):
                if vector is not None:
                    candidates += [tr for tr in self._tracks_by(reader, kind, vector, wanted) if tr not in candidates]
            if not candidates:
                return []
            stored = reader.tracks_vectors(candidates)
            photo = PhotoQuery(q_id if face else None, query[VectorKind.HEAD], self.appearance_dims)
            scored = {tr: score_track(stored[tr].kinds, photo, self.engine.thresholds) for tr in candidates if tr in stored}
            rows = reader.hits([(tr, s.sighting) for tr, s in scored.items()])
            hits = [self._hit(rows[tr, s.sighting], tr, s) for tr, s in scored.items()]
        return rank_hits(hits, self.engine.ranking)[:k]

    def _hit(self, row: HitRow, track_id: int, scored: TrackScore) -> SearchHit:
        return scored.hit(track_id, row.path, row.start, row.end, row.time, str((self.library.root / row.thumbnail).resolve()),
                          scored.sighting, row.yaw)

    def _tracks_by(self, reader: LibraryReader, kind: VectorKind, vector: np.ndarray, wanted: int) -> list[int]:
        """The `wanted` tracks whose vectors of one kind are nearest, nearest first."""
        return [tr for tr, _ in nearest_tracks(reader, self.library.vector_index(kind), vector, wanted)]


def nearest_tracks(reader: LibraryReader, index: Index, vector: np.ndarray, wanted: int) -> list[tuple[int, tuple[float, int]]]:
    """The `wanted` distinct tracks with the vectors nearest `vector` in `index`, nearest first, each as (track id, (its
    best score, the sighting that gave it)). Tracks have many vectors: the search asks for 32 per track wanted (64 at
    least), then four times as many until it finds enough tracks or has searched the whole index."""
    total = len(index)
    fetch = min(total, max(64, 32 * wanted))
    best: dict[int, tuple[float, int]] = {}
    while fetch > 0:
        scores, ids = index.search(vector, fetch)
        best = _best_per_track(reader, scores[0], ids[0])
        if len(best) >= wanted or fetch >= total:
            break
        fetch = min(total, fetch * 4)
    return sorted(best.items(), key=lambda kv: -kv[1][0])[:wanted]


def _best_per_track(reader: LibraryReader, scores: np.ndarray, ids: np.ndarray) -> dict[int, tuple[float, int]]:
    """Each track's best score among the found vectors, with the sighting that gave it."""
    where = reader.locate(ids)
    best: dict[int, tuple[float, int]] = {}
    for s, i in zip(scores, ids, strict=True):
        if int(i) not in where:
            continue
        track_id, obs_id = where[int(i)]
        if track_id not in best or s > best[track_id][0]:
            best[track_id] = (float(s), obs_id)
    return best
