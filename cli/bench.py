"""`headsearch bench`: accuracy on a labelled set (and threshold calibration), indexing and search speed, people,
head boxes.

Each subcommand parses its options into the options dataclass of its benchmark, runs it through one
call into `bench/`, and prints the result object with `bench.report` (or as JSON). A new benchmark is
one more `@bench.command()` function.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from cli.options import EXIT_PARTIAL, FiniteFloat, library_option, library_path
from headsearch.basics.errors import HeadsearchError
from headsearch.basics.json_text import json_text
from headsearch.basics.settings import IndexSettings

OLD_SPEED_FLAG = "--speed"


class BenchGroup(click.Group):
    """Subcommands, and the spellings from before them: `bench SET ...` is `bench accuracy SET ...`,
    `bench --speed ...` is `bench speed ...`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = self.old_spelling(ctx, args)
        return super().parse_args(ctx, args)

    def old_spelling(self, ctx: click.Context, args: list[str]) -> list[str]:
        """The arguments of the subcommand an old-style `bench` command line means."""
        cut = args.index("--") if "--" in args else len(args)
        if OLD_SPEED_FLAG not in args[:cut]:
            return ["accuracy", *args]
        rest = [a for i, a in enumerate(args) if not (i < cut and a == OLD_SPEED_FLAG)]
        if self.positional_arguments(rest):
            raise click.UsageError("a labelled SET and --speed are two benchmarks now: run `headsearch bench accuracy SET "
                                   "[OPTIONS]` and `headsearch bench speed [OPTIONS]` one after the other", ctx)
        return ["speed", *rest]

    def positional_arguments(self, args: list[str]) -> list[str]:
        """The words of `args` that are neither options nor option values (by the options of accuracy and speed)."""
        takes_value = {name for command in (self.commands["accuracy"], self.commands["speed"]) for p in command.params
                       if isinstance(p, click.Option) and not p.is_flag and not p.count for name in p.opts}
        words, skip = [], False
        for i, a in enumerate(args):
            if a == "--":
                return words + args[i + 1:]
            if skip:
                skip = False
            elif a.startswith("-") and len(a) > 1:
                skip = a in takes_value
            else:
                words.append(a)
        return words


@click.group(cls=BenchGroup)
def bench() -> None:
    """Benchmarks: accuracy on a labelled set (and the thresholds it calibrates), indexing and search speed,
    and how well `headsearch people` groups a library.

    \b
    The spellings from before the subcommands still work:
      headsearch bench SET [OPTIONS]      is  headsearch bench accuracy SET [OPTIONS]
      headsearch bench --speed [OPTIONS]  is  headsearch bench speed [OPTIONS]
    """


def quiet_option(f: Callable) -> Callable:
    return click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")(f)


