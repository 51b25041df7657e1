"""A fake embedder for unit tests whose model is incidental, registered through the real registry as any model is
(`register_model(ModelSpec(...))`): `--model fake-pixels` works in every command of the test process. Its vectors are
pixel statistics (the mean colour of each cell of a 4x4 grid, centred and unit length) of the face (identity) and of
the whole head crop (head): the same head gives the same vectors, different heads different ones, at no model's
cost. Imported by conftest; never shipped in the package."""
from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from headsearch.detection.crops import HeadCrop
from headsearch.models.base import Embedder, ModelSpec, l2_normalise
from headsearch.models.registry import register_model
from schemas.records import VectorKind

FAKE_MODEL = "fake-pixels"
GRID = 4  # cells a side
WIDTH = GRID * GRID * 3  # one mean per cell and colour channel

SPEC = ModelSpec(
    name=FAKE_MODEL, summary="tests only: the mean colours of a 4x4 grid over the face and the head crop",
    kinds=(VectorKind.ID, VectorKind.HEAD), dims=(WIDTH, WIDTH), sees_whole_head=True,
    input="the face box of the head crop (identity), the whole head crop (head)", licence="tests only")


def grid_colours(image: np.ndarray) -> np.ndarray:
    """The mean colour of each cell of a GRID x GRID grid over `image`, centred (a flat image gives zeros)."""
    cells = cv2.resize(image, (GRID, GRID), interpolation=cv2.INTER_AREA).astype(np.float32).ravel()
    return cells - cells.mean()


def face_pixels(crop: HeadCrop) -> np.ndarray:
    """The crop's pixels inside its face box (at least GRID pixels a side)."""
    side = crop.image.shape[0]
    box = crop.face_box
    x1, y1 = (min(max(int(v), 0), side - GRID) for v in (box.x1, box.y1))
    x2, y2 = max(int(box.x2), x1 + GRID), max(int(box.y2), y1 + GRID)
    return crop.image[y1:y2, x1:x2]


@register_model(SPEC)
class PixelStatisticsEmbedder(Embedder):
    """Identity vectors of the face's pixels (zero where no face is seen, as whole-head models give them), head
    vectors of the whole crop's."""

    version = "grid4-1"

    def embed(self, crops: Sequence[HeadCrop]) -> dict[VectorKind, np.ndarray]:
        if not crops:
            return self.empty()
        ids = np.stack([grid_colours(face_pixels(c)) if c.face_visible else np.zeros(WIDTH, np.float32) for c in crops])
        heads = np.stack([grid_colours(c.image) for c in crops])
        return {VectorKind.ID: l2_normalise(ids), VectorKind.HEAD: l2_normalise(heads)}
