"""Reading still images robustly (PNG chunks some readers reject, alpha, grey, EXIF rotation) and
within bounds: the size is read from the header before anything is decoded, large JPEGs are decoded
reduced (1/2, 1/4, 1/8 by libjpeg's scaled IDCT, never whole), and images that cannot be decoded
within `MediaLimits.max_image_pixels` (decompression bombs, huge PNGs, huge progressive JPEGs) are
refused with one line."""
from __future__ import annotations

import io
import math
import stat
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from headsearch.basics.errors import MediaError, unreadable
from headsearch.basics.quiet import native_stderr_silenced
from headsearch.basics.settings import MediaLimits

_REDUCED_FLAGS = {1: cv2.IMREAD_COLOR, 2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4, 8: cv2.IMREAD_REDUCED_COLOR_8}
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Start-of-frame markers (C4 DHT, C8 JPG and CC DAC are not frames); progressive and lossless ones.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_JPEG_PROGRESSIVE = frozenset({0xC2, 0xC6, 0xCA, 0xCE})
_JPEG_LOSSLESS = frozenset({0xC3, 0xC7, 0xCB, 0xCF})


@dataclass(frozen=True)
class ImageHeader:
    """What an image's header says, read without decoding any pixels."""

    format: str  # "JPEG", "PNG", or Pillow's name of the format
    width: int
    height: int
    reducible: bool = False  # a JPEG libjpeg decodes at 1/2, 1/4, 1/8 without a whole-image buffer

    @property
    def pixels(self) -> int:
        return self.width * self.height

    def size_text(self) -> str:
        return f"{self.width}x{self.height} pixels ({self.pixels / 1e6:,.1f} MP)"


def jpeg_header(data: bytes | np.ndarray) -> ImageHeader | None:
    """Size and scan layout of a JPEG from its markers; None when the data is not a JPEG with a frame header.

    A baseline JPEG whose first scan holds every component is decoded by libjpeg row by row, so a
    reduced decode needs memory for the reduced image only; a progressive (or multi-scan) one keeps
    the coefficients of the whole image (about 2 bytes per sample) whatever the output size.
    """
    arr = np.frombuffer(data, np.uint8) if isinstance(data, bytes | bytearray) else np.asarray(data, np.uint8)
    buf = memoryview(arr)
    if len(buf) < 4 or buf[0] != 0xFF or buf[1] != 0xD8:
        return None
    i, sof, scan_components = 2, None, None
    while i + 4 <= len(buf):
        if buf[i] != 0xFF:  # garbage where a marker must be: skip to the next 0xFF, as libjpeg does
            ahead = arr[i:i + 2**20] == 0xFF
            if not ahead.any():
                break
            i += int(ahead.argmax())
            continue
        marker = buf[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # markers without a length
            i += 2
            continue
        length = (buf[i + 2] << 8) | buf[i + 3]
        if length < 2:
            break
        segment = buf[i + 4:i + 2 + length]
        if marker in _JPEG_SOF and len(segment) >= 6:
            height, width = struct.unpack(">HH", segment[1:5])
            sof = (marker, width, height, segment[5])
        elif marker == 0xDA and len(segment) >= 1:  # start of scan: the header ends here
            scan_components = segment[0]
            break
        elif marker == 0xD9:
            break
        i += 2 + length
    if sof is None:
        return None
    marker, width, height, components = sof
    reducible = marker not in _JPEG_PROGRESSIVE and marker not in _JPEG_LOSSLESS and scan_components == components
    return ImageHeader("JPEG", width, height, reducible)


def _pillow_header(source: Path | np.ndarray, limits: MediaLimits) -> ImageHeader | None:
    from PIL import Image, UnidentifiedImageError

    _allow_pillow_up_to(limits.max_image_pixels)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DecompressionBombWarning: we judge the size ourselves
            with Image.open(source if isinstance(source, Path) else io.BytesIO(source.tobytes())) as im:  # the header only
                return ImageHeader(im.format or "image", *im.size)
    except Image.DecompressionBombError as e:
        raise MediaError(f"image over {Image.MAX_IMAGE_PIXELS * 2 / 1e6:,.0f} MP ({e})") from e
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, struct.error, EOFError):
        return None


def image_header(data: np.ndarray, limits: MediaLimits, path: Path | None = None) -> ImageHeader | None:
    """The header of an image file's bytes (JPEG and PNG parsed here, other formats by Pillow, from
    `path` when given); None when the format is unknown."""
    head = data[:32].tobytes()
    if head.startswith(b"\xff\xd8"):
        found = jpeg_header(data)
        if found is not None:
            return found
    if head.startswith(_PNG_SIGNATURE) and head[12:16] == b"IHDR" and len(head) >= 24:
        width, height = struct.unpack(">II", head[16:24])
        return ImageHeader("PNG", width, height)
    return _pillow_header(path if path is not None else data, limits)


def _allow_pillow_up_to(pixels: int) -> None:
    """Pillow refuses images over twice Image.MAX_IMAGE_PIXELS; raise that bound to our own limit
    (never lower it) so that our check, which comes first, is the one that decides."""
    from PIL import Image

    if Image.MAX_IMAGE_PIXELS is not None and pixels > Image.MAX_IMAGE_PIXELS:
        Image.MAX_IMAGE_PIXELS = pixels


