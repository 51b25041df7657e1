"""`compare`'s analysis: each video analysed as `index` analyses it (shots, heads found and tracked, evidence), with
every sampled sighting embedded (not one a second), then scored against the reference people by the core
(`headsearch.compare.timeline`). Nothing is stored. A reference clip gives its main person (`main_track`), as
`bench accuracy` takes a one-person video's labelled track.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from actions.session import AnalysisSession
from headsearch.basics.errors import HeadsearchError, MediaError
from headsearch.basics.failures import file_failures
from headsearch.basics.media import media_kind
from headsearch.basics.settings import IndexSettings
from headsearch.basics.timeline import probe_timing
from headsearch.compare.cast import CastVideo, cast_heads
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

    def entry(self, comparison: Comparison, frames: bool = True) -> dict:
        """One comparison as `compare --json` prints it and the web app's compare job answers it: with the digest of the
        spec that decided it (`frames`: with its frames)."""
        return {**comparison.to_dict(frames=frames), "spec": self.spec.digest}

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


@dataclass
class ReferenceSpec:
    """One reference person as the user gave it: photos (files or folders), clips (their main person) and persons of a
    library, all of one person, under one name (default: the first source's)."""

    name: str | None = None
    photos: list[Path] = field(default_factory=list)
    videos: list[Path] = field(default_factory=list)
    persons: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.photos or self.videos or self.persons)


def build_reference(spec: ReferenceSpec, comparer: Comparer, head: int | None = None, whole_image: bool = False,
                    progress: FrameProgress | None = None) -> Reference:
    """One reference from all its sources: their heads averaged into one template."""
    session = comparer.session
    heads: list[ReferenceHead] = []
    sources: list[str] = []
    name = spec.name
    if spec.photos:
        heads += session.photo_heads(spec.photos, head, whole_image)
        sources += [str(p) for p in spec.photos]
        name = name or Path(spec.photos[0]).stem
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
    """The model, thresholds and references of one `compare` run (`open_comparison`), run over videos."""

    def __init__(self, comparer: Comparer, references: list[Reference], progress: bool = False, error_log: Path | None = None):
        self.comparer = comparer
        self.references = references
        self.progress = progress
        self.error_log = error_log

    @property
    def spec(self) -> CompareSpec:
        """What decides this run's verdicts (`headsearch.compare.spec`)."""
        return self.comparer.spec

    def run(self, paths: Sequence[Path], cast: bool = False) -> Iterator[VideoCompared]:
        """Each video compared in turn (folders: the videos under them, recursively, in name order); `cast`: in cast mode."""
        from tqdm import tqdm

        paths = video_paths(paths)

        bar = tqdm(desc="frames", unit="frame", disable=not self.progress, leave=False)
        try:
            def started(path: Path) -> None:
                bar.set_description(Path(path).name[:40])

            yield from self.comparer.compare_videos(paths, self.references, bar, self.error_log, started, cast)
        finally:
            bar.close()


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


def open_comparison(specs: Sequence[ReferenceSpec], model: str | None = None, library: Path | None = None, fps: float | None = None,
                    every_frame: bool = False, compare: CompareSettings | None = None, ref_head: int | None = None,
                    whole_image: bool = False, progress: bool = False, settings: IndexSettings | None = None,
                    spec: CompareSpec | None = None) -> CompareSession:
    """Load the model (a library's own, where a library is named: its persons and its thresholds are then used), its
    thresholds, and make the references; HeadsearchError with one line when any of it cannot be done. A `spec` decides
    the model, the bars, the sample rate and every setting (`fps`, `every_frame`, `compare` and `settings` are then
    not taken), and refuses weights other than its own."""
    from tqdm import tqdm

    if spec is not None:
        settings, compare, model, fps, every_frame = spec.index_settings(), spec.compare_settings(), model or spec.model["source"], None, False
    session = AnalysisSession.open(library, model, settings)
    bars = None
    if spec is not None:
        spec.check(session.embedder.describe())
        bars = spec.thresholds_for(session.embedder.describe())
    comparer = Comparer.of(session, fps, every_frame, compare, bars)
    references = []
    bar = tqdm(desc="reference", unit="frame", disable=not progress, leave=False)
    try:
        for one in specs:
            references.append(build_reference(one, comparer, ref_head, whole_image, bar))
    finally:
        bar.close()
    names = [r.name for r in references]
    if len(set(names)) != len(names):
        raise HeadsearchError(f"two references are named {next(n for n in names if names.count(n) > 1)!r}: give each its own --name")
    return CompareSession(comparer, references, progress, session.library_root)
