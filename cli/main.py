"""The `headsearch` command. Thin: parses options, calls the library, turns errors into one line."""
from __future__ import annotations

import atexit
import contextlib
import importlib
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import click

import cli
from cli.exporting import export_options
from cli.options import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_PARTIAL,
    EXIT_TERMINATED,
    MAX_WORKERS,
    FiniteFloat,
    command_name,
    library_option,
    library_path,
    model_option,
    progress_option,
    show_progress,
)
from headsearch.basics.errors import HeadsearchError, is_disk_full
from headsearch.basics.json_text import json_text
from headsearch.basics.settings import IndexSettings
from headsearch.basics.text import counted, printable

VERBOSE_FLAGS = ("-v", "--verbose")
log = logging.getLogger("cli")
OUR_LOGGERS = ("headsearch", "indexer", "actions", "bench", "trainer", "cli", "serve", "schemas")
INTERRUPTED = "interrupted: the library is consistent; run the same command again to finish"
LAZY_COMMANDS = {  # name -> module:command, imported when used
    "bench": "cli.bench:bench",
    "build-dataset": "cli.dataset:build_dataset_command",
    "compare": "cli.compare:compare",
    "people": "cli.people:people",
    "redact": "cli.redact:redact",
    "serve": "cli.serve:serve",
    "train": "cli.train:train",
}


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time of each record (tests swap it)."""

    def __init__(self):
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def configure_logging(verbose: bool) -> None:
    """-v shows the pipeline's decisions (our loggers at INFO), never the libraries' noise (FAISS
    loading, SQLAlchemy's pool, PIL...), which stay at ERROR; SQLAlchemy's tracebacks never show."""
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(logging.ERROR)
    for name in OUR_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.ERROR)
    logging.getLogger("sqlalchemy").setLevel(logging.CRITICAL + 1)
    notices = logging.getLogger("headsearch.notices")  # one line a notice, whatever -v says
    for h in list(notices.handlers):
        notices.removeHandler(h)
    said = _StderrHandler()
    said.setFormatter(logging.Formatter("note: %(message)s"))
    notices.addHandler(said)
    notices.setLevel(logging.INFO)
    notices.propagate = False


def _quiet_exit(code: int) -> None:
    """Leave at once after an interruption or a broken pipe: nothing more reaches the screen."""
    sys.unraisablehook = lambda *_: None  # no "Exception ignored in ..." from objects torn down on the way out
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    if cli.is_the_program():
        # Not through the interpreter's teardown: a SIGINT there (pressed again, or re-raised by a native library)
        # would end the program by signal (exit -2, seen in CI) whatever was said.
        _leave_now(code)
    raise SystemExit(code)


_leave_quickly = False  # set by a command that only read: at its end the program leaves without tearing itself down


def leave_quickly() -> None:
    """Once this (read-only) command has succeeded, the program itself (not a test's CliRunner) leaves at once: tearing
    down the interpreter (SQLAlchemy, DuckDB, ONNX Runtime, every module) costs a fifth of a cold query, and a
    command that only read has nothing to finish."""
    global _leave_quickly
    _leave_quickly = cli.is_the_program()


def _leave_now(code: int = 0) -> None:
    atexit._run_exitfuncs()  # what asked to run at exit runs (logging's flush among them), then nothing more
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


class Terminated(KeyboardInterrupt):
    """SIGTERM (a service manager stopping the program, `kill`): the command stops as at a Ctrl-C, where it is safe to,
    and says so."""


_terminated = False  # a SIGTERM came: said so at the end, whatever exception carried it out (a database's own included)


def _terminate(signum, frame) -> None:
    global _terminated
    _terminated = True
    raise Terminated()


def _interrupted(line: str = INTERRUPTED) -> None:
    # Leaving with 130 now (143 after a SIGTERM): a second signal (pressed again, or re-raised by a native library on
    # its way out) must not kill the process by signal while it tears down (seen in CI as exit -2).
    terminated = _terminated or isinstance(sys.exc_info()[1], Terminated)
    with contextlib.suppress(ValueError):  # ValueError: not the main thread
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with contextlib.suppress(OSError, ValueError):
        click.echo(line.replace("interrupted", "terminated", 1) if terminated else line, err=True)
    _quiet_exit(EXIT_TERMINATED if terminated else EXIT_INTERRUPTED)


class HeadsearchGroup(click.Group):
    """Turns domain errors into one clear line and an exit code, never a traceback; takes -v anywhere.

    The commands of their own modules (`LAZY_COMMANDS`) are imported only when named (or listed by
    --help): a `query` does not pay for the training stack that `build-dataset` imports."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in LAZY_COMMANDS:
            module, attribute = LAZY_COMMANDS[cmd_name].split(":")
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        return self.commands.get(cmd_name)

    def parse_args(self, ctx, args):
        cut = args.index("--") if "--" in args else len(args)
        if any(a in VERBOSE_FLAGS for a in args[:cut]):  # -v before or after the subcommand: the group takes it
            args = ["--verbose"] + [a for a in args[:cut] if a not in VERBOSE_FLAGS] + args[cut:]
        return super().parse_args(ctx, args)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except HeadsearchError as e:
            click.echo(f"error: {e}", err=True)
            detail = getattr(e, "detail", None)
            if detail and ctx.meta.get("verbose"):
                click.echo(f"  {detail}", err=True)
            ctx.exit(e.exit_code)
        except KeyboardInterrupt:
            _interrupted()
        except BrokenPipeError:
            _quiet_exit(EXIT_BROKEN_PIPE)
        except OSError as e:
            if is_disk_full(e):
                click.echo(f"error: disk full ({e.filename or ''}); the library keeps its last committed state", err=True)
            else:
                click.echo(f"error: {e.filename + ': ' if e.filename else ''}{e.strerror or e}", err=True)
            ctx.exit(1)

    def main(self, *args, **kwargs):
        if signal.getsignal(signal.SIGINT) is cli._interrupted_while_loading and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.default_int_handler)  # loaded: Ctrl-C is a KeyboardInterrupt again (see cli/__init__)
        if cli.is_the_program() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _terminate)  # a SIGTERM stops the command as a Ctrl-C does, with its line
        try:
            return super().main(*args, **kwargs)
        except SystemExit as e:
            if e.code in (0, None) and _leave_quickly:
                _leave_now()
            raise
        except KeyboardInterrupt:  # outside a command (while parsing, or loading)
            _interrupted()
        except BrokenPipeError:
            _quiet_exit(EXIT_BROKEN_PIPE)
        finally:
            try:  # a pipe closed before our last line was flushed must end as quietly
                sys.stdout.flush()
            except BrokenPipeError:
                _quiet_exit(EXIT_BROKEN_PIPE)
            except (OSError, ValueError):
                pass


