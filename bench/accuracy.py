"""Verification accuracy of models on a labelled set, and threshold calibration.

A labelled set becomes one sample per usable file (photos: the largest head; one-person videos:
the labelled person's head track from the indexer's own analysis, as the mean of its vectors);
all pairs of samples are scored by cosine similarity and evaluated by `headsearch.evaluation.verification` on
both protocols plus the hierarchy accuracy.

A benchmark run enters here through `bench_accuracy(AccuracyOptions(...))`, which returns an `AccuracyRun`
for `bench.report` to show.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from actions.compare import main_track
from headsearch.basics.errors import HeadsearchError, MediaError, ModelMismatch, unreadable
from headsearch.basics.failures import file_failures
from headsearch.basics.frames import frame_at
from headsearch.basics.settings import IndexSettings
from headsearch.detection.crops import HeadCrop, crop_head
from headsearch.detection.faces import FaceDetector, detect_heads, head_box_from_face
from headsearch.detection.pose import yaw_from_landmarks
from headsearch.embedding.photo_heads import photo_heads, photo_pixels
from headsearch.evaluation.labels import LabeledFile, LabelSet, read_label_set
from headsearch.evaluation.metrics import DEFAULT_FARS
from headsearch.evaluation.thresholds import calibrate, write_thresholds, write_thresholds_file
from headsearch.evaluation.verification import EvaluationReport, evaluate
from headsearch.models import DEFAULT_MODEL, Embedder, load_embedder, mean_vector
from headsearch.models.registry import find_spec
from indexer.analysis import analyse_file
from schemas.records import Box, FaceDetection, HeadDetection, MediaKind, ModelInfo, VectorKind

log = logging.getLogger(__name__)

Report = Callable[[str], None]
Vectors = dict[VectorKind, np.ndarray]


@dataclass
class Sample:
    """One labelled vector set: a photo's largest head, or a video's labelled head track."""

    path: Path
    identity: str
    state: str | None
    vectors: Vectors  # kind -> (dim,) unit vector
    source: str = "photo"  # "photo", "video track" or "video frame"
    yaw: float | None = None  # degrees its face is turned (signed), where it shows a face with landmarks


@dataclass
class BenchCache:
    """In-memory caches of one benchmark run: head crops per photo, vectors per (model, file)."""

    crops: dict[tuple, HeadCrop | HeadsearchError] = field(default_factory=dict)  # a photo's, a labelled head's of a frame
    vectors: dict[tuple[tuple[str, str], Path], Vectors | HeadsearchError] = field(default_factory=dict)
    error_log: Path | None = None  # folder for the traceback of a file's unexpected error (else the temporary folder)


def model_key(embedder: Embedder) -> tuple[str, str]:
    """What identifies a model's vectors (two specs loading the same weights share it)."""
    return (embedder.name, embedder.version)


def photo_crop(path: Path, detector: FaceDetector, embedder: Embedder, whole_image: bool, cache: BenchCache) -> HeadCrop:
    """The largest head of a photo (or the whole photo), as a query takes it (`photo_heads`), cached; raises HeadsearchError."""
    return _cached_crop(cache, (path, whole_image, embedder.sees_whole_head), path,
                        lambda: photo_heads(photo_pixels(path), path, detector, embedder, whole_image=whole_image)[0].crop)


def _cached_crop(cache: BenchCache, key: tuple, path: Path, make: Callable[[], HeadCrop]) -> HeadCrop:
    """The crop `make` cuts from a file, made once per key; a file's error is kept as well, and raised again."""
    if key not in cache.crops:
        try:
            with file_failures(path, cache.error_log):
                cache.crops[key] = make()
        except HeadsearchError as e:
            cache.crops[key] = e
        except OSError as e:
            cache.crops[key] = unreadable(path, e)
    hit = cache.crops[key]
    if isinstance(hit, HeadsearchError):
        raise hit
    return hit


