"""Heads found through person keypoints: backs of heads and hard profiles that show no face.

MoveNet MultiPose Lightning (Apache-2.0, weights/MOVENET_LICENSE.md) gives up to 6 people per pass, each with
17 keypoints (nose, eyes, ears, shoulders, ...) and a person score. A person's head points give a square head;
heads that are the head of a face RetinaFace found are left to the face, so one head is one box.

The rule (`KeypointRule`) is the one `research/head_boxes_prototype.py eval --fit` fitted and measured on
bench/sets/heads.csv (27 frames, 133 heads; in-sample, see that script's docstring):

- MoveNet sees the frame in `tiles` overlapping windows along its long side, each letterboxed to `side` px
  (crowds hold more than 6 people, and small people need the larger input). To keep its cost where it pays, it
  first sees the whole frame once at `side`; only when that pass is full (all 6 people it can report scored
  >= `person_min`: a crowd) does it look again in the windows, whose people then stand alone (the rule was
  fitted on them). On the labelled set every crowd frame fills the first pass (6 of 6) and no other frame
  does (0-5);
- before that pass, where faces were found, MoveNet looks at the frame at `screen_side` (192 px: about a fifth of
  the pass's cost); when that look shows one or two people (no more than the faces), each with a head that is a
  face's head, the pass is spared: the frame holds no head the faces did not give (`KeypointHeadFinder.only_faces`);
- a person counts at a person score >= `person_min`; its head points (nose, eyes, ears) count at a keypoint
  score >= `keypoint_min`, its shoulders when both do; 2 head points are needed (or 1 and both shoulders);
- the head's side is the larger of `spread_k` x the largest distance between two head points and
  `shoulder_k` x the shoulder width; its centre lies half-way between the ears and the face points, raised
  by `raise_k` x the side (hair above eyes and ears);
- heads under `min_px` are dropped; of two heads overlapping by IoU >= `dedupe_iou` (one person seen in two
  windows) the better scored one stays, and so it does (added after the prototype, from the labelled set's
  crowd frames) when the other is smaller and its centre lies inside it;
- a keypoint head is the head of a face when the face's centre lies inside it or the two heads overlap by
  IoU >= `same_iou`; and (added after the prototype, from the evidence report on all of ../shared/data: MoveNet
  on close-up faces gives small "heads" around one eye or the nose, 9 of its 16 keypoint-only tracks) when it is
  smaller than the face's head and its centre lies inside it.

Boxes: the rule was fitted to labelled heads (hair top to chin), while the head boxes the indexer stores and
crops (`faces.head_box_from_face`) hold the head with a margin. Measured on the same set, the labelled head
is the face-derived box scaled by HEAD_IN_BOX = 0.8 about its centre (faces-only F1 at IoU 0.5 peaks there,
over 0.6-1.0). Keypoint heads are therefore stored as their fitted box grown by 1 / HEAD_IN_BOX, framed as face
heads are (the embedders see both alike), and compared with labels (`bench heads`) as every stored box is,
scaled by HEAD_IN_BOX.
"""
from __future__ import annotations

import functools
import itertools
import logging
import threading
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from headsearch.basics.errors import ModelError
from headsearch.basics.files import sha256_file
from schemas.records import Box, HeadDetection, HeadSource

log = logging.getLogger(__name__)

MOVENET_FILE = "movenet_multipose_lightning.onnx"
MOVENET_SHA256 = "7cdb28c904b3589eae01d27fdc35a3670ca7b8d80cee243054a2cfb5ce4fde1c"
# The models' weights folder is package data (setup.cfg); this module reads the file, it imports nothing from there.
MOVENET_PATH = Path(__file__).resolve().parents[1] / "models" / "weights" / MOVENET_FILE
HEAD_IN_BOX = 0.8  # the head itself (hair top to chin) is a stored head box scaled by this about its centre

NOSE, LEFT_EYE, RIGHT_EYE, LEFT_EAR, RIGHT_EAR, LEFT_SHOULDER, RIGHT_SHOULDER = range(7)
FACE_POINTS = (NOSE, LEFT_EYE, RIGHT_EYE)
EAR_POINTS = (LEFT_EAR, RIGHT_EAR)
PEOPLE_COLUMNS = 56  # per person: 17 x (x, y, score) in frame pixels, then the box (x1, y1, x2, y2) and its score


@dataclass(frozen=True)
class KeypointRule:
    """How person keypoints become head boxes (fitted on bench/sets/heads.csv, see the module docstring)."""

    side: int = 512  # MoveNet input long side (multiple of 32)
    tiles: int = 3  # windows along the frame's long side, where the whole frame's pass is full (1: never)
    person_min: float = 0.1  # MoveNet person score
    keypoint_min: float = 0.2  # keypoint score of nose, eyes, ears, shoulders
    min_points: int = 2  # head points needed without both shoulders
    spread_k: float = 1.6  # head side per largest distance between two head points
    shoulder_k: float = 0.7  # head side per shoulder width (a lower bound)
    ear_weight: float = 0.5  # weight of the ears' centre in the head's x (the face points' centre has the rest)
    raise_k: float = 0.1  # the head's centre above the head points' mean, per side
    min_px: float = 24.0  # fitted heads smaller than this (side, frame pixels) are dropped
    dedupe_iou: float = 0.5  # two keypoint heads overlapping this much are one head (the better scored stays)
    same_iou: float = 0.2  # a keypoint head overlapping a face's head this much is that head
    screen_side: int = 192  # a first look at this long side (about 1/5 of a pass at `side`) may spare the pass (0: never)
    screen_max_people: int = 2  # ...when it sees at most this many people (and no more than the faces), all faces' heads