@click.group(cls=HeadsearchGroup)
@click.option("-v", "--verbose", is_flag=True, help="Show what the pipeline decides (anywhere on the command line).")
@click.version_option(package_name="headsearch")
@click.pass_context
def main(ctx: click.Context, verbose: bool) -> None:
    """Find people in video libraries by their whole head: face, hair, contour, accessories."""
    ctx.meta["verbose"] = verbose
    ctx.meta["started"] = cli.command_started()
    configure_logging(verbose)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@library_option
@model_option("--model", "-m", prefix="Embedding model",
              suffix="; default: the library's model, or the default model for a new library.")
@click.option("--fps", "sample_fps", type=FiniteFloat(min=0.01), default=IndexSettings.sample_fps, show_default=True, help="Frames sampled per second.")
@progress_option
@click.option("--quiet", "-q", is_flag=True, help="No progress bars (same as --no-progress).")
@click.option("--retry-failed", is_flag=True, help="Try again the files that failed before, even unchanged.")
@click.option("--workers", "-j", type=click.IntRange(1, MAX_WORKERS), default=1, show_default=True,
              help="Processes analysing files at once (this process alone stores them); with --engine ray, the number of actors.")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: this machine; ray: Ray actors on a cluster (pip install 'headsearch[ray]').")
@click.option("--address", default=None, help="With --engine ray: the cluster to join (ray://host:10001, host:6379 or auto); "
              "default: a Ray instance started on this machine.")
