"""Screen time: how long each person is seen in each video, from the time ranges of its tracks (tracks of one person
that overlap, two heads of one person in one frame or a track followed past another, are counted once), and a
contact sheet of a person's appearances."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from headsearch.basics.errors import HeadsearchError
from headsearch.basics.files import write_bytes_atomic
from headsearch.basics.timeline import format_time
from headsearch.people.listing import Person, find_person, list_people
from headsearch.store.library import Library
from headsearch.store.rows import TrackRow


def union(ranges: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Time ranges merged where they overlap or touch, in time order."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1e-6:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, max(a, b)))
    return out


@dataclass(frozen=True)
class ScreenTime:
    """One person in one video: the seconds on screen, their share of the video's running time, the appearances
    (unbroken stretches on screen), the first and the last moment."""

    person_id: int
    person: str
    video: str
    seconds: float
    share: float
    appearances: list[tuple[float, float]]
    tracks: list[int]

    @property
    def first(self) -> float:
        return self.appearances[0][0]

    @property
    def last(self) -> float:
        return self.appearances[-1][1]

    def to_dict(self) -> dict:
        return {"person_id": self.person_id, "person": self.person, "video": self.video, "seconds": round(self.seconds, 3),
                "share": round(self.share, 4), "appearances": len(self.appearances), "first": round(self.first, 3),
                "last": round(self.last, 3), "ranges": [[round(a, 3), round(b, 3)] for a, b in self.appearances], "tracks": self.tracks}


def screen_time(library: Library, person: str | int | None = None) -> list[ScreenTime]:
    """Per person (one, by name or id; else every listed one) and per video it is seen in, its screen time; the most
    seen first. Photos have no time on screen and are left out."""
    people: list[Person] = [find_person(library, person)] if person is not None else list_people(library, with_looks=False)
    wanted = [tr for p in people for tr in p.tracks]
    with library.people_reading() as store:
        rows = {r.id: r for r in store.tracks(track_ids=wanted)} if wanted else {}
        durations = {v.path: max(float(v.duration), 1e-9) for v in store.videos()} if rows else {}
    out = []
    for p in people:
        by_video: dict[str, list[TrackRow]] = {}
        for tr in p.tracks:
            r = rows.get(tr)
            if r is not None and r.video_kind == "video":
                by_video.setdefault(r.video, []).append(r)
        for video, tracks in by_video.items():
            ranges = union([(r.start_time, r.end_time) for r in tracks])
            seconds = sum(b - a for a, b in ranges)
            out.append(ScreenTime(p.id, p.label(), video, seconds, min(1.0, seconds / durations.get(video, seconds or 1.0)), ranges,
                                  sorted(r.id for r in tracks)))
    return sorted(out, key=lambda s: (-s.seconds, s.person, s.video))


def contact_sheet(library: Library, times: list[ScreenTime], path: Path, columns: int = 4, tile: int = 160) -> Path:
    """A PNG of a person's appearances: for each, the thumbnail of its best track, its file and time range."""
    if not times:
        raise HeadsearchError("no appearances in videos to put on a contact sheet")
    with library.people_reading() as store:
        rows = {r.id: r for r in store.tracks(track_ids=[tr for s in times for tr in s.tracks])}
    cells = []
    for s in times:
        for a, b in s.appearances:
            inside = [rows[tr] for tr in s.tracks if tr in rows and rows[tr].start_time < b + 1e-6 and rows[tr].end_time > a - 1e-6]
            best = max(inside, key=lambda r: r.n_observations * max(r.face_visible_share, 0.05)) if inside else None
            cells.append((s, a, b, best))
    rows_n = -(-len(cells) // columns)
    caption = 34
    sheet = np.full((rows_n * (tile + caption) + 8, columns * tile + 8, 3), 245, np.uint8)
    for i, (s, a, b, best) in enumerate(cells):
        y, x = 4 + (i // columns) * (tile + caption), 4 + (i % columns) * tile
        thumb = cv2.imread(str(library.root / best.thumbnail)) if best is not None else None
        if thumb is not None:
            sheet[y:y + tile, x:x + tile] = cv2.resize(thumb, (tile, tile), interpolation=cv2.INTER_AREA)
        for n, text in enumerate((Path(s.video).name[:24], f"{format_time(a)[2:]}-{format_time(b)[2:]}")):
            cv2.putText(sheet, text, (x + 3, y + tile + 13 + 14 * n), cv2.FONT_HERSHEY_SIMPLEX, 0.38, (40, 40, 40), 1, cv2.LINE_AA)
    ok, png = cv2.imencode(".png", sheet)
    if not ok:
        raise HeadsearchError("cannot encode the contact sheet")
    write_bytes_atomic(Path(path), png.tobytes())
    return Path(path)
