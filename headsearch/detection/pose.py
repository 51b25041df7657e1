"""Head yaw (left-right turn) from RetinaFace's five landmarks, pure numpy.

In a head turned by yaw θ (weak perspective), the nose tip, which stands in front of the eyes and mouth corners,
moves off the face's midline by ``D sin θ``, while the eye and mouth widths shrink as ``W cos θ``. With

- the midline: the line through the midpoint of the eyes and the midpoint of the mouth corners,
- ``offset``: the nose's signed distance from that line (positive towards the image's right for an upright face),
- ``width``: the mean of the eye distance and the mouth width, both measured across the midline,

``tan θ = (W / D) · offset / width``, so

    yaw = atan2(YAW_K · offset, max(width, 0))      (degrees, positive: nose right of the midline in the image)

Roll drops out (everything is measured along and across the midline), pitch mostly does (it moves the nose along
the midline, not across it), and so does the face's size. The sign and "frontal / turned / profile" are what to read
from it; it is a few degrees noisy near frontal (landmark jitter).

``YAW_K`` = W / D = 1.63 was fitted by ``research/yaw_reference.py`` (least mean absolute error, each 15° band of the
reference weighted equally) against dlib's 68 landmarks + ``cv2.solvePnP`` on MediaPipe's canonical face model
(33 brow, nose, eye and mouth-corner points), on the faces of every 5th video frame and every photo of
``../shared/data`` whose dlib points agree with RetinaFace's: 1,722 faces, Pearson r 0.86, MAE 3.6°; 0-30°: 3.6°
(1,711 faces), 30-60°: 4.4° (11 faces); past 60° the reference trusts no face (dlib puts a frontal shape on 3/4 views
and profiles). Against MediaPipe's face mesh (1,747 faces): r 0.93, MAE 3.5°; 0-30°: 3.4°, 30-60°: 10.4° (46 faces,
mostly near-profiles that MediaPipe reads ~55°, where it saturates, and this estimate 60-80°). The canonical face's
own geometry gives W / D = 1.56.

Past ~50° the far eye and mouth corner go behind the nose and RetinaFace puts them near the visible cheek's edge:
``width`` collapses, and the estimate runs on towards ±90° (it saturates at exactly ±90° when ``width`` reaches 0).
On the full profiles of ``short_hamilton_clip.mp4`` (frames 20-81) it reads -71° to -90° (median -87°).
"""
from __future__ import annotations

import numpy as np

from schemas.records import FaceDetection

# W / D: the face's frontal width (mean of eye distance and mouth width) over the nose's depth in front of the
# eye-mouth midline; fitted by research/yaw_reference.py (see the module docstring).
YAW_K = 1.63

# How far a face is turned, in views: frontal under 30 degrees of |yaw|, three-quarter from 30 to under 60, profile from
# 60 (a band holds its lower bound, not its upper). Compare's views and bench's yaw bands are these bands.
YAW_VIEWS = (("frontal", 0.0, 30.0), ("three_quarter", 30.0, 60.0), ("profile", 60.0, 360.0))


def yaw_view(yaw: float) -> str:
    """The view of a face turned by `yaw` degrees (either way): `frontal`, `three_quarter` or `profile`."""
    turned = abs(yaw)
    return next((name for name, lo, hi in YAW_VIEWS if lo <= turned < hi), YAW_VIEWS[-1][0])


def yaw_features(landmarks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(offset, width, height)`` of landmarks ``(..., 5, 2)`` [left eye, right eye, nose, left mouth corner,
    right mouth corner] in pixels: the nose's signed distance from the eye-mouth midline (positive to the image's
    right), the mean of eye distance and mouth width across the midline, and the eye-to-mouth distance along it."""
    p = np.asarray(landmarks, dtype=np.float64)
    left_eye, right_eye, nose, left_mouth, right_mouth = (p[..., i, :] for i in range(5))
    eyes = (left_eye + right_eye) / 2
    mouth = (left_mouth + right_mouth) / 2
    down = mouth - eyes
    height = np.hypot(down[..., 0], down[..., 1])
    down = down / np.maximum(height, 1e-9)[..., None]
    right = np.stack([down[..., 1], -down[..., 0]], axis=-1)  # down (0, 1) -> right (1, 0)

    def across(v: np.ndarray) -> np.ndarray:
        return np.sum(v * right, axis=-1)

    offset = across(nose - (eyes + mouth) / 2)
    width = (across(right_eye - left_eye) + across(right_mouth - left_mouth)) / 2
    return offset, width, height


def yaws_from_landmarks(landmarks: np.ndarray, k: float = YAW_K) -> np.ndarray:
    """Yaw in degrees (-90..90, 0 frontal, positive: nose right of the midline) of landmarks ``(N, 5, 2)``."""
    offset, width, _ = yaw_features(landmarks)
    return np.degrees(np.arctan2(k * offset, np.maximum(width, 0.0)))


def yaw_from_landmarks(landmarks: np.ndarray) -> float:
    """Yaw in degrees (-90..90, 0 frontal, positive: nose right of the eye/mouth midline in the image) of one face's
    five RetinaFace landmarks ``(5, 2)``."""
    return float(yaws_from_landmarks(np.asarray(landmarks)[None])[0])


def face_yaw(face: FaceDetection | None) -> float | None:
    """Yaw in degrees of a detected face (None without one)."""
    return None if face is None else yaw_from_landmarks(face.landmarks)
