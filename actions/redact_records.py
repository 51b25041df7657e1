"""What a redaction works from and what it gives: the tracks of a video's analysis (`SeenTrack`, `VideoHeads`), a track
chosen to hide or spare and why (`Chosen`), and what a redaction wrote (`RedactSummary`), whose `to_dict()` is what
`redact --json` prints and the web app's redaction job answers (one dict, its files named as each reader can open them).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from actions.redact_frames import Written, covered_frames
from actions.redact_verify import Shown, shown_path
from headsearch.basics.text import counted
from headsearch.evaluation.track_scores import TrackRows
from schemas.records import Box, RedactStyle

if TYPE_CHECKING:
    from actions.redact_verify import Verification


@dataclass(frozen=True)
class SeenTrack:
    """A head track of the analysis a redaction works from."""

    key: int  # its id in the library, or its number in this analysis (from 1)
    shot: int  # its shot's index
    sightings: tuple[tuple[int, Box], ...]  # (frame index, head box in the analysis' pixels), in time order
    rows: TrackRows  # its vectors, as the scorer reads a track (kind -> keys, faces, rows)
    start: float
    end: float
    doubt: str | None = None  # why the analysis' evidence rule would drop it (None: a confirmed head)
    joined_to: int | None = None  # the key of the first track of its person in its shot, where it was joined (`indexer.rejoin`)
    join_cue: str | None = None
    join_score: float | None = None
    keys: tuple[int, ...] = ()  # each sighting's key in `rows` (its observation id in the library; empty: its index)

    @property
    def sighting_keys(self) -> tuple[int, ...]:
        return self.keys or tuple(range(len(self.sightings)))


@dataclass
class VideoHeads:
    """The heads of one video, from the library's analysis or a new one: tracks, shots (frame ranges), sampled frames."""

    path: Path
    fingerprint: str
    size: tuple[int, int]  # (width, height) of the frames the boxes are in
    frames: int
    fps: float
    shots: dict[int, tuple[int, int]]  # shot index -> (first frame, last frame)
    tracks: list[SeenTrack]
    samples: list[int] | None  # frame indexes of the sampled frames (None: not kept; `period` then)
    period: int  # frames between samples, where `samples` is None
    source: str  # where the analysis comes from, in words
    members: dict[int, int] = field(default_factory=dict)  # library track id -> person id
    spared: list[Chosen] = field(default_factory=list)  # --all-except: the tracks of the people spared (`Redactor.choose`)
    seconds: float = 0.0  # how long finding them took


@dataclass(frozen=True)
class Chosen:
    """A track whose head is hidden (or spared): who it is and why it was chosen, in words; `frames`: the frames of it
    chosen so (first, last), where not all it covers."""

    track: SeenTrack
    who: str
    why: str
    frames: tuple[int, int] | None = None

    def to_dict(self, heads: VideoHeads) -> dict:
        first, last = self.frames or track_frames(self.track, heads)
        return {"track": self.track.key, "who": self.who, "why": self.why, "shot": self.track.shot,
                "start": round(self.track.start, 3), "end": round(self.track.end, 3), "first_frame": first, "last_frame": last,
                "sightings": len(self.track.sightings)}


@dataclass
class RedactSummary:
    """What a redaction wrote."""

    source: Path
    out: Path
    audit: Path
    preview: Path | None
    chosen: list[Chosen]
    written: Written
    analysis: str
    seconds: float  # wall time, the analysis included
    analysis_seconds: float  # ...of which finding the heads (the library's analysis read, or a new one)
    video_seconds: float  # how long the video plays (its file's duration)
    notes: list[str] = field(default_factory=list)
    verified: Verification | None = None  # the output looked at again (`--verify`)
    style: RedactStyle = RedactStyle.BLUR  # how each head was hidden
    margin: float = 0.0  # the share of each head box it was grown by

    @property
    def speed(self) -> float:
        """Times real time."""
        return self.video_seconds / self.seconds if self.seconds > 0 else 0.0

    def line(self, shown: Shown = str) -> str:
        # Tracks hidden as nobody in particular (--everyone, --all-except) are counted, not named one by one.
        who = Counter(c.who for c in self.chosen if c.who != f"track {c.track.key}")
        unnamed = sum(c.who == f"track {c.track.key}" for c in self.chosen)
        people = ", ".join([f"{w} ({counted(n, 'track')})" for w, n in who.most_common(6)] + (["..."] if len(who) > 6 else [])
                           + ([counted(unnamed, "other track" if who else "track")] if unnamed else []))
        boxes = self.written.boxes
        hidden = (f"{boxes:,} box{'es' if boxes != 1 else ''} hidden in {self.written.frames_hidden:,} of "
                  f"{counted(self.written.frames, 'frame')}" + (f": {people}" if people else ""))
        if not self.chosen:
            hidden = f"nobody to hide in {counted(self.written.frames, 'frame')} (written unchanged, encoded again)"
        return f"wrote {shown_path(shown, self.out)}: {hidden}; {self.video_seconds:.1f} s of video in {self.seconds:.1f} s ({self.speed:.2f}x real time)"

    def to_dict(self, shown: Shown = str) -> dict:
        """What was written, as `redact --json` prints it and the web app's job answers it: `shown` says each file written
        (the CLI: its path; the web app: its name, or nothing where its pages cannot open it). `verify`: the output looked
        at again (None where it was not)."""
        w, verified = self.written, self.verified
        return {"output": shown_path(shown, self.out), "audit": shown_path(shown, self.audit), "preview": shown_path(shown, self.preview),
                "analysis": self.analysis, "line": self.line(shown), "frames": w.frames, "frames_with_boxes": w.frames_hidden,
                "boxes": w.boxes, "seconds": round(self.seconds, 3), "analysis_seconds": round(self.analysis_seconds, 3),
                "encoder": w.encoder, "style": str(self.style), "margin": self.margin, "video_seconds": round(self.video_seconds, 3), "notes": self.notes,
                "tracks": [{"track": c.track.key, "who": c.who, "why": c.why} for c in self.chosen],
                "verify": verified.to_dict(shown) if verified is not None else None}


def track_frames(track: SeenTrack, heads: VideoHeads, to_next_sample: bool = False) -> tuple[int, int]:
    """The frames (first, last) a track's head is on screen: its sightings' span, out to the samples around it in its shot
    (`to_next_sample`: through the sampled frame after its last sighting, `covered_frames`)."""
    frames = [f for f, _ in track.sightings]
    shot = heads.shots.get(track.shot, (frames[0], frames[-1]))
    return covered_frames(frames, shot, heads.samples, heads.period, to_next_sample)
