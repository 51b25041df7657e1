"""The `headsearch` command. Thin: parses options, calls the library, turns errors into one line."""
from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click

from cli.options import library_option, library_path
from headsearch.errors import HeadsearchError, is_disk_full
from headsearch.settings import IndexSettings

EXIT_PARTIAL = 2  # some files failed, the others were indexed


class HeadsearchGroup(click.Group):
    """Turns domain errors into one clear line and an exit code, never a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except HeadsearchError as e:
            click.echo(f"error: {e}", err=True)
            ctx.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted: the library is consistent; run the same command again to finish", err=True)
            ctx.exit(130)
        except OSError as e:
            if is_disk_full(e):
                click.echo(f"error: disk full ({e.filename or ''}); the library keeps its last committed state", err=True)
            else:
                click.echo(f"error: {e.filename + ': ' if e.filename else ''}{e.strerror or e}", err=True)
            ctx.exit(1)


@click.group(cls=HeadsearchGroup)
@click.option("-v", "--verbose", is_flag=True, help="Log what happens.")
@click.version_option(package_name="headsearch")
def main(verbose: bool) -> None:
    """Find people in video libraries by their whole head: face, hair, contour, accessories."""
    logging.basicConfig(level=logging.INFO if verbose else logging.ERROR, format="%(levelname)s %(name)s: %(message)s")


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@library_option
@click.option("--model", "-m", default=None, help="Embedding model: default (the bundled head model), sface, dlib-resnet, sface+hsv, "
              "a head-similarity .safetensors, an ArcFace .onnx, an insightface pack folder (default: the library's "
              "model, or the bundled one for a new library).")
@click.option("--fps", "sample_fps", type=click.FloatRange(min=0.01), default=IndexSettings.sample_fps, show_default=True, help="Frames sampled per second.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
def index(paths: tuple[Path, ...], library: Path | None, model: str | None, sample_fps: float, quiet: bool) -> None:
    """Index videos and photos (files or folders, recursively) into the library.

    Unchanged files are skipped, changed ones re-indexed, and files that vanished from the given
    folders removed. Interrupt at any time: the next run finishes the work.
    """
    from headsearch.embedders import load_embedder
    from headsearch.library import Library, existing_model
    from indexer.pipeline import Indexer

    existing = existing_model(library_path(library)) if model is None else None  # an existing library keeps its model
    embedder = load_embedder(model or (existing.source if existing else None))
    lib = Library.create(library_path(library), embedder.describe())
    settings = IndexSettings(sample_fps=sample_fps)
    summary = Indexer(lib, embedder, settings, progress=not quiet).run(paths, report=lambda m: click.echo(m, err=True))
    click.echo(f"{summary.line()} [{summary.stages_line()}]")
    if summary.failed:
        sys.exit(EXIT_PARTIAL if summary.indexed or summary.skipped else 1)


@main.command()
@click.argument("image", type=click.Path(path_type=Path))
@library_option
@click.option("-k", "k", type=click.IntRange(min=1), default=5, show_default=True, help="Number of distinct tracks.")
@click.option("--all", "all_heads", is_flag=True, help="Search every head in the photo, not only the largest.")
@click.option("--whole-image", is_flag=True, help="The photo is already a head crop (e.g. the back of a head).")
@click.option("--json", "as_json", is_flag=True, help="A JSON list of hits.")
@click.option("--model", "-m", default=None, help="Model to embed the query with (must be the library's).")
@click.option("--rank", "ranking", type=click.Choice(["appearance", "identity"]), default="appearance", show_default=True,
              help="appearance: the same person first, same look before other look (by head score); identity: by identity score.")
def query(image: Path, library: Path | None, k: int, all_heads: bool, whole_image: bool, as_json: bool, model: str | None,
          ranking: str) -> None:
    """Find the moments where the person in IMAGE appears.

    Hits carry their tier (same_look, other_look, other_person) from the library's thresholds.json, else the
    thresholds bundled with the model."""
    from headsearch.detect import FaceDetector
    from headsearch.embedders import load_embedder
    from headsearch.library import Library
    from headsearch.query import QueryEngine, query_crops
    from headsearch.thresholds import thresholds_for

    lib = Library.open(library_path(library))
    embedder = load_embedder(model or lib.model.source)
    lib.check_model(embedder.describe())
    thresholds = thresholds_for(lib.root, lib.model, embedder.weights_file)
    crops = query_crops(image, FaceDetector(), all_heads, whole_image)
    engine = QueryEngine(lib, embedder, thresholds, ranking)
    results = [engine.search(c, k) for c in crops]
    if as_json:
        out = [h.to_dict() for h in results[0]] if len(results) == 1 else [[h.to_dict() for h in r] for r in results]
        click.echo(json.dumps(out, indent=2))
        return
    for n, hits in enumerate(results):
        if len(results) > 1:
            click.echo(f"head {n + 1}:")
        if not hits:
            click.echo("no matches (the library is empty)")
        for rank, h in enumerate(hits, 1):
            tier = f"  {h.tier}" if h.tier else ""
            click.echo(f"{rank:>2}. {h.score:.3f}  {h.start:7.2f}-{h.end:7.2f}s  at {h.time:7.2f}s  {h.video}  [{h.thumbnail}]{tier}")


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@library_option
def remove(paths: tuple[Path, ...], library: Path | None) -> None:
    """Remove files (or everything under folders) from the library."""
    from headsearch.library import Library

    lib = Library.open(library_path(library), read_only=False)
    removed, unmatched = lib.remove_paths([Path(p).expanduser().resolve() for p in paths])
    for path in removed:
        click.echo(f"removed {path}")
    if unmatched:
        raise HeadsearchError(f"not in the library: {', '.join(str(p) for p in unmatched)}")


@main.command()
@library_option
@click.option("--json", "as_json", is_flag=True)
def stats(library: Path | None, as_json: bool) -> None:
    """What the library holds."""
    from headsearch.library import Library

    s = Library.open(library_path(library)).stats()
    if as_json:
        click.echo(json.dumps(s, indent=2))
        return
    m = s["model"]
    click.echo(f"library   {s['library']}\nmodel     {m['name']} ({m['version']}, {m['dim']}-d, {'+'.join(m['kinds'])})")
    click.echo(f"files     {s['videos']} ({s['images']} images), {s['video_seconds'] / 60:.1f} min of video")
    click.echo(f"shots     {s['shots']}\ntracks    {s['tracks']}\nsightings {s['observations']}\nvectors   {s['vectors']}")
    click.echo(f"size      {s['bytes'] / 1e6:.1f} MB")


@main.command()
@click.option("--out", type=click.Path(path_type=Path), default=Path("headsearch-demo"), show_default=True, help="Folder for the demo video, query photo and library.")
@click.pass_context
def demo(ctx: click.Context, out: Path) -> None:
    """Make a video from photos that ship with installed packages, index it, and query it."""
    from headsearch.demo import make_demo_video

    video, photo, plan = make_demo_video(out)
    click.echo(f"demo video {video}: " + "; ".join(f"shot {i + 1} (from {2 * i:.0f} s) {p}" for i, p in enumerate(plan)))
    library = out / "library"
    ctx.invoke(index, paths=(video,), library=library, model=None, sample_fps=IndexSettings.sample_fps, quiet=True)
    click.echo(f"query {photo} (person 2, cut from the photo at another scale, mirrored and rotated):")
    ctx.invoke(query, image=photo, library=library, k=3, all_heads=False, whole_image=False, as_json=False, model=None,
               ranking="appearance")


from cli.bench import bench  # noqa: E402
from cli.dataset import build_dataset_command  # noqa: E402
from cli.train import train  # noqa: E402

main.add_command(bench)
main.add_command(build_dataset_command, "build-dataset")
main.add_command(train)

if __name__ == "__main__":
    main()
