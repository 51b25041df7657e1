"""Which track is whose, and each sighting's tier: the sightings of an analysed video as compare scores them.

Each track goes to the reference it is, through the one scorer of a track (`headsearch.evaluation.track_scores`:
`best_match`), as search, people and redact judge a track: by its best sighting's face (identity, or the head score
where the model has a head bar), or, with no face on either side, by the look of the head alone; of several
references the one matched by the face, then the highest score; or to nobody. Each sighting is scored against a
reference on its own (`score_sighting`); a sighting without a face carries the tier of its track's nearest sighting
with one (`carried_tiers`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from headsearch.compare.reference import Reference
from headsearch.evaluation.thresholds import Thresholds
from headsearch.evaluation.track_scores import PhotoQuery, TrackScore, best_match, sighting_rows
from headsearch.models.scoring import head_scores
from schemas.records import FileResult, HeadTrack, Observation, Tier, VectorKind

NO_HEAD = "no_head"
SMALL_FACE_PX = 32.0  # an unconfirmed face shorter than this (analysed pixels) is said too small


def unjudged_reason(obs: Observation, why_dropped: str) -> str:
    """Why a sighting of a track the analysis did not count as a person (`FileResult.dropped_tracks`) left its frame
    unjudged (REASONS)."""
    if why_dropped.startswith("static overlay"):
        return "static_overlay"
    if obs.face is None:
        return "unconfirmed_head"
    if min(obs.face.box.width, obs.face.box.height) < SMALL_FACE_PX:
        return "too_small"
    return "not_a_face" if "implausible landmarks" in why_dropped else "low_confidence"


@dataclass(frozen=True)
class SightingScores:
    identity: float | None
    head: float | None
    tier: str | None  # by the sighting's own scores; None: nothing to score it by


def score_sighting(obs: Observation, ref: Reference, thresholds: Thresholds, appearance_dims: int) -> SightingScores:
    """A sighting against a reference, on its own."""
    v = obs.embeddings
    identity = float(v[VectorKind.ID] @ ref.vectors[VectorKind.ID]) if VectorKind.ID in v and ref.face else None
    head = None
    if VectorKind.HEAD in v and VectorKind.HEAD in ref.vectors:
        head = float(head_scores(ref.vectors[VectorKind.HEAD], ref.face, v[VectorKind.HEAD][None, :],
                                 np.array([VectorKind.ID in v]), appearance_dims)[0])
    if identity is not None:
        tier = str(thresholds.tier(identity, head))
    elif head is not None and appearance_dims:
        tier = str(thresholds.tier(None, None, head))
    else:
        tier = None
    return SightingScores(identity, head, tier)

def reference_query(ref: Reference, appearance_dims: int) -> PhotoQuery:
    """A reference as the scorer's query: its identity vector (None: none of its heads showed a face) and head vector."""
    return PhotoQuery(ref.vectors.get(VectorKind.ID), ref.vectors.get(VectorKind.HEAD),
                      appearance_dims if VectorKind.HEAD in ref.vectors else 0)


def track_matches(tracks: Sequence[HeadTrack], references: Sequence[Reference], thresholds: Thresholds,
                  appearance_dims: int) -> list[tuple[int, TrackScore] | None]:
    """Each track's reference (its index) and the scorer's judgement of the track against it, or None: the best of
    those it is (`best_match`)."""
    queries = [reference_query(ref, appearance_dims) for ref in references]
    kinds = [set(ref.vectors) for ref in references]
    out: list[tuple[int, TrackScore] | None] = []
    for track in tracks:
        rows = sighting_rows(track.observations)
        # each reference scores the kinds it has vectors of (a reference of a face model has no head vector)
        found = [best_match({k: v for k, v in rows.items() if k in kinds[r]}, [queries[r]], thresholds) for r in range(len(references))]
        best = max(((r, m[1]) for r, m in enumerate(found) if m is not None),
                   key=lambda rm: (not rm[1].matched_without_face, rm[1].score), default=None)
        out.append(best)
    return out


def assign_tracks(tracks: Sequence[HeadTrack], references: Sequence[Reference], thresholds: Thresholds,
                  appearance_dims: int) -> list[int | None]:
    """Each track's reference (its index), or None (`track_matches`)."""
    return [None if m is None else m[0] for m in track_matches(tracks, references, thresholds, appearance_dims)]


