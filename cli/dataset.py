"""`headsearch build-dataset`: the training set of the paper's Sec. 4.4 from videos and labelled photos."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from cli.options import EXIT_INTERRUPTED, EXIT_PARTIAL, FiniteFloat, model_option, show_progress
from trainer.dataset_format import layout_help
from trainer.dataset_segments import (
    DEFAULT_BEST_FACE_RATIO,
    DEFAULT_FPS,
    DEFAULT_MIN_FRAMES,
    DEFAULT_MIN_INVISIBLE,
    DEFAULT_MIN_VISIBLE,
    DatasetOptions,
)

_share = FiniteFloat(min=0.0, max=1.0)


@click.command("build-dataset", help=f"""Build a head-similarity training set from VIDEOS (files or folders) and labelled photo sets.

    Shots, head tracks and segments (tracks with enough frames, with and without a visible face, and
    a good best face); segments are grouped into identities across videos by their best-face teacher
    vectors (never two heads seen in the same frame). Writes OUT/{layout_help()}. Interrupt at any time:
    the next run reuses every file already analysed.
    """)
@click.argument("videos", nargs=-1, type=click.Path(path_type=Path))
@click.option("--out", "-o", required=True, type=click.Path(path_type=Path, file_okay=False), help="Dataset folder (created; a rerun finishes it).")
@click.option("--labels", "labels", multiple=True, type=click.Path(path_type=Path, dir_okay=False),
              help="Labelled set (CSV path,identity[,appearance_state][,source]); repeatable. Each photo's largest head "
                   "becomes a sample of identity label:<identity>; a labelled one-person video gives its person's segments that "
                   "identity and look.")
@model_option("--teacher", prefix="Teacher model for identity clustering and distillation targets", suffix="; default: sface.")
@click.option("--fps", "sample_fps", type=FiniteFloat(min=0.01), default=DEFAULT_FPS, show_default=True, help="Frames sampled per second.")
@click.option("--min-frames", type=click.IntRange(min=1), default=DEFAULT_MIN_FRAMES, show_default=True,
              help="A segment has at least this many sampled frames.")
@click.option("--min-visible", type=_share, default=DEFAULT_MIN_VISIBLE, show_default=True,
              help="...at least this share of them with the face visible.")
@click.option("--min-invisible", type=_share, default=DEFAULT_MIN_INVISIBLE, show_default=True,
              help="...and at least this share without a visible face (0 keeps all-frontal tracks).")
@click.option("--best-face-ratio", type=_share, default=DEFAULT_BEST_FACE_RATIO, show_default=True,
              help="The best face of a segment covers at least this share of its head box (frontal faces ~0.25-0.28 "
                   "in our 1.75x-face-height head boxes; the paper's 'more than half' assumes tighter head boxes).")
@click.option("--cluster-threshold", type=FiniteFloat(min=-1.0, max=1.0), default=None,
              help="Cosine similarity of best-face teacher vectors at which segments merge into one identity "
                   "(default: the teacher's own, from its spec: `headsearch models --json` shows cluster_threshold).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
def build_dataset_command(videos: tuple[Path, ...], out: Path, labels: tuple[Path, ...], teacher: str | None, sample_fps: float,
                          min_frames: int, min_visible: float, min_invisible: float, best_face_ratio: float,
                          cluster_threshold: float | None, quiet: bool) -> None:
    from trainer.dataset import build_dataset

    if not videos and not labels:
        raise click.UsageError("give VIDEOS (files or folders) and/or --labels CSV")
    opts = DatasetOptions(sample_fps=sample_fps, min_frames=min_frames, min_visible=min_visible, min_invisible=min_invisible,
                          best_face_ratio=best_face_ratio, cluster_threshold=cluster_threshold)
    try:
        summary = build_dataset(videos, out, labels, teacher, opts, progress=show_progress(quiet=quiet), report=lambda m: click.echo(m, err=True))
    except KeyboardInterrupt:
        click.echo(f"interrupted: the files analysed so far are kept in {out}/parts; run the same command again to finish", err=True)
        sys.exit(EXIT_INTERRUPTED)
    click.echo(f"{summary.line()} -> {out}")
    if summary.failed:
        sys.exit(EXIT_PARTIAL)
