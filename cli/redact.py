"""`headsearch redact`: hide people's heads in every frame of a video (thin: options, progress, the summary line)."""
from __future__ import annotations

from pathlib import Path

import click

from cli.options import EXIT_FACES_LEFT, FiniteFloat, library_path, model_option, progress_option, show_progress
from headsearch.basics.errors import HeadsearchError
from headsearch.basics.text import printable
from schemas.records import RedactStyle


@click.command("redact")
@click.argument("video", type=click.Path(path_type=Path))
@click.option("--out", "-o", "out", type=click.Path(path_type=Path), required=True,
              help="The redacted video to write: .mp4, .m4v, .mov or .mkv, in an existing folder, never the source, and not "
                   "there already (unless --force). Its audit trail goes beside it: OUT.redactions.json, every hidden box of "
                   "every frame.")
@click.option("--person", default=None, metavar="NAME|ID", help="Hide this person of the library (see `headsearch people`).")
@click.option("--ref", "refs", multiple=True, type=click.Path(path_type=Path), metavar="PHOTO",
              help="Hide the person in this photo (repeatable, or a folder: several photos of one person make one template).")
@click.option("--whole-image", is_flag=True, help="Each --ref (or --all-except) photo is already the head crop, e.g. the back "
              "of a head, as `query --whole-image` takes it.")
@click.option("--all-except", "spare", multiple=True, metavar="NAME|PHOTO",
              help="Hide everyone but this person (a person of the library, or a photo of one; repeatable, one person each).")
@click.option("--everyone", is_flag=True, help="Hide every head.")
@click.option("--allow-none", is_flag=True, help="With --person or --ref: when nobody in the video is that person, write it "
              "unchanged and exit 0 (without it: an error, and nothing is written).")
@click.option("--force", is_flag=True, help="Replace an output (and its audit trail) that is there already.")
@click.option("--style", type=click.Choice([s.value for s in RedactStyle]), default="blur", show_default=True,
              help="How a head is hidden: a strong blur, large blocks, or a black box.")
@click.option("--margin", type=FiniteFloat(0.0, 4.0), default=0.2, show_default=True,
              help="Share of the head box added around it, half on each side (0.2: a fifth of its width and height).")
@click.option("--preview", "preview", type=click.Path(path_type=Path, file_okay=False), default=None, metavar="DIR",
              help="Also write a contact sheet of output frames with the boxes drawn, to check before publishing: "
                   "DIR/OUT-NAME.redactions.png.")
@click.option("--verify", is_flag=True, help="When written, look at every frame of the output again with the most sensitive "
              f"face detector the redactor has; every face still found is listed (frame, time, box, score) and shown in "
              f"OUT.verify.png, and the exit status is {EXIT_FACES_LEFT} (the output is kept, to look at). It does not tell people "
              "apart: with --person, --ref or --all-except the faces of those left in view are listed too. A detection on a "
              "hidden patch itself (its detail not the source's) is set aside, and said.")
@click.option("--library", "-l", type=click.Path(path_type=Path), default=None, envvar="HEADSEARCH_LIBRARY",
              help="A library: its people (--person, --all-except NAME) and its analysis of the video where it holds it "
                   "unchanged (default: $HEADSEARCH_LIBRARY; for a person of a library, else ./headsearch-library; without a "
                   "library the video is analysed).")
@model_option("--model", "-m", prefix="Model", suffix=" (default: the library's, else the default model).")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON (the output, audit trail, contact "
              "sheet, frames, boxes and tracks, and with --verify the faces found); an error as {\"error\": LINE, \"kind\": ...}.")
@progress_option
def redact(video: Path, out: Path, person: str | None, refs: tuple[Path, ...], whole_image: bool, spare: tuple[str, ...],
           everyone: bool, allow_none: bool, force: bool, style: str, margin: float, preview: Path | None, verify: bool,
           library: Path | None, model: str | None, as_json: bool, progress: bool | None) -> None:
    """Hide people's heads in every frame of VIDEO, written to --out.

    Whom: --person NAME|ID or --ref PHOTO (one person), --all-except NAME|PHOTO (everyone else), or --everyone. The
    whole head is hidden (hair and the back of the head, not only the face), in every frame it is on screen: heads are
    found and followed as `index` finds them (the library's analysis where the video is indexed unchanged), and a track
    is the person when it is judged the same person at the model's calibrated bars. The output keeps the source's
    frame count, frame rate, size, duration, audio and other streams (copied, not encoded again); the source is never
    written to, and a run stopped half way, or that fails, leaves nothing under the output's name.

    \b
    Exit status: 0 written (and, with --verify, no face found in it); 1 nothing written: bad input, an output there
    already (without --force), a person to hide that nobody in the video is (without --allow-none), the source
    changed during the run, a full disk; 5 written, but --verify found faces in it; 130 interrupted.
    """
    from tqdm import tqdm

    from actions.redact import Whom
    from actions.redact import redact as run_redact
    from actions.requests import RedactRequest
    from cli.main import _interrupted
    from headsearch.basics.json_text import json_text

    try:
        whom = Whom(person, tuple(refs), tuple(spare), everyone, whole_image)
    except HeadsearchError as e:
        raise click.UsageError(str(e)) from e
    if whom.needs_library and library is None:
        library = library_path(None)
    bar = tqdm(desc="redact", unit="frame", disable=not show_progress(progress), leave=False)
    try:
        request = RedactRequest(video, out, whom, style, margin, preview, library, model, force=force, allow_none=allow_none,
                                verify=verify)
        summary = run_redact(request, bar)
    except KeyboardInterrupt:
        bar.close()
        _interrupted(f"interrupted: nothing was written to {printable(str(out))}; run the same command again")
    except HeadsearchError as e:
        if as_json:
            click.echo(json_text({"error": str(e), "kind": _error_kind(e), "output": None}))
        raise
    finally:
        bar.close()
    for note in summary.notes:
        click.echo(f"note: {note}", err=True)
    verified = summary.verified
    if as_json:
        click.echo(json_text(summary.to_dict()))
    else:
        click.echo(printable(summary.line()))
        click.echo(f"audit trail: {printable(str(summary.audit))}", err=True)
        if summary.preview is not None:
            click.echo(f"contact sheet: {printable(str(summary.preview))}", err=True)
        if verified is not None:
            for face in verified.faces:
                click.echo(f"face left: frame {face.frame} at {face.time:.3f} s, box {list(face.box)}, score {face.score:.2f}", err=True)
    if verified is not None and verified.clean and not as_json:
        click.echo(printable(verified.line()))
    elif verified is not None and not verified.clean:
        click.echo(f"error: {printable(verified.line())}", err=True)
        click.get_current_context().exit(EXIT_FACES_LEFT)


def _error_kind(error: HeadsearchError) -> str:
    """The kind of a refusal, for a script reading --json."""
    from actions.redact import NobodyMatched
    from actions.redact_output import OutputExists, SourceChanged

    kinds = {NobodyMatched: "nobody-matched", OutputExists: "output-exists", SourceChanged: "source-changed"}
    return next((k for t, k in kinds.items() if isinstance(error, t)), "error")