def index(paths: tuple[Path, ...], library: Path | None, model: str | None, sample_fps: float, progress: bool | None, quiet: bool,
          retry_failed: bool = False, workers: int = 1, engine: str = "local", address: str | None = None) -> None:
    """Index videos and photos (files or folders, recursively) into the library.

    Unchanged files are skipped, changed ones re-indexed, and files that vanished from the given
    folders removed. Files that failed are remembered and skipped until they change. Interrupt at
    any time: the next run finishes the work. --workers N analyses N files at once.
    """
    from actions.index import index_files

    if address and engine != "ray":
        raise click.UsageError("--address needs --engine ray")
    summary = index_files(paths, library_path(library), model, IndexSettings.from_env(sample_fps=sample_fps),
                          progress=show_progress(progress, quiet), retry_failed=retry_failed, workers=workers, engine=engine,
                          address=address, report=lambda m: click.echo(m, err=True))
    click.echo(f"{summary.line()} [{summary.stages_line()}]")
    if summary.failed:
        sys.exit(EXIT_PARTIAL if summary.indexed or summary.skipped or summary.failed_before else 1)


@main.command()
@library_option
@model_option("--model", "-m", prefix="Model to re-embed the library with", suffix="; default: the default model.")
@click.option("--fps", "sample_fps", type=FiniteFloat(min=0.01), default=IndexSettings.sample_fps, show_default=True, help="Frames sampled per second.")
@progress_option
@click.option("--quiet", "-q", is_flag=True, help="No progress bars (same as --no-progress).")
@click.option("--workers", "-j", type=click.IntRange(1, MAX_WORKERS), default=1, show_default=True,
              help="Processes analysing files at once (this process alone stores them).")
@click.option("--delete-old", is_flag=True, help="Delete the old library once the new one is in place (default: keep it "
              "beside, renamed, and say where).")
@click.option("--leave-out-failed", is_flag=True, help="Swap even when some files could not be re-embedded (they stay "
              "recorded as failed; `index --retry-failed` tries them again).")
def reindex(library: Path | None, model: str | None, sample_fps: float, progress: bool | None, quiet: bool, workers: int = 1,
            delete_old: bool = False, leave_out_failed: bool = False) -> None:
    """Re-embed every file of the library with another model (default: the default model).

    The files the library holds are analysed again into a new library beside it (LIBRARY.reindexing);
    people, names and corrections come over; then the new library takes the old one's place in one
    rename, and the old one is kept as LIBRARY.before-MODEL-DATE (or deleted with --delete-old). Until
    then the library answers as before: interrupt at any time, and run the same command again to resume.
    Files gone from disk are left out; its thresholds.json, calibrated for the old model, stays behind.
    """
    from actions.reindex import Reindexer

    job = Reindexer(library_path(library), model, IndexSettings.from_env(sample_fps=sample_fps), progress=show_progress(progress, quiet),
                    workers=workers, delete_old=delete_old, leave_out_failed=leave_out_failed, report=lambda m: click.echo(m, err=True))
    try:
        summary = job.run()
    except KeyboardInterrupt:
        _interrupted(job.interrupted_line())
    click.echo(summary.line())
    if summary.failed:
        sys.exit(EXIT_PARTIAL)


@main.command()
@click.argument("image", type=click.Path(path_type=Path), required=False)
@library_option
@click.option("-k", "k", type=click.IntRange(min=1), default=5, show_default=True, help="Number of distinct tracks.")
@click.option("--all", "all_heads", is_flag=True, help="Search every head in the photo (numbered left to right), not only the largest.")
@click.option("--whole-image", is_flag=True, help="The photo is already a head crop (e.g. the back of a head).")
@click.option("--json", "as_json", is_flag=True, help="A JSON list of hits (times in seconds).")
@model_option("--model", "-m", prefix="Model to embed the query with, the library's own", suffix=" (default: the library's).")
@click.option("--person", default=None, help="Instead of a photo: every moment of this person (name or id, see `headsearch people`).")
@click.option("--min-score", type=FiniteFloat(-1.0, 1.0), default=None, help="Show hits scoring at least this (instead of the calibrated threshold).")
@click.option("--show-weak", is_flag=True, help="Also show hits below the confidence bar, marked as such.")
@click.option("--videos-only", is_flag=True, help="Only hits in videos.")
@click.option("--photos-only", is_flag=True, help="Only hits in photos.")
@click.option("--under", "under", multiple=True, type=click.Path(exists=True, path_type=Path),
              help="Only hits in files under this folder (or this file; repeatable).")
