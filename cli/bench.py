"""`headsearch bench`: verification accuracy of models on a labelled set, threshold calibration, speed."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from cli.options import library_option, library_path
from headsearch.basics.errors import HeadsearchError
from headsearch.basics.settings import IndexSettings

EXIT_PARTIAL = 2  # some files of the set failed, the others were measured


def _far(ctx, param, value):
    if value is not None and not 0.0 < value < 1.0:
        raise click.BadParameter(f"a false accept rate in (0, 1) is expected, got {value:g}")
    return value


@click.command()
@click.argument("set_csv", metavar="[SET]", required=False, type=click.Path(path_type=Path))
@click.option("--model", "-m", "models", multiple=True,
              help="Model to benchmark (repeat for several; default: the default model; --speed indexes with the first).")
@click.option("--root", type=click.Path(path_type=Path), default=None,
              help="Folder the set's relative paths start from (default: the CSV's folder; a `source` column adds a subfolder).")
@click.option("--whole-image", is_flag=True, help="Photos are already head crops: use the whole image, not the largest head.")
@click.option("--fps", "sample_fps", type=click.FloatRange(min=0.01), default=IndexSettings.sample_fps, show_default=True,
              help="Frames sampled per second in videos.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable results on stdout.")
@click.option("--plot", type=click.Path(path_type=Path), default=None, help="Write ROC curves (log FAR) of all models to this PNG.")
@click.option("--calibrate", type=float, default=None, metavar="FAR", callback=_far,
              help="Write <library>/thresholds.json: exact thresholds at this FAR for the library's model.")
@click.option("--thresholds-out", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="With --calibrate: write the first model's thresholds to this file instead of a library's (thresholds "
                   "bundled with a model: <model file>.thresholds.json).")
@library_option
@click.option("--speed", is_flag=True, help="Benchmark indexing and search speed instead of (or besides) accuracy.")
@click.option("--video", type=click.Path(path_type=Path), default=None, help="Video for the indexing speed benchmark.")
@click.option("--only", type=click.Choice(["indexing", "search"]), default=None, help="Run only one part of --speed.")
@click.option("--sizes", default="1e4,1e5,1e6", show_default=True, help="Stored vector counts for the search benchmark.")
@click.option("--index", "index_names", default="flat,ivf", show_default=True,
              help="Indexes the search benchmark measures: flat (exact), ivf (the library's approximate recipe), "
                   "hnsw, ivfpq-ondisk (IVF-PQ with on-disk lists and exact re-ranking; the library does not use it yet).")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for ivfpq-ondisk's vectors, ground truth and index (5.1 GB at 1e7 x 128-d), kept so a rerun "
                   "resumes; default: a temporary folder removed afterwards.")
@click.option("--nlist", type=click.IntRange(min=1), default=None,
              help="ivfpq-ondisk: inverted lists (default ~4 sqrt(n), as the library's IVF).")
@click.option("--nprobe", "ondisk_nprobe", default=None, metavar="N[,N...]",
              help="ivfpq-ondisk: inverted lists searched per query, one result per value (default 2048).")
@click.option("--rerank", type=click.IntRange(min=0), default=None, help="ivfpq-ondisk: shortlist re-ranked exactly from the raw vectors (0: none; default 100).")
@click.option("--pq-bytes", type=click.Choice(["8", "16", "32", "64"]), default=None, help="ivfpq-ondisk: bytes per PQ code (default 32).")
@click.option("--dim", type=click.IntRange(min=2), default=128, show_default=True, help="Dimension of the synthetic vectors.")
@click.option("--queries", type=click.IntRange(min=10), default=1000, show_default=True, help="Queries per size (latency over the first 200).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the synthetic vectors.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
def bench(set_csv: Path | None, models: tuple[str, ...], root: Path | None, whole_image: bool, sample_fps: float, as_json: bool,
          plot: Path | None, calibrate: float | None, thresholds_out: Path | None, library: Path | None, speed: bool, video: Path | None,
          only: str | None, sizes: str, index_names: str, work_dir: Path | None, nlist: int | None, ondisk_nprobe: str | None,
          rerank: int | None, pq_bytes: str | None, dim: int, queries: int, seed: int, quiet: bool) -> None:
    """Benchmark models on a labelled SET: VR at FAR, AUC, ROC; or indexing and search speed (--speed).

    SET is a CSV with columns path,identity[,appearance_state] (paths relative to the CSV, or
    absolute). Rows naming several people (a;b) or a group/crowd are skipped. Photos give their
    largest head, one-person videos their longest head track. All pairs are scored on two
    protocols: head similarity (same identity and look vs the rest) and identity verification.
    """
    say = (lambda m: None) if quiet else (lambda m: click.echo(m, err=True))
    warn = lambda m: click.echo(m, err=True)  # noqa: E731
    if set_csv is None and not speed:
        raise click.UsageError("give a labelled SET (CSV of path,identity[,appearance_state]) or --speed")
    if calibrate is not None and set_csv is None:
        raise click.UsageError("--calibrate needs a labelled SET")
    if thresholds_out is not None and calibrate is None:
        raise click.UsageError("--thresholds-out needs --calibrate FAR")
    if speed and only != "search" and video is None:
        raise click.UsageError("the indexing speed benchmark needs a video: pass --video PATH (or --only search)")
    size_list = search = None
    if speed and only != "indexing":
        from bench.search import parse_indexes, parse_sizes

        size_list = parse_sizes(sizes)
        search = {"indexes": parse_indexes(index_names), "work_dir": work_dir, "recipe": _ondisk_recipe(nlist, ondisk_nprobe, rerank, pq_bytes)}

    out: dict = {}
    texts: list[str] = []
    deferred: list[HeadsearchError] = []  # errors raised after the results are printed
    settings = IndexSettings.from_env(sample_fps=sample_fps)

    if set_csv is not None:
        _accuracy(set_csv, models, root, whole_image, settings, plot, (calibrate, thresholds_out), library, out, texts, deferred, say, warn)
    if speed:
        _speed(video, models[0] if models else None, only, size_list, search, dim, queries, seed, settings, out, texts, say, warn, quiet)

    if as_json:
        click.echo(json.dumps(out, indent=2))
    else:
        click.echo("\n\n".join(t for t in texts if t))
    if deferred:
        raise deferred[0]
    if any(m.get("failed_files") for m in out.get("models", {}).values()):
        sys.exit(EXIT_PARTIAL)  # measured on the others; each failed file had its line


def _accuracy(set_csv, models, root, whole_image, settings, plot, calibration, library, out, texts, deferred, say, warn) -> None:
    from bench.accuracy import calibrated_thresholds, calibration_report, run_accuracy
    from bench.report import format_accuracy, plot_roc
    from headsearch.evaluation.labels import read_label_set
    from headsearch.evaluation.metrics import DEFAULT_FARS
    from headsearch.evaluation.thresholds import write_thresholds, write_thresholds_file
    from headsearch.models import DEFAULT_MODEL

    calibrate, thresholds_out = calibration
    lib = None
    if calibrate is not None and thresholds_out is None:
        from headsearch.store.library import Library

        lib = Library.open(library_path(library))  # fail before the long part when there is no library
    specs = list(dict.fromkeys(models)) or [lib.model.name if lib is not None else DEFAULT_MODEL]
    labels = read_label_set(set_csv, root)
    if labels.skipped_line():
        warn(f"note: {labels.skipped_line()}")
    if not labels.files:
        raise HeadsearchError(f"{set_csv}: no usable rows (each needs a path and one identity)")
    log_dir = library_path(library)  # an unexpected error's traceback goes to the library's errors.log (else a temporary one)
    reports = run_accuracy(labels.files, specs, whole_image=whole_image, settings=settings, report=warn, progress=say,
                           error_log=log_dir if log_dir.is_dir() else None)
    seen = set()
    for r in reports:
        for p in r.evaluation.problems:
            if p not in seen:
                seen.add(p)
                warn(f"warning: {p}")
    out["set"] = labels.to_dict()
    out["fars"] = [float(f) for f in DEFAULT_FARS]
    out["models"] = {r.spec: r.to_dict() for r in reports}
    texts.append(f"set {set_csv}: {len(labels.files)} usable of {labels.rows} rows "
                 f"({out['set']['photos']} photos, {out['set']['videos']} videos, {out['set']['identities']} "
                 f"{'identity' if out['set']['identities'] == 1 else 'identities'})\n"
                 + format_accuracy(reports))
    if plot is not None:
        if any(r.evaluation.scores for r in reports):
            texts.append(f"ROC curves: {plot_roc(reports, plot)}")
        else:
            warn(f"warning: no ROC curve to plot in {plot}: nothing was measured")
    if calibrate is not None:
        try:
            if thresholds_out is not None:
                thresholds = calibrated_thresholds(reports[0], calibrate)
                path = write_thresholds_file(thresholds_out, thresholds)
            else:
                thresholds = calibrated_thresholds(calibration_report(lib.model, reports, lib.root), calibrate)
                path = write_thresholds(lib.root, thresholds)
            out["calibration"] = {**thresholds, "path": str(path)}
            texts.append(f"calibrated {path} at FAR {calibrate:g} for {thresholds['model']}: identity > {thresholds['identity']:.4f} "
                         f"(VR {thresholds['vr']['identity']:.3f}), same_look > {thresholds['same_look']:.4f} "
                         f"(VR {thresholds['vr']['same_look']:.3f}, {thresholds['same_look_vectors']} vectors)")
        except HeadsearchError as e:
            deferred.append(e)
    if not any(r.measured for r in reports):
        reasons = "; ".join(dict.fromkeys([r.error for r in reports if r.error]
                                          + [p for r in reports for p in r.evaluation.problems if not p.startswith("hierarchy")]))
        deferred.append(HeadsearchError(f"nothing could be measured on {set_csv}" + (f": {reasons}" if reasons else "")))


def _ondisk_recipe(nlist: int | None, nprobe: str | None, rerank: int | None, pq_bytes: str | None):
    import dataclasses

    from bench.ondisk import OnDiskRecipe
    from bench.search import parse_sizes

    changes = {"nlist": nlist}
    if nprobe is not None:
        try:
            changes["nprobe"] = tuple(parse_sizes(nprobe))
        except HeadsearchError:
            raise click.BadParameter(f"{nprobe!r}: give whole numbers, e.g. 128,256", param_hint="--nprobe") from None
    if rerank is not None:
        changes["rerank"] = rerank
    if pq_bytes is not None:
        changes["pq_bytes"] = int(pq_bytes)
    return dataclasses.replace(OnDiskRecipe(), **changes)


def _speed(video, model, only, size_list, search, dim, queries, seed, settings, out, texts, say, warn, quiet) -> None:
    if only != "search":
        from bench.indexing import indexing_speed
        from bench.report import format_indexing

        say(f"indexing {video} into a temporary library")
        result = indexing_speed(video, model, settings)
        for w in result["warnings"]:
            warn(f"warning: {w}")
        out["indexing"] = result
        texts.append(format_indexing(result))
    if only != "indexing":
        from bench.ondisk import ondisk_search_speed
        from bench.report import format_search
        from bench.search import IN_MEMORY, check_memory, search_speed

        results = []
        in_memory = tuple(i for i in search["indexes"] if i in IN_MEMORY)
        for n in size_list:
            if in_memory:
                check_memory(n, dim, in_memory)
                say(f"search: {n:,} vectors ({', '.join(in_memory)})")
                results.extend(search_speed(n, dim=dim, seed=seed, n_queries=queries, indexes=in_memory))
            if "ivfpq-ondisk" in search["indexes"]:
                say(f"search: {n:,} vectors (ivfpq-ondisk)")
                results.extend(ondisk_search_speed(n, dim=dim, seed=seed, n_queries=queries, recipe=search["recipe"],
                                                   work_dir=search["work_dir"], show=not quiet, say=say))
        out["search"] = [r.to_dict() for r in results]
        texts.append(format_search(results, seed))
