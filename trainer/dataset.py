"""The training-set builder of the paper's Sec. 4.4: videos -> shots -> head tracks -> segments ->
cross-video identities, plus labelled photo sets, written as a dataset folder (its format:
`trainer.dataset_format`) that the trainer reads.

Steps (`build_dataset` runs them in this order)
1. shots and 2. head tracks inside shots (`analyse_inputs`): `indexer.analysis.analyse_file` with its
   head crops kept (sampled at ``sample_fps``, default 4); each file's crops are written into its part
   (a 160 px head JPEG and, when the face is visible, the ArcFace-aligned 112 px face) as soon as the
   file is analysed, so memory holds one file's crops at a time.
3. Segment filtering (`video_segments`): a track is a *segment* when it has at least ``min_frames``
   observations, at least ``min_visible`` of them with a visible face and at least ``min_invisible``
   without (paper: 5, 0.2, 0.1). Its *best-face* frame is the face-visible observation whose face box
   covers the largest share of the head box, and that share must reach ``best_face_ratio``.
   The paper asks for a face covering more than half of the head box; our head boxes are squares
   of 1.75x the face height (``headsearch.detection.faces.head_box_from_face``), so the share is set by the
   face box's aspect ratio alone: at most 1/(1.75^2 * 1.15) = 0.284, about 0.25-0.28 for a frontal
   face, 0.18-0.22 for a strong profile (narrow face box). ``DEFAULT_BEST_FACE_RATIO`` = 0.22 keeps
   near-frontal best faces, the paper's intent, in our geometry.
4. Identities across videos (`cluster_identities`): agglomerative clustering (average linkage on cosine
   similarity) of the segments' best-face teacher embeddings, merging while the similarity is at least
   ``cluster_threshold``, never merging two segments seen in the same sampled frame (cannot-link:
   same video, same shot, a common frame index). Defaults per teacher in its spec (``ModelSpec.cluster_threshold``)
   (dlib-resnet 0.95: see there).
   Relations: same segment = same appearance state (R1), same identity other segment (R2), other
   identity (R3).
5. The dataset folder (`assemble`): crops, teacher vectors, manifest, videos.json, contact sheets.

Labelled sets (``--labels``, CSV files read by ``headsearch.evaluation.labels.read_label_set``) add one
sample per photo: its largest head, identity ``label:<identity>``, state
``label:<identity>/<appearance_state or default>``. A labelled video is a one-person video: its
person's segments (the longest and those whose best face matches it) take its identity and state,
so clips of one person in one look are one state across clips (R1), and other people in it are
left out. Labelled samples are never merged with video identities.

Resumable: each input file is analysed into ``DIR/parts/<key>/`` (written to ``<key>.tmp`` and
renamed when complete; a rerun skips files whose part exists and matches the file and the
settings). Filtering, clustering and the output files are rebuilt from the parts on every run,
so changing a filter option needs no re-analysis. ``heads/`` and ``faces/`` hold hard links to the
parts' JPEGs (copies where links are impossible).
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import shutil
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import cv2
import numpy as np
from tqdm import tqdm

from headsearch.basics.errors import HeadsearchError, NoHeadFound, is_disk_full
from headsearch.basics.failures import unexpected_error_line
from headsearch.basics.images import encode_jpeg
from headsearch.basics.media import VIDEO_EXTENSIONS
from headsearch.basics.settings import IndexSettings
from headsearch.detection.crops import crop_from_image
from headsearch.evaluation.labels import read_label_set
from headsearch.evaluation.metrics import relation_counts
from headsearch.people.clustering import average_linkage, blocked_cluster_pairs
from schemas.records import HeadTrack, MediaKind, ModelInfo, VectorKind
from trainer.dataset_format import (
    CONTACT,
    FACE_PX,
    FACES,
    HEAD_PX,
    HEADS,
    JPEG_QUALITY,
    PART_FACES,
    PART_HEADS,
    PART_META,
    PART_TEACHER,
    PART_TEACHER_HEAD,
    PARTS,
    DatasetError,
    Sample,
    contact_sheet_name,
    crop_name,
    face_crop_path,
    fresh_dir,
    head_crop_path,
    save_vectors,
    swap_dir,
    write_manifest,
    write_summary,
    write_teacher,
    write_videos,
)

if TYPE_CHECKING:
    from headsearch.detection.faces import FaceDetector
    from headsearch.models import Embedder
    from indexer.analysis import FrameProgress

PART_VERSION = 1
DEFAULT_FPS = 4.0
DEFAULT_MIN_FRAMES = 5
DEFAULT_MIN_VISIBLE = 0.2
DEFAULT_MIN_INVISIBLE = 0.1
DEFAULT_BEST_FACE_RATIO = 0.22
DEFAULT_TEACHER = "sface"  # the face model whose vectors cluster identities and are the distillation targets
FALLBACK_CLUSTER_THRESHOLD = 0.5

REJECT_REASONS = ("too_few_frames", "too_few_face_visible", "too_few_face_invisible", "no_best_face")

Report = Callable[[str], None]


@dataclass(frozen=True)
class DatasetOptions:
    sample_fps: float = DEFAULT_FPS
    min_frames: int = DEFAULT_MIN_FRAMES
    min_visible: float = DEFAULT_MIN_VISIBLE
    min_invisible: float = DEFAULT_MIN_INVISIBLE
    best_face_ratio: float = DEFAULT_BEST_FACE_RATIO
    cluster_threshold: float | None = None  # None: the teacher's default


def default_cluster_threshold(teacher: str | ModelInfo) -> float:
    """The teacher's cosine of best-face vectors at which segments are one person, as its spec says
    (`ModelSpec.cluster_threshold`; the measurements behind each are in its module), else a fallback."""
    from headsearch.models.registry import find_spec

    spec = find_spec(teacher)
    return spec.cluster_threshold if spec is not None and spec.cluster_threshold is not None else FALLBACK_CLUSTER_THRESHOLD


# ----------------------------------------------------------------------------------------------
# Segment filtering (works on dict observations from the parts, or on schemas.records objects)


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


# ----------------------------------------------------------------------------------------------
# Clustering with cannot-link constraints


@dataclass
class ClusterResult:
    labels: np.ndarray  # (n,) int, clusters numbered by first member
    blocked_pairs: int  # final cluster pairs above the threshold kept apart by a cannot-link


def cluster_with_cannot_link(vectors: np.ndarray, threshold: float, cannot_link: Iterable[tuple[int, int]] = ()) -> ClusterResult:
    """Average-linkage agglomerative clustering on cosine similarity (`headsearch.people.clustering`), merging
    the most similar pair of clusters while their mean pairwise similarity is >= threshold and no
    cannot-link pair joins them. O(n^2) memory, O(n^3) worst-case time: fine for thousands of segments."""
    v = np.asarray(vectors, dtype=np.float64)
    n = len(v)
    if n == 0:
        return ClusterResult(np.zeros(0, np.int64), 0)
    v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    blocked = np.zeros((n, n), bool)
    for a, b in cannot_link:
        blocked[a, b] = blocked[b, a] = True
    labels = average_linkage(v, np.ones(n), threshold, blocked)
    return ClusterResult(labels, blocked_cluster_pairs(v, labels, threshold, blocked))


# ----------------------------------------------------------------------------------------------
# Parts: one analysed input file


def part_key(path: Path) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", path.name)[:60]
    return f"{stem}-{hashlib.blake2b(str(path).encode(), digest_size=5).hexdigest()}"


def part_settings(settings: IndexSettings, teacher: ModelInfo) -> dict:
    """What a part depends on besides its file: a part made with other settings is analysed again. A teacher with
    head vectors adds "teacher_head" (so parts of face teachers, which have none, keep their key)."""
    key = {"part_version": PART_VERSION, "sample_fps": settings.sample_fps, "crop_px": settings.crop_px,
           "head_px": HEAD_PX, "face_px": FACE_PX, "teacher": [teacher.name, teacher.version]}
    if VectorKind.HEAD in teacher.kinds:
        key["teacher_head"] = teacher.dim_of(VectorKind.HEAD)
    return key


@dataclass
class Part:
    """One analysed input file, as stored under parts/<key>/."""

    key: str
    folder: Path
    meta: dict  # meta.json: the file's stamp and settings, shots, tracks with their observations (dicts)

    @classmethod
    def load(cls, folder: Path, path: Path, settings_key: dict) -> Part | None:
        """The complete part for this file and these settings, or None."""
        try:
            meta = json.loads((folder / PART_META).read_text())
            stat = path.stat()
        except (OSError, ValueError):
            return None
        if meta.get("settings") != settings_key or meta.get("size") != stat.st_size or meta.get("mtime") != stat.st_mtime:
            return None
        return cls(folder.name, folder, meta)

    @property
    def tracks(self) -> list[dict]:
        return self.meta["tracks"]

    @property
    def analysis_seconds(self) -> float:
        return sum(self.meta.get("clock", {}).values())

    @functools.cached_property
    def teacher(self) -> np.ndarray:
        """Teacher vectors of the part's face-visible observations (rows named by their "teacher_row")."""
        return np.load(self.folder / PART_TEACHER)

    @functools.cached_property
    def teacher_head(self) -> np.ndarray | None:
        """Teacher head vectors of the part's observations (rows named by their "teacher_head_row"); None when the
        teacher has none."""
        path = self.folder / PART_TEACHER_HEAD
        return np.load(path) if path.is_file() else None

    def video_entry(self) -> dict:
        """The file's line in videos.json."""
        m = self.meta
        return {"part": self.key, "kind": m["kind"], "duration": m["duration"], "fps": m["fps"], "width": m["width"],
                "height": m["height"], "tracks": len(m["tracks"]),
                "shots": [{"index": s[0], "start_frame": s[1], "end_frame": s[2], "start_time": s[3], "end_time": s[4]}
                          for s in m["shots"]]}


