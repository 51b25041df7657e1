"""How well `compare` answers "is this still the same person?" on labelled clips.

Every one-person clip of the labelled sets is analysed once, as `compare` analyses it, then scored:
- against its own person's reference: the identity's photos in the sets where there are some, else another clip of
  the identity (its main person), else a still of the clip itself (its largest head at `still_at` seconds: a
  generation team's source frame). The share of its head frames called the same person, its drift events (a
  consistent clip should raise none), the FaceSim-style number beside the head-based share, its faceless head frames;
- against every other identity's reference: the share of its head frames called `other_person`;
- joined clips: the first seconds of two people's clips joined into one video (`--joins N` pairs), compared with the
  first person's reference: where the report says the person changes, against where the join is.

A benchmark run enters through `bench_compare(CompareBenchOptions(...))`, which returns a `CompareBenchRun`.
"""
from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from actions.compare import Comparer, main_track
from actions.session import LARGEST, AnalysisSession
from headsearch.basics.errors import HeadsearchError
from headsearch.basics.frames import frame_at
from headsearch.basics.settings import IndexSettings
from headsearch.compare.reference import Reference, track_heads
from headsearch.compare.timeline import RANK, SAME_PERSON, Comparison, compare_analysis
from headsearch.detection.faces import FaceDetector
from headsearch.embedding.photo_heads import PhotoEmbedder
from headsearch.evaluation.labels import LabeledFile, read_label_set
from headsearch.evaluation.thresholds import measure_frame_noise, write_frame_noise
from indexer.analysis import analyse_file
from schemas.records import FileResult, MediaKind, Tier

log = logging.getLogger(__name__)

Report = Callable[[str], None]
JOIN_SECONDS = 4.0  # seconds of each clip in a joined clip
JOIN_FPS = 25


@dataclass(frozen=True)
class CompareBenchOptions:
    sets: tuple[Path, ...]  # labelled sets (CSV path,identity[,appearance_state])
    model: str | None = None
    joins: int = 3  # joined clips of two people
    still_at: float = 0.5  # seconds into a clip: its own still, where its identity has no photo and no other clip
    work_dir: Path | None = None  # where joined clips are written (default: a temporary folder)
    settings: IndexSettings = field(default_factory=IndexSettings)
    noise_out: Path | None = None  # a thresholds file of the model: the frame noise of the own clips is written into it
    speed_video: Path | None = None  # timed against the indexer's analysis (default: the labelled clip nearest 10 s)


@dataclass
class ClipScore:
    """One clip against its own person and the others."""

    video: str
    identity: str
    reference: str  # how its own reference was made: "photos", "another clip", "own still"
    duration: float
    seconds: float  # analysis time
    own: dict  # the own comparison's summary
    own_drifts: int
    others: dict[str, float]  # other identity -> share of head frames called other_person
    series: dict[str, np.ndarray] = field(default_factory=dict, repr=False)  # the own comparison's frame scores, in time order

    @property
    def same_person_share(self) -> float:
        return self.own["same_person_share"]

    @property
    def worst_other(self) -> float | None:
        return min(self.others.values()) if self.others else None

    def to_dict(self) -> dict:
        return {"video": self.video, "identity": self.identity, "reference": self.reference, "duration": round(self.duration, 3),
                "seconds": round(self.seconds, 3), "own": self.own, "own_drifts": self.own_drifts,
                "others": {k: round(v, 4) for k, v in self.others.items()}, "worst_other_person_share": self.worst_other}


@dataclass
class JoinScore:
    """A joined clip of two people: where the change was reported against where the join is."""

    first: str
    second: str
    join: float  # the second clip's first frame, seconds
    reported: float | None  # the first drift event to another person (else where the first segment of another person starts)
    verdict: str
    drifts: int = 0

    @property
    def error(self) -> float | None:
        return None if self.reported is None else abs(self.reported - self.join)

    def to_dict(self) -> dict:
        return {"first": self.first, "second": self.second, "join": round(self.join, 3),
                "reported": None if self.reported is None else round(self.reported, 3),
                "error": None if self.error is None else round(self.error, 3), "verdict": self.verdict, "drifts": self.drifts}


@dataclass
class CompareBenchRun:
    options: CompareBenchOptions
    model: str
    clips: list[ClipScore]
    joins: list[JoinScore]
    failed: list[str]
    index_seconds: dict[str, float] = field(default_factory=dict)  # one clip: compare's analysis, and the indexer's
    frame_noise: dict | None = None  # measured on the own clips and written (`noise_out`)
    noise_in_use: dict | None = None  # the frame noise the drift events above were held to (from the model's thresholds)

    def to_dict(self) -> dict:
        return {"model": self.model, "clips": [c.to_dict() for c in self.clips], "joins": [j.to_dict() for j in self.joins],
                "failed": list(self.failed), "index_seconds": self.index_seconds, "frame_noise": self.frame_noise,
                "noise_in_use": self.noise_in_use}


