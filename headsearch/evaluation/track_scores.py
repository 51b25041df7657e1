"""One scorer of a track against a query, used by search (a photo's vectors), people (a person's template), redact and
compare (which of several people a track is: `best_match`).

A track comes as rows per vector kind: (keys, whether each row shows a face, the vectors as rows); search gives one row
per embedded sighting (keys: sighting ids), people one row per track, its mean vector (keys: the track id). The
query says whether it shows a face and how a row compares with it (`PhotoQuery`, `PersonTemplate`); the scorer
decides, once for both, which rows count for which score and what the scores mean:

* identity: every identity row against the query's identity (only when the query shows a face);
* head: the head rows that show a face, where the query shows one too (the head vectors' cosine);
* appearance: the look of the head alone (`headsearch.models.scoring.appearance_part`) of the rows without a face
  (every row when the query shows none), for models whose head vector ends in an appearance part;
* each score is the best row's; the sighting shown is the best identity row's, else the best face row's, else the
  best appearance row's, which also wins where the face says another person and the look alone says the same;
* the tier by the thresholds (`Thresholds.tier`); matched without a face when that tier holds by the look alone;
  the score the hit is ranked by: identity where there is one, else appearance.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from headsearch.evaluation.thresholds import Thresholds
from headsearch.models.scoring import appearance_part
from schemas.records import Observation, SearchHit, Tier, VectorKind

# kind -> (keys: sighting or track ids, whether each row shows a face, the vectors as rows)
TrackRows = Mapping[VectorKind, tuple[np.ndarray, np.ndarray, np.ndarray]]


class Query(Protocol):
    """What a track is scored against: whether it shows a face, and each row's similarity to it, by kind (None: the
    query has nothing to compare those rows with)."""

    face: bool  # the query shows a face: identity and head scores count; only rows without a face are compared by look
    appearance_dims: int  # the width of the head vectors' appearance part (0: no appearance score)

    def identity(self, keys: np.ndarray, rows: np.ndarray) -> np.ndarray | None: ...

    def head(self, keys: np.ndarray, rows: np.ndarray) -> np.ndarray | None: ...

    def appearance(self, keys: np.ndarray, rows: np.ndarray) -> np.ndarray | None: ...


class PhotoQuery:
    """A photo's head: its identity vector (None without a face) and its head vector; a row's score is its cosine."""

    def __init__(self, identity: np.ndarray | None, head: np.ndarray, appearance_dims: int):
        self.face = identity is not None
        self._identity, self._head, self.appearance_dims = identity, head, appearance_dims
        self._look = appearance_part(head, appearance_dims)[0] if appearance_dims else None  # once, not per track

    def identity(self, keys: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return rows @ self._identity

    def head(self, keys: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return rows @ self._head

    def appearance(self, keys: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return appearance_part(rows, self.appearance_dims) @ self._look


class PersonTemplate:
    """A person of the library as a query, each of its tracks scored against the rest of it: identity, the mean similarity
    to the person's other tracks (`ids`: track -> mean identity vector) and its reference photos (`reference`: kind ->
    rows); head, the mean similarity to the reference photos where there are some, else to the person's main look (`main`:
    its tracks; the track itself left out); the look alone, the mean against the main look (every track of `heads` where
    there is no main look). A person whose identity rests on one track (no other track with a face, no reference photo)
    has nothing to compare it with: that track scores 1."""

    def __init__(self, ids: dict[int, np.ndarray], heads: dict[int, np.ndarray], main: list[int],
                 reference: dict[VectorKind, np.ndarray], appearance_dims: int):
        self.ids, self.heads, self.main, self.appearance_dims = ids, heads, main, appearance_dims
        ref_id, ref_head = reference.get(VectorKind.ID), reference.get(VectorKind.HEAD)
        self.face = bool(ids) or ref_id is not None
        self.alone = len(ids) == 1 and ref_id is None
        self._identity = dict(zip(ids, _leave_one_out(np.stack(list(ids.values())), ref_id).tolist(), strict=True)) if ids else {}
        self._reference = ref_head if ref_head is not None and len(ref_head) else None
        self._main = np.stack([heads[tr] for tr in main]) if main else None
        looks = main or list(heads)
        self._look = appearance_part(np.stack([heads[tr] for tr in looks]), appearance_dims) if appearance_dims and looks else None

    def rows(self, track_id: int) -> dict[VectorKind, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """A track of the person as the template scores it: its mean vectors, one row per kind (showing a face where it
        has an identity vector)."""
        key, face = np.array([track_id], np.int64), np.array([track_id in self.ids])
        return {kind: (key, face, vectors[track_id][None]) for kind, vectors in ((VectorKind.ID, self.ids), (VectorKind.HEAD, self.heads))
                if track_id in vectors}

    def identity(self, keys: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return np.array([1.0 if self.alone else self._identity[int(k)] for k in keys])

    def head(self, keys: np.ndarray, rows: np.ndarray) -> np.ndarray | None:
        if self.alone:
            return np.ones(len(rows))
        if self._reference is not None:
            return np.array([float(np.mean(self._reference @ v)) for v in rows])
        if self._main is None:
            return None
        return np.array([self._main_look(int(k) in self.main, v) for k, v in zip(keys, rows, strict=True)])

    def _main_look(self, mine: bool, v: np.ndarray) -> float:
        """A head's mean similarity to the main look's other tracks (its own, 1, taken out where it is one of them)."""
        return float(((self._main @ v).sum() - (1.0 if mine else 0.0)) / max(len(self.main) - mine, 1))

    def appearance(self, keys: np.ndarray, rows: np.ndarray) -> np.ndarray | None:
        if self._look is None:
            return None
        return np.array([float(np.mean(self._look @ appearance_part(v, self.appearance_dims)[0])) for v in rows])


def _leave_one_out(vectors: np.ndarray, reference: np.ndarray | None = None) -> np.ndarray:
    """Each row's mean similarity to the other rows (and to every row of `reference`)."""
    n = len(vectors)
    total = vectors @ vectors.sum(axis=0) - np.einsum("ij,ij->i", vectors, vectors)
    count = n - 1
    if reference is not None and len(reference):
        total = total + vectors @ reference.sum(axis=0)
        count += len(reference)
    return total / max(count, 1)


