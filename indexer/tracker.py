"""Head tracks inside one shot: IoU association of head detections (found by their faces, or by person
keypoints where no face shows), and template following of the head region through frames where nothing
finds it (profile, turned away, occluded face, frames the keypoint finder skips)."""
from __future__ import annotations

import logging
from dataclasses import dataclass

import cv2
import numpy as np

from schemas.records import Box, HeadDetection, HeadSource, HeadTrack, Observation

log = logging.getLogger(__name__)

TEMPLATE_PX = 32  # heads are matched at this size


@dataclass
class _ActiveTrack:
    track: HeadTrack
    last_box: Box
    last_time: float
    last_found_time: float  # the last sighting a detector found (its face, or its keypoints)
    template: np.ndarray | None = None  # grey head patch, TEMPLATE_PX square, from the last detected sighting


def _grey(rgb: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)


def head_template(grey: np.ndarray, box: Box, size: int = TEMPLATE_PX) -> np.ndarray:
    """The grey patch of a head region, `size` pixels square: what following matches."""
    scale = size / max(box.width, 1.0)
    m = np.array([[scale, 0, -box.x1 * scale], [0, scale, -box.y1 * scale]], dtype=np.float32)
    return cv2.warpAffine(grey, m, (size, size), flags=cv2.INTER_AREA, borderMode=cv2.BORDER_REPLICATE)


def association_score(track_box: Box, det_box: Box) -> float:
    """How well a detection continues a track: IoU, or a near centre at a similar size (fast motion)."""
    iou = track_box.iou(det_box)
    (tx, ty), (dx, dy) = track_box.center, det_box.center
    side = max(track_box.width, 1.0)
    ratio = det_box.width / side
    dist = float(np.hypot(tx - dx, ty - dy)) / side
    if 0.66 < ratio < 1.5 and dist < 0.5:
        return max(iou, 0.3 * (1 - dist))
    return iou


