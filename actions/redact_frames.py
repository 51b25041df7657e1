"""Heads hidden in every frame of a video: how each is hidden, and the one pass that decodes, hides and encodes the
video frame by frame (its audio and other streams copied, packet for packet), with the audit trail of every box and
a contact sheet to check before publishing. Where each head is in each frame: `actions.redact_heads`.

Heads are hidden on the decoded frame's own planes (YUV, no colour conversion): every pixel outside the boxes reaches
the encoder as decoded. The frames keep their presentation times, so the output keeps the source's frame count, rate,
duration and start; the first video stream is encoded again (its codec where PyAV can encode it, else H.264, else
MPEG-4 Part 2), every other stream is copied; another video stream (an alternate angle) would show the heads: it is
left out, and said.
"""
from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import cv2
import numpy as np

from actions.redact_heads import (  # noqa: F401 - where each head is, named here too for the redactor and its tests
    REFINE_SIDE,
    HeadBoxes,
    HeadPath,
    covered_frames,
    grown,
    pixel_box,
    to_stored,
    to_upright,
)
from headsearch.basics.errors import HeadsearchError, MediaError, first_line
from headsearch.basics.files import write_bytes_atomic
from headsearch.basics.json_text import json_text
from headsearch.basics.timeline import format_time
from schemas.records import Box, RedactStyle, SourceProbe

log = logging.getLogger(__name__)

STYLES = tuple(s.value for s in RedactStyle)
BLUR_CELLS = 6  # blur: the head is averaged down to about this many cells across, then smoothed back (nothing of a face is left)
PIXEL_CELLS = 8  # pixelate: this many blocks across the head
PREVIEW_TILES = 12  # frames on the contact sheet (more when more tracks are hidden: one frame of each, up to PREVIEW_MAX)
PREVIEW_MAX = 24
PREVIEW_TILE_W = 360
# The codec's encoder where PyAV has one; else H.264, else MPEG-4 Part 2. Quality near the source's (a redacted copy
# is published: it should not look worse than the original outside the heads); x264's veryfast preset encoded the
# hamilton clip 2-3x faster than fast on 2 cores, in a file 8% larger at the same quality (crf 18).
ENCODERS = {"h264": "libx264", "hevc": "libx265", "vp8": "libvpx", "vp9": "libvpx-vp9", "mpeg4": "mpeg4", "mjpeg": "mjpeg",
            "ffv1": "ffv1", "av1": "libsvtav1"}
FALLBACK_ENCODERS = ("libx264", "mpeg4")
ENCODER_OPTIONS = {"libx264": {"crf": "18", "preset": "veryfast"}, "libx265": {"crf": "20", "preset": "fast", "x265-params": "log-level=error"},
                   "libvpx": {"crf": "8", "b": "8M"}, "libvpx-vp9": {"crf": "24", "b": "0", "row-mt": "1", "cpu-used": "4"},
                   "libsvtav1": {"crf": "28", "preset": "8"}}
# Matroska cannot start before 0 unless told: by default FFmpeg moved every stream later by the earliest negative time,
# an AAC encoder's priming packet (1,024 samples before the sound starts, at -64 ms for 16 kHz), and the output played
# that much longer than its source, its frames that much late. Told not to, it keeps the source's times, that packet's
# too (a block may lie before its cluster); MP4 and MOV hide it with an edit list, as their sources do.
MUXER_OPTIONS = {".mkv": {"avoid_negative_ts": "disabled"}}
QUANTISED = {"mpeg4", "mjpeg"}  # encoders held to a fine quantiser (2-3) instead of their low default bit rate
# Planar formats whose planes are hidden in place: 8 bits, or 10-16 bits little-endian (two bytes a sample).
PLANAR = {"yuv420p", "yuvj420p", "yuv422p", "yuvj422p", "yuv444p", "yuvj444p", "yuv440p", "yuvj440p", "yuv411p", "gray",
          "yuv420p10le", "yuv422p10le", "yuv444p10le", "yuv420p12le", "yuv422p12le", "yuv444p12le", "gray10le", "gray12le"}


class FrameProgress(Protocol):
    """A progress bar over the frames (tqdm's interface)."""

    def reset(self, total: int | None = None) -> object: ...

    def update(self, n: int = 1) -> object: ...