def json_option(f: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable results on stdout.")(f)


def fps_option(f: Callable) -> Callable:
    return click.option("--fps", "sample_fps", type=FiniteFloat(min=0.01), default=IndexSettings.sample_fps, show_default=True,
                        help="Frames sampled per second in videos.")(f)


def _far(ctx, param, value):
    if value is not None and not 0.0 < value < 1.0:
        raise click.BadParameter(f"a false accept rate in (0, 1) is expected, got {value:g}")
    return value


def _say(quiet: bool) -> Callable[[str], None] | None:
    """Progress lines to stderr, or none."""
    return None if quiet else (lambda m: click.echo(m, err=True))


def _warn(line: str) -> None:
    click.echo(line, err=True)


def _show(data: Any, text: str, as_json: bool) -> None:
    click.echo(json_text(data) if as_json else text)


@bench.command()
@click.argument("set_csv", metavar="SET", type=click.Path(path_type=Path))
@click.option("--model", "-m", "models", multiple=True, help="Model to benchmark (repeat for several; default: the default model).")
@click.option("--root", type=click.Path(path_type=Path), default=None,
              help="Folder the set's relative paths start from (default: the CSV's folder; a `source` column adds a subfolder).")
@click.option("--whole-image", is_flag=True, help="Photos are already head crops: use the whole image, not the largest head.")
@fps_option
@json_option
@click.option("--plot", type=click.Path(path_type=Path), default=None, help="Write ROC curves (log FAR) of all models to this PNG.")
@click.option("--calibrate", type=FiniteFloat(), default=None, metavar="FAR", callback=_far,
              help="Write <library>/thresholds.json: exact thresholds at this FAR for the library's model.")
@click.option("--thresholds-out", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="With --calibrate: write the first model's thresholds to this file instead of a library's (thresholds "
                   "bundled with a model: <model file>.thresholds.json).")
@library_option
@quiet_option
def accuracy(set_csv: Path, as_json: bool, plot: Path | None, quiet: bool, **given: Any) -> None:
    """Accuracy of models on a labelled SET; calibrated thresholds.

    Verification rate at FAR 1e-2/1e-3/1e-4, AUC, ROC (--plot) and hierarchy accuracy of each
    --model; --calibrate FAR writes the thresholds `query` and `people` use. SET is a CSV with columns path,identity[,appearance_state] (paths relative to the CSV, or
    absolute). Rows naming several people (a;b) or a group/crowd are skipped. Photos give their
    largest head, one-person videos their longest head track. All pairs are scored on two
    protocols: head similarity (same identity and look vs the rest) and identity verification.
    Exit 2 when some files failed and the models were measured on the others.
    """
    from bench.accuracy import AccuracyOptions, bench_accuracy
    from bench.report import accuracy_text, plot_roc

    if given["thresholds_out"] is not None and given["calibrate"] is None:
        raise click.UsageError("--thresholds-out needs --calibrate FAR")
    options = AccuracyOptions(set_csv, models=given["models"], root=given["root"], whole_image=given["whole_image"],
                              settings=IndexSettings.from_env(sample_fps=given["sample_fps"]), calibrate=given["calibrate"],
                              thresholds_out=given["thresholds_out"], library=library_path(given["library"]))
    run = bench_accuracy(options, report=_warn, progress=_say(quiet))
    for problem in run.problems:
        _warn(f"warning: {problem}")
    roc = None
    if plot is not None:
        roc = plot_roc(run, plot)
        if roc is None:
            _warn(f"warning: no ROC curve to plot in {plot}: nothing was measured")
    _show(run.to_dict(), accuracy_text(run, roc), as_json)
    if run.errors:
        raise run.errors[0]  # after the results: what was measured is shown
    if run.partial:
        sys.exit(EXIT_PARTIAL)  # measured on the others; each failed file had its line


@bench.command()
@click.option("--video", type=click.Path(path_type=Path), default=None, help="Video for the indexing speed benchmark.")
@click.option("--only", type=click.Choice(["indexing", "search", "query"]), default=None,
              help="Run only the indexing, the search or the cold-query benchmark (query: needs --video and --photo).")
@click.option("--photo", type=click.Path(path_type=Path), default=None,
              help="Cold query: time `headsearch query PHOTO -k 3` as fresh processes on a library of --video alone, beside a bare "
                   "`python -c \"import onnxruntime, cv2, numpy\"` (runs with --only query, or beside the others when given).")
@click.option("--model", "-m", default=None, help="Model that indexes the video (default: the default model).")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="Indexing: run it this many times, each with its own decode-only run, and show the run with the median ratio "
                   "(a machine's speed moves between runs).")
@fps_option
@click.option("--sizes", default="1e4,1e5,1e6", show_default=True, help="Stored vector counts for the search benchmark.")
@click.option("--index", "index_names", default="flat,ivf", show_default=True,
              help="Indexes the search benchmark measures: flat (exact), ivf (the library's in-memory approximate recipe), "
                   "hnsw, ivfpq-ondisk (a stand-alone IVF-PQ with on-disk lists and exact re-ranking), library (the library's "
                   "own store past memory: on-disk IVF-PQ segments built and searched as a library does, nprobe tuned by it).")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for ivfpq-ondisk's and library's vectors, ground truth and indexes (5.1 GB of vectors at 1e7 x 128-d, "
                   "as much again for the library's store), kept so a rerun resumes; default: a temporary folder removed afterwards.")
