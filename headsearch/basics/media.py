"""Media files: which names are videos or photos, and which version of a file we have seen."""
from __future__ import annotations

import hashlib
import io
import stat
from pathlib import Path
from typing import BinaryIO

from headsearch.basics.errors import MediaError, unreadable
from schemas.records import FileStamp, MediaKind

# One rule for what is a photo and what is a video, by the file name, for every road a file takes
# in: a folder walk, a path named on the command line, a labelled set (bench, dataset builder) and,
# by the header's format, a photo uploaded to the web app.
#
# A GIF is a photo (its first frame): GIFs in a photo or video collection are stills, stickers and
# short loops without a timeline worth seeking in; the photo reader decodes them within the photo
# limits (pixels, bytes), and a query photo may be a GIF. An animated GIF is searched by its first
# frame, like an animated PNG or WebP.
VIDEO_EXTENSIONS = frozenset({".mp4", ".mkv", ".mov", ".avi", ".webm", ".m4v", ".mpg", ".mpeg", ".wmv", ".flv", ".ts"})
IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".bmp", ".webp", ".tif", ".tiff", ".gif"})
MEDIA_EXTENSIONS = VIDEO_EXTENSIONS | IMAGE_EXTENSIONS
# The formats an image header may name for a photo (Pillow's names; a camera's JPEG may read as MPO).
IMAGE_FORMATS = frozenset({"JPEG", "MPO", "PNG", "BMP", "WEBP", "TIFF", "GIF"})


def media_kind(path: str | Path) -> MediaKind:
    """A photo by its extension (IMAGE_EXTENSIONS); a known video extension, or any other name given to
    us on purpose, is tried as a video."""
    return MediaKind.IMAGE if Path(path).suffix.lower() in IMAGE_EXTENSIONS else MediaKind.VIDEO


def is_media_name(name: str) -> bool:
    """Whether a folder walk picks up this file name (a photo or video extension, not hidden)."""
    return not name.startswith(".") and Path(name).suffix.lower() in MEDIA_EXTENSIONS


def fingerprint(path: Path, size: int) -> str:
    """A content fingerprint: the size and 16 evenly spread 64 KiB blocks (whole file when small)."""
    with open(path, "rb") as f:
        return _fingerprint(f, size)


def fingerprint_bytes(data: bytes) -> str:
    """`fingerprint` of a file's content held in memory (e.g. an uploaded photo)."""
    return _fingerprint(io.BytesIO(data), len(data))


def fingerprint_open(f: BinaryIO, size: int) -> str:
    """`fingerprint` of a file already open for reading in binary (e.g. one opened without following links)."""
    f.seek(0)
    return _fingerprint(f, size)


def _fingerprint(f: BinaryIO, size: int) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(str(size).encode())
    block = 1 << 16
    if size <= 16 * block * 2:
        h.update(f.read())
    else:
        for i in range(16):
            f.seek((size - block) * i // 15)
            h.update(f.read(block))
    return h.hexdigest()


def file_stamp(path: Path) -> FileStamp:
    """The stamp of a file as it is now; MediaError when it cannot be read."""
    path = Path(path)
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):  # a FIFO would block the fingerprint, a device never end it
            raise MediaError(f"{path}: not a regular file")
        return FileStamp(str(path), st.st_size, st.st_mtime, fingerprint(path, st.st_size))
    except OSError as e:
        raise unreadable(path, e) from e
