"""A model: its spec (`ModelSpec`, what it is, said once) and the embedder built from it (`Embedder`: head crops
in, L2-normalised vectors out, of one or two kinds), with what embedders share (alignment, file digests).

`id` vectors carry identity; `head` vectors (dual-CLS models only) carry whole-head appearance.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from headsearch.basics.errors import ModelError
from headsearch.basics.files import sha256_file
from headsearch.detection.crops import HeadCrop
from schemas.records import ModelInfo, VectorKind

# ArcFace's five-point template for a 112x112 aligned face (insightface `arcface_dst`).
ARCFACE_TEMPLATE = np.array(
    [[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366], [41.5493, 92.3655], [70.7299, 92.2041]],
    dtype=np.float32,
)


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    x = np.asarray(x, dtype=np.float32)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(n, 1e-12)


def mean_vector(vectors) -> np.ndarray:
    """The renormalised mean of unit vectors."""
    return l2_normalise(np.mean(np.stack(list(vectors)).astype(np.float32), axis=0, keepdims=True))[0]


WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"  # model files, licences, cards and thresholds shipped in the package
Factory = Callable[["ModelSpec"], "Embedder"]  # builds a registered model from its spec (an `Embedder` class taking its spec is one)


@dataclass(frozen=True)
class ModelSpec:
    """What a model is, said once."""

    name: str  # the registered name (`--model NAME`), or a family name for models loaded from files
    summary: str  # one line: what it is (help texts, `headsearch models`)
    kinds: tuple[VectorKind, ...] = (VectorKind.ID,)  # the vectors it gives each embedded sighting
    dims: tuple[int, ...] = ()  # the width of each kind, in `kinds` order (a family of files: empty, each file's spec says)
    sees_whole_head: bool = False  # a meaningful vector for a sighting without a visible face (profile, back of the head)
    input: str = ""  # what it is fed: the input recipe
    licence: str = ""  # of its weights
    extra: str | None = None  # the pip extra it needs beyond the lean install (`train`: PyTorch)
    aliases: tuple[str, ...] = ()
    thresholds: str | None = None  # shipped thresholds: a file in WEIGHTS_DIR (path-loaded models: `<file>.thresholds.json`)
    cluster_threshold: float | None = None  # cosine of best-face vectors at which the dataset builder joins segments
    people_threshold: float | None = None  # identity threshold of people's grouping when no thresholds are calibrated
    appearance_dims: int = 0  # the head vector's last dims describe the head without the face: compared alone when a side has no face
    fusion: str = ""  # how the head vector's parts are weighted, in words
    load: Factory | None = field(default=None, compare=False, repr=False)  # the factory it is registered with

    @property
    def registered_names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def thresholds_path(self, source: str | None = None) -> Path | None:
        """Where its shipped thresholds are: in the package for a registered model, beside the file for a model loaded from one."""
        if self.thresholds:
            return WEIGHTS_DIR / self.thresholds
        if source and Path(source).expanduser().is_file():
            path = Path(source).expanduser()
            return path.with_name(path.name + ".thresholds.json")
        return None

    def to_dict(self) -> dict:
        return {"name": self.name, "summary": self.summary, "kinds": [str(k) for k in self.kinds], "dims": list(self.dims),
                "sees_whole_head": self.sees_whole_head, "input": self.input, "licence": self.licence, "extra": self.extra,
                "aliases": list(self.aliases), "thresholds": self.thresholds, "cluster_threshold": self.cluster_threshold,
                "people_threshold": self.people_threshold, "appearance_dims": self.appearance_dims, "fusion": self.fusion,
                "loads_from": "name" if self.load is not None else "file"}


class Embedder(ABC):
    """Turns head crops into vectors of one or two kinds (`VectorKind.ID`, and `HEAD` for dual-CLS models).

    An embedder is built from its spec, as timm gives a model its pretrained config: the registry hands each
    factory the spec it was registered with, and a model loaded from a file derives its own from its family's
    (`dataclasses.replace`: the file's name, kinds and widths). Its name, vector kinds and widths and whether it
    sees whole heads are the spec's, said nowhere else."""

    version: str  # of its weights: what makes two libraries' vectors comparable

    def __init__(self, spec: ModelSpec):
        if len(spec.dims) != len(spec.kinds):
            raise ModelError(f"model {spec.name}: its spec gives widths {spec.dims} for kinds {tuple(map(str, spec.kinds))}: "
                             "a model loaded from a file gives each kind the width read from the file")
        self.spec = spec
        self.source = spec.name  # how to load it again: its registered name (a model loaded from a file: the file's path)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def kinds(self) -> tuple[VectorKind, ...]:
        return self.spec.kinds

    @property
    def dims(self) -> dict[VectorKind, int]:
        """The width of each vector kind."""
        return dict(zip(self.spec.kinds, self.spec.dims, strict=True))

    @property
    def dim(self) -> int:
        """The first kind's width (the identity vectors'): a library manifest's `dim`."""
        return self.spec.dims[0]

    @property
    def sees_whole_head(self) -> bool:
        """A meaningful vector for a sighting without a visible face (hair, contour, the back of a head). Face-recognition
        models (dlib's ResNet, ArcFace, SFace) do not: only sightings with a detected face are embedded by them."""
        return self.spec.sees_whole_head

    @abstractmethod
    def embed(self, crops: Sequence[HeadCrop]) -> dict[VectorKind, np.ndarray]:
        """Vectors per kind, each (len(crops), dim) float32, L2-normalised."""

    def describe(self) -> ModelInfo:
        """What a library manifest and a thresholds file record about this model."""
        return ModelInfo(self.name, self.version, self.dim, tuple(self.kinds), self.source or self.name, dict(self.dims))

    def empty(self) -> dict[VectorKind, np.ndarray]:
        """The result of embedding no crops."""
        return {k: np.zeros((0, d), np.float32) for k, d in self.dims.items()}


def similarity_transform(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The least-squares similarity transform (Umeyama) taking points `src` onto `dst`, as a 2x3 matrix
    (what insightface's and OpenCV's FaceRecognizerSF alignment compute)."""
    src, dst = np.asarray(src, np.float64), np.asarray(dst, np.float64)
    mu_s, mu_d = src.mean(0), dst.mean(0)
    s0, d0 = src - mu_s, dst - mu_d
    u, sv, vt = np.linalg.svd(d0.T @ s0 / len(src))
    d = np.eye(2)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        d[1, 1] = -1
    r = u @ d @ vt
    var = (s0 ** 2).sum() / len(src)
    c = (sv * np.diag(d)).sum() / max(var, 1e-12)
    t = mu_d - c * r @ mu_s
    return np.hstack([c * r, t[:, None]]).astype(np.float32)


def align_face(crop: HeadCrop, size: int = 112, exact: bool = False) -> np.ndarray:
    """Five-point similarity alignment to ArcFace's template; a face-box warp when no landmarks.

    `exact`: the least-squares similarity of all five points (`similarity_transform`) instead of
    OpenCV's robust LMEDS fit."""
    template = ARCFACE_TEMPLATE * (size / 112.0)
    if crop.landmarks is not None:
        if exact:
            m = similarity_transform(crop.landmarks, template)
        else:
            m, _ = cv2.estimateAffinePartial2D(crop.landmarks, template, method=cv2.LMEDS)
        if m is not None:
            return cv2.warpAffine(crop.image, m, (size, size), borderMode=cv2.BORDER_REPLICATE)
    # No landmarks: map the (estimated) face box onto the template's face region.
    fb = crop.face_box
    src = np.array([[fb.x1, fb.y1], [fb.x2, fb.y1], [fb.x1, fb.y2]], dtype=np.float32)
    dst = np.array([[0.12, 0.16], [0.88, 0.16], [0.12, 1.0]], dtype=np.float32) * size
    return cv2.warpAffine(crop.image, cv2.getAffineTransform(src, dst), (size, size), borderMode=cv2.BORDER_REPLICATE)


def file_digest(path: Path) -> str:
    """A model file's version: the first 16 hex digits of its SHA-256."""
    return sha256_file(path)[:16]
