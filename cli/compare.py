"""`headsearch compare`: is it still the same person, in the same look? (thin: options, output, exit statuses)."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from cli.options import FiniteFloat, Share, library_option, model_option, progress_option, show_progress
from headsearch.basics.errors import HeadsearchError
from headsearch.basics.json_text import json_text
from headsearch.basics.text import printable

EXIT_GATE = 1  # --fail-under, --fail-under-look: a video's share fell below it
EXIT_SOME_FAILED = 4  # some videos could not be compared (the others were); not 2, click's usage errors
EXIT_NOTHING = 3  # nothing was compared: a reference, the model, or every video could not be read
ORDERED = ("--ref", "--ref-video", "--person", "--name")  # options whose order on the command line groups references


class CompareCommand(click.Command):
    """Keeps the order of --name, --ref, --ref-video and --person on the command line, which groups references."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ordered: list[tuple[str, str]] = []
        cut = args.index("--") if "--" in args else len(args)
        i = 0
        while i < cut:
            a = args[i]
            if a in ORDERED and i + 1 < cut:
                ordered.append((a, args[i + 1]))
                i += 2
                continue
            opt, eq, value = a.partition("=")
            if eq and opt in ORDERED:
                ordered.append((opt, value))
            i += 1
        ctx.meta["references"] = ordered
        return super().parse_args(ctx, args)


def reference_specs(ordered: list[tuple[str, str]]):
    """The references as grouped on the command line: without --name, or with one, every --ref, --ref-video and
    --person is one person; with several, each --name names the references after it, up to the next."""
    from actions.compare import ReferenceSpec

    names = [v for opt, v in ordered if opt == "--name"]
    sources = [(opt, v) for opt, v in ordered if opt != "--name"]
    if len(names) <= 1:
        groups = [ReferenceSpec(names[0] if names else None)]
        entries = sources
    else:
        if ordered and ordered[0][0] != "--name":
            raise click.UsageError("with several --name, give each --name before the references it names")
        groups, entries = [], ordered
    for opt, value in entries:
        if opt == "--name":
            groups.append(ReferenceSpec(value))
            continue
        g = groups[-1]
        {"--ref": g.photos, "--ref-video": g.videos, "--person": g.persons}[opt].append(Path(value) if opt != "--person" else value)
    empty = [g.name for g in groups if g.empty]
    if empty and (len(groups) > 1 or sources):
        raise click.UsageError(f"--name {empty[0]} names no reference (give --ref, --ref-video or --person after it)")
    if not sources:
        raise click.UsageError("give a reference: --ref PHOTO (or a folder of photos), --ref-video CLIP or --person NAME")
    return groups


EPILOG = f"""\b
Exit status:
  0  every video was compared (and, with --fail-under or --fail-under-look, each passed)
  {EXIT_GATE}  --fail-under (--fail-under-look): the same-person (same-look) share of a video fell below it
  2  bad usage
  {EXIT_NOTHING}  nothing was compared: a reference had no head, the model could not load, or no video could be read
  {EXIT_SOME_FAILED}  some videos could not be compared (each said why in one line; the others were)
"""


@click.command("compare", cls=CompareCommand, epilog=EPILOG)
@click.argument("videos", nargs=-1, type=click.Path(path_type=Path))
@click.option("--ref", "refs", multiple=True, metavar="PHOTO", help="A reference photo, or a folder of photos, of the person "
              "(repeatable: several photos of one person make one template).")
@click.option("--ref-video", "ref_videos", multiple=True, metavar="CLIP", help="A reference clip: its main person (repeatable).")
@click.option("--person", "persons", multiple=True, metavar="NAME", help="A person of the library (name or id; see `headsearch people`).")
@click.option("--name", "names", multiple=True, help="Name of the reference person; with several, each --name names the "
              "--ref/--ref-video/--person after it, one person each (every track goes to the best of them, or to nobody).")
@click.option("--cast", "cast_refs", type=click.Path(path_type=Path), default=None, metavar="REFS",
              help="A cast: a folder of folders (one per character, named by it, its photos inside) or a CSV of name,photo. Every "
                   "track goes to one character or to nobody; per character and shot: tier, score and the gap since last seen.")
@click.option("--ref-head", type=click.IntRange(min=1), default=None, help="In reference photos of several heads, this one "
              "(numbered left to right, as `headsearch query PHOTO --all` numbers them).")
@click.option("--whole-image", is_flag=True, help="Reference photos are already head crops (e.g. the back of a head).")
@library_option
@model_option("--model", "-m", prefix="Model", suffix=" (default: the default model; with --person, the library's).")
@click.option("--fps", "fps", type=FiniteFloat(min=0.01), default=None, help="Frames sampled a second (default: the indexer's, 2).")
@click.option("--every-frame", is_flag=True, help="Score every decoded frame (slower).")
@click.option("--min-segment", type=FiniteFloat(min=0.0), default=1.0, show_default=True,
              help="Seconds: shorter runs of one tier join their neighbour within the shot.")
