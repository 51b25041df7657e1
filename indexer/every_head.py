"""Every head, for redactions that hide every head (`redact --everyone`, `--all-except`, and `redact --verify`'s look):
the detector that looks for small and faint faces too (`EveryFaceDetector`), and tracks followed back in time to their
shot's first sampled frame.

The analysis builds a track forward from the first sampled frame where a detector finds its head (a face, or person
keypoints), so a head that no detector sees on the shot's first samples is visible there: in the crowd of
facenet-pytorch's video.mp4 a white-haired woman walking away is first found at 1.04 s and plain in view at 0 and
0.52 s, a bald man some 30-35 pixels wide first at 2.08 s and in view from 0 s, another at 3.64 s and in view at
3.12 s. Where every head is hidden (`redact --everyone`, `--all-except`), each track that starts after its shot's first
sample is followed back, sample by sample, with the tracker's own template following (`indexer.tracker`: the head's
grey patch from the first sighting a detector found, searched within one head side of where it was last, at the
tracker's bar), until the match fails, the shot begins, `max_gap_s` of the shot has been gone back over (as forward
following stops), or the head reaches one another track holds there (one head is one box).

The sampled frames are decoded again, as the analysis decoded them (the same frame numbers and size), but only up to the
last track that needs it, and only the frames it needs are kept, each until the last track that needs it has gone back
over it.
"""
from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import cv2
import numpy as np

from headsearch.basics.settings import IndexSettings
from headsearch.detection.faces import FaceDetector
from indexer.decode import VideoStream
from indexer.tracker import find_head_region, head_template
from schemas.records import Box, FaceDetection, SourceProbe

Heads = TypeVar("Heads")  # `actions.redact_records.VideoHeads` (which imports this module: named, not imported)

# Where every head is hidden (--everyone, --all-except), a head the analysis misses is a leak, and a false one only a
# patch blurred for nothing: the analysis' detector looks at each sampled frame enlarged too, for the small faces the
# index's look misses (RetinaFace finds a face of some 40 pixels and up at its scale; the index's detector sees a 1080p
# frame at a third, where a 20-40 pixel crowd face is too small), weaker and smaller ones, and the tracks its evidence
# rule would drop are hidden too. On the crowd of
# facenet-pytorch's video.mp4 (1080p): a man's profile some 35 x 50 pixels, seen at 0.62 with the frame enlarged twice and
# not at all at the index's scale, and a face the index's tracker lost at its last sample, found at 0.81.
EVERY_HEAD_ZOOM = 2.0  # the decoded frame (at most 1280 pixels across) is enlarged this much...
EVERY_HEAD_SIDE = 2560  # ...to at most this long side
EVERY_HEAD_SCORE = 0.5  # faces scored from this (the index: 0.7)
EVERY_HEAD_MIN_FACE_PX = 8.0  # ...and from this size in decoded pixels (16 at the detector's scale: its smallest anchor)
EVERY_HEAD_SMALL_FACE_PX = 64.0  # ...up to this size (decoded pixels): the larger ones are the index's detector's to find


log = logging.getLogger(__name__)

Sighting = tuple[int, Box]  # (frame index, head box in the analysis' pixels)


@dataclass(frozen=True)
class TrackStart:
    """What following a track back needs: its sightings (frame order) and its shot's first frame."""

    sightings: tuple[Sighting, ...]
    shot_first: int


@dataclass(frozen=True)
class BackReach:
    """How far back a track is followed: the tracker's bars."""

    follow_min_score: float = 0.62  # template match needed (IndexSettings.follow_min_score)
    max_gap_s: float = 3.0  # at most this much of the shot before the first sighting (IndexSettings.track_max_gap_s)
    same_head_iou: float = 0.3  # a followed box overlapping another track's sighting this much is that head (track_iou)


def _windows(tracks: Sequence[TrackStart], samples: Sequence[int], fps: float, reach: BackReach) -> dict[int, list[int]]:
    """Each track that starts after its shot's first sample -> the sampled frames before its first sighting it may go
    back over (nearest first)."""
    back = max(1, round(reach.max_gap_s * (fps or 25.0)))
    out = {}
    for n, tr in enumerate(tracks):
        first = tr.sightings[0][0]
        i = bisect.bisect_left(samples, first)
        earlier = [f for f in samples[:i] if tr.shot_first <= f and first - f <= back]
        if earlier:
            out[n] = earlier[::-1]
    return out


