"""Times on a file's presentation timeline, as players and PyAV's `frame.time` count them.

decord counts from the first decoded frame (its first timestamp is 0), while a video stream may
start later on the file's timeline: in short_hamilton_clip.mp4 the video starts at 0.852 s, so a
time from decord is 0.852 s early in every player. `decord_offset` measures what to add.
Text shows times as h:mm:ss.mmm; JSON keeps seconds; links and players get `seek_time`, whole milliseconds never
before the frame (a player asked for 1.519 s shows the frame before one at 1.51935 s: across a cut, the other shot).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VideoProbe:
    """Where a video's first frame lies on the file's timeline, and its frame size."""

    first_time: float
    width: int
    height: int


def probe_video(path: str | Path) -> VideoProbe | None:
    """PyAV's view of the first video stream: the presentation time of its first decoded frame
    (`frame.time`; the stream's start time when no frame decodes) and its frame size; None when
    the file has no readable video."""
    import av

    from headsearch.basics.quiet import native_stderr_silenced

    try:
        with native_stderr_silenced(), av.open(str(path)) as container:
            if not container.streams.video:
                return None
            stream = container.streams.video[0]
            width, height = stream.codec_context.width, stream.codec_context.height
            first = float(stream.start_time * stream.time_base) if stream.start_time is not None and stream.time_base else 0.0
            try:
                for frame in container.decode(stream):
                    if frame.time is not None:
                        first = float(frame.time)
                    width, height = frame.width, frame.height
                    break
            except (av.error.FFmpegError, ValueError):
                pass
            return VideoProbe(first, int(width), int(height))
    except (av.error.FFmpegError, OSError, ValueError):
        return None


def first_frame_time(path: str | Path) -> float | None:
    """Presentation time of the first frame of the first video stream (None: no readable video)."""
    probe = probe_video(path)
    return None if probe is None else probe.first_time


def decord_offset(path: str | Path, decord_first: float = 0.0) -> float:
    """Seconds to add to decord's timestamps of `path` (whose first frame decord puts at
    `decord_first`) to put them on the file's presentation timeline; 0 when PyAV cannot tell."""
    first = first_frame_time(path)
    if first is None or not math.isfinite(first):
        log.info("%s: no presentation time from PyAV; keeping decord's times", path)
        return 0.0
    return first - float(decord_first)


def format_time(seconds: float, hour_digits: int = 1) -> str:
    """h:mm:ss.mmm, as players show a position, to the nearest millisecond (negative times as 0); with `hour_digits=2`
    hh:mm:ss.mmm, as WebVTT cues write it."""
    ms = max(0, round(float(seconds) * 1000))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:0{hour_digits}d}:{m:02d}:{s:02d}.{ms:03d}"


def seek_time(seconds: float) -> float:
    """The first whole millisecond at or after `seconds`: where a link or a player is sent to show the frame presented
    at `seconds` (players show the last frame at or before the position asked, so rounding down shows the frame before
    it). Float noise below a microsecond is ignored (1.5 stays 1.5)."""
    return max(0, math.ceil(round(float(seconds) * 1000, 3))) / 1000


def seek_text(seconds: float) -> str:
    """`seek_time` as a link writes it: "1.520"."""
    return f"{seek_time(seconds):.3f}"


# ----- a file's frame grid, as editors count it ---------------------------------------------------
# Rates editors know by name: a measured rate within EDITORIAL_TOLERANCE of one of these is that rate (the hamilton
# clip's 2997/100 is NTSC's 30000/1001: frame n is frame n in both, 1 ms apart after 15 minutes).
EDITORIAL_RATES = tuple(Fraction(n, d) for n, d in ((24000, 1001), (24, 1), (25, 1), (30000, 1001), (30, 1), (48, 1), (50, 1),
                                                    (60000, 1001), (60, 1), (100, 1), (120000, 1001), (120, 1)))
EDITORIAL_TOLERANCE = 5e-4  # relative


@dataclass(frozen=True)
class Timing:
    """Where a video's frames lie: its first frame's presentation time, its frame rate as editors count it (a
    Fraction), whether its frames are spaced unevenly (variable frame rate), its start timecode where it has one
    (a `tmcd` track or a `timecode` tag, as the file says it, e.g. "01:00:00:00"), and its frames."""

    first_time: float
    rate: Fraction  # as editors count it (`editorial_rate`): what exports write
    variable: bool
    timecode: str | None
    frames: int  # frames on the grid from the first frame to the end (a VFR file's grid counts the frames it skips)
    grid: Fraction | None = None  # the rate the timestamps are spaced at, where it is not `rate` exactly (2997/100)
    size: tuple[int, int] | None = None  # the frames' width and height as coded (None: not said)

    def frame_at(self, seconds: float) -> int:
        """The frame (from 0 at the first frame) presented at `seconds` on the file's timeline, to the nearest."""
        return max(0, int(math.floor((float(seconds) - self.first_time) * float(self.grid or self.rate) + 0.5)))

    def time_of(self, frame: int) -> float:
        return self.first_time + float(Fraction(frame) / (self.grid or self.rate))


def editorial_rate(rate: Fraction) -> Fraction:
    """The named rate a measured one is (within EDITORIAL_TOLERANCE), else the rate itself."""
    for named in EDITORIAL_RATES:
        if abs(float(rate) / float(named) - 1.0) <= EDITORIAL_TOLERANCE:
            return named
    return rate


def probe_timing(path: str | Path) -> Timing | None:
    """A video's frame grid (`Timing`) from its first video stream, reading packets only (nothing is decoded);
    None when the file has no readable video. The rate is the stream's frame rate (for a variable-rate file, the rate
    of the grid its timestamps lie on, e.g. 24000/1001 where frames are dropped), brought to the named rate it is."""
    import av

    from headsearch.basics.quiet import native_stderr_silenced

    try:
        with native_stderr_silenced(), av.open(str(path)) as container:
            if not container.streams.video:
                return None
            stream = container.streams.video[0]
            base = stream.guessed_rate or stream.average_rate or stream.base_rate
            times = sorted(float(p.pts * p.time_base) for p in container.demux(stream) if p.pts is not None and p.time_base)
            timecode = _timecode(container, stream)
            size = (stream.codec_context.width, stream.codec_context.height) if stream.codec_context.width else None
    except (av.error.FFmpegError, OSError, ValueError):
        return None
    if not times or not base:
        return None
    grid = Fraction(base).limit_denominator(1_000_000)
    rate = editorial_rate(grid)
    steps = {round((b - a) * float(grid)) for a, b in zip(times, times[1:], strict=False)}
    frames = int(round((times[-1] - times[0]) * float(grid))) + 1
    return Timing(times[0], rate, len(steps) > 1, timecode, frames, grid if grid != rate else None, size)


def _timecode(container, stream) -> str | None:
    """The start timecode a file carries: its video stream's, a data (tmcd) stream's, or the container's tag."""
    for metadata in [stream.metadata, *(s.metadata for s in container.streams if s.type == "data"), container.metadata]:
        value = (metadata or {}).get("timecode")
        if value:
            return str(value)
    return None
