"""Evidence: which head tracks show a real person, and which are ghosts.

RetinaFace fires now and then on things that are not faces: a hand holding a microphone, a
blurred patch of background (one 0.72 detection that the tracker then follows through six
face-less frames), a logo or a still picture pasted over the video. A track is kept only when

* it has at least `min_confident` confident face detections: a score of at least
  `confident_score`, with plausible landmarks (the mouth well below the eyes, the nose between
  them) and a face of at least `min_face_px`;
* it is not a static overlay: a box that stays put, showing the same pixels, while the picture
  around it changes (logos, captions, a still picture pasted on the video).

Measured on all of ../shared/data (research/evidence_report.py, contact sheets looked at): every
real person's track has a best detection of 0.78 or more (a masked woman in a crowd 0.78, blurred
audience faces 0.79-0.80), the ghost of s18.mp4 has 0.72: `confident_score` sits half-way. Of 469
tracks, 3 go (that ghost and two hands in short_hamilton_clip.mp4); no static overlay occurs there
(tests/test_evidence.py pastes one on a moving shot).

A track that never shows a confident face (a person seen from behind or in hard profile, found by
person keypoints: `headsearch.detection.keypoints`) is kept on keypoint evidence instead: at least
`min_keypoint_sightings` sightings found by keypoints, the best scored at least `keypoint_score`
(MoveNet's person score x the mean score of its head points), and not a static overlay (the same
test on its head boxes). Measured on all of ../shared/data (`research/evidence_report.py
--all-keypoint-tracks`, every candidate looked at): with the head rules as shipped, 5 tracks rest on
keypoints alone, all real people (three walking away in the crowd clip, a man from behind and a man
with glasses too small for RetinaFace in face-api.js's comic-shop clip), scored 0.063-0.281. Before a
keypoint head inside a face's head counted as that head, 9 more arose, all false ("heads" around one
eye or the nose of close-up faces, a dark ring in goldeneye), scored 0.022-0.039, with one real head,
half hidden, at 0.042: `keypoint_score` sits above them, should such heads get through again.
"""
from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from schemas.records import Box, FaceDetection, HeadSource, HeadTrack, Observation

PATCH_PX = 8  # face patches are compared at this size (area-averaged: codec noise and 1-px jitter wash out)
SIGNATURE_SIZE = (32, 18)  # frames are compared as grey thumbnails of this size


@dataclass(frozen=True)
class EvidenceRule:
    min_confident: int = 1
    confident_score: float = 0.76
    min_face_px: float = 16.0  # in decoded pixels
    # Plausible landmarks: eyes-to-mouth distance as a share of the face height, and where the
    # nose lies between the eyes (0) and the mouth (1). Real faces in ../shared/data, profiles
    # included: 0.29-0.47 and 0.24-0.90; a hand holding a microphone: -0.20, a waving hand: 0.00.
    eyes_to_mouth: tuple[float, float] = (0.20, 0.65)
    nose_between: tuple[float, float] = (0.10, 1.05)
    # Static overlays: at least this many face sightings over this many seconds, the box moving
    # less than `static_move` face sides, its pixels changing less than `static_patch` grey levels
    # (median from one sighting to the next; at most twice that at any step), while the picture
    # outside the head changes by more than `static_picture` grey levels.
    static_min_sightings: int = 3
    static_min_seconds: float = 1.0
    static_move: float = 0.05
    static_patch: float = 2.0
    static_picture: float = 10.0
    # Tracks without a confident face: evidence from person keypoints (measured, see the module docstring).
    min_keypoint_sightings: int = 1
    keypoint_score: float = 0.05


def plausible_landmarks(face: FaceDetection, rule: EvidenceRule = EvidenceRule()) -> bool:
    """The five landmarks lie as on a face: mouth below the eyes, nose between, all near the box."""
    lm = np.asarray(face.landmarks, dtype=np.float64)
    b = face.box
    w, h = max(b.width, 1.0), max(b.height, 1.0)
    if not (np.all(lm[:, 0] >= b.x1 - 0.1 * w) and np.all(lm[:, 0] <= b.x2 + 0.1 * w)
            and np.all(lm[:, 1] >= b.y1 - 0.1 * h) and np.all(lm[:, 1] <= b.y2 + 0.1 * h)):
        return False
    eyes_y = (lm[0, 1] + lm[1, 1]) / 2
    mouth_y = (lm[3, 1] + lm[4, 1]) / 2
    drop = (mouth_y - eyes_y) / h
    if not rule.eyes_to_mouth[0] <= drop <= rule.eyes_to_mouth[1]:
        return False
    nose = (lm[2, 1] - eyes_y) / max(mouth_y - eyes_y, 1e-6)
    return rule.nose_between[0] <= nose <= rule.nose_between[1]


def confident(face: FaceDetection, rule: EvidenceRule = EvidenceRule()) -> bool:
    """A face detection that counts as evidence of a real face."""
    if min(face.box.width, face.box.height) < rule.min_face_px:
        return False
    return face.score >= rule.confident_score and plausible_landmarks(face, rule)


def face_patch(grey: np.ndarray, box: Box) -> np.ndarray:
    """The face region as a small grey patch (uint8), for telling static overlays."""
    scale = PATCH_PX / max(box.width, box.height, 1.0)
    m = np.array([[scale, 0, -box.x1 * scale], [0, scale, -box.y1 * scale]], dtype=np.float32)
    return cv2.warpAffine(grey, m, (PATCH_PX, PATCH_PX), flags=cv2.INTER_AREA, borderMode=cv2.BORDER_CONSTANT)


