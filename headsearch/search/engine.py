"""The query engine: a query's vectors in, the k best distinct head tracks of a library out, tiered and ranked."""
from __future__ import annotations

import logging

import numpy as np

from headsearch.evaluation.thresholds import Thresholds
from headsearch.search.ranking import rank_hits
from headsearch.store.library import Library
from headsearch.store.readers import LibraryReader
from schemas.records import SearchHit, VectorKind

log = logging.getLogger(__name__)


class QueryEngine:
    """Searches one library's vectors: the k best distinct tracks for a query's vectors, tiered and ranked."""

    def __init__(self, library: Library, thresholds: Thresholds | None = None, ranking: str = "appearance"):
        self.library = library
        self.thresholds = thresholds
        self.ranking = ranking  # headsearch.search.ranking: appearance (tiers, then head score) or identity

    def search_vectors(self, query: dict[VectorKind, np.ndarray], k: int) -> list[SearchHit]:
        index = self.library.vector_index(VectorKind.ID)
        total = len(index)
        if total == 0 or k <= 0:
            return []
        # Appearance ranking re-orders the best tracks by identity: consider more of them than k.
        wanted = k if self.ranking == "identity" or self.thresholds is None else max(4 * k, 32)
        fetch = min(total, max(64, 32 * wanted))
        with self.library.reading() as reader:
            while True:
                scores, ids = index.search(query[VectorKind.ID], fetch)
                best = self._best_per_track(reader, scores[0], ids[0])
                if len(best) >= wanted or fetch >= total:
                    break
                fetch = min(total, fetch * 4)
            ranked = sorted(best.items(), key=lambda kv: -kv[1][0])[:wanted]
            hits = [self._hit(reader, track_id, score, obs_id, query) for track_id, (score, obs_id) in ranked]
        return rank_hits(hits, self.ranking)[:k]

    @staticmethod
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

    def _hit(self, reader: LibraryReader, track_id: int, score: float, obs_id: int, query: dict[VectorKind, np.ndarray]) -> SearchHit:
        row = reader.hit(track_id, obs_id)
        head_score = None
        if VectorKind.HEAD in query:
            stored = reader.vector(obs_id, VectorKind.HEAD)
            if stored is not None:
                head_score = float(np.dot(stored, query[VectorKind.HEAD]))
        tier = self.thresholds.tier(score, head_score) if self.thresholds else None
        return SearchHit(track_id=track_id, video=row.path, start=row.start, end=row.end, time=row.time,
                         score=score, thumbnail=str((self.library.root / row.thumbnail).resolve()), tier=tier, head_score=head_score,
                         observation_id=obs_id, id_score=score)
