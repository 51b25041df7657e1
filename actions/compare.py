"""`compare`'s analysis: each video analysed as `index` analyses it (shots, heads found and tracked, evidence), with
every sampled sighting embedded (not one a second), then scored against the reference people by the core
(`headsearch.compare.timeline`). Nothing is stored. A reference clip gives its main person (`main_track`), as
`bench accuracy` takes a one-person video's labelled track.

The actions: `compare(request)` and `cast(request)` (a `CompareRequest`, `actions.requests`) give a `CompareResult` or a
`CastResult`, whose `to_json()` is what `compare --json` (`--cast --json`) prints, an entry per video, and the web app's
compare (cast) job answers its video's entry. The CLI and the web app open the comparison first (`open_comparison`: the
model, the bars and the references, refused in one line before any video is read), then run it (`CompareSession`).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from actions.requests import CompareRequest, ReferenceSpec
from actions.session import AnalysisSession
from headsearch.basics.errors import HeadsearchError, MediaError
from headsearch.basics.failures import file_failures
from headsearch.basics.media import media_kind
from headsearch.basics.settings import IndexSettings
from headsearch.basics.timeline import probe_timing
from headsearch.compare.cast import CastRun, CastVideo, cast_heads
from headsearch.compare.reference import Reference, ReferenceHead, track_heads
from headsearch.compare.spec import CompareSpec
from headsearch.compare.timeline import CompareSettings, Comparison, compare_analysis
from headsearch.evaluation.thresholds import Thresholds
from indexer.analysis import FrameProgress, analyse_file
from schemas.records import FileResult, HeadTrack, MediaKind

EVERY_FRAME_FPS = 1000.0  # a sample rate above any video's frame rate: every decoded frame is sampled


def compare_settings(settings: IndexSettings, fps: float | None = None, every_frame: bool = False) -> IndexSettings:
    """The indexer's settings for a comparison: every sampled sighting embedded; `fps` samples a second (default: the
    indexer's), or every frame."""
    sample_fps = EVERY_FRAME_FPS if every_frame else (fps or settings.sample_fps)
    return replace(settings, embed_every_s=0.0, sample_fps=sample_fps)


def main_track(tracks: Sequence[HeadTrack]) -> HeadTrack | None:
    """A clip's main person: the longest track with an embedded face (most sightings), the one with the largest mean
    head box on a tie; None when no track has an embedded face."""
    candidates = [tr for tr in tracks if any(o.face_visible and o.embeddings for o in tr.observations)]
    if not candidates:
        return None
    return max(candidates, key=lambda tr: (len(tr.observations), float(np.mean([o.head.area for o in tr.observations]))))


@dataclass
class VideoCompared:
    """One video's comparisons (one per reference), or why it could not be compared."""

    path: Path
    comparisons: list[Comparison]
    error: str | None = None
    seconds: float = 0.0  # wall time of the analysis and scoring
    cast: CastVideo | None = None  # in cast mode: every head of every sampled frame, with its character


