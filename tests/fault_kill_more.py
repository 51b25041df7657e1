"""The kill -9 series of `tests/fault_kill.py` for `headsearch redact` and `headsearch people forget` (issue 50):

    python tests/fault_kill.py --command redact [--kills 20] [--seed 50] [--json report.json]
    python tests/fault_kill.py --command forget

redact: `redact HAMILTON --everyone -l LIB --out OUT`, killed (SIGKILL to its process alone) at a random moment of a full
run's duration; then no process of it is left, the source and the library are unchanged, nothing half-written is under
the output's name (no file, or a whole video: as many frames as the source) and no audit trail without its video; the same
command run again finishes, hides the same boxes as a run never killed and leaves no partial file beside the output.

forget: `people forget ID --yes -l LIB` on a copy of a library of the hamilton clip, killed at a random moment of a full
run (every other trial: after its marker appeared, when the database is being written again or cleaned up); then no
process is left and the database is as before or as after, never between (read before anything opens the library); the
command run again forgets the person (or says they are gone, when the kill came after the rename); afterwards no file of
the library holds one of their vectors, no marker or copy is left, and the record names them once.
A Markdown table of the trials goes to stdout; the exit status is 1 when any trial failed.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from fault_kill import DATA, HERE, command, environment, kill_all, wait_until_gone

HAMILTON = DATA / "face_recognition" / "examples" / "short_hamilton_clip.mp4"
LEFTOVERS = (".forgetting", ".library.duckdb.forgetting", ".library.duckdb.forgetting.wal", "library.duckdb.wal")


@dataclass
class Kill:
    number: int
    kill_after: float
    killed_running: bool
    state: str = ""  # what the kill left (redact: output absent / whole / partial; forget: before / after / between)
    left_after_kill: int = 0
    rerun_exit: int | None = None
    ok: bool = False
    note: str = ""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cli(*args: object, tag: str = "check", timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(command(*args), env=environment(tag), capture_output=True, text=True, cwd=HERE, timeout=timeout)


def _killed(args: list[str], kill_after: float, watch=None) -> tuple[bool, int, float, object]:
    """Run `args`, SIGKILL it after `kill_after` s; (whether it still ran, processes left after the grace, seconds they
    lingered, what `watch()` said at the kill)."""
    tag = uuid.uuid4().hex
    proc = subprocess.Popen(args, env=environment(tag), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=HERE)
    seen = None
    try:
        proc.wait(timeout=kill_after)
        running = False
    except subprocess.TimeoutExpired:
        running = True
        seen = watch() if watch else None
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    left, waited = wait_until_gone(tag, 30.0)
    kill_all(left)
    return running, len(left), waited, seen


def _frames(video: Path) -> int:
    import av

    try:
        with av.open(str(video)) as c:
            return sum(1 for _ in c.decode(video=0))
    except Exception:  # noqa: BLE001 - a file cut short by the kill: as many frames as could be read, or none
        return -1


def _redact_series(work: Path, kills: int, rng: random.Random) -> list[Kill]:
    library = work / "lib"
    if _cli("index", HAMILTON, "--library", library, "--quiet").returncode:
        raise SystemExit("indexing the hamilton clip failed")
    _cli("people", "--library", library)
    source_sha, frames = _sha(HAMILTON), _frames(HAMILTON)
    start = time.monotonic()
    clean = work / "clean" / "out.mp4"
    clean.parent.mkdir()
    r = _cli("redact", HAMILTON, "--everyone", "--library", library, "--out", clean)
    duration = time.monotonic() - start
    if r.returncode:
        raise SystemExit(f"the clean redaction failed: {r.stderr.strip()[-300:]}")
    boxes = json.loads(clean.with_name(clean.name + ".redactions.json").read_text())["boxes"]
    database = _sha(library / "library.duckdb")
    print(f"full redaction: {duration:.1f} s, {boxes} boxes in {frames} frames; load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs",
          flush=True)
    trials = []
    for n in range(1, kills + 1):
        out = work / f"t{n}" / "out.mp4"
        out.parent.mkdir()
        trail = out.with_name(out.name + ".redactions.json")
        args = command("redact", HAMILTON, "--everyone", "--library", library, "--out", out)
        kill_after = rng.uniform(0.2, duration)
        running, left, _, _ = _killed(args, kill_after)
        t = Kill(n, round(kill_after, 2), running, left_after_kill=left)
        notes = []
        got = _frames(out) if out.exists() else None
        t.state = "absent" if got is None else "whole" if got == frames else f"partial ({got} frames)"
        if got is not None and got != frames:
            notes.append("a partial video under the output's name")
        if trail.exists() and not out.exists():
            notes.append("an audit trail without its video")
        rerun = _cli("redact", HAMILTON, "--everyone", "--library", library, "--out", out)
        t.rerun_exit = rerun.returncode
        if rerun.returncode:
            notes.append("rerun: " + (rerun.stderr.strip().splitlines() or [""])[-1][:160])
        else:
            if _frames(out) != frames or json.loads(trail.read_text())["boxes"] != boxes:
                notes.append("the rerun's output differs from a clean run's")
        partial = [p.name for p in out.parent.iterdir() if p.name.startswith(".")]
        if partial:
            notes.append(f"left beside the output: {partial}")
        if _sha(HAMILTON) != source_sha:
            notes.append("the source changed")
        if _sha(library / "library.duckdb") != database:
            notes.append("the library changed")
        t.note, t.ok = "; ".join(notes), not notes and not left
        trials.append(t)
        shutil.rmtree(out.parent, ignore_errors=True)
        print(f"trial {n:2d}: killed at {t.kill_after:4.1f} s{'' if running else ' (had ended)'}, output {t.state}, {left} processes left, "
              f"rerun exit {t.rerun_exit}{'  ' + t.note if t.note else ''}", flush=True)
    return trials


def _their_vectors(library: Path, person_id: int) -> list[bytes]:
    import duckdb
    import numpy as np

    con = duckdb.connect(str(library / "library.duckdb"), read_only=True)
    try:
        raw = [r[0] for r in con.execute("SELECT embedding FROM vectors WHERE track_id IN (SELECT track_id FROM person_tracks "
                                         "WHERE person_id = ?)", [person_id]).fetchall()]
        raw += [r[0] for r in con.execute("SELECT centroid FROM people WHERE id = ?", [person_id]).fetchall()]
    finally:
        con.close()
    return [bytes(v)[:32] for v in raw if np.all(np.frombuffer(bytes(v)[:32], "<f4"))]


def _state(library: Path, person_id: int) -> tuple[int, int, int]:
    """(their people row, their vectors, records of forgettings), read from the database file alone."""
    import duckdb

    con = duckdb.connect(str(library / "library.duckdb"), read_only=True)
    try:
        return tuple(con.execute(q, p).fetchone()[0] for q, p in (
            ("SELECT count(*) FROM people WHERE id = ?", [person_id]),
            ("SELECT count(*) FROM vectors WHERE track_id IN (SELECT track_id FROM person_tracks WHERE person_id = ?)", [person_id]),
            ("SELECT count(*) FROM forgotten_people", [])))
    finally:
        con.close()


def _forget_series(work: Path, kills: int, rng: random.Random) -> list[Kill]:
    base = work / "base"
    if _cli("index", HAMILTON, "--library", base, "--quiet").returncode:
        raise SystemExit("indexing the hamilton clip failed")
    people = json.loads(_cli("people", "--library", base, "--json", "--unlisted").stdout)
    pid = max(people, key=lambda p: (len(p["tracks"]), -p["id"]))["id"]
    needles = _their_vectors(base, pid)
    clean = Path(shutil.copytree(base, work / "clean"))
    tag = uuid.uuid4().hex
    start = time.monotonic()
    proc = subprocess.Popen(command("people", "forget", pid, "--yes", "--library", clean), env=environment(tag),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=HERE)
    marked = None
    while proc.poll() is None:
        if marked is None and (clean / ".forgetting").exists():
            marked = time.monotonic() - start
        time.sleep(0.001)
    duration = time.monotonic() - start
    if proc.returncode or marked is None:
        raise SystemExit(f"the clean forget failed (exit {proc.returncode}, marker seen: {marked is not None})")
    print(f"full forget: {duration:.2f} s, its marker from {marked:.2f} s; person {pid}, {len(needles)} vectors looked for; "
          f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    trials = []
    for n in range(1, kills + 1):
        library = Path(shutil.copytree(base, work / f"t{n}"))
        kill_after = rng.uniform(marked, duration) if n % 2 == 0 else rng.uniform(0.2, duration)
        args = command("people", "forget", pid, "--yes", "--library", library)
        running, left, _, during = _killed(args, kill_after, lambda lib=library: (lib / ".forgetting").exists())
        t = Kill(n, round(kill_after, 2), running, left_after_kill=left)
        there, theirs, records = _state(library, pid)
        t.state = ({(1, True, 0): "before", (0, False, 1): "after"}.get((there, theirs > 0, records), f"between {there, theirs, records}")
                   + (" (marker there)" if during else ""))
        notes = [] if not t.state.startswith("between") else ["the database is neither as before nor as after"]
        rerun = _cli("people", "forget", pid, "--yes", "--library", library)
        t.rerun_exit = rerun.returncode
        gone_already = rerun.returncode and f"no person with id '{pid}'" in rerun.stderr and t.state.startswith("after")
        if rerun.returncode and not gone_already:
            notes.append("rerun: " + (rerun.stderr.strip().splitlines() or [""])[-1][:160])
        listed = json.loads(_cli("people", "--library", library, "--json", "--unlisted", "--all").stdout or "[]")
        if pid in {p["id"] for p in listed}:
            notes.append("still listed")
        holders = [str(p.relative_to(library)) for p in library.rglob("*") if p.is_file() and any(v in p.read_bytes() for v in needles)]
        if holders:
            notes.append(f"their vectors in {holders}")
        left_files = [name for name in LEFTOVERS if (library / name).exists()]
        if left_files:
            notes.append(f"left: {left_files}")
        if _state(library, pid)[2] != 1:
            notes.append("the record does not name them once")
        t.note, t.ok = "; ".join(notes), not notes and not left
        trials.append(t)
        shutil.rmtree(library, ignore_errors=True)
        print(f"trial {n:2d}: killed at {t.kill_after:4.2f} s{'' if running else ' (had ended)'}, {t.state}, {left} processes left, "
              f"rerun exit {t.rerun_exit}{'  ' + t.note if t.note else ''}", flush=True)
    return trials


def series(which: str, kills: int, seed: int, grace: float, report: Path | None) -> int:
    """Run the series `which` ("redact" or "forget"); 1 when any trial failed."""
    if not HAMILTON.is_file():
        print(f"missing test media: {HAMILTON} (set HEADSEARCH_TEST_DATA)")
        return 2
    rng = random.Random(seed + (1 if which == "redact" else 2))
    work = Path(tempfile.mkdtemp(prefix=f"headsearch-fault-{which}-"))
    try:
        trials = (_redact_series if which == "redact" else _forget_series)(work, kills, rng)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n| trial | killed at (s) | left | processes left | rerun exit | ok | note |\n|---|---|---|---|---|---|---|")
    for t in trials:
        print(f"| {t.number} | {t.kill_after:.2f}{'' if t.killed_running else ' (ended)'} | {t.state} | {t.left_after_kill} | "
              f"{t.rerun_exit} | {t.ok} | {t.note} |")
    failed = [t for t in trials if not t.ok]
    print(f"\n{which}: {len(trials)} kills ({sum(t.killed_running for t in trials)} while running), {len(failed)} failed trials")
    if report:
        report.write_text(json.dumps([asdict(t) for t in trials], indent=2))
    return 1 if failed else 0
