"""The dataset folder, declared once: what the builder (`trainer.dataset`) writes and the trainer
(`trainer.train`) reads.

Layout of a dataset folder::

    manifest.parquet      one row per sample (MANIFEST_SCHEMA below)
    teacher.npy           float32 (n_teacher, dim): the teacher's vectors of the samples' aligned faces
    teacher_head.npy      float32 (n_head, head_dim): the teacher's head vectors of the samples' whole head crops,
                          one per sample (faces or not); only for teachers with head vectors (e.g. sface+lite0)
    teacher.json          the teacher model (`ModelInfo.to_dict()`: name, version, dim, kinds, source, dims)
    heads/<sample_id>.jpg the 160 px whole-head crop of each sample
    faces/<sample_id>.jpg the ArcFace-aligned 112 px face, for samples with a visible face
    contact/<identity>.png one contact sheet per identity (`contact_sheet_name`)
    videos.json           per analysed input: part, kind, duration, fps, size, track count, shots
    summary.json          the builder's counts (`trainer.dataset_summary.BuildSummary`)
    parts/<key>/          the builder's resumable analysis of one input file (see PART_* below)

The trainer needs only the manifest's REQUIRED_COLUMNS, the crops and, when any sample has a
teacher row, teacher.npy; and teacher_head.npy when any sample has a `teacher_head_index` row. Folders
written before head vectors existed have no `teacher_head_index` column: they read as having no head
vectors (train without the head-alignment term, or rebuild with a teacher that has head vectors).
"""
from __future__ import annotations

import functools
import json
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from headsearch.basics.errors import HeadsearchError
from headsearch.basics.files import atomic_write

MANIFEST = "manifest.parquet"
TEACHER_VECTORS = "teacher.npy"
TEACHER_HEAD_VECTORS = "teacher_head.npy"
TEACHER_INFO = "teacher.json"
HEADS = "heads"
FACES = "faces"
CONTACT = "contact"
VIDEOS = "videos.json"
SUMMARY = "summary.json"
PARTS = "parts"

# One analysed input file, under parts/<key>/ (written to <key>.tmp and renamed when complete).
PART_META = "meta.json"  # the analysis: file stamp, settings, shots, tracks with their observations
PART_TEACHER = TEACHER_VECTORS  # teacher vectors of the part's face-visible observations
PART_TEACHER_HEAD = TEACHER_HEAD_VECTORS  # teacher head vectors of the part's observations (teachers with head vectors)
PART_HEADS = HEADS  # heads/<n>.jpg
PART_FACES = FACES  # faces/<n>.jpg

HEAD_PX = 160  # side of the head crops in heads/
FACE_PX = 112  # side of the aligned faces in faces/
JPEG_QUALITY = 92

# Columns the trainer reads; the others describe where a sample comes from.
REQUIRED_COLUMNS = ("sample_id", "identity", "state", "head_crop", "teacher_index")
OPTIONAL_COLUMNS = ("teacher_head_index",)  # absent in folders built before head vectors: read as -1


@functools.cache
def manifest_schema():
    """The manifest's pyarrow schema (pyarrow is imported when a manifest is written or read)."""
    import pyarrow as pa

    return pa.schema([
        ("sample_id", pa.int64()),  # row number; names the sample's crops heads/<sample_id>.jpg, faces/<sample_id>.jpg
        ("identity", pa.string()),  # person: "vid0001" (a cluster of video segments) or "label:<identity>" (labelled photos)
        ("state", pa.string()),  # appearance state, unique across identities: "<identity>/<segment>" or "label:<identity>/<state>"
        ("source", pa.string()),  # "video" or "photo"
        ("video", pa.string()),  # the input file's path
        ("segment", pa.string()),  # "<part key>/t<track number>": the head track the sample belongs to
        ("shot", pa.int64()),  # shot index inside the video (0 for photos)
        ("frame_index", pa.int64()),  # decoded frame number of the sample (0 for photos)
        ("time", pa.float64()),  # seconds from the first frame
        ("pose_hint", pa.float64()),  # signed yaw hint of the face (headsearch.detection.faces.yaw_hint); NaN without a face
        ("face_visible", pa.bool_()),  # a face was detected in this sighting
        ("head_crop", pa.string()),  # relative path of the head crop: heads/<sample_id>.jpg
        ("face_crop", pa.string()),  # relative path of the aligned face: faces/<sample_id>.jpg; null without a face
        ("teacher_index", pa.int64()),  # row of teacher.npy with the face's teacher vector; -1 without a face
        ("teacher_head_index", pa.int64()),  # row of teacher_head.npy with the crop's teacher head vector; -1 when none
    ])


@dataclass
class Sample:
    """One row of the manifest (fields in the schema's order)."""

    sample_id: int
    identity: str
    state: str
    source: str
    video: str
    segment: str
    shot: int
    frame_index: int
    time: float
    pose_hint: float
    face_visible: bool
    head_crop: str
    face_crop: str | None
    teacher_index: int
    teacher_head_index: int = -1


