"""A video's timeline against reference people: per sampled frame the reference person's head and its tier, runs of
one tier (segments), drift events, a summary and a verdict.

Per frame, for one reference:
- the heads of the frame are the sightings of the analysis' tracks there; each track goes to the reference it is, as
  search, people and redact judge a track (`headsearch.compare.sightings`: the one scorer of a track, by its best
  sighting's face, else the look of its head), or to nobody; the reference's head in a frame is its own track's sighting,
  else the best-scoring head no other reference took, else none of them is the person (`other_person`);
- a sighting with a face is tiered by its own scores (`Thresholds.tier`: identity, then the head score for the look);
  a sighting without one (a profile, the back of the head) carries the tier of its track's nearest sighting with a
  face in time (the tracker followed the same head), and only a track that never shows a face is tiered by the look of
  the head alone (`same_look` above the strict appearance bar, else `other_person`);
- a sampled frame with no head is `no_head`.

Each frame also says how it was judged (`judged`): `face` (the person's head scored by its face: identity and head
vectors), `head` (by the look of the head alone: no usable face), or `none`, with the `reason` (`REASONS`); and, where
judged, the person's `view`: `frontal` (under 30 degrees of yaw), `three_quarter` (30-60), `profile` (over 60), or
`back` (a head without a face). The summary's `coverage` and `views` add these up over the video's frames.

Segments are runs of one tier on the file's presentation timeline: a frame lasts until the next sampled frame (every
shot's first frame is sampled, so a segment that starts at a cut starts on the cut's first frame). A run shorter than
`min_segment_s` joins its neighbour within the same shot; a run bounded by cuts on both sides (a shot of its own) stays.
A drift event is a fall in tier (same look -> other look or other person, other look -> other person) from one
segment with a head to the next, where the lower segment holds at least `drift_min_frames` frames of the person's head
scored on their own (not carried), and the fall holds up (`confirmed_fall`): the segments' mean scores fall too, by
more than the model's measured frame noise allows at the bars' false-accept rate. A consistent clip whose frames
wander across a bar raises none.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from headsearch.compare.reference import Reference
from headsearch.compare.sightings import (
    NO_HEAD,
    Sampled,
    assign_tracks,
    carried_tiers,
    joined_owners,
    score_sighting,
    unjudged_frame,
)
from headsearch.detection.pose import face_yaw, yaw_view
from headsearch.evaluation.thresholds import Thresholds
from schemas.records import FileResult, Observation, Tier, join_words

TIERS = (str(Tier.SAME_LOOK), str(Tier.OTHER_LOOK), str(Tier.OTHER_PERSON), NO_HEAD)
RANK = {str(Tier.SAME_LOOK): 2, str(Tier.OTHER_LOOK): 1, str(Tier.OTHER_PERSON): 0}  # no_head has no rank: it is not a fall
SAME_PERSON = (str(Tier.SAME_LOOK), str(Tier.OTHER_LOOK))

# How a frame was judged, why not, and the person's view.
JUDGED = ("face", "head", "none")
REASONS = {  # why a sampled frame was not judged
    "no_head": "no head in the frame",
    "too_small": "a face too small to confirm as a person's",
    "low_confidence": "a face too unsure to confirm (blurred, turned or covered)",
    "not_a_face": "something face-like whose landmarks lie as on no face (a hand, a pattern)",
    "static_overlay": "a face that stays put while the picture changes (a poster, a logo)",
    "unconfirmed_head": "a head found by body keypoints alone, with too little evidence of a person",
    "no_face": "the head shows no face and the model judges faces only",
}
VIEWS = ("frontal", "three_quarter", "profile", "back")

# Verdicts of a video.
VERDICTS = ("no_head", "drift", "other_person", "other_look", "same_look")
MAJORITY = 0.5  # below this same-person share of the head frames, the video is another person's


@dataclass(frozen=True)
class CompareSettings:
    """How frames become segments and drift events."""

    min_segment_s: float = 1.0  # shorter runs of one tier join their neighbour within the shot
    drift_min_frames: int = 2  # a drift's lower segment holds at least this many frames scored on their own
    chunk_frames: int | None = None  # the clip was generated in chunks of this many frames (its seams are scored)
    chunk_overlap: int = 0  # ...each overlapping the one before by this many frames

    def seam_frames(self, frames: int) -> list[int]:
        """Where chunks meet in a clip of `frames` frames: each chunk after the first starts `chunk_frames - chunk_overlap`
        frames after the one before; its seam is the middle of the overlap (the chunk's first frame without one)."""
        if not self.chunk_frames:
            return []
        step = self.chunk_frames - self.chunk_overlap
        seams = (k * step + self.chunk_overlap // 2 for k in range(1, frames // step + 1))
        return [at for at in seams if at < frames]


@dataclass
class Frame:
    """One sampled frame, for one reference."""

    time: float
    end: float  # the next sampled frame's time (or the video's end)
    index: int  # the decoded frame's number
    shot: int
    tier: str
    identity: float | None = None  # identity score of the person's head (where it shows a face)
    head: float | None = None  # head score (with a face on both sides: the whole head vector; else the look of the head alone)
    face: bool = False  # the person's head shows a face
    box: tuple[float, float, float, float] | None = None  # the head in the file's pixels
    track: int | None = None  # the track (numbered from 1 in time order)
    carried: bool = False  # the tier came from the track's nearest sighting with a face
    heads: int = 0  # heads in the frame
    face_identity: float | None = None  # FaceSim-style: the largest face of the frame against the reference's identity
    yaw: float | None = None  # degrees the person's face is turned (signed; `headsearch.detection.pose`), where it shows one
    judged: str = "none"  # JUDGED: by the face, by the look of the head alone, or not at all
    reason: str | None = None  # REASONS: why not judged
    view: str | None = None  # VIEWS: the person's head as seen, where judged
    joined: str | None = None  # the person's track was joined within the shot to another of theirs: the cue, in words

    @property
    def duration(self) -> float:
        return max(0.0, self.end - self.time)

    @property
    def score(self) -> float | None:
        """The identity score where the face was judged, else the head score."""
        return self.identity if self.identity is not None else self.head

    def to_dict(self) -> dict:
        return {"time": round(self.time, 3), "tier": self.tier, "identity": _round(self.identity), "head": _round(self.head),
                "face": self.face, "box": None if self.box is None else [round(float(v), 1) for v in self.box], "track": self.track,
                "carried": self.carried, "heads": self.heads, "shot": self.shot, "frame": self.index,
                "yaw": None if self.yaw is None else round(self.yaw, 1), "judged": self.judged, "reason": self.reason, "view": self.view,
                "joined": self.joined}


@dataclass
class Segment:
    """A run of one tier."""

    start: float
    end: float
    tier: str
    frames: list[Frame] = field(default_factory=list, repr=False)
    at_cut: bool = False  # starts on a shot's first frame (or the video's)
    ends_at_cut: bool = False  # ends where a shot (or the video) ends

    @property
    def duration(self) -> float:
        return self.end - self.start

    def _mean(self, name: str) -> float | None:
        values = [getattr(f, name) for f in self.frames if getattr(f, name) is not None and not f.carried]
        return float(np.mean(values)) if values else None

    @property
    def identity(self) -> float | None:
        return self._mean("identity")

    @property
    def head(self) -> float | None:
        return self._mean("head")

    @property
    def score(self) -> float | None:
        """The mean identity score of its frames showing the person's face, else their mean head score."""
        identity = self.identity
        return identity if identity is not None else self.head

    @property
    def scored(self) -> int:
        """Frames of the person's head scored on their own (not carried)."""
        return sum(1 for f in self.frames if f.tier != NO_HEAD and not f.carried and (f.identity is not None or f.head is not None))

    def to_dict(self) -> dict:
        shots = sorted({f.shot for f in self.frames})
        return {"start": round(self.start, 3), "end": round(self.end, 3), "tier": self.tier, "score": _round(self.score),
                "identity": _round(self.identity), "head": _round(self.head), "frames": len(self.frames),
                "faces": sum(f.face for f in self.frames), "shots": [shots[0], shots[-1]] if shots else [], "at_cut": self.at_cut}


@dataclass(frozen=True)
class Drift:
    """Where the tier fell (or, in a clip that starts as another person or look, first rose)."""

    time: float
    before: str
    after: str
    shot: int
    at_cut: bool
    score: float | None

    def to_dict(self) -> dict:
        return {"time": round(self.time, 3), "from": self.before, "to": self.after, "shot": self.shot, "at_cut": self.at_cut,
                "score": _round(self.score)}


SEAM_WINDOW_S = 1.0  # a seam's scores: the sampled frames within this long before it and after it, inside the chunks


@dataclass(frozen=True)
class Seam:
    """Where two generated chunks meet: the person's mean score just before and just after, and how far it moves
    (either way: a fall into another person, or a rise back out of one)."""

    time: float
    frame: int
    before: float | None
    after: float | None

    @property
    def drop(self) -> float | None:
        return None if self.before is None or self.after is None else abs(self.before - self.after)

    def to_dict(self) -> dict:
        return {"time": round(self.time, 3), "frame": self.frame, "before": _round(self.before), "after": _round(self.after),
                "drop": _round(self.drop)}


def seams_of(frames: Sequence[Frame], seam_frames: Sequence[int], fps: float) -> list[Seam]:
    """The seams at these frame numbers, worst first (the largest move; seams without scores on both sides last): each
    side's mean score over its judged frames within SEAM_WINDOW_S of the seam, not across the next seam."""
    window = max(1, round(SEAM_WINDOW_S * fps)) if fps > 0 else 1
    out = []
    for k, at in enumerate(seam_frames):
        low = max(seam_frames[k - 1] if k else 0, at - window)
        high = min(seam_frames[k + 1] if k + 1 < len(seam_frames) else at + window, at + window)
        sides = [[f.score for f in frames if lo <= f.index < hi and f.judged != "none" and not f.carried and f.score is not None]
                 for lo, hi in ((low, at), (at, high))]
        near = min(frames, key=lambda f: abs(f.index - at), default=None)  # its time: on the frame grid, from the nearest sample
        time = 0.0 if near is None else near.time + ((at - near.index) / fps if fps > 0 else 0.0)
        out.append(Seam(time, at, *(float(np.mean(v)) if v else None for v in sides)))
    return sorted(out, key=lambda m: (m.drop is None, -(m.drop or 0.0), m.frame))


@dataclass
class Comparison:
    """One video against one reference person."""

    video: str
    reference: Reference
    frames: list[Frame]
    segments: list[Segment]
    drifts: list[Drift]
    shots: list[tuple[float, float]]  # (start, end) of every shot
    duration: float
    start: float  # the first frame's time
    thresholds: Thresholds
    tracks: int = 0  # head tracks in the video
    tracks_of_person: int = 0  # ...that went to this reference
    warning: str | None = None
    size: tuple[int, int] = (0, 0)  # the analysed frames' width and height (boxes are in these pixels)
    seams: list[Seam] | None = None  # where generated chunks meet, worst first (None: the clip was not said to be chunked)

    @property
    def head_frames(self) -> list[Frame]:
        return [f for f in self.frames if f.tier != NO_HEAD]

    def share(self, tier: str, of_heads: bool = False) -> float:
        frames = self.head_frames if of_heads else self.frames
        return sum(f.tier == tier for f in frames) / len(frames) if frames else 0.0

    @property
    def same_person_share(self) -> float:
        """The share of the frames with a head where the head is the reference person (same look or other look)."""
        heads = self.head_frames
        return sum(f.tier in SAME_PERSON for f in heads) / len(heads) if heads else 0.0

    @property
    def same_look_share(self) -> float:
        """The share of the frames with a head where the head is the reference person in the reference's look."""
        return self.share(str(Tier.SAME_LOOK), of_heads=True)

    @property
    def verdict(self) -> str:
        """no_head (no head in any sampled frame), drift (a drift event: the person, then another person or look), other_person
        (the person on fewer than half the head frames), other_look (the person, more often in another look than in the
        reference's), same_look."""
        if not self.head_frames:
            return "no_head"
        if self.drifts:
            return "drift"
        if self.same_person_share < MAJORITY:
            return "other_person"
        if self.share(str(Tier.OTHER_LOOK)) > self.share(str(Tier.SAME_LOOK)):
            return "other_look"
        return "same_look"

    @property
    def worst(self) -> Segment | None:
        """The segment with a head of the lowest tier, the lowest score among those."""
        scored = [s for s in self.segments if s.tier in RANK]
        if not scored:
            return None
        return min(scored, key=lambda s: (RANK[s.tier], s.score if s.score is not None else 1.0, s.start))

    def summary(self) -> dict:
        frames, heads = self.frames, self.head_frames
        person = [f for f in heads if f.tier in SAME_PERSON]
        faced = [f for f in frames if f.face_identity is not None]
        worst = self.worst
        return {
            "duration": round(self.duration, 3), "frames": len(frames), "head_frames": len(heads),
            "on_screen": round(sum(f.duration for f in person), 3),
            "shares": {tier: round(self.share(tier), 4) for tier in TIERS},
            "same_person_share": round(self.same_person_share, 4),
            "same_look_share": round(self.same_look_share, 4),
            "worst_segment": None if worst is None else worst.to_dict(),
            "face_frames": sum(f.face for f in heads),  # the person's head shows a face
            "faceless_head_frames": sum(not f.face for f in heads),  # a head seen without a face (profile, back, turned away)
            "frames_with_any_face": len(faced),
            "facesim": _round(float(np.mean([f.face_identity for f in faced])) if faced else None),
            "facesim_skipped_frames": len(frames) - len(faced),
            "mean_identity": _round(float(np.mean([f.identity for f in heads if f.identity is not None and not f.carried]))
                                    if any(f.identity is not None and not f.carried for f in heads) else None),
            "drifts": len(self.drifts), "tracks": self.tracks, "tracks_of_person": self.tracks_of_person,
            "coverage": coverage(frames), "views": views(frames),
            **({} if self.seams is None else {"worst_seam": self.seams[0].to_dict() if self.seams else None}),
        }

    def to_dict(self, frames: bool = True) -> dict:
        t = self.thresholds
        out = {"video": self.video, "reference": self.reference.to_dict(), "verdict": self.verdict, "summary": self.summary(),
               "segments": [s.to_dict() for s in self.segments], "drifts": [d.to_dict() for d in self.drifts],
               "shots": [{"start": round(a, 3), "end": round(b, 3)} for a, b in self.shots],
               "thresholds": {"far": t.far, "identity": round(t.identity, 4), "same_look": round(t.same_look, 4),
                              "appearance": _round(t.appearance), "model": t.model, "version": t.version}}
        if self.warning:
            out["warning"] = self.warning
        if self.seams is not None:
            out["seams"] = [m.to_dict() for m in self.seams]
        if frames:
            out["frames"] = [f.to_dict() for f in self.frames]
        return out


def coverage(frames: Sequence[Frame]) -> dict:
    """The shares of the frames judged by the face, by the head's look alone, and not judged (by reason): they add up
    to 1."""
    n = len(frames) or 1
    reasons: dict[str, int] = {}
    for f in frames:
        if f.judged == "none":
            reasons[f.reason or "no_head"] = reasons.get(f.reason or "no_head", 0) + 1
    return {**{j: round(sum(f.judged == j for f in frames) / n, 4) for j in JUDGED},
            "reasons": {r: round(c / n, 4) for r, c in sorted(reasons.items(), key=lambda rc: -rc[1])}}


def views(frames: Sequence[Frame]) -> dict:
    """Per view of the person's head: its share of the judged frames, their count and mean score (identity where the
    face was judged, else the head score)."""
    judged = [f for f in frames if f.view is not None]
    out = {}
    for v in VIEWS:
        mine = [f for f in judged if f.view == v]
        scores = [f.score for f in mine if f.score is not None]
        out[v] = {"share": round(len(mine) / len(judged), 4) if judged else 0.0, "frames": len(mine),
                  "mean_score": _round(float(np.mean(scores))) if scores else None}
    return out


def view_of(face: bool, yaw: float | None) -> str:
    """A head's view: by the yaw of its face, or `back` without one."""
    if not face:
        return "back"
    return yaw_view(yaw if yaw is not None else 0.0)


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(float(x), digits)


# ----- scoring -------------------------------------------------------------------------------------
def compare_analysis(result: FileResult, references: Sequence[Reference], thresholds: Thresholds, appearance_dims: int = 0,
                     settings: CompareSettings = CompareSettings()) -> list[Comparison]:
    """An analysed video (every sampled sighting embedded) against each reference: one comparison per reference."""
    v = Sampled.of(result)
    tracks, shots = v.tracks, v.shots
    owner, mates = joined_owners(tracks, result, assign_tracks(tracks, references, thresholds, appearance_dims))
    joined = {n: join_words(tr.join.cue) for n, tr in enumerate(tracks) if tr.join is not None}
    out = []
    for r, ref in enumerate(references):
        scores = {(n, obs.frame_index): score_sighting(obs, ref, thresholds, appearance_dims) for n, tr in enumerate(tracks) for obs in tr.observations}
        carried = {n: carried_tiers(tr, n, scores, [(m, tracks[m]) for m in mates[n]]) for n, tr in enumerate(tracks)}
        frames = [_frame(time, end, index, shot, v.at.get(index, []), r, owner, scores, carried, ref, v.unjudged.get(index, []), joined)
                  for index, time, end, shot in v.frames()]
        segments = merge_segments(segments_of(frames, shots), settings.min_segment_s)
        seams = seams_of(frames, settings.seam_frames(result.frames_decoded), result.fps) if settings.chunk_frames else None
        out.append(Comparison(result.path, ref, frames, segments, drifts_of(segments, thresholds, settings), [(s.start_time, s.end_time) for s in shots],
                              result.duration, shots[0].start_time if shots else 0.0, thresholds, len(tracks),
                              sum(o == r for o in owner), result.warning, (result.width, result.height), seams))
    return out


def _frame(time: float, end: float, index: int, shot: int, seen: list[tuple[int, Observation]], r: int, owner: list[int | None],
           scores: dict, carried: dict, ref: Reference, unjudged: Sequence[str] = (), joined: dict[int, str] | None = None) -> Frame:
    frame = Frame(time, end, index, shot, NO_HEAD, heads=len(seen))
    faces = [(obs.face.box.area, scores[n, index].identity) for n, obs in seen if obs.face is not None and scores[n, index].identity is not None]
    if faces:
        frame.face_identity = max(faces)[1]
    if not seen:  # the reason of the most sightings left aside here, else none was there
        frame.reason = unjudged_frame(unjudged)
        return frame

    def key(item: tuple[int, Observation]) -> tuple:
        n, obs = item
        tier, _ = carried[n][index]
        s = scores[n, index]
        return (RANK.get(tier, -1), s.identity if s.identity is not None else -2.0, s.head if s.head is not None else -2.0)

    mine = [x for x in seen if owner[x[0]] == r]
    free = [x for x in seen if owner[x[0]] is None]
    n, obs = max(mine or free or seen, key=key)
    tier, was_carried = carried[n][index]
    if not mine and not free:  # every head here is another reference's person
        tier, was_carried = str(Tier.OTHER_PERSON), False
    s = scores[n, index]
    frame.tier, frame.carried = tier, was_carried
    frame.identity, frame.head, frame.face, frame.yaw = s.identity, s.head, obs.face is not None, face_yaw(obs.face)
    frame.box, frame.track = obs.head.as_tuple(), n + 1
    frame.joined = (joined or {}).get(n) if owner[n] == r else None
    frame.judged = "face" if s.identity is not None else "head" if s.head is not None else "none"
    if frame.judged == "none":
        frame.reason = "no_face"
    else:
        frame.view = view_of(obs.face is not None, frame.yaw)
    return frame


# ----- segments and drift ----------------------------------------------------------------------------
def segments_of(frames: Sequence[Frame], shots: Sequence) -> list[Segment]:
    """Runs of one tier, each ending where the next begins; which start and end at cuts."""
    starts = {s.start_frame for s in shots}
    out: list[Segment] = []
    for f in frames:
        if out and out[-1].tier == f.tier:
            out[-1].frames.append(f)
            out[-1].end = f.end
            continue
        out.append(Segment(f.time, f.end, f.tier, [f]))
    for i, s in enumerate(out):
        s.at_cut = s.frames[0].index in starts or i == 0
        s.ends_at_cut = i == len(out) - 1 or out[i + 1].frames[0].index in starts
    return out


def merge_segments(segments: list[Segment], min_s: float) -> list[Segment]:
    """Runs shorter than `min_s` join a neighbour in their shot (the longer one where both are), shortest first; a
    run bounded by cuts on both sides stays, however short."""
    segs = list(segments)
    while True:
        short = [i for i, s in enumerate(segs) if s.duration < min_s - 1e-9 and not (s.at_cut and s.ends_at_cut)]
        if not short:
            return segs
        i = min(short, key=lambda j: (segs[j].duration, segs[j].start))
        s = segs[i]
        options = []
        if not s.at_cut and i > 0:
            options.append(i - 1)
        if not s.ends_at_cut and i + 1 < len(segs):
            options.append(i + 1)
        j = max(options, key=lambda k: (segs[k].duration, -k))
        into = segs[j]
        first, second = (into, s) if j < i else (s, into)
        merged = Segment(first.start, second.end, into.tier, first.frames + second.frames, first.at_cut, second.ends_at_cut)
        segs[min(i, j)] = merged
        del segs[max(i, j)]
        segs = _coalesced(segs)


def _coalesced(segs: list[Segment]) -> list[Segment]:
    out: list[Segment] = []
    for s in segs:
        if out and out[-1].tier == s.tier:
            prev = out[-1]
            out[-1] = Segment(prev.start, s.end, s.tier, prev.frames + s.frames, prev.at_cut, s.ends_at_cut)
        else:
            out.append(s)
    return out


def drifts_of(segments: Sequence[Segment], thresholds: Thresholds, settings: CompareSettings) -> list[Drift]:
    """Falls in tier from one segment with a head to the next with a head, where the lower one holds enough frames
    scored on their own and the fall holds up (`confirmed_fall`); and a rise before any fall, which holds up the same way:
    a clip that starts as another person (or look) and becomes the reference's is a drift too, whichever way round. A
    rise after a fall is the recovery of that fall, not an event of its own."""
    out = []
    before: Segment | None = None
    for s in segments:
        if s.tier not in RANK:
            continue
        if before is not None and RANK[s.tier] != RANK[before.tier]:
            high, low = (before, s) if RANK[s.tier] < RANK[before.tier] else (s, before)
            rise = high is s
            if not (rise and out) and low.scored >= settings.drift_min_frames and confirmed_fall(high, low, thresholds):
                out.append(Drift(s.start, before.tier, s.tier, s.frames[0].shot, s.at_cut, s.score))
        before = s
    return out


def mean_tier(seg: Segment, thresholds: Thresholds) -> str | None:
    """The tier of a segment's mean scores (its frames scored on their own)."""
    if seg.identity is not None:
        return str(thresholds.tier(seg.identity, seg.head))
    if seg.head is not None and thresholds.appearance is not None:
        return str(thresholds.tier(None, None, seg.head))
    return None


def confirmed_fall(before: Segment, after: Segment, thresholds: Thresholds) -> bool:
    """Whether a fall in tier is a drift, not a consistent clip's frames wandering across a bar: the lower segment's
    mean scores put it below the earlier one's tier too, and, where the model's frame noise was measured
    (`Thresholds.frame_noise`), its mean score (identity for a fall to another person, the head score for a fall to
    another look) is lower than the earlier segment's by more than that noise allows at the thresholds' false-accept
    rate (a one-sided test on the two means, each of the frames a second that count as independent)."""
    tiers = mean_tier(before, thresholds), mean_tier(after, thresholds)
    if None in tiers or RANK[tiers[1]] >= RANK[tiers[0]]:
        return False
    kind = "identity" if after.tier == str(Tier.OTHER_PERSON) and before.identity is not None and after.identity is not None else "head"
    a, b = getattr(before, kind), getattr(after, kind)
    noise = thresholds.frame_noise or {}
    if a is None or b is None or kind not in noise:
        return True
    per_s = float(noise.get("independent_per_s") or 0.0)

    def evidence(seg: Segment) -> float:
        scored = sum(1 for f in seg.frames if getattr(f, kind) is not None and not f.carried)
        return max(1.0, min(float(scored), seg.duration * per_s)) if per_s > 0 else max(1.0, float(scored))

    margin = NormalDist().inv_cdf(1.0 - thresholds.far) * float(noise[kind]) * math.sqrt(1.0 / evidence(before) + 1.0 / evidence(after))
    return a - b > margin
