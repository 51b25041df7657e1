"""A hit's picture: the matched moment, rendered from the video (or the photo) at that time, with
the head boxed. Rendered when a query shows the hit, kept in `<library>/pictures/<sighting>.jpg`
(sighting ids are never reused, so a picture stays right until its file is indexed again).

Rendering costs one seek and the decode of at most one group of pictures; storing a picture per
sighting at indexing time would cost every sighting a JPEG, most of which no query ever shows.
When the video is gone or has changed since it was indexed, the track's thumbnail stands in.
"""
from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import cv2
import numpy as np

from headsearch.basics.errors import MediaError
from headsearch.basics.files import write_bytes_atomic
from headsearch.basics.images import encode_jpeg, read_image_rgb
from headsearch.basics.media import fingerprint
from headsearch.store.rows import Sighting
from schemas.records import MediaKind

log = logging.getLogger(__name__)

PICTURES = "pictures"
MAX_SIDE = 960  # pictures are no larger than this (long side)
BOX_COLOUR = (40, 230, 40)  # RGB


def frame_at(path: Path, time: float) -> np.ndarray:
    """The frame a player shows at `time` (presentation time, seconds): the last frame whose
    PyAV `frame.time` is not after it, as RGB at the file's own size."""
    import av

    from headsearch.basics.quiet import native_stderr_silenced

    try:
        with native_stderr_silenced(), av.open(str(path)) as container:
            stream = container.streams.video[0]  # no frame threads: freeing a codec whose frame threads are mid-way deadlocks
            if stream.time_base:
                container.seek(max(0, int((time - 0.5) / stream.time_base)), stream=stream, backward=True, any_frame=False)
            best = None
            for frame in container.decode(stream):
                if frame.time is None:
                    continue
                if frame.time > time + 1e-3:
                    if best is None:
                        best = frame
                    break
                best = frame
            if best is None:
                raise MediaError(f"{path}: no frame at {time:.3f} s")
            return best.to_ndarray(format="rgb24")
    except (av.error.FFmpegError, IndexError, ValueError) as e:
        raise MediaError(f"{path}: cannot decode the frame at {time:.3f} s", detail=str(e)) from e


def draw_box(rgb: np.ndarray, box: tuple[float, float, float, float], max_side: int = MAX_SIDE) -> np.ndarray:
    """A copy no larger than `max_side` with the box drawn (clipped to the picture, never smeared)."""
    h, w = rgb.shape[:2]
    scale = min(1.0, max_side / max(h, w))
    image = cv2.resize(rgb, (round(w * scale), round(h * scale)), interpolation=cv2.INTER_AREA) if scale < 1 else rgb.copy()
    x1, y1, x2, y2 = (v * scale for v in box)
    thickness = max(2, round(max(image.shape[:2]) / 320))
    p1 = (int(round(max(0, x1))), int(round(max(0, y1))))
    p2 = (int(round(min(image.shape[1] - 1, x2))), int(round(min(image.shape[0] - 1, y2))))
    cv2.rectangle(image, p1, p2, (0, 0, 0), thickness + 2)
    cv2.rectangle(image, p1, p2, BOX_COLOUR, thickness)
    return image


def file_is_indexed_version(path: Path, sighting: Sighting) -> bool:
    """Whether the file on disk is the version the library indexed."""
    try:
        stat = path.stat()
    except OSError:
        return False
    if stat.st_size != sighting.size:
        return False
    return stat.st_mtime == sighting.mtime or fingerprint(path, stat.st_size) == sighting.fingerprint


def pictures_folder(library_root: Path) -> Path:
    """Where pictures go: the library folder, or a temporary folder when it cannot be written."""
    folder = Path(library_root) / PICTURES
    try:
        folder.mkdir(exist_ok=True)
        return folder
    except OSError:
        return _temporary_folder()


def render_picture(folder: Path, path: Path, time: float, sighting: Sighting) -> tuple[Path | None, str | None]:
    """The picture of one sighting (rendered once, then reused); (None, why) when it cannot be made."""
    out = folder / f"{sighting.observation_id}.jpg"
    if not file_is_indexed_version(path, sighting):
        return None, f"{path} is missing or changed since it was indexed"
    if out.is_file():
        return out, None
    try:
        rgb = read_image_rgb(path) if sighting.kind == MediaKind.IMAGE else frame_at(path, time)
    except MediaError as e:
        return None, str(e)
    if (rgb.shape[1], rgb.shape[0]) != sighting.source_size:  # e.g. a photo read with another orientation
        sx, sy = rgb.shape[1] / max(sighting.source_size[0], 1), rgb.shape[0] / max(sighting.source_size[1], 1)
        box = (sighting.box[0] * sx, sighting.box[1] * sy, sighting.box[2] * sx, sighting.box[3] * sy)
    else:
        box = sighting.box
    jpeg = encode_jpeg(draw_box(rgb, box))
    for target in (out, _temporary_folder() / out.name):  # a full or read-only library folder must not fail the query
        try:
            write_bytes_atomic(target, jpeg, fsync=False)
            return target, None
        except OSError as e:
            why = f"cannot write {target} ({e.strerror or e})"
    return None, why


def _temporary_folder() -> Path:
    folder = Path(tempfile.gettempdir()) / "headsearch-pictures"
    folder.mkdir(exist_ok=True)
    return folder


def render_hit_pictures(library_root: Path, shown: list) -> None:
    """Give every shown hit (`headsearch.search.hits.ShownHit`) its picture, or say why its thumbnail stands in."""
    folder = pictures_folder(library_root)
    for s in shown:
        if s.sighting is None:
            continue
        picture, why = render_picture(folder, Path(s.hit.video), s.hit.time, s.sighting)
        if picture is not None:
            s.picture = str(picture.resolve())
        else:
            s.picture_note = why
            log.info("picture of %s at %.3f s: the track's thumbnail stands in (%s)", s.hit.video, s.hit.time, why)
