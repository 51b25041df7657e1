"""A model's batches run on the faster of two CPU runtimes: ONNX Runtime, and OpenVINO where it is installed.

Which is faster depends on the model and the CPU. Measured on a 2-core AMD EPYC (batches the indexer makes,
2 threads): SFace 4.9 ms a face on OpenVINO against 11.4 on ONNX Runtime, EfficientNet-Lite0 103 ms a batch
against 91. So it is measured, not assumed: at the first batch of at least `TRIAL_ROWS` rows, its first `TRIAL_ROWS`
rows run on each runtime in turn (`TRIAL_TURNS` turns of `TRIAL_ROUNDS` runs), and the batches after it run on the
faster one (OpenVINO only when `OPENVINO_MARGIN` times faster and its outputs agree with ONNX Runtime's). The choice
is saved in the model cache for the model file, both runtimes' versions, the threads and the CPU, so later processes
skip the trial. Smaller batches (a query's photo) always run on ONNX Runtime: its saved session loads in 0.04 s,
OpenVINO's import and compilation take about 0.4 s.

The trial runs in a process of its own (`python -c`, a subprocess: nothing of this process and its threads is
forked), which loads one runtime at a time, lets it go before the other's turn, and ends with the trial; this
process then loads only the runtime chosen. Run here, the trial left this process holding both runtimes' memory for
a large batch: the first `headsearch demo` peaked at 2.0 GB, against 1.1 GB without a trial; with the trial elsewhere,
1.16-1.17 GB (docs/benchmarks.md, "OpenVINO for the batches it runs faster"). The trial's process dies with this
one (Linux's PR_SET_PDEATHSIG), and is killed when the wait for it is interrupted (Ctrl-C, SIGTERM); where it fails,
is killed or takes more than `TRIAL_TIMEOUT_S`, this process runs on ONNX Runtime, says why once, and saves nothing
(the next process tries again).

OpenVINO runs at float32 (`INFERENCE_PRECISION_HINT`): on CPUs with bfloat16 its default is bfloat16, which moved
SFace vectors by up to 0.004 in cosine. At float32 the two runtimes' outputs agree within 1e-5, as two CPUs' do.
A device other than the CPU (`HEADSEARCH_DEVICE`, a GPU session) keeps ONNX Runtime.

Every OpenVINO call (compiling, running, letting go) is made on one thread of this process, `openvino`, that blocks
the signals a process is sent. OpenVINO gives a thread it runs on an alternate signal stack, and unmaps that stack
when the compiled model is let go, from whatever thread that happens on, without telling the thread that ran it:
the next Ctrl-C delivered to that thread then killed the process (SIGSEGV while Python's handler was entered, seen
in the test suite after the main thread had run OpenVINO and another had dropped the model). On its own thread,
which no signal reaches, OpenVINO's stacks stay OpenVINO's.

`HEADSEARCH_RUNTIME`: `auto` (the default: the trial), `onnxruntime` (never OpenVINO), `openvino` (every large enough
batch, without a trial; where OpenVINO is missing or cannot compile the model, ONNX Runtime, said once).
"""
from __future__ import annotations

import collections
import contextlib
import hashlib
import io
import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from headsearch.basics.errors import ModelError, first_line
from headsearch.basics.runtime import CPU, cpu_signature, inference_session, say_once, session_threads

log = logging.getLogger(__name__)