def embed_photos(files: Sequence[LabeledFile], embedder: Embedder, detector: FaceDetector, whole_image: bool,
                 cache: BenchCache, report: Report, batch: int = 32, clock: list[float] | None = None) -> tuple[list[Sample], list[str]]:
    """Samples of labelled photos (largest head each); problems reported one line per file. `clock` collects
    [seconds spent in the embedder, crops embedded]."""
    key = model_key(embedder)
    samples: list[Sample | None] = [None] * len(files)
    failed: list[str] = []
    todo: list[tuple[int, HeadCrop]] = []

    def flush():
        if not todo:
            return
        t0 = time.perf_counter()
        vectors = embedder.embed([c for _, c in todo])
        if clock is not None:
            clock[0] += time.perf_counter() - t0
            clock[1] += len(todo)
        for row, (i, crop) in enumerate(todo):
            v = {kind: np.asarray(vs[row], np.float32) for kind, vs in vectors.items()}
            cache.vectors[(key, files[i].path)] = v
            samples[i] = Sample(files[i].path, files[i].identity, files[i].state, v, "photo", crop_yaw(crop))
        todo.clear()

    for i, f in enumerate(files):
        hit = cache.vectors.get((key, f.path))
        if isinstance(hit, dict):
            samples[i] = Sample(f.path, f.identity, f.state, hit, "photo", crop_yaw(photo_crop(f.path, detector, embedder, whole_image, cache)))
            continue
        try:
            todo.append((i, photo_crop(f.path, detector, embedder, whole_image, cache)))
        except HeadsearchError as e:
            failed.append(str(e))
            report(f"warning: {e}; skipped")
            continue
        if len(todo) >= batch:
            flush()
    flush()
    return [s for s in samples if s is not None], failed


def video_sample(file: LabeledFile, embedder: Embedder, detector: FaceDetector, settings: IndexSettings) -> Sample:
    """A one-person video as one sample: the mean (renormalised) of its labelled track's vectors."""
    result = analyse_file(file.path, settings, detector, embedder)
    track = main_track(result.tracks)  # the labelled person of a one-person video
    if track is None:
        raise MediaError(f"{file.path}: no head track with a visible face (sampled {result.frames_sampled} frames)")
    seen = [o for o in track.observations if o.face_visible and o.embeddings]  # the labelled face, as the photos show it
    kinds = seen[0].embeddings.keys()
    vectors = {kind: mean_vector(o.embeddings[kind] for o in seen if kind in o.embeddings) for kind in kinds}
    return Sample(file.path, file.identity, file.state, vectors, "video track")


def embed_videos(files: Sequence[LabeledFile], embedder: Embedder, detector: FaceDetector, settings: IndexSettings,
                 cache: BenchCache, report: Report) -> tuple[list[Sample], list[str]]:
    """Samples of labelled one-person videos; problems reported one line per file."""
    key = model_key(embedder)
    samples, failed = [], []
    for f in files:
        hit = cache.vectors.get((key, f.path))
        if hit is None:
            try:
                with file_failures(f.path, cache.error_log):
                    hit = video_sample(f, embedder, detector, settings).vectors
            except HeadsearchError as e:
                hit = e
            except OSError as e:
                hit = unreadable(f.path, e)
            cache.vectors[(key, f.path)] = hit
        if isinstance(hit, HeadsearchError):
            failed.append(str(hit))
            report(f"warning: {hit}; skipped")
            continue
        samples.append(Sample(f.path, f.identity, f.state, hit, "video track"))
    return samples, failed


def frame_crop(file: LabeledFile, detector: FaceDetector, settings: IndexSettings, cache: BenchCache) -> HeadCrop:
    """A labelled head of a video frame as the indexer cuts it: its box, with the face found inside it (the detection
    whose head box overlaps it most); cached; raises HeadsearchError when the frame shows no face there."""
    def make() -> HeadCrop:
        rgb = frame_at(file.path, file.time)
        face = _face_of(file.box, detect_heads(detector, rgb)) or _face_of(file.box, _heads_around(detector, rgb, file.box))
        if face is None:
            raise MediaError(f"{file.path}: no face in the labelled head at {file.time:.3f} s")
        return crop_head(rgb, file.box, face, settings.crop_px)

    return _cached_crop(cache, (file.path, file.time, file.box), file.path, make)


