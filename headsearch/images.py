"""Reading still images robustly (PNG chunks some readers reject, alpha, grey, EXIF rotation)."""
from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from headsearch.errors import MediaError


def read_image_rgb(path: str | Path) -> np.ndarray:
    """Read an image file as an RGB uint8 array, or raise MediaError naming the file."""
    path = Path(path)
    try:
        data = np.fromfile(str(path), dtype=np.uint8)
    except OSError as e:
        raise MediaError(f"{path}: cannot read file ({e.strerror or e})") from e
    return decode_image_rgb(data, path)


def decode_image_rgb(data: bytes | np.ndarray, name: str | Path) -> np.ndarray:
    """An image file's bytes as an RGB uint8 array, or MediaError naming it (`name`)."""
    data = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes) else data
    if data.size == 0:
        raise MediaError(f"{name}: empty file")
    image = cv2.imdecode(data, cv2.IMREAD_COLOR)  # BGR, alpha dropped, EXIF orientation applied
    if image is None:
        image = _read_with_pillow(data, name)
    else:
        image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    if image.ndim != 3 or image.shape[0] < 8 or image.shape[1] < 8:
        raise MediaError(f"{name}: image too small ({image.shape[1]}x{image.shape[0]})")
    return np.ascontiguousarray(image)


def _read_with_pillow(data: np.ndarray, path: str | Path) -> np.ndarray:
    import io

    from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

    ImageFile.LOAD_TRUNCATED_IMAGES = False
    try:
        with Image.open(io.BytesIO(data.tobytes())) as im:
            im = ImageOps.exif_transpose(im)
            return np.asarray(im.convert("RGB"))
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        raise MediaError(f"{path}: not a readable image", detail=str(e)) from e


def encode_jpeg(rgb: np.ndarray, quality: int = 88) -> bytes:
    """An RGB image as JPEG bytes."""
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise MediaError("cannot encode a JPEG thumbnail")
    return buf.tobytes()

