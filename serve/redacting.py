"""The web app's redactions (`headsearch redact` from the video and person pages): each a job in a thread of its own,
one redacting at a time in the process (it decodes and encodes a whole video), the others waiting their turn.

A job follows its redaction's progress (frames done of the total, from the redactor's progress callback) and, when it is
done, shows the check of its output and its contact sheet, then offers the file and its audit trail. Its files are written in the app's cache folder, in a folder of this process
(`redactions/PID-KEY/JOB/`), never beside the library's videos; the source is only read. A finished job is kept for
`KEEP_S` and at most `MAX_FINISHED` of them; the process's folder goes when the app stops (and a folder left by a
process that is gone, when the next one starts a job). Job ids are random (`JOB_ID`): a page's address is its key.
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

from headsearch.basics.errors import HeadsearchError, first_line
from headsearch.basics.files import process_alive

log = logging.getLogger(__name__)

KEEP_S = 3600.0  # a finished job (and its files) is forgotten this long after it ended
MAX_FINISHED = 8  # finished jobs kept at most (the oldest go first)
MAX_WAITING = 4  # jobs waiting for their turn at most; more are refused (RedactBusy)
JOB_CHARS = 16  # a job id: this many URL-safe characters (96 random bits)


class RedactBusy(HeadsearchError):
    """Too many redactions are waiting for their turn."""


@dataclass
class RedactJob:
    """One redaction: what it does, how far it is (it is the redactor's progress bar: `reset`, `update`,
    `set_description`), and its outcome."""

    id: str
    video_id: int
    video: str  # the source's file name
    whom: str  # whom it hides, in words
    style: str
    out: Path  # the redacted file, in the job's folder
    audit: Path  # its audit trail
    sheet: Path  # its contact sheet
    margin: float  # a share of the head box hidden around it
    state: str = "waiting"  # waiting | analysing | redacting | done | failed
    frames_done: int = 0
    frames_total: int | None = None
    error: str | None = None  # one line, when it failed
    result: dict = field(default_factory=dict)  # when done: frames, boxes, tracks, seconds
    created: float = field(default_factory=time.time)
    ended: float | None = None
    before_writing: Callable[[], None] | None = None  # called when the analysis is done and the writing starts (may refuse)

    # ----- the redactor's progress bar (tqdm's interface) ----------------------------------------
    def reset(self, total: int | None = None) -> None:
        self.frames_done, self.frames_total = 0, total

    def update(self, n: int = 1) -> None:
        self.frames_done += n

    def set_description(self, what: str) -> None:
        if what == "redacting" and self.before_writing is not None:
            self.before_writing()
        if self.state not in ("done", "failed"):
            self.state = what

    @property
    def running(self) -> bool:
        return self.state not in ("done", "failed")

    def to_dict(self, prefix: str = "") -> dict:
        """The job as its page and /api twin show it (links to the file and audit trail once done)."""
        done = self.state == "done"
        return {"id": self.id, "state": self.state, "running": self.running, "video_id": self.video_id, "video": self.video,
                "whom": self.whom, "style": self.style, "frames_done": self.frames_done, "frames_total": self.frames_total,
                "margin": self.margin, "error": self.error, "result": self.result, "page": f"{prefix}/jobs/{self.id}",
                "check": self.result.get("check") if done else None,
                "sheet": f"/jobs/{self.id}/sheet" if done and self.sheet.is_file() else None,
                "file": f"/jobs/{self.id}/file" if done else None, "audit": f"/jobs/{self.id}/audit" if done else None,
                "file_name": self.out.name if done else None,
                "seconds": round((self.ended or time.time()) - self.created, 1)}


class RedactJobs:
    """The app's redaction jobs, their thread and their files under `cache/redactions/`."""

    def __init__(self, cache: Path):
        self.base = Path(cache) / "redactions"
        self.folder = self.base / f"{os.getpid()}-{secrets.token_hex(4)}"
        self._jobs: dict[str, RedactJob] = {}
        self._lock = threading.Lock()  # the jobs' table
        self._one = threading.Lock()  # one redaction at a time
        self._made = False
        self._forgotten_at = 0.0  # jobs made before this end without their files (a person in them was forgotten)

    def start(self, video_id: int, video: str, whom: str, style: str, out_name: str,
              run: Callable[[Path, RedactJob], dict], margin: float) -> RedactJob:
        """A new job that runs `run(out, job)` (which writes `out` and its audit trail, and follows its progress with
        `job`) in a thread when its turn comes; refused (RedactBusy) when MAX_WAITING jobs wait already."""
        from indexer.redact import PREVIEW_SUFFIX, audit_path

        self._prune()
        with self._lock:
            if sum(j.state == "waiting" for j in self._jobs.values()) >= MAX_WAITING:
                raise RedactBusy(f"{MAX_WAITING} redactions are waiting for their turn already: try again when one is done")
            self._prepare()
            key = secrets.token_urlsafe(12)[:JOB_CHARS]
            folder = self.folder / key
            folder.mkdir(parents=True)
            out = folder / out_name
            job = RedactJob(key, video_id, video, whom, style, out, audit_path(out), folder / (out_name + PREVIEW_SUFFIX), margin)
            self._jobs[key] = job
        threading.Thread(target=self._run, args=(job, run), name=f"redact-{key}", daemon=True).start()
        return job

    def _run(self, job: RedactJob, run: Callable[[Path, RedactJob], dict]) -> None:
        with self._one:
            job.state = "analysing"
            try:
                job.result = run(job.out, job)
                job.state = "done"
            except HeadsearchError as e:
                job.error, job.state = first_line(e), "failed"
            except Exception as e:  # noqa: BLE001 - one line on the job's page, the traceback in the server's log
                log.error("redaction %s of video %s failed", job.id, job.video_id, exc_info=e)
                job.error, job.state = f"unexpected error ({type(e).__name__}); the server's log has the details", "failed"
            finally:
                job.ended = time.time()
                if job.created <= self._forgotten_at:  # a person was forgotten while it ran: it may show or list them
                    job.state, job.result, job.error = "failed", {}, "a person was forgotten while it ran: its files are gone"
                if job.state == "failed":
                    shutil.rmtree(job.out.parent, ignore_errors=True)
        self._prune()

    def get(self, key: str) -> RedactJob | None:
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
            shutil.rmtree(j.out.parent, ignore_errors=True)

    def forget_all(self) -> None:
        """Every job goes with its files (a person is forgotten: their video or audit trail may be among them); one still
        running ends without its files."""
        with self._lock:
            self._forgotten_at = time.time()
            gone = [j for j in self._jobs.values() if not j.running]
            for j in gone:
                self._jobs.pop(j.id, None)
        for j in gone:
            shutil.rmtree(j.out.parent, ignore_errors=True)

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