class PoseDetector:
    """MoveNet MultiPose Lightning on ONNX Runtime: people with 17 keypoints each, in frame pixels."""

    def __init__(self, path: Path = MOVENET_PATH, threads: int | None = None):
        self.path = Path(path)
        self.threads = threads
        self._session = None
        self._lock = threading.Lock()

    def _load(self):
        if self._session is None:
            from headsearch.basics.runtime import inference_session

            if not self.path.is_file():
                raise ModelError(f"missing model file: {self.path} (reinstall headsearch)")
            if self.path == MOVENET_PATH and sha256_file(self.path) != MOVENET_SHA256:
                raise ModelError(f"{self.path}: damaged model file (its SHA-256 is not the shipped one; reinstall headsearch)")
            self._session = inference_session(self.path, self.threads)
        return self._session

    def people(self, rgb: np.ndarray, side: int = KeypointRule.side, tiles: int = 1) -> np.ndarray:
        """Every person MoveNet reports (6 per pass, weak ones included) as rows of PEOPLE_COLUMNS: keypoints
        (x, y, score) in frame pixels, then the person's box and score. With tiles > 1 the long side is cut
        into that many overlapping windows (each at least as long as the short side), each seen at `side`."""
        if tiles <= 1:
            return self._pass(rgb, side)
        h, w = rgb.shape[:2]
        horizontal = w >= h
        length = w if horizontal else h
        window = min(length, max(min(w, h), int(np.ceil(length / tiles * 1.25))))
        parts = []
        for start in np.linspace(0, length - window, tiles).round().astype(int):
            crop = rgb[:, start:start + window] if horizontal else rgb[start:start + window]
            p = self._pass(np.ascontiguousarray(crop), side)
            axis = 0 if horizontal else 1
            p[:, axis:51:3] += start
            p[:, 51 + axis] += start
            p[:, 53 + axis] += start
            parts.append(p)
        return np.concatenate(parts)

    def _pass(self, rgb: np.ndarray, side: int) -> np.ndarray:
        h, w = rgb.shape[:2]
        scale = side / max(h, w)
        nh, nw = max(1, round(h * scale)), max(1, round(w * scale))
        small = cv2.resize(rgb, (nw, nh), interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
        ph, pw = -(-nh // 32) * 32, -(-nw // 32) * 32  # the graph needs multiples of 32: pad right and bottom
        x = np.zeros((1, ph, pw, 3), np.int32)
        x[0, :nh, :nw] = small
        with self._lock:
            out = self._load().run(None, {"input": x})[0][0]  # (6, 56): keypoints (y, x, score), box (y1, x1, y2, x2), score
        people = np.zeros((out.shape[0], PEOPLE_COLUMNS), np.float32)
        kp = out[:, :51].reshape(-1, 17, 3)
        people[:, :51] = np.stack([kp[..., 1] * pw / scale, kp[..., 0] * ph / scale, kp[..., 2]], -1).reshape(-1, 51)
        people[:, 51:55] = out[:, [52, 51, 54, 53]] * np.array([pw, ph, pw, ph]) / scale
        people[:, 55] = out[:, 55]
        return people


@functools.lru_cache(maxsize=1)
def shared_pose_detector() -> PoseDetector:
    """One pose detector per process (its session loads on first use)."""
    return PoseDetector()


def scaled_about_centre(box: Box, k: float) -> Box:
    """The box scaled by `k` about its centre."""
    cx, cy = box.center
    hw, hh = box.width * k / 2, box.height * k / 2
    return Box(cx - hw, cy - hh, cx + hw, cy + hh)


def head_of_person(person: np.ndarray, rule: KeypointRule = KeypointRule()) -> tuple[Box, float] | None:
    """The fitted head (hair top to chin) of one person row and its score (person score x the head points'
    mean score); None when the person or its head points are too weak."""
    if person[55] < rule.person_min:
        return None
    kp = person[:51].reshape(17, 3)
    ok = kp[:, 2] >= rule.keypoint_min
    face_idx = [i for i in FACE_POINTS if ok[i]]
    ear_idx = [i for i in EAR_POINTS if ok[i]]
    head_idx = face_idx + ear_idx
    shoulders = bool(ok[LEFT_SHOULDER] and ok[RIGHT_SHOULDER])
    if len(head_idx) < rule.min_points and not (head_idx and shoulders):
        return None
    pts = kp[head_idx, :2]
    spread = max((float(np.linalg.norm(a - b)) for a, b in itertools.combinations(pts, 2)), default=0.0)
    side = rule.spread_k * spread
    if shoulders and rule.shoulder_k > 0:
        side = max(side, rule.shoulder_k * float(np.linalg.norm(kp[LEFT_SHOULDER, :2] - kp[RIGHT_SHOULDER, :2])))
    if side < max(rule.min_px, 1.0):
        return None
    if ear_idx and face_idx:
        cx = rule.ear_weight * kp[ear_idx, 0].mean() + (1 - rule.ear_weight) * kp[face_idx, 0].mean()
    else:
        cx = pts[:, 0].mean()
    cy = pts[:, 1].mean() - rule.raise_k * side
    score = float(person[55] * kp[head_idx, 2].mean())
    return Box(cx - side / 2, cy - side / 2, cx + side / 2, cy + side / 2), score


def _inside_larger(head: Box, other: Box) -> bool:
    """A smaller head whose centre lies inside a larger one: part of it (one person seen in two windows)."""
    cx, cy = head.center
    return head.width < other.width and other.x1 <= cx <= other.x2 and other.y1 <= cy <= other.y2


def keypoint_heads(people: np.ndarray, rule: KeypointRule = KeypointRule()) -> list[HeadDetection]:
    """Head detections of person rows, best scored first, one per person (framed as stored head boxes)."""
    found = [h for h in (head_of_person(p, rule) for p in people) if h is not None]
    found.sort(key=lambda h: -h[1])
    kept: list[tuple[Box, float]] = []
    for box, score in found:
        if all(box.iou(k) < rule.dedupe_iou and not _inside_larger(box, k) for k, _ in kept):
            kept.append((box, score))
    return [HeadDetection(head=scaled_about_centre(box, 1 / HEAD_IN_BOX), face=None, score=score, source=HeadSource.KEYPOINTS)
            for box, score in kept]


def is_same_head(keypoint_head: HeadDetection, face_head: HeadDetection, rule: KeypointRule = KeypointRule()) -> bool:
    """Whether a keypoint head is the head of a face already found: the face's centre lies inside it, the two
    heads overlap by IoU >= `same_iou` (both compared as heads, see HEAD_IN_BOX), or it is a smaller head whose
    centre lies inside the face's head (MoveNet on a close-up face: a 'head' around one eye or the nose)."""
    k = scaled_about_centre(keypoint_head.head, HEAD_IN_BOX)
    f = scaled_about_centre(face_head.head, HEAD_IN_BOX)
    if face_head.face is not None:
        fx, fy = face_head.face.box.center
        if k.x1 <= fx <= k.x2 and k.y1 <= fy <= k.y2:
            return True
    return _inside_larger(k, f) or k.iou(f) >= rule.same_iou


def new_heads(keypoint_found: list[HeadDetection], face_heads: list[HeadDetection],
              rule: KeypointRule = KeypointRule()) -> list[HeadDetection]:
    """The keypoint heads that are no face's head (one head is one box)."""
    return [k for k in keypoint_found if not any(is_same_head(k, f, rule) for f in face_heads)]


class KeypointHeadFinder:
    """Heads without a face in one frame: person keypoints -> heads, minus the heads of the faces found."""

    def __init__(self, rule: KeypointRule = KeypointRule(), pose: PoseDetector | None = None):
        self.rule = rule
        self.pose = pose or shared_pose_detector()

    def find(self, rgb: np.ndarray, face_heads: list[HeadDetection]) -> list[HeadDetection]:
        """Heads found by keypoints in an RGB frame that are not the heads of `face_heads`."""
        if self.only_faces(rgb, face_heads):
            return []
        people = self.people(rgb)
        return new_heads(keypoint_heads(people, self.rule), face_heads, self.rule)

    def only_faces(self, rgb: np.ndarray, face_heads: list[HeadDetection]) -> bool:
        """Whether a first look at the frame, at `screen_side`, shows only the people of the faces found: one or a
        few people (at most `screen_max_people`, and no more than the faces), each with a head, each head a face's.
        The frame's pass at `side` is then spared. Measured on the 10-minute video of `scripts/make_long_video.py`
        (talking heads): 137 of its 153 keypoint frames spared, and none of the 7 where the pass found a head without a
        face; on the labelled set's videos, none of the crowd's 5 keypoint frames (4-5 people at first look) spared."""
        rule = self.rule
        if rule.screen_side <= 0 or not face_heads:
            return False
        people = self.pose.people(rgb, rule.screen_side, 1)
        seen = int((people[:, 55] >= rule.person_min).sum())
        if not 1 <= seen <= min(rule.screen_max_people, len(face_heads)):
            return False
        heads = keypoint_heads(people, rule)
        return len(heads) == seen and not new_heads(heads, face_heads, rule)

    def people(self, rgb: np.ndarray) -> np.ndarray:
        """The whole frame's people, or where that pass is full (a crowd), the windows' people."""
        people = self.pose.people(rgb, self.rule.side, 1)
        if self.rule.tiles > 1 and int((people[:, 55] >= self.rule.person_min).sum()) >= len(people):
            people = self.pose.people(rgb, self.rule.side, self.rule.tiles)
        return people