# ----- how a head is hidden -------------------------------------------------------------------------
def parse_style(text: object, name: str = "--style") -> RedactStyle:
    """The style a user asked for, or one line saying what there is."""
    try:
        return RedactStyle(text)
    except ValueError:
        raise HeadsearchError(f"{name} {str(text)[:20]!r}: one of {', '.join(STYLES)}") from None


def _blurred(region: np.ndarray) -> np.ndarray:
    """The region averaged down to about BLUR_CELLS cells across, then smoothed back to its size."""
    h, w = region.shape
    side = max(h, w)
    cw, ch = max(1, round(w * BLUR_CELLS / side)), max(1, round(h * BLUR_CELLS / side))
    small = cv2.resize(region, (cw, ch), interpolation=cv2.INTER_AREA)
    mid = cv2.resize(small, (cw * 8, ch * 8), interpolation=cv2.INTER_LINEAR)  # smoothed at a small size, whatever the head's
    mid = cv2.GaussianBlur(mid, (0, 0), 4.0)
    return cv2.resize(mid, (w, h), interpolation=cv2.INTER_LINEAR)


def _pixelated(region: np.ndarray) -> np.ndarray:
    h, w = region.shape
    cell = max(1.0, max(h, w) / PIXEL_CELLS)
    small = cv2.resize(region, (max(1, math.ceil(w / cell)), max(1, math.ceil(h / cell))), interpolation=cv2.INTER_AREA)
    return cv2.resize(small, (w, h), interpolation=cv2.INTER_NEAREST)


def _planes(frame) -> list[tuple[np.ndarray, float, float, bool]]:
    """A planar frame's planes as writable arrays (views of its buffers), each with its scale to the frame's pixels and
    whether it holds colour (chroma)."""
    name = frame.format.name
    wide = name.endswith("le")
    dtype = np.dtype("<u2") if wide else np.dtype(np.uint8)
    out = []
    for i, plane in enumerate(frame.planes):
        stride = plane.line_size // dtype.itemsize
        rows = np.frombuffer(plane, dtype, count=plane.height * stride).reshape(plane.height, stride)
        out.append((rows[:, :plane.width], plane.width / frame.width, plane.height / frame.height, i > 0 and not name.startswith("gray")))
    return out


def hide(frame, boxes: Sequence[tuple[int, int, int, int]], style: RedactStyle):
    """Hide the boxes (frame pixels) of a planar frame in `style`, on each plane; returns the frame (writable: its
    buffers copied where the decoder still holds them)."""
    frame.make_writable()
    name = frame.format.name
    bits = 8 if not name.endswith("le") else int("".join(c for c in name.rsplit("p", 1)[-1] if c.isdigit()) or 8)
    full_range = name.startswith("yuvj") or name.startswith("gray") or int(frame.color_range or 0) == 2
    for array, rx, ry, chroma in _planes(frame):
        for x1, y1, x2, y2 in boxes:
            px1, py1 = math.floor(x1 * rx), math.floor(y1 * ry)
            px2, py2 = min(array.shape[1], math.ceil(x2 * rx)), min(array.shape[0], math.ceil(y2 * ry))
            if px2 <= px1 or py2 <= py1:
                continue
            region = array[py1:py2, px1:px2]
            if style == "box":
                region[...] = (128 << (bits - 8)) if chroma else (0 if full_range else 16 << (bits - 8))
            elif style == "pixelate":
                region[...] = _pixelated(np.ascontiguousarray(region))
            else:
                region[...] = _blurred(np.ascontiguousarray(region))
    return frame


