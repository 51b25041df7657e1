"""Streaming video decoding: PyAV first, decord for what PyAV cannot open.

PyAV pulls one frame at a time, so memory stays bounded however slowly frames are consumed. decord
decodes ahead in its own threads without bound while its reader waits: indexing the 10-minute 720p
benchmark video (slower than decoding) held 3.3-5.9 GB with decord against 0.8 GB with PyAV, which
decodes about 30% slower here (17x against 24x real time at 720p on 2 cores)."""
from __future__ import annotations

import itertools
import logging
import math
import os
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from headsearch.basics.errors import MediaError, first_line, unreadable
from headsearch.basics.quiet import native_stderr_silenced
from headsearch.basics.settings import MediaLimits
from headsearch.basics.timeline import decord_offset
from schemas.records import SourceProbe

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


SMALL_SIDE = 128  # long side of the copy every frame has for shot detection (its histogram is of a 64 px copy of it)


class DecodedFrame:
    """One decoded frame: its index in decode order, its presentation time, a copy for shot detection (`small`: long
    side `SMALL_SIDE` where PyAV made it), and its RGB pixels (`rgb`, (H, W, 3) uint8). Decoded by PyAV, the pixels are
    converted from the decoder's frame only when asked for: shots need only the small copy of every frame, analysis
    the pixels of the sampled ones (a 720p frame's conversion costs about as much as decoding it)."""

    __slots__ = ("index", "time", "_rgb", "_convert", "_small")

    def __init__(self, index: int, time: float, rgb: np.ndarray | None = None,
                 convert: Callable[[], np.ndarray] | None = None, small: np.ndarray | None = None):
        if rgb is None and convert is None:
            raise ValueError("a frame needs its pixels or a way to convert them")
        self.index, self.time = index, time
        self._rgb, self._convert, self._small = rgb, convert, small

    @property
    def rgb(self) -> np.ndarray:
        if self._rgb is None:
            self._rgb, self._convert = self._convert(), None
        return self._rgb

    @property
    def small(self) -> np.ndarray:
        """The decoder's small copy, or (decord's frames, or with `small_copies` off) the pixels themselves, which the
        shots' histogram shrinks on its own as it always did."""
        return self.rgb if self._small is None else self._small


def small_size(width: int, height: int) -> tuple[int, int]:
    """The size of a frame's small copy: long side `SMALL_SIDE` (never larger than the frame)."""
    scale = min(1.0, SMALL_SIDE / max(width, height))
    return max(1, round(width * scale)), max(1, round(height * scale))


def _bounded_size(width: int, height: int, max_side: int) -> tuple[int, int]:
    scale = min(1.0, max_side / max(width, height))
    return max(2, round(width * scale / 2) * 2), max(2, round(height * scale / 2) * 2)


def check_video_header(path: Path, limits: MediaLimits) -> int:
    """Refuse, from the container's header and before any decoder runs, what cannot or must not be
    decoded: no video stream, frames too small to hold a head or over the pixel limit, a duration or
    frame count no real file has. Returns the file's size. Files PyAV cannot open are left to the
    decoders, which say why."""
    size, container = _opened(path)
    if isinstance(container, Exception):
        return size
    try:
        _check_streams(path, container, size, limits)
    finally:
        container.close()
    return size


def _opened(path: Path) -> tuple[int, object]:
    """(the file's size, PyAV's container of it, or the exception PyAV raised where it cannot open it): a file that is
    missing, unreadable or not a regular file refused; FFmpeg's log kept from Python and its stderr silenced."""
    try:
        st = path.stat()
    except OSError as e:
        raise unreadable(path, e) from e
    if not stat.S_ISREG(st.st_mode):
        raise MediaError(f"{path}: not a regular file")
    import av

    av.logging.set_level(None)  # no Python log callback: FFmpeg threads calling it deadlock with the GIL
    try:
        with native_stderr_silenced():
            return st.st_size, av.open(str(path))
    except Exception as e:  # noqa: BLE001 - each backend raises its own types for unreadable media
        return st.st_size, e


