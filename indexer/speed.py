"""Benchmarks that need the indexer: video samples of labelled sets, and indexing speed.

`run_accuracy` turns a labelled set into samples with each model (photos: largest head; videos:
the labelled person's head track from the indexer's own analysis) and evaluates them with
`headsearch.bench`. `indexing_speed` indexes one video into a temporary library and reports the
seconds and throughput of each pipeline stage next to the decode-only bound.
"""
from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from headsearch.bench import (
    BenchCache,
    LabeledFile,
    ModelReport,
    Sample,
    embed_photos,
    evaluate_samples,
    format_table,
    mean_vector,
    model_key,
)
from headsearch.detect import FaceDetector
from headsearch.embedders import Embedder, load_embedder
from headsearch.errors import HeadsearchError, MediaError
from headsearch.metrics import DEFAULT_FARS
from headsearch.settings import IndexSettings
from indexer.decode import VideoStream
from indexer.pipeline import STAGES, Indexer, StageClock
from indexer.shots import hsv_histogram
from schemas.records import HeadTrack

log = logging.getLogger(__name__)

Report = Callable[[str], None]


# ----------------------------------------------------------------------------------------------
# Accuracy: labelled videos


def labelled_track(tracks: Sequence[HeadTrack]) -> HeadTrack | None:
    """The labelled person's track of a one-person video: the longest track with a visible face
    (most observations), the one with the largest mean head box on a tie; None when no track saw a face."""
    candidates = [tr for tr in tracks if any(o.face_visible for o in tr.observations) and tr.observations[0].embeddings]
    if not candidates:
        return None
    return max(candidates, key=lambda tr: (len(tr.observations), float(np.mean([o.head.area for o in tr.observations]))))


def video_sample(file: LabeledFile, embedder: Embedder, settings: IndexSettings) -> Sample:
    """A one-person video as one sample: the mean (renormalised) of its labelled track's vectors."""
    indexer = Indexer(None, embedder, settings, progress=False)  # analysis only: nothing is stored
    result = indexer.analyse(file.path, StageClock())
    track = labelled_track(result.tracks)
    if track is None:
        raise MediaError(f"{file.path}: no head track with a visible face (sampled {result.frames_sampled} frames)")
    kinds = track.observations[0].embeddings.keys()
    vectors = {kind: mean_vector(o.embeddings[kind] for o in track.observations if kind in o.embeddings) for kind in kinds}
    return Sample(file.path, file.identity, file.state, vectors, "video track")


def embed_videos(files: Sequence[LabeledFile], embedder: Embedder, settings: IndexSettings, cache: BenchCache,
                 report: Report) -> tuple[list[Sample], list[str]]:
    """Samples of labelled one-person videos; problems reported one line per file."""
    key = model_key(embedder)
    samples, failed = [], []
    for f in files:
        hit = cache.vectors.get((key, f.path))
        if hit is None:
            try:
                hit = video_sample(f, embedder, settings).vectors
            except HeadsearchError as e:
                hit = e
            except OSError as e:
                hit = MediaError(f"{f.path}: cannot read file ({e.strerror or e})")
            cache.vectors[(key, f.path)] = hit
        if isinstance(hit, HeadsearchError):
            failed.append(str(hit))
            report(f"warning: {hit}; skipped")
            continue
        samples.append(Sample(f.path, f.identity, f.state, hit, "video track"))
    return samples, failed


def run_accuracy(files: Sequence[LabeledFile], specs: Sequence[str], *, whole_image: bool = False,
                 settings: IndexSettings | None = None, fars: Sequence[float] = DEFAULT_FARS,
                 report: Report = print, progress: Report | None = None) -> tuple[list[ModelReport], dict[str, Embedder]]:
    """Each model's verification report on the labelled files; a model that fails is reported, not fatal."""
    settings = settings or IndexSettings()
    detector = FaceDetector.from_settings(settings)
    cache = BenchCache()
    photos = [f for f in files if f.kind == "image"]
    videos = [f for f in files if f.kind == "video"]
    reports, embedders = [], {}
    reported_files: set[str] = set()

    def report_once(line: str) -> None:  # a bad file is one line, not one per model
        if line not in reported_files:
            reported_files.add(line)
            report(line)

    for spec in specs:
        r = ModelReport(spec)
        reports.append(r)
        try:
            embedder = load_embedder(spec)
        except HeadsearchError as e:
            r.error = str(e)
            report(f"error: model {spec}: {e}")
            continue
        r.model = embedder.describe()
        embedders[spec] = embedder
        if progress:
            progress(f"{spec}: embedding {len(photos)} photos and {len(videos)} videos")
        t0 = time.perf_counter()
        try:
            photo_samples, failed_photos = embed_photos(photos, embedder, detector, whole_image, cache, report_once)
            video_samples, failed_videos = embed_videos(videos, embedder, settings, cache, report_once)
        except Exception as e:  # noqa: BLE001 - one broken model must not stop the others
            r.error = f"failed while embedding ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
            report(f"error: model {spec}: {r.error}")
            continue
        r.failed = failed_photos + failed_videos
        evaluate_samples(r, photo_samples + video_samples, fars)
        log.info("%s: %d samples in %.1f s", spec, r.n_samples, time.perf_counter() - t0)
    return reports, embedders


