"""Analysis of one media file: frames -> shots -> heads -> tracks -> embeddings, as a `FileResult`.

A pure function of the file, the settings, the detector and the embedder: it stores nothing.
Indexing stores its result in a library, the benchmarks score it, the dataset builder writes its
crops and teacher vectors; all three call `analyse_file`.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import cv2
import numpy as np

from headsearch.basics.errors import MediaError
from headsearch.basics.images import encode_jpeg, read_image_rgb
from headsearch.basics.media import file_stamp, media_kind
from headsearch.basics.settings import IndexSettings
from headsearch.basics.stages import StageClock
from headsearch.detection.crops import HeadCrop, crop_head, picture_of
from headsearch.detection.faces import FaceDetector, detect_heads
from headsearch.detection.keypoints import KeypointHeadFinder
from headsearch.models import Embedder
from headsearch.models.whole_head import Lite0Appearance
from indexer.decode import DecodedFrame, VideoStream
from indexer.evidence import EvidenceCollector, judge_photo
from indexer.prefetch import Prefetched
from indexer.rejoin import DEFAULT_BARS, JoinBars, PieceCues, body_region, join_pieces, piece_cues
from indexer.shots import ShotBoundaryDetector, hsv_histogram
from indexer.tracker import HeadTracker
from schemas.records import (
    FileResult,
    FileStamp,
    HeadDetection,
    HeadSource,
    HeadTrack,
    MediaKind,
    Observation,
    Shot,
    SourceProbe,
)

log = logging.getLogger(__name__)

STAGES = ("decode", "shots", "detect", "keypoints", "track", "embed", "store")  # "store" is the library's, timed by the caller
# Besides the stages, the clock counts "wait": detection waiting for decoded frames (overlapped runs).
CROP_JPEG_QUALITY = 92
BODY_PX = 96  # bodies are kept at this size until the join rule describes them (a long video holds thousands of tracks)


class FrameProgress(Protocol):
    """A progress bar over a video's frames (tqdm's interface)."""

    def reset(self, total: int | None = None) -> object: ...

    def update(self, n: int = 1) -> object: ...


@dataclass
class _Pending:
    """A sighting waiting for its batch to be embedded."""

    track: HeadTrack
    position: int  # index of the observation in track.observations
    crop: HeadCrop


@dataclass
class _Choice:
    """The sighting of a track chosen so far in its current time bin (see `_Analysis.offer`)."""

    bin: int
    start: float
    candidate: _Pending | None = None
    quality: float = -1.0


class _Analysis:
    """The state of one file's analysis: pending crops, the clock, the choices of thumbnails."""

    def __init__(self, settings: IndexSettings, detector: FaceDetector, embedder: Embedder, keep_crops: bool):
        self.settings = settings
        self.detector = detector
        self.embedder = embedder
        self.keep_crops = keep_crops
        self.clock = StageClock()
        self.pending: list[_Pending] = []
        self.embedded = 0
        self.samples: list[tuple[int, float]] = []  # (frame index, time) of every sampled frame
        # The dataset builder (keep_crops) needs a teacher vector for every face: it embeds them all.
        self.every_s = 0.0 if keep_crops else settings.embed_every_s
        self._choices: dict[int, _Choice] = {}
        self.bodies: dict[int, list[np.ndarray]] = {}  # id(track) -> [its body at its first detected sighting, at its last]

    def offer(self, track: HeadTrack, position: int, crop: HeadCrop) -> None:
        """A new sighting of a track. A face-recognition model sees nothing in a sighting without a
        face: such sightings only extend their track; models that see whole heads embed them too.
        With `embed_every_s`, each track embeds one sighting per that many seconds of its time, the
        best of each span (the largest, most confident face), so its best face is always among them:
        a bounded subset, the same whatever the batches. Crops wait one per live track."""
        obs = track.observations[position]
        if self.keep_crops:
            obs.crop_jpeg = encode_jpeg(crop.image, CROP_JPEG_QUALITY)
        if not (crop.face_visible or self.embedder.sees_whole_head):
            self._keep_thumbnail(track, position, crop)  # a track kept on keypoint evidence still shows a picture
            return
        pending = _Pending(track, position, crop)
        if self.every_s <= 0:
            self.pending.append(pending)
            return
        choice = self._choices.get(id(track))
        if choice is None:
            choice = self._choices[id(track)] = _Choice(0, obs.time)
        span = int((obs.time - choice.start) // self.every_s)
        if span != choice.bin and choice.candidate is not None:
            self.pending.append(choice.candidate)
            choice.candidate, choice.quality = None, -1.0
        choice.bin = span
        quality = _quality(obs)
        if quality > choice.quality:
            choice.candidate, choice.quality = pending, quality

    def keep_body(self, track: HeadTrack, obs: Observation, rgb: np.ndarray) -> None:
        """The region below a detected head, small, kept at the track's first and last detected sighting: the body cue
        of joins within the shot (`indexer.rejoin`), described only at the two ends of a join about to be made."""
        if obs.found_by == HeadSource.FOLLOWED:
            return
        h, w = rgb.shape[:2]
        region = body_region(obs.head, w, h)
        if region is None:
            return
        pixels = rgb[int(region.y1):max(int(region.y1) + 1, int(region.y2)), int(region.x1):max(int(region.x1) + 1, int(region.x2))]
        small = cv2.resize(pixels, (BODY_PX, BODY_PX), interpolation=cv2.INTER_AREA)
        kept = self.bodies.setdefault(id(track), [small, small])
        kept[1] = small

    def ended(self, tracks: list[HeadTrack]) -> None:
        """Tracks that will see no more sightings: their last chosen sighting joins the queue."""
        for track in tracks:
            choice = self._choices.pop(id(track), None)
            if choice is not None and choice.candidate is not None:
                self.pending.append(choice.candidate)

    def embed(self) -> None:
        """Embed the queued crops in one batch; keep the best crop of each track as its thumbnail."""
        if not self.pending:
            return
        t0 = time.perf_counter()
        vectors = self.embedder.embed([p.crop for p in self.pending])
        self.embedded += len(self.pending)
        for i, p in enumerate(self.pending):
            obs = p.track.observations[p.position]
            obs.embeddings = {kind: v[i] for kind, v in vectors.items() if v[i].any()}  # a model gives no identity without a face
            self._keep_thumbnail(p.track, p.position, p.crop)
        self.pending = []
        self.clock.add("embed", t0)

    def _keep_thumbnail(self, track: HeadTrack, position: int, crop: HeadCrop) -> None:
        """The track's best sighting so far (`_quality`) becomes its thumbnail, kept as a small JPEG: a long video holds
        thousands of tracks until it commits."""
        if track.thumbnail is None or _quality(track.observations[position]) > _quality(track.observations[track.best_index]):
            px = self.settings.thumbnail_px
            track.best_index = position
            track.thumbnail = encode_jpeg(cv2.resize(picture_of(crop), (px, px), interpolation=cv2.INTER_AREA))


def _quality(obs: Observation) -> float:
    """How good a sighting is for a thumbnail and a vector: a large, confident face; without one, a head found by
    keypoints (its box placed by a detector) before one followed from an earlier sighting."""
    if obs.face is not None:
        return obs.face.box.area * obs.face.score
    return 1e-3 * (obs.keypoint_score or 0.0) if obs.found_by == HeadSource.KEYPOINTS else 0.0


def analyse_file(path: Path, settings: IndexSettings, detector: FaceDetector, embedder: Embedder, *,
                 stamp: FileStamp | None = None, keep_crops: bool = False, progress: FrameProgress | None = None,
                 sample_at: Sequence[float] = (), join_bars: JoinBars | None = DEFAULT_BARS,
                 join_cues: list[PieceCues] | None = None, probe: SourceProbe | None = None) -> FileResult:
    """Decode, cut into shots, detect, track and embed one file.

    `stamp` is the file's version when the caller already has it, `probe` its look (`indexer.decode.probe_source`: its
    header not checked again); `keep_crops` keeps every sighting's head crop as JPEG in `Observation.crop_jpeg` (the
    dataset builder writes them);
    `sample_at` adds to a video's samples the frames at these presentation times (within half a
    frame period; `bench heads` scores the sightings there); `join_bars` are the bars of the joins within a shot
    (`indexer.rejoin`; None: no joins); `join_cues`, when given, receives every kept track's cues, every body described
    (what `research/rejoin_bars.py` measures). Raises MediaError for files that cannot be read.
    """
    path = Path(path)
    stamp = stamp or file_stamp(path)
    analysis = _Analysis(settings, detector, embedder, keep_crops)
    if media_kind(path) == MediaKind.IMAGE:
        result = _analyse_image(path, stamp, analysis)
    else:
        result = _analyse_video(path, stamp, analysis, progress, sorted(sample_at), probe)
        _join_within_shots(result.tracks, analysis, join_bars, join_cues)
    result.stage_seconds = dict(analysis.clock.seconds)
    result.embedded = analysis.embedded
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
        a.offer(track, 0, crop_head(rgb, d.head, d.face, a.settings.crop_px))
    a.ended(tracks)
    a.clock.add("track", t0)
    a.embed()
    _log_dropped(path, dropped)
    return FileResult(stamp, MediaKind.IMAGE, w, h, 0.0, 0.0, 1, 1, "image", [Shot(0, 0, 0, 0.0, 0.0)], tracks, dropped_tracks=dropped,
                      samples=[(0, 0.0)])


def _join_within_shots(tracks: list[HeadTrack], a: _Analysis, bars: JoinBars | None, out: list[PieceCues] | None) -> None:
    """Join the tracks of each shot that are one person (`indexer.rejoin`); the body descriptors are Lite0's (where the
    model has Lite0: the default model), run only for the tracks of a join about to be made."""
    if bars is None and out is None:
        return
    t0 = time.perf_counter()
    pieces = [piece_cues(tr, a.embedder.spec.appearance_dims) for tr in tracks]
    body_model = getattr(a.embedder, "appearance", None)
    bodies = _Bodies(tracks, pieces, a, body_model) if isinstance(body_model, Lite0Appearance) else None
    if out is not None:
        if bodies is not None:
            bodies.describe([(i, last) for i in range(len(tracks)) for last in (False, True)])
        out.extend(pieces)
    if bars is not None:
        for tr, join in zip(tracks, join_pieces(pieces, bars, None if bodies is None else bodies.describe), strict=True):
            tr.join = join
    a.clock.add("track", t0 + (bodies.seconds if bodies is not None else 0.0))  # Lite0's seconds are counted as "embed"


class _Body:
    """A body region as the Lite0 graph takes a head crop."""

    def __init__(self, image: np.ndarray):
        self.image = image


class _Bodies:
    """The body descriptors of tracks (at their first and last detected sighting), described once, when first asked."""

    def __init__(self, tracks: list[HeadTrack], pieces: list[PieceCues], a: _Analysis, model: Lite0Appearance):
        self.tracks, self.pieces, self.analysis, self.model = tracks, pieces, a, model
        self.done: set[tuple[int, bool]] = set()
        self.seconds = 0.0

    def describe(self, ends: Iterable[tuple[int, bool]]) -> None:
        kept = self.analysis.bodies
        wanted = [(i, last) for i, last in sorted(set(ends) - self.done) if id(self.tracks[i]) in kept]
        self.done |= set(ends)
        if not wanted:
            return
        t0 = time.perf_counter()
        described = self.model.embed([_Body(kept[id(self.tracks[i])][int(last)]) for i, last in wanted])
        for (i, last), v in zip(wanted, described, strict=True):
            setattr(self.pieces[i], "body_last" if last else "body_first", v)
        self.seconds += self.analysis.clock.add("embed", t0) - t0


def _log_dropped(path: Path, dropped: list[tuple[HeadTrack, str]]) -> None:
    for track, reason in dropped:
        log.info("%s: dropped the track at %.3f-%.3f s: %s", path, track.start, track.end, reason)


@dataclass
class _Cut:
    """The shot that ended before the next frame."""

    shot: Shot


@dataclass
class _Scanned:
    """What decoding left once every frame was read: the last frame and the start of the last shot."""

    last: DecodedFrame | None
    shot_start: tuple[int, float]
    shots: int


def _scan(stream: VideoStream, s: IndexSettings, clock: StageClock, progress: FrameProgress | None,
          sample_at: Sequence[float] = ()) -> Iterator[_Cut | DecodedFrame | _Scanned]:
    """Decode every frame and cut shots (HSV histograms of each frame's small copy); yield each cut and each sampled
    frame (its pixels converted here) in order, then what the scan ended with. Runs ahead of detection (a thread)
    when overlapping.
    `sample_at` (sorted) adds the frames within half a frame period of these times to the samples."""
    wanted = list(sample_at)
    half_period = 0.5 / stream.info.fps if stream.info.fps else 0.02
    cuts = ShotBoundaryDetector.for_rate(stream.info.fps)
    shot_start = (0, 0.0)
    next_sample = -1.0
    shots = 0
    last = None
    frames = iter(stream)
    while True:
        t0 = time.perf_counter()
        frame = next(frames, None)
        t0 = clock.add("decode", t0)
        if frame is None:
            break
        new_shot = cuts.push(hsv_histogram(frame.small))  # False for the first frame
        clock.add("shots", t0)
        if last is None:  # the first shot starts at the first frame's presentation time
            shot_start = (frame.index, frame.time)
        if new_shot:
            yield _Cut(Shot(shots, shot_start[0], frame.index - 1, shot_start[1], frame.time))
            shots += 1
            shot_start = (frame.index, frame.time)
            next_sample = -1.0
        last = frame
        if progress is not None:
            progress.update(1)
        while wanted and wanted[0] < frame.time - half_period:
            wanted.pop(0)
        asked = bool(wanted) and abs(wanted[0] - frame.time) <= half_period
        if asked:
            wanted.pop(0)
        if frame.time + 1e-6 < next_sample:
            if asked:
                yield _converted(frame, clock)
            continue
        next_sample = max(frame.time, next_sample) + 1.0 / s.sample_fps if next_sample >= 0 else frame.time + 1.0 / s.sample_fps
        yield _converted(frame, clock)
    yield _Scanned(last, shot_start, shots)


def _converted(frame: DecodedFrame, clock: StageClock) -> DecodedFrame:
    """A sampled frame with its pixels converted here, in the scan's thread (counted as decoding), not in detection's."""
    t0 = time.perf_counter()
    _ = frame.rgb
    clock.add("decode", t0)
    return frame


class _DetectScale:
    """Detection at a coarser scale while a shot's faces are large: a full-scale detection at each
    shot's start and every `full_detect_every` samples; in between, when the last full one found
    only faces at least `coarse_min_face_px` tall (at the detector's scale), the detector sees a
    copy of at most `detect_coarse_side` pixels, and falls back to full scale on that very frame
    when it finds fewer faces than the last full detection did."""

    def __init__(self, detector: FaceDetector, s: IndexSettings):
        self.detector = detector
        self.coarse = s.detect_coarse_side if 0 < s.detect_coarse_side < s.detect_max_side else 0
        self.min_face = s.coarse_min_face_px
        self.every = max(1, s.full_detect_every)
        self.new_shot()

    def new_shot(self) -> None:
        self.large, self.since_full, self.expected = False, 0, 0

    def detect(self, rgb: np.ndarray) -> list:
        if self.coarse and self.large and self.since_full < self.every - 1:
            heads = detect_heads(self.detector, rgb, self.coarse)
            if len(heads) >= self.expected:
                self.since_full += 1
                return heads
        heads = detect_heads(self.detector, rgb)
        h, w = rgb.shape[:2]
        scale = self.detector.scale_for(w, h)
        self.since_full, self.expected = 0, len(heads)
        self.large = bool(heads) and min(min(d.face.box.width, d.face.box.height) for d in heads) * scale >= self.min_face
        return heads


class _KeypointSchedule:
    """Where the keypoint head finder (MoveNet: 0.1-0.6 s a frame on 2 cores) runs, so that indexing keeps its
    speed: on each shot's first sampled frame; then once `keypoints_every_s` seconds of the shot have passed
    since it last ran, a wait that doubles (up to `keypoints_max_every_s`) each time it finds no head the faces
    did not give (a shot of faces: talking heads) and falls back when it finds one; and on a frame where the face
    detector finds fewer heads than on the sample before (someone turned away). In between, the tracker follows
    the heads it found."""

    def __init__(self, s: IndexSettings):
        self.every = s.keypoints_every_s
        self.max_every = max(s.keypoints_max_every_s, self.every)
        self.finder = KeypointHeadFinder() if self.every > 0 else None
        self.runs = 0
        self.new_shot()

    def new_shot(self) -> None:
        self.last: float | None = None
        self.wait = self.every
        self.faces = 0

    def find(self, time: float, rgb: np.ndarray, face_heads: list[HeadDetection]) -> list[HeadDetection]:
        """The heads without a face in this frame when the finder is due here, else none."""
        if self.finder is None:
            return []
        fewer = len(face_heads) < self.faces
        self.faces = len(face_heads)
        if self.last is not None and time - self.last < self.wait and not fewer:
            return []
        self.last = time
        self.runs += 1
        found = self.finder.find(rgb, face_heads)
        self.wait = self.every if found else min(2 * self.wait, self.max_every)
        return found


def _follow(events: Iterable, a: _Analysis, tracker: HeadTracker, evidence: EvidenceCollector, scale: _DetectScale,
            keypoints: _KeypointSchedule, shots: list[Shot], tracks: list[HeadTrack]) -> _Scanned | None:
    """Detect, track and embed along the scan's cuts and sampled frames; the scan's end."""
    s, clock = a.settings, a.clock
    overlapped = isinstance(events, Prefetched)
    t0 = time.perf_counter()
    for event in events:
        t0 = clock.add("wait", t0) if overlapped else time.perf_counter()  # "wait": for decoded frames
        if isinstance(event, _Scanned):
            return event
        if isinstance(event, _Cut):
            shots.append(event.shot)
            ended = tracker.new_shot(len(shots))
            a.ended(ended)
            tracks.extend(ended)
            scale.new_shot()
            keypoints.new_shot()
            t0 = clock.add("track", t0)
            continue
        frame = event
        a.samples.append((frame.index, frame.time))
        heads = scale.detect(frame.rgb)
        t0 = clock.add("detect", t0)
        heads = heads + keypoints.find(frame.time, frame.rgb, heads)
        t0 = clock.add("keypoints", t0)
        observed, ended = tracker.update(frame.index, frame.time, frame.rgb, heads)
        evidence.add(frame.index, frame.rgb, observed)
        for track, obs in observed:  # each is the newest sighting of its track
            a.offer(track, len(track.observations) - 1, crop_head(frame.rgb, obs.head, obs.face, s.crop_px))
            a.keep_body(track, obs, frame.rgb)
        a.ended(ended)
        tracks.extend(ended)
        clock.add("track", t0)
        if len(a.pending) >= s.embed_batch:
            a.embed()
        t0 = time.perf_counter()
    return None


def _analyse_video(path: Path, stamp: FileStamp, a: _Analysis, progress: FrameProgress | None,
                   sample_at: Sequence[float] = (), probe: SourceProbe | None = None) -> FileResult:
    s = a.settings
    clock = a.clock
    t0 = time.perf_counter()
    stream = VideoStream(path, s.decode_max_side, probe=probe)
    info = stream.info
    if progress is not None:
        progress.reset(total=info.frame_count or None)
    clock.add("decode", t0)
    tracker = HeadTracker(s.track_iou, s.track_max_gap_s, s.follow_min_score)
    evidence = EvidenceCollector()
    scale = _DetectScale(a.detector, s)
    keypoints = _KeypointSchedule(s)
    shots: list[Shot] = []
    tracks: list[HeadTrack] = []
    scanned = _scan(stream, s, clock, progress, sample_at)
    events = Prefetched(scanned, depth=s.decode_ahead) if s.decode_ahead > 0 else scanned
    end: _Scanned | None = None
    try:
        end = _follow(events, a, tracker, evidence, scale, keypoints, shots, tracks)
    finally:
        if isinstance(events, Prefetched):
            events.close()
    last = end.last if end is not None else None
    if last is None:
        raise MediaError(f"{path}: no decodable frames")
    # Shots end where the last frame ends, on the file's presentation timeline (as every time here).
    end_time = max(last.time + (1.0 / info.fps if info.fps else 0.0), info.start_time + info.duration if stream.truncated_at is None else 0.0)
    shots.append(Shot(len(shots), end.shot_start[0], last.index, end.shot_start[1], end_time))
    finished = tracker.finish()
    a.ended(finished)
    tracks.extend(finished)
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
    return FileResult(stamp, MediaKind.VIDEO, info.width, info.height, info.fps, duration, last.index + 1, len(a.samples),
                      info.decoder, shots, tracks, warning, source_size=info.source_size, dropped_tracks=dropped,
                      keypoint_frames=keypoints.runs, samples=a.samples)