@click.option("--chunk-frames", type=click.IntRange(min=2), default=None, metavar="N",
              help='The clips were generated in chunks of N frames: score each seam (JSON "seams", worst first; drawn on the plot).')
@click.option("--overlap", "chunk_overlap", type=click.IntRange(min=0), default=0, show_default=True, metavar="M",
              help="With --chunk-frames: each chunk overlaps the one before by M frames (the seam: the overlap's middle).")
@click.option("--spec", "spec_file", type=click.Path(path_type=Path, dir_okay=False), default=None, metavar="FILE",
              help="Run with this spec (from --write-spec): its model, bars, sample rate and settings; the same spec on the same clip "
                   "gives the same verdicts.")
@click.option("--write-spec", "write_spec", type=click.Path(path_type=Path, dir_okay=False), default=None, metavar="FILE",
              help="Write the spec in force (the model and its weights' digests, the bars and FAR, the sample rate, every setting that "
                   "changes a verdict) to FILE; without VIDEOS, only that.")
@click.option("--json", "as_json", is_flag=True, help='A JSON list, one entry per video and reference: {"video", "reference", '
              '"verdict", "summary", "segments", "drifts", "shots", "thresholds", "frames"} (docs/guide.md: "Compare").')
@click.option("--no-frames", is_flag=True, help="Leave the per-frame records out of --json.")
@click.option("--report", "report_dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Write an HTML page per video (and for several, index.html and leaderboard.csv) into this folder.")
@click.option("--fail-under", type=Share(), default=None, metavar="SHARE",
              help=f"Exit {EXIT_GATE} when a video's same-person share (of its frames with a head; with --cast, a character's share of its "
                   "frames) is below SHARE: 0.95, or 95%.")
@click.option("--fail-under-look", type=Share(), default=None, metavar="SHARE",
              help=f"Exit {EXIT_GATE} when a video's same-look share (of its frames with a head) is below SHARE: the person in the "
                   "reference's look (hair, glasses, hat).")
@progress_option
@click.pass_context
def compare(ctx: click.Context, videos: tuple[Path, ...], refs, ref_videos, persons, names, cast_refs: Path | None, ref_head: int | None,
            whole_image: bool,
            library: Path | None, model: str | None, fps: float | None, every_frame: bool, min_segment: float,
            chunk_frames: int | None, chunk_overlap: int, spec_file: Path | None, write_spec: Path | None, as_json: bool,
            no_frames: bool, report_dir: Path | None, fail_under: float | None, fail_under_look: float | None,
            progress: bool | None) -> None:
    """Is it still the same person, in the same look? Compare the people in VIDEOS with a reference person.

    Every sampled frame is analysed as `index` analyses it (shots, heads tracked through profiles and turned-away
    frames) and scored against the reference: same_look, other_look (same person, another look), other_person, or
    no_head. Runs of one tier are segments; a fall in tier is a drift event. Nothing is stored.
    """
    from actions.compare import open_comparison
    from headsearch.compare.timeline import CompareSettings

    _check_usage(ctx, bool(videos), fps, every_frame, chunk_frames, chunk_overlap, write_spec, cast_refs)
    spec = _spec(ctx, spec_file)
    specs = _cast_specs(cast_refs) if cast_refs is not None else reference_specs(ctx.meta.get("references", []))
    show = show_progress(progress)
    try:
        session = open_comparison(specs, model=model, library=library if (library is not None or persons) else None,
                                  fps=fps, every_frame=every_frame, ref_head=ref_head,
                                  compare=CompareSettings(min_segment_s=min_segment, chunk_frames=chunk_frames, chunk_overlap=chunk_overlap),
                                  whole_image=whole_image, progress=show, spec=spec)
    except HeadsearchError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_NOTHING)
    in_force = session.spec
    if write_spec is not None:
        in_force.write(write_spec)
        click.echo(f"spec: {write_spec} ({in_force.digest})", err=True)
        if not videos:
            return
    if cast_refs is not None:
        sys.exit(_cast(session, [Path(v) for v in videos], in_force.digest, as_json, no_frames, report_dir, fail_under, fail_under_look))
    done, failed = _run(session, [Path(v) for v in videos], as_json)
    _say_compared(done, failed, session.comparer.entry, as_json, no_frames, report_dir)
    sys.exit(_exit_status(done, failed, fail_under, fail_under_look))


def _check_usage(ctx: click.Context, videos: bool, fps: float | None, every_frame: bool, chunk_frames: int | None, chunk_overlap: int,
                 write_spec: Path | None, cast_refs: Path | None) -> None:
    if not videos and write_spec is None:
        raise click.UsageError("give one or more videos to compare")
    if fps is not None and every_frame:
        raise click.UsageError("--fps and --every-frame exclude each other")
    if chunk_overlap and not chunk_frames:
        raise click.UsageError("--overlap goes with --chunk-frames")
    if chunk_frames is not None and chunk_overlap >= chunk_frames:
        raise click.UsageError(f"--overlap {chunk_overlap} must be under --chunk-frames {chunk_frames}")
    if cast_refs is not None and ctx.meta.get("references"):
        raise click.UsageError("--cast names the characters: leave out --ref, --ref-video, --person and --name")


