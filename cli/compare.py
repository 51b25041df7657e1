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
    """Keeps the order of --name, --ref, --ref-video and --person on the command line, which groups references.

    Click gathers each repeated option's values on their own, so the order between options is lost by the time the
    command runs; its parser records it (one entry per occurrence), so the command line is read once more by click's
    own parser for that order, rather than scanned by hand."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        opts, _, order = self.make_parser(ctx).parse_args(args=list(args))
        values = {p.name: list(opts.get(p.name) or ()) for p in self.params if isinstance(p, click.Option) and p.opts[0] in ORDERED}
        ctx.meta["references"] = [(p.opts[0], values[p.name].pop(0)) for p in order if p.name in values]
        return super().parse_args(ctx, args)


def reference_specs(ordered: list[tuple[str, str]]):
    """The references as grouped on the command line: without --name, or with one, every --ref, --ref-video and
    --person is one person; with several, each --name names the references after it, up to the next."""
    from actions.requests import ReferenceSpec

    names = [v for opt, v in ordered if opt == "--name"]
    sources = [(opt, v) for opt, v in ordered if opt != "--name"]
    if len(names) <= 1:
        groups: list[tuple[str | None, dict[str, list]]] = [(names[0] if names else None, {})]
        entries = sources
    else:
        if ordered and ordered[0][0] != "--name":
            raise click.UsageError("with several --name, give each --name before the references it names")
        groups, entries = [], ordered
    for opt, value in entries:
        if opt == "--name":
            groups.append((value, {}))
            continue
        groups[-1][1].setdefault(opt, []).append(Path(value) if opt != "--person" else value)
    specs = [ReferenceSpec(name, tuple(got.get("--ref", ())), tuple(got.get("--ref-video", ())), tuple(got.get("--person", ())))
             for name, got in groups]
    empty = [g.name for g in specs if g.empty]
    if empty and (len(specs) > 1 or sources):
        raise click.UsageError(f"--name {empty[0]} names no reference (give --ref, --ref-video or --person after it)")
    if not sources:
        raise click.UsageError("give a reference: --ref PHOTO (or a folder of photos), --ref-video CLIP or --person NAME")
    return specs


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
# Their values are read in command-line order (`CompareCommand`), not as click passes them: not given to the function.
@click.option("--ref", "refs", multiple=True, expose_value=False, metavar="PHOTO",
              help="A reference photo, or a folder of photos, of the person (repeatable: several photos of one person make one template).")
@click.option("--ref-video", "ref_videos", multiple=True, expose_value=False, metavar="CLIP",
              help="A reference clip: its main person (repeatable).")
@click.option("--person", "persons", multiple=True, expose_value=False, metavar="NAME",
              help="A person of the library (name or id; see `headsearch people`).")
@click.option("--name", "names", multiple=True, expose_value=False, help="Name of the reference person; with several, each --name "
              "names the --ref/--ref-video/--person after it, one person each (every track goes to the best of them, or to nobody).")
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
def compare(ctx: click.Context, videos: tuple[Path, ...], cast_refs: Path | None, ref_head: int | None, whole_image: bool,
            library: Path | None, model: str | None, fps: float | None, every_frame: bool, min_segment: float,
            chunk_frames: int | None, chunk_overlap: int, spec_file: Path | None, write_spec: Path | None, as_json: bool,
            no_frames: bool, report_dir: Path | None, fail_under: float | None, fail_under_look: float | None,
            progress: bool | None) -> None:
    """Is it still the same person, in the same look? Compare the people in VIDEOS with a reference person.

    Every sampled frame is analysed as `index` analyses it (shots, heads tracked through profiles and turned-away
    frames) and scored against the reference: same_look, other_look (same person, another look), other_person, or
    no_head. Runs of one tier are segments; a fall in tier is a drift event. Nothing is stored.
    """
    from actions.requests import CompareRequest

    _check_usage(ctx, bool(videos), fps, every_frame, chunk_frames, chunk_overlap, write_spec, cast_refs)
    spec = _spec(ctx, spec_file)
    references = _cast_specs(cast_refs) if cast_refs is not None else reference_specs(ctx.meta.get("references", []))
    request = CompareRequest(tuple(Path(v) for v in videos), tuple(references), library, model, fps, every_frame, min_segment,
                             chunk_frames, chunk_overlap, ref_head, whole_image, spec)
    show = show_progress(progress)
    session = _open(request, show)
    in_force = session.spec
    if write_spec is not None:
        in_force.write(write_spec)
        click.echo(f"spec: {write_spec} ({in_force.digest})", err=True)
        if not videos:
            return
    if cast_refs is not None:
        sys.exit(_cast(session, request, show, as_json, no_frames, report_dir, fail_under, fail_under_look))
    result = _follow(show, lambda bar, started: session.compare(request.videos, bar, started, lambda item: _said(item, as_json)))
    _say_compared(result, as_json, no_frames, report_dir)
    sys.exit(_exit_status(result, fail_under, fail_under_look))


def _open(request, show: bool):
    """The comparison opened (the model, its bars, the references made), a reference clip's analysis followed on a
    progress bar; nothing compared (exit EXIT_NOTHING) when any of it cannot be done."""
    from tqdm import tqdm

    from actions.compare import open_comparison

    try:
        bar = tqdm(desc="reference", unit="frame", disable=not show, leave=False)
        try:
            return open_comparison(request, progress=bar)
        finally:
            bar.close()
    except HeadsearchError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_NOTHING)


def _follow(show: bool, work):
    """`work(bar, started)` with a progress bar of frames named after the video being done."""
    from tqdm import tqdm

    bar = tqdm(desc="frames", unit="frame", disable=not show, leave=False)

    def started(path: Path) -> None:
        bar.set_description(Path(path).name[:40])

    try:
        return work(bar, started)
    finally:
        bar.close()


def _said(item, as_json: bool, cast: bool = False) -> None:
    """A video's outcome as it is done: its one line when it failed; its comparisons as text (unless JSON is asked)."""
    from headsearch.compare.report import text_lines

    if item.error:
        click.echo(f"error: {item.error}", err=True)
    elif not as_json and not cast:
        for c in item.comparisons:
            for line in text_lines(c):
                click.echo(line)


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