class HeadTracker:
    """Builds head tracks over the sampled frames of one shot at a time. A track starts from a head found by
    its face or by keypoints, takes the detection that continues it best in each sampled frame, is followed
    by template matching where none does, and ends once no detector has found its head for `max_gap_s`."""

    def __init__(self, min_iou: float = 0.3, max_gap_s: float = 3.0, follow_min_score: float = 0.62):
        self.min_iou = min_iou
        self.max_gap_s = max_gap_s
        self.follow_min_score = follow_min_score
        self.shot_index = 0
        self._active: list[_ActiveTrack] = []

    def new_shot(self, shot_index: int) -> list[HeadTrack]:
        """Close every open track (tracks never cross a cut) and start a shot."""
        done = self.finish()
        self.shot_index = shot_index
        return done

    def finish(self) -> list[HeadTrack]:
        """Close and return every open track."""
        done = [a.track for a in self._active]
        self._active = []
        return done

    def update(self, frame_index: int, time: float, rgb: np.ndarray, detections: list[HeadDetection]) -> tuple[list[tuple[HeadTrack, Observation]], list[HeadTrack]]:
        """Add one sampled frame; returns (new observations with their tracks, tracks that ended)."""
        grey = _grey(rgb)
        new_obs: list[tuple[HeadTrack, Observation]] = []
        used_t, used_d = self._associate([a.last_box for a in self._active], detections, set(), set())
        for ti, di in used_t.items():
            new_obs.append(self._extend(self._active[ti], frame_index, time, grey, detections[di]))
        # Tracks no detection continued: where their head region went. A detection that lies where a track's
        # head was followed to continues that track (it moved further than IoU allows), not a new one.
        followed = {ti: found for ti, a in enumerate(self._active) if ti not in used_t
                    and (found := self._follow_box(a, time, grey)) is not None}
        late, used_late = self._associate([followed[ti][0] if ti in followed else None for ti in range(len(self._active))],
                                          detections, set(), set(used_d))
        for ti, di in late.items():
            new_obs.append(self._extend(self._active[ti], frame_index, time, grey, detections[di]))
            followed.pop(ti)
        used_d |= used_late
        # One head is one box: a followed region on a head a detection holds in this frame, or on a head another
        # track followed there from a more recent detection, is that head; the track gets no sighting here.
        taken = [detections[di].head for di in used_d]
        for ti in sorted(followed, key=lambda i: -self._active[i].last_found_time):
            box, score = followed[ti]
            if any(box.iou(b) >= self.min_iou for b in taken):
                continue
            taken.append(box)
            new_obs.append(self._followed(self._active[ti], frame_index, time, box, score))
        for di, d in enumerate(detections):
            if di not in used_d and (d.face is not None or d.source == HeadSource.KEYPOINTS):
                a = _ActiveTrack(HeadTrack(self.shot_index), d.head, time, time)
                self._active.append(a)
                new_obs.append(self._extend(a, frame_index, time, grey, d))
        ended = [a for a in self._active if time - a.last_time > self.max_gap_s or time - a.last_found_time > self.max_gap_s]
        self._active = [a for a in self._active if a not in ended]
        return new_obs, [a.track for a in ended]

    def _associate(self, boxes: list[Box | None], detections: list[HeadDetection], skip_t: set[int],
                   skip_d: set[int]) -> tuple[dict[int, int], set[int]]:
        """Greedy association of tracks (their boxes; None: none) with detections, best score first:
        ({track index: detection index}, the detections used, `skip_d` included)."""
        pairs = []
        for ti, box in enumerate(boxes):
            if box is None or ti in skip_t:
                continue
            for di, d in enumerate(detections):
                if di not in skip_d and (s := association_score(box, d.head)) >= self.min_iou:
                    pairs.append((s, ti, di))
        pairs.sort(reverse=True)
        matched: dict[int, int] = {}
        used_d = set(skip_d)
        for _, ti, di in pairs:
            if ti in matched or di in used_d:
                continue
            matched[ti] = di
            used_d.add(di)
        return matched, used_d

    def _extend(self, a: _ActiveTrack, frame_index: int, time: float, grey: np.ndarray, d: HeadDetection) -> tuple[HeadTrack, Observation]:
        found = d.face is not None or d.source == HeadSource.KEYPOINTS
        source = HeadSource.FACE if d.face is not None else (d.source if found else HeadSource.FOLLOWED)
        obs = Observation(frame_index=frame_index, time=time, head=d.head, face=d.face, found_by=source,
                          keypoint_score=d.score if source == HeadSource.KEYPOINTS else None)
        a.track.observations.append(obs)
        a.last_box, a.last_time = d.head, time
        if found:
            a.last_found_time = time
            a.template = head_template(grey, d.head)
        return a.track, obs

    def _follow_box(self, a: _ActiveTrack, time: float, grey: np.ndarray) -> tuple[Box, float] | None:
        """Where the track's head region lies now, searched near where it was last seen, and how well it
        matched (None: not found)."""
        if a.template is None or time - a.last_found_time > self.max_gap_s:
            return None
        return find_head_region(grey, a.template, a.last_box, self.follow_min_score)

    def _followed(self, a: _ActiveTrack, frame_index: int, time: float, box: Box, score: float) -> tuple[HeadTrack, Observation]:
        obs = Observation(frame_index=frame_index, time=time, head=box, face=None, found_by=HeadSource.FOLLOWED, follow_score=score)
        a.track.observations.append(obs)
        a.last_box, a.last_time = box, time
        return a.track, obs


def find_head_region(grey: np.ndarray, template: np.ndarray, box: Box, min_score: float) -> tuple[Box, float] | None:
    """Where a head region (its `head_template`) lies in a frame (grey pixels), searched within one box side of `box`,
    where it was last seen, and how well it matched (normalised correlation); None: no match of at least `min_score`,
    a flat patch (it would match anything), or a match mostly outside the frame (the head left the picture)."""
    side = box.width
    scale = TEMPLATE_PX / max(side, 1.0)
    search = Box(box.x1 - side, box.y1 - side, box.x2 + side, box.y2 + side)
    m = np.array([[scale, 0, -search.x1 * scale], [0, scale, -search.y1 * scale]], dtype=np.float32)
    size = (round(search.width * scale), round(search.height * scale))
    region = cv2.warpAffine(grey, m, size, flags=cv2.INTER_AREA, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
    if float(template.std()) < 4.0 or float(region.std()) < 4.0:  # flat patches match anything
        return None
    result = cv2.matchTemplate(region, template, cv2.TM_CCOEFF_NORMED)
    _, best, _, (bx, by) = cv2.minMaxLoc(result)
    if best < min_score:
        return None
    x1, y1 = search.x1 + bx / scale, search.y1 + by / scale
    found = Box(x1, y1, x1 + side, y1 + side)
    h, w = grey.shape[:2]
    ix = max(0.0, min(found.x2, w) - max(found.x1, 0.0)) * max(0.0, min(found.y2, h) - max(found.y1, 0.0))
    if ix < 0.5 * found.area:  # mostly outside the frame: the head left the picture
        return None
    return found, float(best)
