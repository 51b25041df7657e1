"""The training-set builder of the paper's Sec. 4.4: videos -> shots -> head tracks -> segments ->
cross-video identities, plus labelled photo sets, written as a folder the trainer reads.

Steps
1. shots and 2. head tracks inside shots: ``Indexer.analyse`` (sampled at ``sample_fps``, default 4);
   every head crop streams through the indexer's ``crop_sink`` and is written to disk at once
   (a 160 px head JPEG and, when the face is visible, the ArcFace-aligned 112 px face), so memory
   stays bounded whatever the video's length.
3. Segment filtering: a track is a *segment* when it has at least ``min_frames`` observations, at
   least ``min_visible`` of them with a visible face and at least ``min_invisible`` without
   (paper: 5, 0.2, 0.1). Its *best-face* frame is the face-visible observation whose face box
   covers the largest share of the head box, and that share must reach ``best_face_ratio``.
   The paper asks for a face covering more than half of the head box; our head boxes are squares
   of 1.75x the face height (``headsearch.detect.head_box_from_face``), so the share is set by the
   face box's aspect ratio alone: at most 1/(1.75^2 * 1.15) = 0.284, about 0.25-0.28 for a frontal
   face, 0.18-0.22 for a strong profile (narrow face box). ``DEFAULT_BEST_FACE_RATIO`` = 0.22 keeps
   near-frontal best faces, the paper's intent, in our geometry.
4. Identities across videos: agglomerative clustering (average linkage on cosine similarity) of the
   segments' best-face teacher embeddings, merging while the similarity is at least
   ``cluster_threshold``, never merging two segments seen in the same sampled frame (cannot-link:
   same video, same shot, a common frame index). Defaults per teacher in ``DEFAULT_CLUSTER_THRESHOLDS``
   (dlib-resnet 0.95: see there).
   Relations: same segment = same appearance state (R1), same identity other segment (R2), other
   identity (R3).

Labelled photo sets (``--labels``, the bench's CSV format read by ``headsearch.bench.read_label_set``)
add one sample per photo: its largest head, identity ``label:<identity>``, state
``label:<identity>/<appearance_state or default>``. They are never merged with video identities.

Resumable: each input file is analysed into ``DIR/parts/<key>/`` (written to ``<key>.tmp`` and
renamed when complete; a rerun skips files whose part exists and matches the file and the
settings). Filtering, clustering and the output files are rebuilt from the parts on every run,
so changing a filter option needs no re-analysis. ``heads/`` and ``faces/`` hold hard links to the
parts' JPEGs (copies where links are impossible).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import cv2
import numpy as np
from tqdm import tqdm

from headsearch.errors import HeadsearchError
from headsearch.files import atomic_write
from headsearch.images import encode_jpeg
from headsearch.settings import VIDEO_EXTENSIONS, IndexSettings

PART_VERSION = 1
DEFAULT_FPS = 4.0
DEFAULT_MIN_FRAMES = 5
DEFAULT_MIN_VISIBLE = 0.2
DEFAULT_MIN_INVISIBLE = 0.1
DEFAULT_BEST_FACE_RATIO = 0.22
# Cosine similarity of best-face teacher embeddings at which segments are one person, per teacher
# name prefix. dlib-resnet, measured on the best faces of the 32 segments of shared/data (fps 4):
# different people mostly 0.75-0.90 but up to 0.938 for large faces (two different young men,
# LivePortrait d20 vs video-retalking 1; three different women d3/s18/s32 at 0.925-0.933, checked on
# the contact sheets) and 0.944 for small (< 64 px) crowd faces; the same person across shots
# 0.955-0.965. 0.92 merged those different people, so 0.95: dlib scores faces of one ethnicity and of
# low resolution high, and a false merge (R3 pairs labelled R2) hurts training more than a false split.
# ArcFace (insightface) 0.45: its usual verification range (same ~0.5+, different < 0.3), not measured here.
DEFAULT_CLUSTER_THRESHOLDS = {"dlib-resnet": 0.95, "arcface-onnx": 0.45}
FALLBACK_CLUSTER_THRESHOLD = 0.5
HEAD_PX = 160
FACE_PX = 112
JPEG_QUALITY = 92

REJECT_REASONS = ("too_few_frames", "too_few_face_visible", "too_few_face_invisible", "no_best_face")

Report = Callable[[str], None]


class DatasetError(HeadsearchError):
    """The dataset cannot be built (nothing usable in the inputs, a bad output folder)."""


@dataclass(frozen=True)
class DatasetOptions:
    sample_fps: float = DEFAULT_FPS
    min_frames: int = DEFAULT_MIN_FRAMES
    min_visible: float = DEFAULT_MIN_VISIBLE
    min_invisible: float = DEFAULT_MIN_INVISIBLE
    best_face_ratio: float = DEFAULT_BEST_FACE_RATIO
    cluster_threshold: float | None = None  # None: the teacher's default


def default_cluster_threshold(teacher_name: str) -> float:
    for prefix, value in DEFAULT_CLUSTER_THRESHOLDS.items():
        if teacher_name.startswith(prefix):
            return value
    return FALLBACK_CLUSTER_THRESHOLD


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
    """Average-linkage agglomerative clustering on cosine similarity, merging the most similar pair
    of clusters while their mean pairwise similarity is >= threshold and no cannot-link pair joins
    them. O(n^2) memory, O(n^3) worst-case time: fine for thousands of segments."""
    v = np.asarray(vectors, dtype=np.float64)
    n = len(v)
    if n == 0:
        return ClusterResult(np.zeros(0, np.int64), 0)
    v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    sums = v @ v.T
    sizes = np.ones(n)
    blocked = np.zeros((n, n), bool)
    for a, b in cannot_link:
        blocked[a, b] = blocked[b, a] = True
    alive = np.ones(n, bool)
    parent = np.arange(n)
    avg = sums.copy()
    np.fill_diagonal(avg, -np.inf)
    avg[blocked] = -np.inf
    while True:
        idx = int(np.argmax(avg))
        a, b = divmod(idx, n)
        if not avg[a, b] >= threshold:
            break
        a, b = min(a, b), max(a, b)
        sums[a, :] += sums[b, :]
        sums[:, a] = sums[a, :]
        sizes[a] += sizes[b]
        blocked[a, :] |= blocked[b, :]
        blocked[:, a] = blocked[a, :]
        alive[b] = False
        parent[parent == b] = a
        row = sums[a] / (sizes[a] * sizes)
        row[~alive | blocked[a]] = -np.inf
        row[a] = -np.inf
        avg[a, :] = row
        avg[:, a] = row
        avg[b, :] = -np.inf
        avg[:, b] = -np.inf
    roots = {}
    labels = np.array([roots.setdefault(int(p), len(roots)) for p in parent], np.int64)
    idx_alive = np.flatnonzero(alive)
    mean = sums[np.ix_(idx_alive, idx_alive)] / np.outer(sizes[idx_alive], sizes[idx_alive])
    blocked_pairs = int(np.triu(blocked[np.ix_(idx_alive, idx_alive)] & (mean >= threshold), 1).sum())
    return ClusterResult(labels, blocked_pairs)


# ----------------------------------------------------------------------------------------------
# Parts: one analysed input file


def part_key(path: Path) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", path.name)[:60]
    return f"{stem}-{hashlib.blake2b(str(path).encode(), digest_size=5).hexdigest()}"


def _part_settings(settings: IndexSettings, teacher: dict) -> dict:
    return {"part_version": PART_VERSION, "sample_fps": settings.sample_fps, "crop_px": settings.crop_px,
            "head_px": HEAD_PX, "face_px": FACE_PX, "teacher": [teacher.get("name"), teacher.get("version")]}


class CropWriter:
    """The indexer's crop sink: writes each head crop (and aligned face) the moment it is cut."""

    def __init__(self):
        self.folder: Path | None = None
        self.files: dict[int, tuple[object, str, str | None]] = {}

    def start(self, folder: Path) -> None:
        self.folder = folder
        (folder / "heads").mkdir(parents=True, exist_ok=True)
        (folder / "faces").mkdir(parents=True, exist_ok=True)
        self.files = {}

    def __call__(self, track, obs, crop) -> None:
        from headsearch.embedders import align_face

        n = len(self.files)
        head = f"heads/{n}.jpg"
        (self.folder / head).write_bytes(encode_jpeg(cv2.resize(crop.image, (HEAD_PX, HEAD_PX), interpolation=cv2.INTER_AREA), JPEG_QUALITY))
        face = None
        if crop.face_visible:
            face = f"faces/{n}.jpg"
            (self.folder / face).write_bytes(encode_jpeg(align_face(crop, FACE_PX), JPEG_QUALITY))
        self.files[id(obs)] = (obs, head, face)  # obs kept referenced: its id stays unique


