"""Analysis of one media file: frames -> shots -> heads -> tracks -> embeddings, as a `FileResult`.

A pure function of the file, the settings, the detector and the embedder: it stores nothing.
Indexing stores its result in a library, the benchmarks score it, the dataset builder writes its
crops and teacher vectors; all three call `analyse_file`.
"""
from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import cv2

from headsearch.crops import HeadCrop, crop_head, picture_of
from headsearch.detect import FaceDetector, detect_heads
from headsearch.embedders import Embedder
from headsearch.errors import MediaError
from headsearch.images import encode_jpeg, read_image_rgb
from headsearch.media import file_stamp, media_kind
from headsearch.settings import IndexSettings
from indexer.decode import VideoStream
from indexer.evidence import EvidenceCollector, judge_photo
from indexer.shots import ShotBoundaryDetector, hsv_histogram
from indexer.tracker import HeadTracker
from schemas.records import FileResult, FileStamp, HeadTrack, MediaKind, Observation, Shot

log = logging.getLogger(__name__)

STAGES = ("decode", "shots", "detect", "track", "embed", "store")  # "store" is the library's, timed by the caller
CROP_JPEG_QUALITY = 92


class FrameProgress(Protocol):
    """A progress bar over a video's frames (tqdm's interface)."""

    def reset(self, total: int | None = None) -> object: ...

    def update(self, n: int = 1) -> object: ...


@dataclass
class StageClock:
    """Seconds spent per pipeline stage."""

    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def add(self, stage: str, since: float) -> float:
        now = time.perf_counter()
        self.seconds[stage] += now - since
        return now


@dataclass
class _Pending:
    """A sighting waiting for its batch to be embedded."""

    track: HeadTrack
    position: int  # index of the observation in track.observations
    crop: HeadCrop


class _Analysis:
    """The state of one file's analysis: pending crops, the clock, the choices of thumbnails."""

    def __init__(self, settings: IndexSettings, detector: FaceDetector, embedder: Embedder, keep_crops: bool):
        self.settings = settings
        self.detector = detector
        self.embedder = embedder
        self.keep_crops = keep_crops
        self.clock = StageClock()
        self.pending: list[_Pending] = []

    def embed(self) -> None:
        """Embed the queued crops in one batch; keep the best crop of each track as its thumbnail."""
        if not self.pending:
            return
        t0 = time.perf_counter()
        # A face-recognition model sees nothing in a sighting without a face: such sightings only
        # extend their track (and keep their crop when asked); models that see whole heads embed them.
        embedded = [p for p in self.pending if p.crop.face_visible or self.embedder.sees_whole_head]
        vectors = self.embedder.embed([p.crop for p in embedded]) if embedded else {}
        row = {id(p): i for i, p in enumerate(embedded)}
        px = self.settings.thumbnail_px
        for p in self.pending:
            obs = p.track.observations[p.position]
            if self.keep_crops:
                obs.crop_jpeg = encode_jpeg(p.crop.image, CROP_JPEG_QUALITY)
            if id(p) not in row:
                continue
            i = row[id(p)]
            obs.embeddings = {kind: v[i] for kind, v in vectors.items()}
            best = p.track.observations[p.track.best_index]
            if p.track.thumbnail is None or _quality(obs) > _quality(best):
                # Kept as a small JPEG: a long video holds thousands of tracks until it commits.
                p.track.best_index = p.position
                p.track.thumbnail = encode_jpeg(cv2.resize(picture_of(p.crop), (px, px), interpolation=cv2.INTER_AREA))
        self.pending = []
        self.clock.add("embed", t0)


def _quality(obs: Observation) -> float:
    """How good a sighting is for a thumbnail: a large, confident face."""
    return obs.face.box.area * obs.face.score if obs.face is not None else 0.0


def analyse_file(path: Path, settings: IndexSettings, detector: FaceDetector, embedder: Embedder, *,
                 stamp: FileStamp | None = None, keep_crops: bool = False, progress: FrameProgress | None = None) -> FileResult:
    """Decode, cut into shots, detect, track and embed one file.

    `stamp` is the file's version when the caller already has it; `keep_crops` keeps every
    sighting's head crop as JPEG in `Observation.crop_jpeg` (the dataset builder writes them).
    Raises MediaError for files that cannot be read.
    """
    path = Path(path)
    stamp = stamp or file_stamp(path)
    analysis = _Analysis(settings, detector, embedder, keep_crops)
    if media_kind(path) == MediaKind.IMAGE:
        result = _analyse_image(path, stamp, analysis)
    else:
        result = _analyse_video(path, stamp, analysis, progress)
    result.stage_seconds = dict(analysis.clock.seconds)
    return result