@click.option("--per-video", is_flag=True, help="Group the hits by video (best video first).")
@click.option("--export-clips", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Write each video hit's time range as a playable clip into this folder.")
@click.option("--pictures/--no-pictures", default=True, show_default=True,
              help="Render each hit's picture: the matched moment with the head boxed.")
@click.option("--rank", "ranking", type=click.Choice(["appearance", "identity"]), default="appearance", show_default=True,
              help="appearance: the same person first, same look before other look (by head score); identity: by identity score.")
@click.option("--with", "with_photo", type=click.Path(path_type=Path), default=None,
              help="Only while the person in this photo is on screen too (same shot, same time).")
@click.option("--without", "without_photo", type=click.Path(path_type=Path), default=None,
              help="Only while the person in this photo is not on screen.")
@export_options
def query(**given) -> None:
    """Find the moments where the person in IMAGE (or --person NAME) appears.

    With thresholds (bundled with the model, or from `bench --calibrate`), only confident hits
    (above the identity threshold) are shown; times are h:mm:ss.mmm on the file's timeline, as
    players show them (seconds in JSON). The query photo itself is never a hit. Hits carry their
    tier (same_look, other_look, other_person) and, ranked by appearance, come the same person first,
    same look before other look.
    """
    QueryRequest(**given).run(click.get_current_context().meta.get("started", cli.STARTED))


@dataclass(frozen=True)
class QueryRequest:
    """`query`'s options, as the command line fills them."""

    image: Path | None
    library: Path | None
    k: int
    all_heads: bool
    whole_image: bool
    as_json: bool
    model: str | None
    person: str | None
    min_score: float | None
    show_weak: bool
    videos_only: bool
    photos_only: bool
    under: tuple[Path, ...]
    per_video: bool
    export_clips: Path | None
    pictures: bool
    ranking: str
    with_photo: Path | None
    without_photo: Path | None
    export_to: tuple[Path, ...]
    markers: bool
    handles: float
    order: str

    def check(self) -> None:
        """Usage errors and export targets, before any work."""
        from cli.exporting import check_export_path

        if (self.image is None) == (self.person is None):
            raise click.UsageError("give a photo or --person NAME (one of them)")
        if self.with_photo is not None and self.without_photo is not None:
            raise click.UsageError("--with and --without exclude each other")
        if (self.with_photo or self.without_photo) and self.person is not None:
            raise click.UsageError("--with and --without take a photo, not --person")
        for target in self.export_to:
            check_export_path(target)

    def run(self, started: float) -> None:
        from headsearch.basics.stages import StageClock

        clock = StageClock()
        clock.add("start", started)
        self.check()
        from headsearch.search.starting import start_search  # the models' code: they start loading at once

        service, heads = start_search(library_path(self.library), self.model, clock, self.image, self.all_heads, self.whole_image)
        from headsearch.basics.failures import file_failures
        from headsearch.search.hits import Scope
        from headsearch.search.service import QueryOptions

        scope = Scope(self.videos_only, self.photos_only, tuple(Path(u).expanduser().resolve() for u in self.under))
        if self.person is not None:  # a person's moments are the tracks people put together: all shown, best first, tiered
            answer = service.search_person(self.person, scope, self.pictures)
        else:
            options = QueryOptions(k=self.k, all_heads=self.all_heads, whole_image=self.whole_image, scope=scope, min_score=self.min_score,
                                   show_weak=self.show_weak, ranking=self.ranking, pictures=self.pictures)
            with file_failures(self.image, service.library.root):  # an unexpected error is one line, its traceback in the library's log
                if self.with_photo or self.without_photo:
                    answer = service.search_together(self.image, self.with_photo or self.without_photo, options,
                                                     without=self.without_photo is not None, heads=heads)
                else:
                    answer = service.search_photo(self.image, options, heads=heads)
        if answer.note:
            click.echo(answer.note, err=True)
        largest = answer.results[0].head if answer.results and not self.all_heads and self.person is None else None
        if largest is not None and largest.heads_in_photo > 1:  # on stderr in --json too: its list of hits stays as it is
            click.echo(f"note: {printable(str(self.image))}: {largest.heads_in_photo} heads in this photo; searched the largest "
                       "(--all searches each, numbered left to right)", err=True)
        self.deliver(answer)
        log.info("seconds: %s; in all %.2f s since the command started", clock.summary(), time.perf_counter() - started)
        leave_quickly()

    def deliver(self, answer) -> None:
        """The hits' clips and exports written, the answer said."""
        from cli.exporting import export_answers

        results = answer.results
        if self.export_clips is not None:
            from headsearch.search.clips import export_hit_clips

            export_hit_clips(self.export_clips, [h for r in results for h in r.hits])
        if self.export_to:
            names = ([answer.person.label()] if answer.person is not None else
                     [f"head {r.head.number}" for r in results] if self.all_heads else [Path(self.image).stem])
            export_answers(self.export_to, results, names, self.markers, self.handles, self.order, hint=": narrow the moments with --under FILE")
        _say_answer(results, answer.confidence, self.as_json, self.all_heads, self.per_video)


def _say_answer(results, confidence, as_json: bool, all_heads: bool, per_video: bool) -> None:
    from headsearch.search.hits import no_match_line, results_json, results_text

    if as_json:
        click.echo(json_text(results_json(results, all_heads, per_video)))
        for r in results:
            if not r.hits:
                click.echo(no_match_line(r, confidence), err=True)
    else:
        for line in results_text(results, confidence, all_heads, per_video):
            click.echo(line)

@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@library_option
def remove(paths: tuple[Path, ...], library: Path | None) -> None:
    """Remove files (or everything under folders) from the library."""
    from headsearch.store.library import Library

    lib = Library.open(library_path(library), read_only=False)
    removed, unmatched = lib.remove_paths([Path(p).expanduser().resolve() for p in paths])
    for path in removed:
        click.echo(f"removed {printable(path)}")
    if unmatched:
        raise HeadsearchError(f"not in the library: {', '.join(str(p) for p in unmatched)}")


@main.command()
@library_option
@click.option("--json", "as_json", is_flag=True, help="The counts as one JSON object.")
def stats(library: Path | None, as_json: bool) -> None:
    """What the library holds."""
    from dataclasses import asdict

    from headsearch.store.library import Library

    s = Library.open(library_path(library)).stats()
    if as_json:
        click.echo(json_text(asdict(s)))
        return
    m = s.model
    click.echo(f"library   {s.library}\nmodel     {m['name']} ({m['version']}, {m['dim']}-d, {'+'.join(m['kinds'])})")
    click.echo(f"files     {s.videos} ({s.images} images), {s.video_seconds / 60:.1f} min of video")
    click.echo(f"shots     {s.shots}\ntracks    {s.tracks}\nsightings {s.observations}\nvectors   {s.vectors}")
    click.echo(f"size      {s.bytes / 1e6:.1f} MB")


@main.command("list")
@library_option
@click.option("--json", "as_json", is_flag=True, help="A JSON list of files (of tracks, with --tracks).")
@click.option("--state", "states", multiple=True, type=click.Choice(["indexed", "changed", "missing", "failed"]),
              help="Only files in this state (repeatable).")
@click.option("--tracks", "tracks", is_flag=True,
              help="List the tracks instead: sightings, how many showed a face, how the heads were found.")
def list_files(library: Path | None, as_json: bool, states: tuple[str, ...], tracks: bool) -> None:
    """The files of the library and their state: indexed, changed since (indexed again by the
    next `index`), missing, or failed (skipped until they change; `index --retry-failed`).
    With --tracks, every track: its file and time range, its sightings, `faces` (sightings with a
    visible face), `found_by` (sightings found by their face, by person keypoints, or followed) and
    how it started."""
    from headsearch.basics.timeline import format_time
    from headsearch.store.inventory import file_states
    from headsearch.store.library import Library

    if tracks:
        _list_tracks(Library.open(library_path(library)), as_json)
        return
    rows = [r for r in file_states(Library.open(library_path(library))) if not states or r.state.split(",")[0] in states]
    if as_json:
        click.echo(json_text([r.to_dict() for r in rows]))
        return
    for r in rows:
        what = r.error if r.error else ("photo" if r.kind == "image" else f"video {format_time(r.duration)}")
        tracks = "" if r.error else f"  {r.tracks} track{'s' if r.tracks != 1 else ''}"
        click.echo(f"{r.state:<16} {printable(r.path)}  {printable(what)}{tracks}")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.state] = counts.get(r.state, 0) + 1
    click.echo(f"{counted(len(rows), 'file')}: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) if rows else "no files", err=True)


def _list_tracks(library, as_json: bool) -> None:
    from headsearch.basics.timeline import format_time

    with library.browsing() as b:
        summaries = b.track_summaries()
    if as_json:
        click.echo(json_text([s.to_dict() for s in summaries]))
        return
    for s in summaries:
        found = ", ".join(f"{n} {how}" for how, n in s.found_by.items() if n)
        click.echo(f"track {s.id:<6} {printable(s.video)}  {format_time(s.start)}-{format_time(s.end)}  {counted(s.sightings, 'sighting')}, "
                   f"{s.faces} with a face ({found}); started by {s.started_by}")
    click.echo(f"{counted(len(summaries), 'track')}, {sum(s.faces == 0 for s in summaries)} never showing a face", err=True)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Every spec as JSON.")
def models(as_json: bool) -> None:
    """The models headsearch can load: registered names, and the model files it recognises."""
    from headsearch.models.registry import DEFAULT_MODEL, model_specs

    specs = model_specs()
    if as_json:
        click.echo(json_text([s.to_dict() for s in specs]))
        return
    for s in specs:
        name = f"{s.name} (default)" if s.name == DEFAULT_MODEL else s.name
        dims = ", ".join(f"{k} {d}-d" for k, d in zip(s.kinds, s.dims, strict=True)) if s.dims else "+".join(map(str, s.kinds))
        whole = "whole heads" if s.sees_whole_head else "faces only"
        extra = f"; needs headsearch[{s.extra}]" if s.extra else ""
        shipped = "; thresholds shipped" if s.thresholds else ""
        click.echo(f"{name:<18} {s.summary}")
        click.echo(f"{'':<18} {dims}; {whole}; {s.licence}{extra}{shipped}")


@main.command()
@click.option("--out", type=click.Path(path_type=Path), default=Path("headsearch-demo"), show_default=True, help="Folder for the demo video, query photo and library.")
@click.pass_context
def demo(ctx: click.Context, out: Path) -> None:
    """Make a video from photos that ship with installed packages, index it, and query it."""
    import shlex

    from headsearch.demo import make_demo_video

    video, photo, plan = make_demo_video(out)
    click.echo(f"demo video {video}: " + "; ".join(f"shot {i + 1} (from {2 * i:.0f} s) {p}" for i, p in enumerate(plan)))
    library = out / "library"
    ctx.invoke(index, paths=(video,), library=library, model=None, sample_fps=IndexSettings.sample_fps, progress=False, quiet=True)
    click.echo(f"query {photo} (person 2, cut from the photo at another scale, mirrored and rotated):")
    ctx.invoke(query, image=photo, library=library, k=3, all_heads=False, whole_image=False, as_json=False, model=None)
    lib, q, me = shlex.quote(str(library)), shlex.quote(str(photo)), command_name()
    click.echo("\nwhat to try next:")
    activate = Path(sys.executable).parent / "activate"
    if me != "headsearch" and activate.is_file():
        click.echo(f"  . {shlex.quote(str(activate))}   # puts headsearch on the PATH of this shell (else run it by its path, as below)")
    click.echo(f"  {me} query {q} --library {lib} --json                 # the same hits, for scripts")
    click.echo(f"  {me} query {q} --library {lib} --export-clips clips   # each hit as a playable clip")
    click.echo(f"  {me} index ~/Videos --library {lib}                      # your own videos and photos")
    click.echo(f"  {me} query your-photo.jpg --library {lib} --per-video     # who is where, video by video")
    click.echo(f"  {me} list --library {lib}                                 # what the library holds")


if __name__ == "__main__":
    main()
