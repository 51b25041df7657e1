"""Head boxes against a labelled head set (`headsearch bench heads SET`): recall by view and precision at IoU 0.5.

Methods, each scored on the same labelled frames (`headsearch.evaluation.head_boxes`):

- `faces`: RetinaFace on each labelled frame alone (the default settings), every face's head box;
- `indexer-faces`: the indexer as it was before heads without a face, person keypoints off
  (`keypoints_every_s` = 0): detection and tracking, the sightings of the tracks it keeps;
- `indexer`: the indexer's own analysis with the given settings (default: the defaults): face detection,
  the keypoint head finder where its schedule runs it, tracking (heads followed between detections), the
  evidence rule; the sightings it stores at the labelled times.

The indexer analyses each labelled video whole, with the labelled frames added to its samples (`analyse_file`'s
`sample_at`), so every labelled time has the sightings the indexer stores in that frame. Stored head boxes frame
the head with a margin; each is compared as the head it holds, scaled by HEAD_IN_BOX about its centre
(`headsearch.detection.keypoints`), in the file's own pixels, clipped to the frame.

A benchmark run enters through `bench_heads(HeadsOptions(...))`, which returns a `HeadsRun` for `bench.report`.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from headsearch.basics.errors import HeadsearchError, cannot_read
from headsearch.basics.failures import file_failures
from headsearch.basics.frames import frame_at
from headsearch.basics.settings import IndexSettings
from headsearch.detection.crops import HeadCrop
from headsearch.detection.faces import FaceDetector, detect_heads
from headsearch.detection.keypoints import HEAD_IN_BOX, scaled_about_centre
from headsearch.evaluation.head_boxes import VIEWS, FoundHead, HeadFrame, HeadScores, clipped, read_head_set, score_frames
from headsearch.models.base import Embedder, ModelSpec
from indexer.analysis import analyse_file
from schemas.records import Box, FileResult, HeadSource, Observation, VectorKind

log = logging.getLogger(__name__)

Report = Callable[[str], None]
METHODS = ("faces", "indexer-faces", "indexer")
METHOD_TITLES = {
    "faces": "RetinaFace on each labelled frame alone",
    "indexer-faces": "the indexer without the keypoint head finder (faces, tracking)",
    "indexer": "the indexer (faces, keypoint head finder, tracking, evidence)",
}
SOURCE_ORDER = {HeadSource.FACE: 2.0, HeadSource.KEYPOINTS: 1.0, HeadSource.FOLLOWED: 0.0}  # matching order of sightings


@dataclass(frozen=True)
class HeadsOptions:
    """What one head benchmark measures."""

    set_csv: Path  # the labelled heads: file,time,x1,y1,x2,y2,view[,ignore]
    root: Path | None = None  # folder the set's relative paths start from (None: the CSV's folder)
    settings: IndexSettings = field(default_factory=IndexSettings)  # the indexer's settings
    methods: tuple[str, ...] = METHODS
    iou: float = 0.5


@dataclass
class MethodResult:
    """One method's scores over the set, and what it cost."""

    method: str
    scores: HeadScores
    seconds: float  # wall time of the method over the set (for the indexer: whole videos analysed)
    frames: int  # labelled frames scored
    keypoint_frames: int = 0  # indexer: frames the keypoint head finder ran on
    sampled_frames: int = 0  # indexer: frames sampled (labelled frames included)
    stage_seconds: dict[str, float] = field(default_factory=dict)  # indexer: busy seconds per stage

    def to_dict(self) -> dict:
        return {"method": self.method, "what": METHOD_TITLES[self.method], **self.scores.to_dict(), "seconds": self.seconds,
                "frames": self.frames, "keypoint_frames": self.keypoint_frames, "sampled_frames": self.sampled_frames,
                "stage_seconds": {k: round(v, 3) for k, v in self.stage_seconds.items()}}


@dataclass
class HeadsRun:
    """The results of one head benchmark: each method's scores on the set."""

    options: HeadsOptions
    frames: list[HeadFrame]
    results: list[MethodResult]
    failed: list[str] = field(default_factory=list)  # files that could not be read (their frames are left out)

    @property
    def heads(self) -> dict[str, int]:
        """Counted heads per view (ignored ones left out)."""
        return {v: sum(1 for f in self.frames for h in f.heads if h.view == v and not h.ignore) for v in VIEWS}

    def to_dict(self) -> dict:
        return {"set": str(self.options.set_csv), "frames": len(self.frames), "files": len({f.file for f in self.frames}),
                "heads": self.heads, "ignored": sum(h.ignore for f in self.frames for h in f.heads), "iou": self.options.iou,
                "head_in_box": HEAD_IN_BOX, "keypoints_every_s": self.options.settings.keypoints_every_s,
                "methods": {r.method: r.to_dict() for r in self.results}, "failed_files": list(self.failed)}


class _NoVectors(Embedder):
    """Which sightings the indexer stores does not depend on vectors: none are computed."""

    version = "0"

    def __init__(self):
        super().__init__(ModelSpec(name="none", summary="no vectors: which sightings are stored does not depend on them", dims=(1,)))

    def embed(self, crops: Sequence[HeadCrop]) -> dict[VectorKind, np.ndarray]:
        return {VectorKind.ID: np.zeros((len(crops), 1), np.float32)}