def _say_compared(done: list, failed: list[tuple[str, str]], entry, as_json: bool, no_frames: bool, report_dir: Path | None) -> None:
    """The comparisons as JSON, or (the text was said as each was done) a table of several; the report."""
    from headsearch.compare.report import table_lines, write_report

    if as_json:
        out = [entry(c, frames=not no_frames) for c in done] + [{"video": v, "error": e} for v, e in failed]
        click.echo(json_text(out))
    elif len(done) > 1:
        click.echo("")
        for line in table_lines(done):
            click.echo(line)
    if report_dir is not None and done:
        click.echo(f"report: {write_report(report_dir, done, failed)}", err=True)


def _cast_specs(path: Path):
    """The characters of a cast as references, one each."""
    from actions.compare import ReferenceSpec
    from headsearch.compare.cast import read_cast

    try:
        return [ReferenceSpec(c.name, list(c.photos)) for c in read_cast(path)]
    except HeadsearchError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_NOTHING)


def _cast(session, videos: list[Path], digest: str, as_json: bool, no_frames: bool, report_dir: Path | None,
          fail_under: float | None, fail_under_look: float | None) -> int:
    """Cast mode: each video in turn, then the cast's summary (text or JSON), its report, its gates; the exit status."""
    from headsearch.basics.files import write_bytes_atomic
    from headsearch.compare.cast import CastRun, cast_page, gate_lines

    casts, failed = [], []
    for item in session.run(videos, cast=True):
        if item.error:
            click.echo(f"error: {item.error}", err=True)
            failed.append((str(item.path), item.error))
        else:
            casts.append(item.cast)
    run = CastRun([r.name for r in session.references], casts)
    if as_json:
        click.echo(json_text([{**entry, "spec": digest} for entry in run.to_json(frames=not no_frames)]
                             + [{"video": v, "error": e} for v, e in failed]))
    else:
        for line in run.text_lines():
            click.echo(printable(line))
    if report_dir is not None and casts:
        try:
            report_dir.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(report_dir / "cast.csv", run.csv_text().encode())
            write_bytes_atomic(report_dir / "cast.html", cast_page(run).encode())
        except OSError as e:
            raise HeadsearchError(f"{report_dir}: cannot write the cast report ({e.strerror or e})") from e
        click.echo(f"report: {report_dir / 'cast.html'}", err=True)
    if not casts:
        return EXIT_NOTHING
    gates = gate_lines(run, fail_under, fail_under_look)
    for line in gates:
        click.echo(printable(line), err=True)
    return EXIT_GATE if gates else EXIT_SOME_FAILED if failed else 0


SPEC_DECIDES = ("model", "fps", "every_frame", "min_segment", "chunk_frames", "chunk_overlap")


def _spec(ctx: click.Context, path: Path | None):
    """The spec of --spec (None without one); a usage error where an option would change what the spec decides."""
    if path is None:
        return None
    from headsearch.compare.spec import CompareSpec

    given = [name for name in SPEC_DECIDES if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE]
    if given:
        raise click.UsageError(f"--spec decides the model, the bars, the sample rate and the settings: leave out "
                               f"{', '.join('--' + n.replace('_', '-').replace('chunk-overlap', 'overlap') for n in given)}")
    try:
        return CompareSpec.read(path)
    except HeadsearchError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_NOTHING)


def _run(session, videos: list[Path], as_json: bool) -> tuple[list, list[tuple[str, str]]]:
    """Each video compared, its text shown as it is done (unless JSON is asked); the comparisons and the failures."""
    from headsearch.compare.report import text_lines

    done, failed = [], []
    for item in session.run(videos):
        if item.error:
            click.echo(f"error: {item.error}", err=True)
            failed.append((str(item.path), item.error))
            continue
        done += item.comparisons
        if not as_json:
            for c in item.comparisons:
                for line in text_lines(c):
                    click.echo(line)
    return done, failed


def _exit_status(done: list, failed: list, fail_under: float | None, fail_under_look: float | None = None) -> int:
    """The gate's line for each video under --fail-under or --fail-under-look, and the exit status (the command's epilog)."""
    if not done:
        return EXIT_NOTHING
    below = False
    for c in done:
        for bar, share, what, flag in ((fail_under, c.same_person_share, "same person", "--fail-under"),
                                       (fail_under_look, c.same_look_share, "same look", "--fail-under-look")):
            if bar is not None and share < bar:
                below = True
                click.echo(f"gate: {printable(c.video)} vs {printable(c.reference.name)}: {what} on {100 * share:.1f}% of its head "
                           f"frames, under {flag} {100 * bar:g}%", err=True)
    if below:
        return EXIT_GATE
    return EXIT_SOME_FAILED if failed else 0