def analyse_to_part(indexer, writer: CropWriter, path: Path, part_dir: Path, settings_key: dict, bar: tqdm | None) -> None:
    """Analyse one file into part_dir (atomically: a .tmp folder renamed when complete)."""
    from headsearch.detect import yaw_hint
    from headsearch.errors import NoHeadFound
    from indexer.pipeline import StageClock, media_kind

    tmp = part_dir.with_name(part_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        stat = path.stat()
        writer.start(tmp)
        clock = StageClock()
        result = indexer.analyse(path, clock, bar)
        tracks = result.tracks
        kind = media_kind(path)
        if kind == "image":
            if not tracks:
                raise NoHeadFound(f"{path}: no head found")
            tracks = [max(tracks, key=lambda t: t.observations[0].head.area)]
        rows, vectors, used = [], [], set()
        for tr in tracks:
            obs_rows = []
            for o in tr.observations:
                _, head, face = writer.files[id(o)]
                used.add(head)
                teacher_row = -1
                if o.face is not None:
                    used.add(face)
                    teacher_row = len(vectors)
                    vectors.append(np.asarray(o.embeddings["id"], np.float32))
                obs_rows.append({"frame": int(o.frame_index), "time": float(o.time), "head": list(map(float, o.head.as_tuple())),
                                 "face": None if o.face is None else list(map(float, o.face.box.as_tuple())),
                                 "pose": None if o.face is None else yaw_hint(o.face), "head_crop": head,
                                 "face_crop": face if o.face is not None else None, "teacher_row": teacher_row})
            rows.append({"shot": int(tr.shot_index), "obs": obs_rows})
        for _, head, face in writer.files.values():  # crops of heads a photo does not use
            for rel in (head, face):
                if rel is not None and rel not in used:
                    (tmp / rel).unlink(missing_ok=True)
        writer.files = {}
        dim = indexer.embedder.dim
        np.save(tmp / "teacher.npy", np.stack(vectors).astype(np.float32) if vectors else np.zeros((0, dim), np.float32))
        meta = {"path": str(path), "kind": kind, "size": stat.st_size, "mtime": stat.st_mtime, "settings": settings_key,
                "duration": result.duration, "fps": result.fps, "width": result.width, "height": result.height,
                "frames_decoded": result.frames_decoded, "frames_sampled": result.frames_sampled, "warning": result.warning,
                "clock": dict(clock.seconds),
                "shots": [[s.index, s.start_frame, s.end_frame, s.start_time, s.end_time] for s in result.shots], "tracks": rows}
        (tmp / "meta.json").write_text(json.dumps(meta))
        if part_dir.exists():
            shutil.rmtree(part_dir)
        os.replace(tmp, part_dir)
    except BaseException:
        writer.files = {}
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def load_part(part_dir: Path, path: Path, settings_key: dict) -> dict | None:
    """A complete part for this file and these settings, or None."""
    try:
        meta = json.loads((part_dir / "meta.json").read_text())
        stat = path.stat()
    except (OSError, ValueError):
        return None
    if meta.get("settings") != settings_key or meta.get("size") != stat.st_size or meta.get("mtime") != stat.st_mtime:
        return None
    return meta


# ----------------------------------------------------------------------------------------------
# The builder


@dataclass
class LabelPhoto:
    path: Path
    identity: str  # "label:<name>"
    state: str  # "label:<name>/<state or default>"


@dataclass
class Segment:
    part: str  # part key
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
        return f"{self.part}/t{self.track}"

    @property
    def frames(self) -> set[int]:
        return {o["frame"] for o in self.obs}


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
    pairs: dict = field(default_factory=dict)
    cannot_link_pairs: int = 0
    cannot_link_blocked: int = 0
    cluster_threshold: float = 0.0
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


def pair_counts(identities: Sequence[str], states: Sequence[str]) -> dict:
    """Sample pairs by relation: R1 same state, R2 same identity other state, R3 other identity."""
    c2 = lambda k: k * (k - 1) // 2  # noqa: E731
    n = len(identities)
    same_id = sum(c2(k) for k in Counter(identities).values())
    same_state = sum(c2(k) for k in Counter(zip(identities, states)).values())
    return {"R1": same_state, "R2": same_id - same_state, "R3": c2(n) - same_id}


def contact_sheet_name(identity: str) -> str:
    """File name of an identity's contact sheet under contact/ (':' and other odd characters -> '_')."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", identity) + ".png"


def collect_label_photos(csvs: Sequence[Path], summary: BuildSummary, report: Report) -> list[LabelPhoto]:
    from headsearch.bench import read_label_set

    photos, seen = [], set()
    skipped = Counter()
    for csv_path in csvs:
        ls = read_label_set(Path(csv_path))
        for reason, k in ls.skipped.items():
            skipped[reason] += k
        for f in ls.files:
            if f.kind != "image":
                skipped["video rows (not used as labels)"] += 1
                continue
            p = f.path.resolve()
            if p in seen:
                skipped["duplicate photo"] += 1
                continue
            seen.add(p)
            identity = f"label:{f.identity}"
            photos.append(LabelPhoto(p, identity, f"{identity}/{f.state or 'default'}"))
        line = ls.skipped_line()
        if line:
            report(f"note: {line}")
    summary.label_rows_skipped = dict(skipped)
    return photos


def build_dataset(videos: Sequence[Path], out: Path, labels: Sequence[Path] = (), teacher: str | None = None,
                  opts: DatasetOptions = DatasetOptions(), progress: bool = True, report: Report = print) -> BuildSummary:
    """Build (or finish building) the dataset folder `out`; see the module docstring."""
    from headsearch.embedders import load_embedder
    from indexer.pipeline import Indexer, discover

    start = time.perf_counter()
    summary = BuildSummary()
    out = Path(out).expanduser()
    files, problems, _ = discover(videos)
    for p in problems:
        report(f"error: {p}")
        summary.failed.append(p)
    video_files = [f for f in files if f.suffix.lower() in VIDEO_EXTENSIONS]
    ignored = len(files) - len(video_files)
    if ignored:
        report(f"note: {ignored} photos among the videos ignored (give photos through --labels)")
    photos = collect_label_photos(labels, summary, report)
    summary.videos = len(video_files)
    summary.videos_failed = len(problems)
    if not video_files and not photos:
        raise DatasetError("nothing to build from: no readable videos or labelled photos were given")

    embedder = load_embedder(teacher)
    described = embedder.describe()
    threshold = opts.cluster_threshold if opts.cluster_threshold is not None else default_cluster_threshold(embedder.name)
    summary.cluster_threshold = threshold
    summary.options = {**asdict(opts), "cluster_threshold": threshold}
    summary.teacher = described
    settings = IndexSettings(sample_fps=opts.sample_fps)
    settings_key = _part_settings(settings, described)
    writer = CropWriter()
    indexer = Indexer(None, embedder, settings, progress=progress, crop_sink=writer)
    try:
        (out / "parts").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DatasetError(f"{out}: cannot create the output folder ({e.strerror or e})") from e
    for stale in (out / "parts").glob("*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)

    # 1-2: analyse every input into its part
    inputs = [(f, "video") for f in video_files] + [(p.path, "photo") for p in photos]
    metas: dict[Path, tuple[str, dict]] = {}
    overall = tqdm(inputs, desc="files", unit="file", disable=not progress, position=0)
    frame_bar = tqdm(desc="frames", unit="frame", disable=not progress, position=1, leave=False)
    for path, source in overall:
        overall.set_postfix_str(path.name[-40:])
        key = part_key(path)
        part_dir = out / "parts" / key
        meta = load_part(part_dir, path, settings_key)
        if meta is None:
            try:
                if not os.access(path, os.R_OK):
                    raise HeadsearchError(f"{path}: cannot read file" if path.exists() else f"{path}: no such file")
                analyse_to_part(indexer, writer, path, part_dir, settings_key, frame_bar if source == "video" else None)
                meta = load_part(part_dir, path, settings_key)
                if source == "video":
                    summary.videos_analysed += 1
            except HeadsearchError as e:
                _fail(summary, source, str(e), report)
                continue
            except OSError as e:
                if e.errno == 28:
                    raise
                _fail(summary, source, f"{path}: {e.strerror or e}", report)
                continue
            if meta is None:
                _fail(summary, source, f"{path}: changed while being analysed", report)
                continue
        elif source == "video":
            summary.videos_reused += 1
        if meta.get("warning"):
            summary.warnings.append(meta["warning"])
            report(f"warning: {meta['warning']}")
        metas[path] = (key, meta)
        summary.analysis_seconds += sum(meta.get("clock", {}).values())
    frame_bar.close()
    overall.close()

    # 3: segments
    segments: list[Segment] = []
    for path in video_files:
        if path not in metas:
            continue
        key, meta = metas[path]
        summary.shots += len(meta["shots"])
        summary.tracks += len(meta["tracks"])
        summary.video_seconds += meta["duration"] or 0.0
        for t, tr in enumerate(meta["tracks"]):
            best, reason = select_segment(tr["obs"], opts)
            if reason is not None:
                summary.segments_rejected[reason] += 1
                continue
            segments.append(Segment(key, str(path), "video", t, tr["shot"], tr["obs"], best))
    summary.segments_kept = len(segments)
    photo_segments = []
    for ph in photos:
        if ph.path not in metas:
            continue
        key, meta = metas[ph.path]
        tr = meta["tracks"][0]
        photo_segments.append(Segment(key, str(ph.path), "photo", 0, 0, tr["obs"], 0, ph.identity, ph.state))
    summary.photos = len(photo_segments)
    if not metas:
        raise DatasetError(f"nothing usable: none of the {len(inputs) + len(problems)} inputs could be read (see the errors above)")
    if not segments and not photo_segments:
        raise DatasetError("no usable segments or photos: every track was rejected by the filters "
                           f"({', '.join(f'{k} {v}' for k, v in summary.segments_rejected.items() if v) or 'no tracks'}); "
                           "try --min-invisible 0, a lower --min-frames or a higher --fps")

    # 4: identities
    teachers: dict[str, np.ndarray] = {}

    def teacher_vectors(key: str) -> np.ndarray:
        if key not in teachers:
            teachers[key] = np.load(out / "parts" / key / "teacher.npy")
        return teachers[key]

    best_vectors = np.stack([teacher_vectors(s.part)[s.obs[s.best]["teacher_row"]] for s in segments]) if segments else np.zeros((0, embedder.dim))
    cannot = []
    by_shot: dict[tuple[str, int], list[int]] = defaultdict(list)
    for i, s in enumerate(segments):
        by_shot[(s.part, s.shot)].append(i)
    for members in by_shot.values():
        frames = {i: segments[i].frames for i in members}
        for x, i in enumerate(members):
            for j in members[x + 1:]:
                if frames[i] & frames[j]:
                    cannot.append((i, j))
    summary.cannot_link_pairs = len(cannot)
    clusters = cluster_with_cannot_link(best_vectors, threshold, cannot)
    summary.cannot_link_blocked = clusters.blocked_pairs
    width = max(4, len(str(int(clusters.labels.max()) + 1 if len(clusters.labels) else 0)))
    for s, c in zip(segments, clusters.labels):
        s.identity = f"vid{int(c) + 1:0{width}d}"
        s.state = f"{s.identity}/{s.name}"
    summary.video_identities = len(set(clusters.labels.tolist()))
    summary.label_identities = len({s.identity for s in photo_segments})

    assemble(out, segments + photo_segments, teacher_vectors, metas, described, embedder.dim, summary)
    summary.wall_seconds = time.perf_counter() - start
    (out / "summary.json").write_text(json.dumps(asdict(summary), indent=2, default=float))
    return summary


def _fail(summary: BuildSummary, source: str, message: str, report: Report) -> None:
    summary.failed.append(message)
    if source == "video":
        summary.videos_failed += 1
    else:
        summary.photos_failed += 1
    report(f"error: {message}")


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _replace_dir(path: Path) -> Path:
    """A fresh empty folder `path.new` to fill, swapped in by `_swap_dir`."""
    new = path.with_name(path.name + ".new")
    shutil.rmtree(new, ignore_errors=True)
    new.mkdir(parents=True)
    return new


def _swap_dir(new: Path, path: Path) -> None:
    old = path.with_name(path.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if path.exists():
        os.replace(path, old)
    os.replace(new, path)
    shutil.rmtree(old, ignore_errors=True)


def assemble(out: Path, segments: list[Segment], teacher_vectors, metas, teacher: dict, dim: int, summary: BuildSummary) -> None:
    """Write heads/, faces/, teacher.npy, teacher.json, manifest.parquet, videos.json and contact/."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    heads, faces = _replace_dir(out / "heads"), _replace_dir(out / "faces")
    cols = {k: [] for k in ("sample_id", "identity", "state", "source", "video", "segment", "shot", "frame_index", "time",
                            "pose_hint", "face_visible", "head_crop", "face_crop", "teacher_index")}
    vectors = []
    for s in segments:
        tv = teacher_vectors(s.part)
        part = out / "parts" / s.part
        for o in s.obs:
            sid = len(cols["sample_id"])
            _link(part / o["head_crop"], heads / f"{sid}.jpg")
            face_crop, ti = None, -1
            if o["face_crop"] is not None:
                _link(part / o["face_crop"], faces / f"{sid}.jpg")
                face_crop = f"faces/{sid}.jpg"
                ti = len(vectors)
                vectors.append(tv[o["teacher_row"]])
            for k, v in (("sample_id", sid), ("identity", s.identity), ("state", s.state), ("source", s.source),
                         ("video", s.video), ("segment", s.name), ("shot", s.shot), ("frame_index", o["frame"]),
                         ("time", o["time"]), ("pose_hint", math.nan if o["pose"] is None else o["pose"]),
                         ("face_visible", o["face"] is not None), ("head_crop", f"heads/{sid}.jpg"), ("face_crop", face_crop),
                         ("teacher_index", ti)):
                cols[k].append(v)
    schema = pa.schema([("sample_id", pa.int64()), ("identity", pa.string()), ("state", pa.string()), ("source", pa.string()),
                        ("video", pa.string()), ("segment", pa.string()), ("shot", pa.int64()), ("frame_index", pa.int64()),
                        ("time", pa.float64()), ("pose_hint", pa.float64()), ("face_visible", pa.bool_()),
                        ("head_crop", pa.string()), ("face_crop", pa.string()), ("teacher_index", pa.int64())])
    table = pa.table(cols, schema=schema)
    _swap_dir(heads, out / "heads")
    _swap_dir(faces, out / "faces")
    teacher_array = np.stack(vectors).astype(np.float32) if vectors else np.zeros((0, dim), np.float32)

    def write_teacher(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object: np.save would add ".npy" to a path
            np.save(f, teacher_array)

    atomic_write(out / "teacher.npy", write_teacher)
    (out / "teacher.json").write_text(json.dumps(teacher, indent=2))
    atomic_write(out / "manifest.parquet", lambda tmp: pq.write_table(table, str(tmp)))
    videos = {meta["path"]: {"part": key, "kind": meta["kind"], "duration": meta["duration"], "fps": meta["fps"],
                             "width": meta["width"], "height": meta["height"], "tracks": len(meta["tracks"]),
                             "shots": [{"index": s[0], "start_frame": s[1], "end_frame": s[2], "start_time": s[3], "end_time": s[4]}
                                       for s in meta["shots"]]}
              for key, meta in metas.values()}
    (out / "videos.json").write_text(json.dumps(videos, indent=2))
    summary.samples = table.num_rows
    summary.samples_face_visible = int(sum(cols["face_visible"]))
    summary.samples_video = sum(x == "video" for x in cols["source"])
    summary.samples_photo = sum(x == "photo" for x in cols["source"])
    summary.teacher_rows = len(vectors)
    summary.identities = len(set(cols["identity"]))
    summary.states = len(set(cols["state"]))
    summary.pairs = pair_counts(cols["identity"], cols["state"])
    write_contact_sheets(out, cols)


# ----------------------------------------------------------------------------------------------
# Contact sheets

THUMB = 64
PER_ROW = 12
MAX_ROWS = 40
LABEL_W = 300


def write_contact_sheets(out: Path, cols: dict) -> None:
    """contact/<identity>.png: one row per state (segment), up to PER_ROW crops spread over it,
    green frame = face visible, red = not, labelled with the state, file, time span and count."""
    contact = _replace_dir(out / "contact")
    rows_by_identity: dict[str, dict[str, list[int]]] = defaultdict(dict)
    for i, (ident, state) in enumerate(zip(cols["identity"], cols["state"])):
        rows_by_identity[ident].setdefault(state, []).append(i)
    font = cv2.FONT_HERSHEY_SIMPLEX
    for ident, states in rows_by_identity.items():
        shown = list(states.items())[:MAX_ROWS]
        header = 28
        h = header + len(shown) * (THUMB + 6) + (18 if len(states) > MAX_ROWS else 0)
        w = LABEL_W + PER_ROW * (THUMB + 4)
        sheet = np.full((h, w, 3), 255, np.uint8)
        n_samples = sum(len(v) for v in states.values())
        cv2.putText(sheet, f"{ident}: {len(states)} states, {n_samples} samples", (6, 19), font, 0.55, (0, 0, 0), 1, cv2.LINE_AA)
        for r, (state, idx) in enumerate(shown):
            y = header + r * (THUMB + 6)
            pick = idx if len(idx) <= PER_ROW else [idx[round(k * (len(idx) - 1) / (PER_ROW - 1))] for k in range(PER_ROW)]
            first = idx[0]
            times = [cols["time"][i] for i in idx]
            label1 = state.split("/", 1)[-1][-38:]
            label2 = f"{Path(cols['video'][first]).name[-24:]}  {min(times):.1f}-{max(times):.1f}s  n={len(idx)}"
            cv2.putText(sheet, label1, (6, y + 24), font, 0.4, (0, 0, 0), 1, cv2.LINE_AA)
            cv2.putText(sheet, label2, (6, y + 44), font, 0.4, (80, 80, 80), 1, cv2.LINE_AA)
            for c, i in enumerate(pick):
                img = cv2.imread(str(out / cols["head_crop"][i]))
                if img is None:
                    continue
                img = cv2.resize(img, (THUMB - 4, THUMB - 4), interpolation=cv2.INTER_AREA)
                x = LABEL_W + c * (THUMB + 4)
                color = (0, 160, 0) if cols["face_visible"][i] else (0, 0, 200)
                sheet[y:y + THUMB, x:x + THUMB] = color
                sheet[y + 2:y + THUMB - 2, x + 2:x + THUMB - 2] = img
        if len(states) > MAX_ROWS:
            cv2.putText(sheet, f"... {len(states) - MAX_ROWS} more states", (6, h - 5), font, 0.45, (0, 0, 0), 1, cv2.LINE_AA)
        cv2.imwrite(str(contact / contact_sheet_name(ident)), sheet)
    _swap_dir(contact, out / "contact")