RUNTIME_ENV = "HEADSEARCH_RUNTIME"
ONNXRUNTIME, OPENVINO = "onnxruntime", "openvino"
TRIAL_ROWS = 8  # batches this large decide, and use, the faster runtime; smaller ones run on ONNX Runtime. The
# trial times this many rows: the two runtimes' ratio at 8 rows was that at 16-32 (2-core Intel Xeon: SFace 3.0-3.3x
# against 3.0-3.5x, Lite0 0.97-1.03x against 1.02-1.08x), and the trial's process stays small (SFace 0.31-0.33 GB,
# Lite0 0.39-0.41 GB in the demo)
TRIAL_ROUNDS = 3  # runs of the trial's rows each time a runtime is loaded for it (the first pays for its memory)
TRIAL_TURNS = 2  # times each runtime is loaded, run and let go, in turn: one runtime's memory at a time. One turn each
# (all of one runtime's runs, then the other's) let a moment of load decide: SFace's ratio 1.15-4.98x in 16 trials
# under a load of 4-11 (one chose ONNX Runtime); two turns 2.30-3.85x, as runs alternated in one process (2.21-3.42x)
TRIAL_TIMEOUT_S = 300  # a trial's process that takes longer is killed (the trial itself takes a few seconds)
OPENVINO_MARGIN = 1.2  # OpenVINO is chosen when at least this many times faster (a trial under load is noisy)
AGREEMENT = 1e-4  # the largest difference of the runtimes' outputs, relative to the output's largest value
CHOICES = "runtimes"  # model_cache_dir() / CHOICES: the trials' results, one JSON file per model and machine
_runners: weakref.WeakSet[BatchRunner] = weakref.WeakSet()  # this process's runners (`chosen`)
_made = itertools.count()  # the order runners were made in


def wanted_runtime() -> str:
    runtime = os.environ.get(RUNTIME_ENV, "auto").strip().lower() or "auto"
    if runtime not in ("auto", ONNXRUNTIME, OPENVINO):
        raise ModelError(f"${RUNTIME_ENV}: auto, onnxruntime or openvino, got {runtime!r}")
    return runtime


class BatchRunner:
    """One model file with one input: `run(batch)` gives its first output, from the runtime chosen for that file."""

    def __init__(self, path: Path, threads: int | None = None):
        wanted_runtime()  # a wrong setting is said when the model loads, not at its first large batch
        self.path = Path(path)
        self.threads = threads or session_threads()
        self.session = inference_session(self.path, threads)
        self.input = self.session.get_inputs()[0].name
        self.runtime: str | None = None  # chosen at the first large batch
        self.trial: dict | None = None  # the trial's times, where this process or an earlier one ran it
        self._compiled: _Compiled | None = None
        self._lock = threading.Lock()
        self._made = next(_made)
        _runners.add(self)

    def run(self, batch: np.ndarray) -> np.ndarray:
        if len(batch) < TRIAL_ROWS:
            return self._onnxruntime(batch)
        if self.runtime is None:
            with self._lock:
                if self.runtime is None:
                    self._choose(batch)
        if self.runtime == OPENVINO:
            try:
                return self._openvino(batch)
            except Exception as e:  # noqa: BLE001 - OpenVINO's own types; ONNX Runtime runs this batch and the next
                say_once(f"{self.path.name}: OpenVINO failed ({first_line(e)}); running on ONNX Runtime")
                self.runtime = ONNXRUNTIME
                self._release()
        return self._onnxruntime(batch)

    def _onnxruntime(self, batch: np.ndarray) -> np.ndarray:
        return self.session.run(None, {self.input: batch})[0]

    def _openvino(self, batch: np.ndarray) -> np.ndarray:
        return self._compiled.infer(batch)

    def _choose(self, batch: np.ndarray) -> None:
        """Set `runtime` from the setting, a saved trial, or a trial of this batch's first rows in another process."""
        wanted = wanted_runtime()
        self.runtime = ONNXRUNTIME
        if wanted == ONNXRUNTIME or self.session.get_providers()[0] != CPU or not _openvino_installed(wanted):
            return
        if wanted == "auto":
            saved = _choice_path(self.path, self.threads)
            with contextlib.suppress(OSError, ValueError):
                trial = json.loads(saved.read_text())
                self.trial = trial if isinstance(trial, dict) and trial.get("runtime") in (ONNXRUNTIME, OPENVINO) else None
            if not self.trial:
                self.trial = _trial_elsewhere(self.path, self.threads, batch[:TRIAL_ROWS], saved)
            if not self.trial or self.trial["runtime"] == ONNXRUNTIME:
                return
        if self._compile():
            self.runtime = OPENVINO

    def _release(self) -> None:
        """OpenVINO's compiled model let go (its memory back, on OpenVINO's thread)."""
        compiled, self._compiled = self._compiled, None
        if compiled is not None:
            compiled.release()

    def _compile(self) -> bool:
        """OpenVINO's compiled model of the file (float32, this runner's threads); False where it cannot be had."""
        try:
            self._compiled = _Compiled(self.path, self.threads)
        except Exception as e:  # noqa: BLE001 - OpenVINO raises its own types for graphs it cannot run
            say_once(f"{self.path.name}: OpenVINO could not compile it ({first_line(e)}); running on ONNX Runtime")
            return False
        return True