# ----------------------------------------------------------------------------------------------
# Indexing speed


def decode_only(video: Path, settings: IndexSettings) -> dict:
    """The bound no indexer beats: decode every frame (same size bound) and histogram it, nothing else."""
    t0 = time.perf_counter()
    stream = VideoStream(video, settings.decode_max_side)
    frames = 0
    last_time = 0.0
    for frame in stream:
        hsv_histogram(frame.rgb)
        frames += 1
        last_time = frame.time
    seconds = time.perf_counter() - t0
    duration = max(stream.info.duration, last_time)
    return {"frames": frames, "seconds": seconds, "fps": frames / seconds if seconds > 0 else None,
            "realtime": duration / seconds if seconds > 0 else None, "video_seconds": duration, "decoder": stream.info.decoder}


def indexing_speed(video: Path, model: str | None = None, settings: IndexSettings | None = None) -> dict:
    """Index one video into a temporary library: per-stage seconds and throughput, end-to-end x real time."""
    import sqlalchemy as sa

    from headsearch.library import Library
    from schemas import tables as t

    video = Path(video).expanduser()
    if not video.is_file():
        raise MediaError(f"{video}: no such video file")
    settings = settings or IndexSettings()
    t0 = time.perf_counter()
    embedder = load_embedder(model)
    with tempfile.TemporaryDirectory(prefix="headsearch-bench-") as tmp:
        library = Library.create(Path(tmp) / "library", embedder.describe())
        indexer = Indexer(library, embedder, settings, progress=False)
        indexer.detector.detect(np.zeros((64, 64, 3), np.uint8))  # load the detector outside the timed run
        startup = time.perf_counter() - t0
        problems: list[str] = []
        summary = indexer.run([video], report=problems.append)
        if summary.failed or not summary.indexed:
            raise MediaError(summary.failed[0] if summary.failed else f"{video}: not indexed")
        with library.reader() as conn:
            row = conn.execute(sa.select(t.videos.c.frames_decoded, t.videos.c.frames_sampled, t.videos.c.width,
                                         t.videos.c.height, t.videos.c.fps, t.videos.c.decoder)).one()
        stats = library.stats()
    units = {"decode": ("frames", row.frames_decoded), "shots": ("frames", row.frames_decoded),
             "detect": ("sampled frames", row.frames_sampled), "track": ("sampled frames", row.frames_sampled),
             "embed": ("head crops", stats["observations"]), "store": ("sightings", stats["observations"])}
    video_seconds = summary.video_seconds
    stages = {}
    for stage in STAGES:
        seconds = float(summary.clock.seconds.get(stage, 0.0))
        unit, count = units[stage]
        stages[stage] = {"seconds": seconds, "share": seconds / summary.wall_seconds if summary.wall_seconds else None,
                         "items": int(count), "unit": unit, "per_second": count / seconds if seconds > 0 else None,
                         "realtime": video_seconds / seconds if seconds > 0 else None}
    bound = decode_only(video, settings)
    return {
        "video": str(video), "model": embedder.describe(), "video_seconds": video_seconds, "width": row.width,
        "height": row.height, "fps": row.fps, "decoder": row.decoder, "sample_fps": settings.sample_fps,
        "frames_decoded": int(row.frames_decoded), "frames_sampled": int(row.frames_sampled),
        "tracks": int(stats["tracks"]), "sightings": int(stats["observations"]), "startup_s": startup,
        "stages": stages, "wall_s": summary.wall_seconds, "realtime": summary.realtime_factor,
        "decode_only": bound, "warnings": problems + summary.warnings,
    }


def format_indexing(r: dict) -> str:
    """The indexing speed as a table: stages, end to end, decode-only bound."""
    lines = [f"indexing: {Path(r['video']).name} ({r['video_seconds']:.1f} s, {r['width']}x{r['height']} decoded, "
             f"{r['fps']:.2f} fps, {r['decoder']}), sampling {r['sample_fps']:g} fps, model {r['model']['name']}: "
             f"{r['frames_decoded']} frames, {r['frames_sampled']} sampled, {r['tracks']} tracks, {r['sightings']} sightings"]
    rows = [["stage", "seconds", "share", "throughput", "x real time"]]
    for stage, s in r["stages"].items():
        rate = "-" if s["per_second"] is None else f"{s['per_second']:,.1f} {s['unit']}/s"
        rows.append([stage, f"{s['seconds']:.2f}", "-" if s["share"] is None else f"{100 * s['share']:.0f}%", rate,
                     "-" if s["realtime"] is None else f"{s['realtime']:.1f}x"])
    rows.append(["end to end", f"{r['wall_s']:.2f}", "100%", f"{r['frames_decoded'] / r['wall_s']:,.1f} frames/s" if r["wall_s"] else "-",
                 f"{r['realtime']:.2f}x"])
    b = r["decode_only"]
    rows.append(["decode-only bound", f"{b['seconds']:.2f}", "", "-" if b["fps"] is None else f"{b['fps']:,.1f} frames/s",
                 "-" if b["realtime"] is None else f"{b['realtime']:.1f}x"])
    lines += format_table(rows, "<>>>>")
    lines.append(f"(decode-only: every frame decoded and histogrammed, no detection; model load and detector start-up "
                 f"{r['startup_s']:.1f} s not counted)")
    return "\n".join(lines)
