"""Streaming video decoding: decord first, PyAV for what decord cannot open (AV1, odd containers)."""
from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from headsearch.errors import MediaError
from headsearch.quiet import native_stderr_silenced
from headsearch.timeline import decord_offset

log = logging.getLogger(__name__)


@dataclass
class VideoInfo:
    """What the container says about a video (frame count and duration may be estimates)."""

    path: Path
    width: int  # decoded width (after the long-side bound)
    height: int
    fps: float
    frame_count: int
    duration: float
    decoder: str
    start_time: float = 0.0  # presentation time of the first frame on the file's timeline
    source_size: tuple[int, int] | None = None  # the file's own (width, height), before the long-side bound


@dataclass
class DecodedFrame:
    index: int  # 0-based index in decode order
    time: float  # presentation time in seconds
    rgb: np.ndarray  # (H, W, 3) uint8


def _bounded_size(width: int, height: int, max_side: int) -> tuple[int, int]:
    scale = min(1.0, max_side / max(width, height))
    return max(2, round(width * scale / 2) * 2), max(2, round(height * scale / 2) * 2)


class VideoStream:
    """Frames of one video in order, each exactly once, no larger than `max_side`."""

    def __init__(self, path: Path, max_side: int = 1280, decoders: tuple[str, ...] = ("decord", "pyav")):
        self.path = Path(path)
        self.max_side = max_side
        self.truncated_at: int | None = None  # set when decoding stopped early on a damaged stream
        errors = []
        openers = {"decord": self._open_decord, "pyav": self._open_pyav}
        for opener in (openers[d] for d in decoders):
            try:
                with native_stderr_silenced():
                    self.info = opener()
                if getattr(self, "_timeline_note", None):  # logged here: stderr is silenced while opening
                    log.info("%s: %s", self.path, self._timeline_note)
                return
            except Exception as e:  # each backend raises its own types for unreadable media
                errors.append(f"{opener.__name__[6:]}: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}")
        raise MediaError(f"{self.path}: not a readable video", detail="; ".join(errors))

    def _open_decord(self) -> VideoInfo:
        import decord

        probe = decord.VideoReader(str(self.path), ctx=decord.cpu(0), num_threads=1)
        h, w = probe[0].shape[:2] if len(probe) else (0, 0)
        if len(probe) == 0:
            raise MediaError("no frames")
        dw, dh = _bounded_size(w, h, self.max_side)
        del probe
        self._reader = decord.VideoReader(str(self.path), ctx=decord.cpu(0), width=dw, height=dh, num_threads=0)
        n = len(self._reader)
        timestamps = self._reader.get_frame_timestamp(range(n))[:, 0]
        # decord counts from the first frame; players (and PyAV) from the file's timeline.
        offset = decord_offset(self.path, float(timestamps[0]))
        self._timeline_note = (f"video stream starts at {float(timestamps[0]) + offset:.3f} s on the file's timeline; "
                               f"decord's times shifted by {offset:+.3f} s") if abs(offset) > 1e-6 else None
        self._timestamps = timestamps + offset
        fps = float(self._reader.get_avg_fps() or 0.0)
        duration = float(self._reader.get_frame_timestamp(n - 1)[1]) - float(timestamps[0]) if n else 0.0
        self._backend = "decord"
        return VideoInfo(self.path, dw, dh, fps, n, duration, "decord", float(self._timestamps[0]), (w, h))

    def _open_pyav(self) -> VideoInfo:
        import av

        av.logging.set_level(av.logging.PANIC)
        container = av.open(str(self.path))
        if not container.streams.video:
            container.close()
            raise MediaError("no video stream")
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        w, h = stream.codec_context.width, stream.codec_context.height
        if not w or not h:
            container.close()
            raise MediaError("video stream without a frame size")
        dw, dh = _bounded_size(w, h, self.max_side)
        fps = float(stream.average_rate or stream.guessed_rate or 0.0)
        duration = float(stream.duration * stream.time_base) if stream.duration else (container.duration or 0) / 1e6
        start = float(stream.start_time * stream.time_base) if stream.start_time is not None and stream.time_base else 0.0
        self._container, self._stream = container, stream
        self._backend = "pyav"
        return VideoInfo(self.path, dw, dh, fps, int(stream.frames or round(duration * fps)), duration, "pyav", start, (w, h))

    def __iter__(self) -> Iterator[DecodedFrame]:
        if self._backend == "decord":
            yield from self._iter_decord()
        else:
            yield from self._iter_pyav()

    def _iter_decord(self) -> Iterator[DecodedFrame]:
        import decord

        reader = self._reader
        for i in range(len(reader)):
            try:
                frame = reader.next().asnumpy()
            except (decord.DECORDError, StopIteration, RuntimeError) as e:
                self.truncated_at = i
                log.warning("%s: decoding stopped at frame %d (%s)", self.path, i, str(e).splitlines()[0] if str(e) else "end of stream")
                break
            yield DecodedFrame(i, float(self._timestamps[i]), frame)

    def _iter_pyav(self) -> Iterator[DecodedFrame]:
        import av

        i = 0
        last_time = -1.0
        fps = self.info.fps or 25.0
        try:
            for frame in self._container.decode(self._stream):
                time = float(frame.time) if frame.time is not None else i / fps
                if time <= last_time:  # broken timestamps: keep time increasing
                    time = last_time + 1.0 / fps
                last_time = time
                rgb = frame.to_ndarray(format="rgb24", width=self.info.width, height=self.info.height)
                yield DecodedFrame(i, time, rgb)
                i += 1
        except (av.error.FFmpegError, ValueError) as e:
            self.truncated_at = i
            log.warning("%s: decoding stopped at frame %d (%s)", self.path, i, e)
        finally:
            self._container.close()
        if i == 0:
            raise MediaError(f"{self.path}: no decodable frames")
        self.info.frame_count = i
