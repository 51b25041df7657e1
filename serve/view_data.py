"""The small shapes every area's pages share (`serve.views`' parts): a track, a video, a listed file, a box, a span along
a timeline, the player's address at a moment, a query head's crop, the folder a list of files shares."""
from __future__ import annotations

import base64
import os
from pathlib import Path

from headsearch.basics.images import encode_jpeg
from headsearch.basics.timeline import seek_text
from headsearch.search.hits import HeadResult, clipped_box
from headsearch.store.rows import ListedFile, TrackRow, TrackSummary, VideoRow

MAX_K = 100
MAX_CHOICES = 500  # persons offered in a picker, the most alike first


def data_url(jpeg: bytes) -> str:
    return "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()


def crop_url(result: HeadResult) -> str:
    """A query head's crop as a data URL (half size)."""
    return data_url(encode_jpeg(result.head.crop.image[::2, ::2], 85))


def boxes(box: tuple[float, float, float, float], size: tuple[int, int] | None) -> dict:
    """A sighting's box within its frame, and the whole head's where it reaches outside (`box_unclipped`)."""
    inside, whole = clipped_box(box, size)
    return {"box": inside, **({"box_unclipped": whole} if whole is not None else {})}


def watch_url(video_id: int, start: float, end: float, track: int | None = None) -> str:
    """The player at a moment: times in whole milliseconds never before the frame (`seek_time`), so a track that starts
    at a cut opens on its own shot."""
    return f"/watch/{video_id}?start={seek_text(start)}&end={seek_text(end)}" + (f"&track={track}" if track is not None else "")


def span(start: float, end: float, duration: float) -> dict:
    """Where a time range lies along a timeline, in percent."""
    left = 100.0 * start / duration
    return {"left": round(left, 3), "width": round(max(0.6, 100.0 * (end - start) / duration), 3)}


def listed_file(v: ListedFile) -> dict:
    return {"id": v.id, "path": v.path, "kind": v.kind, "duration": v.player_duration, "fps": v.fps, "width": v.width, "height": v.height,
            "decoder": v.decoder, "indexed_at": v.indexed_at, "tracks": v.tracks, "name": Path(v.path).name}


def video_dict(v: VideoRow) -> dict:
    return {"id": v.id, "path": v.path, "name": Path(v.path).name, "kind": v.kind, "duration": v.duration,
            "fps": v.fps, "width": v.width, "height": v.height}


def found_dict(summary: TrackSummary | None) -> dict:
    """How a track's heads were found: sightings with a face, and by face, keypoints or followed."""
    if summary is None:
        return {}
    return {"faces": summary.faces, "faceless": summary.sightings - summary.faces, "found_by": summary.found_by,
            "started_by": summary.started_by}


def track_dict(t: TrackRow) -> dict:
    return {"id": t.id, "video_id": t.video_id, "video": t.video, "name": Path(t.video).name, "start": t.start_time,
            "end": t.end_time, "best_time": t.best_time, "sightings": t.n_observations,
            "face_visible_share": round(float(t.face_visible_share), 3)}


def common_folder(folders: list[str]) -> str:
    """The deepest folder every one of these lies under, above them all ("" for none): the place a page names once, so
    that each folder is shown by its own path under it."""
    try:
        common = os.path.commonpath(folders) if folders else ""
    except ValueError:  # relative and absolute mixed
        return ""
    return os.path.dirname(common) if common in folders else common


def under(path: str, root: str) -> str:
    """A path as it lies under `root`, the folder `common_folder` found above it (the path itself without one)."""
    return os.path.relpath(path, root) if root else path
