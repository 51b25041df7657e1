"""Whom a redaction hides, sighting by sighting: one rule for `--ref P` and `--all-except P`.

A track is judged against a person by the one scorer (`headsearch.evaluation.track_scores`), as a whole (its best
row: what `--ref` hides) and at each sighting whose face was embedded (that sighting's rows alone, at the same bars).
In a crowd the tracker can pass from one head to the next behind it (on facenet-pytorch's video.mp4 a track began on
the boy in the blue hoodie at frame 0, identity 0.75, and went on along the woman behind him, 0.07-0.15 at frames
13-39): where a sighting shows a face, its own verdict holds for the frames nearest it; the frames nearest sightings
without a face take the track's verdict. So `--all-except P` spares every frame of every track where P's face is seen,
and hides a bystander a spared track passed on to.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from headsearch.evaluation.thresholds import Thresholds
from headsearch.evaluation.track_scores import PhotoQuery, TrackRows, judged_by, score_track
from schemas.records import Tier


@dataclass(frozen=True)
class Verdict:
    """Whether a head is the person (`same`), and why, in words (the scores it was judged by, with their bars)."""

    same: bool
    why: str


@dataclass(frozen=True)
class Span:
    """Frames `first`..`last` of a track (inclusive) under one verdict."""

    first: int
    last: int
    verdict: Verdict


def verdict(rows: TrackRows, query: PhotoQuery, thresholds: Thresholds) -> Verdict:
    """Rows of a track (all of them, or one sighting's) judged against a person's photo by the one scorer, at its bars."""
    scored = score_track(rows, query, thresholds)
    said = judged_by(scored, thresholds)
    if scored.tier is None or scored.tier == Tier.OTHER_PERSON:
        return Verdict(False, f"another person: {said}")
    if scored.matched_without_face:
        return Verdict(True, f"same person by the look of the head: {said}")
    return Verdict(True, f"same person: {said}")


def sighting_rows(rows: TrackRows, key: int) -> TrackRows:
    """The rows of one sighting (its key) that show its face: empty where it has none (no face seen, or not embedded)."""
    out = {}
    for kind, (keys, faces, vectors) in rows.items():
        mine = (keys == key) & faces
        if mine.any():
            out[kind] = (keys[mine], faces[mine], vectors[mine])
    return out


def sighting_faces(rows: TrackRows, keys: Sequence[int]) -> tuple[bool, ...]:
    """Whether each sighting (by key) was seen with a face, as its rows say (False where it has no rows)."""
    faced = set()
    for k, f, _ in rows.values():
        faced.update(int(x) for x in k[f])
    return tuple(int(k) in faced for k in keys)


def judged_spans(frames: Sequence[int], keys: Sequence[int], rows: TrackRows, covered: tuple[int, int], whole: Verdict,
                 judge: Callable[[TrackRows], Verdict]) -> list[Span]:
    """A track's covered frames (`covered`) split by verdict: each frame takes the verdict of the nearest sighting (by
    frame; `frames`, `keys`: the sightings' frames and keys) whose face was embedded, judged alone by `judge`; the
    track's own verdict (`whole`) where no sighting shows a face. A span's why is its first sighting's."""
    judged = [(f, judge(own)) for f, k in zip(frames, keys, strict=True) if (own := sighting_rows(rows, int(k)))]
    first, last = covered
    if not judged or all(v.same == whole.same for _, v in judged):
        return [Span(first, last, whole)]
    at = np.array([f for f, _ in judged])
    spans: list[Span] = []
    for frame in range(first, last + 1):
        verdict = judged[int(np.abs(at - frame).argmin())][1]
        if spans and spans[-1].verdict.same == verdict.same:
            spans[-1] = Span(spans[-1].first, frame, spans[-1].verdict)
        else:
            spans.append(Span(frame, frame, verdict))
    return [Span(s.first, s.last, Verdict(s.verdict.same, f"by its sighting with a face nearest these frames, {s.verdict.why}")) for s in spans]


def whom_spans(judged: Sequence[tuple[str, Sequence[Span]]], covered: tuple[int, int]) -> list[tuple[int, int, str | None, str]]:
    """A track's covered frames against every person spared (`judged`: each one's name and the track's spans for them),
    as (first, last, the person who spares these frames or None, why): spared by the first person judged the same
    there; else hidden, with each person's why."""
    out: list[tuple[int, int, str | None, str]] = []
    for frame in range(covered[0], covered[1] + 1):
        at = [(name, next(s.verdict for s in spans if s.first <= frame <= s.last)) for name, spans in judged]
        same = next(((name, v) for name, v in at if v.same), None)
        label = (same[0], same[1].why) if same is not None else (None, "; ".join(f"{name}: {v.why}" for name, v in at))
        if out and out[-1][2:] == label and out[-1][1] == frame - 1:
            out[-1] = (out[-1][0], frame, *label)
        else:
            out.append((frame, frame, *label))
    return out