@click.option("--nlist", type=click.IntRange(min=1), default=None,
              help="ivfpq-ondisk: inverted lists (default ~4 sqrt(n), as the library's IVF).")
@click.option("--nprobe", default=None, metavar="N[,N...]",
              help="ivfpq-ondisk: inverted lists searched per query, one result per value (default 2048).")
@click.option("--rerank", type=click.IntRange(min=0), default=None, help="ivfpq-ondisk: shortlist re-ranked exactly from the raw vectors (0: none; default 100).")
@click.option("--pq-bytes", type=click.Choice(["8", "16", "32", "64"]), default=None, help="ivfpq-ondisk: bytes per PQ code (default 32).")
@click.option("--dim", type=click.IntRange(min=2), default=128, show_default=True, help="Dimension of the synthetic vectors.")
@click.option("--queries", type=click.IntRange(min=10), default=1000, show_default=True, help="Queries per size (latency over the first 200).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the synthetic vectors.")
@json_option
@quiet_option
def speed(video: Path | None, only: str | None, photo: Path | None, as_json: bool, quiet: bool, **given: Any) -> None:
    """Indexing speed on a video; search speed at scale; a cold query.

    Indexing and search run unless --only names one. Indexing: the video is indexed into a temporary library, each stage
    (decode, shots, detect, track, embed, store) timed next to the decode-only bound. Search: p50/p95 latency, batch
    speed, recall@10 against exact search, memory and build time of each --index at each of --sizes. Cold query (--photo):
    the median of --repeat fresh `query PHOTO -k 3` processes (5 or more give a steady median) against the median bare import,
    with the median query's stages.
    """
    from bench.report import speed_text
    from bench.speed import SpeedOptions, bench_speed

    if only == "query" and photo is None:
        raise click.UsageError("the cold-query benchmark needs a photo: pass --photo PATH")
    if only != "search" and video is None:
        raise click.UsageError("the indexing and cold-query benchmarks need a video: pass --video PATH (or --only search)")
    options = SpeedOptions(video=None if only == "search" else video, search=None if only in ("indexing", "query") else _search_plan(given),
                           model=given["model"], settings=IndexSettings.from_env(sample_fps=given["sample_fps"]), repeat=given["repeat"],
                           query_photo=photo if only in (None, "query") else None, index_video=only != "query")
    run = bench_speed(options, report=_warn, progress=_say(quiet))
    _show(run.to_dict(), speed_text(run), as_json)


def _search_plan(given: dict[str, Any]):
    """The search benchmark's plan from `bench speed`'s options."""
    from bench.ondisk import OnDiskRecipe
    from bench.search import SearchPlan, parse_indexes, parse_sizes

    recipe = {"nlist": given["nlist"]}
    if given["nprobe"] is not None:
        try:
            recipe["nprobe"] = tuple(parse_sizes(given["nprobe"]))
        except HeadsearchError:
            raise click.BadParameter(f"{given['nprobe']!r}: give whole numbers, e.g. 128,256", param_hint="--nprobe") from None
    if given["rerank"] is not None:
        recipe["rerank"] = given["rerank"]
    if given["pq_bytes"] is not None:
        recipe["pq_bytes"] = int(given["pq_bytes"])
    return SearchPlan(sizes=tuple(parse_sizes(given["sizes"])), indexes=parse_indexes(given["index_names"]), dim=given["dim"],
                      queries=given["queries"], seed=given["seed"], recipe=OnDiskRecipe(**recipe), work_dir=given["work_dir"])


@bench.command()
@library_option
@click.argument("label_sets", metavar="LABELS.csv...", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--sweep", default=None, metavar="T[,T...]",
              help="Identity thresholds to group copies of the library at, each from no people (the library is left as it is).")