def crop_name(number: int) -> str:
    """File name of a crop inside heads/ or faces/ (of the dataset: sample_id; of a part: its crop number)."""
    return f"{number}.jpg"


def head_crop_path(number: int) -> str:
    """Relative path of a head crop: heads/<number>.jpg."""
    return f"{HEADS}/{crop_name(number)}"


def face_crop_path(number: int) -> str:
    """Relative path of an aligned face: faces/<number>.jpg."""
    return f"{FACES}/{crop_name(number)}"


def contact_sheet_name(identity: str) -> str:
    """File name of an identity's contact sheet under contact/ (':' and other odd characters -> '_')."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", identity) + ".png"


def layout_help() -> str:
    """The builder's outputs, for help texts."""
    return (f"{MANIFEST}, {HEADS}/, {FACES}/, {TEACHER_VECTORS} ({TEACHER_HEAD_VECTORS} too for a teacher with head vectors), "
            f"{TEACHER_INFO}, {CONTACT}/<identity>.png and {SUMMARY}")


class DatasetError(HeadsearchError):
    """A dataset folder cannot be built or read (nothing usable in the inputs, a bad or damaged folder)."""


# --- writing ------------------------------------------------------------------------------------------


def fresh_dir(path: Path) -> Path:
    """A fresh empty folder `path.new` to fill, swapped in by `swap_dir`."""
    new = path.with_name(path.name + ".new")
    shutil.rmtree(new, ignore_errors=True)
    new.mkdir(parents=True)
    return new


