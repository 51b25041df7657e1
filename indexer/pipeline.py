"""Indexing: files and folders -> analysed files (`indexer.analysis`) -> one library.

Unchanged files are skipped (size and mtime, then the content fingerprint), changed ones are
analysed again and replace their old rows, files that vanished from an indexed folder are removed.
"""
from __future__ import annotations

import logging
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from headsearch.basics.errors import HeadsearchError, LibraryError, MediaError, cannot_read, is_disk_full, unreadable
from headsearch.basics.failures import unexpected_error_line
from headsearch.basics.media import fingerprint, is_media_name, media_kind
from headsearch.basics.settings import IndexSettings
from headsearch.basics.text import counted
from headsearch.detection.faces import FaceDetector
from headsearch.models import Embedder
from headsearch.people.forgetting import returned_notes
from headsearch.people.persons import update_people
from headsearch.store.library import Library
from headsearch.store.rows import FailedFile, StoredFile
from indexer.analysis import STAGES
from indexer.engines import Failure, Job, make_engine
from schemas.records import FileResult, FileStamp, MediaKind

log = logging.getLogger(__name__)

Report = Callable[[str], None]


@dataclass
class IndexSummary:
    files: int = 0
    indexed: int = 0
    skipped: int = 0
    removed: int = 0
    failed: list[str] = field(default_factory=list)
    failed_before: int = 0  # files that failed in an earlier run and did not change since (skipped)
    warnings: list[str] = field(default_factory=list)
    frames: int = 0
    shots: int = 0
    tracks: int = 0
    dropped_tracks: int = 0  # tracks without face evidence (false faces, logos, hands)
    video_seconds: float = 0.0
    wall_seconds: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    @property
    def realtime_factor(self) -> float:
        return self.video_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0

    def line(self) -> str:
        before = f", {self.failed_before} failed before and unchanged (skipped; --retry-failed)" if self.failed_before else ""
        return (f"{counted(self.files, 'file')} ({self.indexed} indexed, {self.skipped} unchanged, {self.removed} removed, "
                f"{len(self.failed)} failed{before}), {counted(self.frames, 'frame')}, {counted(self.shots, 'shot')}, "
                f"{counted(self.tracks, 'track')}"
                f"{f' ({self.dropped_tracks} without face evidence dropped)' if self.dropped_tracks else ''}, "
                f"{self.wall_seconds:.1f} s" + (f", {self.realtime_factor:.2f}x real time" if self.video_seconds > 0 else ""))

    def stages_line(self) -> str:
        return ", ".join(f"{k} {self.stage_seconds.get(k, 0.0):.1f}s" for k in STAGES)


def discover(paths: Iterable[Path]) -> tuple[list[Path], list[str], list[Path]]:
    """Media files under the given paths (folders recursively), unreadable paths, and the folders walked."""
    files, problems, folders = [], [], []
    for p in paths:
        p = Path(p).expanduser()
        if p.is_dir():
            folders.append(p.resolve())
            for root, dirs, names in os.walk(p, onerror=lambda e: problems.append(cannot_read(e.filename, e, "folder"))):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for n in sorted(names):
                    if is_media_name(n):
                        _add_walked_file(Path(root, n), files, problems)
        elif p.is_file():
            files.append(p.resolve())
        elif p.exists():
            problems.append(f"{p}: not a regular file or folder")
        elif p.is_symlink():
            problems.append(f"{p}: broken symbolic link (its target is missing, or links loop)")
        else:
            problems.append(f"{p}: no such file or folder")
    return list(dict.fromkeys(files)), problems, folders


def _add_walked_file(path: Path, files: list[Path], problems: list[str]) -> None:
    """A media name met in a folder walk: a regular file (after its links) is kept, anything else is a
    problem line (a FIFO or a device would block or never end, a link may loop or dangle)."""
    try:
        resolved = path.resolve(strict=True)
        regular = resolved.is_file()
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
        problems.append(f"{path}: broken symbolic link (its target is missing, or links loop)")
        return
    if regular:
        files.append(resolved)
    else:
        problems.append(f"{path}: not a regular file")


class _Batch:
    """Analysed files waiting for one commit."""

    def __init__(self):
        self.results: list[FileResult] = []
        self.sightings = 0
        self.since = 0.0

    def add(self, result: FileResult) -> None:
        if not self.results:
            self.since = time.monotonic()
        self.results.append(result)
        self.sightings += result.sightings

    def due(self, files: int, seconds: float) -> bool:
        return bool(self.results) and (len(self.results) >= files or self.sightings >= MAX_BATCH_SIGHTINGS
                                       or time.monotonic() - self.since >= seconds)