_openvino_thread: ThreadPoolExecutor | None = None
_openvino_thread_lock = threading.Lock()


def _block_signals() -> None:
    """OpenVINO's thread takes no signal: the kernel hands a process's signals (Ctrl-C) to another thread."""
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals() - {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE})


def _on_openvino_thread(work, *args):
    """`work(*args)` on the one thread that makes every OpenVINO call of this process (see the module's text), after it
    has let go of the compiled models collected since its last call (`_release_later`)."""
    global _openvino_thread
    with _openvino_thread_lock:
        if _openvino_thread is None:
            _openvino_thread = ThreadPoolExecutor(1, thread_name_prefix="openvino", initializer=_block_signals)
    return _openvino_thread.submit(_after_releasing, work, args).result()


def _after_releasing(work, args):
    _release_collected()
    return work(*args)


def _release_collected() -> None:
    """On OpenVINO's thread: let go of the compiled models queued by `_release_later`."""
    while _to_release:
        _to_release.popleft().clear()


class _Compiled:
    """A model compiled by OpenVINO for the CPU, and its one infer request, both made, run and let go on OpenVINO's
    thread; let go there as well when this object is collected."""

    def __init__(self, path: Path, threads: int):
        self._held = _on_openvino_thread(_compile_on_thread, str(path), threads)  # [compiled model, infer request]
        self._finalizer = weakref.finalize(self, _release_later, self._held)

    def infer(self, batch: np.ndarray) -> np.ndarray:
        return _on_openvino_thread(_infer_on_thread, self._held, batch)

    def release(self) -> None:
        self._finalizer()
        _on_openvino_thread(_release_collected)


def _compile_on_thread(path: str, threads: int) -> list:
    """[compiled model, infer request]; a failure raised as a ModelError without OpenVINO's objects (an exception's
    frames hold them, and would let them go on the thread that catches it)."""
    import openvino

    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32",
              "ENABLE_CPU_PINNING": False}
    try:
        core = openvino.Core()
        compiled = core.compile_model(core.read_model(path), "CPU", config)
        return [compiled, compiled.create_infer_request()]
    except Exception as e:  # noqa: BLE001 - OpenVINO's own types
        message = first_line(e)
    raise ModelError(message)


def _infer_on_thread(held: list, batch: np.ndarray) -> np.ndarray:
    try:
        return np.array(held[1].infer({0: batch})[0])  # a copy: the request's buffer is reused by its next batch
    except Exception as e:  # noqa: BLE001 - OpenVINO's own types (see _compile_on_thread)
        message = first_line(e)
    raise ModelError(message)


_to_release: collections.deque[list] = collections.deque()  # compiled models collected, for OpenVINO's thread to let go


def _release_later(held: list) -> None:
    """Queue a collected compiled model for OpenVINO's thread to let go before its next call. A finalizer runs on any
    thread, at exit, or inside any call (a collection while `ThreadPoolExecutor.submit` holds its lock: submitting from
    here then waited on that lock for ever, and the full suite hung), so it only appends (a deque takes no lock)."""
    _to_release.append(held)


def chosen() -> dict[str, dict]:
    """{model file name: {"runtime", and the trial's times where one ran}} of this process's runners that have
    chosen, the one made last where several run one file (the speed benchmark shows them)."""
    return {r.path.name: {**(r.trial or {}), "runtime": r.runtime} for r in sorted(_runners, key=lambda r: r._made) if r.runtime}


def _openvino_installed(wanted: str) -> bool:
    try:
        import openvino  # noqa: F401 - only whether it imports
    except ImportError:
        if wanted == OPENVINO:
            say_once(f"{RUNTIME_ENV}=openvino: OpenVINO is not installed; running on ONNX Runtime")
        return False
    return True