@dataclass
class Analyser:
    """What analysing an input file needs."""

    settings: IndexSettings
    detector: FaceDetector
    embedder: Embedder
    settings_key: dict  # `part_settings`, recorded in each part
    error_log: Path | None = None  # folder for the traceback of a file's unexpected error (the dataset folder)


def _decode_rgb(jpeg: bytes) -> np.ndarray:
    return cv2.cvtColor(cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)


def _used_tracks(path: Path, kind: MediaKind, tracks: list[HeadTrack]) -> list[HeadTrack]:
    """The tracks a part keeps: all of a video's, the largest head of a photo."""
    if kind != MediaKind.IMAGE:
        return tracks
    if not tracks:
        raise NoHeadFound(f"{path}: no head found")
    return [max(tracks, key=lambda t: t.observations[0].head.area)]


def _write_part_crops(folder: Path, tracks: list[HeadTrack]) -> tuple[list[dict], list[np.ndarray], list[np.ndarray]]:
    """Write the tracks' head crops (and aligned faces) into a part; their rows for meta.json, teacher vectors (of the
    faces) and teacher head vectors (of the observations that have one: all of them for a whole-head teacher)."""
    from headsearch.detection.faces import yaw_hint
    from headsearch.models import align_face

    (folder / PART_HEADS).mkdir(parents=True, exist_ok=True)
    (folder / PART_FACES).mkdir(parents=True, exist_ok=True)
    rows, vectors, head_vectors = [], [], []
    n = 0
    for tr in tracks:
        obs_rows = []
        for o in tr.observations:
            rgb = _decode_rgb(o.crop_jpeg)
            head = f"{PART_HEADS}/{crop_name(n)}"
            (folder / head).write_bytes(encode_jpeg(cv2.resize(rgb, (HEAD_PX, HEAD_PX), interpolation=cv2.INTER_AREA), JPEG_QUALITY))
            face, teacher_row = None, -1
            if o.face is not None:
                face = f"{PART_FACES}/{crop_name(n)}"
                (folder / face).write_bytes(encode_jpeg(align_face(crop_from_image(rgb, o.head, o.face), FACE_PX), JPEG_QUALITY))
                teacher_row = len(vectors)
                vectors.append(np.asarray(o.embeddings[VectorKind.ID], np.float32))
            head_row = -1
            if VectorKind.HEAD in o.embeddings:
                head_row = len(head_vectors)
                head_vectors.append(np.asarray(o.embeddings[VectorKind.HEAD], np.float32))
            n += 1
            obs_rows.append({"frame": int(o.frame_index), "time": float(o.time), "head": list(map(float, o.head.as_tuple())),
                             "face": None if o.face is None else list(map(float, o.face.box.as_tuple())),
                             "pose": None if o.face is None else yaw_hint(o.face), "head_crop": head,
                             "face_crop": face, "teacher_row": teacher_row, "teacher_head_row": head_row})
        rows.append({"shot": int(tr.shot_index), "obs": obs_rows})
    return rows, vectors, head_vectors