@json_option
def people(library: Path | None, label_sets: tuple[Path, ...], sweep: str | None, as_json: bool) -> None:
    """How well `headsearch people` groups a library.

    Pairwise precision, recall and F1 of the library's people against labelled identities. Each LABELS.csv (path,identity[,appearance_state]) names files of the library: a labelled photo
    counts its largest head's track, a video labelled with one identity every track in it. The
    library's people are brought up to date first, as `index` does; --sweep groups copies instead.
    """
    from bench.people import PeopleOptions, bench_people, people_text

    try:
        thresholds = tuple(float(t) for t in sweep.split(",") if t.strip()) if sweep else ()
    except ValueError:
        raise click.BadParameter(f"{sweep!r}: give numbers, e.g. 0.90,0.92", param_hint="--sweep") from None
    run = bench_people(PeopleOptions(library_path(library), label_sets, thresholds))
    _show(run.rows, people_text(run), as_json)


@bench.command()
@click.argument("set_csv", metavar="SET", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder the set's relative file paths start from (default: the CSV's folder; bench/sets/heads.csv: ../shared/data).")
@click.option("--method", "methods", multiple=True, type=click.Choice(["faces", "indexer-faces", "indexer"]),
              help="Measure only this method (repeatable; default: all three).")
@click.option("--iou", type=FiniteFloat(0.05, 1.0), default=0.5, show_default=True, help="IoU a found head needs with a labelled one.")
@fps_option
@json_option
@quiet_option
def heads(set_csv: Path, root: Path | None, methods: tuple[str, ...], iou: float, sample_fps: float, as_json: bool, quiet: bool) -> None:
    """Head boxes against a labelled SET: recall by view (face, profile, back) and precision.

    SET is a CSV file,time,x1,y1,x2,y2,view[,ignore] (bench/sets/README.md). Methods: faces (RetinaFace on each
    labelled frame alone), indexer-faces (the indexer without the keypoint head finder), indexer (the indexer's own
    analysis: faces, keypoint heads, tracking, evidence; the sightings it stores at the labelled times).
    """
    from bench.heads import METHODS, HeadsOptions, bench_heads
    from bench.report import heads_text

    options = HeadsOptions(set_csv, root=root, settings=IndexSettings.from_env(sample_fps=sample_fps),
                           methods=tuple(dict.fromkeys(methods)) or METHODS, iou=iou)
    run = bench_heads(options, report=_warn, progress=_say(quiet))
    _show(run.to_dict(), heads_text(run), as_json)
    if run.failed:
        sys.exit(EXIT_PARTIAL)


@bench.command("compare")
@click.argument("sets", metavar="SET...", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--model", "-m", default=None, help="Model to measure (default: the default model).")
@click.option("--joins", type=click.IntRange(min=0), default=3, show_default=True, help="Clips of two people joined into one, to find the change.")
@click.option("--still-at", type=FiniteFloat(min=0.0), default=0.5, show_default=True,
              help="Seconds into a clip for its own still, where its person has no photo and no other clip.")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=None, help="Folder for the joined clips (default: temporary).")
@click.option("--speed-video", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="A video timed with compare's analysis and with the indexer's (default: the labelled clip nearest 10 s).")
@click.option("--noise-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The model's thresholds file: write into it how much a frame's scores wander in the own clips (drift events are held to it).")
@fps_option
@json_option
@quiet_option
def compare_bench(sets: tuple[Path, ...], model: str | None, joins: int, still_at: float, work_dir: Path | None,
                  speed_video: Path | None, noise_out: Path | None, sample_fps: float, as_json: bool, quiet: bool) -> None:
    """`compare` on the labelled one-person clips of SETs: each clip against its own person (same-person share, drift
    events, the FaceSim-style number) and against every other person (other-person share), and joined clips of two
    people (where the change is reported against the join)."""
    from bench.compare import CompareBenchOptions, bench_compare
    from bench.report import compare_text

    options = CompareBenchOptions(sets, model=model, joins=joins, still_at=still_at, work_dir=work_dir,
                                  settings=IndexSettings.from_env(sample_fps=sample_fps), noise_out=noise_out, speed_video=speed_video)
    run = bench_compare(options, report=_warn, progress=_say(quiet))
    _show(run.to_dict(), compare_text(run), as_json)
    if run.failed:
        sys.exit(EXIT_PARTIAL)