def _say_compared(result, as_json: bool, no_frames: bool, report_dir: Path | None) -> None:
    """The comparisons as JSON, or (the text was said as each was done) a table of several; the report."""
    from headsearch.compare.report import table_lines

    if as_json:
        click.echo(json_text(result.to_json(frames=not no_frames)))
    elif len(result.comparisons) > 1:
        click.echo("")
        for line in table_lines(result.comparisons):
            click.echo(line)
    if report_dir is not None and result.comparisons:
        click.echo(f"report: {result.write_report(report_dir)}", err=True)


def _cast_specs(path: Path):
    """The characters of a cast as references, one each."""
    from actions.requests import ReferenceSpec
    from headsearch.compare.cast import read_cast

    try:
        return [ReferenceSpec(c.name, tuple(c.photos)) for c in read_cast(path)]
    except HeadsearchError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_NOTHING)


def _cast(session, request, show: bool, as_json: bool, no_frames: bool, report_dir: Path | None, fail_under: float | None,
          fail_under_look: float | None) -> int:
    """Cast mode: each video in turn, then the cast's summary (text or JSON), its report, its gates; the exit status."""
    result = _follow(show, lambda bar, started: session.cast(request.videos, bar, started, lambda item: _said(item, as_json, cast=True)))
    if as_json:
        click.echo(json_text(result.to_json(frames=not no_frames)))
    else:
        for line in result.run.text_lines():
            click.echo(printable(line))
    if report_dir is not None and result.run.videos:
        click.echo(f"report: {result.write_report(report_dir)}", err=True)
    if not result.run.videos:
        return EXIT_NOTHING
    gates = result.gate_lines(fail_under, fail_under_look)
    for line in gates:
        click.echo(printable(line), err=True)
    return EXIT_GATE if gates else EXIT_SOME_FAILED if result.failed else 0


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


def _exit_status(result, fail_under: float | None, fail_under_look: float | None = None) -> int:
    """The gate's line for each video under --fail-under or --fail-under-look, and the exit status (the command's epilog)."""
    if not result.comparisons:
        return EXIT_NOTHING
    gates = result.gate_lines(fail_under, fail_under_look)
    for line in gates:
        click.echo(line, err=True)
    return EXIT_GATE if gates else EXIT_SOME_FAILED if result.failed else 0
