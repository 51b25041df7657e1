"""The one-off trial of ONNX Runtime against OpenVINO runs in a process of its own: this process never loads the
runtime it does not use (the first `headsearch demo` peaked at 2.0 GB with both in one process); a trial's process
that fails, is killed, answers garbage or hangs leaves ONNX Runtime running, said once, with nothing saved; an
interrupted wait ends it, and so does its parent's death."""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from headsearch.basics import batch_runtime, runtime
from headsearch.basics.batch_runtime import ONNXRUNTIME, OPENVINO, TRIAL_ROWS, BatchRunner
from headsearch.models.whole_head import LITE0_FILE, LITE0_SIDE, WEIGHTS_DIR

pytest.importorskip("openvino")
pytestmark = pytest.mark.slow  # real models, and processes started

LITE0 = WEIGHTS_DIR / LITE0_FILE  # shipped: no conversion to wait for


def _rows(n: int = TRIAL_ROWS) -> np.ndarray:
    return (np.random.default_rng(0).random((n, LITE0_SIDE, LITE0_SIDE, 3)) * 255).astype(np.float32)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADSEARCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(batch_runtime.RUNTIME_ENV, raising=False)
    monkeypatch.setattr(runtime, "_said", set())
    return tmp_path / "cache" / "models" / batch_runtime.CHOICES


TRIAL_HERE_OR_THERE = """
import json, sys
import numpy as np
from headsearch.basics import batch_runtime
from headsearch.models.whole_head import LITE0_FILE, WEIGHTS_DIR
batch_runtime.OPENVINO_MARGIN = float(sys.argv[1])  # this process decides from the trial's times
runner = batch_runtime.BatchRunner(WEIGHTS_DIR / LITE0_FILE)
out = runner.run((np.random.default_rng(0).random((12, 256, 256, 3)) * 255).astype(np.float32))
maps = open("/proc/self/maps").read()
print(json.dumps({"runtime": runner.runtime, "trial": runner.trial, "rows": len(out),
                  "compiled_here": "libopenvino_intel_cpu_plugin" in maps or "libopenvino_onnx_frontend" in maps}))
"""


def test_the_trial_runs_elsewhere_and_this_process_loads_only_the_runtime_chosen(cache):
    env = {**os.environ, "HEADSEARCH_CACHE": str(cache.parent.parent)}
    for margin, chosen in ((1e9, ONNXRUNTIME), (0.0, OPENVINO)):  # ONNX Runtime wins whatever the times, then OpenVINO
        done = subprocess.run([sys.executable, "-c", TRIAL_HERE_OR_THERE, str(margin)], env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        got = json.loads(done.stdout.splitlines()[-1])
        assert got["runtime"] == got["trial"]["runtime"] == chosen and got["rows"] == 12
        # OpenVINO ran (its time is there) but compiled nothing in this process unless it was chosen
        assert got["trial"]["openvino_ms"] > 0 and got["compiled_here"] == (chosen == OPENVINO), got
        assert got["trial"]["rows"] == TRIAL_ROWS and got["trial"]["outputs_agree"]  # the batch's first rows were timed
        saved = list(cache.glob("*.json"))
        assert len(saved) == 1 and json.loads(saved[0].read_text()) == got["trial"]
        saved[0].unlink()


@pytest.mark.parametrize(("child", "why"), [
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "killed by signal 9"),
    ("raise SystemExit('the trial broke')", "the trial broke"),
    ("print('not an answer')", "no answer"),
    ("print('{\"times\": {\"rows\": 8}, \"said\": []}')", "no answer"),  # an answer cut short
])
def test_a_trial_process_that_fails_leaves_onnxruntime_and_saves_nothing(cache, monkeypatch, caplog, child, why):
    monkeypatch.setattr(batch_runtime, "_CHILD", child)
    rows = _rows(TRIAL_ROWS + 2)
    with caplog.at_level(logging.WARNING, logger="headsearch.basics.runtime"):
        runner = BatchRunner(LITE0)
        out = runner.run(rows)
    assert runner.runtime == ONNXRUNTIME and runner.trial is None and runner._compiled is None
    np.testing.assert_array_equal(out, runner.session.run(None, {runner.input: rows})[0])
    assert not cache.exists()
    assert "the runtime trial failed" in caplog.text and why in caplog.text and "Traceback" not in caplog.text


