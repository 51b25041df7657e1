"""Static int8 (QDQ) versions of the indexer's float models, measured on this CPU against the float graphs.

The inputs are the ones the indexer really feeds each model: every session's `run` is recorded while
`indexer.analysis.analyse_file` indexes permissively licensed clips of ../shared/data (MIT / Apache-2.0
sources only, SOURCES.md). Calibration uses the clips of `--calibrate`, the scores the others:

- RetinaFace (face detection): the faces at the indexer's score threshold, matched to the float graph's
  at IoU >= 0.5 (share matched both ways, median IoU, score error);
- MoveNet MultiPose (keypoints): the people at a person score >= 0.2 matched by box IoU, median keypoint error in
  pixels of the model's input, and whether the rule's keypoint heads (`keypoint_heads`) agree;
- Lite0 (the head vector's appearance part): cosine of each crop's unit band vector to the float one.

Each model's time is the median `run` of its scoring inputs, float and int8 interleaved, in sessions made as the
indexer makes them (`basics.runtime.session_options`: its threads, no spinning, every graph optimisation).

    python research/quantize_levers.py --out /tmp/quant --json /tmp/quant.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT.parent / "shared" / "data"
CALIBRATE = ("face_recognition/examples/short_hamilton_clip.mp4", "LivePortrait/assets/examples/driving/d10.mp4",
             "LivePortrait/assets/examples/driving/d20.mp4", "LivePortrait/assets/examples/source/s20.mp4",
             "video-retalking")
SCORE = ("LivePortrait/assets/examples/driving/d3.mp4", "LivePortrait/assets/examples/driving/d11.mp4",
         "LivePortrait/assets/examples/driving/d9.mp4", "LivePortrait/assets/examples/source/s32.mp4",
         "LivePortrait/assets/examples/source/s18.mp4")


def clips_of(names: tuple[str, ...], data: Path) -> list[Path]:
    out = []
    for name in names:
        p = data / name
        out += sorted(p.rglob("*.mp4")) if p.is_dir() else [p]
    return [p for p in out if p.is_file()]


def record_feeds(clips: list[Path]) -> dict[str, list[dict]]:
    """{model name: [feed, ...]} of every session run while the clips are analysed."""
    import headsearch.basics.runtime as runtime
    from headsearch.basics.settings import IndexSettings
    from headsearch.detection.faces import FaceDetector
    from headsearch.models.registry import load_embedder
    from indexer.analysis import analyse_file

    feeds: dict[str, list[dict]] = defaultdict(list)
    made = runtime.inference_session

    class Recorder:
        def __init__(self, session, name):
            self._s, self._name = session, name

        def run(self, outputs, feed, *a, **k):
            feeds[self._name].append({k_: np.array(v) for k_, v in feed.items()})
            return self._s.run(outputs, feed, *a, **k)

        def __getattr__(self, item):
            return getattr(self._s, item)

    def recording(model, *a, **k):
        name = "retinaface" if isinstance(model, bytes) else Path(model).stem
        return Recorder(made(model, *a, **k), name)

    runtime.inference_session = recording
    try:
        settings = IndexSettings()
        detector = FaceDetector.from_settings(settings)
        embedder = load_embedder(None)
        for clip in clips:
            analyse_file(clip, settings, detector, embedder)
    finally:
        runtime.inference_session = made
    return dict(feeds)


def model_files(out: Path) -> dict[str, Path]:
    from retinaface.weights import WEIGHTS

    from headsearch.detection.keypoints import MOVENET_PATH
    from headsearch.models.whole_head import LITE0_FILE, WEIGHTS_DIR

    out.mkdir(parents=True, exist_ok=True)
    retina = out / "retinaface.onnx"
    retina.write_bytes(WEIGHTS)
    return {"retinaface": retina, MOVENET_PATH.stem: MOVENET_PATH, Path(LITE0_FILE).stem: WEIGHTS_DIR / LITE0_FILE}


def quantize(src: Path, dst: Path, calibration: list[dict], per_channel: bool = True) -> Path:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self):
            self._it = iter(calibration)

        def get_next(self):
            return next(self._it, None)

    import onnx
    from onnx import version_converter

    model = onnx.load(str(src))
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if opset < 13:  # per-channel DequantizeLinear (its axis) needs opset 13
        model = version_converter.convert_version(model, 13)
    up = dst.with_suffix(".opset.onnx")
    onnx.save(model, str(up))
    pre = dst.with_suffix(".pre.onnx")
    quant_pre_process(str(up), str(pre), skip_symbolic_shape=True)
    quantize_static(str(pre), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, op_types_to_quantize=["Conv", "MatMul", "Gemm"],
                    extra_options={"ActivationSymmetric": False, "WeightSymmetric": True})
    return dst


def session(path: Path):
    import onnxruntime as ort

    from headsearch.basics.runtime import session_options

    return ort.InferenceSession(str(path), session_options(), providers=["CPUExecutionProvider"])


def times(a, b, feeds: list[dict], passes: int = 3) -> tuple[float, float]:
    ta, tb = [], []
    for f in feeds[:2]:
        a.run(None, f), b.run(None, f)
    for _ in range(passes):
        for f in feeds:
            t = time.perf_counter()
            a.run(None, f)
            ta.append(time.perf_counter() - t)
            t = time.perf_counter()
            b.run(None, f)
            tb.append(time.perf_counter() - t)
    return statistics.median(ta) * 1000, statistics.median(tb) * 1000


def _iou(a, b) -> float:
    """IoU of two (x1, y1, x2, y2) boxes: the product's `Box.iou`."""
    from schemas.records import Box

    return Box(*a).iou(Box(*b))