@dataclass(frozen=True)
class TrackScore:
    """A track's scores against a query, the sighting (row key) that matched best, and what they mean."""

    id_score: float | None
    head_score: float | None
    appearance_score: float | None
    sighting: int | None  # the key of the row that matched best (None: no row was scored)
    tier: Tier | None  # None: uncalibrated
    matched_without_face: bool  # the tier holds by the look of the head alone, no face vouching for it

    @property
    def score(self) -> float:
        """What the hit is ranked by: its identity score, else its appearance score."""
        if self.id_score is not None:
            return self.id_score
        return self.appearance_score if self.appearance_score is not None else 0.0

    def hit(self, track_id: int, video: str, start: float, end: float, time: float, thumbnail: str,
            observation_id: int | None, yaw: float | None = None) -> SearchHit:
        """The track as a hit, shown at `observation_id` (whose face is turned `yaw` degrees, where it shows one)."""
        return SearchHit(track_id=track_id, video=video, start=start, end=end, time=time, score=float(self.score), thumbnail=thumbnail,
                         tier=self.tier, head_score=self.head_score, observation_id=observation_id, id_score=self.id_score,
                         appearance_score=self.appearance_score, matched_without_face=self.matched_without_face, yaw=yaw)


def _best(scores: np.ndarray | None, keys: np.ndarray) -> tuple[float | None, int | None]:
    """The best score of the rows and its row's key (None where the query could not score them)."""
    if scores is None:
        return None, None
    i = int(scores.argmax())
    return float(scores[i]), int(keys[i])


def score_track(rows: TrackRows, query: Query, thresholds: Thresholds | None) -> TrackScore:
    """A track's rows against a query: its identity, head and appearance scores, the sighting shown, tier and all."""
    id_score, head_score, sighting = _by_face(rows, query)
    appearance_score, look_key = _by_look(rows, query)
    if look_key is not None and (sighting is None or _look_alone_says_same(thresholds, id_score, head_score, appearance_score)):
        sighting = look_key
    tier = thresholds.tier(id_score, head_score, appearance_score) if thresholds else None
    by_face = thresholds is not None and thresholds.tier(id_score, head_score) != Tier.OTHER_PERSON
    return TrackScore(id_score, head_score, appearance_score, sighting, tier, tier is not None and tier != Tier.OTHER_PERSON and not by_face)


