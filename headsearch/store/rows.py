"""The rows the library's readers return: frozen dataclasses, one per shape.

A table's own row carries its columns under their names (`VideoRow`, `ShotRow`, `SightingRow` for
`observations`, `PersonRow`, `MembershipRow` for `person_tracks`, `FeedbackRow` for `person_feedback`),
so `dataclasses.asdict(row)` gives what a page's JSON showed when rows were dicts. Other rows are a
read's own shape (a track with its file, an indexed file with its track count, a sighting placed in
its file's own pixels). Pages and the JSON API turn rows into dicts with `dataclasses.asdict`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from schemas.records import Box, MediaKind, VectorKind


# ----- files -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VideoRow:
    """An indexed file (a video, or a photo indexed as a one-frame item): its `videos` row."""

    id: int
    path: str
    kind: str  # "video" or "image"
    fingerprint: str
    size: int
    mtime: float
    duration: float
    fps: float
    width: int  # the decoded frames' size, which the boxes are in
    height: int
    frames_decoded: int
    frames_sampled: int
    decoder: str
    indexed_at: float
    source_width: int | None  # the file's own frame size (None in rows of format 1-3 not yet probed)
    source_height: int | None
    samples: bytes | None = None  # the frames the analysis sampled (`sample_bytes`; None: indexed before format 11)

    @property
    def sampled_frames(self) -> list[int] | None:
        """The indexes of the frames the analysis sampled, rising (None where the library did not record them)."""
        return None if self.samples is None else np.frombuffer(self.samples, "<i4").tolist()


def sample_bytes(frames: Sequence[int]) -> bytes | None:
    """A video's sampled frames as the `videos.samples` column keeps them: little-endian int32, rising (None: none
    known). Some 4 bytes a sample: 58 KB for two hours at two a second, beside the vectors of its tracks."""
    return np.array(sorted(frames), "<i4").tobytes() if frames else None


@dataclass(frozen=True)
class ListedFile:
    """An indexed file with its track count, as `headsearch list` and the files page show it."""

    id: int
    path: str
    kind: str
    duration: float
    fps: float
    width: int
    height: int
    size: int
    mtime: float
    fingerprint: str
    decoder: str
    indexed_at: float
    tracks: int
    first_time: float = 0.0  # where its first frame lies on the file's timeline

    @property
    def player_duration(self) -> float:
        """How long a player says the file is: to its end on the file's timeline (a stream that starts at 0.852 s and
        plays 9.176 s is 10.028 s long in a player)."""
        return self.first_time + self.duration


@dataclass(frozen=True)
class StoredFile:
    """Which version of a file the library holds (what the indexer compares with the disk)."""

    id: int
    path: str
    fingerprint: str
    size: int
    mtime: float


@dataclass(frozen=True)
class FailedFile:
    """A file that could not be indexed, and which version of it failed: its `failed_files` row."""

    path: str
    fingerprint: str
    size: int
    mtime: float
    error: str
    failed_at: float


# ----- shots, tracks, sightings --------------------------------------------------------------------
@dataclass(frozen=True)
class ShotRow:
    """A shot of a file: its `shots` row."""

    id: int
    video_id: int
    shot_index: int
    start_frame: int
    end_frame: int
    start_time: float
    end_time: float


@dataclass(frozen=True)
class TrackRow:
    """A head track: its `tracks` row with its file's path and kind."""

    id: int
    video_id: int
    shot_id: int
    start_time: float
    end_time: float
    best_time: float
    n_observations: int
    face_visible_share: float
    thumbnail: str  # path relative to the library folder
    joined_to: int | None  # joined within its shot to this track's person (`indexer.rejoin`); None: not joined
    join_cue: str | None  # what joined it: "head" or "head+body"
    join_score: float | None
    video: str  # the file's path
    video_kind: str  # "video" or "image"


@dataclass(frozen=True)
class SightingRow:
    """One head seen at one moment of a track: its `observations` row (box in decoded pixels)."""

    id: int
    track_id: int
    video_id: int
    frame_index: int
    time: float
    x1: float
    y1: float
    x2: float
    y2: float
    face_visible: bool
    face_score: float | None
    found_by: str | None  # "face", "keypoints" or "followed" (HeadSource)
    yaw: float | None = None  # degrees the face is turned (signed; `headsearch.detection.pose`), where a face was seen (format 7)

    @property
    def head_box(self) -> Box:
        return Box(self.x1, self.y1, self.x2, self.y2)


@dataclass(frozen=True)
class TrackSummary:
    """A track as `headsearch list --tracks` shows it: where and when, its sightings, how many showed a
    face, how its heads were found (sightings per HeadSource) and how it started."""

    id: int
    video: str
    shot_id: int
    start: float
    end: float
    sightings: int
    faces: int  # sightings with a visible face
    found_by: dict[str, int]  # HeadSource -> sightings
    started_by: str  # how its first sighting was found

    def to_dict(self) -> dict:
        return {"id": self.id, "video": self.video, "shot_id": self.shot_id, "start": round(self.start, 3),
                "end": round(self.end, 3), "sightings": self.sightings, "faces": self.faces,
                "found_by": dict(self.found_by), "started_by": self.started_by}


@dataclass(frozen=True)
class Sighting:
    """A sighting placed in its file, as a hit's picture needs it: the file and the version indexed,
    the moment, the box in the file's own pixels, the shot."""

    observation_id: int
    path: str
    time: float
    kind: MediaKind
    box: tuple[float, float, float, float]  # in the file's own pixels
    face_visible: bool
    found_by: str | None  # how the head was found: "face", "keypoints" or "followed"
    shot_index: int
    shot_start: float
    shot_end: float
    frame_size: tuple[int, int]  # (width, height) the boxes were stored in
    source_size: tuple[int, int]  # the file's own (width, height)
    size: int  # the indexed version of the file
    mtime: float
    fingerprint: str


