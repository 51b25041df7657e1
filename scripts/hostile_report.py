"""Run every case of the hostile media corpus (tests/hostile_media.py) alone through `headsearch
index` in a fresh process and report its exit code, time, peak resident memory and message.

    python scripts/hostile_report.py                      # this checkout, a Markdown table on stdout
    python scripts/hostile_report.py --source /tmp/old    # another checkout (e.g. `git archive` of main)
    python scripts/hostile_report.py --big                # also the largest inputs (the issue's 30000x30000 JPEG
                                                          # needs ~3 GB to make)

Each case gets its own folder and library; a watchdog kills a run above --kill-above-gb of
resident memory or past --timeout seconds (reported as such).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "tests"))

from hostile_media import CASES, Case  # noqa: E402

FACE = HERE.parent / "shared" / "data" / "face_recognition" / "examples" / "obama_small.jpg"


def big_jpeg(path: Path, face) -> None:
    """The issue's photo: a JPEG of 30000x30000 pixels (made from the face photo, a few MB)."""
    code = ("import sys; from PIL import Image; im = Image.new('RGB', (30000, 30000), (96, 96, 96)); "
            "f = Image.open(sys.argv[2]).convert('RGB').resize((12000, 9000)); im.paste(f, (9000, 10500)); "
            "im.save(sys.argv[1], quality=90)")
    subprocess.run([sys.executable, "-c", code, str(path), str(FACE)], check=True)


def big_png(path: Path, face) -> None:
    """A 7000x7000 PNG (49 MP): just within the default limit, decoded whole."""
    from hostile_media import face_frame, save_image

    save_image(path, face_frame(face, 7000, 7000), compress_level=1)


def video_8k(path: Path, face) -> None:
    """Three 7680x4320 frames (33 MP, 8K UHD): within the default 40 MP limit."""
    from hostile_media import face_frame, write_video

    write_video(path, [face_frame(face, 7680, 4320, 40 * i) for i in range(3)], options={"preset": "ultrafast"})


BIG = [Case("issue-30000x30000.jpg", big_jpeg, "indexed", what="the issue's 30000x30000 JPEG"),
       Case("png-7000x7000.png", big_png, "indexed", what="7000x7000 PNG (49 MP, decoded whole)"),
       Case("8k-7680x4320.mp4", video_8k, "indexed", what="8K H.264, 3 frames (33 MP frames)")]


# Runs one command as its child and measures it: a small fresh process, so that the child's peak
# resident memory (ru_maxrss, which Linux carries over from the parent at fork) is the child's own.
LAUNCHER = r"""
import json, os, subprocess, sys, threading, time
out, timeout, limit, cmd = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
start = time.perf_counter()
proc = subprocess.Popen(cmd)
killed, done = [], threading.Event()
def rss():
    try:
        return next(int(l.split()[1]) * 1024 for l in open(f"/proc/{proc.pid}/status") if l.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return 0
def watch():
    while not done.wait(0.05):
        if rss() > limit or time.perf_counter() - start > timeout:
            killed.append(f"killed above {limit / 2**30:.0f} GB" if rss() > limit else f"killed after {timeout:.0f} s (hung)")
            proc.kill()
            return
threading.Thread(target=watch, daemon=True).start()
_, status, usage = os.wait4(proc.pid, 0)
done.set()
json.dump({"code": os.waitstatus_to_exitcode(status), "wall": time.perf_counter() - start,
           "rss": usage.ru_maxrss * 1024, "killed": killed[0] if killed else ""}, open(out, "w"))
"""


