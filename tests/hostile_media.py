"""A corpus of hostile media, generated on demand with PyAV and Pillow (nothing of it is committed).

Each `Case` makes one file (or link, or pipe) from a real face photo and says what indexing it must
end in: `indexed` (read and stored, heads or not), `failed` (one error line holding `message`), or
`either` (damaged files whose outcome depends on where the damage fell: indexed, or one line).
`make_corpus(folder)` writes every case; `scripts/hostile_report.py` runs each one alone and
measures it.
"""
from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
from clips import write_clip


@dataclass(frozen=True)
class Case:
    name: str  # the file's name in the corpus folder
    make: Callable[[Path, np.ndarray], None]  # (path, face photo as RGB) -> writes the file
    expect: str  # "indexed", "failed" or "either"
    message: str = ""  # a fragment of the error line ("failed")
    explicit: bool = False  # given as a path on the command line (a folder walk skips its extension)
    what: str = ""  # one phrase for the report


# ---------------------------------------------------------------------------------------------
# Building blocks


def face_frame(face: np.ndarray, width: int, height: int, shift: int = 0) -> np.ndarray:
    """The face photo fitted into a width x height frame on a grey background, moved `shift` pixels."""
    import cv2

    frame = np.full((height, width, 3), 96, np.uint8)
    fh, fw = face.shape[:2]
    scale = min(width / fw, height / fh)
    small = cv2.resize(face, (max(1, int(fw * scale)), max(1, int(fh * scale))), interpolation=cv2.INTER_AREA)
    y = (height - small.shape[0]) // 2
    x = min(max(0, (width - small.shape[1]) // 2 + shift), width - small.shape[1])
    frame[y:y + small.shape[0], x:x + small.shape[1]] = small
    return frame


def write_video(path: Path, frames, fps: int = 10, **kw) -> None:
    """`clips.write_clip` at the corpus's 10 fps (its other options: codec, pixel format, container, pts...)."""
    write_clip(path, frames, fps=fps, **kw)


def face_clip(face: np.ndarray, width: int = 320, height: int = 240, n: int = 15) -> list[np.ndarray]:
    return [face_frame(face, width, height, shift=2 * i) for i in range(n)]


def save_image(path: Path, rgb: np.ndarray, mode: str | None = None, fmt: str | None = None, **kw) -> None:
    from PIL import Image

    im = Image.fromarray(rgb)
    if mode is not None:
        im = im.convert(mode)
    im.save(path, format=fmt, **kw)


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def png_bomb(path: Path, width: int, height: int, rows: int = 64) -> None:
    """A PNG declaring width x height RGB pixels whose data holds the first `rows` rows (zeros)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    data = zlib.compress(b"\0" * ((1 + 3 * width) * rows), 9)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", data) + png_chunk(b"IEND", b""))


def patch_jpeg_size(data: bytes, width: int, height: int) -> bytes:
    """Every baseline frame header (SOF0) in the data claiming width x height."""
    out = bytearray(data)
    i = out.find(b"\xff\xc0")
    while i >= 0:
        out[i + 5:i + 9] = struct.pack(">HH", height, width)
        i = out.find(b"\xff\xc0", i + 2)
    return bytes(out)


def jpeg_bytes(rgb: np.ndarray, **kw) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG", **kw)
    return buf.getvalue()


def _box_offset(data: bytes, kind: bytes) -> int:
    i = data.find(kind)
    assert i >= 4, f"no {kind!r} box"
    return i


def patch_mp4_duration(path: Path, seconds: float) -> None:
    """The movie and media headers (mvhd, mdhd) of an MP4 claiming `seconds` of playing time."""
    data = bytearray(path.read_bytes())
    for kind in (b"mvhd", b"mdhd"):
        i = _box_offset(data, kind) + 4
        version = data[i]
        if version == 0:
            timescale = struct.unpack(">I", data[i + 12:i + 16])[0]
            data[i + 16:i + 20] = struct.pack(">I", min(0xFFFFFFFF, int(seconds * timescale)))
        else:
            timescale = struct.unpack(">I", data[i + 20:i + 24])[0]
            data[i + 24:i + 32] = struct.pack(">Q", int(seconds * timescale))
    path.write_bytes(bytes(data))


def patch_mkv_duration(path: Path, milliseconds: float) -> None:
    """The Segment Info Duration element of a Matroska file set to `milliseconds`."""
    data = bytearray(path.read_bytes())
    i = data.find(b"\x44\x89\x88")  # Duration, an 8-byte float
    if i >= 0:
        data[i + 3:i + 11] = struct.pack(">d", milliseconds)
    else:
        i = data.find(b"\x44\x89\x84")  # ...or a 4-byte one
        assert i >= 0, "no Duration element"
        data[i + 3:i + 7] = struct.pack(">f", milliseconds)
    path.write_bytes(bytes(data))


def patch_avi_frame_count(path: Path, frames: int) -> None:
    """The AVI main header's and stream header's frame counts set to `frames`."""
    data = bytearray(path.read_bytes())
    i = _box_offset(data, b"avih")
    data[i + 24:i + 28] = struct.pack("<I", frames)
    i = _box_offset(data, b"strh")
    data[i + 40:i + 44] = struct.pack("<I", frames)
    path.write_bytes(bytes(data))


def truncated(make: Callable[[Path, np.ndarray], None], fraction: float) -> Callable[[Path, np.ndarray], None]:
    def cut(path: Path, face: np.ndarray) -> None:
        make(path, face)
        data = path.read_bytes()
        path.write_bytes(data[:max(1, int(len(data) * fraction))])
    return cut


def corrupted(make: Callable[[Path, np.ndarray], None], where: float = 0.5, length: int = 4096, every: int = 0,
              seed: int = 0) -> Callable[[Path, np.ndarray], None]:
    """Random bytes over `length` bytes at `where` (a fraction of the file), or over 16 bytes every `every` bytes."""
    def damage(path: Path, face: np.ndarray) -> None:
        make(path, face)
        data = bytearray(path.read_bytes())
        rng = np.random.default_rng(seed)
        if every:
            for i in range(every, len(data) - 16, every):
                data[i:i + 16] = rng.bytes(16)
        else:
            start = int(len(data) * where)
            data[start:start + length] = rng.bytes(min(length, len(data) - start))
        path.write_bytes(bytes(data))
    return damage


# ---------------------------------------------------------------------------------------------
# The makers


def _h264(path: Path, face: np.ndarray) -> None:
    write_video(path, face_clip(face))


_GOP = {"g": "8", "crf": "30"}  # a keyframe every 8 frames: a cut file keeps decodable frames


def _h264_faststart(path: Path, face: np.ndarray) -> None:
    write_video(path, face_clip(face, n=48), options=_GOP, container_options={"movflags": "faststart"})


def _mkv(path: Path, face: np.ndarray) -> None:
    write_video(path, face_clip(face, n=48), fmt="matroska", options=_GOP)


def _jpeg(path: Path, face: np.ndarray) -> None:
    path.write_bytes(jpeg_bytes(face_frame(face, 480, 360), quality=90))


def _png(path: Path, face: np.ndarray) -> None:
    save_image(path, face_frame(face, 480, 360))


def _tiny_video(size: tuple[int, int]) -> Callable[[Path, np.ndarray], None]:
    def make(path: Path, face: np.ndarray) -> None:
        w, h = size
        write_video(path, [face_frame(face, w, h, i) for i in range(5)], pix_fmt="yuv420p" if w % 2 == h % 2 == 0 else "yuv444p")
    return make


def _audio_only(path: Path, face: np.ndarray) -> None:
    import av

    with av.open(str(path), "w") as out:
        stream = out.add_stream("aac", rate=22050)
        stream.layout = "mono"
        t = np.arange(22050 * 2) / 22050
        samples = (0.2 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
        for i in range(0, len(samples), 1024):
            frame = av.AudioFrame.from_ndarray(samples[None, i:i + 1024], format="fltp", layout="mono")
            frame.sample_rate, frame.pts = 22050, i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)


def _zero_frames(path: Path, face: np.ndarray) -> None:
    """A container written with a video stream but not one frame (MP4 then drops the track itself)."""
    import av

    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 320, 240, "yuv420p"
        out.start_encoding()
        for packet in stream.encode(None):
            out.mux(packet)


def _huge_mjpeg(container_too: bool) -> Callable[[Path, np.ndarray], None]:
    """An MJPEG AVI whose JPEG frames (and AVI headers, when `container_too`) claim 16000x16000 pixels;
    their data holds 64x64."""
    def make(path: Path, face: np.ndarray) -> None:
        write_video(path, [face_frame(face, 64, 64, i) for i in range(5)], codec="mjpeg", pix_fmt="yuvj420p", fmt="avi")
        data = bytearray(patch_jpeg_size(path.read_bytes(), 16000, 16000))
        if container_too:
            i = _box_offset(data, b"avih")
            data[i + 40:i + 48] = struct.pack("<II", 16000, 16000)
            i = _box_offset(data, b"strf")
            data[i + 12:i + 20] = struct.pack("<ii", 16000, 16000)
        path.write_bytes(bytes(data))
    return make


def _absurd_avi_frames(path: Path, face: np.ndarray) -> None:
    write_video(path, face_clip(face, n=10), codec="mjpeg", pix_fmt="yuvj420p", fmt="avi")
    patch_avi_frame_count(path, 2_000_000_000)


def _absurd_mp4_duration(path: Path, face: np.ndarray) -> None:
    _h264(path, face)
    patch_mp4_duration(path, 400_000)  # 111 hours (in 32 bits: all ones would read as "unknown")


def _absurd_mkv_duration(path: Path, face: np.ndarray) -> None:
    _mkv(path, face)
    patch_mkv_duration(path, 1e15)


def _rotated(path: Path, face: np.ndarray) -> None:
    """A portrait clip stored landscape, turned upright by its display matrix (as phones record)."""
    import cv2

    upright = face_clip(face, 240, 320, n=15)
    write_video(path, [cv2.rotate(f, cv2.ROTATE_90_CLOCKWISE) for f in upright], rotation=90)


def _vfr(path: Path, face: np.ndarray) -> None:
    rng = np.random.default_rng(1)
    steps = rng.integers(10, 400, size=24)  # 10-400 ms between frames
    pts = [0, *np.cumsum(steps)[:-1].tolist()]
    write_video(path, face_clip(face, n=24), pts=pts, time_base=Fraction(1, 1000))


def _interlaced(path: Path, face: np.ndarray) -> None:
    write_video(path, face_clip(face, 320, 240, n=20), fps=25, options={"x264-params": "interlaced=1:tff=1"})


def _interlaced_mpeg2(path: Path, face: np.ndarray) -> None:
    write_video(path, face_clip(face, 320, 240, n=20), fps=25, codec="mpeg2video", fmt="mpegts",
                options={"flags": "+ilme+ildct", "top": "1"})


def _ten_bit(path: Path, face: np.ndarray) -> None:
    write_video(path, face_clip(face, n=10), pix_fmt="yuv420p10le")


def _vp9(path: Path, face: np.ndarray) -> None:
    write_video(path, face_clip(face, n=10), codec="libvpx-vp9", fmt="webm", options={"deadline": "realtime", "cpu-used": "8"})


def _resolution_change(path: Path, face: np.ndarray) -> None:
    """Two MPEG-TS streams of different frame sizes, one after the other (a valid byte concatenation)."""
    first, second = path.with_suffix(".a.ts"), path.with_suffix(".b.ts")
    write_video(first, face_clip(face, 320, 240, n=10), fmt="mpegts")
    write_video(second, face_clip(face, 96, 64, n=10), fmt="mpegts")
    path.write_bytes(first.read_bytes() + second.read_bytes())
    first.unlink()
    second.unlink()


def _animated(fmt: str) -> Callable[[Path, np.ndarray], None]:
    def make(path: Path, face: np.ndarray) -> None:
        from PIL import Image

        frames = [Image.fromarray(face_frame(face, 240, 180, 6 * i)) for i in range(6)]
        extra = {"lossless": False} if fmt == "WEBP" else {}
        frames[0].save(path, format=fmt, save_all=True, append_images=frames[1:], duration=100, loop=0, **extra)
    return make


def _large_jpeg(progressive: bool) -> Callable[[Path, np.ndarray], None]:
    """An 8200x8200 photo (67 MP, over the 50 MP default): decoded at 1/2, or refused when progressive."""
    def make(path: Path, face: np.ndarray) -> None:
        from PIL import Image

        im = Image.fromarray(face_frame(face, 410, 410)).resize((8200, 8200), Image.BILINEAR)
        im.save(path, format="JPEG", quality=70, progressive=progressive)
    return make


def _image_mode(mode: str, fmt: str | None = None, **kw) -> Callable[[Path, np.ndarray], None]:
    def make(path: Path, face: np.ndarray) -> None:
        save_image(path, face_frame(face, 480, 360), mode, fmt, **kw)
    return make


def _gray16(path: Path, face: np.ndarray) -> None:
    from PIL import Image

    grey = face_frame(face, 480, 360).mean(axis=2).astype(np.uint16) * 257
    Image.fromarray(grey).save(path)  # mode I;16


def _rgb48(path: Path, face: np.ndarray) -> None:
    import cv2

    bgr = cv2.cvtColor(face_frame(face, 480, 360), cv2.COLOR_RGB2BGR).astype(np.uint16) * 257
    assert cv2.imwrite(str(path), bgr)


def _alpha(path: Path, face: np.ndarray) -> None:
    rgb = face_frame(face, 480, 360)
    alpha = np.full(rgb.shape[:2] + (1,), 255, np.uint8)
    alpha[:, :60] = 0  # a transparent margin
    save_image(path, np.concatenate([rgb, alpha], axis=2))


def _exif_rotated(path: Path, face: np.ndarray) -> None:
    from PIL import Image

    im = Image.fromarray(face_frame(face, 480, 360)).transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    im.save(path, format="JPEG", exif=exif)


def _solid(width: int, height: int, fmt: str | None = None) -> Callable[[Path, np.ndarray], None]:
    def make(path: Path, face: np.ndarray) -> None:
        save_image(path, np.full((height, width, 3), 128, np.uint8), fmt=fmt)
    return make


def _huge_jpeg_header(path: Path, face: np.ndarray) -> None:
    path.write_bytes(patch_jpeg_size(jpeg_bytes(face_frame(face, 256, 256)), 65000, 65000))


def _random(n: int) -> Callable[[Path, np.ndarray], None]:
    def make(path: Path, face: np.ndarray) -> None:
        path.write_bytes(np.random.default_rng(n).bytes(n))
    return make


def _text(path: Path, face: np.ndarray) -> None:
    path.write_text("this is not media\n" * 20)


def _empty(path: Path, face: np.ndarray) -> None:
    path.write_bytes(b"")


def _renamed(make: Callable[[Path, np.ndarray], None], real_suffix: str) -> Callable[[Path, np.ndarray], None]:
    def write(path: Path, face: np.ndarray) -> None:
        real = path.with_name(path.name + ".tmp" + real_suffix)
        make(real, face)
        os.replace(real, path)
    return write


def _symlink_to(target: str) -> Callable[[Path, np.ndarray], None]:
    def make(path: Path, face: np.ndarray) -> None:
        os.symlink(target, path)
    return make


def _symlink_pair(other: str) -> Callable[[Path, np.ndarray], None]:
    def make(path: Path, face: np.ndarray) -> None:
        os.symlink(other, path)
        os.symlink(path.name, path.with_name(other))
    return make


def _fifo(path: Path, face: np.ndarray) -> None:
    os.mkfifo(path)


def _parent_link(path: Path, face: np.ndarray) -> None:
    path.mkdir()
    os.symlink("..", path / "up")  # a folder loop: never walked


CASES: list[Case] = [
    # photos
    Case("bomb-40000x40000.png", lambda p, f: png_bomb(p, 40000, 40000), "failed", "exceeds the 50 MP limit",
         what="PNG header declaring 40000x40000 pixels (decompression bomb)"),
    Case("huge-header-65000.jpg", _huge_jpeg_header, "failed", "even decoded at 1/8",
         what="JPEG whose frame header claims 65000x65000"),
    Case("large-8200-baseline.jpg", _large_jpeg(False), "indexed", what="8200x8200 baseline JPEG (67 MP): decoded at 1/2"),
    Case("large-8200-progressive.jpg", _large_jpeg(True), "failed", "progressive (or multi-scan) JPEG cannot be decoded reduced",
         what="8200x8200 progressive JPEG (67 MP)"),
    Case("palette.png", _image_mode("P"), "indexed", what="palette PNG"),
    Case("gray16.png", _gray16, "indexed", what="16-bit grey PNG"),
    Case("rgb48.png", _rgb48, "indexed", what="16-bit RGB PNG"),
    Case("cmyk.jpg", _image_mode("CMYK", "JPEG"), "indexed", what="CMYK JPEG"),
    Case("cmyk.tif", _image_mode("CMYK", "TIFF"), "indexed", what="CMYK TIFF"),
    Case("alpha.png", _alpha, "indexed", what="RGBA PNG with a transparent margin"),
    Case("grey-alpha.png", _image_mode("LA"), "indexed", what="grey + alpha PNG"),
    Case("bilevel.png", _image_mode("1"), "indexed", what="1-bit PNG"),
    Case("float.tif", _image_mode("F", "TIFF"), "either", "not a readable image", what="32-bit float TIFF"),
    Case("exif-rotated.jpg", _exif_rotated, "indexed", what="JPEG turned by its EXIF orientation"),
    Case("animated.png", _animated("PNG"), "indexed", what="animated PNG (APNG)"),
    Case("animated.webp", _animated("WEBP"), "indexed", what="animated WebP"),
    Case("animated.gif", _animated("GIF"), "indexed", what="animated GIF (a photo: its first frame)"),
    Case("one-pixel.png", _solid(1, 1), "failed", "too small to hold a head", what="1x1 PNG"),
    Case("seven-pixels.jpg", _solid(7, 7, "JPEG"), "failed", "too small to hold a head", what="7x7 JPEG"),
    Case("odd-17x999.png", _solid(17, 999), "indexed", what="17x999 PNG"),
    Case("wide-30000x20.png", _solid(30000, 20), "indexed", what="30000x20 PNG (extreme aspect)"),
    Case("truncated-10.jpg", truncated(_jpeg, 0.1), "either", "not a readable image", what="JPEG cut at 10%"),
    Case("truncated-60.jpg", truncated(_jpeg, 0.6), "either", "not a readable image", what="JPEG cut at 60%"),
    Case("truncated-50.png", truncated(_png, 0.5), "failed", "not a readable image", what="PNG cut at 50%"),
    Case("corrupt-mid.jpg", corrupted(_jpeg, 0.5, 512), "either", "not a readable image", what="JPEG, 512 random bytes mid-scan"),
    Case("png-named.jpg", _renamed(_png, ".png"), "indexed", what="a PNG named .jpg"),
    Case("mp4-named.png", _renamed(_h264, ".mp4"), "failed", "not a readable image", what="an MP4 named .png"),
    Case("random.png", _random(20_000), "failed", "not a readable image", what="20 KB of random bytes named .png"),
    Case("empty.jpg", _empty, "failed", "empty file", what="empty .jpg"),
    Case("text.tif", _text, "failed", "not a readable image", what="text named .tif"),
    # videos
    Case("tiny-2x2.mp4", _tiny_video((2, 2)), "failed", "too small to hold a head", what="2x2 H.264"),
    Case("tiny-8x8.mp4", _tiny_video((8, 8)), "failed", "too small to hold a head", what="8x8 H.264"),
    Case("odd-33x17.mp4", _tiny_video((33, 17)), "indexed", what="33x17 H.264 4:4:4"),
    Case("wide-2048x16.mp4", _tiny_video((2048, 16)), "indexed", what="2048x16 H.264 (extreme aspect)"),
    Case("audio-only.mp4", _audio_only, "failed", "no video stream", what="AAC audio only"),
    Case("zero-frames.mp4", _zero_frames, "failed", "no video stream", what="MP4 written without a single frame"),
    Case("zero-frames.mkv", _zero_frames, "failed", "not a readable video", what="Matroska H.264 track without a single frame"),
    Case("huge-frames-16000.avi", _huge_mjpeg(True), "failed", "exceed the 40 MP limit",
         what="MJPEG AVI whose headers and frames claim 16000x16000"),
    Case("huge-jpeg-frames-16000.avi", _huge_mjpeg(False), "failed", "", what="MJPEG frames claiming 16000x16000 in a 64x64 AVI"),
    Case("absurd-frame-count.avi", _absurd_avi_frames, "failed", "frames in", what="AVI headers claiming 2e9 frames"),
    Case("absurd-duration.mp4", _absurd_mp4_duration, "indexed",
         what="MP4 whose mvhd and mdhd claim 111 hours (FFmpeg times it by its sample table)"),
    Case("absurd-duration.mkv", _absurd_mkv_duration, "failed", "hours of video", what="Matroska Duration of 1e15 ms"),
    Case("rotated-90.mp4", _rotated, "indexed", what="portrait clip with a 90-degree display matrix"),
    Case("vfr.mp4", _vfr, "indexed", what="variable frame rate (10-400 ms steps)"),
    Case("interlaced.mp4", _interlaced, "indexed", what="interlaced H.264 (top field first)"),
    Case("interlaced-mpeg2.ts", _interlaced_mpeg2, "indexed", what="interlaced MPEG-2 in MPEG-TS"),
    Case("ten-bit.mp4", _ten_bit, "indexed", what="10-bit H.264"),
    Case("vp9.webm", _vp9, "indexed", what="VP9 WebM"),
    Case("resolution-change.ts", _resolution_change, "indexed", what="320x240 then 96x64 in one MPEG-TS"),
    Case("truncated-10.mp4", truncated(_h264, 0.1), "failed", "not a readable video", what="MP4 (index at the end) cut at 10%"),
    Case("truncated-90.mp4", truncated(_h264, 0.9), "failed", "not a readable video", what="MP4 (index at the end) cut at 90%"),
    Case("faststart-truncated-30.mp4", truncated(_h264_faststart, 0.3), "indexed", what="MP4 (index first) cut at 30%"),
    Case("faststart-truncated-80.mp4", truncated(_h264_faststart, 0.8), "indexed", what="MP4 (index first) cut at 80%"),
    Case("truncated-50.mkv", truncated(_mkv, 0.5), "indexed", what="Matroska cut at 50%"),
    Case("header-only.mkv", truncated(_mkv, 0.02), "either", "", what="Matroska cut at 2% (headers only)"),
    Case("corrupt-mid.mp4", corrupted(_h264_faststart, 0.5, 4096), "either", "", what="MP4, 4 KB random bytes mid-stream"),
    Case("corrupt-bursts.mkv", corrupted(_mkv, every=2048), "either", "", what="Matroska, 16 random bytes every 2 KB"),
    Case("jpeg-named.mp4", _renamed(_jpeg, ".jpg"), "either", "", what="a JPEG named .mp4"),
    Case("random.mp4", _random(50_000), "failed", "not a readable video", what="50 KB of random bytes named .mp4"),
    Case("empty.mkv", _empty, "failed", "", what="empty .mkv"),
    Case("text.avi", _text, "failed", "not a readable video", what="text named .avi"),
    # the file system
    Case("self-loop.mp4", _symlink_to("self-loop.mp4"), "failed", "broken symbolic link", what="symlink to itself"),
    Case("loop-a.jpg", _symlink_pair("loop-b.jpg"), "failed", "broken symbolic link", what="two symlinks pointing at each other"),
    Case("dangling.mp4", _symlink_to("no-such-file.mp4"), "failed", "broken symbolic link", what="symlink to nothing"),
    Case("pipe.mp4", _fifo, "failed", "not a regular file", what="a FIFO named .mp4 (would block a reader)"),
    Case("device.mkv", _symlink_to("/dev/zero"), "failed", "not a regular file", what="symlink to /dev/zero"),
    Case("folder-loop", _parent_link, "ignored", what="folder with a symlink to its parent (not followed)"),
]

# Files made as a side effect of another case (the second link of a pair).
SIDE_FILES = {"loop-b.jpg": "loop-a.jpg"}


def make_corpus(folder: Path, face: np.ndarray, cases: list[Case] = CASES) -> dict[str, Path]:
    """Write every case into `folder` (explicit ones under folder/explicit/); their paths by name."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "explicit").mkdir(exist_ok=True)
    paths = {}
    for case in cases:
        path = folder / ("explicit" if case.explicit else "") / case.name
        case.make(path, face)
        paths[case.name] = path
    return paths
