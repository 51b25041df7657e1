"""`sface+hsv`: the colour-histogram baseline fused with the SFace teacher, the bar a head model has to clear.

The look changes in our labelled photos are mostly hair colour, so a colour histogram of the head crop tells
same look from other look about as well as ImageNet features do. This model's `id` vectors are SFace's; its
`head` vectors concatenate sqrt(w) * SFace and sqrt(1 - w) * the square root of a normalised HSV histogram of
the head (inside an ellipse that leaves out most of the background), so their cosine is
w * cos_sface + (1 - w) * Bhattacharyya coefficient of the two histograms.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np

from headsearch.detection.crops import HeadCrop
from headsearch.models.base import Embedder, ModelSpec
from headsearch.models.registry import register_model, register_path_loader
from headsearch.models.sface import SPEC as SFACE_SPEC
from headsearch.models.sface import SFaceEmbedder
from schemas.records import VectorKind

HSV_BINS = (16, 4, 4)  # hue, saturation, value
# Weight of SFace in the fused head score, chosen on the 294 training photos (shared/data LABELS.csv without the
# held-out face-api.js and openface sources, plus more/LABELS.csv) by head-protocol AUC:
#   w       1.0    0.9    0.8    0.7    0.6    0.5    0.4
#   AUC     0.9879 0.9882 0.9881 0.9867 0.9808 0.9622 0.9241
#   hier.   0.796  0.793  0.780  0.754  0.714  0.653  0.571
# Other weights: `--model sface+hsv@0.5` (any w in [0, 1]).
SFACE_WEIGHT = 0.9
HSV_DIM = int(np.prod(HSV_BINS))
WIDTH = SFACE_SPEC.dims[0] + HSV_DIM  # both kinds: SFace's vector beside the histogram (ID: zero-padded)
_masks: dict[int, np.ndarray] = {}


def head_mask(size: int) -> np.ndarray:
    """An elliptical uint8 mask over the middle of a square head crop (the head, little background)."""
    if size not in _masks:
        mask = np.zeros((size, size), np.uint8)
        cv2.ellipse(mask, (size // 2, size // 2), (int(0.36 * size), int(0.44 * size)), 0, 0, 360, 255, -1)
        _masks[size] = mask
    return _masks[size]


def hsv_vector(rgb: np.ndarray) -> np.ndarray:
    """The square root of the normalised HSV histogram of the head inside `head_mask` (a unit vector)."""
    small = cv2.resize(rgb, (64, 64), interpolation=cv2.INTER_AREA) if rgb.shape[0] != 64 else rgb
    hsv = cv2.cvtColor(small, cv2.COLOR_RGB2HSV)
    hist = cv2.calcHist([hsv], [0, 1, 2], head_mask(64), list(HSV_BINS), [0, 180, 0, 256, 0, 256]).ravel()
    return np.sqrt(hist / max(float(hist.sum()), 1e-12)).astype(np.float32)


SPEC = ModelSpec(
    name="sface+hsv", summary="SFace identity vectors; head vectors fusing SFace with an HSV histogram of the head (baseline)",
    kinds=(VectorKind.ID, VectorKind.HEAD), dims=(WIDTH, WIDTH),
    input="SFace's aligned face; the head crop's HSV histogram (16x4x4) inside the head ellipse",
    licence="Apache-2.0 (SFace)", cluster_threshold=0.45)


@register_model(SPEC)
class SFaceHsvEmbedder(Embedder):
    """SFace identity vectors; head vectors fusing SFace with the head's colour histogram (see the module)."""

    def __init__(self, spec: ModelSpec = SPEC, weight: float = SFACE_WEIGHT):
        super().__init__(spec)
        self.sface = SFaceEmbedder()
        self.weight = weight
        self.version = f"{self.sface.version}+hsv{'x'.join(map(str, HSV_BINS))}w{weight:g}"

    def embed(self, crops: Sequence[HeadCrop]) -> dict[VectorKind, np.ndarray]:
        if not crops:
            return self.empty()
        ids = self.sface.embed(crops)[VectorKind.ID]
        hists = np.stack([hsv_vector(c.image) for c in crops])
        head = np.concatenate([np.sqrt(self.weight) * ids, np.sqrt(1.0 - self.weight) * hists], axis=1)
        # ID vectors are zero-padded to the library's single vector width (`dim`); the padding never changes a cosine.
        ids = np.concatenate([ids, np.zeros((len(ids), self.dim - ids.shape[1]), np.float32)], axis=1)
        return {VectorKind.ID: ids, VectorKind.HEAD: head.astype(np.float32)}


def _weighted(path: Path) -> float | None:
    m = re.fullmatch(r"sface\+hsv@([0-9]*\.?[0-9]+)", str(path))
    return float(m.group(1)) if m and 0.0 <= float(m.group(1)) <= 1.0 else None


@register_path_loader(replace(SPEC, name="sface+hsv@W", summary="sface+hsv@W (SFace weight W in [0, 1])", dims=()),
                      lambda p: _weighted(p) is not None)
def sface_hsv_weighted(family: ModelSpec, path: Path) -> Embedder:
    """`sface+hsv@W`: named by its weight (the default weight's vectors are `sface+hsv`'s, and named so)."""
    weight = _weighted(path)
    return SFaceHsvEmbedder(replace(family, name=SPEC.name if weight == SFACE_WEIGHT else f"sface+hsv@{weight:g}", dims=SPEC.dims), weight)