def frame_signature(grey: np.ndarray) -> np.ndarray:
    """The whole frame as a tiny grey thumbnail (uint8)."""
    return cv2.resize(grey, SIGNATURE_SIZE, interpolation=cv2.INTER_AREA)


def _mad(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(np.abs(a.astype(np.float32) - b.astype(np.float32))))


class EvidenceCollector:
    """What the evidence rule needs to see of each sighting, gathered while a video is analysed."""

    def __init__(self, rule: EvidenceRule = EvidenceRule()):
        self.rule = rule
        self._patch: dict[int, np.ndarray] = {}  # id(observation) -> face patch
        self._signature: dict[int, np.ndarray] = {}  # frame index -> frame signature
        self._frame_size: dict[int, tuple[int, int]] = {}  # frame index -> (width, height)
        self._anchor: dict[tuple[int, bool], Box] = {}  # (id(track), by face) -> the box of its first face (or keypoint head)

    def add(self, frame_index: int, rgb: np.ndarray, observed: list[tuple[HeadTrack, Observation]]) -> None:
        """Record one sampled frame and its new sightings (only those a detector found count: by a face,
        or by keypoints). Each sighting's patch is cut where its track's first face (or first keypoint
        head) was: a box that does not move shows the same pixels there, whatever the detector's pixel
        of jitter."""
        found = [(t, o) for t, o in observed if o.face is not None or o.found_by == HeadSource.KEYPOINTS]
        if not found:
            return
        grey = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
        self._signature.setdefault(frame_index, frame_signature(grey))
        self._frame_size[frame_index] = (grey.shape[1], grey.shape[0])
        for track, o in found:
            by_face = o.face is not None
            anchor = self._anchor.setdefault((id(track), by_face), o.face.box if by_face else o.head)
            self._patch[id(o)] = face_patch(grey, anchor)

    def judge(self, track: HeadTrack) -> str | None:
        """Why a track is not a real person (None when it is)."""
        faces = [o for o in track.observations if o.face is not None]
        n = sum(confident(o.face, self.rule) for o in faces)
        if n < self.rule.min_confident:
            best = max((o.face.score for o in faces), default=0.0)
            why = (f"no confident face ({len(faces)} face detections, best score {best:.2f}"
                   f"{', implausible landmarks' if faces and not any(plausible_landmarks(o.face, self.rule) for o in faces) else ''})")
            by_keypoints = [o for o in track.observations if o.found_by == HeadSource.KEYPOINTS]
            if not by_keypoints:
                return why
            lacking = self._keypoint_evidence(by_keypoints)
            return None if lacking is None else f"{why}; {lacking}"
        if self._static(faces, lambda o: o.face.box):
            return "static overlay (the box and its pixels stay the same while the picture changes)"
        return None

    def _keypoint_evidence(self, sightings: list[Observation]) -> str | None:
        """What a track found by keypoints lacks to count as a person (None: nothing)."""
        r = self.rule
        best = max(o.keypoint_score or 0.0 for o in sightings)
        if len(sightings) < r.min_keypoint_sightings or best < r.keypoint_score:
            return (f"too little keypoint evidence ({len(sightings)} sightings found by keypoints, best score {best:.2f}; "
                    f"needs {r.min_keypoint_sightings}, {r.keypoint_score:.2f})")
        if self._static(sightings, lambda o: o.head):
            return "static overlay (the head box and its pixels stay the same while the picture changes)"
        return None

    def _static(self, faces: list[Observation], box_of) -> bool:
        r = self.rule
        if len(faces) < r.static_min_sightings or faces[-1].time - faces[0].time < r.static_min_seconds:
            return False
        patches = [self._patch.get(id(o)) for o in faces]
        sigs = [self._signature.get(o.frame_index) for o in faces]
        if any(p is None for p in patches) or any(s is None for s in sigs):
            return False
        boxes = np.array([box_of(o).as_tuple() for o in faces])
        sides = np.maximum(boxes[:, 2] - boxes[:, 0], 1.0)
        centres = np.stack([(boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2], axis=1)
        side = float(np.median(sides))
        if np.abs(centres - np.median(centres, axis=0)).max() > r.static_move * side or sides.max() > sides.min() * (1 + r.static_move * 2):
            return False
        steps = [_mad(patches[i], patches[i + 1]) for i in range(len(patches) - 1)]
        if float(np.median(steps)) > r.static_patch or max(steps) > 2 * r.static_patch:
            return False
        outside = self._outside_mask(faces[0])
        if outside.sum() < outside.size / 4:
            return False  # the head fills the picture: nothing around it to change
        change = max(float(np.mean(np.abs(sigs[0].astype(np.float32) - s.astype(np.float32))[outside])) for s in sigs[1:])
        return change > r.static_picture

    def _outside_mask(self, o: Observation) -> np.ndarray:
        """Where the frame signature lies outside the sighting's head box."""
        w, h = SIGNATURE_SIZE
        fw, fh = self._frame_size.get(o.frame_index, (w, h))
        mask = np.ones((h, w), bool)
        b = o.head
        x1, x2 = int(np.floor(max(0.0, b.x1) * w / fw)), int(np.ceil(min(float(fw), b.x2) * w / fw))
        y1, y2 = int(np.floor(max(0.0, b.y1) * h / fh)), int(np.ceil(min(float(fh), b.y2) * h / fh))
        mask[y1:y2, x1:x2] = False
        return mask


def judge_photo(face: FaceDetection | None, rule: EvidenceRule = EvidenceRule()) -> str | None:
    """Why a head found in a photo is not a real face (None when it is)."""
    if face is None or not confident(face, rule):
        return "no confident face" if face is None else f"no confident face (score {face.score:.2f}" + (
            ", implausible landmarks)" if not plausible_landmarks(face, rule) else ")")
    return None
