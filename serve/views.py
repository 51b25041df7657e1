"""What each page shows, as plain data: the HTML page renders it and its /api twin returns it as JSON.

The library is opened read-only and every read is one short connection (an index run may commit
between two requests and is never kept waiting); the vector indexes are brought up to date with the
database before each search.
"""
from __future__ import annotations

import base64
import os
import re
import secrets
import threading
from dataclasses import asdict
from pathlib import Path, PurePosixPath

import numpy as np

from headsearch.basics.errors import HeadsearchError
from headsearch.basics.images import encode_jpeg
from headsearch.basics.timeline import seek_text
from headsearch.embedding.photo_heads import PhotoEmbedder
from headsearch.exports.timelines import EXPORT_FORMATS, ExportOptions, Moment, export_bytes
from headsearch.people.listing import (
    inbox,
    inbox_reasons,
    list_people,
    merge_suggestions,
    person_choices,
)
from headsearch.people.persons import PersonNotFound, people_thresholds
from headsearch.people.photos import reference_photo, reference_photos, reference_vectors
from headsearch.people.screen_time import screen_time
from headsearch.search.hits import (
    HeadResult,
    ShownHit,
    clipped_box,
    export_moments,
    found_hits,
    hidden_line,
    hit_json,
    no_match_line,
    results_json,
)
from headsearch.search.pictures import pictures_folder, render_picture
from headsearch.search.service import Answer, QueryOptions, SearchService
from headsearch.store.layout import PERSON_PHOTOS, PICTURES, THUMBNAILS
from headsearch.store.library import Library
from headsearch.store.rows import ListedFile, TrackRow, TrackSummary, VideoRow
from indexer.redact_frames import STYLES as REDACT_STYLES
from schemas.records import SearchHit, Tier, VectorKind
from serve.files import FileChanged, FileNotServed, IndexedFiles, NotFound, OpenFile, open_in_folder
from serve.forgetting import likely_note
from serve.media import PREVIEW_PAD_S, MediaCache, Playback, cache_folder, decoding, probe_playback
from serve.redacting import RedactJobs
from serve.redaction_views import Redactions

MAX_K = 100


class NotConfirmed(HeadsearchError):
    """A change that asks to be confirmed was not (the person page's "forget")."""


MAX_CHOICES = 500  # persons offered in a picker, the most alike first
MAX_SUGGESTIONS = 24  # "are these the same person?" pairs on the people page
INBOX_PAGE = 60  # inbox tracks a page
FILES_PAGE = 100  # files a page of the Videos page
REFERENCE_K = 24  # tracks looked at per reference photo for "found by the reference photos"
KEPT_EXPORTS = 64  # searches whose moments are kept for their export links
KEPT_PHOTO_BYTES = 64 << 20  # the last searches' photos kept (in memory, at most this much) so their options re-run them
THUMB_INLINE_BYTES = 32 * 1024  # a thumbnail this small goes inside its card


