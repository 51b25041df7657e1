"""`headsearch reindex`: a library moved to another model.

Every file the library holds (the paths it recorded; files gone from disk are reported and left out) is
analysed again with the model into a new library folder beside it (`headsearch.store.reembedding`), an
ordinary incremental library, so a killed run resumes where it stopped. Its people and users' corrections
come over and find their new tracks by place; then the new folder takes the old one's place in one rename.
Until that rename the old library is not written to and answers as before. The old library is kept beside
it (the only copy of the old vectors and of its own thresholds, and a way back: rename it back), or
deleted on request. Vectors of two models never meet in one library.
"""
from __future__ import annotations

import contextlib
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from headsearch.basics.settings import IndexSettings
from headsearch.basics.text import counted
from headsearch.evaluation.thresholds import shipped_thresholds_path, thresholds_path
from headsearch.models.registry import load_embedder
from headsearch.people.forgetting import returned_notes
from headsearch.people.persons import UpdateSummary, update_people
from headsearch.store.library import Library
from headsearch.store.reembedding import (
    CarriedOver,
    carry_over,
    finish_swap,
    open_staging,
    people_writers_waiting,
    staging_path,
    swap,
)
from indexer.pipeline import Indexer, IndexSummary
from schemas.records import ModelInfo

Report = Callable[[str], None]


@dataclass
class ReindexSummary:
    library: Path
    old_model: str = ""  # names
    model: str = ""
    files: int = 0  # files the old library held
    gone: list[str] = field(default_factory=list)  # of those, gone from disk: left out
    resumed: int = 0  # files an earlier, interrupted run had re-embedded already
    index: IndexSummary | None = None
    carried: CarriedOver | None = None
    people: UpdateSummary | None = None
    backup: Path | None = None  # where the old library is now (None: not swapped, or deleted)
    swapped: bool = False
    deleted_old: bool = False
    finished_earlier_swap: Path | None = None  # an interrupted run's swap, completed first
    already: bool = False  # the library's vectors are made by that model already
    tracks: int = 0  # in the new library

    @property
    def failed(self) -> list[str]:
        return self.index.failed if self.index is not None else []

    def line(self) -> str:
        if self.already:
            return f"{self.library}: its vectors are made by {self.model} already; nothing to re-embed"
        if not self.swapped:
            return f"{self.library}: not re-indexed; it still answers with {self.old_model}"
        idx = self.index or IndexSummary()
        kept = self.files - len(self.gone) - len(self.failed)
        carried = self.carried
        people = (f"; {counted(carried.people, 'person')} ({carried.named} named) and {counted(carried.verdicts, 'correction')} carried over"
                  + (f", {counted(self.people.rebound, 'track')} found in their places" if self.people else "")) if carried else ""
        old = ("the old library was deleted" if self.deleted_old
               else f"the old library ({self.old_model}) is at {self.backup} (delete it when you no longer need it)")
        return (f"{self.library}: re-indexed with {self.model}: {kept} of {counted(self.files, 'file')} ({idx.indexed} analysed now, "
                f"{self.resumed} by an earlier run, {len(self.gone)} gone, {len(self.failed)} failed), {counted(self.tracks, 'track')}"
                f"{people}; {old}")


