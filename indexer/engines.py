"""Where files are analysed while one writer stores them: in this process (`serial`), in worker
processes on this machine (`index --workers N`), or in Ray actors on a cluster (`--engine ray`).

Every engine runs the same pure function (`analyse_job` -> `indexer.analysis.analyse_file`) with
the same settings and model, one model load per worker, and hands the outcomes back in the order
the jobs were given, so that the writer stores them as a serial run would (same ids, same answers).
Only the writer (`indexer.pipeline.Indexer`) touches the library.
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from headsearch.basics.errors import HeadsearchError, LibraryError, first_line, is_disk_full
from headsearch.basics.extras import install_hint
from headsearch.basics.failures import unexpected_error_line
from headsearch.basics.runtime import THREADS_ENV, usable_cpus
from headsearch.basics.settings import IndexSettings
from headsearch.detection.faces import FaceDetector
from headsearch.models import Embedder
from indexer.analysis import FrameProgress, analyse_file
from indexer.worker_start import boot, die_with_parent
from schemas.records import FileResult, FileStamp, ModelInfo

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 2.0  # how long idle workers get to leave by themselves before they are killed
RAY_MISSING = "the ray engine needs Ray: {hint}"


@dataclass(frozen=True)
class Job:
    """One file to analyse, at the version the writer saw."""

    path: Path
    stamp: FileStamp


@dataclass(frozen=True)
class Failure:
    """Why one file could not be analysed, as the one line the run reports."""

    line: str
    detail: str | None = None
    disk_full: bool = False

    @classmethod
    def from_error(cls, path: Path, e: HeadsearchError | OSError) -> Failure:
        """The failure of a foreseen error: a domain error's own line, or the file's OS error."""
        if isinstance(e, HeadsearchError):
            return cls(str(e), getattr(e, "detail", None))
        return cls(f"{path}: {e.strerror or e}", disk_full=is_disk_full(e))


Outcome = FileResult | Failure


def analyse_job(job: Job, settings: IndexSettings, detector: FaceDetector, embedder: Embedder, log_dir: Path | None,
                progress: FrameProgress | None = None) -> Outcome:
    """Analyse one file; whatever it does is an outcome, never an exception (but an interruption)."""
    try:
        return analyse_file(job.path, settings, detector, embedder, stamp=job.stamp, progress=progress)
    except LibraryError:
        raise
    except (HeadsearchError, OSError) as e:
        return Failure.from_error(job.path, e)
    except Exception as e:  # noqa: BLE001 - whatever one file does, the run goes on (isolation)
        return Failure(unexpected_error_line(job.path, e, log_dir))


class SerialEngine:
    """Analyses in this process, one file after the other, with a bar over each video's frames."""

    name = "serial"

    def __init__(self, settings: IndexSettings, detector: FaceDetector, embedder: Embedder, log_dir: Path | None,
                 progress: FrameProgress | None = None):
        self.settings, self.detector, self.embedder, self.log_dir, self.progress = settings, detector, embedder, log_dir, progress

    def run(self, jobs: Iterable[Job]) -> Iterator[tuple[Job, Outcome]]:
        for job in jobs:
            yield job, analyse_job(job, self.settings, self.detector, self.embedder, self.log_dir, self.progress)

    def close(self) -> None:
        pass


# ----- worker processes -----------------------------------------------------------------------
_worker: dict = {}


