"""What a dataset build reads: the video files under the paths given, and the labelled sets' photos and one-person
videos (CSV files read by `headsearch.evaluation.labels.read_label_set`)."""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from headsearch.basics.media import VIDEO_EXTENSIONS
from headsearch.evaluation.labels import read_label_set
from schemas.records import MediaKind
from trainer.dataset_format import DatasetError
from trainer.dataset_summary import BuildSummary, Report


@dataclass
class LabelPhoto:
    path: Path
    identity: str  # "label:<name>"
    state: str  # "label:<name>/<state or default>"


@dataclass
class Inputs:
    """What a build reads: video files and labelled photos."""

    videos: list[Path]
    photos: list[LabelPhoto]
    unreadable: int  # paths that could not be read at all
    labelled_videos: dict[Path, LabelPhoto] = field(default_factory=dict)  # one-person videos with a label

    def items(self) -> list[tuple[Path, str]]:
        """(file, source) for every input, videos first; source is "video" or "photo"."""
        return [(f, "video") for f in self.videos] + [(p.path, "photo") for p in self.photos]


def collect_labels(csvs: Sequence[Path], summary: BuildSummary, report: Report) -> tuple[list[LabelPhoto], dict[Path, LabelPhoto]]:
    """The labelled photos, and the labelled one-person videos by path (their person's segments take the label)."""
    photos, videos, seen = [], {}, set()
    skipped = Counter()
    for csv_path in csvs:
        ls = read_label_set(Path(csv_path))
        for reason, k in ls.skipped.items():
            skipped[reason] += k
        for f in ls.files:
            p = f.path.resolve()
            if p in seen:
                skipped["duplicate file"] += 1
                continue
            seen.add(p)
            identity = f"label:{f.identity}"
            entry = LabelPhoto(p, identity, f"{identity}/{f.state or 'default'}")
            if f.kind == MediaKind.IMAGE:
                photos.append(entry)
            else:
                videos[p] = entry
        line = ls.skipped_line()
        if line:
            report(f"note: {line}")
    summary.label_rows_skipped = dict(skipped)
    return photos, videos


def gather_inputs(videos: Sequence[Path], labels: Sequence[Path], summary: BuildSummary, report: Report) -> Inputs:
    """The video files under `videos` and the photos of the labelled sets; DatasetError when there are none."""
    from indexer.pipeline import discover

    files, problems, _ = discover(videos)
    for p in problems:
        report(f"error: {p}")
        summary.failed.append(p)
    video_files = [f for f in files if f.suffix.lower() in VIDEO_EXTENSIONS]
    ignored = len(files) - len(video_files)
    if ignored:
        report(f"note: {ignored} photos among the videos ignored (give photos through --labels)")
    photos, labelled_videos = collect_labels(labels, summary, report)
    video_files = list(dict.fromkeys(video_files + list(labelled_videos)))
    summary.videos = len(video_files)
    summary.videos_failed = len(problems)
    if not video_files and not photos:
        raise DatasetError("nothing to build from: no readable videos or labelled photos were given")
    return Inputs(video_files, photos, len(problems), labelled_videos)