def run_measured(args: list[str], cwd: Path, timeout: float, kill_above: float) -> dict:
    """Exit code, wall seconds, peak RSS (bytes) and output of one command, run by the launcher."""
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        proc = subprocess.run([sys.executable, "-c", LAUNCHER, str(result), str(timeout), str(kill_above), *args],
                              cwd=cwd, capture_output=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        measured = json.loads(result.read_text())
    return {**measured, "stdout": proc.stdout.decode(errors="replace"), "stderr": proc.stderr.decode(errors="replace")}


def make_cases(folder: Path, names: list[str], big: bool) -> None:
    """Write cases in a child process (this one stays small: its children inherit its memory peak)."""
    code = ("import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); import cv2; "
            "import hostile_media as h; sys.path.insert(0, sys.argv[2]); import hostile_report as r; "
            "face = cv2.cvtColor(cv2.imread(str(r.FACE)), cv2.COLOR_BGR2RGB); "
            "cases = [c for c in h.CASES + r.BIG if c.name in sys.argv[4:]]; h.make_corpus(Path(sys.argv[3]), face, cases)")
    subprocess.run([sys.executable, "-c", code, str(HERE / "tests"), str(HERE / "scripts"), str(folder), *names], check=True)


def message(result: dict, folder: Path) -> str:
    """The line a user reads: the error line, the traceback's last line, or what was indexed."""
    if result["killed"]:
        return result["killed"]
    if result["code"] < 0:
        return f"CRASHED: killed by signal {signal.Signals(-result['code']).name}"
    err = [line for line in result["stderr"].splitlines() if line.strip()]
    errors = [line for line in err if line.startswith("error:")]
    if "Traceback (most recent call last)" in result["stderr"]:
        last = [line for line in err if not line.startswith((" ", "[", "\t"))][-1]
        return f"TRACEBACK: {last}"
    summary = [line for line in result["stdout"].splitlines() if re.search(r"\d files? \(", line)]
    found = re.search(r"([\d,]+) frames?, [\d,]+ shots?, ([\d,]+) tracks?", summary[0]) if summary else None
    indexed = f"indexed: {found[1]} frames, {found[2]} head tracks" if found else ""
    warnings = [line.replace("warning: ", "") for line in err if line.startswith("warning:")]
    text = "; ".join(errors) if errors else "; ".join([indexed, *warnings]) if summary else (err[-1] if err else "")
    return text.replace(str(folder) + "/", "").replace("error: ", "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=HERE, help="checkout whose `cli.main` runs (default: this one)")
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--big", action="store_true", help="add the issue's 30000x30000 JPEG, a 49 MP PNG and an 8K video")
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument("--kill-above-gb", type=float, default=7.0)
    ap.add_argument("--whole", action="store_true", help="also index the whole corpus in one run")
    args = ap.parse_args()
    cases = CASES + (BIG if args.big else [])
    if args.cases:
        wanted = set(args.cases.split(","))
        cases = [c for c in cases if c.name in wanted]
    work = Path(tempfile.mkdtemp(prefix="headsearch-hostile-"))
    print(f"source {args.source}; {len(cases)} cases; python {sys.executable}\n", file=sys.stderr)
    print("| case | what | exit | time (s) | peak RSS (MB) | message |\n|---|---|---|---|---|---|")
    try:
        for case in cases:
            folder = work / case.name.replace(".", "_")
            make_cases(folder / "in", [case.name], args.big)
            target = folder / "in" / ("explicit" if case.explicit else "") / case.name if case.explicit else folder / "in"
            cmd = [sys.executable, "-m", "cli.main", "index", str(target), "--library", str(folder / "lib"), "-q"]
            r = run_measured(cmd, args.source, args.timeout, args.kill_above_gb * 2**30)
            msg = message(r, folder / "in").replace("|", "/")
            print(f"| {case.name} | {case.what} | {r['code']} | {r['wall']:.1f} | {r['rss'] / 2**20:,.0f} | {msg} |", flush=True)
            shutil.rmtree(folder, ignore_errors=True)
        if args.whole:
            folder = work / "whole"
            make_cases(folder / "in", [c.name for c in CASES], False)
            explicit = [str(folder / "in" / "explicit" / c.name) for c in CASES if c.explicit]
            cmd = [sys.executable, "-m", "cli.main", "index", str(folder / "in"), *explicit, "--library", str(folder / "lib"), "-q"]
            r = run_measured(cmd, args.source, args.timeout * 3, args.kill_above_gb * 2**30)
            errors = sum(line.startswith("error:") for line in r["stderr"].splitlines())
            summary = [line for line in r["stdout"].splitlines() if re.search(r"\d files? \(", line)]
            tb = "TRACEBACK; " if "Traceback" in r["stderr"] else ""
            print(f"| (whole corpus, one run) | all {len(CASES)} cases | {r['code']} | {r['wall']:.1f} | {r['rss'] / 2**20:,.0f} | "
                  f"{r['killed'] or tb + (summary[0].split(' [')[0] if summary else '')}; {errors} error lines |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