FRAME_HEAD_IOU = 0.5  # a detected head is the labelled one from this overlap on


def _face_of(box: Box, heads: Sequence[HeadDetection]) -> FaceDetection | None:
    """The face of the detected head that is the labelled one (None: none overlaps it enough)."""
    best = max(heads, key=lambda h: h.head.iou(box), default=None)
    return best.face if best is not None and best.head.iou(box) >= FRAME_HEAD_IOU else None


def _heads_around(detector: FaceDetector, rgb: np.ndarray, box: Box) -> list[HeadDetection]:
    """Heads found in the labelled box and its surroundings alone (a small face the whole frame's pass misses), in
    frame pixels."""
    h, w = rgb.shape[:2]
    x1, y1 = max(0, int(box.x1 - box.width / 2)), max(0, int(box.y1 - box.height / 2))
    x2, y2 = min(w, int(box.x2 + box.width / 2)), min(h, int(box.y2 + box.height / 2))
    if x2 - x1 < 2 or y2 - y1 < 2:
        return []
    shift = np.array([x1, y1], np.float32)
    faces = [FaceDetection(f.box.shifted(x1, y1), f.landmarks + shift, f.score) for f in detector.detect(rgb[y1:y2, x1:x2])]
    return [HeadDetection(head_box_from_face(f), f, f.score) for f in faces]


def embed_frames(files: Sequence[LabeledFile], embedder: Embedder, detector: FaceDetector, settings: IndexSettings,
                 cache: BenchCache, report: Report, batch: int = 32) -> tuple[list[Sample], list[str]]:
    """Samples of labelled heads in video frames (a query's vectors of each); problems reported one line per row."""
    samples, failed, crops = [], [], []
    for f in files:
        try:
            crops.append((f, frame_crop(f, detector, settings, cache)))
        except HeadsearchError as e:
            failed.append(str(e))
            report(f"warning: {e}; skipped")
    for start in range(0, len(crops), batch):
        part = crops[start : start + batch]
        vectors = embedder.embed([c for _, c in part])
        for row, (f, crop) in enumerate(part):
            v = {kind: np.asarray(vs[row], np.float32) for kind, vs in vectors.items() if np.any(vs[row])}
            samples.append(Sample(f.path, f.identity, f.state, v, "video frame", crop_yaw(crop)))
    return samples, failed


@dataclass
class ModelReport:
    """Verification results of one model on one labelled set."""

    spec: str
    model: ModelInfo | None = None
    error: str | None = None
    n_photos: int = 0
    n_tracks: int = 0
    n_frames: int = 0  # labelled heads of video frames
    failed: list[str] = field(default_factory=list)  # files that gave no sample
    evaluation: EvaluationReport = field(default_factory=EvaluationReport)
    ms_per_face: float | None = None  # embedder time per photo head crop (batches of up to 32), this machine, this run

    @property
    def measured(self) -> bool:
        return self.evaluation.measured

    def to_dict(self) -> dict:
        e = self.evaluation
        return {"spec": self.spec, "model": None if self.model is None else self.model.to_dict(), "error": self.error,
                "samples": e.n_samples, "photos": self.n_photos, "video_tracks": self.n_tracks, "video_frames": self.n_frames,
                "identities": e.n_identities,
                "pairs": dict(e.pairs), "protocols": e.protocols_dict(),
                "hierarchy": {"accuracy": e.hierarchy, "quadruples": e.quadruples, "vectors": str(e.head_kind)},
                "yaw_bands": {name: band.to_dict() for name, band in e.bands.items()},
                "problems": list(e.problems), "failed_files": list(self.failed), "ms_per_face": self.ms_per_face}