def probe_source(path: Path, limits: MediaLimits | None = None) -> SourceProbe:
    """One look at a video file (`SourceProbe`), in one open: what `check_video_header` refuses is refused, and a file
    PyAV cannot open ("not a readable video"); its first frame decoded for its turns and its presentation time (a first
    frame that does not decode is left to the decoders, which say why)."""
    import av

    path = Path(path)
    limits = limits or MediaLimits.from_env()
    size, container = _opened(path)
    if isinstance(container, Exception):
        raise MediaError(f"{path}: not a readable video", detail=first_line(container)) from container
    try:
        _check_streams(path, container, size, limits)
        stream = container.streams.video[0]
        width, height = stream.codec_context.width, stream.codec_context.height
        first = float(stream.start_time * stream.time_base) if stream.start_time is not None and stream.time_base else 0.0
        rotation = 0.0
        try:
            with native_stderr_silenced():
                for frame in container.decode(stream):
                    first = float(frame.time) if frame.time is not None else first
                    width, height = frame.width, frame.height
                    rotation = float(getattr(frame, "rotation", 0) or 0)
                    break
        except (av.error.FFmpegError, ValueError):
            pass
        return SourceProbe(str(path), size, int(width), int(height), int(round(rotation / 90.0)) % 4, rotation,
                           float(stream.average_rate or stream.guessed_rate or 0.0), int(stream.frames or 0), first,
                           container.duration / 1_000_000 if container.duration else None)
    finally:
        container.close()


def _check_streams(path: Path, container, size: int, limits: MediaLimits) -> None:
    if not container.streams.video:
        kinds = sorted({s.type for s in container.streams})
        raise MediaError(f"{path}: no video stream ({' and '.join(kinds) + ' only' if kinds else 'no streams at all'})")
    stream = container.streams.video[0]
    w, h = stream.codec_context.width, stream.codec_context.height
    if w and h and min(w, h) < limits.min_side:
        raise MediaError(f"{path}: frames of {w}x{h} pixels are too small to hold a head (the smallest side must be at least "
                         f"{limits.min_side}, ${limits.env_name('min_side')})")
    if w * h > limits.max_video_pixels:
        raise MediaError(f"{path}: frames of {w}x{h} pixels ({w * h / 1e6:,.1f} MP) exceed the "
                         f"{limits.max_video_pixels / 1e6:,.0f} MP limit (${limits.env_name('max_video_pixels')})")
    frames = stream.frames or 0
    if frames > min(limits.max_video_frames, size):
        raise MediaError(f"{path}: the header claims {frames:,} frames in {size:,} bytes"
                         + (f", over the {limits.max_video_frames:,} limit (${limits.env_name('max_video_frames')})"
                            if frames > limits.max_video_frames else "") + ": a damaged header")
    duration = float(stream.duration * stream.time_base) if stream.duration and stream.time_base else (container.duration or 0) / 1e6
    if duration > limits.max_video_duration_s:
        raise MediaError(f"{path}: the header claims {duration / 3600:,.0f} hours of video, over the "
                         f"{limits.max_video_duration_s / 3600:,.0f} h limit (${limits.env_name('max_video_duration_s')}): a damaged header")


def sane_times(frames: Iterator[DecodedFrame], fps: float, max_seconds: float) -> Iterator[DecodedFrame]:
    """The frames with times a damaged stream cannot break: finite, within +-max_seconds, and rising
    (a broken one becomes the previous time plus one frame)."""
    step = 1.0 / fps if fps and 0 < fps < 1000 else 1.0 / 25
    last = None
    for frame in frames:
        t = frame.time
        if not math.isfinite(t) or abs(t) > max_seconds or (last is not None and t <= last):
            frame.time = t = 0.0 if last is None else last + step
        last = t
        yield frame


HWDECODE_ENV = "HEADSEARCH_HWDECODE"
_hw_said: set[str] = set()


def hardware_decoding() -> str | None:
    """The hardware decoder to try first: $HEADSEARCH_HWDECODE = `auto` (the default: CUDA when an
    NVIDIA device is present and FFmpeg has CUDA), `cuda`, or `off`."""
    wanted = os.environ.get(HWDECODE_ENV, "auto").strip().lower() or "auto"
    if wanted not in ("auto", "cuda", "off"):
        raise MediaError(f"${HWDECODE_ENV}: auto, cuda or off, got {wanted!r}")
    if wanted == "off":
        return None
    if wanted == "auto":
        if not Path("/dev/nvidia0").exists():
            return None
        try:
            from av.codec.hwaccel import hwdevices_available

            if "cuda" not in hwdevices_available():
                return None
        except ImportError:
            return None
    return "cuda"


