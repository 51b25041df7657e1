"""The tests' one way to write a clip from frames and to read a video back to frames (PyAV), as the tests see them:
RGB uint8 arrays in decode order, with PyAV's presentation time (`frame.time`) where a test needs it. The product
decodes through `indexer.decode`; these read independently of it, so a test can hold the product to PyAV's answer."""
from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import BinaryIO

import numpy as np

Source = Path | str | BinaryIO  # a file, or its bytes in memory (`io.BytesIO` of an HTTP answer)


def _open(source: Source, mode: str = "r", **kw):
    import av

    return av.open(str(source) if isinstance(source, (str, Path)) else source, mode, **kw)


def write_clip(path: Path, frames: Iterable[np.ndarray], fps: float = 25, codec: str = "libx264",
               pix_fmt: str = "yuv420p", fmt: str | None = None, options: dict | None = None,
               container_options: dict | None = None, pts: list[int] | None = None, time_base: Fraction | None = None,
               rotation: int | None = None, timecode: str | None = None, even: bool = False, tone_s: float = 0.0,
               sample_rate: int = 16000) -> Path:
    """A clip of `frames` (RGB arrays of one size, read lazily: a generator keeps one frame in memory) at `fps`.
    The frame size is the first frame's; `even` crops every frame to even sides (yuv420p needs them). Without `pts`
    the encoder numbers the frames 0, 1, 2... at 1/fps; with it (and `time_base`), frame i is presented at
    pts[i] * time_base. `timecode` writes a start timecode (a tmcd track in MP4); `rotation` a display matrix;
    `tone_s` seconds of a 440 Hz tone beside the frames, mono AAC at `sample_rate` (its first packet, the encoder's
    priming, lies before time 0)."""
    import av

    frames = iter(frames)
    first = next(frames)
    h, w = first.shape[:2]
    if even:
        h, w = h // 2 * 2, w // 2 * 2
    with _open(path, "w", format=fmt, options=container_options or {}) as out:
        stream = out.add_stream(codec, rate=fps, options=options or {})
        stream.width, stream.height, stream.pix_fmt = w, h, pix_fmt
        if time_base is not None:
            stream.codec_context.time_base = time_base
            stream.time_base = time_base
        if rotation is not None:
            stream.set_display_rotation(rotation)
        if timecode is not None:
            stream.metadata["timecode"] = timecode
        sound = out.add_stream("aac", rate=sample_rate) if tone_s else None
        if sound is not None:
            sound.layout = "mono"
        for i, rgb in enumerate(itertools.chain([first], frames)):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb[:h, :w]), format="rgb24")
            if pts is not None:
                frame.pts, frame.time_base = pts[i], time_base
            for packet in stream.encode(frame):
                out.mux(packet)
        if sound is not None:
            samples = (0.2 * np.sin(2 * np.pi * 440 * np.arange(int(sample_rate * tone_s)) / sample_rate)).astype(np.float32)
            for i in range(0, len(samples), 1024):
                chunk = av.AudioFrame.from_ndarray(samples[None, i:i + 1024], format="fltp", layout="mono")
                chunk.sample_rate, chunk.pts = sample_rate, i
                for packet in sound.encode(chunk):
                    out.mux(packet)
        for s in (stream, sound) if sound is not None else (stream,):
            for packet in s.encode(None):
                out.mux(packet)
    return Path(path)


def timed_frames(source: Source, width: int | None = None, height: int | None = None) -> Iterator[tuple[float, np.ndarray]]:
    """(presentation time in seconds, RGB frame) for every frame of the first video stream, in decode order, scaled to
    `width` x `height` when given. A generator: stop early and the rest is never decoded."""
    size = {k: v for k, v in (("width", width), ("height", height)) if v is not None}
    with _open(source) as container:
        for frame in container.decode(container.streams.video[0]):
            yield (float(frame.time) if frame.time is not None else float("nan")), frame.to_ndarray(format="rgb24", **size)


def frames_of(source: Source, start: int = 0, stop: int | None = None,
              width: int | None = None, height: int | None = None) -> Iterator[np.ndarray]:
    """The RGB frames [start, stop) by decode index (a generator: `list(...)` to keep them)."""
    return (rgb for _, rgb in itertools.islice(timed_frames(source, width, height), start, stop))


def read_frames(source: Source, start: int = 0, stop: int | None = None,
                width: int | None = None, height: int | None = None) -> list[np.ndarray]:
    """The RGB frames [start, stop) by decode index, in a list."""
    return list(frames_of(source, start, stop, width, height))


def first_frame(source: Source) -> np.ndarray:
    return next(frames_of(source))


def frame_times(source: Source) -> list[float]:
    """Presentation time of every decoded frame, by decode index."""
    return [t for t, _ in timed_frames(source)]


def frame_at(source: Source, t: float) -> np.ndarray:
    """The frame shown at presentation time `t`: the last one not after it (1 ms of slack for rounded times)."""
    shown = None
    for time, rgb in timed_frames(source):
        if time > t + 1e-3:
            break
        shown = rgb
    assert shown is not None, f"no frame at or before {t} s in {source}"
    return shown


@dataclass(frozen=True)
class ClipInfo:
    width: int
    height: int
    codec: str
    frames: int  # the count the container declares (0 where it declares none)
    audio: bool  # whether it has an audio stream


def clip_info(source: Source) -> ClipInfo:
    """What the container says of its first video stream, without decoding."""
    with _open(source) as c:
        v = c.streams.video[0]
        return ClipInfo(v.codec_context.width, v.codec_context.height, v.codec_context.name, v.frames, bool(c.streams.audio))


def keyframe_times(source: Source) -> list[float]:
    """Presentation times of the video stream's keyframe packets (read from the container, not decoded)."""
    with _open(source) as c:
        return [float(p.pts * p.time_base) for p in c.demux(video=0) if p.is_keyframe and p.pts is not None]


def remux(src: Path, dst: Path, fmt: str | None = None, shift: float = 0.0) -> Path:
    """The same coded frames of `src`'s video stream in another file (no re-encoding), in container `fmt` (else the
    one `dst`'s suffix names), starting `shift` seconds later on the timeline."""
    with _open(src) as inp, _open(dst, "w", format=fmt) as out:
        vs = inp.streams.video[0]
        stream = out.add_stream_from_template(vs)
        offset = int(round(shift / vs.time_base)) if shift else 0
        for packet in inp.demux(vs):
            if packet.dts is None:  # the demuxer's empty packet at the end
                continue
            if offset:
                packet.pts += offset
                packet.dts += offset
            packet.stream = stream
            out.mux(packet)
    return Path(dst)
