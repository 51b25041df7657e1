"""Which tracks are good enough to join a person: the quality gates, measured once per track.

A track joins a person only when its identity vector can be trusted: a face large enough, sharp and bright enough
to show detail, that the detector is sure of, and, in a video, seen more than once. The others wait in the inbox
(`headsearch people inbox`, the web app's inbox page), where a user can still put them in a person by hand.

The defaults were measured on all of ../shared/data (397 files, 469 tracks; both LABELS files name 383 of them) with
`python research/people_quality_report.py LIBRARY LABELS.csv more/LABELS.csv` (2026-12-01, sface+lite0, identity
threshold 0.387): 73 pairs of different people score above that threshold (4 of them seen in one frame). Each gate
sits between the values of the tracks in those wrong pairs and the labelled tracks (clear faces, to be kept):
face height: wrong pairs from 34 px, labelled >= 90 px; sharpness: wrong pairs 1.8, 1.8, 2.1, 15.7, 24, labelled
>= 47; detector score: wrong pairs 0.797, 0.799, labelled >= 0.825. Together they hold back 26 tracks (ending 4 of the
wrong pairs, and one labelled track: a video track with a single face sighting at score 0.83) and no genuine pair
but that one's. Most wrong pairs are between clear photos of look-alikes: no gate can see those; the grouping's
average linkage and a person's two-track minimum keep them apart (bench people: precision 1.000).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from headsearch.detection.faces import HEAD_SIDE_PER_FACE_HEIGHT
from headsearch.store.rows import TrackQualityInput, TrackQualityRow

log = logging.getLogger(__name__)

MIN_TRACKS = 2  # a person is listed once it has this many tracks (or a name, or reference photos)

# The gates' reasons, as the inbox shows them.
NO_FACE = "no_face"
SMALL_FACE = "small_face"
BLURRED = "blurred"
UNSURE_FACE = "unsure_face"
GLIMPSE = "glimpse"
REASONS = {
    NO_FACE: "no face (found by keypoints or followed only)",
    SMALL_FACE: "face too small",
    BLURRED: "blurred or dark",
    UNSURE_FACE: "the detector is unsure it is a face",
    GLIMPSE: "a glimpse (one face in the video)",
}


@dataclass(frozen=True)
class QualityGates:
    """The least a track must show to join a person (measured on ../shared/data; see the module's docstring)."""

    min_face_px: float = 40.0  # face height in decoded pixels (labelled tracks: >= 90; wrong pairs: from 34)
    min_sharpness: float = 25.0  # variance of the Laplacian of the thumbnail's middle (labelled: >= 47; wrong pairs: 1.8-24)
    min_face_score: float = 0.90  # the detector's best score (labelled: >= 0.825; wrong pairs: 0.797, 0.799)
    min_faces: int = 2  # sightings with a face, for a video's track (a glimpse; labelled: one track of 1, the rest more)

    def reason(self, q: TrackQualityRow) -> str | None:
        """The first gate a track fails (None: it may join a person)."""
        if q.faces == 0:
            return NO_FACE
        if q.face_px < self.min_face_px:
            return SMALL_FACE
        if 0 <= q.sharpness < self.min_sharpness:
            return BLURRED
        if q.face_score < self.min_face_score:
            return UNSURE_FACE
        if not q.photo and q.faces < self.min_faces:
            return GLIMPSE
        return None

    def describe(self, q: TrackQualityRow) -> str:
        """Why a track waits in the inbox, with its numbers."""
        why = self.reason(q)
        if why == SMALL_FACE:
            return f"face too small ({q.face_px:.0f} px < {self.min_face_px:g})"
        if why == BLURRED:
            return f"blurred or dark (sharpness {q.sharpness:.0f} < {self.min_sharpness:g})"
        if why == UNSURE_FACE:
            return f"the detector is unsure it is a face (score {q.face_score:.2f} < {self.min_face_score:g})"
        if why == GLIMPSE:
            return f"a glimpse ({q.faces} face{'s' if q.faces != 1 else ''} in the video, < {self.min_faces})"
        return REASONS.get(why or "", "")

    def to_dict(self) -> dict:
        return {"min_face_px": self.min_face_px, "min_sharpness": self.min_sharpness, "min_face_score": self.min_face_score,
                "min_faces": self.min_faces}


DEFAULT_GATES = QualityGates()


def sharpness(gray: np.ndarray) -> float:
    """Detail in the middle of a head crop (where the face is): the variance of its Laplacian. Blur and darkness
    both lower it; a face upscaled from a few pixels has little."""
    import cv2

    h, w = gray.shape[:2]
    middle = gray[h // 4 : h - h // 4, w // 4 : w - w // 4]
    return float(cv2.Laplacian(middle, cv2.CV_64F).var())


def thumbnail_sharpness(path: Path) -> float:
    """`sharpness` of a track's thumbnail; -1 when it cannot be read (the gate then says nothing)."""
    import cv2

    gray = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    if gray is None or gray.size == 0:
        log.info("%s: thumbnail unreadable; its track's sharpness is unknown", path)
        return -1.0
    return sharpness(gray)


def measure(root: Path, inputs: list[TrackQualityInput]) -> list[TrackQualityRow]:
    """Each track's quality from its sightings and its thumbnail (in the library folder `root`)."""
    return [TrackQualityRow(track_id=i.track_id, face_px=i.head_height / HEAD_SIDE_PER_FACE_HEIGHT,
                            sharpness=thumbnail_sharpness(Path(root) / i.thumbnail) if i.faces else -1.0,
                            face_score=i.face_score, faces=i.faces, photo=i.kind == "image") for i in inputs]
