"""`headsearch index` killed with SIGKILL: no process outlives it, and the next run finishes the work
with the answers of a run never interrupted (a small version of tests/fault_kill.py)."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from conftest import AMY_DIR, FACES, needs_data

pytestmark = [needs_data, pytest.mark.slow, pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc (Linux)")]

import fault_kill as fault  # noqa: E402 - tests/fault_kill.py, which runs the issue's 20 kills on its own

MEDIA = [AMY_DIR / "amy1.png", AMY_DIR / "amy2.png", FACES / "bbt1.jpg", FACES / "penny" / "penny1.png"]
QUERY = AMY_DIR / "amy3.png"


def workers_of(tag: str) -> list[int]:
    """The worker processes (multiprocessing's spawned children) of the run marked `tag`."""
    found = []
    for pid in fault.tagged_processes(tag):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"spawn_main" in f.read():
                    found.append(pid)
        except OSError:
            continue
    return found


def test_workers_killed_with_their_run_while_they_start_leave_no_process(tmp_path):
    rng = random.Random(19)
    for trial in range(3):
        tag = uuid.uuid4().hex
        run = subprocess.Popen(fault.index_args(tmp_path / f"lib{trial}", 2, MEDIA), env=fault.environment(tag),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=fault.HERE)
        try:
            deadline = time.monotonic() + 120
            while not workers_of(tag) and run.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert workers_of(tag), "the run started no worker"
            time.sleep(rng.uniform(0.0, 1.5))  # somewhere in the workers' start-up (a model load takes seconds)
            run.send_signal(signal.SIGKILL)
            run.wait()
            left, _ = fault.wait_until_gone(tag, grace=30)
            assert not left, f"trial {trial}: processes outlived the killed run: {left}"
        finally:
            if run.poll() is None:
                run.kill()
            fault.kill_all(fault.tagged_processes(tag))


def test_killed_runs_finish_after_a_rerun_with_the_answers_of_a_clean_library(tmp_path):
    start = time.monotonic()
    clean = fault.run_to_end(tmp_path / "clean", 1, MEDIA, uuid.uuid4().hex)
    duration = time.monotonic() - start
    assert clean.returncode == 0, clean.stderr
    reference = fault.answers(tmp_path / "clean", [QUERY])
    assert len(reference["files"]) == len(MEDIA) and isinstance(reference[QUERY.name], list) and reference[QUERY.name]
    rng = random.Random(int(os.environ.get("HEADSEARCH_FAULT_SEED", "5")))
    for n, workers in enumerate((1, 2)):
        trial = fault.kill_and_rerun(n, tmp_path / "library", workers, rng.uniform(0.3, duration), MEDIA, [QUERY], reference,
                                     grace=30)
        assert trial.ok, trial
