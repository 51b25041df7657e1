"""The indexing pipeline: files -> frames -> shots -> heads -> tracks -> embeddings -> library."""
from __future__ import annotations

import errno
import hashlib
import logging
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import cv2
import numpy as np
from tqdm import tqdm

from headsearch.crops import HeadCrop, crop_head
from headsearch.detect import FaceDetector, detect_heads
from headsearch.embedders import Embedder
from headsearch.errors import HeadsearchError, LibraryError, MediaError
from headsearch.images import encode_jpeg, read_image_rgb
from headsearch.library import THUMBNAILS, Library, VideoRows
from headsearch.settings import IMAGE_EXTENSIONS, VIDEO_EXTENSIONS, IndexSettings
from indexer.decode import VideoStream
from indexer.shots import ShotBoundaryDetector, hsv_histogram
from indexer.tracker import HeadTracker
from schemas.records import HeadTrack, Observation, Shot

log = logging.getLogger(__name__)

STAGES = ("decode", "shots", "detect", "track", "embed", "store")


@dataclass
class StageClock:
    """Seconds spent per pipeline stage."""

    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def add(self, stage: str, since: float) -> float:
        now = time.perf_counter()
        self.seconds[stage] += now - since
        return now


@dataclass
class FileResult:
    """One file, decoded and analysed, not yet stored."""

    path: Path
    kind: str
    width: int
    height: int
    fps: float
    duration: float
    frames_decoded: int
    frames_sampled: int
    decoder: str
    shots: list[Shot]
    tracks: list[HeadTrack]
    warning: str | None = None


@dataclass
class IndexSummary:
    files: int = 0
    indexed: int = 0
    skipped: int = 0
    removed: int = 0
    failed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    frames: int = 0
    shots: int = 0
    tracks: int = 0
    video_seconds: float = 0.0
    wall_seconds: float = 0.0
    clock: StageClock = field(default_factory=StageClock)

    @property
    def realtime_factor(self) -> float:
        return self.video_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0

    def line(self) -> str:
        return (f"{self.files} files ({self.indexed} indexed, {self.skipped} unchanged, {self.removed} removed, "
                f"{len(self.failed)} failed), {self.frames} frames, {self.shots} shots, {self.tracks} tracks, "
                f"{self.wall_seconds:.1f} s, {self.realtime_factor:.2f}x real time")


def discover(paths: Iterable[Path]) -> tuple[list[Path], list[str], list[Path]]:
    """Media files under the given paths (folders recursively), unreadable paths, and the folders walked."""
    files, problems, folders = [], [], []
    for p in paths:
        p = Path(p).expanduser()
        if p.is_dir():
            folders.append(p.resolve())
            for root, dirs, names in os.walk(p, onerror=lambda e: problems.append(f"{e.filename}: cannot read folder ({e.strerror})")):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for n in sorted(names):
                    if Path(n).suffix.lower() in VIDEO_EXTENSIONS | IMAGE_EXTENSIONS and not n.startswith("."):
                        files.append(Path(root, n).resolve())
        elif p.is_file():
            files.append(p.resolve())
        elif p.exists():
            problems.append(f"{p}: not a regular file or folder")
        else:
            problems.append(f"{p}: no such file or folder")
    seen, unique = set(), []
    for f in files:
        if f not in seen:
            seen.add(f)
            unique.append(f)
    return unique, problems, folders