def swap_dir(new: Path, path: Path) -> None:
    """Replace `path` by the folder `new` (the old one goes through `path.old`)."""
    old = path.with_name(path.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if path.exists():
        os.replace(path, old)
    os.replace(new, path)
    shutil.rmtree(old, ignore_errors=True)


def save_vectors(path: Path, vectors: Sequence[np.ndarray], dim: int) -> None:
    """Rows as a float32 (n, dim) .npy file, written atomically."""
    array = np.stack(vectors).astype(np.float32) if len(vectors) else np.zeros((0, dim), np.float32)

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object: np.save would add ".npy" to a path
            np.save(f, array)

    atomic_write(path, write)


def write_manifest(root: Path, samples: Sequence[Sample]) -> int:
    """manifest.parquet from the samples, written atomically; returns the number of rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist([vars(s) for s in samples], schema=manifest_schema())
    atomic_write(root / MANIFEST, lambda tmp: pq.write_table(table, str(tmp)))
    return table.num_rows


def write_teacher(root: Path, vectors: Sequence[np.ndarray], info: dict, dim: int,
                  head_vectors: Sequence[np.ndarray] | None = None, head_dim: int = 0) -> None:
    """teacher.npy (the rows `teacher_index` points at), teacher_head.npy (the rows `teacher_head_index` points at;
    only with `head_vectors`, else an older one is removed) and teacher.json (the model that made them)."""
    save_vectors(root / TEACHER_VECTORS, vectors, dim)
    if head_vectors is not None:
        save_vectors(root / TEACHER_HEAD_VECTORS, head_vectors, head_dim)
    else:
        (root / TEACHER_HEAD_VECTORS).unlink(missing_ok=True)
    (root / TEACHER_INFO).write_text(json.dumps(info, indent=2))


def write_videos(root: Path, videos: dict[str, dict]) -> None:
    (root / VIDEOS).write_text(json.dumps(videos, indent=2))


def write_summary(root: Path, summary: dict) -> None:
    (root / SUMMARY).write_text(json.dumps(summary, indent=2, default=float))


# --- reading ------------------------------------------------------------------------------------------


@dataclass
class DatasetInfo:
    """What the trainer reads from a dataset folder."""

    root: Path
    identity: list[str]
    state: list[str]
    head_crop: list[str]
    teacher_index: np.ndarray  # int64 (N,), -1 when none
    teacher: np.ndarray  # float32 (n_teacher, D), may be (0, D)
    teacher_meta: dict
    sample_id: list[int]
    teacher_head_index: np.ndarray | None = None  # int64 (N,), -1 when none (all -1 for older folders)
    teacher_head: np.ndarray | None = None  # float32 (n_head, head_dim), may be (0, 0)

    def __post_init__(self) -> None:
        if self.teacher_head_index is None:
            self.teacher_head_index = np.full(len(self.identity), -1, np.int64)
        if self.teacher_head is None:
            self.teacher_head = np.zeros((0, 0), np.float32)

    @property
    def head_dim(self) -> int:
        """Width of the teacher's head vectors; 0 when the dataset has none."""
        return int(self.teacher_head.shape[1]) if self.teacher_head.ndim == 2 and len(self.teacher_head) else 0

    @property
    def has_head_vectors(self) -> bool:
        """Every sample has a teacher head vector (what head alignment and the head skip path need)."""
        return self.head_dim > 0 and bool((self.teacher_head_index >= 0).all())

    @property
    def dim(self) -> int | None:
        return int(self.teacher.shape[1]) if self.teacher.ndim == 2 and self.teacher.shape[1] else self.teacher_meta.get("dim")

    def __len__(self) -> int:
        return len(self.identity)


def _read_manifest(root: Path) -> dict[str, list]:
    """The required columns of a dataset folder's manifest, checked."""
    import pyarrow.parquet as pq

    manifest = root / MANIFEST
    if not manifest.is_file():
        raise DatasetError(f"no {MANIFEST} in {root} (is it a dataset folder made by the dataset builder?)")
    try:
        table = pq.read_table(manifest)
    except Exception as e:  # pyarrow raises several types for damaged files
        raise DatasetError(f"cannot read {manifest}: {e}") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise DatasetError(f"{manifest} lacks column(s) {', '.join(missing)}")
    cols = {c: table.column(c).to_pylist() for c in REQUIRED_COLUMNS + OPTIONAL_COLUMNS if c in table.column_names}
    if table.num_rows == 0:
        raise DatasetError(f"{manifest} has no samples")
    if any(v is None or v == "" for v in cols["identity"]):
        raise DatasetError(f"{manifest}: some samples have no identity")
    if any(v is None or v == "" for v in cols["head_crop"]):
        raise DatasetError(f"{manifest}: some samples have no head_crop path")
    return cols


def _read_teacher_info(root: Path) -> dict:
    meta: dict = {}
    meta_path = root / TEACHER_INFO
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise DatasetError(f"{meta_path} is not valid JSON: {e}") from None
        if not isinstance(meta, dict):
            raise DatasetError(f"{meta_path} is not a JSON object")
    return meta


def _read_teacher_vectors(root: Path, meta: dict, tidx: np.ndarray) -> np.ndarray:
    manifest, meta_path, teacher_path = root / MANIFEST, root / TEACHER_INFO, root / TEACHER_VECTORS
    if teacher_path.is_file():
        try:
            teacher = np.load(teacher_path, allow_pickle=False).astype(np.float32, copy=False)
        except (OSError, ValueError) as e:
            raise DatasetError(f"cannot read {teacher_path}: {e}") from None
        if teacher.ndim != 2:
            raise DatasetError(f"{teacher_path} must be a 2-d (n_teacher, dim) array, got shape {teacher.shape}")
        if meta.get("dim") is not None and int(meta["dim"]) != teacher.shape[1]:
            raise DatasetError(f"{meta_path} says dim {meta['dim']} but {teacher_path} has {teacher.shape[1]} columns")
    else:
        if (tidx >= 0).any():
            raise DatasetError(f"{manifest} refers to teacher embeddings but {teacher_path} is missing")
        teacher = np.zeros((0, int(meta.get("dim") or 0)), np.float32)
    if (tidx >= teacher.shape[0]).any():
        raise DatasetError(f"{manifest}: teacher_index up to {int(tidx.max())} but {teacher_path} has {teacher.shape[0]} rows")
    return teacher


def _read_head_vectors(root: Path, hidx: np.ndarray) -> np.ndarray:
    manifest, path = root / MANIFEST, root / TEACHER_HEAD_VECTORS
    if not (hidx >= 0).any():
        return np.zeros((0, 0), np.float32)
    if not path.is_file():
        raise DatasetError(f"{manifest} refers to teacher head vectors but {path} is missing")
    try:
        head = np.load(path, allow_pickle=False).astype(np.float32, copy=False)
    except (OSError, ValueError) as e:
        raise DatasetError(f"cannot read {path}: {e}") from None
    if head.ndim != 2:
        raise DatasetError(f"{path} must be a 2-d (n_head, head_dim) array, got shape {head.shape}")
    if (hidx >= head.shape[0]).any():
        raise DatasetError(f"{manifest}: teacher_head_index up to {int(hidx.max())} but {path} has {head.shape[0]} rows")
    return head


def load_dataset(root: Path) -> DatasetInfo:
    """Read and check a dataset folder; any problem is a DatasetError naming it."""
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"dataset folder not found: {root}")
    cols = _read_manifest(root)
    states = ["" if s is None else str(s) for s in cols["state"]]
    tidx = np.asarray([-1 if t is None else int(t) for t in cols["teacher_index"]], dtype=np.int64)
    meta = _read_teacher_info(root)
    teacher = _read_teacher_vectors(root, meta, tidx)
    ids = [str(v) for v in cols["identity"]]
    if len(set(ids)) < 2:
        raise DatasetError(f"dataset {root} has {len(set(ids))} identity; training needs at least 2 (R3 negatives)")
    sample_id = [int(v) if v is not None else k for k, v in enumerate(cols["sample_id"])]
    hidx = np.asarray([-1 if t is None else int(t) for t in cols.get("teacher_head_index", [None] * len(ids))], dtype=np.int64)
    head = _read_head_vectors(root, hidx)
    return DatasetInfo(root, ids, states, [str(p) for p in cols["head_crop"]], tidx, teacher, meta, sample_id, hidx, head)
