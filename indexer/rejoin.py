"""Tracks re-joined within a shot: a head track that ends (the head turned away, slipped under the detector, was
hidden a moment) and one that begins later in the same shot become one person when their head vectors agree, and
their bodies where enough of both is in frame, and the best candidate beats the second best by a ratio test
(Brown, Kalogeiton & Zisserman 2021, "Face, Body, Voice: Video Person-Clustering with Multiple Modalities").

The rule, on the pieces of one shot in the order they begin:
- a piece may continue a group of earlier pieces only when none of them is on screen at the same time as it (two
  heads on screen at once are two people) and at least one side shows a face (a faceless piece never starts a
  person: two faceless pieces are never joined to each other);
- the head cue: the cosine of the mean head vectors of the face sightings of both sides, or, where one side has no
  face, of the appearance parts of their head vectors (`ModelSpec.appearance_dims`), each with its own bar; where a
  side has no face, the bar is the stricter one for backs;
- the ratio test: candidates are ranked by the head cue; the best must beat every other candidate group's by `ratio`
  (second <= ratio x best);
- the stricter bar for backs: a piece joined on the appearance part alone (one side faceless) needs the body cue, and a
  head about the size the person's head last was (within `faceless_size_ratio`: look-alike heads of two people at
  different distances from the camera, seen in the crowd clip, differ in size);
- the body cue: EfficientNet-Lite0 features of the region below the head at the group's last sighting and the piece's
  first (`body_region`: only where at least a quarter of it is in frame); where both sides have one it must pass its
  bar too (a veto), and it is averaged into the join's score;
Never across a cut: pieces of different shots are never candidates. The bars were measured by
`research/rejoin_bars.py` (what it measured: research/README.md)."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from schemas.records import JOIN_CUE_HEAD, JOIN_CUE_HEAD_BODY, JOIN_WORDS, Box, HeadTrack, TrackJoin, VectorKind

BODY_IN_FRAME = 0.25  # the share of the body region that must be in frame for a body descriptor
BODY_WIDTH = 2.0  # the body region: this many head widths wide, centred under the head,
BODY_HEIGHT = 2.0  # and this many head heights tall, from the head's bottom edge


@dataclass(frozen=True)
class JoinBars:
    """The bars of the join rule (measured: `research/rejoin_bars.py`)."""

    head: float = 0.50  # cosine of the mean head vectors, both sides with a face
    appearance: float = 0.55  # cosine of the appearance parts, where one side has no face
    body: float = 0.60  # cosine of the body descriptors, where both sides have one
    ratio: float = 0.90  # the best candidate's score must beat the second best's by this ratio
    faceless_needs_body: bool = True  # the stricter bar for backs: a faceless side is joined only with the body cue too
    faceless_size_ratio: float = 1.5  # ... and only where its head is about the size the person's head last was


DEFAULT_BARS = JoinBars()


@dataclass
class PieceCues:
    """What the join rule knows of one track: when it is on screen, its head vectors, its body at both ends."""

    shot: int
    start: float  # its first sighting's time
    end: float  # its last sighting's time
    face: bool  # a face was seen in at least one of its embedded sightings
    head: np.ndarray | None  # unit mean of the head vectors of its sightings with a face
    look: np.ndarray | None  # unit mean of the appearance parts of all its head vectors
    first_height: float = 0.0  # the head box's height at its first sighting (pixels)
    last_height: float = 0.0  # ... and at its last
    body_first: np.ndarray | None = None  # body descriptor at its first sighting with a body in frame
    body_last: np.ndarray | None = None  # ... and at its last


def _unit(v: np.ndarray) -> np.ndarray | None:
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else None


def piece_cues(track: HeadTrack, appearance_dims: int) -> PieceCues:
    """A track's cues from its embedded sightings: the head vectors (the identity vectors for models without one)."""
    with_face, looks = [], []
    for o in track.observations:
        v = o.embeddings.get(VectorKind.HEAD)
        if v is None:
            v = o.embeddings.get(VectorKind.ID)
        if v is None:
            continue
        if o.face is not None:
            with_face.append(v)
        if appearance_dims and VectorKind.HEAD in o.embeddings:
            looks.append(_unit(np.asarray(v[-appearance_dims:], np.float32)))
    looks = [x for x in looks if x is not None]
    head = _unit(np.mean(with_face, axis=0)) if with_face else None
    look = _unit(np.mean(looks, axis=0)) if looks else None
    first, last = track.observations[0], track.observations[-1]
    return PieceCues(track.shot_index, first.time, last.time, head is not None, head, look, first.head.height, last.head.height)


