#!/usr/bin/env bash
# The GPU check, ready for a machine with an NVIDIA GPU (not run by the project's machines, which have none):
#   1. installs this checkout with the GPU builds (faiss-gpu-cu12, onnxruntime-gpu in place of faiss-cpu and
#      onnxruntime) into a throwaway virtualenv under the work folder;
#   2. makes the 10-minute benchmark video (scripts/make_long_video.py) and indexes it with GPU decoding and
#      inference (`headsearch bench speed --only indexing`, HEADSEARCH_DEVICE=cuda, HEADSEARCH_HWDECODE=cuda);
#   3. searches 1e7 synthetic 128-d vectors on the GPU: the library's own store (`bench speed --index library`:
#      encoded and searched on a GPU copy when faiss-gpu sees one, re-ranked on the CPU) and an exact GPU flat index;
#   4. prints one JSON line with what it measured (progress goes to stderr).
# Without a GPU it prints {"gpu": false, ...} and exits 3, having installed and measured nothing.
#
#   bash scripts/gpu_check.sh [WORK_DIR]        # default /tmp/headsearch-gpu-check; about 15 GB of disk at 1e7
#
# Environment: PYTHON (the interpreter for the venv, default python3), WHEELS (a folder of wheels for a machine
# without PyPI: pip install --no-index --find-links WHEELS), GPU_CHECK_SIZES (default 1e7), GPU_CHECK_MINUTES
# (default 10), GPU_CHECK_DATA (the media folder for make_long_video.py, default ../shared/data).
# GPU_CHECK_CPU=1 runs every step on the CPU in the current environment without installing anything (to check
# the script itself, e.g. GPU_CHECK_CPU=1 GPU_CHECK_SIZES=1e4 GPU_CHECK_MINUTES=0.2).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${1:-/tmp/headsearch-gpu-check}
SIZES=${GPU_CHECK_SIZES:-1e7}
MINUTES=${GPU_CHECK_MINUTES:-10}
CPU_ONLY=${GPU_CHECK_CPU:-0}
say() { echo "gpu_check: $*" >&2; }

gpu_name=""
if command -v nvidia-smi >/dev/null 2>&1; then
  gpu_name=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n 1 || true)
fi
if [[ -z "$gpu_name" && "$CPU_ONLY" != 1 ]]; then
  say "no NVIDIA GPU here (nvidia-smi lists none): nothing installed or measured; run this on a machine with one"
  echo '{"gpu": false, "reason": "no NVIDIA GPU (nvidia-smi lists none)"}'
  exit 3
fi

mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
if [[ "$CPU_ONLY" == 1 ]]; then
  PY=${PYTHON:-python3}
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
  export HEADSEARCH_DEVICE=cpu HEADSEARCH_HWDECODE=off
  say "GPU_CHECK_CPU=1: every step on the CPU with $PY, nothing installed"
else
  VENV="$WORK/venv"
  PIP_SOURCE=()
  [[ -n "${WHEELS:-}" ]] && PIP_SOURCE=(--no-index --find-links "$WHEELS")
  if [[ ! -x "$VENV/bin/headsearch" ]]; then
    say "installing this checkout and the GPU builds into $VENV"
    "${PYTHON:-python3}" -m venv "$VENV"
    "$VENV/bin/pip" install -q "${PIP_SOURCE[@]}" --upgrade pip
    "$VENV/bin/pip" install -q "${PIP_SOURCE[@]}" -e "$ROOT"
    # faiss-cpu and faiss-gpu install the same module, as do onnxruntime and onnxruntime-gpu: one or the other
    "$VENV/bin/pip" uninstall -q -y faiss-cpu onnxruntime
    "$VENV/bin/pip" install -q "${PIP_SOURCE[@]}" faiss-gpu-cu12 onnxruntime-gpu
  fi
  PY="$VENV/bin/python"
  export HEADSEARCH_DEVICE=cuda HEADSEARCH_HWDECODE=cuda
fi
HS=("$PY" -c "from cli.main import main; main()")