def analyse_to_part(analyser: Analyser, path: Path, part_dir: Path, progress: FrameProgress | None) -> None:
    """Analyse one file into part_dir (atomically: a .tmp folder renamed when complete)."""
    from indexer.analysis import analyse_file

    tmp = part_dir.with_name(part_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        a = analyser
        result = analyse_file(path, a.settings, a.detector, a.embedder, keep_crops=True, progress=progress)
        rows, vectors, head_vectors = _write_part_crops(tmp, _used_tracks(path, result.kind, result.tracks))
        save_vectors(tmp / PART_TEACHER, vectors, a.embedder.dim)
        if VectorKind.HEAD in a.embedder.kinds:
            save_vectors(tmp / PART_TEACHER_HEAD, head_vectors, a.embedder.dims[VectorKind.HEAD])
        meta = {"path": str(path), "kind": str(result.kind), "size": result.stamp.size, "mtime": result.stamp.mtime,
                "settings": a.settings_key, "duration": result.duration, "fps": result.fps, "width": result.width,
                "height": result.height, "frames_decoded": result.frames_decoded, "frames_sampled": result.frames_sampled,
                "warning": result.warning, "clock": dict(result.stage_seconds),
                "shots": [[s.index, s.start_frame, s.end_frame, s.start_time, s.end_time] for s in result.shots], "tracks": rows}
        (tmp / PART_META).write_text(json.dumps(meta))
        if part_dir.exists():
            shutil.rmtree(part_dir)
        os.replace(tmp, part_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# ----------------------------------------------------------------------------------------------
# The builder


@dataclass
class LabelPhoto:
    path: Path
    identity: str  # "label:<name>"
    state: str  # "label:<name>/<state or default>"


@dataclass
class Inputs:
    """What a build reads: video files and labelled photos."""

    videos: list[Path]
    photos: list[LabelPhoto]
    unreadable: int  # paths that could not be read at all
    labelled_videos: dict[Path, LabelPhoto] = field(default_factory=dict)  # one-person videos with a label

    def items(self) -> list[tuple[Path, str]]:
        """(file, source) for every input, videos first; source is "video" or "photo"."""
        return [(f, "video") for f in self.videos] + [(p.path, "photo") for p in self.photos]


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


@dataclass
class BuildSummary:
    videos: int = 0
    videos_analysed: int = 0
    videos_reused: int = 0
    videos_failed: int = 0
    photos: int = 0
    photos_failed: int = 0
    failed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    shots: int = 0
    tracks: int = 0
    segments_kept: int = 0
    segments_rejected: dict = field(default_factory=lambda: {r: 0 for r in REJECT_REASONS})
    video_identities: int = 0
    label_identities: int = 0
    identities: int = 0
    states: int = 0
    samples: int = 0
    samples_face_visible: int = 0
    samples_video: int = 0
    samples_photo: int = 0
    teacher_rows: int = 0
    teacher_head_rows: int = 0  # samples with a teacher head vector (all, for a whole-head teacher; 0 for a face teacher)
    pairs: dict = field(default_factory=dict)
    cannot_link_pairs: int = 0
    cannot_link_blocked: int = 0
    cluster_threshold: float = 0.0
    labelled_video_segments: int = 0  # segments of labelled one-person videos that took the label
    labelled_video_segments_dropped: int = 0  # other people's segments in labelled videos, left out
    label_rows_skipped: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    teacher: dict = field(default_factory=dict)
    video_seconds: float = 0.0
    analysis_seconds: float = 0.0  # time spent analysing the inputs, over all runs that made the parts
    wall_seconds: float = 0.0  # this run

    def line(self) -> str:
        rej = sum(self.segments_rejected.values())
        return (f"{self.videos} videos ({self.videos_failed} failed), {self.photos} photos, {self.tracks} tracks, "
                f"{self.segments_kept} segments ({rej} tracks rejected), {self.identities} identities, "
                f"{self.samples} samples ({self.teacher_rows} with teacher vectors), {self.wall_seconds:.1f} s")

    def fail(self, source: str, message: str, report: Report) -> None:
        """Count and report an input that could not be used."""
        self.failed.append(message)
        if source == "video":
            self.videos_failed += 1
        else:
            self.photos_failed += 1
        report(f"error: {message}")


def collect_labels(csvs: Sequence[Path], summary: BuildSummary, report: Report) -> tuple[list[LabelPhoto], dict[Path, LabelPhoto]]:
    """The labelled photos, and the labelled one-person videos by path (their person's segments take the label)."""
    photos, videos, seen = [], {}, set()
    skipped = Counter()
    for csv_path in csvs:
        ls = read_label_set(Path(csv_path))
        for reason, k in ls.skipped.items():
            skipped[reason] += k
        for f in ls.files:
            p = f.path.resolve()
            if p in seen:
                skipped["duplicate file"] += 1
                continue
            seen.add(p)
            identity = f"label:{f.identity}"
            entry = LabelPhoto(p, identity, f"{identity}/{f.state or 'default'}")
            if f.kind == MediaKind.IMAGE:
                photos.append(entry)
            else:
                videos[p] = entry
        line = ls.skipped_line()
        if line:
            report(f"note: {line}")
    summary.label_rows_skipped = dict(skipped)
    return photos, videos


def gather_inputs(videos: Sequence[Path], labels: Sequence[Path], summary: BuildSummary, report: Report) -> Inputs:
    """The video files under `videos` and the photos of the labelled sets; DatasetError when there are none."""
    from indexer.pipeline import discover

    files, problems, _ = discover(videos)
    for p in problems:
        report(f"error: {p}")
        summary.failed.append(p)
    video_files = [f for f in files if f.suffix.lower() in VIDEO_EXTENSIONS]
    ignored = len(files) - len(video_files)
    if ignored:
        report(f"note: {ignored} photos among the videos ignored (give photos through --labels)")
    photos, labelled_videos = collect_labels(labels, summary, report)
    video_files = list(dict.fromkeys(video_files + list(labelled_videos)))
    summary.videos = len(video_files)
    summary.videos_failed = len(problems)
    if not video_files and not photos:
        raise DatasetError("nothing to build from: no readable videos or labelled photos were given")
    return Inputs(video_files, photos, len(problems), labelled_videos)


def _analysed_part(analyser: Analyser, path: Path, source: str, part_dir: Path, summary: BuildSummary, report: Report,
                   progress: FrameProgress | None) -> Part | None:
    """The part of one input: reused when complete, else analysed now; None (reported) when the file fails."""
    part = Part.load(part_dir, path, analyser.settings_key)
    if part is not None:
        if source == "video":
            summary.videos_reused += 1
        return part
    try:
        if not os.access(path, os.R_OK):
            raise HeadsearchError(f"{path}: cannot read file" if path.exists() else f"{path}: no such file")
        analyse_to_part(analyser, path, part_dir, progress)
    except HeadsearchError as e:
        summary.fail(source, str(e), report)
        return None
    except OSError as e:
        if is_disk_full(e):
            raise
        summary.fail(source, f"{path}: {e.strerror or e}", report)
        return None
    except Exception as e:  # noqa: BLE001 - whatever one file does, the build goes on (its part was removed)
        summary.fail(source, unexpected_error_line(path, e, analyser.error_log), report)
        return None
    part = Part.load(part_dir, path, analyser.settings_key)
    if source == "video":
        summary.videos_analysed += 1
    if part is None:
        summary.fail(source, f"{path}: changed while being analysed", report)
    return part


def analyse_inputs(inputs: Inputs, parts_dir: Path, analyser: Analyser, summary: BuildSummary, report: Report,
                   progress: bool) -> dict[Path, Part]:
    """Steps 1-2: every input analysed into its part under `parts_dir` (or its complete part reused)."""
    parts: dict[Path, Part] = {}
    overall = tqdm(inputs.items(), desc="files", unit="file", disable=not progress, position=0)
    frame_bar = tqdm(desc="frames", unit="frame", disable=not progress, position=1, leave=False)
    for path, source in overall:
        overall.set_postfix_str(path.name[-40:])
        part = _analysed_part(analyser, path, source, parts_dir / part_key(path), summary, report,
                              frame_bar if source == "video" else None)
        if part is None:
            continue
        warning = part.meta.get("warning")
        if warning:
            summary.warnings.append(warning)
            report(f"warning: {warning}")
        parts[path] = part
        summary.analysis_seconds += part.analysis_seconds
    frame_bar.close()
    overall.close()
    if not parts:
        raise DatasetError(f"nothing usable: none of the {len(inputs.items()) + inputs.unreadable} inputs could be read "
                           "(see the errors above)")
    return parts


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


def label_video_segments(segments: list[Segment], labelled: dict[Path, LabelPhoto], threshold: float,
                         summary: BuildSummary) -> list[Segment]:
    """Give the labelled person's segments of each labelled one-person video its identity and look; return the
    other segments (unlabelled videos) for clustering. The labelled person is the longest segment and those whose
    best face matches it (cosine >= threshold); other people in a labelled video are left out."""
    rest, by_video = [], defaultdict(list)
    for seg in segments:
        (by_video[Path(seg.video)] if Path(seg.video) in labelled else rest).append(seg)
    for path, segs in by_video.items():
        label = labelled[path]
        main = max(segs, key=lambda x: len(x.obs))
        ref = main.best_teacher_vector / max(float(np.linalg.norm(main.best_teacher_vector)), 1e-12)
        for seg in segs:
            v = seg.best_teacher_vector
            if seg is main or float(np.dot(ref, v / max(float(np.linalg.norm(v)), 1e-12))) >= threshold:
                seg.identity, seg.state = label.identity, label.state
            else:
                summary.labelled_video_segments_dropped += 1
    summary.labelled_video_segments = sum(1 for segs in by_video.values() for x in segs if x.identity)
    return rest


def cannot_link_pairs(segments: Sequence[Segment]) -> list[tuple[int, int]]:
    """Pairs of segments seen in one sampled frame of one shot: two people, however alike."""
    cannot = []
    by_shot: dict[tuple[str, int], list[int]] = defaultdict(list)
    for i, s in enumerate(segments):
        by_shot[(s.part.key, s.shot)].append(i)
    for members in by_shot.values():
        frames = {i: segments[i].frames for i in members}
        for x, i in enumerate(members):
            for j in members[x + 1:]:
                if frames[i] & frames[j]:
                    cannot.append((i, j))
    return cannot


def cluster_identities(segments: Sequence[Segment], threshold: float, dim: int, summary: BuildSummary) -> None:
    """Step 4: name each video segment's identity (a cluster of best faces) and state (the segment)."""
    vectors = np.stack([s.best_teacher_vector for s in segments]) if segments else np.zeros((0, dim))
    cannot = cannot_link_pairs(segments)
    summary.cannot_link_pairs = len(cannot)
    clusters = cluster_with_cannot_link(vectors, threshold, cannot)
    summary.cannot_link_blocked = clusters.blocked_pairs
    width = max(4, len(str(int(clusters.labels.max()) + 1 if len(clusters.labels) else 0)))
    for s, c in zip(segments, clusters.labels, strict=True):
        s.identity = f"vid{int(c) + 1:0{width}d}"
        s.state = f"{s.identity}/{s.name}"
    summary.video_identities = len(set(clusters.labels.tolist()))


def build_dataset(videos: Sequence[Path], out: Path, labels: Sequence[Path] = (), teacher: str | None = None,
                  opts: DatasetOptions = DatasetOptions(), progress: bool = True, report: Report = print) -> BuildSummary:
    """Build (or finish building) the dataset folder `out`; see the module docstring."""
    from headsearch.detection.faces import FaceDetector
    from headsearch.models import load_embedder

    start = time.perf_counter()
    summary = BuildSummary()
    out = Path(out).expanduser()
    inputs = gather_inputs(videos, labels, summary, report)

    embedder = load_embedder(teacher or DEFAULT_TEACHER)
    model = embedder.describe()
    threshold = opts.cluster_threshold if opts.cluster_threshold is not None else default_cluster_threshold(model)
    summary.cluster_threshold = threshold
    summary.options = {**asdict(opts), "cluster_threshold": threshold}
    summary.teacher = model.to_dict()
    settings = IndexSettings(sample_fps=opts.sample_fps)
    analyser = Analyser(settings, FaceDetector.from_settings(settings), embedder, part_settings(settings, model), error_log=out)
    parts_dir = out / PARTS
    try:
        parts_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DatasetError(f"{out}: cannot create the output folder ({e.strerror or e})") from e
    for stale in parts_dir.glob("*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)

    parts = analyse_inputs(inputs, parts_dir, analyser, summary, report, progress)
    segments = video_segments(inputs.videos, parts, opts, summary)
    photos = photo_segments(inputs.photos, parts, summary)
    if not segments and not photos:
        raise DatasetError("no usable segments or photos: every track was rejected by the filters "
                           f"({', '.join(f'{k} {v}' for k, v in summary.segments_rejected.items() if v) or 'no tracks'}); "
                           "try --min-invisible 0, a lower --min-frames or a higher --fps")
    unlabelled = label_video_segments(segments, inputs.labelled_videos, threshold, summary)
    cluster_identities(unlabelled, threshold, embedder.dim, summary)
    segments = [x for x in segments if x.identity]
    head_dim = embedder.dims[VectorKind.HEAD] if VectorKind.HEAD in embedder.kinds else 0
    assemble(out, segments + photos, parts, summary.teacher, embedder.dim, summary, head_dim)
    summary.wall_seconds = time.perf_counter() - start
    write_summary(out, asdict(summary))
    return summary


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def assemble(out: Path, segments: list[Segment], parts: dict[Path, Part], teacher: dict, dim: int, summary: BuildSummary,
             head_dim: int = 0) -> None:
    """Step 5: write heads/, faces/, teacher.npy (teacher_head.npy with `head_dim`), teacher.json, manifest.parquet,
    videos.json and contact/."""
    heads, faces = fresh_dir(out / HEADS), fresh_dir(out / FACES)
    samples: list[Sample] = []
    vectors, head_vectors = [], []
    for s in segments:
        for o in s.obs:
            sid = len(samples)
            _link(s.part.folder / o["head_crop"], heads / crop_name(sid))
            face_crop, ti = None, -1
            if o["face_crop"] is not None:
                _link(s.part.folder / o["face_crop"], faces / crop_name(sid))
                face_crop = face_crop_path(sid)
                ti = len(vectors)
                vectors.append(s.part.teacher[o["teacher_row"]])
            hi = -1
            if head_dim and o.get("teacher_head_row", -1) >= 0:
                hi = len(head_vectors)
                head_vectors.append(s.part.teacher_head[o["teacher_head_row"]])
            samples.append(Sample(sample_id=sid, identity=s.identity, state=s.state, source=s.source, video=s.video,
                                  segment=s.name, shot=s.shot, frame_index=o["frame"], time=o["time"],
                                  pose_hint=math.nan if o["pose"] is None else o["pose"], face_visible=o["face"] is not None,
                                  head_crop=head_crop_path(sid), face_crop=face_crop, teacher_index=ti, teacher_head_index=hi))
    swap_dir(heads, out / HEADS)
    swap_dir(faces, out / FACES)
    write_teacher(out, vectors, teacher, dim, head_vectors if head_dim else None, head_dim)
    summary.samples = write_manifest(out, samples)
    write_videos(out, {p.meta["path"]: p.video_entry() for p in parts.values()})
    identities, states = [x.identity for x in samples], [x.state for x in samples]
    summary.samples_face_visible = sum(x.face_visible for x in samples)
    summary.samples_video = sum(x.source == "video" for x in samples)
    summary.samples_photo = sum(x.source == "photo" for x in samples)
    summary.teacher_rows = len(vectors)
    summary.teacher_head_rows = len(head_vectors)
    summary.identities = len(set(identities))
    summary.states = len(set(states))
    summary.pairs = relation_counts(identities, states)
    write_contact_sheets(out, samples)


# ----------------------------------------------------------------------------------------------
# Contact sheets

THUMB = 64
PER_ROW = 12
MAX_ROWS = 40
LABEL_W = 300
_FONT = cv2.FONT_HERSHEY_SIMPLEX


def write_contact_sheets(out: Path, samples: Sequence[Sample]) -> None:
    """contact/<identity>.png: one row per state (segment), up to PER_ROW crops spread over it,
    green frame = face visible, red = not, labelled with the state, file, time span and count."""
    contact = fresh_dir(out / CONTACT)
    rows_by_identity: dict[str, dict[str, list[Sample]]] = defaultdict(dict)
    for s in samples:
        rows_by_identity[s.identity].setdefault(s.state, []).append(s)
    for ident, states in rows_by_identity.items():
        cv2.imwrite(str(contact / contact_sheet_name(ident)), _contact_sheet(out, ident, states))
    swap_dir(contact, out / CONTACT)


def _contact_sheet(out: Path, ident: str, states: dict[str, list[Sample]]) -> np.ndarray:
    shown = list(states.items())[:MAX_ROWS]
    header = 28
    h = header + len(shown) * (THUMB + 6) + (18 if len(states) > MAX_ROWS else 0)
    w = LABEL_W + PER_ROW * (THUMB + 4)
    sheet = np.full((h, w, 3), 255, np.uint8)
    n_samples = sum(len(v) for v in states.values())
    cv2.putText(sheet, f"{ident}: {len(states)} states, {n_samples} samples", (6, 19), _FONT, 0.55, (0, 0, 0), 1, cv2.LINE_AA)
    for r, (state, members) in enumerate(shown):
        _draw_state_row(sheet, out, header + r * (THUMB + 6), state, members)
    if len(states) > MAX_ROWS:
        cv2.putText(sheet, f"... {len(states) - MAX_ROWS} more states", (6, h - 5), _FONT, 0.45, (0, 0, 0), 1, cv2.LINE_AA)
    return sheet


def _draw_state_row(sheet: np.ndarray, out: Path, y: int, state: str, members: list[Sample]) -> None:
    """One state's label and up to PER_ROW of its crops, spread over it, at height y of the sheet."""
    pick = members if len(members) <= PER_ROW else [members[round(k * (len(members) - 1) / (PER_ROW - 1))] for k in range(PER_ROW)]
    times = [s.time for s in members]
    label1 = state.split("/", 1)[-1][-38:]
    label2 = f"{Path(members[0].video).name[-24:]}  {min(times):.1f}-{max(times):.1f}s  n={len(members)}"
    cv2.putText(sheet, label1, (6, y + 24), _FONT, 0.4, (0, 0, 0), 1, cv2.LINE_AA)
    cv2.putText(sheet, label2, (6, y + 44), _FONT, 0.4, (80, 80, 80), 1, cv2.LINE_AA)
    for c, s in enumerate(pick):
        img = cv2.imread(str(out / s.head_crop))
        if img is None:
            continue
        img = cv2.resize(img, (THUMB - 4, THUMB - 4), interpolation=cv2.INTER_AREA)
        x = LABEL_W + c * (THUMB + 4)
        color = (0, 160, 0) if s.face_visible else (0, 0, 200)
        sheet[y:y + THUMB, x:x + THUMB] = color
        sheet[y + 2:y + THUMB - 2, x + 2:x + THUMB - 2] = img
