"""Kill `headsearch index` with SIGKILL at random moments and check what it leaves (issue 19's acceptance); and
`headsearch redact` and `headsearch people forget` the same way (issue 50's).

    python tests/fault_kill.py                       # 20 kills, every other one with --workers 2
    python tests/fault_kill.py --kills 4 --seed 7    # fewer, another draw
    python tests/fault_kill.py --json report.json    # the trials as JSON too
    python tests/fault_kill.py --command redact      # 20 kills of `redact CLIP --everyone -l LIB` (fault_kill_more.py)
    python tests/fault_kill.py --command forget      # 20 kills of `people forget ID --yes -l LIB` (fault_kill_more.py)

Each trial indexes the media into a fresh library, kills the run (and nothing else: SIGKILL to its
process alone) at a random moment of a full run's duration, then checks that
  - no process of the run is left (its workers die with it; a worker still starting up leaves as soon
    as it sees that its parent is gone), waiting at most --grace seconds;
  - the same command, run again, finishes (exit 0) and leaves no process either;
  - the library then answers as a library indexed without interruption: the same files with the same
    track counts, and the same hits (file, times, score) for the query photos.
A Markdown table of the trials goes to stdout; the exit status is 1 when any trial failed.
The helpers are used by tests/test_killed_runs.py on a smaller scale.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("HEADSEARCH_TEST_DATA") or HERE.parent / "shared" / "data").resolve()
MEDIA = [DATA / "face-api.js" / "examples" / "images", DATA / "face_recognition" / "examples" / "short_hamilton_clip.mp4"]
QUERIES = [DATA / "face-api.js" / "examples" / "images" / "amy" / "amy1.png",
           DATA / "face_recognition" / "examples" / "lin-manuel-miranda.png"]
TAG = "HEADSEARCH_FAULT_TAG"


def command(*args: object) -> list[str]:
    """The real `headsearch` command, run from this checkout."""
    return [sys.executable, "-m", "cli.main", *map(str, args)]


def environment(tag: str) -> dict[str, str]:
    """The command's environment, marked with `tag`: every process it starts inherits the mark."""
    return {**os.environ, "PYTHONPATH": str(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""), TAG: tag}


def tagged_processes(tag: str) -> list[int]:
    """The processes whose environment carries the mark (a run and all it started, orphans included)."""
    found = []
    needle = f"{TAG}={tag}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def wait_until_gone(tag: str, grace: float) -> tuple[list[int], float]:
    """Wait up to `grace` seconds for every marked process to end; (those still there, seconds waited)."""
    start = time.monotonic()
    while True:
        left = tagged_processes(tag)
        waited = time.monotonic() - start
        if not left or waited >= grace:
            return left, waited
        time.sleep(0.1)


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def index_args(library: Path, workers: int, media: list[Path]) -> list[str]:
    return command("index", *media, "--library", library, "--quiet", *(["--workers", str(workers)] if workers > 1 else []))


