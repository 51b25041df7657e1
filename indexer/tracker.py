"""Head tracks inside one shot: IoU association of head detections, and template following of
the head region through frames where no face is visible (profile, turned away, occluded face)."""
from __future__ import annotations

import logging
from dataclasses import dataclass

import cv2
import numpy as np

from schemas.records import Box, HeadDetection, HeadTrack, Observation

log = logging.getLogger(__name__)

TEMPLATE_PX = 32  # heads are matched at this size


@dataclass
class _ActiveTrack:
    track: HeadTrack
    last_box: Box
    last_time: float
    last_face_time: float
    template: np.ndarray | None = None  # grey head patch, TEMPLATE_PX square


def _grey(rgb: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)


def _patch(grey: np.ndarray, box: Box, size: int = TEMPLATE_PX) -> np.ndarray:
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
    """Builds head tracks over the sampled frames of one shot at a time."""

    def __init__(self, min_iou: float = 0.3, max_gap_s: float = 3.0, follow_min_score: float = 0.55):
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
        pairs = []
        for ti, a in enumerate(self._active):
            for di, d in enumerate(detections):
                s = association_score(a.last_box, d.head)
                if s >= self.min_iou:
                    pairs.append((s, ti, di))
        pairs.sort(reverse=True)
        used_t, used_d = set(), set()
        new_obs: list[tuple[HeadTrack, Observation]] = []
        for _, ti, di in pairs:
            if ti in used_t or di in used_d:
                continue
            used_t.add(ti)
            used_d.add(di)
            new_obs.append(self._extend(self._active[ti], frame_index, time, grey, detections[di]))
        for ti, a in enumerate(self._active):
            if ti in used_t:
                continue
            obs = self._follow(a, frame_index, time, grey, rgb.shape)
            if obs is not None:
                new_obs.append(obs)
        for di, d in enumerate(detections):
            if di not in used_d and d.face is not None:
                a = _ActiveTrack(HeadTrack(self.shot_index), d.head, time, time)
                self._active.append(a)
                new_obs.append(self._extend(a, frame_index, time, grey, d))
        ended = [a for a in self._active if time - a.last_time > self.max_gap_s or time - a.last_face_time > self.max_gap_s]
        self._active = [a for a in self._active if a not in ended]
        return new_obs, [a.track for a in ended]

    def _extend(self, a: _ActiveTrack, frame_index: int, time: float, grey: np.ndarray, d: HeadDetection) -> tuple[HeadTrack, Observation]:
        obs = Observation(frame_index=frame_index, time=time, head=d.head, face=d.face)
        a.track.observations.append(obs)
        a.last_box, a.last_time = d.head, time
        if d.face is not None:
            a.last_face_time = time
            a.template = _patch(grey, d.head)
        return a.track, obs

    def _follow(self, a: _ActiveTrack, frame_index: int, time: float, grey: np.ndarray, shape: tuple) -> tuple[HeadTrack, Observation] | None:
        """Find the track's head region near where it was last seen, without a face."""
        if a.template is None or time - a.last_face_time > self.max_gap_s:
            return None
        box = a.last_box
        side = box.width
        scale = TEMPLATE_PX / max(side, 1.0)
        search = Box(box.x1 - side, box.y1 - side, box.x2 + side, box.y2 + side)
        m = np.array([[scale, 0, -search.x1 * scale], [0, scale, -search.y1 * scale]], dtype=np.float32)
        size = (round(search.width * scale), round(search.height * scale))
        region = cv2.warpAffine(grey, m, size, flags=cv2.INTER_AREA, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
        if float(a.template.std()) < 4.0 or float(region.std()) < 4.0:  # flat patches match anything
            return None
        result = cv2.matchTemplate(region, a.template, cv2.TM_CCOEFF_NORMED)
        _, best, _, (bx, by) = cv2.minMaxLoc(result)
        if best < self.follow_min_score:
            return None
        x1, y1 = search.x1 + bx / scale, search.y1 + by / scale
        found = Box(x1, y1, x1 + side, y1 + side)
        h, w = shape[:2]
        ix = max(0.0, min(found.x2, w) - max(found.x1, 0.0)) * max(0.0, min(found.y2, h) - max(found.y1, 0.0))
        if ix < 0.5 * found.area:  # mostly outside the frame: the head left the picture
            return None
        obs = Observation(frame_index=frame_index, time=time, head=found, face=None)
        a.track.observations.append(obs)
        a.last_box, a.last_time = found, time
        return a.track, obs