def body_region(head: Box, width: int, height: int) -> Box | None:
    """The region below a head where its body is (clipped to the frame), or None when less than `BODY_IN_FRAME` of it
    is in frame."""
    cx = (head.x1 + head.x2) / 2
    full = Box(cx - BODY_WIDTH / 2 * head.width, head.y2, cx + BODY_WIDTH / 2 * head.width, head.y2 + BODY_HEIGHT * head.height)
    inside = Box(max(0.0, full.x1), max(0.0, full.y1), min(float(width), full.x2), min(float(height), full.y2))
    if full.area <= 0 or inside.area < BODY_IN_FRAME * full.area:
        return None
    return inside


Describe = Callable[[Sequence[tuple[int, bool]]], None]  # fills in pieces' bodies: (index, at its last sighting)


@dataclass(frozen=True)
class HeadCue:
    """How well a piece's head continues a group's: the best cue over the group's pieces."""

    score: float
    bar: float
    faceless: bool  # the appearance part's cue: one side has no face


def head_cue(earlier: Sequence[PieceCues], later: PieceCues, bars: JoinBars) -> HeadCue | None:
    """The head cue of a piece against a group of earlier pieces (None: nothing to compare): the mean head vectors where
    both show a face, else the appearance parts, where one of them does; the best over the group's pieces."""
    best: HeadCue | None = None
    for e in earlier:
        if e.head is not None and later.head is not None:
            cue = HeadCue(float(e.head @ later.head), bars.head, False)
        elif (e.face or later.face) and e.look is not None and later.look is not None:
            cue = HeadCue(float(e.look @ later.look), bars.appearance, True)
        else:
            continue
        if best is None or cue.score - cue.bar > best.score - best.bar:
            best = cue
    return best


def body_cue(earlier: PieceCues, later: PieceCues) -> float | None:
    """The body below the head at the group's last sighting against the piece's first (None: one side has none)."""
    if earlier.body_last is None or later.body_first is None:
        return None
    return float(earlier.body_last @ later.body_first)


def _similar_size(a: float, b: float, ratio: float) -> bool:
    """Two head heights within `ratio` of each other (unknown sizes pass)."""
    return a <= 0 or b <= 0 or max(a, b) <= ratio * min(a, b)


def candidate_groups(groups: list[list[int]], pieces: Sequence[PieceCues], b: int) -> list[int]:
    """The groups (of piece `b`'s shot) it may continue: every piece ended before it began, a face on one side."""
    p = pieces[b]
    return [g for g, members in enumerate(groups)
            if all(pieces[m].end < p.start for m in members) and (p.face or any(pieces[m].face for m in members))]


def _by_shot(pieces: Sequence[PieceCues]) -> list[list[int]]:
    """The pieces of each shot, in the order they begin."""
    shots: dict[int, list[int]] = {}
    for i in sorted(range(len(pieces)), key=lambda i: (pieces[i].start, i)):
        shots.setdefault(pieces[i].shot, []).append(i)
    return list(shots.values())


