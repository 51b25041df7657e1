"""A model's batches run on the faster of two CPU runtimes: ONNX Runtime, and OpenVINO where it is installed.

Which is faster depends on the model and the CPU. Measured on a 2-core AMD EPYC (batches the indexer makes,
2 threads): SFace 4.9 ms a face on OpenVINO against 11.4 on ONNX Runtime, EfficientNet-Lite0 103 ms a batch
against 91. So it is measured, not assumed: the first batch of at least `TRIAL_ROWS` rows runs on both runtimes,
twice each, and the batches after it run on the faster one (OpenVINO only when `OPENVINO_MARGIN` times faster and
its outputs agree with ONNX Runtime's). The choice is saved in the model cache for the model file, both runtimes'
versions, the threads and the CPU, so later processes skip the trial. Smaller batches (a query's photo) always run
on ONNX Runtime: its saved session loads in 0.04 s, OpenVINO's import and compilation take about 0.4 s.

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

import contextlib
import hashlib
import itertools
import json
import logging
import os
import signal
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
TRIAL_ROWS = 8  # batches this large decide, and use, the faster runtime; smaller ones run on ONNX Runtime
TRIAL_ROUNDS = 3  # runs of the trial's batch on each runtime, in turn
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
                    tried = self._choose(batch)
                    if tried is not None:
                        return tried
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

    def _choose(self, batch: np.ndarray) -> np.ndarray | None:
        """Set `runtime` from the setting, a saved trial, or a trial on this batch (then its output, else None)."""
        wanted = wanted_runtime()
        self.runtime = ONNXRUNTIME
        if wanted == ONNXRUNTIME or self.session.get_providers()[0] != CPU or not _openvino_installed(wanted):
            return None
        saved = _choice_path(self.path, self.threads)
        if wanted == "auto":
            with contextlib.suppress(OSError, ValueError):
                trial = json.loads(saved.read_text())
                self.trial = trial if isinstance(trial, dict) and trial.get("runtime") in (ONNXRUNTIME, OPENVINO) else None
            if self.trial and self.trial["runtime"] == ONNXRUNTIME:
                return None
        if not self._compile():
            return None
        if wanted == "auto" and not self.trial:
            return self._run_trial(batch, saved)
        self.runtime = OPENVINO
        return None

    def _run_trial(self, batch: np.ndarray, saved: Path) -> np.ndarray:
        """The runtimes run the batch in turn, TRIAL_ROUNDS times each; each one's fastest time counts (a moment of
        load slows some runs, not all); OpenVINO's output is kept only where it agrees with ONNX Runtime's."""
        seconds: dict[str, list[float]] = {ONNXRUNTIME: [], OPENVINO: []}
        outputs: dict[str, np.ndarray | None] = {ONNXRUNTIME: None, OPENVINO: None}
        openvino_failed = False
        for _ in range(TRIAL_ROUNDS):
            for name, runner in ((ONNXRUNTIME, self._onnxruntime), (OPENVINO, self._openvino)):
                if name == OPENVINO and openvino_failed:
                    continue
                start = time.perf_counter()
                try:
                    outputs[name] = runner(batch)
                except Exception as e:  # noqa: BLE001 - OpenVINO's own types (ONNX Runtime's were said when the file loaded)
                    if name == ONNXRUNTIME:
                        raise
                    say_once(f"{self.path.name}: OpenVINO failed ({first_line(e)}); running on ONNX Runtime")
                    openvino_failed, outputs[OPENVINO] = True, None
                    continue
                seconds[name].append(time.perf_counter() - start)
        ort_s, ort_out, ov_out = min(seconds[ONNXRUNTIME]), outputs[ONNXRUNTIME], outputs[OPENVINO]
        ov_s = min(seconds[OPENVINO], default=float("inf"))
        scale = float(np.abs(ort_out).max()) or 1.0
        agree = ov_out is not None and ov_out.shape == ort_out.shape and float(np.abs(ov_out - ort_out).max()) <= AGREEMENT * scale
        self.runtime = OPENVINO if agree and ort_s >= OPENVINO_MARGIN * ov_s else ONNXRUNTIME
        self.trial = {"runtime": self.runtime, "onnxruntime_ms": round(ort_s * 1000, 2), "openvino_ms": round(ov_s * 1000, 2) if agree else None,
                      "rows": len(batch), "outputs_agree": agree, "threads": self.threads}
        log.info("%s: %s (a batch of %d: ONNX Runtime %.1f ms, OpenVINO %s)", self.path.name, self.runtime, len(batch),
                 ort_s * 1000, f"{ov_s * 1000:.1f} ms" if agree else "failed or gave other outputs")
        with contextlib.suppress(OSError):
            saved.parent.mkdir(parents=True, exist_ok=True)
            partial = saved.with_name(f"{saved.name}.{os.getpid()}.partial")
            partial.write_text(json.dumps(self.trial))
            os.replace(partial, saved)
        if self.runtime == ONNXRUNTIME:
            self._release()
        return outputs[self.runtime]

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
    """`work(*args)` on the one thread that makes every OpenVINO call of this process (see the module's text)."""
    global _openvino_thread
    with _openvino_thread_lock:
        if _openvino_thread is None:
            _openvino_thread = ThreadPoolExecutor(1, thread_name_prefix="openvino", initializer=_block_signals)
    return _openvino_thread.submit(work, *args).result()


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


def _release_later(held: list) -> None:
    """Let go of a compiled model on OpenVINO's thread (without waiting: a finalizer may run on any thread, or at exit)."""
    with contextlib.suppress(RuntimeError):  # the thread is shut at exit: the process's end lets go of everything
        if _openvino_thread is not None:
            _openvino_thread.submit(held.clear)


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