def _choice_path(model: Path, threads: int) -> Path:
    """Where a model's trial is saved: named by the file (path, size, modification time), both runtimes' versions,
    the threads and the CPU."""
    import onnxruntime
    import openvino

    from headsearch.basics.files import model_cache_dir

    resolved = model.resolve()
    st = resolved.stat()
    facts = f"{resolved}:{st.st_size}:{st.st_mtime_ns}:{onnxruntime.__version__}:{openvino.__version__}:{threads}:{cpu_signature()}"
    return model_cache_dir() / CHOICES / f"{resolved.stem}-{hashlib.sha256(facts.encode()).hexdigest()[:16]}.json"


# The trial's process: this module's `_trial_child`, imported from where this process imported it.
_CHILD = ("import sys\nif sys.argv[1] not in sys.path: sys.path.insert(0, sys.argv[1])\n"
          "from headsearch.basics.batch_runtime import _trial_child\n_trial_child()\n")
_ROOT = str(Path(__file__).resolve().parents[2])


def _trial_elsewhere(model: Path, threads: int, rows: np.ndarray, saved: Path) -> dict | None:
    """The trial of `rows` run in a process of its own (see the module's text), the choice made from its times and
    saved; None, said once and nothing saved, where that process fails, is killed or takes too long."""
    sent = io.BytesIO()
    np.save(sent, np.ascontiguousarray(rows), allow_pickle=False)
    command = [sys.executable, "-c", _CHILD, _ROOT, str(model), str(threads), str(os.getpid())]
    try:
        child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as e:
        say_once(f"{model.name}: the runtime trial could not start ({e.strerror or e}); running on ONNX Runtime")
        return None
    out, why = b"", ""
    try:
        out, err = child.communicate(sent.getvalue(), timeout=TRIAL_TIMEOUT_S)
        why = f"killed by signal {-child.returncode}" if child.returncode < 0 else _last_line(err) or "no answer"
    except subprocess.TimeoutExpired:
        why = f"no answer in {TRIAL_TIMEOUT_S} s"
    finally:  # interrupted (Ctrl-C, SIGTERM), or too slow: the trial's process ends with the wait for it
        if child.poll() is None:
            child.kill()
        child.wait()
        for pipe in (child.stdin, child.stdout, child.stderr):
            with contextlib.suppress(OSError):
                pipe.close()
    result = _trial_result(out) if child.returncode == 0 else None
    if result is None:
        say_once(f"{model.name}: the runtime trial failed ({why}); running on ONNX Runtime")
        return None
    for line in result["said"]:
        say_once(line)
    return _decide(model, threads, result["times"], saved) if result["times"] else None


def _trial_result(out: bytes) -> dict | None:
    """The trial's process's answer, where it is whole: {"times": {...} or None, "said": [lines]}."""
    try:
        result = json.loads(out.splitlines()[-1])
        times, said = result["times"], [str(line) for line in result["said"]]
        if times is not None:
            times = {"onnxruntime_ms": float(times["onnxruntime_ms"]), "rows": int(times["rows"]),
                     "openvino_ms": None if times["openvino_ms"] is None else float(times["openvino_ms"]),
                     "outputs_agree": bool(times["outputs_agree"])}
    except (ValueError, TypeError, KeyError, IndexError):
        return None
    return {"times": times, "said": said}


def _last_line(err: bytes) -> str:
    lines = err.decode(errors="replace").strip().splitlines()
    return lines[-1].strip()[:300] if lines else ""


def _decide(model: Path, threads: int, times: dict, saved: Path) -> dict:
    """The choice from the trial's times (OpenVINO where its outputs agree and it is OPENVINO_MARGIN times faster), saved."""
    agree, ort_ms, ov_ms = times["outputs_agree"], times["onnxruntime_ms"], times["openvino_ms"]
    runtime = OPENVINO if agree and ov_ms is not None and ort_ms >= OPENVINO_MARGIN * ov_ms else ONNXRUNTIME
    trial = {"runtime": runtime, "onnxruntime_ms": ort_ms, "openvino_ms": ov_ms if agree else None, "rows": times["rows"],
             "outputs_agree": agree, "threads": threads}
    log.info("%s: %s (%d rows: ONNX Runtime %.1f ms, OpenVINO %s)", model.name, runtime, times["rows"], ort_ms,
             f"{ov_ms:.1f} ms" if agree else "failed or gave other outputs")
    with contextlib.suppress(OSError):
        saved.parent.mkdir(parents=True, exist_ok=True)
        partial = saved.with_name(f"{saved.name}.{os.getpid()}.partial")
        partial.write_text(json.dumps(trial))
        os.replace(partial, saved)
    return trial


