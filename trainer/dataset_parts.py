"""Steps 1-2 of the dataset builder (`trainer.dataset`): shots and head tracks of each input file, analysed by
`indexer.analysis.analyse_file` with its head crops kept, into its *part*: ``DIR/parts/<key>/`` (written to
``<key>.tmp`` and renamed when complete) with the crops (a 160 px head JPEG and, when the face is visible, the
ArcFace-aligned 112 px face), the teacher vectors and meta.json. A rerun reuses the parts that match their file and
the settings (`Part.load`)."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import cv2
import numpy as np
from tqdm import tqdm

from headsearch.basics.errors import HeadsearchError, NoHeadFound, cannot_read, is_disk_full
from headsearch.basics.failures import unexpected_error_line
from headsearch.basics.images import encode_jpeg
from headsearch.basics.settings import IndexSettings
from headsearch.detection.crops import crop_from_image
from schemas.records import HeadTrack, MediaKind, ModelInfo, VectorKind
from trainer.dataset_format import (
    FACE_PX,
    HEAD_PX,
    JPEG_QUALITY,
    PART_FACES,
    PART_HEADS,
    PART_META,
    PART_TEACHER,
    PART_TEACHER_HEAD,
    DatasetError,
    crop_name,
    save_vectors,
)
from trainer.dataset_inputs import Inputs
from trainer.dataset_summary import BuildSummary, Report

if TYPE_CHECKING:
    from headsearch.detection.faces import FaceDetector
    from headsearch.models import Embedder
    from indexer.analysis import FrameProgress

PART_VERSION = 1


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


def analysed_part(analyser: Analyser, path: Path, source: str, part_dir: Path, summary: BuildSummary, report: Report,
                   progress: FrameProgress | None) -> Part | None:
    """The part of one input: reused when complete, else analysed now; None (reported) when the file fails."""
    part = Part.load(part_dir, path, analyser.settings_key)
    if part is not None:
        if source == "video":
            summary.videos_reused += 1
        return part
    try:
        if not os.access(path, os.R_OK):
            raise HeadsearchError(cannot_read(path) if path.exists() else f"{path}: no such file")
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
        part = analysed_part(analyser, path, source, parts_dir / part_key(path), summary, report,
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