class Reindexer:
    """Re-embeds the library at `root` with `model` (None: the default model) into a new folder, then swaps."""

    def __init__(self, root: Path, model: str | None = None, settings: IndexSettings | None = None, progress: bool = True,
                 workers: int = 1, delete_old: bool = False, leave_out_failed: bool = False, report: Report = print):
        self.root = Path(root).expanduser().resolve()
        self.model = model
        self.settings = settings or IndexSettings()
        self.progress = progress
        self.workers = workers
        self.delete_old = delete_old
        self.leave_out_failed = leave_out_failed
        self.report = report
        self.summary = ReindexSummary(self.root)

    def interrupted_line(self) -> str:
        """What to say when Ctrl-C stops the run, true at every moment of it."""
        s = self.summary
        if s.swapped:
            return (f"interrupted: {self.root} is re-indexed with {s.model}; the old library is at {s.backup}"
                    + (" (partly deleted: delete the rest)" if self.delete_old else ""))
        return (f"interrupted: {self.root} is untouched and answers as before; run the same command again to finish "
                f"(what was re-embedded is kept in {staging_path(self.root)})")

    def run(self) -> ReindexSummary:
        s = self.summary
        s.finished_earlier_swap = finish_swap(self.root)
        if s.finished_earlier_swap is not None:
            self.report(f"finished the swap an interrupted run had begun: the old library is at {s.finished_earlier_swap}")
        old = Library.open(self.root)
        embedder = load_embedder(self.model)
        target = embedder.describe()
        s.old_model, s.model = old.model.name, target.name
        if old.model.same_vectors_as(target):
            s.already = True
            if staging_path(self.root).exists():
                self.report(f"note: {staging_path(self.root)} holds an unfinished re-index to another model; "
                            "finish it (`headsearch reindex --model` that model) or delete it")
            return s
        with old.writer_lock(purpose="re-index"):
            stored = sorted(old.files.stored_files().values(), key=lambda f: f.id)  # in the order they were indexed
            s.files = len(stored)
            present = [Path(f.path) for f in stored if Path(f.path).is_file()]
            s.gone = [f.path for f in stored if not Path(f.path).is_file()]
            for path in s.gone:
                self.report(f"gone: {path} (not on disk; left out of the new library)")
            new = open_staging(old, target)
            done = new.files.stored_files()
            s.resumed = sum(1 for p in present if str(p) in done)
            self.report(f"re-embedding {len(present)} files of {self.root} ({old.model.label()}) with {target.label()} "
                        f"into {new.root}" + (f"; {s.resumed} re-embedded by an earlier run are kept" if s.resumed else ""))
            indexer = Indexer(new, embedder, self.settings, progress=self.progress, retry_failed=True, workers=self.workers,
                              group_people=False)
            s.index = indexer.run(present, report=self.report)
            if s.failed and not self.leave_out_failed:
                self.report(f"not swapped: {counted(len(s.failed), 'file')} could not be re-embedded (above); {self.root} still answers "
                            f"with {old.model.label()}. Run the same command again to try them again, or add "
                            "--leave-out-failed to swap without them (they stay recorded as failed)")
                return s
            s.tracks = sum(f.tracks for f in new.files.listing())
            with people_writers_waiting(old):
                s.carried = carry_over(old, new)
                for line in returned_notes(new):  # every file was analysed again: a forgotten person is back in some
                    self.report(line)
                s.people = update_people(new, fresh_vectors=True)
                with _uninterrupted():
                    s.backup = swap(self.root, target)
                    s.swapped = True
        self._say_what_stays_behind(old, target)
        if self.delete_old and s.backup is not None:
            shutil.rmtree(s.backup)
            s.deleted_old = True
        return s

    def _say_what_stays_behind(self, old: Library, target: ModelInfo) -> None:
        own = thresholds_path(self.summary.backup)
        if own.is_file():
            shipped = shipped_thresholds_path(target)
            now = (f"{target.name}'s shipped thresholds apply" if shipped is not None and shipped.is_file()
                   else "scores are uncalibrated until you calibrate")
            self.report(f"note: {own.name} was calibrated for {old.model.name} and is not carried over ({now}; calibrate this "
                        f"library again with `headsearch bench accuracy LABELS.csv --calibrate 1e-3 --library {self.root}`)")
        self.report(f"note: a `headsearch serve` running on {self.root} keeps the old model until it is restarted")


@contextlib.contextmanager
def _uninterrupted() -> Iterator[None]:
    """Ctrl-C is ignored for the moment of the swap: its two renames are done both or neither (what a kill
    leaves between them, `finish_swap` completes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
