"""Record types that cross module boundaries: boxes, detections, observations, tracks, analysed
files, models and hits, plus the typed names (vector kinds, tiers, media kinds) they carry."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np


class RedactStyle(StrEnum):
    """How `redact` hides a head: read from the user once, where the request comes in (the CLI's --style, the web's
    form, the redactor's entry: `actions.redact_frames.parse_style`), and passed down as it is."""

    BLUR = "blur"
    PIXELATE = "pixelate"
    BOX = "box"


class VectorKind(StrEnum):
    """What a stored vector encodes."""

    ID = "id"  # identity (face recognition, z_id)
    HEAD = "head"  # whole-head appearance (dual-CLS models' z_head)


class Tier(StrEnum):
    """How a hit relates to the query person, from calibrated thresholds."""

    SAME_LOOK = "same_look"  # same person, same appearance state (R1)
    OTHER_LOOK = "other_look"  # same person, another appearance state (R2)
    OTHER_PERSON = "other_person"  # below the identity threshold (R3)


class MediaKind(StrEnum):
    VIDEO = "video"
    IMAGE = "image"  # a still photo, indexed as a one-frame item


class HeadSource(StrEnum):
    """How a sighting's head was found."""

    FACE = "face"  # through its face (RetinaFace)
    KEYPOINTS = "keypoints"  # through person keypoints (MoveNet: ears, eyes, nose, shoulders), no face found
    FOLLOWED = "followed"  # followed from an earlier sighting of its track (template matching), no detection


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
    source: HeadSource = HeadSource.FACE  # KEYPOINTS: found by person keypoints, without a face


@dataclass
class Observation:
    """One sighting of a head in one sampled frame."""

    frame_index: int
    time: float
    head: Box
    face: FaceDetection | None
    embeddings: dict[VectorKind, np.ndarray] = field(default_factory=dict)
    crop_jpeg: bytes | None = None  # the head crop as JPEG, kept only when the analysis is asked to
    found_by: HeadSource = HeadSource.FACE  # how the head was found in this frame
    keypoint_score: float | None = None  # with found_by KEYPOINTS: the person's score x its head points' mean score
    follow_score: float | None = None  # with found_by FOLLOWED: how well the head region matched (normalised correlation)

    @property
    def face_visible(self) -> bool:
        return self.face is not None


JOIN_CUE_HEAD = "head"  # a track joined within its shot by its head vectors
JOIN_CUE_HEAD_BODY = "head+body"  # ... by its head vectors and the body below the head
JOIN_WORDS = {JOIN_CUE_HEAD: "same person, joined within the shot by head",
              JOIN_CUE_HEAD_BODY: "same person, joined within the shot by head and body"}


def join_words(cue: str | None) -> str | None:
    """A join's cue in words (None: not joined)."""
    return None if cue is None else JOIN_WORDS.get(cue, f"same person, joined within the shot by {cue}")


@dataclass(frozen=True)
class TrackJoin:
    """A track joined within its shot to an earlier track's person (`indexer.rejoin`)."""

    to: int  # the index, in its file's tracks, of the first track of the person in the shot
    cue: str  # what joined it: "head" or "head+body"
    score: float  # the join's score (the head cue, averaged with the body cue where there was one)


@dataclass
class HeadTrack:
    """A head followed through one shot."""

    shot_index: int
    observations: list[Observation] = field(default_factory=list)
    thumbnail: bytes | None = None  # JPEG of the best observation's head crop
    best_index: int = 0  # index into observations of the best (largest visible face) observation
    extends_to: float | None = None  # set by the analysis: the track lasts until the next sample within its shot
    join: TrackJoin | None = None  # set by the analysis: this track continues an earlier track's person in its shot

    @property
    def start(self) -> float:
        return self.observations[0].time

    @property
    def end(self) -> float:
        return self.observations[-1].time if self.extends_to is None else max(self.extends_to, self.observations[-1].time)

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
class FileStamp:
    """Which version of a file: its path, size, modification time and content fingerprint."""

    path: str
    size: int
    mtime: float
    fingerprint: str


@dataclass(frozen=True)
class SourceProbe:
    """One look at a video file, taken where a request enters (`indexer.decode.probe_source`) and passed down, so that
    the later steps (the analysis' decoder, the pass that writes the output, the output's duration) read it instead of
    opening the file again: its header checked, its first frame decoded."""

    path: str
    size: int  # bytes
    width: int  # the stored frames' size (before turning upright)
    height: int
    turns: int  # quarter turns anticlockwise that show it upright, as its first frame's display matrix says
    rotation: float  # ...in degrees, as the matrix says it (written again on the output)
    fps: float  # the stream's average rate (0: not said)
    frames: int  # as the container declares (0: not declared)
    first_time: float  # the first frame's presentation time on the file's timeline
    duration: float | None  # how long the file plays, as the container says (None: not said)


@dataclass
class FileResult:
    """One media file, decoded and analysed, not yet stored: what `Library.files.store` commits."""

    stamp: FileStamp
    kind: MediaKind
    width: int
    height: int
    fps: float
    duration: float
    frames_decoded: int
    frames_sampled: int
    decoder: str
    shots: list[Shot]
    tracks: list[HeadTrack]
    warning: str | None = None  # e.g. a damaged video indexed up to where it could be decoded
    stage_seconds: dict[str, float] = field(default_factory=dict)  # time per pipeline stage
    source_size: tuple[int, int] | None = None  # the file's own (width, height); boxes are in `width` x `height`
    dropped_tracks: list[tuple[HeadTrack, str]] = field(default_factory=list)  # tracks without face evidence, and why
    embedded: int = 0  # sightings embedded (a bounded, chosen subset of the face-visible ones)
    keypoint_frames: int = 0  # sampled frames the person-keypoint head finder ran on
    samples: list[tuple[int, float]] = field(default_factory=list)  # every sampled frame: (frame index, presentation time)

    @property
    def path(self) -> str:
        return self.stamp.path

    @property
    def sightings(self) -> int:
        return sum(len(t.observations) for t in self.tracks)


@dataclass(frozen=True)
class ModelInfo:
    """The model that made a set of vectors, as a library manifest and a thresholds file record it."""

    name: str
    version: str
    dim: int  # the identity vectors' width (and every kind's, unless `dims` says otherwise)
    kinds: tuple[VectorKind, ...] = (VectorKind.ID,)
    source: str = ""  # how to load it again: a registered name or an absolute path
    dims: dict[VectorKind, int] = field(default_factory=dict, compare=False)  # width per kind, where they differ

    def same_vectors_as(self, other: ModelInfo) -> bool:
        """Vectors of the two models can be compared (same weights, hence the same space)."""
        return (self.name, self.version) == (other.name, other.version)

    def dim_of(self, kind: VectorKind) -> int:
        """The width of one kind of vector."""
        return int(self.dims.get(VectorKind(kind), self.dim))

    def label(self) -> str:
        return f"{self.name} ({self.version})"

    def to_dict(self) -> dict:
        d = {"name": self.name, "version": self.version, "dim": self.dim, "kinds": [str(k) for k in self.kinds],
             "source": self.source or self.name}
        if any(self.dim_of(k) != self.dim for k in self.kinds):
            d["dims"] = {str(k): self.dim_of(k) for k in self.kinds}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ModelInfo:
        return cls(str(d["name"]), str(d["version"]), int(d.get("dim") or 0),
                   tuple(VectorKind(k) for k in d.get("kinds") or ("id",)), str(d.get("source") or d["name"]),
                   {VectorKind(k): int(v) for k, v in (d.get("dims") or {}).items()})


SCORE_DIGITS = 4  # scores are shown (text and JSON) to this many decimals


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
    tier: Tier | None = None  # None when the scores are uncalibrated
    head_score: float | None = None
    observation_id: int | None = None  # the sighting that matched best
    id_score: float | None = None  # the identity score (`score` is what the hit was ranked by; see headsearch.search.ranking)
    appearance_score: float | None = None  # the look of the head alone, where the query or the sighting shows no face
    matched_without_face: bool = False  # the person was recognised by the look of the head alone (no face evidence)
    yaw: float | None = None  # degrees the shown sighting's face is turned (signed; `headsearch.detection.pose`), where known
    joined_to: int | None = None  # shown as the same person as this hit's track: joined within the shot (`indexer.rejoin`)
    join_cue: str | None = None  # what joined it: "head" or "head+body" (`join_words`)

    @property
    def identity_score(self) -> float:
        return self.score if self.id_score is None else self.id_score

    def to_dict(self) -> dict:
        return {
            "video": self.video,
            "start": round(self.start, 3),
            "end": round(self.end, 3),
            "time": round(self.time, 3),
            "score": round(self.score, SCORE_DIGITS),
            "track_id": self.track_id,
            "thumbnail": self.thumbnail,
            "tier": None if self.tier is None else str(self.tier),
            "head_score": None if self.head_score is None else round(self.head_score, SCORE_DIGITS),
            "id_score": None if self.id_score is None and self.appearance_score is not None else round(self.identity_score, SCORE_DIGITS),
            "appearance_score": None if self.appearance_score is None else round(self.appearance_score, SCORE_DIGITS),
            "matched_without_face": self.matched_without_face,
            "yaw": None if self.yaw is None else round(self.yaw, 1),
            "joined_to": self.joined_to,
            "join_cue": self.join_cue,
            "joined": join_words(self.join_cue),
        }
