"""A hit's picture: the matched moment, rendered from the video (or the photo) at that time, with
the head boxed. Rendered when a query shows the hit, kept in `<library>/pictures/<sighting>.jpg`
(sighting ids are never reused, so a picture stays right until its file is indexed again).

Rendering costs one seek and the decode of at most one group of pictures; storing a picture per
sighting at indexing time would cost every sighting a JPEG, most of which no query ever shows.
When the video is gone or has changed since it was indexed, the track's thumbnail stands in.
"""
from __future__ import annotations

import logging
from pathlib import Path

from headsearch.basics.errors import MediaError
from headsearch.basics.files import private_temp_folder, write_bytes_atomic
from headsearch.basics.frames import draw_box, frame_at
from headsearch.basics.images import encode_jpeg, read_image_rgb
from headsearch.basics.media import fingerprint
from headsearch.store.rows import Sighting
from schemas.records import MediaKind

log = logging.getLogger(__name__)

PICTURES = "pictures"


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
    return private_temp_folder("pictures")  # this user's own: a shared name in /tmp another user could make first


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