def evaluate_samples(report: ModelReport, samples: Sequence[Sample], fars: Sequence[float] = DEFAULT_FARS) -> ModelReport:
    """Fill `report` with the evaluation of these samples."""
    report.n_photos = sum(s.source == "photo" for s in samples)
    report.n_frames = sum(s.source == "video frame" for s in samples)
    report.n_tracks = len(samples) - report.n_photos - report.n_frames
    kinds = [VectorKind.ID] + ([VectorKind.HEAD] if samples and all(VectorKind.HEAD in s.vectors for s in samples) else [])
    vectors = {k: np.stack([s.vectors[k] for s in samples]) for k in kinds} if samples else {}
    spec = find_spec(report.model) if report.model is not None else None
    report.evaluation = evaluate(vectors, [s.identity for s in samples], [s.state for s in samples], fars,
                                 appearance_dims=spec.appearance_dims if spec is not None else 0,
                                 yaws=[s.yaw for s in samples])
    return report


def crop_yaw(crop: HeadCrop) -> float | None:
    """Degrees a head crop's face is turned (None without a face's landmarks)."""
    return yaw_from_landmarks(crop.landmarks) if crop.face_visible and crop.landmarks is not None else None


def run_accuracy(files: Sequence[LabeledFile], specs: Sequence[str], *, whole_image: bool = False,
                 settings: IndexSettings | None = None, fars: Sequence[float] = DEFAULT_FARS,
                 report: Report = print, progress: Report | None = None, error_log: Path | None = None) -> list[ModelReport]:
    """Each model's verification report on the labelled files; a model that fails is reported, not fatal,
    and so is a file (one line; an unexpected error's traceback goes to `error_log`/errors.log)."""
    settings = settings or IndexSettings()
    detector = FaceDetector.from_settings(settings)
    cache = BenchCache(error_log=error_log)
    frames = [f for f in files if f.time is not None]
    photos = [f for f in files if f.kind == MediaKind.IMAGE and f.time is None]
    videos = [f for f in files if f.kind == MediaKind.VIDEO and f.time is None]
    reports = []
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
        if progress:
            progress(f"{spec}: embedding {len(photos)} photos, {len(videos)} videos and {len(frames)} heads in video frames")
        t0 = time.perf_counter()
        clock = [0.0, 0]
        try:
            photo_samples, failed_photos = embed_photos(photos, embedder, detector, whole_image, cache, report_once, clock=clock)
            video_samples, failed_videos = embed_videos(videos, embedder, detector, settings, cache, report_once)
            frame_samples, failed_frames = embed_frames(frames, embedder, detector, settings, cache, report_once)
        except Exception as e:  # noqa: BLE001 - one broken model must not stop the others
            r.error = f"failed while embedding ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
            report(f"error: model {spec}: {r.error}")
            continue
        r.failed = failed_photos + failed_videos + failed_frames
        r.ms_per_face = 1000.0 * clock[0] / clock[1] if clock[1] else None
        evaluate_samples(r, photo_samples + video_samples + frame_samples, fars)
        log.info("%s: %d samples in %.1f s", spec, r.evaluation.n_samples, time.perf_counter() - t0)
    return reports


def calibration_report(library_model: ModelInfo, reports: Sequence[ModelReport], library_root: Path) -> ModelReport:
    """The benchmarked model that made the library (refused when none did)."""
    for r in reports:
        if r.model is not None and r.model.same_vectors_as(library_model):
            return r
    loaded = ", ".join(r.model.label() for r in reports if r.model) or "none loaded"
    raise ModelMismatch(f"{library_root}: library vectors were made by {library_model.label()}, but the benchmarked model is "
                        f"{loaded}; thresholds only hold for the model that made the library: bench with --model {library_model.name}")


def calibrated_thresholds(report: ModelReport, far: float) -> dict:
    """The thresholds record of one model's report at `far` (see `headsearch.evaluation.thresholds.calibrate`)."""
    if report.error or report.model is None:
        raise HeadsearchError(f"cannot calibrate {report.spec}: {report.error}")
    return calibrate(report.evaluation, far, report.model)


@dataclass(frozen=True)
class AccuracyOptions:
    """What one accuracy benchmark measures, and where its calibration goes."""

    set_csv: Path  # labelled set: CSV of path,identity[,appearance_state]
    models: tuple[str, ...] = ()  # model specs (empty: the library's model when calibrating it, else the default model)
    root: Path | None = None  # folder the set's relative paths start from (None: the CSV's folder)
    whole_image: bool = False  # photos are head crops already: the whole image, not the largest head
    settings: IndexSettings = field(default_factory=IndexSettings)  # sampling of videos, detection
    calibrate: float | None = None  # FAR at which to write thresholds (None: no calibration)
    thresholds_out: Path | None = None  # with calibrate: the first model's thresholds to this file, not to the library
    library: Path | None = None  # the library calibrated (and whose errors.log gets unexpected errors' tracebacks)


