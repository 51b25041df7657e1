"""The embedder interface: head crops in, L2-normalised vectors out, of one or two kinds.

`id` vectors carry identity; `head` vectors (dual-CLS models only) carry whole-head appearance.
"""
from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np

from headsearch.detection.crops import HeadCrop
from schemas.records import ModelInfo, VectorKind

# ArcFace's five-point template for a 112x112 aligned face (insightface `arcface_dst`).
ARCFACE_TEMPLATE = np.array(
    [[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366], [41.5493, 92.3655], [70.7299, 92.2041]],
    dtype=np.float32,
)


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    x = np.asarray(x, dtype=np.float32)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(n, 1e-12)


def mean_vector(vectors) -> np.ndarray:
    """The renormalised mean of unit vectors."""
    return l2_normalise(np.mean(np.stack(list(vectors)).astype(np.float32), axis=0, keepdims=True))[0]


class Embedder(ABC):
    """Turns head crops into vectors of one or two kinds (`VectorKind.ID`, and `HEAD` for dual-CLS models)."""

    name: str
    version: str
    dim: int
    kinds: tuple[VectorKind, ...] = (VectorKind.ID,)
    source: str = ""  # how to load it again: a registered name or an absolute path
    # Whether the model sees whole heads (hair, contour, the back of a head) and so gives a
    # meaningful vector for a sighting without a visible face. Face-recognition models (dlib's
    # ResNet, ArcFace, SFace) do not: only sightings with a detected face are embedded by them.
    sees_whole_head: bool = False
    spec: object | None = None  # its `headsearch.models.registry.ModelSpec`, set by the registry when it loads the model

    @property
    def dims(self) -> dict[VectorKind, int]:
        """The width of each vector kind (one `dim` for all, unless a model says otherwise)."""
        return {k: self.dim for k in self.kinds}

    @abstractmethod
    def embed(self, crops: Sequence[HeadCrop]) -> dict[VectorKind, np.ndarray]:
        """Vectors per kind, each (len(crops), dim) float32, L2-normalised."""

    def describe(self) -> ModelInfo:
        """What a library manifest and a thresholds file record about this model."""
        return ModelInfo(self.name, self.version, self.dim, tuple(self.kinds), self.source or self.name, dict(self.dims))

    def empty(self) -> dict[VectorKind, np.ndarray]:
        """The result of embedding no crops."""
        return {k: np.zeros((0, d), np.float32) for k, d in self.dims.items()}


def similarity_transform(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The least-squares similarity transform (Umeyama) taking points `src` onto `dst`, as a 2x3 matrix
    (what insightface's and OpenCV's FaceRecognizerSF alignment compute)."""
    src, dst = np.asarray(src, np.float64), np.asarray(dst, np.float64)
    mu_s, mu_d = src.mean(0), dst.mean(0)
    s0, d0 = src - mu_s, dst - mu_d
    u, sv, vt = np.linalg.svd(d0.T @ s0 / len(src))
    d = np.eye(2)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        d[1, 1] = -1
    r = u @ d @ vt
    var = (s0 ** 2).sum() / len(src)
    c = (sv * np.diag(d)).sum() / max(var, 1e-12)
    t = mu_d - c * r @ mu_s
    return np.hstack([c * r, t[:, None]]).astype(np.float32)


def align_face(crop: HeadCrop, size: int = 112, exact: bool = False) -> np.ndarray:
    """Five-point similarity alignment to ArcFace's template; a face-box warp when no landmarks.

    `exact`: the least-squares similarity of all five points (`similarity_transform`) instead of
    OpenCV's robust LMEDS fit."""
    template = ARCFACE_TEMPLATE * (size / 112.0)
    if crop.landmarks is not None:
        if exact:
            m = similarity_transform(crop.landmarks, template)
        else:
            m, _ = cv2.estimateAffinePartial2D(crop.landmarks, template, method=cv2.LMEDS)
        if m is not None:
            return cv2.warpAffine(crop.image, m, (size, size), borderMode=cv2.BORDER_REPLICATE)
    # No landmarks: map the (estimated) face box onto the template's face region.
    fb = crop.face_box
    src = np.array([[fb.x1, fb.y1], [fb.x2, fb.y1], [fb.x1, fb.y2]], dtype=np.float32)
    dst = np.array([[0.12, 0.16], [0.88, 0.16], [0.12, 1.0]], dtype=np.float32) * size
    return cv2.warpAffine(crop.image, cv2.getAffineTransform(src, dst), (size, size), borderMode=cv2.BORDER_REPLICATE)


def file_digest(path: Path) -> str:
    """A model file's version: the first 16 hex digits of its SHA-256."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]