@dataclass(frozen=True)
class HitRow:
    """A track and one of its sightings, as a search hit shows them."""

    path: str
    start: float
    end: float
    time: float
    thumbnail: str  # path relative to the library folder
    yaw: float | None = None  # degrees the sighting's face is turned, where it shows one


@dataclass(frozen=True)
class JoinedPiece:
    """A track joined within its shot to the same person as an asked track (`indexer.rejoin`), as a hit shows it."""

    asked: int  # the asked track
    track_id: int
    path: str
    start: float
    end: float
    time: float  # its best sighting's time
    thumbnail: str
    observation_id: int  # its best sighting
    cue: str  # what joined the two: "head" or "head+body"


@dataclass(frozen=True)
class VectorRow:
    """A stored vector: its `vectors` row (`id` is its id in the FAISS index of its kind)."""

    id: int
    kind: str
    observation_id: int
    track_id: int
    video_id: int
    embedding: bytes  # float32, little-endian


# ----- people ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PersonRow:
    """A person: its `people` row."""

    id: int
    name: str | None
    hidden: bool
    centroid: bytes  # float32 mean of its tracks' unit identity vectors (not renormalised)
    weight: float  # how many tracks that mean was taken over
    created_at: float


@dataclass(frozen=True)
class Place:
    """Where a track was: its file, the time and head box of its best sighting (to find it again
    after its file is re-indexed under new ids)."""

    video_path: str
    time: float
    x1: float
    y1: float
    x2: float
    y2: float

    @property
    def head_box(self) -> Box:
        return Box(self.x1, self.y1, self.x2, self.y2)


class _AtPlace:
    """A row that says where its track was (fields video_path, time, x1, y1, x2, y2): `place` is that place."""

    @property
    def place(self) -> Place:
        return Place(self.video_path, self.time, self.x1, self.y1, self.x2, self.y2)


@dataclass(frozen=True)
class MembershipRow(_AtPlace):
    """A track in a person, with where the track was: its `person_tracks` row."""

    track_id: int
    person_id: int
    video_path: str
    time: float
    x1: float
    y1: float
    x2: float
    y2: float


@dataclass(frozen=True)
class FeedbackRow(_AtPlace):
    """A user's verdict that a track is ("is") or is not ("not") a person, with where the track
    was: its `person_feedback` row."""

    id: int
    person_id: int
    verdict: str
    track_id: int
    video_path: str
    time: float
    x1: float
    y1: float
    x2: float
    y2: float
    created_at: float


@dataclass(frozen=True)
class TrackQualityRow:
    """How good a track is for grouping into persons, as measured: its `track_quality` row."""

    track_id: int
    face_px: float  # height of its largest face in decoded pixels (0: no face)
    sharpness: float  # variance of the Laplacian of the thumbnail's middle
    face_score: float  # the face detector's best score (0: no face)
    faces: int  # sightings with a face
    photo: bool  # a photo's track (one sighting by nature)


@dataclass(frozen=True)
class TrackQualityInput:
    """What a track's quality is measured from: its sightings counted, its largest face, its thumbnail."""

    track_id: int
    kind: str  # "video" or "image"
    faces: int
    face_score: float
    head_height: float  # the largest head box of a sighting with a face, decoded pixels
    thumbnail: str  # relative to the library folder


@dataclass(frozen=True)
class PersonPairRow:
    """A user's answer that two persons are not the same: its `person_pairs` row."""

    id: int
    person_a: int
    person_b: int
    verdict: str  # "different"
    created_at: float


@dataclass(frozen=True)
class PersonPhotoRow:
    """A reference photo of a person: its `person_photos` row."""

    id: int
    person_id: int
    path: str
    fingerprint: str
    crop: str  # the head crop, relative to the library folder
    model: str  # "name version" of the model that made the vectors
    face_visible: bool
    id_vector: bytes | None  # float32, unit
    head_vector: bytes | None
    added_at: float


@dataclass(frozen=True)
class ForgottenRow:
    """A person forgotten, as the library records it: its `forgotten_people` row (counts, never vectors or pictures)."""

    id: int
    person_id: int
    name: str | None
    forgotten_at: float
    tracks: int
    sightings: int
    vectors: int
    thumbnails: int
    pictures: int
    reference_photos: int
    corrections: int  # verdicts on tracks and answers about pairs that named the person or their tracks


@dataclass(frozen=True)
class ForgottenVideoRow:
    """A file whose analysis lost tracks to a forgetting: its `forgotten_videos` row."""

    forgotten_id: int
    video_id: int
    fingerprint: str


@dataclass(frozen=True)
class ForgetCheckRow:
    """What a forgetting's search for the person's leftovers found: its `forget_checks` row ("" found: nothing)."""

    forgotten_id: int
    checked_at: float
    files: int
    bytes: int
    needles: int
    found: str


# ----- the library as a whole ----------------------------------------------------------------------
@dataclass(frozen=True)
class LibraryStats:
    """Counts and totals of what a library holds (`headsearch stats`)."""

    library: str
    model: dict  # ModelInfo.to_dict()
    videos: int  # files, photos included
    shots: int
    tracks: int
    observations: int
    vectors: int
    images: int
    video_seconds: float
    generation: int
    bytes: int


@dataclass(frozen=True)
class TrackVectors:
    """A track's stored vectors: per kind, (sighting ids, whether each sighting showed a face, the vectors as rows)."""

    kinds: dict[VectorKind, tuple[np.ndarray, np.ndarray, np.ndarray]]