class Site(Redactions):
    """One library as the web app serves it: the library, its search service (the model loads on the first search), the media cache."""

    def __init__(self, root: Path, cache_dir: Path | None = None, model: str | None = None):
        self.library = Library.open(Path(root))
        self.root = self.library.root
        self.cache = MediaCache(cache_dir or cache_folder(self.root, self.library.manifest.get("created_at", "")))
        self.service = SearchService(self.library, PhotoEmbedder(model, self.root), media_guard=decoding)
        self.files = IndexedFiles()
        self._playback: dict[tuple[int, str], Playback] = {}
        self._comparing = threading.Lock()  # one comparison at a time: it analyses a whole video
        self._kept: dict[str, list[Moment]] = {}  # search moments kept for their export links
        self._kept_lock = threading.Lock()
        self._photos: dict[str, tuple[bytes, str]] = {}  # the last searches' photos by id: (bytes, name)
        self.redactions = RedactJobs(self.cache.folder)  # redaction jobs, their files in the cache folder
        self._redactor = None  # indexer.redact.Redactor, made on the first redaction
        self._redactor_lock = threading.Lock()
        with self.library.browsing() as b:  # the database driver loads now, not on the first page someone asks for
            b.videos()

    # ----- searching --------------------------------------------------------------------------------
    def search(self, photo: Path | bytes, name: str, k: int, all_heads: bool, whole_image: bool, show_weak: bool = False) -> Answer:
        """The answer `headsearch query` gives for an uploaded photo (a temporary file, or a kept photo's bytes; named `name`
        in messages): confident hits only unless `show_weak`, never the photo itself. Searches run at once up to the
        usable cores (the service)."""
        options = QueryOptions(k=k, all_heads=all_heads, whole_image=whole_image, show_weak=show_weak)
        return self.service.search_photo(photo if isinstance(photo, bytes) else photo.read_bytes(), options, name)

    def keep_photo(self, photo: Path, name: str) -> str:
        """Keep a searched photo so that the page's options (k, weak matches, every head) search it again without
        picking it again; its id. The last ones are kept, KEPT_PHOTO_BYTES together at most."""
        key = secrets.token_urlsafe(12)
        data = photo.read_bytes()
        with self._kept_lock:
            self._photos[key] = (data, name)
            while sum(len(d) for d, _ in self._photos.values()) > KEPT_PHOTO_BYTES and len(self._photos) > 1:
                self._photos.pop(next(iter(self._photos)))
        return key

    def kept_photo(self, key: str) -> tuple[bytes, str]:
        """A kept photo's bytes and name; NotFound once it is no longer kept."""
        with self._kept_lock:
            found = self._photos.get(key)
        if found is None:
            raise NotFound("the last photo is no longer kept: pick it again")
        return found

    # ----- pages ------------------------------------------------------------------------------------
    def query_page(self, answer: Answer, all_heads: bool, name: str = "photo") -> dict:
        hint = 'tick "weak matches too" to see them'
        names = [f"{Path(name).stem} head {r.head.number}" if all_heads and r.head is not None else Path(name).stem for r in answer.results]
        heads = []
        for r, label in zip(answer.results, names, strict=True):
            moments, _ = export_moments([r], [label])
            heads.append({"crop": _crop_url(r), "cards": self.cards(r.hits), "exports": self.export_links(f"/exports/{self.keep(moments)}", moments),
                          "note": no_match_line(r, answer.confidence, hint) if not r.hits else hidden_line(r, answer.confidence, hint)})
        return {"heads": heads, "hits": results_json(answer.results, all_heads), "uncalibrated": answer.note}

    # ----- exports ----------------------------------------------------------------------------------
    def keep(self, moments: list[Moment]) -> str:
        """Keep a search's moments for its export links (the last `KEPT_EXPORTS` searches); their key."""
        key = secrets.token_urlsafe(12)
        with self._kept_lock:
            self._kept[key] = moments
            while len(self._kept) > KEPT_EXPORTS:
                self._kept.pop(next(iter(self._kept)))
        return key

    def kept(self, key: str) -> list[Moment]:
        with self._kept_lock:
            moments = self._kept.get(key)
        if moments is None:
            raise NotFound("this search's export is gone (search again)")
        return moments

    @staticmethod
    def export_links(base: str, moments: list[Moment]) -> list[dict]:
        """Links to each format an editor takes (the ones installed), when there are moments in videos."""
        if not moments:
            return []
        one_video = len({m.video for m in moments}) == 1
        return [{"format": f.label, "href": f"{base}.{suffix.lstrip('.')}"} for suffix, f in EXPORT_FORMATS.items()
                if (one_video or not f.one_video) and not f.missing()]

    def export_file(self, moments: list[Moment], suffix: str, name: str, shots: dict | None = None, chapters: bool = False) -> tuple[bytes, str]:
        """An export's bytes and its file name."""
        if suffix not in EXPORT_FORMATS:
            raise NotFound(f"no export format {suffix}")
        data, _ = export_bytes(suffix, moments, ExportOptions(name=name), shots, chapters)
        return data, re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:60] + suffix

    def person_moments_export(self, person_id: int) -> tuple[list[Moment], str]:
        try:
            answer = self.service.search_person(person_id, pictures=False)
        except PersonNotFound as e:
            raise NotFound(f"no person {person_id}") from e
        moments, _ = export_moments(answer.results, [answer.person.label()])
        return moments, answer.person.label()

    def video_cues(self, video_id: int, chapters: bool) -> tuple[bytes, str]:
        """A video's WebVTT: who is on screen (each listed person's moments, with its tier) or one chapter a shot."""
        video = self.video_row(video_id)
        answers, shots = self.service.on_screen(Path(video.path))
        moments, _ = export_moments([r for a in answers for r in a.results], [a.person.label() for a in answers])
        if not moments and not chapters:
            return b"WEBVTT\n", "who.vtt"
        data, _ = export_bytes(".vtt", moments, ExportOptions(), {video.path: shots}, chapters)
        return data, "chapters.vtt" if chapters else "who.vtt"

    def _people_bar(self) -> str:
        """How people are grouped, as the page says it: "the identity bar 0.387 (calibrated at FAR 0.001)"."""
        th = people_thresholds(self.library)
        return f"the identity bar {th.identity:.3f} ({th.source})"

    def cards(self, shown: list[ShownHit]) -> list[dict]:
        """Hits with what a card needs: the matched sighting to show boxed, the file's id, the player's address."""
        out = []
        with self.library.browsing() as b:
            for s in shown:
                h = s.hit
                track = b.track(h.track_id)
                if track is None:  # removed since the search
                    continue
                out.append({**hit_json(s), "video_id": track.video_id, "name": Path(h.video).name, "sighting": h.observation_id,
                            "kind": track.video_kind, "watch": watch_url(track.video_id, h.start, h.end, h.track_id),
                            "thumb": self._thumb_data(track.thumbnail)})
        return out

    def _thumb_data(self, thumbnail: str) -> str | None:
        """A track's thumbnail (a small JPEG in the library folder) as a data URL: a card shows it at first paint, before
        the boxed frame arrives."""
        if PurePosixPath(thumbnail).parts[:1] != (THUMBNAILS,):
            return None
        try:
            opened = open_in_folder(self.root, thumbnail, "a thumbnail")
        except (FileNotServed, NotFound, OSError):
            return None
        try:
            data = os.read(opened.fd, THUMB_INLINE_BYTES + 1)
        finally:
            opened.close()
        return None if len(data) > THUMB_INLINE_BYTES else "data:image/jpeg;base64," + base64.b64encode(data).decode()

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
        shown = [_listed(v) for v in files[(page - 1) * per_page : page * per_page]]
        folders: dict[str, list[dict]] = {}
        for v in shown:
            folders.setdefault(str(Path(v["path"]).parent), []).append(v)
        root = _common_folder(list(folders))
        return {"videos": shown, "root": root,
                "folders": [{"folder": f, "shown": _under(f, root), "files": vs} for f, vs in folders.items()],
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
            rows.setdefault(pid if pid in listed else None, []).append({**_track(t), **_span(t.start_time, t.end_time, duration),
                                                                        "watch": watch_url(video_id, t.start_time, t.end_time, t.id)})
        people = [{"id": pid, "label": (persons[pid].name or f"person {pid}") if pid is not None else "inbox (in no listed person)",
                   "tracks": ts} for pid, ts in sorted(rows.items(), key=lambda kv: (kv[0] is None, -len(kv[1])))]
        return {"video": _video(video), "duration": duration, "hidden_tracks": hidden,
                "shots": [{**asdict(s), **_span(s.start_time, s.end_time, duration)} for s in shots], "people": people,
                "redact": self.redact_choices(video, tracks, members, persons)}

    def track_page(self, track_id: int, k: int = 12) -> dict:
        with self.library.people_reading() as store:
            track = store.track(track_id)
            if track is None:
                raise NotFound(f"no track {track_id}")
            sightings = store.sightings_of_track(track_id)
            video = store.video(track.video_id)
            summary = next(iter(store.track_summaries([track_id])), None)
            vectors = {kind: v[track_id] for kind in self.library.model.kinds
                       if track_id in (v := store.track_vectors(kind, [track_id]))}
            pid = store.memberships().get(track_id)
            person = next((p for p in store.persons() if p.id == pid), None)
        similar = self.service.similar(vectors, k, track_id) if VectorKind.ID in vectors else []
        return {"track": {**_track(track), **_found(summary)},
                "person": None if person is None else {"id": person.id, "label": person.name or f"person {pid}", "hidden": bool(person.hidden)},
                "move_to": person_choices(self.library, track_id=track_id, min_tracks=1, suggested=self._suggestion(track_id, pid),
                                          exclude=pid)[:MAX_CHOICES],
                "watch": watch_url(track.video_id, track.start_time, track.end_time, track_id),
                "sightings": [{"id": s.id, "time": s.time, "frame_index": s.frame_index, "face_visible": s.face_visible,
                               "found_by": s.found_by, **_boxes((s.x1, s.y1, s.x2, s.y2), (video.width, video.height) if video else None)}
                              for s in sightings],
                "more_like_this": self.cards(found_hits(self.library, similar).hits)}

    def _suggestion(self, track_id: int, person_id: int | None) -> int | None:
        """The inbox's suggestion for a track in no listed person: the listed person it is as alike as (else None)."""
        if person_id is not None and any(p.id == person_id for p in list_people(self.library, with_looks=False)):
            return None
        w = next((w for w in inbox(self.library) if w.track_id == track_id), None)
        return w.nearest["id"] if w is not None and w.nearest and w.likely else None

    def people_page(self, include_hidden: bool = False) -> dict:
        with self.library.session():  # one open of the database for the page's several reads
            return self._people_page(include_hidden)

    def _people_page(self, include_hidden: bool) -> dict:
        people = list_people(self.library, include_hidden=include_hidden)
        with self.library.people_reading() as store:
            grouped = len(store.memberships())
            total = len(store.track_ids())
            measured = len(store.track_quality())
        labels = {p.id: p.label() for p in people}
        suggestions = [{**s.to_dict(), "a_label": labels.get(s.a, f"person {s.a}"), "b_label": labels.get(s.b, f"person {s.b}"),
                        "a_tracks": next((p.tracks[:3] for p in people if p.id == s.a), []),
                        "b_tracks": next((p.tracks[:3] for p in people if p.id == s.b), [])}
                       for s in merge_suggestions(self.library)[:MAX_SUGGESTIONS]]
        return {"people": [{**p.to_dict(), "label": p.label(), "hidden": p.hidden} for p in people],
                "ungrouped_tracks": max(0, total - max(grouped, measured)), "inbox": len(inbox(self.library)),
                "suggestions": suggestions, "thresholds": self._people_bar()}

    def person_page(self, person_id: int) -> dict:
        try:
            answer = self.service.search_person(person_id, pictures=False)
        except PersonNotFound as e:
            raise NotFound(f"no person {person_id}") from e
        person, moments = answer.person, answer.results[0].hits
        looks = person.looks
        references, aside = reference_vectors(self.library, person_id)
        found_by_photos = self.found_by_references(references, set(person.tracks))
        by_track = {s.hit.track_id: s.hit for s in moments}
        with self.library.browsing() as b:
            found = {s.id: _found(s) for s in b.track_summaries(person.tracks)}
        suggested = [s for s in merge_suggestions(self.library) if person_id in (s.a, s.b)]
        return {"person": {**person.to_dict(), "looks": looks, "label": person.label(), "hidden": person.hidden},
                "looks": [[{"track_id": tr, "video": by_track[tr].video, "start": by_track[tr].start, "end": by_track[tr].end,
                            "kind": "image" if by_track[tr].video in person.photos else "video", **found.get(tr, {})}
                           for tr in look if tr in by_track] for look in looks],
                "references": [{"id": r.id, "path": r.path, "name": Path(r.path).name, "face_visible": r.face_visible}
                               for r in reference_photos(self.library, person_id)], "references_aside": aside,
                "found_by_photos": found_by_photos,
                "merge_choices": person_choices(self.library, person_id=person_id, min_tracks=1)[:MAX_CHOICES],
                "suggestions": [{"other": s.b if s.a == person_id else s.a, "score": s.score} for s in suggested],
                "moments": [{**c, "moment": True} for c in self.cards(moments)],
                "screen_time": [t.to_dict() for t in screen_time(self.library, person_id)],
                "exports": self.export_links(f"/people/{person_id}/export", export_moments(answer.results, [person.label()])[0]),
                "redact": {"videos": self._videos_of(person.videos), "styles": list(REDACT_STYLES)},
                "forget_note": likely_note(self, person)}

    def _videos_of(self, paths: list[str]) -> list[dict]:
        """The library's videos at these paths, to pick from: id and name."""
        wanted = set(paths)
        with self.library.browsing() as b:
            files = [v for v in b.videos() if v.kind == "video" and v.path in wanted]
        return sorted(({"id": v.id, "name": Path(v.path).name} for v in files), key=lambda v: (v["name"].casefold(), v["id"]))

    def forget(self, person_id: int, confirm: str) -> dict:
        """Forget a person for good (`headsearch people forget`) once `confirm` is their name, or "person ID" when they
        have none; every copy the app keeps goes too (`serve.forgetting`)."""
        from serve.forgetting import forget_everywhere

        return forget_everywhere(self, person_id, confirm, NotConfirmed)

    def forget_kept(self) -> None:
        """The searches, photos and redactions the app keeps (they may show a person being forgotten)."""
        with self._kept_lock:
            self._kept.clear()
            self._photos.clear()
        self.redactions.forget_all()

    def found_by_references(self, references: list[dict[VectorKind, np.ndarray]], mine: set[int]) -> list[dict]:
        """The library searched with a person's reference photos: confident hits (same person by the library's
        thresholds) on tracks not in the person, best first, as cards (none without calibrated thresholds)."""
        best: dict[int, SearchHit] = {}
        for vectors in references:
            for h in self.service.similar(vectors, REFERENCE_K):
                if h.track_id in mine or h.tier in (None, Tier.OTHER_PERSON):
                    continue
                if h.track_id not in best or h.score > best[h.track_id].score:
                    best[h.track_id] = h
        hits = sorted(best.values(), key=lambda h: (-h.score, h.track_id))
        return self.cards(found_hits(self.library, hits).hits) if hits else []

    def inbox_page(self, page: int = 1) -> dict:
        """Tracks in no listed person, those most like a listed person first, `INBOX_PAGE` a page."""
        waiting = inbox(self.library)
        pages = max(1, -(-len(waiting) // INBOX_PAGE))
        page = min(max(1, page), pages)
        shown = waiting[(page - 1) * INBOX_PAGE : page * INBOX_PAGE]
        with self.library.browsing() as b:
            video_ids = {t.id: t.video_id for t in b.tracks(track_ids=[w.track_id for w in shown])} if shown else {}
        choices = person_choices(self.library)[:MAX_CHOICES]

        def own(w) -> list[dict]:  # each track's picker pre-selects its own suggestion where it is as alike as one person
            pick = w.nearest["id"] if w.nearest and w.likely else None
            return [{**c, "preselect": c["id"] == pick} for c in choices]

        return {"tracks": [{**w.to_dict(), "name": Path(w.video).name, "video_id": video_ids.get(w.track_id), "choices": own(w),
                            "watch": watch_url(video_ids[w.track_id], w.start, w.end, w.track_id) if w.track_id in video_ids else None}
                           for w in shown],
                "total": len(waiting), "page": page, "pages": pages, "reasons": inbox_reasons(), "choices": choices}

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
        out = {"video": _video(video), "start": start, "end": end, "shown_start": shown[0], "shown_end": shown[1], "track": track,
               "preview_offset": max(0.0, start - PREVIEW_PAD_S),
               "sighting": None if best is None or best.video_id != video_id else best.id}
        if video.kind == "image":
            return {**out, "image": True, "src": None, "fragment": "", "offset": 0.0, "direct": False, "reason": "a photo"}
        playback = self.playback(video)
        offset = 0.0 if playback.direct else max(0.0, start - PREVIEW_PAD_S)
        src = f"/media/{video_id}" if playback.direct else f"/media/{video_id}/preview?start={seek_text(start)}&end={seek_text(end)}"
        return {**out, "image": False, "src": src, "fragment": f"#t={seek_text(start - offset)},{seek_text(end - offset)}", "offset": offset,
                "direct": playback.direct, "reason": playback.reason}

    # ----- compare ------------------------------------------------------------------------------------
    def compare_form(self) -> dict:
        """The Compare page's form: the library's videos to pick from."""
        with self.library.browsing() as b:
            files = [v for v in b.videos() if v.kind == "video"]
        root = _common_folder([str(Path(v.path).parent) for v in files])
        choices = sorted(({"id": v.id, "name": _under(v.path, root), "path": v.path} for v in files), key=lambda c: c["name"].casefold())
        return {"videos": choices, "root": root, "comparison": None, "cast": None}  # named by their place under the folder they share

    def compare(self, photo: Path | None, photo_name: str, video_id: int | None = None, clip: Path | None = None,
                clip_name: str | None = None, cast: bool = False) -> tuple[dict, dict]:
        """A reference photo (its largest head) compared with a library video (by id) or an uploaded clip, as `headsearch
        compare` does: (the page's data, the JSON twin, one entry of `compare --json`); or, `cast`, the library's named
        people as the cast (`compare --cast`: the twin is one video's entry). One comparison at a time."""
        from headsearch.compare.reference import Reference, ReferenceHead
        from headsearch.compare.report import frame_picture, page_data, plot_svg
        from headsearch.detection.crops import picture_of
        from indexer.compare import Comparer

        if (video_id is None) == (clip is None):
            raise HeadsearchError("pick a video of the library or upload a clip (one of them)")
        if photo is None and not cast:
            raise HeadsearchError("give a reference photo, or take the library's named people as the cast")
        photos = self.service.photos
        comparer = Comparer.of(photos)  # the library's bars; refused in one line without them
        if video_id is not None:
            video = self.video_row(video_id)
            self.open_indexed(video).close()  # only the version indexed
            path, name = Path(video.path), Path(video.path).name
        else:
            path, name = clip, clip_name or "clip"
        if cast:
            return self._compare_cast(comparer, path, name, video_id)
        with self._comparing:
            e = photos.heads(photo, photo_name)[0]  # its largest head
            head = ReferenceHead(e.vectors, e.head.face_visible, encode_jpeg(picture_of(e.head.crop), 90), e.head.box.area)
            reference = Reference.of(Path(photo_name).stem or "reference", [head], [photo_name])
            try:
                c = comparer.compare_video(path, [reference])[0]
            except HeadsearchError as e:
                if video_id is None:  # an uploaded clip: named as the user named it, not by the server's temporary file
                    e.args = (str(e).replace(str(path), name), *e.args[1:])
                raise
            link = (lambda t: watch_url(video_id, t, t + 2.0)) if video_id is not None else None
            data = page_data(c)
            for w in data["worst"]:
                jpeg = frame_picture(c, w.pop("frame"))
                w["picture"] = None if jpeg is None else "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()
        twin = {**c.to_dict(), "video": name if video_id is None else c.video}
        page = {**data, "name": name, "video": name if video_id is None else c.video, "plot": plot_svg(c, link),
                "reference_picture": None if reference.picture is None else "data:image/jpeg;base64," + base64.b64encode(reference.picture).decode(),
                "drift_links": [link(d.time) if link else None for d in c.drifts], "video_id": video_id}
        return {**self.compare_form(), "comparison": page}, twin

    def _compare_cast(self, comparer, path: Path, name: str, video_id: int | None) -> tuple[dict, dict]:
        """The library's named people as a cast over one video (`compare --cast`)."""
        from headsearch.basics.timeline import format_time
        from headsearch.compare.cast import CastRun, gap_plot_svg
        from headsearch.compare.reference import Reference, person_heads

        named = [p for p in list_people(self.library, with_looks=False) if p.name]
        if not named:
            raise HeadsearchError("no named people in this library to make the cast: name people first (the People page, or "
                                  "`headsearch people name ID NAME`)")
        with self._comparing:
            references = []
            for p in named:
                label, heads, said = person_heads(self.library, p.id)
                references.append(Reference.of(label, heads, [said]))
            try:
                run = CastRun([r.name for r in references], [comparer.cast_video(path, references)])
            except HeadsearchError as e:
                if video_id is None:
                    e.args = (str(e).replace(str(path), name), *e.args[1:])
                raise
        twin = {**run.to_json()[0], "video": name if video_id is None else str(path)}
        apps = [{**a.to_dict(), "start_text": format_time(a.start), "end_text": format_time(a.end),
                 "link": None if video_id is None else watch_url(video_id, a.start, a.end)} for a in run.appearances()]
        page = {"name": name, "characters": run.summaries(), "appearances": apps, "plot": gap_plot_svg(run),
                "nobody": sum(h.character is None and h.tier != "no_head" for h in run.videos[0].heads), "video_id": video_id}
        return {**self.compare_form(), "cast": page}, twin

    # ----- media --------------------------------------------------------------------------------------
    def playback(self, video: VideoRow) -> Playback:
        """Whether browsers play the file as it is (probed once, only as the version indexed)."""
        key = (video.id, video.fingerprint)
        if key not in self._playback:
            try:
                opened = self.open_indexed(video)
            except (FileNotServed, FileChanged) as e:
                return Playback(False, str(e))
            try:
                self._playback[key] = probe_playback(Path(video.path), opened)
            finally:
                opened.close()
        return self._playback[key]

    def open_indexed(self, video: VideoRow) -> OpenFile:
        """The indexed file, opened for sending only when it is the version indexed (`serve.files`)."""
        return self.files.open(video.path, video.size, video.fingerprint, f"{'photo' if video.kind == 'image' else 'video'} {video.id}")

    def video_row(self, video_id: int) -> VideoRow:
        with self.library.browsing() as b:
            video = b.video(video_id)
        if video is None:
            raise NotFound(f"no video {video_id}")
        return video

    def thumbnail(self, track_id: int) -> OpenFile:
        """A track's thumbnail: a regular file in the library's thumbnails folder, never through a link."""
        with self.library.browsing() as b:
            track = b.track(track_id)
        if track is None:
            raise NotFound(f"no track {track_id}")
        if PurePosixPath(track.thumbnail).parts[:1] != (THUMBNAILS,):
            raise FileNotServed(f"track {track_id}: its thumbnail {track.thumbnail} is not in the library's {THUMBNAILS} folder")
        return open_in_folder(self.root, track.thumbnail, f"track {track_id}'s thumbnail")

    def person_photo(self, photo_id: int) -> OpenFile:
        """A reference photo's head crop: a regular file in the library's person-photos folder, never through a link."""
        row = reference_photo(self.library, photo_id)
        if row is None:
            raise NotFound(f"no reference photo {photo_id}")
        if PurePosixPath(row.crop).parts[:1] != (PERSON_PHOTOS,):
            raise FileNotServed(f"reference photo {photo_id}: its crop {row.crop} is not in the library's {PERSON_PHOTOS} folder")
        return open_in_folder(self.root, row.crop, f"reference photo {photo_id}")

    def frame(self, sighting_id: int) -> OpenFile:
        """The picture of a sighting: its frame with the head boxed (the same picture `query` makes), rendered only
        from the version of the file indexed and kept in the library's pictures folder (else in the app's cache)."""
        with self.library.reading() as r:
            sighting = r.sightings([sighting_id]).get(sighting_id)
        if sighting is None:
            raise NotFound(f"no sighting {sighting_id}")
        self.files.open(sighting.path, sighting.size, sighting.fingerprint, f"sighting {sighting_id}'s file").close()
        base = self.root
        if pictures_folder(self.root) != self.root / PICTURES:  # the library folder cannot be written: the app's own cache
            base = self.cache.folder
            (base / PICTURES).mkdir(parents=True, exist_ok=True)
        with decoding():
            picture, why = render_picture(base / PICTURES, Path(sighting.path), sighting.time, sighting)
        if picture is None:
            raise NotFound(f"no picture of sighting {sighting_id}: {why}")
        if picture.parent != base / PICTURES:
            raise FileNotServed(f"no picture of sighting {sighting_id}: it could not be kept in {base / PICTURES}")
        return open_in_folder(base, f"{PICTURES}/{picture.name}", f"sighting {sighting_id}'s picture")


def _crop_url(result: HeadResult) -> str:
    """A query head's crop as a data URL (half size)."""
    crop = result.head.crop.image[::2, ::2]
    return "data:image/jpeg;base64," + base64.b64encode(encode_jpeg(crop, 85)).decode()


def _boxes(box: tuple[float, float, float, float], size: tuple[int, int] | None) -> dict:
    """A sighting's box within its frame, and the whole head's where it reaches outside (`box_unclipped`)."""
    inside, whole = clipped_box(box, size)
    return {"box": inside, **({"box_unclipped": whole} if whole is not None else {})}


def watch_url(video_id: int, start: float, end: float, track: int | None = None) -> str:
    """The player at a moment: times in whole milliseconds never before the frame (`seek_time`), so a track that starts
    at a cut opens on its own shot."""
    return f"/watch/{video_id}?start={seek_text(start)}&end={seek_text(end)}" + (f"&track={track}" if track is not None else "")


def _span(start: float, end: float, duration: float) -> dict:
    """Where a time range lies along a timeline, in percent."""
    left = 100.0 * start / duration
    return {"left": round(left, 3), "width": round(max(0.6, 100.0 * (end - start) / duration), 3)}


def _listed(v: ListedFile) -> dict:
    return {"id": v.id, "path": v.path, "kind": v.kind, "duration": v.player_duration, "fps": v.fps, "width": v.width, "height": v.height,
            "decoder": v.decoder, "indexed_at": v.indexed_at, "tracks": v.tracks, "name": Path(v.path).name}


def _video(v: VideoRow) -> dict:
    return {"id": v.id, "path": v.path, "name": Path(v.path).name, "kind": v.kind, "duration": v.duration,
            "fps": v.fps, "width": v.width, "height": v.height}


def _found(summary: TrackSummary | None) -> dict:
    """How a track's heads were found: sightings with a face, and by face, keypoints or followed."""
    if summary is None:
        return {}
    return {"faces": summary.faces, "faceless": summary.sightings - summary.faces, "found_by": summary.found_by,
            "started_by": summary.started_by}


def _track(t: TrackRow) -> dict:
    return {"id": t.id, "video_id": t.video_id, "video": t.video, "name": Path(t.video).name, "start": t.start_time,
            "end": t.end_time, "best_time": t.best_time, "sightings": t.n_observations,
            "face_visible_share": round(float(t.face_visible_share), 3)}


def _common_folder(folders: list[str]) -> str:
    """The deepest folder every one of these lies under, above them all ("" for none): the place a page names once, so
    that each folder is shown by its own path under it."""
    try:
        common = os.path.commonpath(folders) if folders else ""
    except ValueError:  # relative and absolute mixed
        return ""
    return os.path.dirname(common) if common in folders else common


def _under(path: str, root: str) -> str:
    """A path as it lies under `root`, the folder `_common_folder` found above it (the path itself without one)."""
    return os.path.relpath(path, root) if root else path