@dataclass
class AccuracyRun:
    """The results of one accuracy benchmark: each model's report on the set, and what was calibrated."""

    options: AccuracyOptions
    labels: LabelSet  # the set's usable files and the rows left out
    reports: list[ModelReport]  # one per model, in the order asked
    fars: tuple[float, ...] = DEFAULT_FARS
    calibration: dict | None = None  # the thresholds record written, with its "path"
    problems: list[str] = field(default_factory=list)  # what the evaluation could not measure, each once
    errors: list[HeadsearchError] = field(default_factory=list)  # failures after measuring (shown after the results)

    @property
    def partial(self) -> bool:
        """Some files of the set gave no sample: the models were measured on the others."""
        return any(r.failed for r in self.reports)

    @property
    def measured(self) -> bool:
        return any(r.measured for r in self.reports)

    def to_dict(self) -> dict:
        """{"set", "fars", "models": {spec: report}[, "calibration"]}."""
        out = {"set": self.labels.to_dict(), "fars": [float(f) for f in self.fars], "models": {r.spec: r.to_dict() for r in self.reports}}
        if self.calibration is not None:
            out["calibration"] = self.calibration
        return out


def bench_accuracy(options: AccuracyOptions, report: Report = print, progress: Report | None = None) -> AccuracyRun:
    """Read the set, measure every model on it, calibrate when asked. A model or file that fails is one line
    to `report`; a calibration that cannot be made, or a set on which nothing could be measured, is in
    `errors` (the results are still there to show). Raises HeadsearchError before measuring when the set
    has no usable row or the library to calibrate cannot be opened."""
    library = None
    if options.calibrate is not None and options.thresholds_out is None:
        from headsearch.store.library import Library

        if options.library is None:
            raise HeadsearchError("calibrating a library needs its folder")
        library = Library.open(options.library)  # fail before the long part when there is no library
    specs = list(dict.fromkeys(options.models)) or [library.model.name if library is not None else DEFAULT_MODEL]
    labels = read_label_set(options.set_csv, options.root)
    if labels.skipped_line():
        report(f"note: {labels.skipped_line()}")
    if not labels.files:
        raise HeadsearchError(f"{options.set_csv}: no usable rows (each needs a path and one identity)")
    error_log = options.library if options.library is not None and options.library.is_dir() else None
    reports = run_accuracy(labels.files, specs, whole_image=options.whole_image, settings=options.settings, report=report,
                           progress=progress, error_log=error_log)
    run = AccuracyRun(options, labels, reports, problems=list(dict.fromkeys(p for r in reports for p in r.evaluation.problems)))
    if options.calibrate is not None:
        try:
            run.calibration = _write_calibration(options, reports, library)
        except HeadsearchError as e:
            run.errors.append(e)
    if not run.measured:
        reasons = "; ".join(dict.fromkeys([r.error for r in reports if r.error]
                                          + [p for r in reports for p in r.evaluation.problems if not p.startswith("hierarchy")]))
        run.errors.append(HeadsearchError(f"nothing could be measured on {options.set_csv}" + (f": {reasons}" if reasons else "")))
    return run


def _write_calibration(options: AccuracyOptions, reports: Sequence[ModelReport], library) -> dict:
    """Thresholds at the options' FAR, written to their file or the library; the record with its path."""
    if options.thresholds_out is not None:
        thresholds = calibrated_thresholds(reports[0], options.calibrate)
        path = write_thresholds_file(options.thresholds_out, thresholds)
    else:
        thresholds = calibrated_thresholds(calibration_report(library.model, reports, library.root), options.calibrate)
        path = write_thresholds(library.root, thresholds)
    return {**thresholds, "path": str(path)}