MAX_BATCH_SIGHTINGS = 50_000


class Indexer:
    """Indexes files into one library with one detector and one embedder.

    Files are analysed by an engine (`indexer.engines`: this process, `workers` processes, or Ray
    actors) and stored by this one writer in the order they were found. Small files commit in
    batches (at most `batch_files` files, `batch_seconds` old): one transaction each, all or
    nothing, so a killed run loses at most the batch it was about to commit and the next run
    analyses those files again. A batch commits before a video is analysed, and at the end."""

    def __init__(self, library: Library, embedder: Embedder, settings: IndexSettings | None = None, progress: bool = True,
                 retry_failed: bool = False, workers: int = 1, engine: str = "local", address: str | None = None,
                 batch_files: int = 64, batch_seconds: float = 5.0, group_people: bool = True):
        self.library = library
        self.embedder = embedder
        self.settings = settings or IndexSettings()
        self.detector = FaceDetector.from_settings(self.settings)
        self.progress = progress
        self.retry_failed = retry_failed  # try again files that failed before, even unchanged
        self.workers = max(1, workers)
        self.engine = engine
        self.address = address
        self.batch_files = max(1, batch_files)
        self.batch_seconds = batch_seconds
        self.group_people = group_people  # new tracks join people at the end (`headsearch reindex` brings its people over itself)
        self._failed: dict[str, FailedFile] = {}
        self._batch = _Batch()

    def run(self, paths: Iterable[Path], report: Report = print) -> IndexSummary:
        """Index files and folders; unchanged files are skipped, vanished ones under the folders removed."""
        summary = IndexSummary()
        start = time.perf_counter()
        files, problems, folders = discover(paths)
        for p in problems:
            report(f"error: {p}")
        summary.failed.extend(problems)
        summary.files = len(files)
        with self.library.writer_lock():
            self.library.files.collect_orphan_thumbnails()
            self.library.load_indexes()
            stored = self.library.files.stored_files()
            for path_str in stored:
                if any(Path(path_str).is_relative_to(f) for f in folders) and not Path(path_str).exists():
                    self.library.files.remove(path_str)
                    summary.removed += 1
            self._failed = self.library.files.failed_files()
            self.library.files.forget_failures([p for p in self._failed if any(Path(p).is_relative_to(f) for f in folders) and not Path(p).exists()])
            overall = tqdm(total=len(files), desc="files", unit="file", disable=not self.progress, position=0)
            frame_bar = tqdm(desc="frames", unit="frame", disable=not self.progress or self.workers > 1 or self.engine != "local",
                             position=1, leave=False)
            engine = make_engine(self.engine, self.workers, self.settings, self.detector, self.embedder, self.library.root,
                                 frame_bar, self.address)
            self._batch = _Batch()
            last_save = time.monotonic()
            try:
                for job, outcome in engine.run(self._jobs(files, stored, summary, report, overall)):
                    if isinstance(outcome, Failure):
                        self._failed_file(job.path, outcome, summary, report)
                    else:
                        if outcome.warning:
                            summary.warnings.append(outcome.warning)
                            report(f"warning: {outcome.warning}")
                        self._batch.add(outcome)
                        if self._batch.due(self.batch_files, self.batch_seconds):
                            self._flush(summary, report)
                    overall.update(1)
                    if time.monotonic() - last_save > 60:
                        self._flush(summary, report)
                        self.library.save_indexes()
                        last_save = time.monotonic()
                self._flush(summary, report)
            finally:
                engine.close()
            frame_bar.close()
            overall.close()
            self.library.save_indexes()
            if self.group_people and (summary.indexed or summary.removed):
                update_people(self.library)  # new tracks join known people or start new ones
        summary.wall_seconds = time.perf_counter() - start
        return summary

    def _jobs(self, files: list[Path], stored: dict[str, StoredFile], summary: IndexSummary, report: Report,
              overall: tqdm) -> Iterator[Job]:
        """The files to analyse, in order; unchanged files and files that failed before are counted and skipped here."""
        for path in files:
            try:
                stamp = self._changed(path, stored.get(str(path)), summary)
            except (HeadsearchError, OSError) as e:
                self._failed_file(path, Failure.from_error(path, e), summary, report)
                stamp = None
            if stamp is None:
                overall.update(1)
                continue
            if media_kind(path) == MediaKind.VIDEO:  # photos waiting commit before a video is analysed
                self._flush(summary, report)
            overall.set_postfix_str(path.name[-40:])  # the file handed out to be read now (with workers: the latest handed out)
            yield Job(path, stamp)

    def _flush(self, summary: IndexSummary, report: Report) -> None:
        """Commit the waiting analysed files in one transaction (one at a time when that fails for
        an unexpected reason, so that one bad file costs only itself)."""
        results, self._batch = self._batch.results, _Batch()
        if not results:
            return
        t0 = time.perf_counter()
        try:
            self.library.files.store_many(results)
        except LibraryError:
            raise  # the library cannot take more (disk full, I/O error): stop, nothing is lost
        except OSError as e:
            if is_disk_full(e):
                raise self._disk_full() from e
            if len(results) == 1:
                self._failed_file(Path(results[0].path), Failure.from_error(Path(results[0].path), e), summary, report)
                return
            self._store_one_by_one(results, summary, report)
            return
        except Exception as e:  # noqa: BLE001 - one file's rows that cannot be stored must not stop the others
            if len(results) == 1:
                line = unexpected_error_line(results[0].path, e, self.library.root)
                self._failed_file(Path(results[0].path), Failure(line), summary, report)
                return
            self._store_one_by_one(results, summary, report)
            return
        summary.stage_seconds["store"] += time.perf_counter() - t0
        for line in returned_notes(self.library, [r.stamp.fingerprint for r in results]):  # a forgotten person is back
            report(line)
        for result in results:
            self._count(result, summary)

    def _store_one_by_one(self, results: list[FileResult], summary: IndexSummary, report: Report) -> None:
        for result in results:
            self._batch.add(result)
            self._flush(summary, report)

    @staticmethod
    def _count(result: FileResult, summary: IndexSummary) -> None:
        for stage, seconds in result.stage_seconds.items():
            summary.stage_seconds[stage] += seconds
        summary.indexed += 1
        summary.frames += result.frames_decoded
        summary.shots += len(result.shots)
        summary.tracks += len(result.tracks)
        summary.dropped_tracks += len(result.dropped_tracks)
        summary.video_seconds += result.duration
        log.info("%s: %s, %s kept, %d dropped without face evidence, %s (%d embedded), decoded by %s",
                 result.path, counted(len(result.shots), "shot"), counted(len(result.tracks), "track"), len(result.dropped_tracks),
                 counted(result.sightings, "sighting"), result.embedded, result.decoder)

    def _failed_file(self, path: Path, failure: Failure, summary: IndexSummary, report: Report) -> None:
        if failure.disk_full:
            raise self._disk_full()
        summary.failed.append(failure.line)
        report(f"error: {failure.line}")
        self._remember_failure(path, failure.line)
        if failure.detail:
            log.info("%s: %s", path, failure.detail)

    def _disk_full(self) -> LibraryError:
        return LibraryError(f"{self.library.root}: disk full; the library keeps its last committed state (free space and run again)")

    def _remember_failure(self, path: Path, error: str) -> None:
        """Record the version of a file that failed, so the next runs skip it until it changes."""
        try:
            stat = path.stat()
            digest = fingerprint(path, stat.st_size)
        except OSError:
            return  # cannot even be read: tried again next time
        self.library.files.record_failure(str(path), stat.st_size, stat.st_mtime, digest, error)

    def _failed_before(self, path: Path, stat: os.stat_result) -> FailedFile | None:
        """The earlier failure of this very version of the file, if any (and not asked to retry)."""
        failed = self._failed.get(str(path))
        if failed is None or self.retry_failed or failed.size != stat.st_size:
            return None
        if failed.mtime == stat.st_mtime or failed.fingerprint == fingerprint(path, stat.st_size):
            return failed
        return None

    def _changed(self, path: Path, stored: StoredFile | None, summary: IndexSummary) -> FileStamp | None:
        """The version of a file to analyse, or None when it is unchanged or failed before unchanged (counted)."""
        try:
            stat = path.stat()
        except OSError as e:
            raise unreadable(path, e) from e
        if not os.access(path, os.R_OK):
            raise MediaError(f"{path}: permission denied")
        if stored is not None and stored.size == stat.st_size and stored.mtime == stat.st_mtime:
            summary.skipped += 1
            log.info("%s: unchanged (same size and modification time), skipped", path)
            return None
        failed = self._failed_before(path, stat)
        if failed is not None:
            summary.failed_before += 1
            log.info("%s: skipped, failed before and unchanged (%s)", path, failed.error)
            return None
        stamp = FileStamp(str(path), stat.st_size, stat.st_mtime, fingerprint(path, stat.st_size))
        if stored is not None and stored.fingerprint == stamp.fingerprint:
            summary.skipped += 1
            log.info("%s: unchanged (same content fingerprint), skipped", path)
            return None
        log.info("%s: %s", path, "changed since it was indexed, indexing it again" if stored is not None else "new, indexing")
        return stamp
