"""The People pages as plain data (`serve.views.Site` takes these methods): the people, one person (asked of the people
core for that person alone: its moments, its merge suggestions), the inbox, a track with whom it may be moved to, a
person's moments to export, and forgetting a person."""
from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from actions.redact_frames import STYLES as REDACT_STYLES
from headsearch.basics.errors import HeadsearchError
from headsearch.exports.timelines import Moment
from headsearch.people.listing import inbox, inbox_reasons, list_people, merge_suggestions, person_choices
from headsearch.people.persons import PersonNotFound, people_thresholds
from headsearch.people.photos import reference_photos, reference_vectors
from headsearch.people.screen_time import screen_time
from headsearch.search.hits import ShownHit, export_moments, found_hits
from headsearch.search.service import SearchService
from headsearch.store.library import Library
from schemas.records import SearchHit, Tier, VectorKind
from serve.files import NotFound
from serve.forgetting import likely_note
from serve.jobs import Jobs
from serve.view_data import MAX_CHOICES, boxes, found_dict, track_dict, watch_url

MAX_SUGGESTIONS = 24  # "are these the same person?" pairs on the people page
INBOX_PAGE = 60  # inbox tracks a page
REFERENCE_K = 24  # tracks looked at per reference photo for "found by the reference photos"


class NotConfirmed(HeadsearchError):
    """A change that asks to be confirmed was not (the person page's "forget")."""


class People:
    """People, persons, the inbox and tracks as pages (a part of `serve.views.Site`)."""

    # Site's: the library, the search service, the kept searches and photos (under one lock), the cards and export links
    library: Library
    service: SearchService
    jobs: Jobs
    _kept: dict[str, list[Moment]]
    _photos: dict[str, tuple[bytes, str]]
    _kept_lock: threading.Lock
    cards: Callable[[list[ShownHit]], list[dict]]
    export_links: Callable[[str, list[Moment]], list[dict]]

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

    def _people_bar(self) -> str:
        """How people are grouped, as the page says it: "the identity bar 0.387 (calibrated at FAR 0.001)"."""
        th = people_thresholds(self.library)
        return f"the identity bar {th.identity:.3f} ({th.source})"

    def person_page(self, person_id: int) -> dict:
        """One person: read for that person alone (its tracks, its row of the merge suggestions), not the library's lists."""
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
            found = {s.id: found_dict(s) for s in b.track_summaries(person.tracks)}
        suggested = merge_suggestions(self.library, person_id=person_id)
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
                "forget_note": likely_note(self, person)}  # type: ignore[arg-type]

    def _videos_of(self, paths: list[str]) -> list[dict]:
        """The library's videos at these paths, to pick from: id and name."""
        wanted = set(paths)
        with self.library.browsing() as b:
            files = [v for v in b.videos() if v.kind == "video" and v.path in wanted]
        return sorted(({"id": v.id, "name": Path(v.path).name} for v in files), key=lambda v: (v["name"].casefold(), v["id"]))

    def person_moments_export(self, person_id: int) -> tuple[list[Moment], str]:
        try:
            answer = self.service.search_person(person_id, pictures=False)
        except PersonNotFound as e:
            raise NotFound(f"no person {person_id}") from e
        moments, _ = export_moments(answer.results, [answer.person.label()])
        return moments, answer.person.label()

    def forget(self, person_id: int, confirm: str) -> dict:
        """Forget a person for good (`headsearch people forget`) once `confirm` is their name, or "person ID" when they
        have none; every copy the app keeps goes too (`serve.forgetting`)."""
        from serve.forgetting import forget_everywhere

        return forget_everywhere(self, person_id, confirm, NotConfirmed)  # type: ignore[arg-type]

    def forget_kept(self) -> None:
        """The searches, photos and jobs the app keeps (they may show a person being forgotten)."""
        with self._kept_lock:
            self._kept.clear()
            self._photos.clear()
        self.jobs.forget_all()

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
        return {"track": {**track_dict(track), **found_dict(summary)},
                "person": None if person is None else {"id": person.id, "label": person.name or f"person {pid}", "hidden": bool(person.hidden)},
                "move_to": person_choices(self.library, track_id=track_id, min_tracks=1, suggested=self._suggestion(track_id, pid),
                                          exclude=pid)[:MAX_CHOICES],
                "watch": watch_url(track.video_id, track.start_time, track.end_time, track_id),
                "sightings": [{"id": s.id, "time": s.time, "frame_index": s.frame_index, "face_visible": s.face_visible,
                               "found_by": s.found_by, **boxes((s.x1, s.y1, s.x2, s.y2), (video.width, video.height) if video else None)}
                              for s in sightings],
                "more_like_this": self.cards(found_hits(self.library, similar).hits)}

    def _suggestion(self, track_id: int, person_id: int | None) -> int | None:
        """The inbox's suggestion for a track in no listed person: the listed person it is as alike as (else None); asked
        of the people core for this track and its person alone."""
        if person_id is not None and any(p.listed for p in list_people(self.library, with_looks=False, only=person_id)):
            return None
        w = next(iter(inbox(self.library, only=[track_id])), None)
        return w.nearest["id"] if w is not None and w.nearest and w.likely else None