class Comparer:
    """Analyses videos with the model and detector of an analysis session (loaded once) and scores them against
    reference people."""

    def __init__(self, session: AnalysisSession, thresholds: Thresholds, settings: IndexSettings, compare: CompareSettings | None = None):
        self.session = session
        self.embedder = session.embedder
        self.detector = session.detector
        self.thresholds = thresholds
        self.settings = settings
        self.compare = compare or CompareSettings()
        self.appearance_dims = session.appearance_dims

    @classmethod
    def of(cls, session: AnalysisSession, fps: float | None = None, every_frame: bool = False, compare: CompareSettings | None = None,
           thresholds: Thresholds | None = None) -> Comparer:
        """The one way a comparer is made (`compare`, the web app's Compare page, `bench compare`): the session's model
        and detector, its bars (the library's thresholds.json, else the model's; or `thresholds`: a spec's), refused in
        one line when there are none; its settings sampled at `fps` or every frame, every sampled sighting embedded."""
        thresholds = thresholds or session.bars("compare tiers frames")
        return cls(session, thresholds, compare_settings(session.settings, fps, every_frame), compare)

    @property
    def spec(self) -> CompareSpec:
        """What decides this comparer's verdicts (`headsearch.compare.spec`)."""
        return CompareSpec.of(self.embedder.describe(), self.thresholds, self.settings, self.compare)

    def analyse(self, path: Path, progress: FrameProgress | None = None, sample_at: Sequence[float] = ()) -> FileResult:
        path = Path(path)
        if not path.is_file():
            raise MediaError(f"{path}: no such file" if not path.exists() else f"{path}: not a file")
        result = analyse_file(path, self.settings, self.detector, self.embedder, progress=progress, sample_at=sample_at)
        if result.kind != MediaKind.VIDEO:
            raise MediaError(f"{path}: a photo, not a video (compare takes videos; give photos as --ref)")
        return result

    def seam_times(self, path: Path) -> list[float]:
        """For a clip generated in chunks: the times of the frames on either side of each seam, sampled too."""
        if not self.compare.chunk_frames:
            return []
        timing = probe_timing(path)
        if timing is None:
            return []
        return sorted({timing.time_of(f) for at in self.compare.seam_frames(timing.frames) for f in (at - 1, at)})

    def video_heads(self, path: Path, progress: FrameProgress | None = None) -> tuple[list[ReferenceHead], str]:
        """The sightings of a reference clip's main person, and what they are in words."""
        result = self.analyse(path, progress)
        track = main_track(result.tracks)
        if track is None:
            raise HeadsearchError(f"{path}: no head with a visible face in this clip (sampled {result.frames_sampled} frames); "
                                  "it cannot be a reference")
        return track_heads(track), f"{path}: its main person ({len(track.observations)} sightings, {track.start:.3f}-{track.end:.3f} s)"

    def compare_video(self, path: Path, references: Sequence[Reference], progress: FrameProgress | None = None) -> list[Comparison]:
        result = self.analyse(path, progress, self.seam_times(path))
        return compare_analysis(result, references, self.thresholds, self.appearance_dims, self.compare)

    def cast_video(self, path: Path, references: Sequence[Reference], progress: FrameProgress | None = None) -> CastVideo:
        """A video in cast mode: every head of every sampled frame with the character its track went to."""
        result = self.analyse(path, progress, self.seam_times(path))
        shots = sorted(result.shots, key=lambda s: s.start_frame)
        return CastVideo(result.path, cast_heads(result, references, self.thresholds, self.appearance_dims),
                         [(s.start_time, s.end_time) for s in shots], result.duration, shots[0].start_time if shots else 0.0)

    def compare_videos(self, paths: Sequence[Path], references: Sequence[Reference], progress: FrameProgress | None = None,
                       error_log: Path | None = None, on_start: Callable[[Path], None] | None = None,
                       cast: bool = False) -> Iterator[VideoCompared]:
        """Each video compared in turn (`cast`: in cast mode); a video that cannot be read gives its one line and the
        others go on."""
        for path in paths:
            if on_start is not None:
                on_start(Path(path))
            t0 = time.perf_counter()
            try:
                with file_failures(Path(path), error_log):
                    if cast:
                        yield VideoCompared(Path(path), [], None, time.perf_counter() - t0, self.cast_video(Path(path), references, progress))
                        continue
                    comparisons = self.compare_video(Path(path), references, progress)
            except HeadsearchError as e:
                yield VideoCompared(Path(path), [], str(e), time.perf_counter() - t0)
                continue
            except OSError as e:
                yield VideoCompared(Path(path), [], f"{path}: cannot read file ({e.strerror or e})", time.perf_counter() - t0)
                continue
            yield VideoCompared(Path(path), comparisons, None, time.perf_counter() - t0)


def build_reference(spec: ReferenceSpec, comparer: Comparer, head: int | None = None, whole_image: bool = False,
                    progress: FrameProgress | None = None) -> Reference:
    """One reference from all its sources: their heads averaged into one template. Photos with `labels` (uploads) are
    taken as they are and named by them."""
    session = comparer.session
    heads: list[ReferenceHead] = []
    sources: list[str] = []
    name = spec.name
    if spec.photos:
        labels = list(spec.labels) or None
        heads += session.photo_heads(spec.photos, head, whole_image, labels=labels)
        sources += labels or [str(p) for p in spec.photos]
        name = name or Path((labels or spec.photos)[0]).stem
    for video in spec.videos:
        found, said = comparer.video_heads(Path(video), progress)
        heads += found
        sources.append(said)
        name = name or Path(video).stem
    for key in spec.persons:
        person_name, found, said = session.person_heads(key)
        heads += found
        sources.append(said)
        name = name or person_name
    if not heads:
        raise HeadsearchError("no reference: give --ref PHOTO, --ref-video CLIP or --person NAME")
    return Reference.of(name or "reference", heads, sources)


