"""Record types that cross module boundaries: boxes, detections, observations, tracks, hits."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Box:
    """An axis-aligned box in pixel coordinates (x1, y1) top-left, (x2, y2) bottom-right."""

    x1: float
    y1: float
    x2: float
    y2: float

    @property
    def width(self) -> float:
        return max(0.0, self.x2 - self.x1)

    @property
    def height(self) -> float:
        return max(0.0, self.y2 - self.y1)

    @property
    def area(self) -> float:
        return self.width * self.height

    @property
    def center(self) -> tuple[float, float]:
        return ((self.x1 + self.x2) / 2, (self.y1 + self.y2) / 2)

    def iou(self, other: Box) -> float:
        """Intersection over union with another box."""
        ix = max(0.0, min(self.x2, other.x2) - max(self.x1, other.x1))
        iy = max(0.0, min(self.y2, other.y2) - max(self.y1, other.y1))
        inter = ix * iy
        union = self.area + other.area - inter
        return inter / union if union > 0 else 0.0

    def scaled(self, factor: float) -> Box:
        """The same box in an image scaled by `factor`."""
        return Box(self.x1 * factor, self.y1 * factor, self.x2 * factor, self.y2 * factor)

    def shifted(self, dx: float, dy: float) -> Box:
        return Box(self.x1 + dx, self.y1 + dy, self.x2 + dx, self.y2 + dy)

    def as_tuple(self) -> tuple[float, float, float, float]:
        return (self.x1, self.y1, self.x2, self.y2)


@dataclass(frozen=True)
class FaceDetection:
    """A detected face: its box, five landmarks (eyes, nose, mouth corners) and confidence."""

    box: Box
    landmarks: np.ndarray  # (5, 2) float32, image coordinates
    score: float


@dataclass(frozen=True)
class HeadDetection:
    """A whole-head box, with the face that produced it when one is visible."""

    head: Box
    face: FaceDetection | None
    score: float


@dataclass
class Observation:
    """One sighting of a head in one sampled frame."""

    frame_index: int
    time: float
    head: Box
    face: FaceDetection | None
    embeddings: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def face_visible(self) -> bool:
        return self.face is not None


@dataclass
class HeadTrack:
    """A head followed through one shot."""

    shot_index: int
    observations: list[Observation] = field(default_factory=list)
    thumbnail: bytes | None = None  # JPEG of the best observation's head crop
    best_index: int = 0  # index into observations of the best (largest visible face) observation

    @property
    def start(self) -> float:
        return self.observations[0].time

    @property
    def end(self) -> float:
        return self.observations[-1].time

    @property
    def face_visible_share(self) -> float:
        return sum(o.face_visible for o in self.observations) / max(1, len(self.observations))


@dataclass(frozen=True)
class Shot:
    """A run of frames between two cuts."""

    index: int
    start_frame: int
    end_frame: int  # inclusive
    start_time: float
    end_time: float


@dataclass(frozen=True)
class SearchHit:
    """One distinct track returned by a query."""

    track_id: int
    video: str
    start: float
    end: float
    time: float
    score: float
    thumbnail: str
    tier: str | None = None  # "same_look", "other_look", "other_person", or None when uncalibrated
    head_score: float | None = None

    def to_dict(self) -> dict:
        return {
            "video": self.video,
            "start": round(self.start, 3),
            "end": round(self.end, 3),
            "time": round(self.time, 3),
            "score": round(self.score, 4),
            "track_id": self.track_id,
            "thumbnail": self.thumbnail,
            "tier": self.tier,
            "head_score": None if self.head_score is None else round(self.head_score, 4),
        }
