"""Where each chosen head lies in each frame of a video, in the stored frame's pixels (`HeadBoxes`, asked frame after
frame by the pass of `actions.redact_frames`).

An analysis sees heads at sampled frames (`indexer.analysis`: two a second, and every shot's first frame); a head's
box in the frames between comes from its track's sightings, within its shot (nothing crosses a cut):

* between two sightings: the box interpolated between them; before a track's first sighting, back to the frame after
  the sampled frame before it in its shot (the shot's first frame at most), the first sighting's box; after its last
  sighting, up to the frame before the next sampled frame of its shot (the shot's last frame at most), the last one's;
  a person's own tracks (--person, --ref) on to that sampled frame itself: the head the analysis did not find there
  may still show (the crowd clip's scarf woman, her hood at the red door at frame 39, a sampled frame, after her last
  sighting at 26 and the frame before it, 38, hidden). Not where every head is hidden: there each track's end would
  do it, and on bench/sets/heads.csv (judged at sampled frames) the picture hidden outside heads went from 2.4% to 5.7%
  for 2 more backs of 39;
* joined with where the head region was followed to, frame by frame, from the last sighting (the tracker's template
  matching, `indexer.tracker.find_head_region`), where it matched well within one box side of that box (a head that
  moves and comes back between two samples);
* and joined with the head the face detector finds there in this very frame: it looks only at a small copy of the
  region around where the head was last found (followed there, or found by the detector the frame before; else the
  interpolated box), REFINE_SIDE pixels across (a few milliseconds a head), and its head box counts where it continues
  the track as the tracker associates heads, from that box or from the interpolated one (a face that leans, opens its
  mouth, comes closer, or walks on past its track's last sighting);
* where neither following nor the detector finds the head where it was last found (it turned away, went behind
  something, or only another head is found there), the box keeps that last place too: a followed head is never put
  back to a stale box (the sighting's, some 150 pixels behind a man walking out of the crowd clip), and the trail marks the
  frame `lost`;
* the box then grows by the margin (a share of its width and height, half on each side) and is clipped to the frame.

Heads spared (`--all-except`) are followed the same way and never drawn; another head's following and detector keep
off them, and a hidden box is left undrawn where it lies on one with no face of its own to hide (a second track on the
spared head, from its keypoints) or is unconfirmed and touches it (a hand, a curtain): `HeadBoxes.not_drawn` says why.
A track that ends one frame before the next begins at the same place (the detector missed the head at the sampled
frame between) has that frame closed before the pass (`closing_gaps`).
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from headsearch.detection.faces import FaceDetector, head_box_from_face
from indexer.tracker import association_score, find_head_region, head_template
from schemas.records import Box, FaceDetection

FOLLOW_REACH = 1.0  # a followed head region counts within this many box sides of the interpolated box
REFINE_REACH = 0.5  # the detector looks this many box sides around the interpolated box...
REFINE_SIDE = 128  # ...on a copy of that region this many pixels across at most (its face, some 40 pixels, is found)


@dataclass(frozen=True)
class HeadPath:
    """One chosen track through its shot: who it is, its sightings (frame index, box in the analysis' pixels, upright), and
    the frames it covers (`first`..`last`, inclusive). `spared`: a head followed to be kept, never hidden (--all-except's
    people: a hidden box on it is not drawn, see `HeadBoxes`); `unconfirmed`: a track the analysis' evidence rule would
    drop, hidden all the same."""

    track: int
    who: str
    sightings: tuple[tuple[int, Box], ...]
    first: int
    last: int
    spared: bool = False
    unconfirmed: bool = False
    faced: tuple[bool, ...] = ()  # whether each sighting shows a face (empty: all do)


def covered_frames(sighted: Sequence[int], shot: tuple[int, int], samples: Sequence[int] | None = None,
                   period: int = 1, to_next_sample: bool = False) -> tuple[int, int]:
    """The frames a track covers: its sightings' frames (sorted), reaching back to the frame after the sampled frame
    before its first sighting and on to the frame before the sampled frame after its last (`to_next_sample`: to that
    sampled frame itself, where the analysis looked and did not find the head: turning away or walking out, it may
    still show there), within its shot (`shot`: first and last frame). `samples` (sorted frame indexes of every
    sampled frame), or, where they are not known, one sample every `period` frames."""
    first, last = sighted[0], sighted[-1]
    start, end = shot
    if samples is not None:
        i = bisect.bisect_left(samples, first)
        before = samples[i - 1] if i > 0 else None
        j = bisect.bisect_right(samples, last)
        after = samples[j] if j < len(samples) else None
    else:
        before, after = first - period, last + period
    lo = max(start, before + 1) if before is not None else start
    hi = min(end, after if to_next_sample else after - 1) if after is not None else end
    return min(lo, first), max(hi, last)


def to_stored(box: Box, turns: int, width: int, height: int) -> Box:
    """A box on the upright picture as a box on the stored frame (`width` x `height`), which is shown upright turned
    `turns` quarter turns anticlockwise (`np.rot90(stored, turns)`, as the decoder turns a phone's portrait video)."""
    turns %= 4
    if turns == 1:
        return Box(width - box.y2, box.x1, width - box.y1, box.x2)
    if turns == 2:
        return Box(width - box.x2, height - box.y2, width - box.x1, height - box.y1)
    if turns == 3:
        return Box(box.y1, height - box.x2, box.y2, height - box.x1)
    return box


def to_upright(box: Box, turns: int, width: int, height: int) -> Box:
    """The inverse of `to_stored`: a box on the stored frame (`width` x `height`) as a box on the upright picture."""
    turns %= 4
    if turns == 1:
        return Box(box.y1, width - box.x2, box.y2, width - box.x1)
    if turns == 2:
        return Box(width - box.x2, height - box.y2, width - box.x1, height - box.y1)
    if turns == 3:
        return Box(height - box.y2, box.x1, height - box.y1, box.x2)
    return box


def _lerp(a: tuple[int, Box], b: tuple[int, Box], frame: int) -> Box:
    t = (frame - a[0]) / max(b[0] - a[0], 1)
    return Box(*(p + t * (q - p) for p, q in zip(a[1].as_tuple(), b[1].as_tuple(), strict=True)))


def _union(a: Box, b: Box) -> Box:
    return Box(min(a.x1, b.x1), min(a.y1, b.y1), max(a.x2, b.x2), max(a.y2, b.y2))


def grown(box: Box, margin: float) -> Box:
    """The box grown by `margin` of its width and height, half on each side."""
    dx, dy = margin * box.width / 2, margin * box.height / 2
    return Box(box.x1 - dx, box.y1 - dy, box.x2 + dx, box.y2 + dy)


def pixel_box(box: Box, width: int, height: int) -> tuple[int, int, int, int] | None:
    """The whole pixels a box touches, clipped to the frame (None: none)."""
    x1, y1 = max(0, math.floor(box.x1)), max(0, math.floor(box.y1))
    x2, y2 = min(width, math.ceil(box.x2)), min(height, math.ceil(box.y2))
    return (x1, y1, x2, y2) if x2 > x1 and y2 > y1 else None


@dataclass
class _Following:
    """One path's state frame after frame: its next sighting, and the head region followed from the last one."""

    path: HeadPath  # its sightings in the stored frame's pixels
    upright: HeadPath  # as given (for the audit trail's names)
    next: int = 0  # index of the first sighting at or after the current frame
    template: np.ndarray | None = None
    box: Box | None = None  # where the head was last found (a sighting, followed, or found by the detector)
    lost: bool = False  # in the frame just asked: neither following nor the detector found it where it was last found
    now: Box | None = None  # in the frame just asked: the one box that says best where the head is (found, else predicted)
    faceless: bool = False  # in the frame just asked: its nearest sighting shows no face


@dataclass(frozen=True)
class NotDrawn:
    """A hidden track's box left undrawn in a frame, and why (it lies on a spared person's head)."""

    path: HeadPath
    box: tuple[int, int, int, int]  # pixels of the stored frame, grown and clipped as it would have been drawn
    why: str


class HeadBoxes:
    """Each chosen head's box in each frame, asked frame after frame in decoding order (`at`), in the stored frame's
    pixels: see the module's docstring. Spared paths (`HeadPath.spared`) are followed the same way and never drawn: a
    hidden box mostly on a spared head (SAME_HEAD_SHARE of it: the spared person seen by a second track), or an
    unconfirmed one touching it (a hand, a curtain), is left out, said in `not_drawn`. One-frame gaps between a
    track's end and the next track's start at the same place are closed before the first frame (`gaps_closed`)."""

    def __init__(self, paths: Sequence[HeadPath], scale: tuple[float, float], turns: int, stored: tuple[int, int], margin: float,
                 follow_min_score: float, detector: FaceDetector | None = None, min_iou: float = 0.3):
        width, height = stored
        sx, sy = scale

        def placed(box: Box) -> Box:
            return to_stored(Box(box.x1 * sx, box.y1 * sy, box.x2 * sx, box.y2 * sy), turns, width, height)

        closed, self.gaps_closed = closing_gaps(paths)
        self._waiting = sorted((_Following(replace(p, sightings=tuple((f, placed(b)) for f, b in p.sightings)), p) for p in closed),
                               key=lambda f: f.path.first, reverse=True)
        self._active: list[_Following] = []
        self.margin, self.stored, self.min_score = margin, stored, follow_min_score
        self.detector, self.min_iou, self.turns = detector, min_iou, turns
        self.not_drawn: list[NotDrawn] = []  # in the frame just asked
        self.lost: set[int] = set()  # tracks kept where they were last found in the frame just asked
        self._spared_heads: list[Box] = []  # where the spared heads are in the frame being asked

    def at(self, index: int, luma: Callable[[], np.ndarray],
           region: Callable[[Box, int], tuple[np.ndarray, float, float, float]] | None = None) -> list[tuple[HeadPath, tuple[int, int, int, int]]]:
        """The heads hidden in frame `index` (the next frame decoded): each path with its pixel box, grown by the margin
        and clipped to the frame. `luma` gives the frame's grey pixels (asked for only when a head is followed);
        `region(box, side)`, a small RGB copy of a region of the frame (pixels, scale, left, top), for the detector."""
        while self._waiting and self._waiting[-1].path.first <= index:
            self._active.append(self._waiting.pop())
        self._active = [f for f in self._active if f.path.last >= index]
        self.not_drawn, self.lost = [], set()
        now = [f for f in self._active if f.path.first <= index]
        if not now:
            return []
        grey = luma()
        self._spared_heads = []
        boxes = []
        for f in sorted(now, key=lambda f: not f.path.spared):  # the spared first: the others' following keeps off their heads
            boxes.append((f, self._box(f, index, grey, region)))
            if f.path.spared and f.now is not None:
                self._spared_heads.append(f.now)
        spared = [(f.upright, f.now) for f, _ in boxes if f.path.spared]
        out = []
        for f, box in boxes:
            if f.path.spared:
                continue
            placed = pixel_box(grown(box, self.margin), *self.stored)
            if placed is None:
                continue
            why = _on_spared_head(f, spared)
            if why is not None:
                self.not_drawn.append(NotDrawn(f.upright, placed, why))
                continue
            if f.lost:
                self.lost.add(f.path.track)
            out.append((f.upright, placed))
        return out

    def _box(self, f: _Following, index: int, grey: np.ndarray, region) -> Box:
        s = f.path.sightings
        while f.next < len(s) and s[f.next][0] < index:
            f.next += 1
        f.lost = False
        near = f.next if f.next < len(s) and (f.next == 0 or s[f.next][0] - index <= index - s[f.next - 1][0]) else f.next - 1
        f.faceless = bool(f.path.faced) and not f.path.faced[near]
        if f.next < len(s) and s[f.next][0] == index:  # a sighting: the analysis' box; following starts again from it
            box = s[f.next][1]
            f.template, f.box, f.now = head_template(grey, box), box, box
            return box
        if f.next == 0:
            predicted = s[0][1]
        else:
            predicted = _lerp(s[f.next - 1], s[f.next], index) if f.next < len(s) else s[-1][1]
        box = predicted
        followed = self._follow(f, grey, predicted)
        if followed is not None and not f.path.spared and self._on_spared(followed):
            followed = None  # another head's following does not pass onto a spared head
        if followed is not None:
            box = _union(box, followed)
        # The detector looks where the head was last found (followed now, or found by it in the frame before: a head
        # that moves on past its track's last sighting, or away from the line between two), else where it should be.
        anchor = followed or f.box or predicted
        detected = self._detect(predicted, region, anchor, not f.path.spared) if region is not None else None
        if detected is not None:
            box = _union(box, detected)
        found = detected or followed
        f.now = found or predicted
        # Before the track's first sighting there is nowhere to stay; found again where it was, it is followed on from there.
        if f.box is None or (found is not None and found.iou(f.box) > 0):
            f.box = found
        else:  # lost, or a head found away from where this one was (another head): the box stays where it was last found
            box = _union(box, f.box)
            f.lost = True
        return box

    def _follow(self, f: _Following, grey: np.ndarray, predicted: Box) -> Box | None:
        if f.template is None or f.box is None:
            return None
        found = find_head_region(grey, f.template, f.box, self.min_score)
        if found is not None:
            (cx, cy), (px, py) = found[0].center, predicted.center
            if math.hypot(cx - px, cy - py) <= FOLLOW_REACH * max(predicted.width, 1.0):
                return found[0]
        return None

    def _on_spared(self, head: Box) -> bool:
        """A head found is a spared one's: it overlaps where a spared head is now as the tracker associates heads, or lies
        mostly on it (SAME_HEAD_SHARE of it)."""
        return any(head.iou(spared) >= self.min_iou or _intersection(head, spared) >= SAME_HEAD_SHARE * head.area for spared in self._spared_heads)

    def _detect(self, predicted: Box, region, anchor: Box | None = None, off_spared: bool = False) -> Box | None:
        """The head the face detector finds in this frame around `anchor` (where the head was last found; the predicted
        box where it is not known), where it continues the track: from the predicted box or from the anchor; with
        `off_spared`, none on a spared head. The detector looks at the upright picture (a phone's portrait video is
        stored turned)."""
        if self.detector is None:
            return None
        width, height = self.stored
        up = to_upright(anchor or predicted, self.turns, width, height)
        reach = REFINE_REACH * max(up.width, up.height, 1.0)
        around = to_stored(Box(up.x1 - reach, up.y1 - reach, up.x2 + reach, up.y2 + reach), self.turns, width, height)
        rgb, scale, left, top = region(around, REFINE_SIDE)
        if rgb.size == 0:
            return None
        corner = to_upright(Box(left, top, left + rgb.shape[1] / scale, top + rgb.shape[0] / scale), self.turns, width, height)
        if self.turns:
            rgb = np.ascontiguousarray(np.rot90(rgb, self.turns))
        best, best_score = None, self.min_iou
        for face in self.detector.detect(rgb):
            head = to_stored(head_box_from_face(_placed(face, scale, corner.x1, corner.y1)), self.turns, width, height)
            if off_spared and self._on_spared(head):
                continue
            score = max(association_score(predicted, head), association_score(anchor, head) if anchor is not None else 0.0)
            if score >= best_score:
                best, best_score = head, score
        return best


def _placed(face: FaceDetection, scale: float, left: float, top: float) -> FaceDetection:
    """A face found on a region's copy (scaled by `scale`, its corner at `left`, `top`) in the frame's pixels."""
    b = face.box
    return FaceDetection(Box(b.x1 / scale + left, b.y1 / scale + top, b.x2 / scale + left, b.y2 / scale + top),
                         face.landmarks / scale + np.array([left, top], np.float32), face.score)


SAME_HEAD_SHARE = 0.5  # a hidden box this much inside a spared head's box is that head, seen by a second track
GAP_REACH = 1.0  # two tracks one frame apart continue each other where their boxes' centres are within this many sides


def _on_spared_head(f: _Following, spared: Sequence[tuple[HeadPath, Box]]) -> str | None:
    """Why a hidden head's box is not drawn (None: it is): there is no face to hide in it (its nearest sighting shows
    none) and it lies mostly on a spared person's head (a second track on that head, from its keypoints), or it is
    unconfirmed and touches one (a hand, a curtain); each box where the head is now, before the margin."""
    box = f.now
    if box is None:
        return None
    for person, head in spared:
        inside = _intersection(box, head) / max(box.area, 1e-9)
        if f.faceless and inside >= SAME_HEAD_SHARE:
            return (f"no face seen, and on the spared head of {person.who} (track {person.track}): {inside:.2f} of the box inside it "
                    f">= {SAME_HEAD_SHARE}")
        if f.path.unconfirmed and inside > 0:
            return f"unconfirmed, and it overlaps the spared head of {person.who} (track {person.track}): {inside:.2f} of the box inside it"
    return None


def _intersection(a: Box, b: Box) -> float:
    return max(0.0, min(a.x2, b.x2) - max(a.x1, b.x1)) * max(0.0, min(a.y2, b.y2) - max(a.y1, b.y1))


def closing_gaps(paths: Sequence[HeadPath]) -> tuple[list[HeadPath], int]:
    """The paths with their one-frame gaps closed, and how many: where a hidden track ends at frame t-1 and another
    begins at t+1 at the same place (its first box's centre within GAP_REACH sides of the other's last), a sampled frame
    where the detector missed the head, the later one begins at t (its first box) and the head is hidden at t too."""
    hidden = [p for p in paths if not p.spared]
    ends: dict[int, list[HeadPath]] = {}
    for p in hidden:
        ends.setdefault(p.last, []).append(p)
    out, closed = [], 0
    for p in paths:
        before = [] if p.spared else ends.get(p.first - 2, [])
        if any(_continues(a.sightings[-1][1], p.sightings[0][1]) for a in before if a.sightings and p.sightings):
            p = replace(p, first=p.first - 1)
            closed += 1
        out.append(p)
    return out, closed


def _continues(a: Box, b: Box) -> bool:
    (ax, ay), (bx, by) = a.center, b.center
    return math.hypot(ax - bx, ay - by) <= GAP_REACH * max(a.width, a.height, b.width, b.height)
