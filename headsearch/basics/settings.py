"""Settings shared by indexing and querying, with their defaults in one place."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields
from pathlib import Path

from headsearch.basics.errors import HeadsearchError

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
    # Template-match score needed to follow a head between detections. 0.62 (was 0.55): on bench/sets/heads.csv the
    # followed sightings scoring under it were all wrong (7 of 7), those above it mostly right (15 of 19; in-sample).
    follow_min_score: float = 0.62
    keypoints_every_s: float = 2.0  # person keypoints look for heads without a face this often in a shot (0: never)
    keypoints_max_every_s: float = 8.0  # ...and, while they find none, ever less often, down to this
    embed_batch: int = 32
    embed_every_s: float = 1.0  # each track embeds its best sighting per this many seconds (0: every sighting)
    detect_coarse_side: int = 320  # while a shot's faces are large, detect on a copy this small (0: never)
    coarse_min_face_px: float = 64.0  # ...large: every face at least this tall at the detector's full scale
    full_detect_every: int = 4  # ...and every this many samples of a shot, detect at full scale again
    decode_ahead: int = 8  # frames decoded ahead of detection in a thread (0: decode in the same thread)
    thumbnail_px: int = 160
    crop_px: int = 256  # head crops are resized to this square size before embedding

    @classmethod
    def from_env(cls, **values) -> IndexSettings:
        """The defaults, overridden by $HEADSEARCH_<SETTING> where set (e.g. HEADSEARCH_EMBED_EVERY_S=0
        embeds every sighting, HEADSEARCH_DECODE_AHEAD=0 decodes in the detector's thread), then by `values`."""
        return cls(**{**_numbers_from_env(cls), **values})


@dataclass(frozen=True)
class MediaLimits:
    """What one input file may cost before it is refused with one line (a damaged or hostile file
    must not take the machine down). Each limit can be changed through the environment variable
    named by `env_name`, e.g. HEADSEARCH_MAX_IMAGE_PIXELS=120000000."""

    max_image_pixels: int = 50_000_000  # larger photos are decoded reduced (JPEG: 1/2, 1/4, 1/8) or refused
    max_image_bytes: int = 512 * 2**20  # a photo file is read whole: larger files are refused
    min_side: int = 16  # photos and video frames smaller than this (pixels) cannot hold a detectable head
    max_video_pixels: int = 40_000_000  # frame width x height (8K UHD is 35.4 million)
    max_video_duration_s: float = 48 * 3600.0  # a longer duration in a header is taken for damage
    max_video_frames: int = 10_000_000  # a larger frame count in a header is taken for damage
    max_upload_bytes: int = 20 * 2**20  # a query photo sent to the web app
    max_upload_pixels: int = 40_000_000  # ...and its width x height, checked before it is decoded
    max_upload_clip_bytes: int = 200 * 2**20  # a clip (with its reference photo) sent to the web app's Compare page

    @staticmethod
    def env_name(name: str) -> str:
        return env_name(name)

    @classmethod
    def from_env(cls) -> MediaLimits:
        """The defaults, overridden by $HEADSEARCH_<LIMIT> where set."""
        return cls(**_numbers_from_env(cls))


def env_name(setting: str) -> str:
    """The environment variable that overrides a setting or limit."""
    return f"HEADSEARCH_{setting.upper()}"


def _numbers_from_env(cls) -> dict:
    """The numeric fields of a settings class that the environment overrides, typed as their defaults."""
    values = {}
    for f in fields(cls):
        raw = os.environ.get(env_name(f.name))
        if raw:
            try:
                number = float(raw)
                if not math.isfinite(number):
                    raise ValueError(raw)
                values[f.name] = type(getattr(cls, f.name))(number)
            except (ValueError, OverflowError):
                raise HeadsearchError(f"${env_name(f.name)}: a finite number is expected, got {raw!r}") from None
    return values


# The in-memory vector indexes of one library may hold this share of the machine's memory together before
# the largest moves to on-disk segments (headsearch.vectors.index_cache): an eighth leaves room for the
# models, the decoder and other programs beside an index run or a web app.
VECTOR_MEMORY_SHARE = 1 / 8
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def machine_memory() -> int | None:
    """Bytes of memory this process may use: the machine's (MemTotal), or its cgroup's limit when lower; None when unknown."""
    total = None
    try:
        with open("/proc/meminfo") as f:
            total = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemTotal:"))
    except (OSError, StopIteration, ValueError):
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit.isdigit():
            total = min(total, int(limit)) if total else int(limit)
    except OSError:
        pass
    return total


def parse_bytes(text: str) -> int:
    """'2G' -> 2147483648, '512M', '1.5G', '0' (binary units K, M, G, T; a trailing B or iB is allowed)."""
    raw = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = raw[-1:] if raw[-1:] in _UNITS and raw[-1:] else ""
    try:
        value = float(raw[: len(raw) - len(unit)])
    except ValueError:
        raise HeadsearchError(f"{text!r} is not a size (e.g. 2G, 512M, 0)") from None
    if value < 0:
        raise HeadsearchError(f"{text!r} is not a size (e.g. 2G, 512M, 0)")
    return int(value * _UNITS[unit])


def vector_memory_budget() -> int:
    """Bytes the in-memory vector indexes of a library may hold together: $HEADSEARCH_VECTOR_MEMORY (e.g. 2G;
    0 puts every vector kind in on-disk segments), else VECTOR_MEMORY_SHARE of `machine_memory()` (4 GiB when unknown)."""
    raw = os.environ.get(env_name("vector_memory"), "").strip()
    if raw:
        try:
            return parse_bytes(raw)
        except HeadsearchError as e:
            raise HeadsearchError(f"${env_name('vector_memory')}: {e}") from None
    memory = machine_memory()
    return int(memory * VECTOR_MEMORY_SHARE) if memory else 4 * 2**30