@dataclass
class Sampled:
    """An analysed video as its sampled frames are scored: its tracks in time order, their sightings by frame, why
    the sightings of dropped tracks were not judged, by frame, its shots and sampled frames."""

    tracks: list[HeadTrack]
    at: dict[int, list[tuple[int, Observation]]]  # frame index -> (track number, sighting)
    unjudged: dict[int, list[str]]  # frame index -> REASONS of its dropped sightings
    shots: list
    samples: list[tuple[int, float]]
    end: float  # the video's end

    @classmethod
    def of(cls, result: FileResult) -> Sampled:
        tracks = sorted(result.tracks, key=lambda tr: (tr.start, tr.shot_index))
        at: dict[int, list[tuple[int, Observation]]] = {}
        for n, track in enumerate(tracks):
            for obs in track.observations:
                at.setdefault(obs.frame_index, []).append((n, obs))
        unjudged: dict[int, list[str]] = {}
        for track, why in result.dropped_tracks:
            for obs in track.observations:
                unjudged.setdefault(obs.frame_index, []).append(unjudged_reason(obs, why))
        shots = sorted(result.shots, key=lambda s: s.start_frame)
        end = shots[-1].end_time if shots else (result.samples[-1][1] if result.samples else 0.0)
        return cls(tracks, at, unjudged, shots, sorted(result.samples), end)

    def frames(self):
        """Each sampled frame: (frame index, time, the next sampled frame's time or the video's end, shot)."""
        for i, (index, time) in enumerate(self.samples):
            end = self.samples[i + 1][1] if i + 1 < len(self.samples) else max(self.end, time)
            yield index, time, end, shot_of(self.shots, index)


def unjudged_frame(reasons: Sequence[str]) -> str:
    """Why a frame with no head kept was not judged: the reason of most of its dropped sightings, else no head."""
    return max(sorted(set(reasons)), key=reasons.count) if reasons else NO_HEAD


def joined_owners(tracks: Sequence[HeadTrack], result: FileResult, owner: list[int | None]) -> tuple[list[int | None], list[list[int]]]:
    """Tracks joined within their shot (`HeadTrack.join`, `indexer.rejoin`) are one person: a track no reference took goes
    to the reference that took another of its person's; and each track's mates (the other tracks of its person)."""
    index = {id(tr): i for i, tr in enumerate(result.tracks)}
    group = [tr.join.to if tr.join is not None else index.get(id(tr), -1 - n) for n, tr in enumerate(tracks)]
    taken = {g: o for g, o in zip(group, owner, strict=True) if o is not None}
    mates = [[m for m, h in enumerate(group) if h == g and m != n] for n, g in enumerate(group)]
    return [o if o is not None else taken.get(g) for o, g in zip(owner, group, strict=True)], mates


def carried_tiers(track: HeadTrack, n: int, scores: dict, mates: Sequence[tuple[int, HeadTrack]] = ()) -> dict[int, tuple[str, bool]]:
    """Each sighting's tier in a track (frame index -> (tier, carried)): a sighting with a face by its own scores; one
    without, by the nearest sighting with a face in time of the track or of its person's other tracks in the shot
    (`mates`: joined to it), or by its own look where none shows one."""
    faced = [(o.time, scores[m, o.frame_index].tier) for m, tr in ((n, track), *mates) for o in tr.observations
             if scores[m, o.frame_index].identity is not None and scores[m, o.frame_index].tier is not None]
    out = {}
    for o in track.observations:
        own = scores[n, o.frame_index]
        if own.identity is not None and own.tier is not None:
            out[o.frame_index] = (own.tier, False)
        elif faced:
            out[o.frame_index] = (min(faced, key=lambda ft: (abs(ft[0] - o.time), ft[0]))[1], True)
        else:
            out[o.frame_index] = (own.tier or str(Tier.OTHER_PERSON), False)
    return out


def shot_of(shots: Sequence, frame_index: int) -> int:
    for s in shots:
        if s.start_frame <= frame_index <= s.end_frame:
            return s.index
    return shots[-1].index if shots else 0
