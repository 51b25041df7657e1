"""Cold query: `headsearch query PHOTO -k 3` as a fresh process on a one-video library, against a bare
`python -c "import onnxruntime, cv2, numpy"` timed in the same run. The two alternate, so both see the machine as it is
at that moment; each is run once first, uncounted (the page cache, and the bytecode of an installed copy)."""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from headsearch.basics.errors import HeadsearchError, MediaError

BARE = "import onnxruntime, cv2, numpy"
STAGE_LINE = "cli: seconds: "  # what `query -v` says of its stages


def cold_query_speed(video: Path, photo: Path, model: str | None = None, repeat: int = 5, k: int = 3) -> dict:
    """Index `video` into a temporary library, then time `repeat` cold queries with `photo` and as many bare imports.
    The record has every time, the medians, their ratio and the stages of the median query (`query -v`)."""
    for path, what in ((video, "video"), (photo, "photo")):
        if not Path(path).expanduser().is_file():
            raise MediaError(f"{path}: no such {what} file")
    # Bytecode is written as an installed copy has it (pip compiles what it installs; an environment that says
    # PYTHONDONTWRITEBYTECODE would otherwise recompile headsearch's modules in every process).
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    program = [sys.executable, "-m", "cli.main"]
    with tempfile.TemporaryDirectory(prefix="headsearch-bench-") as tmp:
        library = Path(tmp) / "library"
        made = subprocess.run([*program, "index", str(video), "--library", str(library), "-q", *(["--model", model] if model else [])],
                              capture_output=True, text=True, env=env)
        if made.returncode != 0:
            raise HeadsearchError(f"{video}: indexing for the cold-query benchmark failed: {made.stderr.strip()[-300:]}")
        query = [*program, "query", str(photo), "-k", str(k), "--library", str(library), "-v"]
        bare = [sys.executable, "-c", BARE]
        runs = []
        for i in range(repeat + 1):
            bare_s, _ = _timed(bare, env)
            query_s, answered = _timed(query, env)
            if i:
                runs.append({"bare_s": bare_s, "query_s": query_s, "stages": stage_seconds(answered.stderr)})
    bare_median, query_median = statistics.median(r["bare_s"] for r in runs), statistics.median(r["query_s"] for r in runs)
    middle = sorted(runs, key=lambda r: r["query_s"])[(len(runs) - 1) // 2]
    return {"video": str(video), "photo": str(photo), "k": k, "repeat": repeat, "runs": runs, "bare": BARE,
            "bare_median_s": bare_median, "query_median_s": query_median, "ratio": query_median / bare_median,
            "stages": middle["stages"]}


def _timed(command: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise HeadsearchError(f"{' '.join(command[:4])}...: exit {done.returncode}: {done.stderr.strip()[-300:]}")
    return seconds, done


def stage_seconds(stderr: str) -> dict[str, float]:
    """{"start": 0.18, "imports": 0.41, ...} from the line `query -v` writes."""
    line = next((ln for ln in stderr.splitlines() if ln.startswith(STAGE_LINE)), None)
    if line is None:
        return {}
    parts = line.removeprefix(STAGE_LINE).split(";")[0].split(", ")
    return {name: float(seconds) for name, seconds, _unit in (part.split() for part in parts)}