def _region(frame, box: Box, side: int, whole: list) -> tuple[np.ndarray, float, float, float]:
    """A region of a frame (a box in its pixels, clipped) as RGB pixels no larger than `side` across: (pixels, their scale
    to the frame's, the region's left and top). A 4:2:0 frame's region is converted alone; another frame is converted
    whole once (kept in `whole`)."""
    width, height = frame.width, frame.height
    x1, y1 = max(0, math.floor(box.x1)), max(0, math.floor(box.y1))
    x2, y2 = min(width, math.ceil(box.x2)), min(height, math.ceil(box.y2))
    if frame.format.name in ("yuv420p", "yuvj420p"):
        x1, y1 = x1 - x1 % 2, y1 - y1 % 2
        x2, y2 = x2 - (x2 - x1) % 2, y2 - (y2 - y1) % 2
    if x2 - x1 < 2 or y2 - y1 < 2:
        return np.zeros((0, 0, 3), np.uint8), 1.0, 0.0, 0.0
    scale = min(1.0, side / max(x2 - x1, y2 - y1))
    if frame.format.name in ("yuv420p", "yuvj420p"):  # shrunk on its planes, then converted: a head's region, not the frame
        w, h = max(2, 2 * round((x2 - x1) * scale / 2)), max(2, 2 * round((y2 - y1) * scale / 2))
        scale = w / (x2 - x1)
        planes = [a for a, _, _, _ in _planes(frame)]
        parts = [(planes[0][y1:y2, x1:x2], (w, h)), (planes[1][y1 // 2:y2 // 2, x1 // 2:x2 // 2], (w // 2, h // 2)),
                 (planes[2][y1 // 2:y2 // 2, x1 // 2:x2 // 2], (w // 2, h // 2))]
        small = [cv2.resize(np.ascontiguousarray(p), size, interpolation=cv2.INTER_AREA) for p, size in parts]
        rgb = cv2.cvtColor(np.concatenate([p.ravel() for p in small]).reshape(h * 3 // 2, w), cv2.COLOR_YUV2RGB_I420)
        return rgb, scale, float(x1), float(y1)
    if not whole:
        whole.append(frame.to_ndarray(format="rgb24"))
    rgb = whole[0][y1:y2, x1:x2]
    if scale < 1.0:
        rgb = cv2.resize(rgb, (max(1, round((x2 - x1) * scale)), max(1, round((y2 - y1) * scale))), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(rgb), scale, float(x1), float(y1)


def _luma(frame) -> np.ndarray:
    """A frame's grey pixels (8 bits): its Y plane where it has one, else a conversion."""
    name = frame.format.name
    if name in PLANAR:
        y = _planes(frame)[0][0]
        return np.ascontiguousarray(y if y.dtype == np.uint8 else (y >> (int(name[-4:-2]) - 8)).astype(np.uint8))
    return frame.to_ndarray(format="gray")


# ----- the audit trail and the contact sheet ----------------------------------------------------------------
class AuditTrail:
    """The JSON sidecar of a redaction, written as the frames go by (a long video's boxes are never all held): what was
    redacted and how (`head`), then every frame with a box (`frames`: frame number, time, and each box with its track and
    who it is, in the frame's upright pixels, `lost` where the head was kept where it was last found; `not_drawn`: boxes
    left out on a spared head, with why), then the totals (`tail`, with the one-frame gaps: a place hidden at t-1 and t+1
    and not at t, closed before the pass and any left). Written beside its final name and moved there by `commit`."""

    def __init__(self, path: Path, head: dict):
        self.path = Path(path)
        self.tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        self._file = open(self.tmp, "w", encoding="utf-8")  # noqa: SIM115 - closed by `close` or `discard`
        self._file.write(json_text(head, indent=1)[:-2].rstrip() + ',\n "frames": [')
        self._first = True
        self.gaps_closed = 0  # one-frame gaps closed before the pass (`HeadBoxes.gaps_closed`)
        self.gaps: list[int] = []  # frames of the one-frame gaps left
        self.lost = 0  # boxes kept where their head was last found
        self._recent: dict[int, list[Box]] = {}

    def frame(self, index: int, seconds: float, boxes: list[dict], not_drawn: list[dict] | None = None) -> None:
        said = {"frame": index, "time": round(seconds, 6), "boxes": boxes} | ({"not_drawn": not_drawn} if not_drawn else {})
        self._file.write(("\n  " if self._first else ",\n  ") + json_text(said, indent=None))
        self._first = False
        self.lost += sum(1 for b in boxes if b.get("lost"))
        now = [Box(*b["box"]) for b in boxes]
        if one_frame_gap(self._recent.get(index - 2, []), self._recent.get(index - 1, []), now):
            self.gaps.append(index - 1)
        self._recent = {i: b for i, b in self._recent.items() if i >= index - 1} | {index: now}

    def close(self, tail: dict) -> None:
        tail = tail | {"one_frame_gaps": {"closed": self.gaps_closed, "left": len(self.gaps), "frames_left": self.gaps[:100]},
                       "boxes_kept_where_last_found": self.lost}
        rest = json_text(tail, indent=1)[1:]  # without its opening brace: the tail's keys follow the frames
        self._file.write("\n ],\n" + rest.lstrip("\n") + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()

    def commit(self) -> None:
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        # Closing flushes what is buffered: on a full disk that fails again, and the file must go all the same.
        with contextlib.suppress(OSError):
            self._file.close()
        self.tmp.unlink(missing_ok=True)


def one_frame_gap(before: Sequence[Box], now: Sequence[Box], after: Sequence[Box]) -> bool:
    """A place hidden in the frames before and after and not in this one: a box before and one after on the same head
    (IoU 0.3 or more) whose common part no box of this frame covers half of."""
    for a in before:
        for b in after:
            if a.iou(b) < 0.3:
                continue
            common = Box(max(a.x1, b.x1), max(a.y1, b.y1), min(a.x2, b.x2), min(a.y2, b.y2))
            if not any(_overlap(common, c) >= 0.5 * common.area for c in now):
                return True
    return False


def _overlap(a: Box, b: Box) -> float:
    return max(0.0, min(a.x2, b.x2) - max(a.x1, b.x1)) * max(0.0, min(a.y2, b.y2) - max(a.y1, b.y1))


def preview_frames(paths: Sequence[HeadPath], frames: int, tiles: int = PREVIEW_TILES) -> list[int]:
    """The frames a contact sheet shows: the middle frame of each hidden track's span (up to PREVIEW_MAX), and more
    spread evenly over the frames with a box up to `tiles`; evenly over the video where nothing is hidden."""
    spans = sorted((p.first, p.last) for p in paths if not p.spared)
    if not spans:
        return sorted({round((i + 0.5) * frames / 4) for i in range(4)} & set(range(frames))) if frames else [0]
    chosen = {(a + b) // 2 for a, b in spans[:PREVIEW_MAX]}
    merged: list[list[int]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    total = sum(b - a + 1 for a, b in merged)
    wanted = max(0, min(tiles, PREVIEW_MAX) - len(chosen))
    apart = max(1, total // (2 * max(tiles, 1)))  # an evenly spread frame this near one chosen already adds nothing
    for i in range(wanted):
        k = int((i + 0.5) * total / wanted)
        for a, b in merged:
            if k <= b - a:
                if all(abs(a + k - c) >= apart for c in chosen):
                    chosen.add(a + k)
                break
            k -= b - a + 1
    return sorted(chosen)


@dataclass
class PreviewSheet:
    """A contact sheet of chosen output frames (as encoded, heads hidden) with each box drawn and named."""

    wanted: set[int]
    title: str
    tiles: list[tuple[np.ndarray, str]] = field(default_factory=list)

    def offer(self, index: int, seconds: float, frame, turns: int, boxes: list[tuple[Box, str]]) -> None:
        """Keep frame `index` when it is wanted (`boxes`: upright boxes with who they are)."""
        if index not in self.wanted:
            return
        rgb = np.ascontiguousarray(np.rot90(frame.to_ndarray(format="rgb24"), turns)) if turns else frame.to_ndarray(format="rgb24")
        h, w = rgb.shape[:2]
        scale = PREVIEW_TILE_W / w
        tile = cv2.cvtColor(cv2.resize(rgb, (PREVIEW_TILE_W, max(1, round(h * scale))), interpolation=cv2.INTER_AREA), cv2.COLOR_RGB2BGR)
        for box, who in boxes:
            p1, p2 = (round(box.x1 * scale), round(box.y1 * scale)), (round(box.x2 * scale) - 1, round(box.y2 * scale) - 1)
            cv2.rectangle(tile, p1, p2, (0, 0, 0), 3, cv2.LINE_AA)
            cv2.rectangle(tile, p1, p2, (40, 230, 255), 1, cv2.LINE_AA)
            _label(tile, who[:28], (p1[0] + 2, max(12, p1[1] + 13)))
        self.tiles.append((tile, f"frame {index}  {format_time(seconds)}  {len(boxes)} box{'es' if len(boxes) != 1 else ''}"))

    def write(self, path: Path, columns: int = 3) -> Path:
        if not self.tiles:
            raise MediaError(f"{path}: no frame to put on the contact sheet")
        th = max(t.shape[0] for t, _ in self.tiles)
        caption, head = 22, 30
        columns = min(columns, len(self.tiles))
        rows = -(-len(self.tiles) // columns)
        sheet = np.full((head + rows * (th + caption) + 6, columns * (PREVIEW_TILE_W + 6) + 6, 3), 245, np.uint8)
        cv2.putText(sheet, self.title[:110], (8, 20), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (30, 30, 30), 1, cv2.LINE_AA)
        for i, (tile, text) in enumerate(self.tiles):
            y, x = head + (i // columns) * (th + caption), 6 + (i % columns) * (PREVIEW_TILE_W + 6)
            sheet[y:y + tile.shape[0], x:x + tile.shape[1]] = tile
            cv2.putText(sheet, text, (x + 2, y + th + 15), cv2.FONT_HERSHEY_SIMPLEX, 0.42, (40, 40, 40), 1, cv2.LINE_AA)
        ok, png = cv2.imencode(".png", sheet)
        if not ok:
            raise MediaError(f"{path}: cannot encode the contact sheet")
        write_bytes_atomic(Path(path), png.tobytes())
        return Path(path)


def _label(image: np.ndarray, text: str, at: tuple[int, int]) -> None:
    cv2.putText(image, text, at, cv2.FONT_HERSHEY_SIMPLEX, 0.4, (0, 0, 0), 3, cv2.LINE_AA)
    cv2.putText(image, text, at, cv2.FONT_HERSHEY_SIMPLEX, 0.4, (40, 230, 255), 1, cv2.LINE_AA)


# ----- the pass -------------------------------------------------------------------------------------
@dataclass
class Written:
    """What the pass wrote."""

    frames: int = 0  # frames encoded (every decoded frame)
    frames_hidden: int = 0  # frames with at least one box
    boxes: int = 0
    encoder: str = ""
    copied: list[str] = field(default_factory=list)  # the other streams copied, in words
    left_out: list[str] = field(default_factory=list)  # streams left out, and why
    stopped_at: int | None = None  # decoding stopped early (a damaged stream) at this frame
    seconds: float = 0.0


def first_frame_turns(source: Path) -> tuple[int, float]:
    """(quarter turns anticlockwise that show the video upright, the rotation in degrees) as its first frame says (a
    phone's portrait video stored landscape); (0, 0.0) when it says nothing."""
    import av

    try:
        with av.open(str(source)) as c:
            for frame in c.decode(video=0):
                rotation = float(getattr(frame, "rotation", 0) or 0)
                return int(round(rotation / 90.0)) % 4, rotation
    except (av.error.FFmpegError, ValueError, OSError):
        pass  # the pass itself says what is wrong with the file
    return 0, 0.0


def _encoder_for(codec: str, container) -> str:
    import av

    supported = getattr(container, "supported_codecs", None)
    for name in (ENCODERS.get(codec), *FALLBACK_ENCODERS):
        if not name or name not in av.codecs_available:
            continue
        try:
            made = av.codec.Codec(name, "w").canonical_name
        except (av.error.FFmpegError, ValueError):
            continue
        if supported is None or made in supported:
            return name
    raise MediaError(f"{container.name}: no encoder of this machine's PyAV can write video into this kind of file "
                     "(name the output .mp4 or .mkv)")


def _video_output(dst, ivs, encoder: str, rotation: float):
    """The output's video stream: the source's size, pixel format (where the encoder takes it), frame rate, time base,
    colours and pixel shape."""
    import av

    ic = ivs.codec_context
    ovs = dst.add_stream(encoder, rate=ivs.average_rate or ivs.guessed_rate or 25)
    cc = ovs.codec_context
    cc.width, cc.height = ic.width, ic.height
    formats = {f.name for f in (av.codec.Codec(encoder, "w").video_formats or [])}
    cc.pix_fmt = ic.pix_fmt if ic.pix_fmt in PLANAR and ic.pix_fmt in formats else "yuv420p"
    cc.time_base = ivs.time_base
    ovs.time_base = ivs.time_base
    for attribute in ("color_range", "colorspace", "color_primaries", "color_trc", "sample_aspect_ratio"):
        value = getattr(ic, attribute, None)
        if value:
            with contextlib.suppress(AttributeError, TypeError, ValueError):
                setattr(cc, attribute, value)
    if encoder in QUANTISED:
        cc.qmin, cc.qmax = 2, 3
        cc.bit_rate = max(int(ic.bit_rate or 0) * 4, 20_000_000)
    cc.options = dict(ENCODER_OPTIONS.get(encoder, {}))
    if rotation:
        ovs.set_display_rotation(rotation)
    return ovs


def _copied_outputs(dst, inp, ivs, written: Written) -> dict[int, object]:
    """The other streams, copied: audio, subtitles, data and attached pictures; another moving video stream would show the
    heads unhidden and is left out; a stream the output's kind of file cannot hold is left out too. Each is said."""
    supported = getattr(dst, "supported_codecs", None)
    outs = {}
    for s in inp.streams:
        if s.index == ivs.index:
            continue
        what = f"stream {s.index} ({s.type}, {s.codec_context.name if s.codec_context else 'unknown codec'})"
        if s.type == "video" and not (s.disposition & 0x400):  # AV_DISPOSITION_ATTACHED_PIC: cover art is copied
            written.left_out.append(f"{what}: a second video stream, not redacted, so left out")
            continue
        name = s.codec_context.name if s.codec_context else None
        if supported is not None and name and name not in supported:
            written.left_out.append(f"{what}: this kind of file cannot hold it (name the output .mkv to keep it)")
            continue
        try:
            outs[s.index] = dst.add_stream_from_template(s)
        except Exception as e:  # noqa: BLE001 - PyAV raises its own and builtin types for streams it cannot copy
            written.left_out.append(f"{what}: cannot be copied ({first_line(e)})")
            continue
        written.copied.append(what)
    return outs


def write_hidden(source: Path, out: Path, boxes_of: Callable[[int, tuple[int, int]], HeadBoxes], style: RedactStyle,
                 trail: AuditTrail | None = None, preview: PreviewSheet | None = None, progress: FrameProgress | None = None,
                 total: int | None = None, probe: SourceProbe | None = None) -> Written:
    """Decode `source` frame by frame, hide the heads `boxes_of(turns, stored size)` gives in each frame, encode it into
    `out` with its presentation time, and copy every other stream's packets (see the module's docstring); each frame's
    boxes go to `trail`, the wanted frames to `preview`. `probe`: the source's look (its turns), else its first frame is
    read for them."""
    import av

    t0 = time.perf_counter()
    turns, rotation = (probe.turns, probe.rotation) if probe is not None else first_frame_turns(source)
    written = Written()
    if progress is not None:
        progress.reset(total=total)
    with av.open(str(source)) as inp, av.open(str(out), "w", options=MUXER_OPTIONS.get(Path(out).suffix.lower(), {})) as dst:
        ivs = inp.streams.video[0]
        ivs.thread_type = "AUTO"
        written.encoder = _encoder_for(ivs.codec_context.name, dst)
        ovs = _video_output(dst, ivs, written.encoder, rotation)
        copies = _copied_outputs(dst, inp, ivs, written)
        heads = boxes_of(turns, (ivs.codec_context.width, ivs.codec_context.height))
        if trail is not None:
            trail.gaps_closed = heads.gaps_closed
        step = _frame_step(ivs)
        lasting: dict[int, int] = {}  # a source frame's presentation time -> its packet's duration (time base of the source)
        # ...held within the stream's end: a packet's duration is the step to the next in decoding order, and goldeneye's
        # frame presented last lasts two frames by it, one by the stream's end; a .mkv ends where its last frame does, and
        # played 41.7 ms longer than its source.
        end = (ivs.start_time or 0) + ivs.duration if ivs.duration else None
        last_pts: int | None = None
        index = 0
        packets = inp.demux([ivs, *(inp.streams[i] for i in copies)])
        try:
            for packet in packets:
                if packet.stream.index != ivs.index:
                    if packet.dts is not None:
                        packet.stream = copies[packet.stream.index]
                        _write(source, lambda p=packet: dst.mux(p))
                    continue
                if packet.pts is not None and packet.duration:
                    lasting[packet.pts] = packet.duration if end is None or packet.pts >= end else min(packet.duration, end - packet.pts)
                for frame in packet.decode():
                    last_pts = _keep_time(frame, last_pts, step, ivs.time_base)
                    hidden = _hidden_frame(frame, index, heads, style, ovs.codec_context.pix_fmt, turns, written, trail, preview)
                    _write(source, lambda f=hidden: _mux_encoded(dst, ovs.encode(f), lasting, ivs.time_base))
                    index += 1
                    if progress is not None:
                        progress.update(1)
        except (av.error.FFmpegError, ValueError) as e:
            if index == 0:
                raise MediaError(f"{source}: not a readable video ({first_line(e)})") from e
            written.stopped_at = index
            log.warning("%s: decoding stopped at frame %d (%s)", source, index, first_line(e))
        _write(source, lambda: _mux_encoded(dst, ovs.encode(), lasting, ivs.time_base))
    written.frames = index
    written.seconds = time.perf_counter() - t0
    return written


def _mux_encoded(dst, packets, lasting: dict[int, int], time_base) -> None:
    """Encoded packets written, each lasting as long as the source's frame at its time: the encoder gives a frame whose
    duration the decoder lost (the last, often) one frame at the average rate, which made a variable-rate file's output
    play longer than its source (goldeneye-vfr-drop3.mp4: 20.6 ms)."""
    for packet in packets:
        if packet.pts is not None and packet.time_base is not None:
            source_pts = packet.pts if packet.time_base == time_base else round(packet.pts * packet.time_base / time_base)
            if source_pts in lasting:
                packet.duration = lasting[source_pts] if packet.time_base == time_base else max(1, round(lasting[source_pts] * time_base / packet.time_base))
        dst.mux(packet)


def _write(source: Path, step: Callable[[], object]) -> None:
    """Encode or write: an error there is the output's, said in one line (a decoding error is the source's, and ends
    the pass where it stopped)."""
    import av

    try:
        step()
    except (av.error.FFmpegError, ValueError) as e:
        raise MediaError(f"{source}: the redacted video cannot be written ({first_line(e)})") from e


def _hidden_frame(frame, index: int, heads: HeadBoxes, style: str, pix_fmt: str, turns: int, written: Written,
                  trail: AuditTrail | None, preview: PreviewSheet | None):
    """One decoded frame with its heads hidden (the frame itself where it has none), said to the trail and the preview."""
    whole: list = []
    found = heads.at(index, lambda: _luma(frame), lambda box, side: _region(frame, box, side, whole))
    if found:
        if frame.format.name != pix_fmt:
            frame = _reformatted(frame, pix_fmt)
        frame = hide(frame, [b for _, b in found], style)
        written.frames_hidden += 1
        written.boxes += len(found)
    seconds = float(frame.pts * frame.time_base)
    width, height = heads.stored
    upright = [(to_upright(Box(*b), turns, width, height), p) for p, b in found]
    if trail is not None and (found or heads.not_drawn):
        trail.frame(index, seconds, [{"track": p.track, "who": p.who, "box": [round(v) for v in box.as_tuple()]}
                                     | ({"lost": True} if p.track in heads.lost else {}) for box, p in upright],
                    [{"track": n.path.track, "who": n.path.who, "box": [round(v) for v in to_upright(Box(*n.box), turns, width, height).as_tuple()],
                      "why": n.why} for n in heads.not_drawn])
    if preview is not None:
        preview.offer(index, seconds, frame, turns, [(box, p.who) for box, p in upright])
    return frame


def _frame_step(stream) -> int:
    """One frame's duration in the stream's time base (at least 1)."""
    rate = stream.average_rate or stream.guessed_rate
    if not rate or not stream.time_base:
        return 1
    return max(1, round(1 / (float(rate) * float(stream.time_base))))


def _keep_time(frame, last_pts: int | None, step: int, time_base) -> int:
    """The frame keeps its presentation time; a missing or backward one (a damaged stream) becomes the last plus a frame."""
    pts = frame.pts
    if pts is None or (last_pts is not None and pts <= last_pts):
        pts = 0 if last_pts is None else last_pts + step
        frame.pts = pts
    frame.time_base = time_base
    return pts


def _reformatted(frame, pix_fmt: str):
    out = frame.reformat(format=pix_fmt)
    out.pts, out.time_base = frame.pts, frame.time_base
    return out
