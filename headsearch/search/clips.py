"""Clips of hits: a video's time range written as a file any player opens.

The packets are copied (a remux, no re-encoding, so nothing is lost and it is fast) from the last
keyframe at or before the start: a clip can only begin on a keyframe, so it may begin a little
before the hit, and the range it really covers is returned. Its packets are a prefix, in decode
order, from that keyframe, so every frame in it decodes. When the codec cannot be copied into the
container, or the keyframe lies more than MAX_LEAD_S before the start, the range is decoded and encoded again (H.264, or MPEG-4 Part 2 where PyAV has no x264).
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from headsearch.basics.errors import MediaError
from headsearch.basics.timeline import format_time

log = logging.getLogger(__name__)

MAX_LEAD_S = 3.0  # a copied clip starts at most this long before the hit; else it is encoded again

REMUX_SUFFIXES = {".mp4", ".m4v", ".mov", ".mkv", ".webm", ".ts", ".avi", ".flv", ".mpg", ".mpeg"}


@dataclass(frozen=True)
class ExportedClip:
    path: Path
    start: float  # presentation time, on the source's timeline, of the clip's first frame
    end: float  # ... and of the end of its last frame
    method: str  # "remux" (packets copied) or "re-encode"

    def to_dict(self) -> dict:
        return {"path": str(self.path), "start": round(self.start, 3), "end": round(self.end, 3), "method": self.method}


def clip_name(source: Path, start: float, end: float, suffix: str) -> str:
    stem = re.sub(r"[^\w.-]+", "_", Path(source).stem)[:80]
    return f"{stem}_{format_time(start).replace(':', '-')}_{format_time(end).replace(':', '-')}{suffix}"


def _keyframe_at_or_before(source: Path, start: float) -> float | None:
    """Presentation time of the last video keyframe at or before `start` (None: no keyframe)."""
    import av

    with av.open(str(source)) as inp:
        vs = inp.streams.video[0]
        tb = vs.time_base
        inp.seek(max(0, int((start - 1e-3) / tb)), stream=vs, backward=True, any_frame=False)
        key = None
        first = None
        for packet in inp.demux(vs):
            if packet.pts is None:
                continue
            t = float(packet.pts * tb)
            if first is None and packet.is_keyframe:
                first = t
            if packet.is_keyframe and t <= start + 1e-3:
                key = t
            if packet.dts is not None and float(packet.dts * tb) > start + 1.0:
                break
        return key if key is not None else first


def remux_clip(source: Path, start: float, end: float, out: Path, max_lead_s: float = MAX_LEAD_S) -> ExportedClip:
    """Copy the packets of [keyframe at or before start, end] (video and the first audio stream) into `out`."""
    import av

    key = _keyframe_at_or_before(source, start)
    if key is None:
        raise MediaError(f"{source}: no keyframe to start a clip from")
    if start - key > max_lead_s:
        raise MediaError(f"{source}: the last keyframe before {start:.3f} s is at {key:.3f} s, too early for a clip")
    first_pts, last_end = None, key
    with av.open(str(source)) as inp, av.open(str(out), "w") as dst:
        vs = inp.streams.video[0]
        streams = [vs] + list(inp.streams.audio[:1])
        outs = {s.index: dst.add_stream_from_template(s) for s in streams}
        # Packets decoded after the end still show frames before it when frames are reordered (B-frames).
        rate = float(vs.average_rate or vs.guessed_rate or 25)
        margin = (int(vs.codec_context.has_b_frames or 0) + 1) / rate
        inp.seek(max(0, int((key - 1e-3) / vs.time_base)), stream=vs, backward=True, any_frame=False)
        started = False
        for packet in inp.demux(streams):
            if packet.pts is None or packet.dts is None:
                continue
            tb = packet.time_base
            t = float(packet.pts * tb)
            if packet.stream.index == vs.index:
                if not started:
                    if not (packet.is_keyframe and abs(t - key) < 1e-3):
                        continue  # packets before the keyframe the clip starts at
                    started = True
                if float(packet.dts * tb) > end + margin:
                    break
                first_pts = t if first_pts is None else min(first_pts, t)
                last_end = max(last_end, t + float((packet.duration or 0) * tb))
            elif not started or t < key - 1e-3 or t >= end:
                continue  # audio outside the clip
            shift = int(round(key / tb))
            packet.pts -= shift
            packet.dts -= shift
            packet.stream = outs[packet.stream.index]
            dst.mux(packet)
    if first_pts is None:
        raise MediaError(f"{source}: no video packets between {start:.3f} and {end:.3f} s")
    return ExportedClip(out, first_pts, last_end, "remux")


def reencode_clip(source: Path, start: float, end: float, out: Path) -> ExportedClip:
    """Decode the frames of [start, end] and encode them again into an MP4."""
    import av

    with av.open(str(source)) as inp, av.open(str(out), "w") as dst:
        vs = inp.streams.video[0]
        rate = vs.average_rate or vs.guessed_rate or 25
        codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
        ovs = dst.add_stream(codec, rate=rate)
        ovs.width, ovs.height, ovs.pix_fmt = vs.codec_context.width, vs.codec_context.height, "yuv420p"
        inp.seek(max(0, int((start - 0.5) / vs.time_base)), stream=vs, backward=True, any_frame=False)
        first, last = None, start
        for frame in inp.decode(vs):
            if frame.time is None or frame.time < start - 1e-3:
                continue
            if frame.time > end:
                break
            first = frame.time if first is None else first
            last = frame.time + 1.0 / float(rate)
            for packet in ovs.encode(av.VideoFrame.from_ndarray(frame.to_ndarray(format="rgb24"), format="rgb24")):
                dst.mux(packet)
        for packet in ovs.encode():
            dst.mux(packet)
    if first is None:
        raise MediaError(f"{source}: no frames between {start:.3f} and {end:.3f} s")
    return ExportedClip(out, first, last, "re-encode")


def export_clip(source: Path, start: float, end: float, folder: Path) -> ExportedClip:
    """Write [start, end] of a video as a playable clip in `folder` (remux where possible)."""
    import av

    from headsearch.basics.quiet import native_stderr_silenced

    source = Path(source)
    folder.mkdir(parents=True, exist_ok=True)
    suffix = source.suffix.lower() if source.suffix.lower() in REMUX_SUFFIXES else ".mkv"
    out = folder / clip_name(source, start, end, suffix)
    try:
        with native_stderr_silenced():
            clip = remux_clip(source, start, end, out)
            _check_playable(clip.path)
        named = folder / clip_name(source, clip.start, clip.end, suffix)  # named after the range it really covers
        clip.path.replace(named)
        return ExportedClip(named, clip.start, clip.end, clip.method)
    except (av.error.FFmpegError, MediaError, ValueError, OSError) as e:
        log.info("%s: packets cannot be copied into a clip (%s); encoding it again", source, e)
        out.unlink(missing_ok=True)
    out = folder / clip_name(source, start, end, ".mp4")
    try:
        with native_stderr_silenced():
            return reencode_clip(source, start, end, out)
    except (av.error.FFmpegError, ValueError, OSError) as e:
        out.unlink(missing_ok=True)
        raise MediaError(f"{source}: cannot write a clip of {start:.3f}-{end:.3f} s", detail=str(e)) from e


def _check_playable(path: Path) -> None:
    """The clip opens and its first frame decodes."""
    import av

    with av.open(str(path)) as c:
        for _ in c.decode(video=0):
            return
    raise MediaError(f"{path}: the clip has no decodable frame")


def export_hit_clips(folder: Path, shown: list) -> None:
    """Export the time range of every video hit (`headsearch.search.hits.ShownHit`) into `folder`; a hit
    whose clip cannot be written says why in its `clip`."""
    from schemas.records import MediaKind

    for s in shown:
        if s.sighting is not None and s.sighting.kind != MediaKind.VIDEO:
            continue  # a photo has no clip
        try:
            s.clip = export_clip(Path(s.hit.video), s.hit.start, s.hit.end, Path(folder)).to_dict()
        except MediaError as e:
            s.clip = {"path": None, "error": str(e)}
            log.info("%s", e.detail or e)