class CompareSession:
    """The model, thresholds and references of one comparison or cast (`open_comparison`), run over videos: what the
    CLI, the web app's jobs and `compare()`/`cast()` share."""

    def __init__(self, comparer: Comparer, references: list[Reference], error_log: Path | None = None):
        self.comparer = comparer
        self.references = references
        self.error_log = error_log

    @property
    def spec(self) -> CompareSpec:
        """What decides this run's verdicts (`headsearch.compare.spec`)."""
        return self.comparer.spec

    def run(self, paths: Sequence[Path], cast: bool = False, progress: FrameProgress | None = None,
            on_start: Callable[[Path], None] | None = None) -> Iterator[VideoCompared]:
        """Each video compared in turn (folders: the videos under them, recursively, in name order); `cast`: in cast mode."""
        yield from self.comparer.compare_videos(video_paths(paths), self.references, progress, self.error_log, on_start, cast)

    def compare(self, paths: Sequence[Path], progress: FrameProgress | None = None, on_start: Callable[[Path], None] | None = None,
                on_video: Callable[[VideoCompared], None] | None = None) -> CompareResult:
        """The videos compared with the references (`on_video`: told each video's outcome as it is done)."""
        result = CompareResult(self.spec)
        for item in self.run(paths, False, progress, on_start):
            if on_video is not None:
                on_video(item)
            if item.error:
                result.failed.append((str(item.path), item.error))
            else:
                result.comparisons += item.comparisons
        return result

    def cast(self, paths: Sequence[Path], progress: FrameProgress | None = None, on_start: Callable[[Path], None] | None = None,
             on_video: Callable[[VideoCompared], None] | None = None) -> CastResult:
        """The videos in cast mode: every track to one of the references (the characters) or to nobody."""
        casts, failed = [], []
        for item in self.run(paths, True, progress, on_start):
            if on_video is not None:
                on_video(item)
            if item.error:
                failed.append((str(item.path), item.error))
            elif item.cast is not None:
                casts.append(item.cast)
        return CastResult(self.spec, CastRun([r.name for r in self.references], casts), failed)


def video_paths(paths: Sequence[Path]) -> list[Path]:
    """The videos named, with those under named folders (recursively, as `index` walks them); a name that is not a
    folder stays as given (a missing or unreadable one is its own one line later)."""
    from indexer.pipeline import discover

    out: list[Path] = []
    for p in paths:
        if Path(p).is_dir():
            out += [f for f in discover([Path(p)])[0] if media_kind(f) == MediaKind.VIDEO]
        else:
            out.append(Path(p))
    return list(dict.fromkeys(out))


def open_comparison(request: CompareRequest, session: AnalysisSession | None = None,
                    progress: FrameProgress | None = None) -> CompareSession:
    """The request's model (a library's own, where a library is named: its persons and its thresholds are then used),
    its thresholds and its references made (`progress` follows a reference clip's analysis); HeadsearchError with one
    line when any of it cannot be done. `session`: an analysis session open already (the web app's), used instead of
    opening the request's library and model. A spec decides the model, the bars, the sample rate and every setting
    (the request's are then not taken), and refuses weights other than its own."""
    spec = request.spec
    settings, model, fps, every_frame = None, request.model, request.fps, request.every_frame
    compare = CompareSettings(min_segment_s=request.min_segment, chunk_frames=request.chunk_frames, chunk_overlap=request.chunk_overlap)
    if spec is not None:
        settings, compare, model, fps, every_frame = spec.index_settings(), spec.compare_settings(), model or spec.model["source"], None, False
    session = session or AnalysisSession.open(request.library, model, settings)
    bars = None
    if spec is not None:
        spec.check(session.embedder.describe())
        bars = spec.thresholds_for(session.embedder.describe())
    comparer = Comparer.of(session, fps, every_frame, compare, bars)
    references = [build_reference(one, comparer, request.ref_head, request.whole_image, progress) for one in request.references]
    names = [r.name for r in references]
    if len(set(names)) != len(names):
        raise HeadsearchError(f"two references are named {next(n for n in names if names.count(n) > 1)!r}: give each its own --name")
    return CompareSession(comparer, references, session.library_root)


