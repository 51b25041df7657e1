"""What a dataset build counted (`BuildSummary`, written as summary.json), and how it reports a line (`Report`)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

# Why a track is not a segment (`trainer.dataset_segments.select_segment`).
REJECT_REASONS = ("too_few_frames", "too_few_face_visible", "too_few_face_invisible", "no_best_face")

Report = Callable[[str], None]


@dataclass
class BuildSummary:
    videos: int = 0
    videos_analysed: int = 0
    videos_reused: int = 0
    videos_failed: int = 0
    photos: int = 0
    photos_failed: int = 0
    failed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    shots: int = 0
    tracks: int = 0
    segments_kept: int = 0
    segments_rejected: dict = field(default_factory=lambda: {r: 0 for r in REJECT_REASONS})
    video_identities: int = 0
    label_identities: int = 0
    identities: int = 0
    states: int = 0
    samples: int = 0
    samples_face_visible: int = 0
    samples_video: int = 0
    samples_photo: int = 0
    teacher_rows: int = 0
    teacher_head_rows: int = 0  # samples with a teacher head vector (all, for a whole-head teacher; 0 for a face teacher)
    pairs: dict = field(default_factory=dict)
    cannot_link_pairs: int = 0
    cannot_link_blocked: int = 0
    cluster_threshold: float = 0.0
    labelled_video_segments: int = 0  # segments of labelled one-person videos that took the label
    labelled_video_segments_dropped: int = 0  # other people's segments in labelled videos, left out
    label_rows_skipped: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    teacher: dict = field(default_factory=dict)
    video_seconds: float = 0.0
    analysis_seconds: float = 0.0  # time spent analysing the inputs, over all runs that made the parts
    wall_seconds: float = 0.0  # this run

    def line(self) -> str:
        rej = sum(self.segments_rejected.values())
        return (f"{self.videos} videos ({self.videos_failed} failed), {self.photos} photos, {self.tracks} tracks, "
                f"{self.segments_kept} segments ({rej} tracks rejected), {self.identities} identities, "
                f"{self.samples} samples ({self.teacher_rows} with teacher vectors), {self.wall_seconds:.1f} s")

    def fail(self, source: str, message: str, report: Report) -> None:
        """Count and report an input that could not be used."""
        self.failed.append(message)
        if source == "video":
            self.videos_failed += 1
        else:
            self.photos_failed += 1
        report(f"error: {message}")
