"""Settings shared by indexing and querying, with their defaults in one place."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_LIBRARY = "headsearch-library"


def default_library_path() -> Path:
    """The library folder: $HEADSEARCH_LIBRARY, else ./headsearch-library."""
    return Path(os.environ.get("HEADSEARCH_LIBRARY", DEFAULT_LIBRARY))


@dataclass(frozen=True)
class IndexSettings:
    """How videos are sampled, detected, tracked and embedded."""

    sample_fps: float = 2.0  # frames per second kept for detection (first frame of each shot always kept)
    decode_max_side: int = 1280  # frames are decoded no larger than this (long side)
    detect_max_side: int = 640  # the detector sees a copy scaled to this long side
    detect_min_side: int = 480  # ...and small frames are upscaled to at least this long side
    face_score_threshold: float = 0.7
    min_face_px: float = 16.0  # faces smaller than this (in decoded pixels) are ignored
    track_iou: float = 0.3  # head boxes of one track overlap at least this much between samples
    track_max_gap_s: float = 3.0  # a track follows its head region this long without a face
    follow_min_score: float = 0.55  # template-match score needed to follow a head without a face
    embed_batch: int = 32
    thumbnail_px: int = 160
    crop_px: int = 256  # head crops are resized to this square size before embedding
