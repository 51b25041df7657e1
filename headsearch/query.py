"""Query engine: a photo in, the k best distinct head tracks out."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sqlalchemy as sa

from headsearch.crops import HeadCrop, crop_head, whole_image_crop
from headsearch.detect import FaceDetector, detect_heads
from headsearch.embedders import Embedder
from headsearch.errors import NoHeadFound
from headsearch.images import read_image_rgb
from headsearch.library import Library
from schemas import tables as t
from schemas.records import SearchHit

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Thresholds:
    """Score thresholds calibrated by `headsearch bench --calibrate` at one false-accept rate."""

    far: float
    identity: float  # same person at or above this z_id score
    same_look: float  # same look at or above this score (z_head for dual-CLS models, else z_id)
    model: str
    version: str

    @classmethod
    def load(cls, path: Path) -> "Thresholds | None":
        if not path.is_file():
            return None
        try:
            d = json.loads(path.read_text())
            return cls(float(d["far"]), float(d["identity"]), float(d["same_look"]), d["model"], d["version"])
        except (OSError, ValueError, KeyError) as e:
            log.warning("%s: ignoring unreadable thresholds (%s)", path, e)
            return None

    def tier(self, id_score: float, head_score: float | None) -> str:
        if id_score <= self.identity:  # accepted only strictly above, as the thresholds were measured
            return "other_person"
        look = head_score if head_score is not None else id_score
        return "same_look" if look > self.same_look else "other_look"


def query_crops(path: Path, detector: FaceDetector, all_heads: bool, whole_image: bool, crop_px: int = 256) -> list[HeadCrop]:
    """Head crops of a query photo: the largest head, every head, or the whole image as the head."""
    rgb = read_image_rgb(path)
    if whole_image:
        faces = detector.detect(rgb)
        face = max(faces, key=lambda f: f.box.area) if faces else None
        return [whole_image_crop(rgb, face, crop_px)]
    heads = detect_heads(detector, rgb)
    if not heads:
        raise NoHeadFound(f"{path}: no head found (if the photo is already a head crop, e.g. the back of a head, use --whole-image)")
    heads = heads if all_heads else heads[:1]
    return [crop_head(rgb, h.head, h.face, crop_px) for h in heads]


class QueryEngine:
    """Searches one library with the embedder that made it."""

    def __init__(self, library: Library, embedder: Embedder, thresholds: Thresholds | None = None):
        self.library = library
        self.embedder = embedder
        self.thresholds = thresholds

    def search(self, crop: HeadCrop, k: int) -> list[SearchHit]:
        """The k best distinct tracks for one head crop."""
        vectors = self.embedder.embed([crop])
        return self.search_vectors({kind: v[0] for kind, v in vectors.items()}, k)

    def search_vectors(self, query: dict[str, np.ndarray], k: int) -> list[SearchHit]:
        index = self.library.vector_index("id")
        total = len(index)
        if total == 0 or k <= 0:
            return []
        fetch = min(total, max(64, 32 * k))
        with self.library.reader() as conn:
            while True:
                scores, ids = index.search(query["id"], fetch)
                best = self._best_per_track(conn, scores[0], ids[0])
                if len(best) >= k or fetch >= total:
                    break
                fetch = min(total, fetch * 4)
            ranked = sorted(best.items(), key=lambda kv: -kv[1][0])[:k]
            return [self._hit(conn, track_id, score, obs_id, query) for track_id, (score, obs_id) in ranked]

    @staticmethod
    def _best_per_track(conn: sa.Connection, scores: np.ndarray, ids: np.ndarray) -> dict[int, tuple[float, int]]:
        valid = ids >= 0
        scores, ids = scores[valid], ids[valid]
        if len(ids) == 0:
            return {}
        rows = conn.execute(sa.select(t.vectors.c.id, t.vectors.c.track_id, t.vectors.c.observation_id)
                            .where(t.vectors.c.id.in_([int(i) for i in ids]))).fetchall()
        where = {r.id: (r.track_id, r.observation_id) for r in rows}
        best: dict[int, tuple[float, int]] = {}
        for s, i in zip(scores, ids):
            if int(i) not in where:
                continue
            track_id, obs_id = where[int(i)]
            if track_id not in best or s > best[track_id][0]:
                best[track_id] = (float(s), obs_id)
        return best

    def _hit(self, conn: sa.Connection, track_id: int, score: float, obs_id: int, query: dict[str, np.ndarray]) -> SearchHit:
        row = conn.execute(
            sa.select(t.tracks.c.start_time, t.tracks.c.end_time, t.tracks.c.thumbnail, t.videos.c.path, t.observations.c.time)
            .select_from(t.tracks.join(t.videos, t.videos.c.id == t.tracks.c.video_id)
                         .join(t.observations, t.observations.c.id == obs_id))
            .where(t.tracks.c.id == track_id)
        ).one()
        head_score = None
        if "head" in query:
            emb = conn.execute(sa.select(t.vectors.c.embedding).where(t.vectors.c.observation_id == obs_id, t.vectors.c.kind == "head")).scalar()
            if emb is not None:
                head_score = float(np.dot(np.frombuffer(emb, "<f4"), query["head"]))
        tier = self.thresholds.tier(score, head_score) if self.thresholds else None
        return SearchHit(track_id=track_id, video=row.path, start=row.start_time, end=row.end_time, time=row.time,
                         score=score, thumbnail=str((self.library.root / row.thumbnail).resolve()), tier=tier, head_score=head_score)
