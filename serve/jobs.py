"""The web app's long work as jobs: a redaction, a comparison, a cast. Each runs in a thread of its own, one at a time in
the process (each decodes a whole video), the others waiting their turn; a request only starts one and answers with its
page, which shows its progress and then its result (`/jobs/ID`, and its JSON twin `/api/jobs/ID`).

A job follows its work's progress (frames done of the total, through the progress bar interface the analysis and the
redactor take: `reset`, `update`, `set_description`), keeps its result as a dict, or one line when it failed. Its files
(a redacted video, an uploaded clip to compare) are kept in the app's cache folder, in a folder of this process
(`jobs/PID-KEY/JOB/`), never beside the library's videos. A finished job is kept for `KEEP_S` and at most
`MAX_FINISHED` of them; the process's folder goes when the app stops (and a folder left by a process that is gone,
when the next one starts a job). Job ids are random (`JOB_CHARS`): a page's address is its key.
"""
from __future__ import annotations

import atexit
import contextlib
import logging
import os
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from headsearch.basics.errors import HeadsearchError, first_line
from headsearch.basics.files import process_alive

log = logging.getLogger(__name__)

KEEP_S = 3600.0  # a finished job (and its files) is forgotten this long after it ended
MAX_FINISHED = 8  # finished jobs kept at most (the oldest go first)
MAX_WAITING = 4  # jobs waiting for their turn at most; more are refused (JobsBusy)
JOB_CHARS = 16  # a job id: this many URL-safe characters (96 random bits)
JOBS_FOLDER = "jobs"  # under the app's cache folder


class JobsBusy(HeadsearchError):
    """Too many jobs are waiting for their turn."""


@dataclass
class Job:
    """One long action: what kind it is, how far it is (it is the work's progress bar), and its outcome."""

    id: str
    folder: Path  # the job's own folder in the app's cache: its files, removed with it
    kind: str = "job"  # "redact" | "compare" | "cast"
    state: str = "waiting"  # waiting | analysing | redacting | done | failed
    frames_done: int = 0
    frames_total: int | None = None
    error: str | None = None  # one line, when it failed
    result: dict = field(default_factory=dict)  # when done: what its JSON twin answers
    created: float = field(default_factory=time.time)
    ended: float | None = None

    # ----- the work's progress bar (tqdm's interface) --------------------------------------------
    def reset(self, total: int | None = None) -> None:
        self.frames_done, self.frames_total = 0, total

    def update(self, n: int = 1) -> None:
        self.frames_done += n

    def set_description(self, what: str) -> None:
        if self.state not in ("done", "failed"):
            self.state = what

    @property
    def running(self) -> bool:
        return self.state not in ("done", "failed")

    def to_dict(self, prefix: str = "") -> dict:
        """The job as its /api twin shows it: the result once done (the same dict the CLI's --json gives)."""
        return {"id": self.id, "kind": self.kind, "state": self.state, "running": self.running, "frames_done": self.frames_done,
                "frames_total": self.frames_total, "error": self.error, "result": self.result, "page": f"{prefix}/jobs/{self.id}",
                "seconds": round((self.ended or time.time()) - self.created, 1)}


J = TypeVar("J", bound=Job)


class Jobs:
    """The app's jobs, their threads and their files under `cache/jobs/`."""

    def __init__(self, cache: Path):
        self.base = Path(cache) / JOBS_FOLDER
        self.folder = self.base / f"{os.getpid()}-{secrets.token_hex(4)}"
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()  # the jobs' table
        self._one = threading.Lock()  # one job runs at a time
        self._made = False
        self._forgotten_at = 0.0  # jobs made before this end without their files (a person in them was forgotten)

    def start(self, make: Callable[[str, Path], J], run: Callable[[J], dict]) -> J:
        """A new job, `make(id, folder)` (its folder made), that runs `run(job)` (which follows its progress with the job and
        answers its result) in a thread when its turn comes; refused (JobsBusy) when MAX_WAITING jobs wait already."""
        self._prune()
        with self._lock:
            if sum(j.state == "waiting" for j in self._jobs.values()) >= MAX_WAITING:
                raise JobsBusy(f"{MAX_WAITING} jobs (redactions, comparisons) are waiting for their turn already: try again when one is done")
            self._prepare()
            key = secrets.token_urlsafe(12)[:JOB_CHARS]
            folder = self.folder / key
            folder.mkdir(parents=True)
            job = make(key, folder)
            self._jobs[key] = job
        threading.Thread(target=self._run, args=(job, run), name=f"{job.kind}-{key}", daemon=True).start()
        return job

    def _run(self, job: J, run: Callable[[J], dict]) -> None:
        with self._one:
            job.state = "analysing"
            try:
                job.result = run(job)
                job.state = "done"
            except HeadsearchError as e:
                job.error, job.state = first_line(e), "failed"
            except Exception as e:  # noqa: BLE001 - one line on the job's page, the traceback in the server's log
                log.error("%s job %s failed", job.kind, job.id, exc_info=e)
                job.error, job.state = f"unexpected error ({type(e).__name__}); the server's log has the details", "failed"
            finally:
                job.ended = time.time()
                if job.created <= self._forgotten_at:  # a person was forgotten while it ran: it may show or list them
                    job.state, job.result, job.error = "failed", {}, "a person was forgotten while it ran: its files are gone"
                if job.state == "failed":
                    shutil.rmtree(job.folder, ignore_errors=True)
        self._prune()

    def get(self, key: str) -> Job | None:
        """A job by id (None when there is none, or it is forgotten)."""
        self._prune()
        with self._lock:
            return self._jobs.get(key) if len(key) == JOB_CHARS else None

    def _prune(self) -> None:
        """Forget finished jobs past KEEP_S, and the oldest beyond MAX_FINISHED, with their files."""
        now = time.time()
        with self._lock:
            ended = sorted((j for j in self._jobs.values() if j.ended is not None), key=lambda j: j.ended or 0.0)
            gone = [j for j in ended if now - (j.ended or now) > KEEP_S]
            gone += [j for j in ended if j not in gone][:max(0, len(ended) - len(gone) - MAX_FINISHED)]
            for j in gone:
                self._jobs.pop(j.id, None)
        for j in gone:
            shutil.rmtree(j.folder, ignore_errors=True)

    def forget_all(self) -> None:
        """Every job goes with its files (a person is forgotten: their video, audit trail or comparison may be among
        them); one still running ends without its files."""
        with self._lock:
            self._forgotten_at = time.time()
            gone = [j for j in self._jobs.values() if not j.running]
            for j in gone:
                self._jobs.pop(j.id, None)
        for j in gone:
            shutil.rmtree(j.folder, ignore_errors=True)

    def _prepare(self) -> None:
        """The process's folder, made on the first job; folders of processes that are gone are removed then."""
        if self._made:
            return
        with contextlib.suppress(OSError):
            for old in self.base.iterdir():
                pid = old.name.split("-", 1)[0]
                if old.is_dir() and pid.isdigit() and int(pid) != os.getpid() and not process_alive(int(pid)):
                    shutil.rmtree(old, ignore_errors=True)
        self.folder.mkdir(parents=True, exist_ok=True)
        atexit.register(self.close)
        self._made = True

    def close(self) -> None:
        """Forget every job and remove the process's folder (the app stops)."""
        with self._lock:
            self._jobs.clear()
        shutil.rmtree(self.folder, ignore_errors=True)