class VideoStream:
    """Frames of one video in order, each exactly once, no larger than `max_side`. On a machine with
    an NVIDIA GPU, PyAV decodes on it first (`hardware_decoding`); any failure there falls back to the
    CPU decoders."""

    def __init__(self, path: Path, max_side: int = 1280, limits: MediaLimits | None = None,
                 decoders: tuple[str, ...] | None = None, small_copies: bool = True, probe: SourceProbe | None = None):
        self.path = Path(path)
        self.max_side = max_side
        self.small_copies = small_copies  # PyAV: each frame's small copy made, its pixels converted when asked for
        self.limits = limits or MediaLimits.from_env()
        self.truncated_at: int | None = None  # set when decoding stopped early on a damaged stream
        # `probe`: the file's header checked already where the request entered (`probe_source`), not read again here
        same = probe is not None and Path(probe.path) == self.path
        self._file_size = probe.size if same else check_video_header(self.path, self.limits)
        if decoders is None:
            decoders = ("pyav-cuda", "pyav", "decord") if hardware_decoding() else ("pyav", "decord")
        errors = []
        openers = {"decord": self._open_decord, "pyav": self._open_pyav, "pyav-cuda": self._open_pyav_cuda}
        for name in decoders:
            try:
                with native_stderr_silenced():
                    self.info = openers[name]()
                if getattr(self, "_timeline_note", None):  # logged here: stderr is silenced while opening
                    log.info("%s: %s", self.path, self._timeline_note)
                return
            except Exception as e:  # each backend raises its own types for unreadable media
                reason = first_line(e)
                errors.append(f"{name}: {reason}")
                if name == "pyav-cuda" and reason not in _hw_said:
                    _hw_said.add(reason)
                    log.warning("hardware decoding (CUDA) unavailable (%s): decoding on the CPU", reason)
        raise MediaError(f"{self.path}: not a readable video", detail="; ".join(errors))

    def _open_pyav_cuda(self) -> VideoInfo:
        """PyAV decoding on the GPU (NVDEC through FFmpeg's CUDA device), frames copied back to memory."""
        import av
        from av.codec.hwaccel import HWAccel

        av.logging.set_level(None)
        info = self._open_pyav(hwaccel=HWAccel(device_type="cuda", allow_software_fallback=False))
        if self._first_error is not None or not self._first:  # the device or the codec cannot decode: try the CPU
            self._container.close()
            raise self._first_error or MediaError("no frame decoded on the GPU")
        info.decoder = "pyav-cuda"
        return info

    def _open_decord(self) -> VideoInfo:
        import decord

        decord.logging.set_level(decord.logging.QUIET)  # its FFmpeg's lines about damaged packets: we say it in one
        probe = decord.VideoReader(str(self.path), ctx=decord.cpu(0), num_threads=1)
        if len(probe) > min(self.limits.max_video_frames, self._file_size):  # an estimate from a damaged header
            raise MediaError(f"implausible frame count {len(probe)}")
        h, w = probe[0].shape[:2] if len(probe) else (0, 0)
        if len(probe) == 0:
            raise MediaError("no frames")
        dw, dh = _bounded_size(w, h, self.max_side)
        del probe
        self._reader = decord.VideoReader(str(self.path), ctx=decord.cpu(0), width=dw, height=dh, num_threads=0)
        shape = self._reader.next().shape  # decord returns some sizes with their row padding in a wrong shape,
        if tuple(shape) != (dh, dw, 3):  # e.g. 16x16 as (16, 16, 6) or 72x32 as (32, 72, 4): PyAV reads those
            raise MediaError(f"decord decodes {dw}x{dh} frames in the shape {tuple(shape)}")
        self._reader.seek(0)
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

    def _open_pyav(self, hwaccel=None) -> VideoInfo:
        import av

        av.logging.set_level(None)  # no Python log callback: FFmpeg threads calling it deadlock with the GIL
        container = av.open(str(self.path), **({"hwaccel": hwaccel} if hwaccel is not None else {}))
        if not container.streams.video:
            container.close()
            raise MediaError("no video stream")
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        w, h = stream.codec_context.width, stream.codec_context.height
        if not w or not h:
            container.close()
            raise MediaError("video stream without a frame size")
        # The display matrix (phones record portrait video stored landscape) is read from the first
        # frame; that frame is kept for the iteration, so nothing is decoded twice.
        self._frames = container.decode(stream)
        self._first: list = []
        self._first_error: Exception | None = None
        try:
            self._first.append(next(self._frames))
        except StopIteration:
            pass
        except (av.error.FFmpegError, ValueError) as e:  # reported by the iteration, as for any later frame
            self._first_error = e
        rotation = int(round(float(getattr(self._first[0], "rotation", 0) or 0) / 90.0)) % 4 if self._first else 0
        self._quarter_turns = rotation  # counter-clockwise quarter turns that show the frame upright
        dw, dh = _bounded_size(w, h, self.max_side)  # decoded size, before turning
        self._pyav_size = (dw, dh)
        if rotation % 2:
            w, h, dw, dh = h, w, dh, dw
        fps = float(stream.average_rate or stream.guessed_rate or 0.0)
        duration = float(stream.duration * stream.time_base) if stream.duration else (container.duration or 0) / 1e6
        start = float(stream.start_time * stream.time_base) if stream.start_time is not None and stream.time_base else 0.0
        self._container, self._stream = container, stream
        self._backend = "pyav"
        return VideoInfo(self.path, dw, dh, fps, int(stream.frames or round(duration * fps)), duration, "pyav", start, (w, h))

    def __iter__(self) -> Iterator[DecodedFrame]:
        frames = self._iter_decord() if self._backend == "decord" else self._iter_pyav()
        yield from sane_times(frames, self.info.fps, self.limits.max_video_duration_s)

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
        from av.video.reformatter import VideoReformatter

        i = 0
        last_time = -1.0
        fps = self.info.fps or 25.0
        width, height = self._pyav_size
        small_width, small_height = small_size(width, height)
        # One scaler each for the stream: `to_ndarray(width=, height=)` sets one up for every frame (the same pixels, at
        # twice the cost of decoding a 640x360 frame on 2 cores). The full-size one converts only the frames whose pixels
        # are asked for, perhaps from another thread than this one: one conversion at a time.
        scaler, small_scaler, converting = VideoReformatter(), VideoReformatter(), threading.Lock()
        turns = self._quarter_turns

        def upright(rgb: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(np.rot90(rgb, turns)) if turns else rgb

        def converter(frame, index: int) -> Callable[[], np.ndarray]:
            def convert() -> np.ndarray:
                try:
                    with converting:
                        return upright(scaler.reformat(frame, width, height, "rgb24").to_ndarray())
                except (av.error.FFmpegError, ValueError) as e:
                    raise MediaError(f"{self.path}: frame {index} cannot be converted to RGB ({e})") from e
            return convert

        try:
            if self._first_error is not None:
                raise self._first_error
            for frame in itertools.chain(self._first, self._frames):
                self._first = []
                time = float(frame.time) if frame.time is not None else i / fps
                if time <= last_time:  # broken timestamps: keep time increasing
                    time = last_time + 1.0 / fps
                last_time = time
                if not self.small_copies:  # every frame's pixels now (the bench's earlier bound)
                    yield DecodedFrame(i, time, upright(scaler.reformat(frame, width, height, "rgb24").to_ndarray()))
                else:  # nearest pixels: the histogram's own first step (`hsv_histogram`), without converting the frame
                    small = upright(small_scaler.reformat(frame, small_width, small_height, "rgb24", interpolation="POINT").to_ndarray())
                    yield DecodedFrame(i, time, convert=converter(frame, i), small=small)
                i += 1
        except (av.error.FFmpegError, ValueError) as e:
            self.truncated_at = i
            log.warning("%s: decoding stopped at frame %d (%s)", self.path, i, e)
        finally:
            self._container.close()
        if i == 0:
            raise MediaError(f"{self.path}: no decodable frames")
        self.info.frame_count = i