def join_clips(first: Path, second: Path, out: Path, seconds: float = JOIN_SECONDS, fps: int = JOIN_FPS) -> float:
    """The first `seconds` of two clips as one H.264 video at `fps` (the second resized to the first's frame size); the
    time of the second clip's first frame in it."""
    import av

    def frames(path: Path):
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            t0 = None
            for frame in container.decode(stream):
                if frame.time is None:
                    continue
                t0 = frame.time if t0 is None else t0
                if frame.time - t0 >= seconds:
                    break
                yield frame.to_ndarray(format="rgb24")

    with av.open(str(out), "w") as container:
        stream = None
        n = 0
        join = 0.0
        for part, path in enumerate((first, second)):
            if part == 1:
                join = n / fps
            for rgb in frames(path):
                if stream is None:
                    h, w = (rgb.shape[0] // 2) * 2, (rgb.shape[1] // 2) * 2
                    stream = container.add_stream("libx264", rate=fps, options={"preset": "ultrafast"})
                    stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
                rgb = cv2.resize(rgb, (stream.width, stream.height), interpolation=cv2.INTER_AREA)
                frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
                frame.pts = n
                for packet in stream.encode(frame):
                    container.mux(packet)
                n += 1
        for packet in stream.encode():
            container.mux(packet)
    return join


def switch_time(c: Comparison) -> float | None:
    """Where the person changed: the start of the first segment of another person (or no head) after a segment of the
    reference person."""
    seen = False
    for s in c.segments:
        if s.tier in SAME_PERSON:
            seen = True
        elif seen and (s.tier == str(Tier.OTHER_PERSON) or s.tier not in RANK):
            return s.start
    return None


class _Clips:
    """Analyses and references of the labelled clips, each made once."""

    def __init__(self, comparer: Comparer, files: Sequence[LabeledFile], still_at: float, report: Report):
        self.comparer, self.session, self.still_at, self.report = comparer, comparer.session, still_at, report
        self.videos = [f for f in files if f.kind == MediaKind.VIDEO]
        self.photo_files: dict[str, list[Path]] = {}
        for f in files:
            if f.kind == MediaKind.IMAGE:
                self.photo_files.setdefault(f.identity, []).append(f.path)
        self.results: dict[Path, FileResult] = {}
        self.seconds: dict[Path, float] = {}
        self._photo_refs: dict[str, Reference | None] = {}

    def analysis(self, f: LabeledFile) -> FileResult:
        if f.path not in self.results:
            t0 = time.perf_counter()
            self.results[f.path] = self.comparer.analyse(f.path)
            self.seconds[f.path] = time.perf_counter() - t0
        return self.results[f.path]

    def photo_reference(self, identity: str) -> Reference | None:
        """An identity's photos as one template (each photo's largest head, as a query takes it)."""
        if identity not in self._photo_refs:
            paths = self.photo_files.get(identity, [])
            self._photo_refs[identity] = self.session.photo_reference(
                paths, identity, LARGEST, labels=[str(p) for p in paths], sources=["photos"],
                skip=lambda error: self.report(f"warning: {error}; left out of {identity}'s reference")) if paths else None
        return self._photo_refs[identity]

    def track_reference(self, f: LabeledFile) -> Reference | None:
        track = main_track(self.analysis(f).tracks)
        return Reference.of(f.identity, track_heads(track), [f"{f.path.name}: its main person"]) if track is not None else None

    def still_reference(self, f: LabeledFile) -> Reference | None:
        result = self.analysis(f)
        start = result.samples[0][1] if result.samples else 0.0
        try:
            still = frame_at(f.path, start + self.still_at)
        except HeadsearchError:
            return None
        return self.session.photo_reference([still], f.identity, LARGEST, labels=[f"{f.path} at {self.still_at:g} s"],
                                            sources=[f"{f.path.name} at {self.still_at:g} s"], skip=lambda _: None)

    def own_reference(self, f: LabeledFile) -> tuple[Reference | None, str]:
        """The clip's own person as a reference, and how it was made."""
        ref = self.photo_reference(f.identity)
        if ref is not None:
            return ref, "photos"
        for other in self.videos:
            if other.identity == f.identity and other.path != f.path:
                ref = self.track_reference(other)
                if ref is not None:
                    return ref, "another clip"
        return self.still_reference(f), "own still"

    def identity_reference(self, identity: str) -> Reference | None:
        """An identity's reference for other clips: its photos, else its first clip's main person."""
        ref = self.photo_reference(identity)
        if ref is not None:
            return ref
        first = next((v for v in self.videos if v.identity == identity), None)
        return self.track_reference(first) if first is not None else None


def _score_clip(clips: _Clips, f: LabeledFile, refs: dict[str, Reference]) -> ClipScore | None:
    comparer = clips.comparer
    result = clips.analysis(f)
    own, how = clips.own_reference(f)
    if own is None:
        return None
    mine = compare_analysis(result, [own], comparer.thresholds, comparer.appearance_dims, comparer.compare)[0]
    others = {}
    for identity, ref in refs.items():
        if identity == f.identity:
            continue
        c = compare_analysis(result, [ref], comparer.thresholds, comparer.appearance_dims, comparer.compare)[0]
        heads = c.head_frames
        others[identity] = sum(fr.tier == str(Tier.OTHER_PERSON) for fr in heads) / len(heads) if heads else 1.0
    series = {kind: np.array([getattr(fr, kind) for fr in mine.frames if getattr(fr, kind) is not None and not fr.carried])
              for kind in ("identity", "head")}
    return ClipScore(str(f.path), f.identity, how, result.duration, clips.seconds[f.path], mine.summary(), len(mine.drifts), others,
                     series)


def bench_compare(options: CompareBenchOptions, report: Report = print, progress: Report | None = None) -> CompareBenchRun:
    """Measure `compare` on the labelled clips of the sets (see the module's docstring)."""
    files: list[LabeledFile] = []
    for csv_path in options.sets:
        labels = read_label_set(csv_path)
        files += labels.files
    if not any(f.kind == MediaKind.VIDEO for f in files):
        raise HeadsearchError("no labelled one-person clips in " + ", ".join(map(str, options.sets)))
    photos = PhotoEmbedder(options.model, detector=FaceDetector.from_settings(options.settings))
    comparer = Comparer.of(AnalysisSession(photos, settings=options.settings))
    embedder, thresholds = comparer.embedder, comparer.thresholds
    clips = _Clips(comparer, files, options.still_at, report)
    failed: list[str] = []
    usable: list[LabeledFile] = []
    for f in clips.videos:
        if progress:
            progress(f"analysing {f.path.name}")
        try:
            clips.analysis(f)
            usable.append(f)
        except HeadsearchError as e:
            failed.append(str(e))
            report(f"warning: {e}; skipped")
    refs = {ident: ref for ident in dict.fromkeys(f.identity for f in usable) if (ref := clips.identity_reference(ident)) is not None}
    scores = [s for f in usable if (s := _score_clip(clips, f, refs)) is not None]
    joins = _joins(clips, usable, options, progress)
    run = CompareBenchRun(options, embedder.describe().label(), scores, joins, failed, noise_in_use=thresholds.frame_noise)
    if options.noise_out is not None and scores:
        series = {kind: [c.series[kind] for c in scores if len(c.series.get(kind, ())) >= 2] for kind in ("identity", "head")}
        run.frame_noise = measure_frame_noise(series, comparer.settings.sample_fps)
        write_frame_noise(options.noise_out, embedder.describe(), run.frame_noise)
    speed = options.speed_video or (min((f.path for f in usable), key=lambda v: abs(clips.results[v].duration - 10.0)) if usable else None)
    if speed is not None:
        run.index_seconds = _speed(comparer, Path(speed), options.settings, refs)
    return run


def _speed(comparer: Comparer, video: Path, settings: IndexSettings, refs: dict[str, Reference]) -> dict:
    """Seconds of `compare`'s analysis and scoring of one video, and of the indexer's analysis of it (what `index` does
    before it stores), one after the other with the models loaded."""
    t0 = time.perf_counter()
    result = comparer.analyse(video)
    compare_analysis(result, list(refs.values())[:1], comparer.thresholds, comparer.appearance_dims, comparer.compare)
    t1 = time.perf_counter()
    analyse_file(video, settings, comparer.detector, comparer.embedder)
    t2 = time.perf_counter()
    return {"video": str(video), "duration": round(result.duration, 3), "compare_analysis_s": round(t1 - t0, 3), "index_analysis_s": round(t2 - t1, 3)}


def _joins(clips: _Clips, usable: list[LabeledFile], options: CompareBenchOptions, progress: Report | None) -> list[JoinScore]:
    """Clips of two different people joined, the first person's reference compared with the joined clip."""
    pairs = []
    for i, a in enumerate(usable):
        b = next((b for b in usable[i + 1:] + usable[:i] if b.identity != a.identity), None)
        if b is not None and len(pairs) < options.joins:
            pairs.append((a, b))
    if not pairs:
        return []
    out = []
    with tempfile.TemporaryDirectory(dir=options.work_dir) as tmp:
        for a, b in pairs:
            own, _ = clips.own_reference(a)
            if own is None:
                continue
            if progress:
                progress(f"joining {a.path.name} and {b.path.name}")
            joined = Path(tmp) / f"{a.path.stem}+{b.path.stem}.mp4"
            join = join_clips(a.path, b.path, joined)
            result = clips.comparer.analyse(joined)
            c = compare_analysis(result, [own], clips.comparer.thresholds, clips.comparer.appearance_dims, clips.comparer.compare)[0]
            drift = next((d.time for d in c.drifts if d.after == str(Tier.OTHER_PERSON)), None)
            out.append(JoinScore(str(a.path), str(b.path), join, drift if drift is not None else switch_time(c), c.verdict, len(c.drifts)))
    return out


def shares_line(values: Sequence[float]) -> str:
    return "n/a" if not values else f"min {min(values):.3f}, mean {float(np.mean(values)):.3f}"
