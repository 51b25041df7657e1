"""Indexing speed of one video with each speed lever alone, all of them, and none, against the
decode-only bound (the same sampling: 2 frames/s, frames no larger than 1280 px).

Each configuration runs in its own process (its peak RSS is its own), `--repeat` times; the table
shows medians. The levers (see docs/benchmarks.md, "Speed and scale"):
  ort      the SFace graph with its weights folded to float, sessions with set threads, no spinning
  subset   one embedded sighting per track per second (the best face of each second)
  overlap  decoding and shot cuts in a thread ahead of detection and embedding
  coarse   detection on a 320 px copy while a shot's faces are large

    python scripts/make_long_video.py /tmp/long.mp4 --minutes 10
    python research/speed_levers.py /tmp/long.mp4 --repeat 3 --json levers.json
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NONE = {"embed_every_s": 0.0, "detect_coarse_side": 0, "decode_ahead": 0}
CONFIGS = {
    "none": ("int8", NONE),
    "ort": ("folded", NONE),
    "subset": ("int8", {**NONE, "embed_every_s": 1.0}),
    "overlap": ("int8", {**NONE, "decode_ahead": 8}),
    "coarse": ("int8", {**NONE, "detect_coarse_side": 320}),
    "all": ("folded", {}),
}


def _untuned(session_path: str):
    """A session as ONNX Runtime makes it by default (what the code did before the ort lever)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(session_path, options, providers=["CPUExecutionProvider"])


def run_one(video: Path, name: str) -> dict:
    from headsearch.basics.settings import IndexSettings
    from headsearch.detection.faces import FaceDetector
    from headsearch.models.sface import SFaceEmbedder, converted_sface
    from indexer.analysis import analyse_file

    graph, overrides = CONFIGS[name]
    os.environ["HEADSEARCH_RUNTIME"] = "auto" if name == "all" else "onnxruntime"  # the levers before OpenVINO's
    settings = IndexSettings(**overrides)
    embedder = SFaceEmbedder(graph=graph)
    detector = FaceDetector.from_settings(settings)
    if graph == "int8":  # before the ort lever: the shipped graph, ONNX Runtime's default session options
        from retinaface.weights import WEIGHTS

        embedder.runner.session = _untuned(str(converted_sface()))
        detector._session = _untuned(WEIGHTS)
    import numpy as np

    detector.detect(np.zeros((64, 64, 3), np.uint8))
    start = time.perf_counter()
    result = analyse_file(video, settings, detector, embedder)
    wall = time.perf_counter() - start
    return {"config": name, "wall_s": wall, "x_real_time": result.duration / wall, "video_seconds": result.duration,
            "stages": result.stage_seconds, "frames": result.frames_decoded, "sampled": result.frames_sampled,
            "tracks": len(result.tracks), "sightings": result.sightings, "embedded": result.embedded,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def decode_bound(video: Path) -> dict:
    from bench.indexing import decode_only
    from headsearch.basics.settings import IndexSettings

    return decode_only(video, IndexSettings())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("video", type=Path)
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated: " + ", ".join(CONFIGS))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--decode-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.video, args.one)))
        return 0
    if args.decode_only:
        print(json.dumps(decode_bound(args.video)))
        return 0
    rows: dict[str, list[dict]] = {}
    bounds = []
    for _ in range(args.repeat):
        out = subprocess.run([sys.executable, __file__, str(args.video), "--decode-only"], capture_output=True, text=True, check=True)
        bounds.append(json.loads(out.stdout.strip().splitlines()[-1]))
        for name in args.configs.split(","):
            out = subprocess.run([sys.executable, __file__, str(args.video), "--one", name], capture_output=True, text=True, check=True)
            rows.setdefault(name, []).append(json.loads(out.stdout.strip().splitlines()[-1]))
            r = rows[name][-1]
            print(f"  {name}: {r['wall_s']:.1f} s ({r['x_real_time']:.2f}x)", file=sys.stderr, flush=True)
    bound = statistics.median(b["realtime"] for b in bounds)
    print(f"decode-only bound: {bound:.1f}x real time (median of {len(bounds)}; {bounds[0]['frames']} frames, "
          f"{bounds[0]['video_seconds']:.0f} s); load average {os.getloadavg()[0]:.2f}")
    stages = ("decode", "shots", "detect", "track", "embed", "wait")
    print(f"{'config':<9} {'wall s':>7} {'x real':>7} {'ratio':>6} " + " ".join(f"{s:>7}" for s in stages)
          + f" {'embedded':>9} {'tracks':>7} {'RSS MB':>7}")
    summary = {}
    for name, runs in rows.items():
        wall = statistics.median(r["wall_s"] for r in runs)
        x = statistics.median(r["x_real_time"] for r in runs)
        st = {s: statistics.median(r["stages"].get(s, 0.0) for r in runs) for s in stages}
        summary[name] = {"wall_s": wall, "x_real_time": x, "ratio": x / bound, "stages": st, "embedded": runs[0]["embedded"],
                         "sightings": runs[0]["sightings"], "tracks": runs[0]["tracks"],
                         "peak_rss_mb": max(r["peak_rss_mb"] for r in runs), "runs": runs}
        print(f"{name:<9} {wall:7.1f} {x:7.2f} {x / bound:6.3f} " + " ".join(f"{st[s]:7.1f}" for s in stages)
              + f" {runs[0]['embedded']:9d} {runs[0]['tracks']:7d} {summary[name]['peak_rss_mb']:7.0f}")
    if args.json:
        args.json.write_text(json.dumps({"decode_only": bounds, "decode_only_x_real_time": bound, "configs": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