def compare(request: CompareRequest, progress: FrameProgress | None = None) -> CompareResult:
    """The request's videos compared with its references (`headsearch compare`): each video's comparisons, or its one
    line; HeadsearchError with one line when the model, the bars or a reference cannot be had."""
    return open_comparison(request, progress=progress).compare(request.videos, progress)


def cast(request: CompareRequest, progress: FrameProgress | None = None) -> CastResult:
    """The request's videos in cast mode (`compare --cast`): its references are the characters."""
    return open_comparison(request, progress=progress).cast(request.videos, progress)


@dataclass
class CompareResult:
    """A comparison's outcome: each video's comparison with each reference, the videos that could not be compared
    (with their one line), and the spec that decided the verdicts."""

    spec: CompareSpec
    comparisons: list[Comparison] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (video, why)

    def entry(self, comparison: Comparison, frames: bool = True) -> dict:
        """One comparison as `compare --json` prints it and the web's compare job answers it."""
        return {**comparison.to_dict(frames=frames), "spec": self.spec.digest}

    def to_json(self, frames: bool = True) -> list[dict]:
        """What `compare --json` prints: an entry per video and reference, then one per video not compared."""
        return [self.entry(c, frames) for c in self.comparisons] + [{"video": v, "error": e} for v, e in self.failed]

    def gate_lines(self, fail_under: float | None, fail_under_look: float | None = None) -> list[str]:
        """A line for each comparison whose same-person (same-look) share of its head frames is under the gate."""
        from headsearch.basics.text import printable

        lines = []
        for c in self.comparisons:
            for bar, share, what, flag in ((fail_under, c.same_person_share, "same person", "--fail-under"),
                                           (fail_under_look, c.same_look_share, "same look", "--fail-under-look")):
                if bar is not None and share < bar:
                    lines.append(f"gate: {printable(c.video)} vs {printable(c.reference.name)}: {what} on {100 * share:.1f}% of its "
                                 f"head frames, under {flag} {100 * bar:g}%")
        return lines

    def write_report(self, folder: Path) -> Path:
        """An HTML page per comparison (and for several, index.html and leaderboard.csv); the page to open first."""
        from headsearch.compare.report import write_report

        return write_report(folder, self.comparisons, self.failed)


@dataclass
class CastResult:
    """A cast's outcome: every video's heads with their characters (`CastRun`), the videos that could not be cast, and
    the spec that decided it."""

    spec: CompareSpec
    run: CastRun
    failed: list[tuple[str, str]] = field(default_factory=list)  # (video, why)

    def to_json(self, frames: bool = True) -> list[dict]:
        """What `compare --cast --json` prints: an entry per video (the web's cast job answers its video's), then one per
        video not cast."""
        return ([{**entry, "spec": self.spec.digest} for entry in self.run.to_json(frames=frames)]
                + [{"video": v, "error": e} for v, e in self.failed])

    def gate_lines(self, fail_under: float | None, fail_under_look: float | None = None) -> list[str]:
        """A line for each character whose same-person (same-look) share over the run is under the gate."""
        from headsearch.compare.cast import gate_lines

        return gate_lines(self.run, fail_under, fail_under_look)

    def write_report(self, folder: Path) -> Path:
        """cast.csv and cast.html in `folder`; the page."""
        from headsearch.basics.files import write_bytes_atomic
        from headsearch.compare.cast import cast_page

        try:
            folder.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(folder / "cast.csv", self.run.csv_text().encode())
            write_bytes_atomic(folder / "cast.html", cast_page(self.run).encode())
        except OSError as e:
            raise HeadsearchError(f"{folder}: cannot write the cast report ({e.strerror or e})") from e
        return folder / "cast.html"
