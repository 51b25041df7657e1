"""Head crops: the square head region of a frame, resized, with the face box carried along."""
from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from schemas.records import Box, FaceDetection


@dataclass(frozen=True)
class HeadCrop:
    """A square RGB head crop and where the face lies inside it (estimated when not visible)."""

    image: np.ndarray  # (S, S, 3) uint8 RGB
    face_box: Box  # in crop pixels
    landmarks: np.ndarray | None  # (5, 2) in crop pixels when a face was detected
    face_visible: bool
    inside: Box | None = None  # the part of the crop that lies inside the frame (crop pixels); None: all of it


# Where the face sits in a head box when none was detected (inverse of head_box_from_face, frontal).
_DEFAULT_FACE_IN_HEAD = Box(0.21, 0.31, 0.79, 0.88)


def _face_in_crop(head: Box, face: FaceDetection | None, size: int) -> tuple[Box, np.ndarray | None]:
    """Where the face lies in the size x size crop of `head` (estimated when none was detected)."""
    if face is not None:
        scale = size / max(head.width, head.height, 2.0)
        fb = face.box.shifted(-head.x1, -head.y1).scaled(scale)
        landmarks = (face.landmarks - np.array([head.x1, head.y1], dtype=np.float32)) * scale
        return fb, landmarks.astype(np.float32)
    d = _DEFAULT_FACE_IN_HEAD
    return Box(d.x1 * size, d.y1 * size, d.x2 * size, d.y2 * size), None


def crop_head(rgb: np.ndarray, head: Box, face: FaceDetection | None, size: int = 256) -> HeadCrop:
    """Cut the head box out of a frame (edges replicated where it leaves the frame) at size x size."""
    side = max(head.width, head.height, 2.0)
    scale = size / side
    # Affine map frame -> crop.
    m = np.array([[scale, 0, -head.x1 * scale], [0, scale, -head.y1 * scale]], dtype=np.float32)
    interp = cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR
    image = cv2.warpAffine(rgb, m, (size, size), flags=interp, borderMode=cv2.BORDER_REPLICATE)
    crop = crop_from_image(image, head, face)
    h, w = rgb.shape[:2]
    inside = Box(max(0.0, -head.x1 * scale), max(0.0, -head.y1 * scale), min(float(size), (w - head.x1) * scale),
                 min(float(size), (h - head.y1) * scale))
    if inside.x1 > 0.5 or inside.y1 > 0.5 or inside.x2 < size - 0.5 or inside.y2 < size - 0.5:
        crop = HeadCrop(crop.image, crop.face_box, crop.landmarks, crop.face_visible, inside)
    return crop


OUTSIDE_GREY = 48  # what a picture shows where a head crop leaves the frame


def picture_of(crop: HeadCrop) -> np.ndarray:
    """The crop as people see it: where it leaves the frame, flat grey instead of the smeared border
    pixels that the embedder is given."""
    if crop.inside is None:
        return crop.image
    image = np.full_like(crop.image, OUTSIDE_GREY)
    b = crop.inside
    x1, y1, x2, y2 = (int(round(v)) for v in (b.x1, b.y1, b.x2, b.y2))
    if x2 > x1 and y2 > y1:
        image[y1:y2, x1:x2] = crop.image[y1:y2, x1:x2]
    return image


def crop_from_image(image: np.ndarray, head: Box, face: FaceDetection | None) -> HeadCrop:
    """A head crop from an already cut square image of the `head` box (e.g. a stored crop JPEG)."""
    face_box, landmarks = _face_in_crop(head, face, image.shape[0])
    return HeadCrop(image=image, face_box=face_box, landmarks=landmarks, face_visible=face is not None)


def whole_image_crop(rgb: np.ndarray, face: FaceDetection | None, size: int = 256) -> HeadCrop:
    """Treat a whole photo as the head crop (centre-square), e.g. the back of a head."""
    h, w = rgb.shape[:2]
    side = min(h, w)
    box = Box((w - side) / 2, (h - side) / 2, (w + side) / 2, (h + side) / 2)
    return crop_head(rgb, box, face, size)