def _trial_child() -> None:
    """The trial's process (`python -c _CHILD root model threads parent`, the rows as .npy on stdin): dies with its
    parent, answers on stdout in one JSON line (what libraries print goes to stderr), and leaves without tearing down."""
    _, model, threads, parent = sys.argv[1:5]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # a Ctrl-C ends it at once, mid-run, without a traceback
    _die_with_parent(int(parent))
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    rows = np.load(io.BytesIO(sys.stdin.buffer.read()), allow_pickle=False)
    times, said = _time_runtimes(Path(model), int(threads), rows)
    answer.write(json.dumps({"times": times, "said": said}) + "\n")
    answer.flush()
    os._exit(0)


def _die_with_parent(parent: int) -> None:
    """The kernel kills this process when its parent dies (Linux's PR_SET_PDEATHSIG); a parent already gone, it leaves."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def _time_runtimes(model: Path, threads: int, rows: np.ndarray) -> tuple[dict | None, list[str]]:
    """Each runtime's fastest run of `rows`, the two loaded, run TRIAL_ROUNDS times and let go in turn, TRIAL_TURNS
    times each (one runtime's memory at a time; a moment of load slows some runs, not all), and whether their outputs
    agree (within AGREEMENT of the largest value); (None, what to say) where OpenVINO cannot compile the model."""
    said: list[str] = []
    ort_s = ov_s = float("inf")
    ov_out = None
    for _ in range(TRIAL_TURNS):
        seconds, ort_out = _onnxruntime_turn(model, threads, rows)
        ort_s = min(ort_s, seconds)
        if said:  # OpenVINO failed on its first turn
            continue
        try:
            compiled = _Compiled(model, threads)
        except Exception as e:  # noqa: BLE001 - OpenVINO raises its own types for graphs it cannot run
            return None, [f"{model.name}: OpenVINO could not compile it ({first_line(e)}); running on ONNX Runtime"]
        try:
            seconds, ov_out = _fastest(compiled.infer, rows)
            ov_s = min(ov_s, seconds)
        except Exception as e:  # noqa: BLE001 - OpenVINO's own types
            said.append(f"{model.name}: OpenVINO failed ({first_line(e)}); running on ONNX Runtime")
            ov_s, ov_out = float("inf"), None
        finally:
            compiled.release()
            _on_openvino_thread(_trim_heap)  # after the release (that thread's work runs in order): its memory back
    scale = float(np.abs(ort_out).max()) or 1.0
    agree = ov_out is not None and ov_out.shape == ort_out.shape and float(np.abs(ov_out - ort_out).max()) <= AGREEMENT * scale
    return {"onnxruntime_ms": round(ort_s * 1000, 2), "openvino_ms": None if ov_out is None else round(ov_s * 1000, 2),
            "rows": len(rows), "outputs_agree": agree}, said


def _onnxruntime_turn(model: Path, threads: int, rows: np.ndarray) -> tuple[float, np.ndarray]:
    """ONNX Runtime's fastest of TRIAL_ROUNDS runs of `rows` on a CPU session of its own, let go after them."""
    session = inference_session(model, threads, available=[CPU])  # not kept by the process (`available` given)
    seconds, outputs = _fastest(session.run, None, {session.get_inputs()[0].name: rows})
    out = np.array(outputs[0])  # a copy: ONNX Runtime's arrays hold on to its session's memory
    del session, outputs
    _trim_heap()
    return seconds, out


def _trim_heap() -> None:
    """What the C heap holds free back to the system (glibc's malloc_trim; 40 MB after Lite0's session)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)


def _fastest(work, *args):
    """(the fastest of TRIAL_ROUNDS runs of `work(*args)` in seconds, its output)."""
    best, out = float("inf"), None
    for _ in range(TRIAL_ROUNDS):
        start = time.perf_counter()
        out = work(*args)
        best = min(best, time.perf_counter() - start)
    return best, out