def reduction(header: ImageHeader, limits: MediaLimits) -> int:
    """The JPEG scale denominator (1, 2, 4 or 8) that brings an image within the pixel limit;
    MediaError (before any decoding) when none does."""
    if header.pixels <= limits.max_image_pixels:
        return 1
    over = f"{header.size_text()} exceeds the {limits.max_image_pixels / 1e6:,.0f} MP limit (${limits.env_name('max_image_pixels')})"
    if header.format == "JPEG" and not header.reducible:
        raise MediaError(f"{over}; a progressive (or multi-scan) JPEG cannot be decoded reduced")
    if header.format != "JPEG":
        raise MediaError(f"{over}; refused before decoding")
    for scale in (2, 4, 8):
        if math.ceil(header.width / scale) * math.ceil(header.height / scale) <= limits.max_image_pixels:
            return scale
    raise MediaError(f"{over} even decoded at 1/8")


def read_image_rgb(path: str | Path, limits: MediaLimits | None = None) -> np.ndarray:
    """Read an image file as an RGB uint8 array, or raise MediaError naming the file.

    Images over `limits.max_image_pixels` come back reduced (JPEG) or are refused (other formats).
    """
    path = Path(path)
    limits = limits or MediaLimits.from_env()
    try:
        st = path.stat()
        size = st.st_size
        if not stat.S_ISREG(st.st_mode):
            raise MediaError(f"{path}: not a regular file")
        if size > limits.max_image_bytes:
            raise MediaError(f"{path}: a {size / 2**20:,.0f} MiB file is too large for a photo "
                             f"({limits.max_image_bytes / 2**20:,.0f} MiB limit, ${limits.env_name('max_image_bytes')})")
        data = np.fromfile(str(path), dtype=np.uint8)
    except OSError as e:
        raise unreadable(path, e) from e
    return decode_image_rgb(data, path, limits)


def decode_image_rgb(data: bytes | np.ndarray, name: str | Path, limits: MediaLimits | None = None) -> np.ndarray:
    """An image file's bytes (e.g. an upload) as an RGB uint8 array within the same bounds as
    `read_image_rgb`, or MediaError naming it (`name`)."""
    limits = limits or MediaLimits.from_env()
    data = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes | bytearray) else data
    if data.size == 0:
        raise MediaError(f"{name}: empty file")
    if data.size > limits.max_image_bytes:
        raise MediaError(f"{name}: a {data.size / 2**20:,.0f} MiB file is too large for a photo "
                         f"({limits.max_image_bytes / 2**20:,.0f} MiB limit, ${limits.env_name('max_image_bytes')})")
    try:
        header = image_header(data, limits)
    except MediaError as e:
        raise MediaError(f"{name}: {e}") from e
    if header is None:
        raise MediaError(f"{name}: not a readable image (unknown format)")
    if min(header.width, header.height) < limits.min_side:
        raise _too_small(name, header.width, header.height, limits)
    try:
        scale = reduction(header, limits)
    except MediaError as e:
        raise MediaError(f"{name}: {e}") from e
    image = _decode_with_opencv(data, scale)
    if image is None:
        image = _read_with_pillow(data, name, header, scale, limits)
    if image.ndim != 3 or min(image.shape[:2]) < limits.min_side:
        raise _too_small(name, image.shape[1], image.shape[0], limits)
    return np.ascontiguousarray(image)


def _too_small(path: str | Path, width: int, height: int, limits: MediaLimits) -> MediaError:
    return MediaError(f"{path}: image too small to hold a head ({width}x{height} pixels; the smallest side must be "
                      f"at least {limits.min_side}, ${limits.env_name('min_side')})")


def _decode_with_opencv(data: np.ndarray, scale: int) -> np.ndarray | None:
    """RGB, alpha dropped, EXIF orientation applied; None when OpenCV cannot decode it."""
    try:
        with native_stderr_silenced():  # libjpeg's and libpng's complaints: the caller says it in one line
            image = cv2.imdecode(data, _REDUCED_FLAGS[scale])
    except cv2.error:
        return None
    if image is None or image.ndim != 3 or image.shape[2] != 3:
        return None
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


def _read_with_pillow(data: np.ndarray, name: str | Path, header: ImageHeader, scale: int, limits: MediaLimits) -> np.ndarray:
    from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

    ImageFile.LOAD_TRUNCATED_IMAGES = False
    _allow_pillow_up_to(limits.max_image_pixels)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DecompressionBombWarning: the size was checked above
            with Image.open(io.BytesIO(data)) as im:
                if scale > 1:  # libjpeg's scaled decoding (draft mode): never the whole image
                    im.draft("RGB", (math.ceil(header.width / scale), math.ceil(header.height / scale)))
                    if im.width * im.height > limits.max_image_pixels:
                        raise MediaError(f"{name}: {header.size_text()} cannot be decoded reduced")
                im = ImageOps.exif_transpose(im)
                return np.asarray(im.convert("RGB"))
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, struct.error, EOFError, Image.DecompressionBombError) as e:
        raise MediaError(f"{name}: not a readable image", detail=str(e)) from e


def encode_jpeg(rgb: np.ndarray, quality: int = 88) -> bytes:
    """An RGB image as JPEG bytes."""
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise MediaError("cannot encode a JPEG thumbnail")
    return buf.tobytes()
