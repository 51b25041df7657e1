"""An insightface ArcFace recognition model (.onnx, 112x112 aligned input) from a local path, or the
recognition model inside an unpacked insightface model pack folder (e.g. buffalo_l)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from headsearch.basics.errors import ModelError
from headsearch.detection.crops import HeadCrop
from headsearch.models.base import Embedder, ModelSpec, align_face, file_digest, l2_normalise
from headsearch.models.registry import register_path_loader
from schemas.records import VectorKind


class ArcFaceOnnxEmbedder(Embedder):
    """ArcFace: RGB faces aligned to its five-point template, scaled to [-1, 1], run by ONNX Runtime.
    Its spec is its family's with the file's name and width: the output width ONNX Runtime infers from the graph (it
    drops a declared width the graph does not give), or, where that is left open, the width of its output for one face."""

    def __init__(self, family: ModelSpec, path: Path):
        from headsearch.basics.runtime import inference_session

        self.path = Path(path)
        if not self.path.is_file():
            raise ModelError(f"missing model file: {self.path}")
        self._session = inference_session(self.path)
        inp = self._session.get_inputs()[0]
        if len(inp.shape) != 4 or inp.shape[1] != 3 or inp.shape[2:] != [112, 112]:
            raise ModelError(f"{self.path}: expected an input of shape (N, 3, 112, 112), got {inp.shape}")
        self._input = inp.name
        width = self._session.get_outputs()[0].shape[-1]
        if not isinstance(width, int):
            width = self._run(np.zeros((1, 3, 112, 112), np.float32)).shape[-1]
        super().__init__(replace(family, name=f"arcface-onnx:{self.path.name}", dims=(int(width),)))
        self.source = str(self.path.resolve())
        self.version = file_digest(self.path)

    def _run(self, blob: np.ndarray) -> np.ndarray:
        return np.concatenate([self._session.run(None, {self._input: blob[i : i + 1]})[0] for i in range(len(blob))])

    def embed(self, crops: Sequence[HeadCrop]) -> dict[VectorKind, np.ndarray]:
        if not crops:
            return self.empty()
        faces = np.stack([align_face(c) for c in crops]).astype(np.float32)
        out = self._run(((faces - 127.5) / 127.5).transpose(0, 3, 1, 2))  # RGB, as insightface feeds it
        return {VectorKind.ID: l2_normalise(out)}


def find_insightface_recognition_model(folder: Path) -> Path:
    """The recognition ONNX inside an insightface model pack folder (e.g. buffalo_l/w600k_r50.onnx)."""
    candidates = sorted(p for p in folder.glob("*.onnx")
                        if p.name.startswith(("w600k", "glint", "ms1m", "arcface")) or "r50" in p.name or "r100" in p.name)
    if not candidates:
        raise ModelError(f"{folder}: no insightface recognition model (w600k_*.onnx, glintr100.onnx, ...) in this folder")
    return candidates[0]


# cluster_threshold 0.45: insightface ArcFace's usual verification range (same ~0.5+, different < 0.3), not measured here.
ARCFACE = ModelSpec(
    name="arcface-onnx", summary="an ArcFace .onnx file", input="the face aligned to ArcFace's template, 112x112 RGB in [-1, 1]",
    licence="the user's file", cluster_threshold=0.45)


register_path_loader(ARCFACE, lambda p: p.suffix == ".onnx")(ArcFaceOnnxEmbedder)


@register_path_loader(replace(ARCFACE, name="insightface-pack", summary="an insightface model pack folder"),
                      lambda p: p.is_dir() and any(p.glob("*.onnx")))
def insightface_pack(family: ModelSpec, path: Path) -> Embedder:
    return ArcFaceOnnxEmbedder(family, find_insightface_recognition_model(path))
