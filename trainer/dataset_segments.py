"""Step 3 of the dataset builder (`trainer.dataset`): the segment filter. A track is a *segment* when it has at least
``min_frames`` observations, at least ``min_visible`` of them with a visible face and at least ``min_invisible``
without (paper: 5, 0.2, 0.1). Its *best-face* frame is the face-visible observation whose face box covers the
largest share of the head box, and that share must reach ``best_face_ratio``.

The paper asks for a face covering more than half of the head box; our head boxes are squares of 1.75x the face
height (``headsearch.detection.faces.head_box_from_face``), so the share is set by the face box's aspect ratio
alone: at most 1/(1.75^2 * 1.15) = 0.284, about 0.25-0.28 for a frontal face, 0.18-0.22 for a strong profile
(narrow face box). ``DEFAULT_BEST_FACE_RATIO`` = 0.22 keeps near-frontal best faces, the paper's intent, in our
geometry. A labelled photo is a segment of one sample.

The filter works on dict observations from the parts, or on schemas.records objects.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainer.dataset_inputs import LabelPhoto
from trainer.dataset_parts import Part
from trainer.dataset_summary import BuildSummary

DEFAULT_FPS = 4.0
DEFAULT_MIN_FRAMES = 5
DEFAULT_MIN_VISIBLE = 0.2
DEFAULT_MIN_INVISIBLE = 0.1
DEFAULT_BEST_FACE_RATIO = 0.22


@dataclass(frozen=True)
class DatasetOptions:
    """What the segment filter keeps (step 3), the frames it sees, and where clustering merges (step 4)."""

    sample_fps: float = DEFAULT_FPS
    min_frames: int = DEFAULT_MIN_FRAMES
    min_visible: float = DEFAULT_MIN_VISIBLE
    min_invisible: float = DEFAULT_MIN_INVISIBLE
    best_face_ratio: float = DEFAULT_BEST_FACE_RATIO
    cluster_threshold: float | None = None  # None: the teacher's default


def _face_box(o) -> Sequence[float] | None:
    if isinstance(o, dict):
        return o["face"]
    return None if o.face is None else o.face.box.as_tuple()


def _head_box(o) -> Sequence[float]:
    return o["head"] if isinstance(o, dict) else o.head.as_tuple()


def _area(b: Sequence[float]) -> float:
    return max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])


def face_ratio(o) -> float:
    """Face-box area over head-box area (0 when no face)."""
    fb = _face_box(o)
    if fb is None:
        return 0.0
    return _area(fb) / max(_area(_head_box(o)), 1e-9)


def select_segment(observations: Sequence, opts: DatasetOptions) -> tuple[int | None, str | None]:
    """(index of the best-face observation, None) for a segment, or (None, rejection reason)."""
    n = len(observations)
    if n < opts.min_frames or n == 0:
        return None, "too_few_frames"
    visible = [_face_box(o) is not None for o in observations]
    if sum(visible) < opts.min_visible * n - 1e-9:
        return None, "too_few_face_visible"
    if (n - sum(visible)) < opts.min_invisible * n - 1e-9:
        return None, "too_few_face_invisible"
    best, best_ratio = None, -1.0
    for i, o in enumerate(observations):
        if visible[i]:
            r = face_ratio(o)
            if r > best_ratio:
                best, best_ratio = i, r
    if best is None or best_ratio < opts.best_face_ratio:
        return None, "no_best_face"
    return best, None


@dataclass
class Segment:
    part: Part
    video: str
    source: str  # "video" / "photo"
    track: int
    shot: int
    obs: list[dict]
    best: int
    identity: str = ""
    state: str = ""

    @property
    def name(self) -> str:
        return f"{self.part.key}/t{self.track}"

    @property
    def frames(self) -> set[int]:
        return {o["frame"] for o in self.obs}

    @property
    def best_teacher_vector(self) -> np.ndarray:
        return self.part.teacher[self.obs[self.best]["teacher_row"]]


def video_segments(videos: Sequence[Path], parts: dict[Path, Part], opts: DatasetOptions, summary: BuildSummary) -> list[Segment]:
    """Step 3: the video tracks that pass the segment filter, with their best-face observation."""
    segments: list[Segment] = []
    for path in videos:
        part = parts.get(path)
        if part is None:
            continue
        summary.shots += len(part.meta["shots"])
        summary.tracks += len(part.tracks)
        summary.video_seconds += part.meta["duration"] or 0.0
        for t, tr in enumerate(part.tracks):
            best, reason = select_segment(tr["obs"], opts)
            if reason is not None:
                summary.segments_rejected[reason] += 1
                continue
            segments.append(Segment(part, str(path), "video", t, tr["shot"], tr["obs"], best))
    summary.segments_kept = len(segments)
    return segments


def photo_segments(photos: Sequence[LabelPhoto], parts: dict[Path, Part], summary: BuildSummary) -> list[Segment]:
    """One single-sample segment per analysed labelled photo, with its labelled identity and state."""
    segments = []
    for ph in photos:
        part = parts.get(ph.path)
        if part is None:
            continue
        segments.append(Segment(part, str(ph.path), "photo", 0, 0, part.tracks[0]["obs"], 0, ph.identity, ph.state))
    summary.photos = len(segments)
    summary.label_identities = len({s.identity for s in segments})
    return segments
