"""The Videos pages as plain data (`serve.views.Site` takes these methods): the library's files by folder, one video
with its shots and the people seen in it, the player at a moment, and a video's cues (who is on screen, its chapters)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from headsearch.basics.timeline import seek_text
from headsearch.exports.timelines import ExportOptions, export_bytes
from headsearch.people.listing import list_people
from headsearch.search.hits import export_moments
from headsearch.search.service import SearchService
from headsearch.store.library import Library
from headsearch.store.rows import TrackRow, VideoRow
from serve.files import NotFound
from serve.media import PREVIEW_PAD_S, Playback
from serve.view_data import common_folder, listed_file, span, track_dict, under, video_dict, watch_url

FILES_PAGE = 100  # files a page of the Videos page


class Videos:
    """The library's videos and photos as pages (a part of `serve.views.Site`)."""

    # Site's: the library, the search service; `video_row`, `playback` (serve.media_views) and `redact_choices`
    library: Library
    service: SearchService

    video_row: Callable[[int], VideoRow]
    playback: Callable[[VideoRow], Playback]
    redact_choices: Callable[[VideoRow, list[TrackRow], dict[int, int], dict], dict | None]

    def videos_page(self, query: str = "", kind: str = "all", page: int = 1, per_page: int = FILES_PAGE) -> dict:
        """The library's files grouped by folder, `per_page` a page; `query` keeps those whose file name holds it or
        in which a listed person whose name holds it is seen; `kind`: "video", "image" or "all"."""
        with self.library.browsing() as b:
            files = b.videos()
        text = " ".join(query.split()).casefold()
        matched: list[dict] = []
        if text:
            people = [p for p in list_people(self.library, with_looks=False) if p.name and text in p.name.casefold()]
            matched = [{"id": p.id, "label": p.label()} for p in people]
            seen_in = {f for p in people for f in p.videos + p.photos}
            files = [v for v in files if text in Path(v.path).name.casefold() or v.path in seen_in]
        if kind in ("video", "image"):
            files = [v for v in files if v.kind == kind]
        files = sorted(files, key=lambda v: (str(Path(v.path).parent), Path(v.path).name))
        pages = max(1, -(-len(files) // per_page))
        page = min(max(1, page), pages)
        shown = [listed_file(v) for v in files[(page - 1) * per_page : page * per_page]]
        folders: dict[str, list[dict]] = {}
        for v in shown:
            folders.setdefault(str(Path(v["path"]).parent), []).append(v)
        root = common_folder(list(folders))
        return {"videos": shown, "root": root,
                "folders": [{"folder": f, "shown": under(f, root), "files": vs} for f, vs in folders.items()],
                "total": len(files), "page": page, "pages": pages, "per_page": per_page, "q": query,
                "kind": kind if kind in ("video", "image") else "all", "people": matched}

    def video_page(self, video_id: int) -> dict:
        with self.library.people_reading() as store:
            video = store.video(video_id)
            if video is None:
                raise NotFound(f"no video {video_id}")
            shots, tracks, members = store.shots(video_id), store.tracks(video_id=video_id), store.memberships()
            persons = {p.id: p for p in store.persons()}
        listed = {p.id for p in list_people(self.library, with_looks=False)}  # hidden people are left out everywhere
        # as long as a player says: to the file's end on its timeline (the timeline below is drawn from 0, as a player's)
        duration = max(float(video.duration) + (shots[0].start_time if shots else 0.0), max((s.end_time for s in shots), default=0.0),
                       max((t.end_time for t in tracks), default=0.0), 1e-6)
        rows: dict[int | None, list[dict]] = {}
        hidden = 0
        for t in tracks:
            pid = members.get(t.id)
            if pid in persons and persons[pid].hidden:
                hidden += 1
                continue
            rows.setdefault(pid if pid in listed else None, []).append({**track_dict(t), **span(t.start_time, t.end_time, duration),
                                                                        "watch": watch_url(video_id, t.start_time, t.end_time, t.id)})
        people = [{"id": pid, "label": (persons[pid].name or f"person {pid}") if pid is not None else "inbox (in no listed person)",
                   "tracks": ts} for pid, ts in sorted(rows.items(), key=lambda kv: (kv[0] is None, -len(kv[1])))]
        return {"video": video_dict(video), "duration": duration, "hidden_tracks": hidden,
                "shots": [{**asdict(s), **span(s.start_time, s.end_time, duration)} for s in shots], "people": people,
                "redact": self.redact_choices(video, tracks, members, persons)}

    def watch_page(self, video_id: int, start: float, end: float, track: int | None) -> dict:
        with self.library.browsing() as b:
            video = b.video(video_id)
            if video is None:
                raise NotFound(f"no video {video_id}")
            best = b.best_sighting(track) if track is not None else None
            row = b.track(track) if track is not None else None
        start = max(0.0, start)
        end = max(start, end)
        # shown as every page and the CLI show it: the track's own times, not the whole milliseconds the player is sent to
        shown = (row.start_time, row.end_time) if row is not None and row.video_id == video_id else (start, end)
        out = {"video": video_dict(video), "start": start, "end": end, "shown_start": shown[0], "shown_end": shown[1], "track": track,
               "preview_offset": max(0.0, start - PREVIEW_PAD_S),
               "sighting": None if best is None or best.video_id != video_id else best.id}
        if video.kind == "image":
            return {**out, "image": True, "src": None, "fragment": "", "offset": 0.0, "direct": False, "reason": "a photo"}
        playback = self.playback(video)
        offset = 0.0 if playback.direct else max(0.0, start - PREVIEW_PAD_S)
        src = f"/media/{video_id}" if playback.direct else f"/media/{video_id}/preview?start={seek_text(start)}&end={seek_text(end)}"
        return {**out, "image": False, "src": src, "fragment": f"#t={seek_text(start - offset)},{seek_text(end - offset)}", "offset": offset,
                "direct": playback.direct, "reason": playback.reason}

    def video_cues(self, video_id: int, chapters: bool) -> tuple[bytes, str]:
        """A video's WebVTT: who is on screen (each listed person's moments, with its tier) or one chapter a shot."""
        video = self.video_row(video_id)
        answers, shots = self.service.on_screen(Path(video.path))
        moments, _ = export_moments([r for a in answers for r in a.results], [a.person.label() for a in answers])
        if not moments and not chapters:
            return b"WEBVTT\n", "who.vtt"
        data, _ = export_bytes(".vtt", moments, ExportOptions(), {video.path: shots}, chapters)
        return data, "chapters.vtt" if chapters else "who.vtt"