def _match(boxes_a, boxes_b, bar=0.5):
    """Greedy IoU matches: (pairs (i, j, iou), unmatched a, unmatched b)."""
    pairs, used = [], set()
    for i, a in enumerate(boxes_a):
        best = max(((j, _iou(a, b)) for j, b in enumerate(boxes_b) if j not in used), key=lambda t: t[1], default=None)
        if best and best[1] >= bar:
            used.add(best[0])
            pairs.append((i, best[0], best[1]))
    return pairs, len(boxes_a) - len(pairs), len(boxes_b) - len(used)


def score_retinaface(fa, fb, feeds) -> dict:
    from retinaface.postprocess import postprocess

    from headsearch.basics.settings import IndexSettings

    thr = IndexSettings.face_score_threshold
    matched = missed = extra = 0
    ious, dscore = [], []
    for f in feeds:
        x = f["input"]
        got = []
        for s in (fa, fb):
            faces = postprocess(list(s.run(None, f)), *x.shape, score_threshold=thr)[0]
            got.append([((d.x, d.y, d.x + d.width, d.y + d.height), d.score) for d in faces])
        pairs, m, e = _match([g[0] for g in got[0]], [g[0] for g in got[1]])
        matched += len(pairs)
        missed += m
        extra += e
        ious += [p[2] for p in pairs]
        dscore += [abs(got[0][i][1] - got[1][j][1]) for i, j, _ in pairs]
    return {"faces_float": matched + missed, "matched": matched, "missed": missed, "extra": extra,
            "median_iou": statistics.median(ious) if ious else None, "max_score_diff": max(dscore) if dscore else None}


def score_movenet(fa, fb, feeds) -> dict:
    from headsearch.detection.keypoints import KeypointRule

    rule = KeypointRule()
    matched = missed = extra = 0
    errors = []
    for f in feeds:
        h, w = f["input"].shape[1:3]
        outs = [s.run(None, f)[0][0] for s in (fa, fb)]
        people = [o[o[:, 55] >= rule.person_min] for o in outs]
        boxes = [[(p[52] * w, p[51] * h, p[54] * w, p[53] * h) for p in ps] for ps in people]
        pairs, m, e = _match(*boxes)
        matched += len(pairs)
        missed += m
        extra += e
        for i, j, _ in pairs:
            ka, kb = people[0][i][:51].reshape(17, 3), people[1][j][:51].reshape(17, 3)
            ok = (ka[:, 2] >= rule.keypoint_min) & (kb[:, 2] >= rule.keypoint_min)
            if ok.any():
                errors += list(np.hypot((ka[ok, 0] - kb[ok, 0]) * h, (ka[ok, 1] - kb[ok, 1]) * w))
    return {"people_float": matched + missed, "matched": matched, "missed": missed, "extra": extra,
            "median_keypoint_px": float(np.median(errors)) if errors else None,
            "p95_keypoint_px": float(np.percentile(errors, 95)) if errors else None}


def score_lite0(fa, fb, feeds) -> dict:
    cos = []
    for f in feeds:
        a, b = (s.run(None, f)[0] for s in (fa, fb))
        a = a / np.linalg.norm(a, axis=1, keepdims=True)
        b = b / np.linalg.norm(b, axis=1, keepdims=True)
        cos += list((a * b).sum(1))
    return {"crops": len(cos), "median_cos": float(np.median(cos)), "min_cos": float(np.min(cos))}


SCORERS = {"retinaface": score_retinaface, "movenet_multipose_lightning": score_movenet, "efficientnet_lite0_head_regions": score_lite0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=Path("/tmp/quant"))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--only", nargs="*", default=list(SCORERS))
    ap.add_argument("--max-calibration", type=int, default=200)
    args = ap.parse_args(argv)
    calibrate = record_feeds(clips_of(CALIBRATE, args.data))
    scoring = record_feeds(clips_of(SCORE, args.data))
    files = model_files(args.out)
    results = {}
    for name in args.only:
        cal, feeds = calibrate.get(name, []), scoring.get(name, [])
        if len(feeds) < 20:  # the scoring clips barely ran it (keypoints run where faces are missing): halves
            cal, feeds = cal[0::2], cal[1::2] + feeds
        step = max(1, len(cal) // args.max_calibration)
        quantized = quantize(files[name], args.out / f"{name}.int8.onnx", cal[::step])
        fa, fb = session(files[name]), session(quantized)
        ms_float, ms_int8 = times(fa, fb, feeds)
        results[name] = {"calibration_runs": len(cal[::step]), "scoring_runs": len(feeds), "ms_float": ms_float,
                         "ms_int8": ms_int8, "speedup": ms_float / ms_int8, **SCORERS[name](fa, fb, feeds)}
        print(name, json.dumps(results[name]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