@bench.command("redact")
@click.argument("set_csv", metavar="SET", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder the set's relative file paths start from (default: the CSV's folder; bench/sets/heads.csv: ../shared/data).")
@click.option("--tool", "tools", multiple=True, type=click.Choice(["headsearch", "deface"]),
              help="Measure only this tool (repeatable; default: both; deface comes with the `bench` extra).")
@click.option("--style", type=click.Choice(["blur", "pixelate", "box"]), default="blur", show_default=True, help="headsearch's style.")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Keep the redacted videos in this folder (default: a temporary one, removed after).")
@click.option("--library", "-l", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="A presence SET: index its videos into this library and keep it (default: a temporary one).")
@json_option
@quiet_option
def redact_bench(set_csv: Path, root: Path | None, tools: tuple[str, ...], style: str, work_dir: Path | None,
                 library: Path | None, as_json: bool, quiet: bool) -> None:
    """Redaction against a labelled head SET: the share of labelled heads hidden by view (face, profile, back) and of
    the picture hidden outside them, judged from the pixels alone, for `headsearch redact --everyone` and for deface
    (a face-only redactor) on the same videos. SET is a CSV file,time,x1,y1,x2,y2,view[,ignore].

    A presence SET (person,file,first_frame,last_frame,view,..., bench/sets/presence.csv) gives each person's leak rate
    instead: the frames their head is on screen and not hidden by `redact --ref THEIR_REFERENCE`, by view and pooled."""
    from bench.leaks import bench_leaks, is_presence_set
    from bench.redact import TOOLS, RedactOptions, bench_redact

    if is_presence_set(set_csv):
        if "deface" in tools:
            raise click.UsageError("a presence set measures `redact --ref` (deface cannot choose a person): leave out --tool deface")
        leaks = bench_leaks(set_csv, root, style, work_dir, library, settings=IndexSettings.from_env(),
                            report=_say(quiet) or (lambda line: None))
        _show(leaks.to_dict(), leaks.text(), as_json)
        return
    if library is not None:
        raise click.UsageError("--library is for a presence set only")
    run = bench_redact(RedactOptions(set_csv, root, tuple(dict.fromkeys(tools)) or TOOLS, style, work_dir),
                       report=_say(quiet) or (lambda line: None))
    _show(run.to_dict(), run.text(), as_json)
    if any(r.error for r in run.results):
        sys.exit(EXIT_PARTIAL)


@bench.command("presence")
@click.argument("set_csv", metavar="SET", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder the set's relative file paths start from (default: the CSV's folder; bench/sets/presence.csv: ../shared/data).")
@click.option("--model", "-m", default=None, help="Model to index with (default: the library's, else the default model).")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a PNG: per person and video, the on-screen frames by view against what the query and the tracks claim.")
@fps_option
@click.option("--library", "-l", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Index the set's videos into this library and keep it (default: a temporary one, removed after).")
@json_option
@quiet_option
def presence_bench(set_csv: Path, root: Path | None, model: str | None, plot: Path | None, sample_fps: float, library: Path | None,
                   as_json: bool, quiet: bool) -> None:
    """How much of each person's time on screen, facing any way, a query with their photo finds and `redact --ref` hides.

    SET is a CSV person,file,first_frame,last_frame,view,reference,ref_time,ref_box[,centres] (bench/sets/README.md).
    Its videos are indexed into a temporary library (or into --library, kept); per person and by view (front, profile,
    back): coverage by the query's confident hits and by the redaction's tracks, false coverage, and pieces per shot."""
    from bench.presence import PresenceOptions, bench_presence
    from bench.report import plot_presence, presence_text

    options = PresenceOptions(set_csv, root, library, model,
                              IndexSettings.from_env(sample_fps=sample_fps))
    run = bench_presence(options, progress=_say(quiet))
    if plot is not None:
        _warn(f"wrote {plot_presence(run, plot)}")
    _show(run.to_dict(), presence_text(run), as_json)