def _by_face(rows: TrackRows, query: Query) -> tuple[float | None, float | None, int | None]:
    """(identity score, head score of the rows showing a face, the key of the best identity row, else of the best such
    head row): none where the query shows no face."""
    id_score = head_score = sighting = None
    if not query.face:
        return id_score, head_score, sighting
    if VectorKind.ID in rows:
        keys, _, v = rows[VectorKind.ID]
        id_score, sighting = _best(query.identity(keys, v), keys)
    if VectorKind.HEAD in rows and rows[VectorKind.HEAD][1].any():
        keys, faces, v = rows[VectorKind.HEAD]
        head_score, face_key = _best(query.head(keys[faces], v[faces]), keys[faces])
        sighting = sighting if sighting is not None else face_key
    return id_score, head_score, sighting


def _by_look(rows: TrackRows, query: Query) -> tuple[float | None, int | None]:
    """(appearance score, the key of its row): the look of the head alone of the rows without a face (every row when the
    query shows none), for models whose head vectors have an appearance part."""
    if not query.appearance_dims or VectorKind.HEAD not in rows:
        return None, None
    keys, faces, v = rows[VectorKind.HEAD]
    alone = ~faces if query.face else np.ones(len(keys), bool)
    return _best(query.appearance(keys[alone], v[alone]), keys[alone]) if alone.any() else (None, None)


def _look_alone_says_same(thresholds: Thresholds | None, id_score: float | None, head_score: float | None,
                          appearance_score: float | None) -> bool:
    """The face says another person and the look of the head alone says the same one."""
    return (thresholds is not None and thresholds.tier(id_score, head_score) == Tier.OTHER_PERSON
            and thresholds.tier(None, None, appearance_score) != Tier.OTHER_PERSON)


def sighting_rows(sightings: Sequence[Observation]) -> TrackRows:
    """A track's sightings as the scorer reads a track: per vector kind, (their frame numbers, whether each shows a face,
    their vectors as rows); kinds no sighting has are left out."""
    rows: dict[VectorKind, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for kind in VectorKind:
        have = [o for o in sightings if kind in o.embeddings]
        if have:
            rows[kind] = (np.array([o.frame_index for o in have], np.int64), np.array([o.face_visible for o in have], bool),
                          np.stack([o.embeddings[kind] for o in have]).astype(np.float32))
    return rows


def best_match(rows: TrackRows, queries: Sequence[Query], thresholds: Thresholds) -> tuple[int, TrackScore] | None:
    """Which of several people (queries) a track is: of those whose tier is not another person's, the one matched by the
    face before one matched by the look alone, then the highest score (`TrackScore.score`); None: none of them. `compare`
    gives each track to one of its references this way, as search, people and redact judge a track against one."""
    best: tuple[tuple[bool, float], int, TrackScore] | None = None
    for n, query in enumerate(queries):
        scored = score_track(rows, query, thresholds)
        if scored.tier is None or scored.tier == Tier.OTHER_PERSON:
            continue
        key = (not scored.matched_without_face, scored.score)
        if best is None or key > best[0]:
            best = (key, n, scored)
    return None if best is None else (best[1], best[2])


def judged_by(score: TrackScore, thresholds: Thresholds) -> str:
    """The scores a track was judged by, each with its bar ("identity 0.752 > 0.387, look of the head 0.229 <= 0.796"):
    the words of a redaction's audit trail, so a verdict can be checked; scores without a bar are left out."""
    said = [f"{name} {value:.3f} {'>' if value > bar else '<='} {bar:.3f}"
            for name, value, bar in (("identity", score.id_score, thresholds.identity), ("head", score.head_score, thresholds.head_identity),
                                     ("look of the head", score.appearance_score, thresholds.appearance))
            if value is not None and bar is not None]
    return ", ".join(said) or "no score with a bar"