def run_to_end(library: Path, workers: int, media: list[Path], tag: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(index_args(library, workers, media), env=environment(tag), capture_output=True, text=True,
                          timeout=timeout, cwd=HERE)


def answers(library: Path, queries: list[Path]) -> dict:
    """What a library answers: its files with their kind and track count, and each query's hits
    (file, start, end, time, score, tier), ids left out (a killed run may use up ids)."""
    env = environment("answers")
    files = json.loads(subprocess.run(command("list", "--library", library, "--json"), env=env, capture_output=True,
                                      text=True, check=True, cwd=HERE).stdout)
    found = {"files": sorted((f["path"], f["kind"], f["state"], f.get("tracks")) for f in files)}
    for q in queries:
        out = subprocess.run(command("query", q, "--library", library, "--json", "-k", "5", "--no-pictures"), env=env,
                             capture_output=True, text=True, cwd=HERE)
        hits = json.loads(out.stdout) if out.returncode == 0 and out.stdout.strip() else out.stderr.strip()
        if isinstance(hits, list):
            hits = [(h["video"], round(h["start"], 3), round(h["end"], 3), round(h["time"], 3), round(h["score"], 4), h.get("tier"))
                    for h in hits]
        found[str(q.name)] = hits
    return found


@dataclass
class Trial:
    number: int
    workers: int
    kill_after: float  # seconds after the run started
    killed_running: bool  # the run was still running when killed (else it had finished)
    left_folder: str = ""  # what the kill left: no folder, an unfinished library (no manifest), or a library
    left_after_kill: list[int] = field(default_factory=list)
    linger_seconds: float = 0.0  # until the last process of the killed run ended
    rerun_exit: int | None = None
    left_after_rerun: list[int] = field(default_factory=list)
    same_answers: bool | None = None
    note: str = ""

    @property
    def ok(self) -> bool:
        return not self.left_after_kill and self.rerun_exit == 0 and not self.left_after_rerun and bool(self.same_answers)


def kill_and_rerun(number: int, library: Path, workers: int, kill_after: float, media: list[Path], queries: list[Path],
                   reference: dict | None, grace: float) -> Trial:
    """One trial: a fresh library, a run killed after `kill_after` seconds, the checks, the rerun."""
    shutil.rmtree(library, ignore_errors=True)
    tag = uuid.uuid4().hex
    process = subprocess.Popen(index_args(library, workers, media), env=environment(tag), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, cwd=HERE)
    try:
        process.wait(timeout=kill_after)
        running = False
    except subprocess.TimeoutExpired:
        running = True
        process.send_signal(signal.SIGKILL)
        process.wait()
    trial = Trial(number, workers, round(kill_after, 2), running)
    trial.left_folder = ("library" if (library / "manifest.json").exists() else "unfinished library" if library.exists()
                         else "no folder")
    left, waited = wait_until_gone(tag, grace)
    trial.left_after_kill, trial.linger_seconds = left, round(waited, 2)
    kill_all(left)
    rerun_tag = uuid.uuid4().hex
    rerun = run_to_end(library, workers, media, rerun_tag)
    trial.rerun_exit = rerun.returncode
    if rerun.returncode != 0:
        trial.note = (rerun.stderr.strip().splitlines() or [""])[-1][:200]
    trial.left_after_rerun, _ = wait_until_gone(rerun_tag, grace)
    kill_all(trial.left_after_rerun)
    if rerun.returncode == 0 and reference is not None:
        got = answers(library, queries)
        trial.same_answers = got == reference
        if not trial.same_answers:
            trial.note = "; ".join(k for k in reference if got.get(k) != reference[k])
    return trial


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--workers", type=int, default=2, help="the --workers of every other trial (the others run serially)")
    parser.add_argument("--grace", type=float, default=30.0, help="seconds a killed run's processes get to end")
    parser.add_argument("--window", type=float, nargs=2, default=None, metavar=("FROM", "TO"),
                        help="kill between these seconds after the start (default: anywhere in a full run)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--command", choices=("index", "redact", "forget"), default="index",
                        help="the command killed (redact and forget: tests/fault_kill_more.py)")
    args = parser.parse_args()
    if args.command != "index":
        from fault_kill_more import series

        return series(args.command, args.kills, args.seed, args.grace, args.json)
    missing = [p for p in MEDIA + QUERIES if not p.exists()]
    if missing:
        print(f"missing test media: {', '.join(map(str, missing))} (set HEADSEARCH_TEST_DATA)", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="headsearch-fault-"))
    try:
        durations, reference = {}, None
        for workers in (1, args.workers):  # a clean library, and how long a full run takes with each engine
            start = time.monotonic()
            clean = run_to_end(work / f"clean-{workers}", workers, MEDIA, uuid.uuid4().hex)
            durations[workers] = time.monotonic() - start
            if clean.returncode != 0:
                print(f"the clean run failed: {clean.stderr.strip()[-500:]}", file=sys.stderr)
                return 2
            got = answers(work / f"clean-{workers}", QUERIES)
            if reference is None:
                reference = got
            elif got != reference:
                print("note: the clean runs with and without workers answer differently", file=sys.stderr)
        print(f"full run: {durations[1]:.1f} s serial, {durations[args.workers]:.1f} s with --workers {args.workers}; "
              f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
        trials = []
        for n in range(1, args.kills + 1):
            workers = args.workers if n % 2 == 0 else 1
            kill_after = rng.uniform(*(args.window or (0.2, durations[workers])))
            trial = kill_and_rerun(n, work / "library", workers, kill_after, MEDIA, QUERIES, reference, args.grace)
            trials.append(trial)
            print(f"trial {n:2d}: workers {workers}, killed at {trial.kill_after:5.1f} s{'' if trial.killed_running else ' (had ended)'}, "
                  f"left {trial.left_folder}, {len(trial.left_after_kill)} processes left after {trial.linger_seconds:.1f} s, "
                  f"rerun exit {trial.rerun_exit}, "
                  f"same answers {trial.same_answers}{'  ' + trial.note if trial.note else ''}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n| trial | workers | killed at (s) | left | processes left | last one ended after (s) | rerun exit | same answers |")
    print("|---|---|---|---|---|---|---|---|")
    for t in trials:
        print(f"| {t.number} | {t.workers} | {t.kill_after:.1f}{'' if t.killed_running else ' (ended)'} | {t.left_folder} | "
              f"{len(t.left_after_kill)} | {t.linger_seconds:.1f} | {t.rerun_exit} | {t.same_answers} |")
    failed = [t for t in trials if not t.ok]
    print(f"\n{len(trials)} kills ({sum(t.killed_running for t in trials)} while running), {len(failed)} failed trials")
    if args.json:
        args.json.write_text(json.dumps([asdict(t) for t in trials], indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
