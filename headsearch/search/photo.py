"""The query photo: the one road from a photo to the heads to search with (the CLI, the web app and the
benchmarks all take it)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from headsearch.basics.errors import NoHeadFound
from headsearch.basics.images import decode_image_rgb, read_image_rgb
from headsearch.basics.settings import IndexSettings
from headsearch.detection.crops import HeadCrop, crop_head, whole_image_crop
from headsearch.detection.faces import FaceDetector, detect_heads
from headsearch.models.base import Embedder
from schemas.records import Box

CROP_PX = IndexSettings.crop_px  # query head crops are cut as the indexer cuts them


@dataclass(frozen=True)
class QueryHead:
    """One head of the query photo: its number (left to right), where it is, its crop."""

    number: int
    box: Box  # in the photo's pixels
    face_visible: bool
    crop: HeadCrop


def photo_pixels(photo: Path | bytes, name: str | Path | None = None) -> np.ndarray:
    """A query photo (a file, or an upload's bytes named `name`) as RGB pixels, within the media limits."""
    if isinstance(photo, bytes | bytearray):
        return decode_image_rgb(photo, name or "upload")
    return read_image_rgb(Path(photo))


def photo_heads(rgb: np.ndarray, name: Path | str, detector: FaceDetector, embedder: Embedder, all_heads: bool = False,
                whole_image: bool = False, crop_px: int = CROP_PX) -> list[QueryHead]:
    """The heads to search with: the largest one, every one (numbered left to right), or the whole
    photo as the head. A face-recognition model cannot search with a photo without a face.
    `name` names the photo in messages."""
    h, w = rgb.shape[:2]
    if whole_image:
        faces = detector.detect(rgb)
        face = max(faces, key=lambda f: f.box.area) if faces else None
        if face is None and not embedder.sees_whole_head:
            raise NoHeadFound(f"{name}: --whole-image with {embedder.name}, a face-recognition model: there is no face in this "
                              "photo for it to see (only a model that sees whole heads can search with the back of a head)")
        side = min(h, w)
        box = Box((w - side) / 2, (h - side) / 2, (w + side) / 2, (h + side) / 2)
        return [QueryHead(1, box, face is not None, whole_image_crop(rgb, face, crop_px))]
    heads = detect_heads(detector, rgb)
    if not heads:
        raise NoHeadFound(f"{name}: no head found (if the photo is already a head crop, e.g. the back of a head, use --whole-image)")
    if not all_heads:
        heads = heads[:1]
    heads = sorted(heads, key=lambda d: d.head.center[0])  # numbered as a reader sees them: left to right
    return [QueryHead(i, d.head, d.face is not None, crop_head(rgb, d.head, d.face, crop_px)) for i, d in enumerate(heads, 1)]
