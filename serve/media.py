"""What the web app shows of a file: whether a browser plays it as it is, short preview clips of those
it cannot play (made with PyAV, cached), and the frame of a sighting with its head boxed (cached).

Every path here comes from the library's database (looked up by id), never from a request, and every
file is read from a descriptor `serve.files` opened and checked (the version indexed, no link followed).
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from headsearch.basics.errors import MediaError
from headsearch.basics.files import atomic_write
from headsearch.basics.quiet import native_stderr_silenced
from headsearch.store.rows import VideoRow
from serve.files import IndexedFiles, OpenFile, open_in_folder

log = logging.getLogger(__name__)

# Decoding and encoding take turns: they are CPU-bound anyway, and silencing native stderr swaps
# process-wide file descriptors, which threads must not do at the same time.
_DECODING = threading.Lock()


@contextlib.contextmanager
def decoding() -> Iterator[None]:
    """Decode or encode media in the web app's threads: one at a time, native stderr silenced."""
    with _DECODING, native_stderr_silenced():
        yield

# Containers and codecs Chromium, Firefox and Safari play without help (by container family).
PLAYABLE = {
    "mp4": ({"h264", "av1", "vp9"}, {"aac", "mp3", "opus", "flac", None}),
    "webm": ({"vp8", "vp9", "av1"}, {"opus", "vorbis", None}),
}
MP4_EXTENSIONS = {".mp4", ".m4v", ".mov"}
PREVIEW_PAD_S = 2.0  # a preview clip starts this long before the moment and ends this long after
PREVIEW_MAX_S = 60.0
PREVIEW_MAX_SIDE = 720


@dataclass(frozen=True)
class Playback:
    """How a browser can play one file."""

    direct: bool  # the file itself (served with HTTP Range support)
    reason: str  # why not, for the page ("hevc in avi")


def probe_playback(path: Path, opened: OpenFile) -> Playback:
    """Whether browsers play the file at `path` as it is (read from `opened`): container and codecs, read with PyAV."""
    import av

    family = "mp4" if path.suffix.lower() in MP4_EXTENSIONS else "webm" if path.suffix.lower() == ".webm" else None
    try:
        with decoding(), _reader(opened) as f, av.open(f) as container:
            video = container.streams.video[0].codec_context.name if container.streams.video else None
            audio = container.streams.audio[0].codec_context.name if container.streams.audio else None
    except (av.error.FFmpegError, OSError, IndexError) as e:
        return Playback(False, f"unreadable ({e})")
    if family is None:
        return Playback(False, f"{video} in {path.suffix.lstrip('.') or 'a file'} (not a web container)")
    videos, audios = PLAYABLE[family]
    if video not in videos:
        return Playback(False, f"{video} video in {family}")
    if audio not in audios:
        return Playback(False, f"{audio} audio in {family}")
    return Playback(True, "")


class MediaCache:
    """Preview clips and boxed frames of one library, in a cache folder of their own."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    # ----- preview clips -----------------------------------------------------------------------
    def preview(self, video: VideoRow, start: float, end: float, files: IndexedFiles) -> tuple[OpenFile, float]:
        """A short H.264 MP4 of [start - pad, end + pad] (at most PREVIEW_MAX_S) of a file browsers
        cannot play, made from the version indexed only; returns the clip, open, and the file time its first frame shows."""
        clip_start = max(0.0, start - PREVIEW_PAD_S)
        clip_end = min(max(end + PREVIEW_PAD_S, clip_start + 1.0), clip_start + PREVIEW_MAX_S)
        if video.duration:
            clip_end = min(clip_end, float(video.duration) + 1.0)
        key = f"{video.fingerprint[:16]}-{round(clip_start * 1000)}-{round(clip_end * 1000)}"
        name = f"previews/{key}.mp4"
        source = files.open(video.path, video.size, video.fingerprint, f"video {video.id}")
        try:
            with self._lock(key):
                if not os.path.lexists(self.folder / name):
                    make_preview(source, self.folder / name, clip_start, clip_end)
        finally:
            source.close()
        return open_in_folder(self.folder, name, f"video {video.id}'s preview clip"), clip_start


@contextlib.contextmanager
def _reader(opened: OpenFile) -> Iterator:
    """A file object of its own on an open file, from its start (for PyAV)."""
    with os.fdopen(os.dup(opened.fd), "rb") as f:
        f.seek(0)
        yield f


def make_preview(source: OpenFile, out: Path, start: float, end: float) -> None:
    """Transcode [start, end] of an open file to H.264 MP4 (no audio), written atomically."""
    import av

    try:
        with decoding(), _reader(source) as f:
            atomic_write(out, lambda tmp: _transcode(f, source.path, tmp, start, end), fsync=False)
    except (av.error.FFmpegError, IndexError) as e:
        raise MediaError(f"{source.path}: cannot make a preview clip ({e})") from e


def _transcode(f, path: str, out: Path, start: float, end: float) -> None:
    import av

    with av.open(f) as src:
        stream = src.streams.video[0]
        stream.thread_type = "AUTO"
        w, h = stream.codec_context.width, stream.codec_context.height
        scale = min(1.0, PREVIEW_MAX_SIDE / max(w, h))
        w, h = max(2, round(w * scale / 2) * 2), max(2, round(h * scale / 2) * 2)
        rate = Fraction(stream.average_rate or stream.guessed_rate or 25)
        src.seek(max(0, int(start / stream.time_base)), stream=stream, backward=True)
        with av.open(str(out), "w", format="mp4", options={"movflags": "+faststart"}) as dst:
            enc = dst.add_stream("libx264", rate=rate)
            enc.width, enc.height, enc.pix_fmt = w, h, "yuv420p"
            enc.options = {"preset": "veryfast", "crf": "26"}
            n = 0
            for frame in src.decode(stream):
                t = frame.time
                if t is None or t < start - 1e-3:
                    continue
                if t > end:
                    break
                img = frame.reformat(width=w, height=h, format="yuv420p")
                img.pts = n
                img.time_base = Fraction(1) / rate
                for packet in enc.encode(img):
                    dst.mux(packet)
                n += 1
            for packet in enc.encode():
                dst.mux(packet)
    if n == 0:
        raise MediaError(f"{path}: no frames between {start:.1f} and {end:.1f} s")


def cache_folder(library_root: Path, created_at: float | str) -> Path:
    """Where a library's previews and frames are cached: $XDG_CACHE_HOME/headsearch/serve/<library key>."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "headsearch" / "serve"
    key = hashlib.blake2b(f"{Path(library_root).resolve()}|{created_at}".encode(), digest_size=8).hexdigest()
    return base / key