def join_pieces(pieces: Sequence[PieceCues], bars: JoinBars = DEFAULT_BARS,
                describe: Describe | None = None) -> list[TrackJoin | None]:
    """Per piece, the join that makes it a later piece of an earlier one's person (None: it starts its own group).
    `TrackJoin.to` is the index of the group's first piece. Candidates are ranked by the head cue and held to the ratio
    test; the best one's body is then compared: `describe([(index, last)])`, where given, first fills in these pieces'
    bodies (at their last sighting, or their first): only the two ends of a join about to be made are described, so
    indexing pays for the joins alone."""
    joins: list[TrackJoin | None] = [None] * len(pieces)
    for shot in _by_shot(pieces):
        groups: list[list[int]] = []  # never across a cut: each shot's groups are its own
        for b in shot:
            scored = sorted(((cue, g) for g in candidate_groups(groups, pieces, b)
                             if (cue := head_cue([pieces[m] for m in groups[g]], pieces[b], bars)) is not None),
                            key=lambda cg: -cg[0].score)
            join = _joined(scored, groups, pieces, b, bars, describe)
            if join is None:
                groups.append([b])
            else:
                joins[b] = join
                next(members for members in groups if members[0] == join.to).append(b)
    return joins


def _joined(scored: list[tuple[HeadCue, int]], groups: list[list[int]], pieces: Sequence[PieceCues], b: int, bars: JoinBars,
            describe: Describe | None) -> TrackJoin | None:
    if not scored:
        return None
    best, g = scored[0]
    if best.score < best.bar or (len(scored) > 1 and scored[1][0].score > bars.ratio * best.score):
        return None
    last = max(groups[g], key=lambda m: pieces[m].end)
    if describe is not None:
        describe([(last, True), (b, False)])
    if best.faceless and not _similar_size(pieces[last].last_height, pieces[b].first_height, bars.faceless_size_ratio):
        return None
    body = body_cue(pieces[last], pieces[b])
    if body is None:
        if best.faceless and bars.faceless_needs_body:
            return None
        return TrackJoin(groups[g][0], JOIN_CUE_HEAD, round(best.score, 4))
    if body < bars.body:
        return None
    return TrackJoin(groups[g][0], JOIN_CUE_HEAD_BODY, round((best.score + body) / 2, 4))


def join_groups(joined_to: Mapping[int, int | None]) -> dict[int, int]:
    """Each track's person within its shot, as the key of that person's first track there. `joined_to`: each track's
    key -> the key of the first track of its person in the shot (None: it is a first, or joined to none)."""
    return {k: k if v is None else v for k, v in joined_to.items()}


def with_joins(keys: Iterable[int], joined_to: Mapping[int, int | None]) -> set[int]:
    """The tracks `keys` and every track joined within its shot to the same person as one of them (`join_groups`)."""
    group = join_groups(joined_to)
    keys = set(keys)
    chosen = {group.get(k, k) for k in keys}
    return keys | {k for k, g in group.items() if g in chosen}


def join_bar(cue: str | None, bars: JoinBars = DEFAULT_BARS) -> float:
    """The least a join's score is when each of its cues passed its bar: the head cue's bar alone (`head`), or the mean
    of the lower head bar (head vectors, or the look where one side has no face) and the body's (`head+body`)."""
    if cue == JOIN_CUE_HEAD_BODY:
        return (min(bars.head, bars.appearance) + bars.body) / 2
    return bars.head


def joined_why(cue: str | None, key: int, joined_to: Mapping[int, int | None], chosen: Iterable[int],
               score: float | None = None) -> str:
    """Why a track came in through a join, in words: the cue, the tracks of its person that were chosen, and the join's
    score with the bar it passed (`join_bar`) where it is known."""
    group = join_groups(joined_to)
    mates = sorted(k for k in chosen if k != key and group.get(k, k) == group.get(key, key))
    scored = f": join {score:.3f} > {join_bar(cue):.3f}" if score is not None else ""
    return f"{JOIN_WORDS.get(cue or JOIN_CUE_HEAD, JOIN_WORDS[JOIN_CUE_HEAD])} (track {', '.join(map(str, mates))}){scored}"
