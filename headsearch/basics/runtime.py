"""ONNX Runtime sessions set up for the machine they run on: threads, graph optimisation, and the
accelerator (TensorRT, CUDA) when onnxruntime-gpu sees one, falling back to the CPU cleanly.

`HEADSEARCH_DEVICE` chooses: `auto` (the default: TensorRT or CUDA when available, else the CPU),
`cpu`, `cuda` or `tensorrt` (asked for but missing: the CPU, said once in the log).
`HEADSEARCH_THREADS` sets the threads of each session (default: the CPUs this process may use,
divided among the worker processes of `index --workers`).

A CPU session of a model file starts from ONNX Runtime's optimised graph of it, saved once in the model cache
for that file, onnxruntime version and CPU (`_cpu_session`): making a session then skips the optimisation, 2-3x
faster (a cold query waits for two of them), with the same outputs to the bit.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import platform
import threading
import warnings
from collections import OrderedDict
from pathlib import Path

from headsearch.basics.errors import ModelError, first_line

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
        say_once(f"{DEVICE_ENV}={device}: onnxruntime offers no {wanted[0]} here ({', '.join(available)}); running on the CPU")
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
                say_once(f"{DEVICE_ENV}={wanted_device()}: the accelerator did not start; running on the CPU")
            return session
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types when a provider cannot start
            say_once(f"{chosen[0]} could not start ({first_line(e)}); running on the CPU")
    try:
        return _cpu_session(model if isinstance(model, bytes) else Path(model), threads)
    except Exception as e:  # onnxruntime raises its own exception types for damaged or foreign files
        what = "the model" if isinstance(model, bytes) else str(model)
        raise ModelError(f"{what}: not a loadable ONNX model ({first_line(e)})") from e


OPTIMIZED = "optimized"  # model_cache_dir() / OPTIMIZED: ONNX Runtime's optimised graphs of model files, per CPU


def _cpu_session(model: Path | bytes, threads: int | None):
    """A CPU session of a model (a file or serialised bytes), from its optimised graph saved in the model cache (made
    and saved by this session when there is none; a saved one that does not load is made again); from the model
    alone when the cache cannot be written."""
    import onnxruntime as ort

    source = model if isinstance(model, bytes) else str(model)
    try:
        saved = _optimized_path(model, ort.__version__)
    except OSError:  # no such file: onnxruntime says so
        return ort.InferenceSession(source, session_options(threads), providers=[CPU])
    if saved.is_file():
        options = session_options(threads)
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # optimised already
        try:
            session = ort.InferenceSession(str(saved), options, providers=[CPU])
            with contextlib.suppress(OSError):
                os.utime(saved)  # used now: the cache keeps the copies used last (`_keep_recent`)
            return session
        except Exception:  # noqa: BLE001 - a damaged copy: made again below
            with contextlib.suppress(OSError):
                saved.unlink(missing_ok=True)
    options = session_options(threads)
    partial = saved.with_name(f"{saved.name}.{os.getpid()}-{threading.get_ident()}.partial")
    try:
        saved.parent.mkdir(parents=True, exist_ok=True)
        options.optimized_model_filepath = str(partial)
        session = ort.InferenceSession(source, options, providers=[CPU])
        os.replace(partial, saved)
    except Exception:  # noqa: BLE001 - a cache that cannot be written: the model's own session (its errors are the model's)
        return ort.InferenceSession(source, session_options(threads), providers=[CPU])
    finally:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
    _keep_recent(saved)
    return session


MAX_OPTIMIZED = 16  # optimised copies kept: the models used last (a model file moved or deleted leaves its copy)


def _keep_recent(saved: Path) -> None:
    """Remove the other copies of the model just saved (for another file version, onnxruntime or CPU), and the copies
    used least recently beyond MAX_OPTIMIZED."""
    same_model = f"{saved.name.rsplit('-', 1)[0]}-"
    with contextlib.suppress(OSError):
        copies = sorted(saved.parent.glob("*.onnx"), key=lambda p: p.stat().st_mtime, reverse=True)
        for n, copy in enumerate(copies):
            if copy != saved and (copy.name.startswith(same_model) or n >= MAX_OPTIMIZED):
                copy.unlink(missing_ok=True)


def _optimized_path(model: Path | bytes, ort_version: str) -> Path:
    """Where the optimised graph of a model is saved: named by the model (a file's path, or the bytes' digest), and by
    the file's size and modification time, the onnxruntime version and the CPU (the graph holds kernels chosen
    for the CPU's instructions)."""
    from headsearch.basics.files import model_cache_dir

    if isinstance(model, bytes):
        name, place, stamp = "model", hashlib.sha256(model).hexdigest()[:16], ""
    else:
        resolved = model.resolve()
        st = resolved.stat()
        name, place, stamp = resolved.stem, hashlib.sha256(str(resolved).encode()).hexdigest()[:8], f"{st.st_size}:{st.st_mtime_ns}"
    facts = hashlib.sha256(f"{stamp}:{ort_version}:{cpu_signature()}".encode()).hexdigest()[:16]
    return model_cache_dir() / OPTIMIZED / f"{name}-{place}-{facts}.onnx"


@functools.cache
def cpu_signature() -> str:
    """The CPU's model and instruction-set flags (Linux), else what the platform says of it."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [line for line in f.read(65536).splitlines() if line.startswith(("model name", "flags", "Features"))]
        if lines:
            return "|".join(dict.fromkeys(lines))
    except OSError:
        pass
    return f"{platform.machine()}|{platform.processor()}"


def say_once(line: str) -> None:
    if line not in _said:
        _said.add(line)
        log.warning(line)