VIDEO="$WORK/long.mp4"
if [[ ! -s "$VIDEO" ]]; then
  say "making the ${MINUTES}-minute benchmark video $VIDEO"
  "$PY" "$ROOT/scripts/make_long_video.py" "$VIDEO" --minutes "$MINUTES" ${GPU_CHECK_DATA:+--data "$GPU_CHECK_DATA"} >&2
fi

say "indexing $VIDEO (decoding and inference on the GPU; -v names any fallback to the CPU)"
"${HS[@]}" -v bench speed --only indexing --video "$VIDEO" --json > "$WORK/indexing.json" 2> "$WORK/indexing.log"

say "searching $SIZES vectors: the library's store (built on the first run; kept in $WORK/bench), then exact on the GPU"
"${HS[@]}" -v bench speed --only search --sizes "$SIZES" --index library --work-dir "$WORK/bench" --json \
  > "$WORK/search.json" 2> "$WORK/search.log"

"$PY" - "$WORK" "$SIZES" "$gpu_name" <<'EOF'
"""Exact search of the same vectors on the GPU (GpuIndexFlatIP), then one JSON line of everything measured."""
import json
import sys
import time
from pathlib import Path

import numpy as np

work, sizes, gpu_name = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
out = {"gpu": gpu_name or False}
try:
    import faiss
    import onnxruntime

    out["faiss"] = faiss.__version__
    out["faiss_gpus"] = faiss.get_num_gpus() if hasattr(faiss, "StandardGpuResources") else 0
    out["onnxruntime_providers"] = onnxruntime.get_available_providers()
except Exception as e:  # reported, not fatal
    out["import_error"] = f"{type(e).__name__}: {e}"
indexing = json.loads((work / "indexing.json").read_text())["indexing"]
out["indexing"] = {k: indexing.get(k) for k in ("video_seconds", "wall_s", "x_real_time", "decode_only_x_real_time", "ratio", "ratio_every_frame_rgb",
                                                 "decoder", "tracks", "sightings")}
out["indexing"]["stages_s"] = {name: s["seconds"] for name, s in indexing["stages"].items()}
log = (work / "indexing.log").read_text().splitlines() + (work / "search.log").read_text().splitlines()
out["cpu_fallbacks"] = [line for line in log if "CPU" in line and ("fall" in line or "unavailable" in line or "using the CPU" in line)][:10]
searches = json.loads((work / "search.json").read_text())["search"]
out["search_library"] = [{k: r.get(k) for k in ("vectors", "device", "p50_ms", "p95_ms", "recall_at_10", "rss_mb", "build_s", "params")}
                         for r in searches]
if out.get("faiss_gpus"):
    from headsearch.vectors.segment_files import RawVectors
    from bench.search import recall_at_k, single_query_latencies

    for r in searches:
        n = r["vectors"]
        data = work / "bench" / f"n{n}-d128-seed0-q1000"
        raw = RawVectors(data / "vectors.f32", 128)
        queries = np.load(data / "queries.npy")
        truth = np.load(data / "truth-k10.npz")
        t0 = time.perf_counter()
        resources = faiss.StandardGpuResources()  # held while the index lives
        index = faiss.GpuIndexFlatIP(resources, 128)
        for start in range(0, n, 1 << 20):
            index.add(raw.range(start, min(n, start + (1 << 20))))
        build_s = time.perf_counter() - t0
        latencies = single_query_latencies(lambda q: index.search(q, 10), queries[:200])
        t0 = time.perf_counter()
        _, found = index.search(queries, 10)
        batch_s = time.perf_counter() - t0
        out.setdefault("search_gpu_exact", []).append({
            "vectors": n, "p50_ms": float(np.percentile(latencies, 50) * 1e3), "p95_ms": float(np.percentile(latencies, 95) * 1e3),
            "batch_qps": len(queries) / batch_s, "recall_at_10": recall_at_k(found, truth["ids"], raw, queries, truth["kth"]),
            "build_s": build_s})
        del index
print(json.dumps(out))
EOF