def _analyse_image(path: Path, stamp: FileStamp, a: _Analysis) -> FileResult:
    t0 = time.perf_counter()
    rgb = read_image_rgb(path)
    t0 = a.clock.add("decode", t0)
    heads = detect_heads(a.detector, rgb)
    t0 = a.clock.add("detect", t0)
    h, w = rgb.shape[:2]
    tracks, dropped = [], []
    for d in heads:
        track = HeadTrack(shot_index=0, observations=[Observation(frame_index=0, time=0.0, head=d.head, face=d.face)])
        reason = judge_photo(d.face)
        if reason is not None:  # a hand, a logo, a blur: no real face
            dropped.append((track, reason))
            continue
        tracks.append(track)
        a.pending.append(_Pending(track, 0, crop_head(rgb, d.head, d.face, a.settings.crop_px)))
    a.clock.add("track", t0)
    a.embed()
    _log_dropped(path, dropped)
    return FileResult(stamp, MediaKind.IMAGE, w, h, 0.0, 0.0, 1, 1, "image", [Shot(0, 0, 0, 0.0, 0.0)], tracks, dropped_tracks=dropped)


def _log_dropped(path: Path, dropped: list[tuple[HeadTrack, str]]) -> None:
    for track, reason in dropped:
        log.info("%s: dropped the track at %.3f-%.3f s: %s", path, track.start, track.end, reason)


def _analyse_video(path: Path, stamp: FileStamp, a: _Analysis, progress: FrameProgress | None) -> FileResult:
    s = a.settings
    clock = a.clock
    t0 = time.perf_counter()
    stream = VideoStream(path, s.decode_max_side)
    info = stream.info
    if progress is not None:
        progress.reset(total=info.frame_count or None)
    t0 = clock.add("decode", t0)
    cuts = ShotBoundaryDetector()
    tracker = HeadTracker(s.track_iou, s.track_max_gap_s, s.follow_min_score)
    evidence = EvidenceCollector()
    shots: list[Shot] = []
    tracks: list[HeadTrack] = []
    shot_start = (0, 0.0)
    next_sample = -1.0
    sampled = 0
    last = None
    frames = iter(stream)
    while True:
        t0 = time.perf_counter()
        frame = next(frames, None)
        t0 = clock.add("decode", t0)
        if frame is None:
            break
        new_shot = cuts.push(hsv_histogram(frame.rgb))  # False for the first frame
        t0 = clock.add("shots", t0)
        if last is None:  # the first shot starts at the first frame's presentation time
            shot_start = (frame.index, frame.time)
        if new_shot:
            shots.append(Shot(len(shots), shot_start[0], frame.index - 1, shot_start[1], frame.time))
            shot_start = (frame.index, frame.time)
            tracks.extend(tracker.new_shot(len(shots)))
            next_sample = -1.0
        last = frame
        if progress is not None:
            progress.update(1)
        if frame.time + 1e-6 < next_sample:
            continue
        next_sample = max(frame.time, next_sample) + 1.0 / s.sample_fps if next_sample >= 0 else frame.time + 1.0 / s.sample_fps
        sampled += 1
        heads = detect_heads(a.detector, frame.rgb)
        t0 = clock.add("detect", t0)
        observed, ended = tracker.update(frame.index, frame.time, frame.rgb, heads)
        evidence.add(frame.index, frame.rgb, observed)
        tracks.extend(ended)
        for track, obs in observed:  # each is the newest sighting of its track
            a.pending.append(_Pending(track, len(track.observations) - 1, crop_head(frame.rgb, obs.head, obs.face, s.crop_px)))
        clock.add("track", t0)
        if len(a.pending) >= s.embed_batch:
            a.embed()
    if last is None:
        raise MediaError(f"{path}: no decodable frames")
    # Shots end where the last frame ends, on the file's presentation timeline (as every time here).
    end_time = max(last.time + (1.0 / info.fps if info.fps else 0.0), info.start_time + info.duration if stream.truncated_at is None else 0.0)
    shots.append(Shot(len(shots), shot_start[0], last.index, shot_start[1], end_time))
    tracks.extend(tracker.finish())
    a.embed()
    warning = None
    if stream.truncated_at is not None:
        warning = f"{path}: damaged or truncated, indexed the first {last.index + 1} of {info.frame_count} frames"
    tracks = [tr for tr in tracks if tr.observations]
    judged = [(tr, evidence.judge(tr)) for tr in tracks]
    tracks = [tr for tr, reason in judged if reason is None]
    dropped = [(tr, reason) for tr, reason in judged if reason is not None]
    shot_ends = {sh.index: sh.end_time for sh in shots}
    for tr, _ in judged:  # a track lasts until the next sample after its last sighting, within its shot
        last_seen = tr.observations[-1].time
        tr.extends_to = max(last_seen, min(last_seen + 1.0 / s.sample_fps, shot_ends.get(tr.shot_index, end_time)))
    _log_dropped(path, dropped)
    duration = end_time - shots[0].start_time  # how long it plays, from its first frame
    return FileResult(stamp, MediaKind.VIDEO, info.width, info.height, info.fps, duration, last.index + 1, sampled,
                      info.decoder, shots, tracks, warning, source_size=info.source_size, dropped_tracks=dropped)