def followed_back(path: Path, max_side: int, tracks: Sequence[TrackStart], samples: Sequence[int], fps: float,
                  reach: BackReach = BackReach(), probe: SourceProbe | None = None) -> list[tuple[Sighting, ...]]:
    """Each track's sightings with those found by following it back in time first (unchanged where none were); `probe`:
    the file's look (its header not checked again)."""
    windows = _windows(tracks, samples, fps, reach)
    result = [tr.sightings for tr in tracks]
    if not windows:
        return result
    held: dict[int, list[Box]] = {}  # frame -> the boxes the tracks hold there
    for tr in tracks:
        for f, box in tr.sightings:
            held.setdefault(f, []).append(box)
    needed: dict[int, set[int]] = {}  # frame -> the tracks that need its pixels (their window and first sighting)
    for n, frames in windows.items():
        for f in (*frames, tracks[n].sightings[0][0]):
            needed.setdefault(f, set()).add(n)
    due: dict[int, list[int]] = {}  # frame of a first sighting -> the tracks to follow back once it is decoded
    for n in windows:
        due.setdefault(tracks[n].sightings[0][0], []).append(n)
    greys: dict[int, np.ndarray] = {}
    last = max(due)
    for frame in VideoStream(path, max_side, small_copies=False, probe=probe):  # no shots to find: no small copies
        if frame.index in needed:
            greys[frame.index] = cv2.cvtColor(frame.rgb, cv2.COLOR_RGB2GRAY)
        for n in due.get(frame.index, ()):
            earlier = _follow_back(tracks[n], windows[n], greys, held, reach)
            result[n] = (*earlier, *tracks[n].sightings)
            for f, box in earlier:
                held.setdefault(f, []).append(box)
            for f in (*windows[n], frame.index):  # frames no other track needs any more are let go
                needed[f].discard(n)
                if not needed[f]:
                    greys.pop(f, None)
        if frame.index >= last:
            break
    return result


def _follow_back(track: TrackStart, window: Sequence[int], greys: dict[int, np.ndarray], held: dict[int, list[Box]],
                 reach: BackReach) -> list[Sighting]:
    """The sightings found going back from a track's first sighting over `window` (nearest first), in time order."""
    first, box = track.sightings[0]
    if first not in greys:
        return []
    template = head_template(greys[first], box)
    found: list[Sighting] = []
    for f in window:
        if f not in greys:
            break
        match = find_head_region(greys[f], template, box, reach.follow_min_score)
        if match is None or any(match[0].iou(b) >= reach.same_head_iou for b in held.get(f, ())):
            break
        box = match[0]
        found.append((f, box))
    return found[::-1]


def with_earlier_sightings(heads: Heads, settings: IndexSettings, probe: SourceProbe | None = None) -> Heads:
    """A new analysis' heads (`actions.redact_records.VideoHeads`, its sampled frames known) with each track followed back in
    time (see the module's docstring); the tracks' start times moved back with their first sightings. `probe`: the file's
    look (`indexer.decode.probe_source`)."""
    if heads.samples is None or not heads.tracks:
        return heads
    starts = [TrackStart(tr.sightings, heads.shots.get(tr.shot, (tr.sightings[0][0], 0))[0]) for tr in heads.tracks]
    reach = BackReach(settings.follow_min_score, settings.track_max_gap_s, settings.track_iou)
    sightings = followed_back(heads.path, settings.decode_max_side, starts, heads.samples, heads.fps, reach, probe)
    fps = heads.fps or 25.0
    tracks = [tr if seen == tr.sightings else replace(tr, sightings=seen, start=tr.start - (tr.sightings[0][0] - seen[0][0]) / fps)
              for tr, seen in zip(heads.tracks, sightings, strict=True)]
    added = sum(len(seen) - len(tr.sightings) for tr, seen in zip(heads.tracks, sightings, strict=True))
    if added:
        log.info("%s: %d sightings found following %d tracks back", heads.path, added,
                 sum(seen != tr.sightings for tr, seen in zip(heads.tracks, sightings, strict=True)))
    return replace(heads, tracks=tracks)


class EveryFaceDetector(FaceDetector):
    """The face detector of an analysis that hides every head: the index's detector's faces, and the small ones it cannot
    see, from a second look at the frame enlarged EVERY_HEAD_ZOOM times (at most EVERY_HEAD_SIDE pixels across), faces
    from EVERY_HEAD_SCORE and EVERY_HEAD_MIN_FACE_PX up to EVERY_HEAD_SMALL_FACE_PX. Large faces come from the index's
    look alone: enlarged, a close-up's face is past the detector's largest anchors, and it gave boxes of the whole frame
    and several tracks on one face (on the 10-minute video: 438 tracks and 90,482 boxes, against the index's 121)."""

    def __init__(self, settings: IndexSettings, usual: FaceDetector):
        super().__init__(EVERY_HEAD_SCORE, EVERY_HEAD_SIDE, settings.detect_min_side, EVERY_HEAD_MIN_FACE_PX)
        self.usual = usual  # the index's look (the redactor's own detector)

    def _load(self):
        return self.usual._load()  # the same network: its session, not a second one

    def scale_for(self, width: int, height: int, max_side: int | None = None) -> float:
        return max(min(EVERY_HEAD_ZOOM, self.max_side / max(width, height, 1)), super().scale_for(width, height))

    def detect(self, rgb: np.ndarray, max_side: int | None = None) -> list[FaceDetection]:
        usual = self.usual.detect(rgb, max_side) if max_side else self.usual.detect(rgb)
        small = [f for f in super().detect(rgb) if max(f.box.width, f.box.height) < EVERY_HEAD_SMALL_FACE_PX
                 and not any(u.box.x1 <= f.box.center[0] <= u.box.x2 and u.box.y1 <= f.box.center[1] <= u.box.y2 for u in usual)]
        return sorted(usual + small, key=lambda d: -d.score)