def fingerprint(path: Path, size: int) -> str:
    """A content fingerprint: the size and 16 evenly spread 64 KiB blocks (whole file when small)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(str(size).encode())
    block = 1 << 16
    with open(path, "rb") as f:
        if size <= 16 * block * 2:
            h.update(f.read())
        else:
            for i in range(16):
                f.seek((size - block) * i // 15)
                h.update(f.read(block))
    return h.hexdigest()


def media_kind(path: Path) -> str:
    return "image" if path.suffix.lower() in IMAGE_EXTENSIONS else "video"


class Indexer:
    """Indexes files into one library with one detector and one embedder."""

    def __init__(self, library: Library | None, embedder: Embedder, settings: IndexSettings | None = None, progress: bool = True,
                 crop_sink: Callable[[HeadTrack, Observation, HeadCrop], None] | None = None):
        """`library` may be None for analysis only (`analyse`); `crop_sink` sees every head crop
        before it is embedded (the dataset builder keeps them)."""
        self.library = library
        self.crop_sink = crop_sink
        self.embedder = embedder
        self.settings = settings or IndexSettings()
        self.detector = FaceDetector.from_settings(self.settings)
        self.progress = progress

    # ----- one file ------------------------------------------------------------------------
    def analyse(self, path: Path, clock: StageClock, bar: tqdm | None = None) -> FileResult:
        """Decode, cut into shots, detect, track and embed one file."""
        if media_kind(path) == "image":
            return self._analyse_image(path, clock)
        return self._analyse_video(path, clock, bar)

    def _analyse_image(self, path: Path, clock: StageClock) -> FileResult:
        t0 = time.perf_counter()
        rgb = read_image_rgb(path)
        t0 = clock.add("decode", t0)
        heads = detect_heads(self.detector, rgb)
        t0 = clock.add("detect", t0)
        h, w = rgb.shape[:2]
        tracks = []
        pending: list[tuple[HeadTrack, Observation, HeadCrop]] = []
        for d in heads:
            track = HeadTrack(shot_index=0)
            obs = Observation(frame_index=0, time=0.0, head=d.head, face=d.face)
            track.observations.append(obs)
            tracks.append(track)
            pending.append((track, obs, crop_head(rgb, d.head, d.face, self.settings.crop_px)))
        clock.add("track", t0)
        self._embed(pending, clock)
        return FileResult(path, "image", w, h, 0.0, 0.0, 1, 1, "image", [Shot(0, 0, 0, 0.0, 0.0)], tracks)

    def _analyse_video(self, path: Path, clock: StageClock, bar: tqdm | None) -> FileResult:
        s = self.settings
        t0 = time.perf_counter()
        stream = VideoStream(path, s.decode_max_side)
        info = stream.info
        if bar is not None:
            bar.reset(total=info.frame_count or None)
        t0 = clock.add("decode", t0)
        cuts = ShotBoundaryDetector()
        tracker = HeadTracker(s.track_iou, s.track_max_gap_s, s.follow_min_score)
        shots: list[Shot] = []
        tracks: list[HeadTrack] = []
        pending: list[tuple[HeadTrack, Observation, HeadCrop]] = []
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
            if new_shot:
                shots.append(Shot(len(shots), shot_start[0], frame.index - 1, shot_start[1], frame.time))
                shot_start = (frame.index, frame.time)
                tracks.extend(tracker.new_shot(len(shots)))
                next_sample = -1.0
            last = frame
            if bar is not None:
                bar.update(1)
            if frame.time + 1e-6 < next_sample:
                continue
            next_sample = max(frame.time, next_sample) + 1.0 / s.sample_fps if next_sample >= 0 else frame.time + 1.0 / s.sample_fps
            sampled += 1
            heads = detect_heads(self.detector, frame.rgb)
            t0 = clock.add("detect", t0)
            observed, ended = tracker.update(frame.index, frame.time, frame.rgb, heads)
            tracks.extend(ended)
            for track, obs in observed:
                pending.append((track, obs, crop_head(frame.rgb, obs.head, obs.face, s.crop_px)))
            t0 = clock.add("track", t0)
            if len(pending) >= s.embed_batch:
                self._embed(pending, clock)
                pending = []
        if last is None:
            raise MediaError(f"{path}: no decodable frames")
        end_time = max(last.time + (1.0 / info.fps if info.fps else 0.0), info.duration if stream.truncated_at is None else 0.0)
        shots.append(Shot(len(shots), shot_start[0], last.index, shot_start[1], end_time))
        tracks.extend(tracker.finish())
        self._embed(pending, clock)
        warning = None
        if stream.truncated_at is not None:
            warning = f"{path}: damaged or truncated, indexed the first {last.index + 1} of {info.frame_count} frames"
        tracks = [tr for tr in tracks if tr.observations]
        return FileResult(path, "video", info.width, info.height, info.fps, end_time, last.index + 1, sampled,
                          info.decoder, shots, tracks, warning)

    def _embed(self, pending: list[tuple[HeadTrack, Observation, HeadCrop]], clock: StageClock) -> None:
        """Embed queued crops in one batch; keep the best crop of each track as its thumbnail."""
        if not pending:
            return
        if self.crop_sink is not None:
            for track, obs, crop in pending:
                self.crop_sink(track, obs, crop)
        t0 = time.perf_counter()
        vectors = self.embedder.embed([c for _, _, c in pending])
        for i, (track, obs, crop) in enumerate(pending):
            obs.embeddings = {kind: v[i] for kind, v in vectors.items()}
            quality = obs.face.box.area * obs.face.score if obs.face is not None else 0.0
            best = track.observations[track.best_index]
            best_quality = best.face.box.area * best.face.score if best.face is not None else 0.0
            if track.thumbnail is None or quality > best_quality:
                # Kept as a small JPEG: a long video holds thousands of tracks until it commits.
                track.best_index = track.observations.index(obs)
                px = self.settings.thumbnail_px
                track.thumbnail = encode_jpeg(cv2.resize(crop.image, (px, px), interpolation=cv2.INTER_AREA))
        clock.add("embed", t0)

    # ----- storing -------------------------------------------------------------------------
    def rows(self, result: FileResult, stat: os.stat_result, digest: str, ids: dict[str, int]) -> VideoRows:
        """Rows for one analysed file, numbered from the library's next free ids."""
        video_id = ids["videos"]
        next_shot, next_track, next_obs, next_vec = ids["shots"], ids["tracks"], ids["observations"], ids["vectors"]
        shot_ids = {}
        shot_rows = []
        for sh in result.shots:
            shot_ids[sh.index] = next_shot
            shot_rows.append({"id": next_shot, "video_id": video_id, "shot_index": sh.index, "start_frame": sh.start_frame,
                              "end_frame": sh.end_frame, "start_time": sh.start_time, "end_time": sh.end_time})
            next_shot += 1
        track_rows, obs_rows, thumbs = [], [], {}
        vec: dict[str, tuple[list, list, list, list]] = {}
        for tr in result.tracks:
            track_id = next_track
            next_track += 1
            best = tr.observations[tr.best_index]
            thumbs[track_id] = tr.thumbnail
            track_rows.append({"id": track_id, "video_id": video_id, "shot_id": shot_ids.get(tr.shot_index, shot_ids[max(shot_ids)]),
                               "start_time": tr.start, "end_time": self._track_end(tr, result), "best_time": best.time,
                               "n_observations": len(tr.observations), "face_visible_share": tr.face_visible_share,
                               "thumbnail": f"{THUMBNAILS}/{track_id}.jpg"})
            for o in tr.observations:
                obs_rows.append({"id": next_obs, "track_id": track_id, "video_id": video_id, "frame_index": o.frame_index,
                                 "time": o.time, "x1": o.head.x1, "y1": o.head.y1, "x2": o.head.x2, "y2": o.head.y2,
                                 "face_visible": o.face_visible, "face_score": o.face.score if o.face else None})
                for kind, v in o.embeddings.items():
                    ids_, obs_, trk_, vs_ = vec.setdefault(kind, ([], [], [], []))
                    ids_.append(next_vec)
                    obs_.append(next_obs)
                    trk_.append(track_id)
                    vs_.append(v)
                    next_vec += 1
                next_obs += 1
        vectors = {k: (np.array(a, np.int64), np.array(b, np.int64), np.array(c, np.int64), np.stack(d).astype(np.float32))
                   for k, (a, b, c, d) in vec.items()}
        video = {"id": video_id, "path": str(result.path), "kind": result.kind, "fingerprint": digest, "size": stat.st_size,
                 "mtime": stat.st_mtime, "duration": result.duration, "fps": result.fps, "width": result.width,
                 "height": result.height, "frames_decoded": result.frames_decoded, "frames_sampled": result.frames_sampled,
                 "decoder": result.decoder, "indexed_at": time.time()}
        return VideoRows(video, shot_rows, track_rows, obs_rows, vectors, thumbs)

    def _track_end(self, track: HeadTrack, result: FileResult) -> float:
        """A track lasts until the next sample after its last sighting, within its shot."""
        if result.kind == "image":
            return track.end
        shot_end = next((sh.end_time for sh in result.shots if sh.index == track.shot_index), result.duration)
        return max(track.end, min(track.end + 1.0 / self.settings.sample_fps, shot_end))

    # ----- many files ----------------------------------------------------------------------
    def run(self, paths: Iterable[Path], report: Callable[[str], None] = print) -> IndexSummary:
        """Index files and folders; unchanged files are skipped, vanished ones under the folders removed."""
        if self.library is None:
            raise ValueError("Indexer.run needs a library")
        summary = IndexSummary()
        start = time.perf_counter()
        files, problems, folders = discover(paths)
        for p in problems:
            report(f"error: {p}")
        summary.failed.extend(problems)
        summary.files = len(files)
        with self.library.writer_lock():
            self.library.collect_orphan_thumbnails()
            for kind in self.embedder.kinds:
                self.library.vector_index(kind)
            stored = self.library.stored_videos()
            for path_str, sv in stored.items():
                if any(Path(path_str).is_relative_to(f) for f in folders) and not Path(path_str).exists():
                    self.library.remove_video(path_str)
                    summary.removed += 1
            overall = tqdm(files, desc="files", unit="file", disable=not self.progress, position=0)
            frame_bar = tqdm(desc="frames", unit="frame", disable=not self.progress, position=1, leave=False)
            last_save = time.monotonic()
            for path in overall:
                overall.set_postfix_str(path.name[-40:])
                try:
                    self._index_one(path, stored.get(str(path)), summary, frame_bar, report)
                except LibraryError:
                    raise  # the library cannot take more (disk full, I/O error): stop, nothing is lost
                except HeadsearchError as e:
                    summary.failed.append(str(e))
                    report(f"error: {e}")
                except OSError as e:
                    if e.errno == errno.ENOSPC:
                        raise LibraryError(f"{self.library.root}: disk full; the library keeps its last committed state (free space and run again)") from e
                    summary.failed.append(f"{path}: {e.strerror or e}")
                    report(f"error: {path}: {e.strerror or e}")
                if time.monotonic() - last_save > 60:
                    self.library.save_indexes()
                    last_save = time.monotonic()
            frame_bar.close()
            overall.close()
            self.library.save_indexes()
        summary.wall_seconds = time.perf_counter() - start
        return summary

    def _index_one(self, path: Path, stored, summary: IndexSummary, bar: tqdm, report: Callable[[str], None]) -> None:
        try:
            stat = path.stat()
        except OSError as e:
            raise MediaError(f"{path}: cannot read file ({e.strerror})") from e
        if not os.access(path, os.R_OK):
            raise MediaError(f"{path}: permission denied")
        if stored is not None and stored.size == stat.st_size and stored.mtime == stat.st_mtime:
            summary.skipped += 1
            return
        digest = fingerprint(path, stat.st_size)
        if stored is not None and stored.fingerprint == digest:
            summary.skipped += 1
            return
        clock = summary.clock
        result = self.analyse(path, clock, bar)
        if result.warning:
            summary.warnings.append(result.warning)
            report(f"warning: {result.warning}")
        t0 = time.perf_counter()
        self.library.store_video(lambda ids: self.rows(result, stat, digest, ids), replace_path=str(path))
        clock.add("store", t0)
        summary.indexed += 1
        summary.frames += result.frames_decoded
        summary.shots += len(result.shots)
        summary.tracks += len(result.tracks)
        summary.video_seconds += result.duration