def _sleeper(pid_file) -> str:
    """A trial's process that dies with its parent as the real one does, says its pid, and never answers."""
    return ("import os, sys, time\nsys.path.insert(0, sys.argv[1])\n"
            "from headsearch.basics.batch_runtime import _die_with_parent\n_die_with_parent(int(sys.argv[4]))\n"
            f"open({str(pid_file)!r} + '.partial', 'w').write(str(os.getpid()))\n"
            f"os.replace({str(pid_file)!r} + '.partial', {str(pid_file)!r})\ntime.sleep(120)\n")


def _gone(pid: int, within_s: float = 10.0) -> bool:
    """The process has ended (a zombie not yet reaped by its new parent counts as ended)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def _wait_for(path, within_s: float = 60.0) -> int:
    deadline = time.monotonic() + within_s
    while not path.exists():
        assert time.monotonic() < deadline, f"no {path}"
        time.sleep(0.05)
    return int(path.read_text())


def test_a_trial_process_that_hangs_is_killed_after_its_time(cache, monkeypatch, caplog, tmp_path):
    monkeypatch.setattr(batch_runtime, "_CHILD", _sleeper(tmp_path / "pid"))
    monkeypatch.setattr(batch_runtime, "TRIAL_TIMEOUT_S", 5)
    with caplog.at_level(logging.WARNING, logger="headsearch.basics.runtime"):
        runner = BatchRunner(LITE0)
        started = time.monotonic()
        runner.run(_rows())
    assert time.monotonic() - started < 60 and runner.runtime == ONNXRUNTIME and not cache.exists()
    assert "no answer in 5 s" in caplog.text
    assert _gone(_wait_for(tmp_path / "pid"), within_s=0.5)


INTERRUPTED_TRIAL = """
import os, signal, sys, threading, time
import numpy as np
from pathlib import Path
from headsearch.basics import batch_runtime
from headsearch.models.whole_head import LITE0_FILE, WEIGHTS_DIR
batch_runtime._CHILD = sys.argv[1]
pid_file = Path(sys.argv[2])
def interrupt():
    while not pid_file.exists():
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=interrupt, daemon=True).start()
runner = batch_runtime.BatchRunner(WEIGHTS_DIR / LITE0_FILE)
try:
    runner.run(np.zeros((8, 256, 256, 3), np.float32))
except KeyboardInterrupt:
    child = int(pid_file.read_text())
    print("interrupted", child, "left" if os.path.exists(f"/proc/{child}") else "ended")
    sys.exit(0)
sys.exit(3)
"""


def test_a_ctrl_c_while_waiting_for_the_trial_ends_its_process(cache, tmp_path):
    env = {**os.environ, "HEADSEARCH_CACHE": str(cache.parent.parent)}
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_TRIAL, _sleeper(tmp_path / "pid"), str(tmp_path / "pid")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split()[0::2] == ["interrupted", "ended"], done.stdout  # killed and reaped before the exception left


def test_a_trial_process_dies_with_its_parent(cache, tmp_path):
    """A parent killed outright (SIGKILL, the out-of-memory killer) takes the trial's process with it."""
    env = {**os.environ, "HEADSEARCH_CACHE": str(cache.parent.parent)}
    code = INTERRUPTED_TRIAL.replace("threading.Thread(target=interrupt, daemon=True).start()", "")
    parent = subprocess.Popen([sys.executable, "-c", code, _sleeper(tmp_path / "pid"), str(tmp_path / "pid")], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        child = _wait_for(tmp_path / "pid")
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=30)
        assert _gone(child), f"the trial's process {child} outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_a_compiled_model_collected_inside_a_submit_does_not_hang_the_process():
    """A collection can run a finalizer while `ThreadPoolExecutor.submit` holds its lock on this thread (the full suite
    hung there): letting go of a compiled model must not submit from inside it."""
    import threading

    from headsearch.basics import batch_runtime

    batch_runtime._on_openvino_thread(int)  # the thread exists
    executor = batch_runtime._openvino_thread
    held = [object()]
    finished = threading.Event()

    def collected_inside_submit():
        with executor._shutdown_lock:  # as submit holds it when a collection runs the finalizer
            batch_runtime._release_later(held)
        finished.set()

    threading.Thread(target=collected_inside_submit, daemon=True).start()
    assert finished.wait(5), "letting go of a compiled model waited on the executor's own lock"
    batch_runtime._on_openvino_thread(int)  # its next call lets go of it, on its thread
    assert held == []