def as_head(box: Box, scale: tuple[float, float], size: tuple[int, int]) -> Box | None:
    """A stored head box as the head it holds, in the file's own pixels, clipped to the frame."""
    b = scaled_about_centre(box, HEAD_IN_BOX)
    return clipped(Box(b.x1 * scale[0], b.y1 * scale[1], b.x2 * scale[0], b.y2 * scale[1]), *size)


def faces_in_frame(frame: HeadFrame, detector: FaceDetector) -> list[FoundHead]:
    """Heads found through their faces in one labelled frame, alone."""
    rgb = frame_at(frame.path, frame.time)
    size = (rgb.shape[1], rgb.shape[0])
    found = []
    for d in detect_heads(detector, rgb):
        b = as_head(d.head, (1.0, 1.0), size)
        if b is not None:
            found.append(FoundHead(b, 2.0 + d.score, str(HeadSource.FACE)))
    return found


def _sighting_score(o: Observation) -> float:
    if o.face is not None:
        return SOURCE_ORDER[HeadSource.FACE] + o.face.score
    return SOURCE_ORDER[HeadSource(o.found_by)] + (o.keypoint_score or 0.0)


def indexed_heads(result: FileResult, frames: Sequence[HeadFrame]) -> dict[float, list[FoundHead]]:
    """The sightings of the kept tracks at each labelled time (within half a frame period), as found heads."""
    size = result.source_size or (result.width, result.height)
    scale = (size[0] / max(result.width, 1), size[1] / max(result.height, 1))
    half = 0.5 / result.fps if result.fps else 0.02
    out: dict[float, list[FoundHead]] = {f.time: [] for f in frames}
    for track in result.tracks:
        for o in track.observations:
            for f in frames:
                if abs(o.time - f.time) <= half:
                    b = as_head(o.head, scale, size)
                    if b is not None:
                        out[f.time].append(FoundHead(b, _sighting_score(o), str(o.found_by)))
    return out


def _run_faces(frames: list[HeadFrame], settings: IndexSettings, failed: dict[str, str]) -> tuple[list, MethodResult]:
    detector = FaceDetector.from_settings(settings)
    t0 = time.perf_counter()
    pairs = []
    for f in frames:
        if f.file in failed:
            continue
        try:
            with file_failures(f.path, None):
                pairs.append((f, faces_in_frame(f, detector)))
        except (HeadsearchError, OSError) as e:
            failed[f.file] = str(e) if isinstance(e, HeadsearchError) else cannot_read(f.path, e)
    return pairs, MethodResult("faces", HeadScores(), time.perf_counter() - t0, len(pairs))


def _run_indexer(method: str, frames: list[HeadFrame], settings: IndexSettings, failed: dict[str, str],
                 progress: Report) -> tuple[list, MethodResult]:
    if method == "indexer-faces":
        settings = replace(settings, keypoints_every_s=0.0)
    detector = FaceDetector.from_settings(settings)
    by_file: dict[Path, list[HeadFrame]] = {}
    for f in frames:
        if f.file not in failed:
            by_file.setdefault(f.path, []).append(f)
    result = MethodResult(method, HeadScores(), 0.0, 0)
    pairs = []
    t0 = time.perf_counter()
    for path, its_frames in by_file.items():
        progress(f"{method}: analysing {path.name} ({len(its_frames)} labelled frames)")
        try:
            with file_failures(path, None):
                analysed = analyse_file(path, settings, detector, _NoVectors(), sample_at=[f.time for f in its_frames])
        except (HeadsearchError, OSError) as e:
            failed[its_frames[0].file] = str(e) if isinstance(e, HeadsearchError) else cannot_read(path, e)
            continue
        found = indexed_heads(analysed, its_frames)
        pairs += [(f, found[f.time]) for f in its_frames]
        result.keypoint_frames += analysed.keypoint_frames
        result.sampled_frames += analysed.frames_sampled
        for stage, s in analysed.stage_seconds.items():
            result.stage_seconds[stage] = result.stage_seconds.get(stage, 0.0) + s
    result.seconds = time.perf_counter() - t0
    result.frames = len(pairs)
    return pairs, result


def bench_heads(options: HeadsOptions, report: Report = print, progress: Report | None = None) -> HeadsRun:
    """Score each method's head boxes on the set. A file that cannot be read is one line to `report` and its frames
    are left out of every method. Raises HeadsearchError for an unreadable set or an unknown method."""
    say = progress or (lambda m: None)
    unknown = [m for m in options.methods if m not in METHODS]
    if unknown:
        raise HeadsearchError(f"unknown head benchmark method {unknown[0]!r} (one of {', '.join(METHODS)})")
    frames = read_head_set(options.set_csv, options.root)
    failed: dict[str, str] = {}
    runs = []
    for method in options.methods:
        if method == "faces":
            say(f"faces: RetinaFace on {len(frames)} labelled frames")
            pairs, result = _run_faces(frames, options.settings, failed)
        else:
            pairs, result = _run_indexer(method, frames, options.settings, failed, say)
        runs.append((pairs, result))
    for line in failed.values():
        report(f"warning: {line}; its labelled frames are left out")
    results = []
    for pairs, result in runs:  # every method on the frames of the files all methods could read
        result.scores = score_frames([(f, found) for f, found in pairs if f.file not in failed], options.iou)
        result.frames = sum(f.file not in failed for f, _ in pairs)
        results.append(result)
    kept = [f for f in frames if f.file not in failed]
    return HeadsRun(options, kept, results, sorted(failed.values()))
