"""The fast tier's detectors, in place of RetinaFace and MoveNet (which the slow tier runs on real media), as
`fake_model.py` is its embedder: a face is whatever a test framed in MARK, the pure magenta no camera gives.
`mark_face(picture, box)` draws that frame (the picture's own pixels stay inside it, so the fake embedder tells two
marked faces apart); the fake face detector finds each frame's box, with the five landmarks of a frontal face in their
usual places, and the fake pose detector sees nobody. `installed()` puts them in place of the real ones for the time
of a test (conftest does, for every test outside the slow tier), and a comparison's spec names them as the detectors
that judged (`fake_digests`: this file's digest, where the real ones' is their weights'). Never shipped in the package."""
from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import pytest

from headsearch.compare import spec as compare_spec
from headsearch.detection.faces import FaceDetector
from headsearch.detection.keypoints import PEOPLE_COLUMNS, PoseDetector
from schemas.records import Box, FaceDetection

MARK = (255, 0, 255)
TOLERANCE = 6  # per channel: pictures saved without loss (PNG); a camera never gives this colour
LINE = 3  # the frame's width in pixels
# A frontal face's landmarks (eyes, nose tip, mouth corners) as shares of its box's width and height.
LANDMARKS = np.array([[0.32, 0.40], [0.68, 0.40], [0.50, 0.58], [0.36, 0.78], [0.64, 0.78]], np.float32)


def mark_face(picture: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    """`picture` (RGB) with a face framed in MARK at box (x1, y1, x2, y2), in place."""
    x1, y1, x2, y2 = box
    for rows, cols in (((y1, y1 + LINE), (x1, x2)), ((y2 - LINE, y2), (x1, x2)), ((y1, y2), (x1, x1 + LINE)), ((y1, y2), (x2 - LINE, x2))):
        picture[rows[0]:rows[1], cols[0]:cols[1]] = MARK
    return picture


def marked_faces(rgb: np.ndarray, min_side: float = 0.0) -> list[FaceDetection]:
    """The MARK frames in an RGB frame, as faces (score 0.99), largest first."""
    mark = np.array(MARK, np.int16)
    mask = (np.abs(rgb.astype(np.int16) - mark).max(axis=2) <= TOLERANCE).astype(np.uint8)
    count, _, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
    faces = []
    for x, y, w, h, area in stats[1:count]:
        if min(w, h) < max(min_side, 4 * LINE) or not LINE * (w + h) <= area <= 0.6 * w * h:
            continue  # a speck, a line or a filled patch of the colour, not a frame
        box = Box(float(x), float(y), float(x + w), float(y + h))
        landmarks = LANDMARKS * np.array([w, h], np.float32) + np.array([x, y], np.float32)
        faces.append(FaceDetection(box=box, landmarks=landmarks, score=0.99))
    faces.sort(key=lambda f: -f.box.area)
    return faces


def _detect(detector: FaceDetector, rgb: np.ndarray, max_side: int | None = None) -> list[FaceDetection]:
    return marked_faces(rgb, detector.min_face_px)


def _no_session(detector) -> None:
    return None


def _nobody(detector: PoseDetector, rgb: np.ndarray, side: int) -> np.ndarray:
    return np.zeros((0, PEOPLE_COLUMNS), np.float32)


def fake_digests() -> dict[str, str]:
    """What `compare`'s spec records of the detectors (`headsearch.compare.spec.detector_digests`: the SHA-256 of the real
    ones' weights) while the fakes judge: the SHA-256 of their code, this file."""
    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    return {"faces": digest, "keypoints": digest}


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """The fake detectors in place of the real ones' networks while the block runs (in this process)."""
    with pytest.MonkeyPatch.context() as patch:
        for real in (FaceDetector, PoseDetector):
            patch.setattr(real, "_load", _no_session)  # the weights are never read
        patch.setattr(FaceDetector, "detect", _detect)
        patch.setattr(PoseDetector, "_pass", _nobody)
        patch.setattr(compare_spec, "detector_digests", fake_digests)
        yield


class FacesInRegions:
    """A frame of `stored` pixels with faces at known places (`faces`), as the redactor's refining detector sees it:
    `region` gives a copy of a box of the frame (clipped, at most `side` across), and `detect` finds the faces lying
    wholly in the last copy made."""

    def __init__(self, stored: tuple[int, int]):
        self.stored, self.faces, self.copy = stored, [], (0.0, 0.0, 0.0, 0.0, 1.0)

    def region(self, box: Box, side: int):
        w, h = self.stored
        x1, y1, x2, y2 = max(0, int(box.x1)), max(0, int(box.y1)), min(w, int(np.ceil(box.x2))), min(h, int(np.ceil(box.y2)))
        scale = min(1.0, side / max(x2 - x1, y2 - y1))
        self.copy = (x1, y1, x2, y2, scale)
        return np.zeros((max(1, round((y2 - y1) * scale)), max(1, round((x2 - x1) * scale)), 3), np.uint8), scale, float(x1), float(y1)

    def detect(self, rgb: np.ndarray) -> list[FaceDetection]:
        x1, y1, x2, y2, s = self.copy
        return [FaceDetection(Box((f.box.x1 - x1) * s, (f.box.y1 - y1) * s, (f.box.x2 - x1) * s, (f.box.y2 - y1) * s),
                              (f.landmarks - np.array([x1, y1], np.float32)) * s, f.score)
                for f in self.faces if f.box.x1 >= x1 and f.box.y1 >= y1 and f.box.x2 <= x2 and f.box.y2 <= y2]
