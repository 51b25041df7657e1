"""ONNX Runtime sessions set up for the machine they run on: threads, graph optimisation, and the
accelerator (TensorRT, CUDA) when onnxruntime-gpu sees one, falling back to the CPU cleanly.

`HEADSEARCH_DEVICE` chooses: `auto` (the default: TensorRT or CUDA when available, else the CPU),
`cpu`, `cuda` or `tensorrt` (asked for but missing: the CPU, said once in the log).
`HEADSEARCH_THREADS` sets the threads of each session (default: the CPUs this process may use,
divided among the worker processes of `index --workers`).
"""
from __future__ import annotations

import logging
import os
import threading
import warnings
from collections import OrderedDict
from pathlib import Path

from headsearch.basics.errors import ModelError

log = logging.getLogger(__name__)

DEVICE_ENV = "HEADSEARCH_DEVICE"
THREADS_ENV = "HEADSEARCH_THREADS"
GPU_PROVIDERS = {"tensorrt": ("TensorrtExecutionProvider", "CUDAExecutionProvider"), "cuda": ("CUDAExecutionProvider",)}
CPU = "CPUExecutionProvider"
_said: set[str] = set()


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def session_threads() -> int:
    """Threads per inference session: $HEADSEARCH_THREADS, else every usable CPU."""
    raw = os.environ.get(THREADS_ENV, "").strip()
    if raw:
        try:
            return max(1, int(raw))
        except ValueError:
            raise ModelError(f"${THREADS_ENV}: a whole number is expected, got {raw!r}") from None
    return usable_cpus()


def wanted_device() -> str:
    device = os.environ.get(DEVICE_ENV, "auto").strip().lower() or "auto"
    if device not in ("auto", "cpu", "cuda", "tensorrt"):
        raise ModelError(f"${DEVICE_ENV}: auto, cpu, cuda or tensorrt, got {device!r}")
    return device


def providers(available: list[str] | None = None) -> list[str]:
    """Execution providers to ask for, best first, always ending with the CPU."""
    import onnxruntime as ort

    available = list(ort.get_available_providers() if available is None else available)
    device = wanted_device()
    if device == "cpu":
        return [CPU]
    wanted = GPU_PROVIDERS["tensorrt"] if device in ("auto", "tensorrt") else GPU_PROVIDERS["cuda"]
    chosen = [p for p in wanted if p in available]
    if device != "auto" and not chosen:
        _say_once(f"{DEVICE_ENV}={device}: onnxruntime offers no {wanted[0]} here ({', '.join(available)}); running on the CPU")
    return chosen + [CPU]


def session_options(threads: int | None = None):
    """Sequential execution on `threads` intra-op threads (one inter-op) that do not spin, every graph optimisation."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = threads or session_threads()
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Idle threads sleep instead of spinning: a spinning pool takes the cores that decoding (its own
    # thread) and the other session need, and measured no faster on two cores.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def _provider_options(name: str) -> dict:
    if name == "TensorrtExecutionProvider":
        from headsearch.basics.files import model_cache_dir

        return {"trt_engine_cache_enable": True, "trt_engine_cache_path": str(model_cache_dir() / "tensorrt"), "trt_fp16_enable": True}
    return {}


MAX_SESSIONS = 8  # sessions kept per process (each model file once per thread count and device)
_sessions: OrderedDict[tuple, object] = OrderedDict()
_sessions_lock = threading.Lock()


def inference_session(model: str | Path | bytes, threads: int | None = None, available: list[str] | None = None):
    """An InferenceSession of `model` (a path or serialised bytes) on the best provider that works:
    when an accelerator's session cannot be made (missing CUDA libraries, a driver mismatch, no GPU),
    the model runs on the CPU and the log says why, once.

    A model file's session is made once per process (for its size and modification time, the threads and the
    device asked for) and shared: sessions run from several threads at once, and a process that embeds again
    (the web app's uploads, a caller of the CLI's commands, the tests) does not pay 0.1-0.3 s a model again."""
    if isinstance(model, bytes) or available is not None:
        return _new_session(model, threads, available)
    try:
        st = Path(model).stat()
    except OSError:
        return _new_session(model, threads, available)  # says what is wrong with the file
    key = (str(Path(model).resolve()), st.st_size, st.st_mtime_ns, threads or session_threads(), wanted_device())
    with _sessions_lock:
        if key in _sessions:
            _sessions.move_to_end(key)
            return _sessions[key]
    session = _new_session(model, threads, available)
    with _sessions_lock:
        _sessions[key] = session
        while len(_sessions) > MAX_SESSIONS:
            _sessions.popitem(last=False)
    return session


def _new_session(model: str | Path | bytes, threads: int | None, available: list[str] | None):
    import onnxruntime as ort

    source = model if isinstance(model, bytes) else str(model)
    chosen = providers(available)
    options = session_options(threads)
    if len(chosen) > 1:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "provider not in available provider names": we fall back below
                session = ort.InferenceSession(source, options, providers=[(p, _provider_options(p)) for p in chosen])
            if session.get_providers()[0] == CPU and wanted_device() != "auto":
                _say_once(f"{DEVICE_ENV}={wanted_device()}: the accelerator did not start; running on the CPU")
            return session
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types when a provider cannot start
            _say_once(f"{chosen[0]} could not start ({_first_line(e)}); running on the CPU")
    try:
        return ort.InferenceSession(source, options, providers=[CPU])
    except Exception as e:  # onnxruntime raises its own exception types for damaged or foreign files
        what = "the model" if isinstance(model, bytes) else str(model)
        raise ModelError(f"{what}: not a loadable ONNX model ({_first_line(e)})") from e


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _say_once(line: str) -> None:
    if line not in _said:
        _said.add(line)
        log.warning(line)