def _start_worker(settings: IndexSettings, model_source: str, model: ModelInfo, threads: int, log_dir: Path | None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the writer's to handle
    die_with_parent()  # already asked by worker_start.boot in a worker process; a Ray actor asks here
    os.environ.setdefault(THREADS_ENV, str(threads))
    from headsearch.models import load_embedder

    embedder = load_embedder(model_source)
    if embedder.describe() != model:
        raise HeadsearchError(f"worker loaded {embedder.describe().name} {embedder.describe().version}, not {model.name} {model.version}")
    _worker.update(settings=settings, detector=FaceDetector.from_settings(settings), embedder=embedder, log_dir=log_dir)


def _work(job: Job) -> Outcome:
    return analyse_job(job, _worker["settings"], _worker["detector"], _worker["embedder"], _worker["log_dir"])


class ProcessEngine:
    """Analyses in `workers` processes on this machine (each loads the model once and runs its
    sessions on its share of the CPUs); hands outcomes back in job order, at most two jobs per
    worker ahead. A worker that dies (a crash in a native decoder, the out-of-memory killer) costs
    only its file: the files it held are tried again one at a time, and the one that kills its
    worker again is reported as failed."""

    name = "workers"

    def __init__(self, workers: int, settings: IndexSettings, embedder: Embedder, log_dir: Path | None):
        self.workers = max(1, workers)
        self.settings, self.log_dir = settings, log_dir
        self.model = embedder.describe()
        self.source = embedder.source or embedder.name
        self.threads = max(1, usable_cpus() // self.workers)
        self._pool = None
        self._pools: list = []  # every pool not yet shut: its workers are stopped on the way out

    def _new_pool(self, workers: int):
        """A pool whose workers die with this process at any moment of their life (`indexer.worker_start`).
        Call from the main thread: the kernel ties a worker's life to the thread that started it."""
        import multiprocessing
        import pickle
        from concurrent.futures import ProcessPoolExecutor

        start = pickle.dumps((_start_worker, (self.settings, self.source, self.model, self.threads, self.log_dir)))
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=boot,
                                   initargs=(os.getpid(), start))
        self._pools.append(pool)
        return pool

    def _shut(self, pool) -> None:
        """Stop a pool: its pending jobs cancelled, its idle workers leaving, and those still busy a
        moment later (with a long video, or stuck) killed."""
        processes = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + SHUTDOWN_GRACE_S
        for process in processes:
            with contextlib.suppress(Exception):
                process.join(timeout=max(0.0, deadline - time.monotonic()))
                if process.is_alive():
                    process.kill()
                    process.join(timeout=5)
        if pool in self._pools:
            self._pools.remove(pool)

    def run(self, jobs: Iterable[Job]) -> Iterator[tuple[Job, Outcome]]:
        from concurrent.futures.process import BrokenProcessPool

        self._pool = self._new_pool(self.workers)
        window: deque = deque()
        source = iter(jobs)

        def fill() -> None:
            while len(window) < 2 * self.workers:
                job = next(source, None)
                if job is None:
                    return
                window.append((job, self._pool.submit(_work, job)))

        fill()
        while window:
            job, future = window.popleft()
            try:
                outcome = future.result()
            except BrokenProcessPool:
                held = [job] + [j for j, _ in window]
                window.clear()
                self._shut(self._pool)
                for j in held:  # each alone: the one that kills its worker again fails, the others go on
                    yield j, self._alone(j)
                self._pool = self._new_pool(self.workers)
                fill()
                continue
            yield job, outcome
            fill()

    def _alone(self, job: Job) -> Outcome:
        from concurrent.futures.process import BrokenProcessPool

        pool = self._new_pool(1)
        try:
            return pool.submit(_work, job).result()
        except BrokenProcessPool:
            return Failure(f"{job.path}: the worker analysing it died (a crash in a decoder or model, or out of memory)")
        except HeadsearchError as e:  # the worker could not start
            return Failure(str(e))
        finally:
            self._shut(pool)

    def close(self) -> None:
        """Stop every worker (a run that ends, is interrupted or fails leaves no process behind)."""
        for pool in list(self._pools):
            self._shut(pool)
        self._pool = None


# ----- Ray ------------------------------------------------------------------------------------
class RayAnalyser:
    """A Ray actor: loads the detector and the model once, then analyses the files it is given (by
    path: every node must see the files at the same paths, as on a shared file system)."""

    def __init__(self, settings: IndexSettings, model_source: str, model: ModelInfo, log_dir: str | None):
        _start_worker(settings, model_source, model, int(os.environ.get(THREADS_ENV) or usable_cpus()), Path(log_dir) if log_dir else None)

    def analyse(self, job: Job) -> Outcome:
        return _work(job)

    def device(self) -> str:
        from headsearch.basics.runtime import providers

        return providers()[0]


class RayEngine:
    """Analyses in Ray actors (`ray.init(address)`: a running cluster, or a local instance when no
    address is given), one model load per actor, a GPU per actor where the cluster has GPUs; the
    outcomes stream back to the one writer in job order."""

    name = "ray"

    def __init__(self, settings: IndexSettings, embedder: Embedder, log_dir: Path | None, address: str | None = None,
                 actors: int | None = None, cpus_per_actor: float = 1.0):
        try:
            import ray
        except ImportError:
            raise HeadsearchError(RAY_MISSING.format(hint=install_hint("ray"))) from None
        self._ray = ray
        self._started_here = not ray.is_initialized()
        if self._started_here:
            try:
                ray.init(address=address or None, ignore_reinit_error=True, log_to_driver=False, include_dashboard=False,
                         configure_logging=False, **({} if address else {"num_cpus": usable_cpus()}))
            except Exception as e:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ... for a bad address
                raise HeadsearchError(f"cannot start or reach Ray{f' at {address}' if address else ''}: "
                                      f"{first_line(e)}") from e
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0))
        count = actors or (gpus if gpus else max(1, int(resources.get("CPU", 1) // cpus_per_actor)))
        actor_class = ray.remote(RayAnalyser).options(
            num_cpus=cpus_per_actor, num_gpus=1 if gpus else 0, max_restarts=1,
            runtime_env={"env_vars": {THREADS_ENV: str(max(1, int(cpus_per_actor)))}})
        model = embedder.describe()
        self.actors = [actor_class.remote(settings, embedder.source or embedder.name, model, str(log_dir) if log_dir else None)
                       for _ in range(count)]
        self.gpus = gpus
        log.info("ray: %d actors (%s)", count, f"one GPU each, {gpus} GPUs" if gpus else f"{cpus_per_actor:g} CPU each")

    def run(self, jobs: Iterable[Job]) -> Iterator[tuple[Job, Outcome]]:
        ray = self._ray
        window: deque = deque()
        source = iter(jobs)
        n = 0

        def fill() -> None:
            nonlocal n
            while len(window) < 2 * len(self.actors):
                job = next(source, None)
                if job is None:
                    return
                window.append((job, self.actors[n % len(self.actors)].analyse.remote(job)))
                n += 1

        fill()
        while window:
            job, ref = window.popleft()
            try:
                outcome = ray.get(ref)
            except ray.exceptions.RayActorError:
                outcome = Failure(f"{job.path}: the Ray actor analysing it died (a crash in a decoder or model, or out of memory)")
            except ray.exceptions.RayTaskError as e:
                outcome = Failure(f"{job.path}: {str(e).strip().splitlines()[-1]}")
            yield job, outcome
            fill()

    def close(self) -> None:
        for actor in self.actors:
            with contextlib.suppress(Exception):
                self._ray.kill(actor)
        self.actors = []
        if self._started_here:
            with contextlib.suppress(Exception):
                self._ray.shutdown()


def make_engine(engine: str, workers: int, settings: IndexSettings, detector: FaceDetector, embedder: Embedder,
                log_dir: Path | None, progress: FrameProgress | None = None, address: str | None = None):
    """The engine `index --engine/--workers/--address` asks for."""
    if engine == "ray":
        return RayEngine(settings, embedder, log_dir, address, actors=workers if workers > 1 else None)
    if workers > 1:
        return ProcessEngine(workers, settings, embedder, log_dir)
    return SerialEngine(settings, detector, embedder, log_dir, progress)

