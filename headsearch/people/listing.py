"""What users see of the people: persons as listed, each with its files and looks; the inbox of tracks in no
listed person; merge suggestions ("are these the same person?"); a person's moments scored and tiered; the person
labels of search hits.

A person is listed once it has `MIN_TRACKS` tracks, a name or reference photos; hidden persons are left out of
every list and label (asked for by id or name, they still answer). Tracks that wait for a person are the inbox:
those the quality gates hold back (`headsearch.people.quality`) and those of persons too small to be listed.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from headsearch.evaluation.thresholds import thresholds_for
from headsearch.evaluation.track_scores import PersonTemplate, TrackScore, score_track
from headsearch.models.registry import find_spec
from headsearch.people.clustering import average_linkage
from headsearch.people.persons import PersonNotFound, people_thresholds
from headsearch.people.quality import DEFAULT_GATES, MIN_TRACKS, REASONS, QualityGates
from headsearch.store.library import Library
from headsearch.store.rows import PersonRow, SightingRow, TrackRow
from schemas.records import MediaKind, SearchHit, VectorKind

if TYPE_CHECKING:  # a query reads no people table: no SQLAlchemy on its path
    from headsearch.store.people_store import PeopleStore

SUGGEST_FAR = 1e-2  # persons whose tracks are this alike on average may be suggested for a merge...
# ...and no more wrong suggestions than this are expected in a whole library: with N listed persons, N(N-1)/2 pairs are
# looked at, so each pair is held to FAR = SUGGESTION_BUDGET / pairs (measured on all of ../shared/data: docs/guide.md "The web app and people")
SUGGESTION_BUDGET = 0.5
ALONE = "alone"  # an inbox reason: the track's person has too few tracks to be listed


@dataclass
class Person:
    id: int
    name: str | None
    hidden: bool
    tracks: list[int]
    videos: list[str]  # the video files it is seen in
    photos: list[str] = field(default_factory=list)  # the photo files it is seen in
    looks: list[list[int]] = field(default_factory=list)  # the tracks grouped by look (head vectors), the largest first
    references: int = 0  # reference photos a user gave
    listed: bool = True  # enough tracks, a name or reference photos

    def label(self) -> str:
        return self.name or f"person {self.id}"

    @property
    def files(self) -> list[str]:
        return self.videos + self.photos

    def to_dict(self) -> dict:
        return {"id": self.id, "name": self.name, "hidden": self.hidden, "listed": self.listed, "tracks": self.tracks,
                "videos": self.videos, "photos": self.photos, "looks": self.looks, "references": self.references}


def _looks(store: PeopleStore, library: Library, groups: dict[int, list[int]]) -> dict[int, list[list[int]]]:
    """Each person's tracks grouped by look: whole-head vectors clustered at the same-look threshold."""
    if VectorKind.HEAD not in library.model.kinds:
        return {pid: [tracks] for pid, tracks in groups.items()}
    th = people_thresholds(library)
    head = store.track_vectors(VectorKind.HEAD, [tr for tracks in groups.values() for tr in tracks])
    out = {}
    for pid, tracks in groups.items():
        have = [tr for tr in tracks if tr in head]
        if len(have) < 2:
            out[pid] = [tracks]
            continue
        labels = average_linkage(np.stack([head[tr] for tr in have]), np.ones(len(have)), th.same_look,
                                 np.zeros((len(have), len(have)), bool))
        looks = [[tr for tr, lab in zip(have, labels, strict=True) if lab == k] for k in range(int(labels.max()) + 1)]
        looks[0] += [tr for tr in tracks if tr not in head]
        out[pid] = sorted(looks, key=len, reverse=True)
    return out


def _is_listed(row: PersonRow, tracks: int, references: int, min_tracks: int) -> bool:
    return tracks >= min_tracks or bool(row.name) or references > 0


def list_people(library: Library, include_hidden: bool = False, with_looks: bool = True, include_unlisted: bool = False,
                min_tracks: int = MIN_TRACKS, only: int | None = None) -> list[Person]:
    """Persons as listed (`min_tracks` tracks, a name or reference photos), the most seen first; `include_unlisted`:
    the smaller ones too (their tracks are in the inbox); `include_hidden`: hidden ones too; `only`: that person alone
    (its tracks alone are read: a page about one person)."""
    with library.people_reading() as store:
        members = store.memberships()
        if only is not None:
            members = {tr: pid for tr, pid in members.items() if pid == only}
        tracks = {r.id: r for r in store.tracks(track_ids=list(members))} if members else {}
        references = reference_counts(store)
        groups: dict[int, list[int]] = {pid: [] for pid in references if only is None or pid == only}
        for tr, pid in members.items():
            if tr in tracks:
                groups.setdefault(pid, []).append(tr)
        rows = {p.id: p for p in store.persons()}
        shown = {}
        for pid, trs in groups.items():
            if pid not in rows or (rows[pid].hidden and not include_hidden):
                continue
            listed = _is_listed(rows[pid], len(trs), references.get(pid, 0), min_tracks)
            if listed or include_unlisted:
                shown[pid] = (sorted(trs, key=lambda tr: (tracks[tr].video, tracks[tr].start_time, tr)), listed)
        looks = _looks(store, library, {pid: trs for pid, (trs, _) in shown.items() if trs}) if with_looks else {}
    people = []
    for pid, (trs, listed) in shown.items():
        files = list(dict.fromkeys((tracks[tr].video, tracks[tr].video_kind) for tr in trs))
        people.append(Person(pid, rows[pid].name, bool(rows[pid].hidden), trs, [f for f, kind in files if kind != MediaKind.IMAGE],
                             [f for f, kind in files if kind == MediaKind.IMAGE], looks.get(pid, [trs] if trs else []),
                             references.get(pid, 0), listed))
    return sorted(people, key=lambda p: (-len(p.tracks), p.id))


def person_looks(library: Library, person_id: int) -> list[list[int]]:
    """A person's tracks grouped by look, the largest group first."""
    with library.people_reading() as store:
        tracks = sorted(tr for tr, pid in store.memberships().items() if pid == person_id)
        return _looks(store, library, {person_id: tracks})[person_id] if tracks else []


def find_person(library: Library, key: str | int) -> Person:
    """A person by id or (case-insensitive) name, hidden and unlisted ones included."""
    text = str(key).strip()
    if text.isdigit():  # an id: that person's tracks alone are read
        found = list_people(library, include_hidden=True, with_looks=False, include_unlisted=True, only=int(text))
        if found:
            return found[0]
    people = list_people(library, include_hidden=True, with_looks=False, include_unlisted=True)
    named = [p for p in people if p.name and p.name.casefold() == text.casefold()]
    if named:
        return named[0]
    raise PersonNotFound(f"no person {'with id' if text.isdigit() else 'named'} {text!r} in {library.root} "
                         "(`headsearch people` lists them)")


# ----- a person's moments ---------------------------------------------------------------------------
def person_moments(library: Library, person: Person, reference: dict[VectorKind, np.ndarray] | None = None) -> list[SearchHit]:
    """Every track of a person as a hit, best first, scored by the one scorer of search (`headsearch.evaluation.track_scores`)
    against the rest of the person (`PersonTemplate`: its other tracks and reference photos, `reference`: kind -> rows,
    and its main look); its tier by the library's thresholds: same look, other look, or below the identity threshold (a
    track a user put there, or a weak one); shown at its best sighting (its thumbnail's)."""
    if not person.tracks:
        return []
    with library.people_reading() as store:
        rows = {r.id: r for r in store.tracks(track_ids=person.tracks)}
        ids = store.track_vectors(VectorKind.ID, person.tracks)
        heads = store.track_vectors(VectorKind.HEAD, person.tracks) if VectorKind.HEAD in library.model.kinds else {}
        best = {tr: store.best_sighting(tr) for tr in rows}
    template = _template(library, person, ids, heads, reference or {})
    thresholds = thresholds_for(library.root, library.model)
    hits = [_moment(library, rows[tr], best[tr], score_track(template.rows(tr), template, thresholds)) for tr in person.tracks if tr in rows]
    return sorted(hits, key=lambda h: (-h.score, h.track_id))


def _template(library: Library, person: Person, ids: dict[int, np.ndarray], heads: dict[int, np.ndarray],
              reference: dict[VectorKind, np.ndarray]) -> PersonTemplate:
    """The person as the query its tracks are scored against: its tracks' identity vectors, its main look (the largest)."""
    main = (person.looks or [person.tracks])[0]
    spec = find_spec(library.model)
    return PersonTemplate({tr: ids[tr] for tr in person.tracks if tr in ids}, heads, [tr for tr in main if tr in heads], reference,
                          spec.appearance_dims if spec is not None else 0)


def _moment(library: Library, row: TrackRow, sighting: SightingRow | None, scored: TrackScore) -> SearchHit:
    return scored.hit(row.id, row.video, row.start_time, row.end_time, row.best_time, str((library.root / row.thumbnail).resolve()),
                      sighting.id if sighting else None)


# ----- the inbox ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class InboxTrack:
    """A track in no listed person: why, and the listed person it is most like."""

    track_id: int
    video: str
    kind: str
    start: float
    end: float
    reason: str  # a quality gate's key (`headsearch.people.quality.REASONS`), or "alone"
    why: str  # the reason in words, with the numbers
    person_id: int | None  # the unlisted person it is in (reason "alone")
    nearest: dict | None  # {"id", "label", "score"}: the listed person whose tracks it is most like on average
    likely: bool  # that person's tracks are as alike as one person's (above the identity threshold)

    def to_dict(self) -> dict:
        return asdict(self)


def reference_counts(store: PeopleStore) -> Counter[int]:
    """How many reference photos each person has."""
    return Counter(photo.person_id for photo in store.photos())


def _listed_centroids(store: PeopleStore, min_tracks: int) -> tuple[list[int], dict[int, str], np.ndarray | None]:
    """The listed, shown persons with their labels and means (rows), for "most like"."""
    members = store.memberships()
    sizes = Counter(members.values())
    references = reference_counts(store)
    rows = [p for p in store.persons() if not p.hidden and p.weight > 0 and _is_listed(p, sizes.get(p.id, 0), references.get(p.id, 0), min_tracks)]
    if not rows:
        return [], {}, None
    return ([p.id for p in rows], {p.id: p.name or f"person {p.id}" for p in rows},
            np.stack([np.frombuffer(p.centroid, "<f4") for p in rows]).astype(np.float32))


def inbox(library: Library, gates: QualityGates = DEFAULT_GATES, min_tracks: int = MIN_TRACKS,
          only: Collection[int] | None = None) -> list[InboxTrack]:
    """Tracks in no listed person (held back by a quality gate, or in a person too small to list; hidden persons'
    tracks are not waiting), those most like a listed person first; `only`: of these tracks alone (a track's page)."""
    th = people_thresholds(library)
    with library.people_reading() as store:
        members = store.memberships()
        persons = {p.id: p for p in store.persons()}
        quality = store.track_quality()
        sizes = Counter(members.values())
        references = reference_counts(store)
        waiting: dict[int, tuple[str, str, int | None]] = {}
        for tr in store.track_ids() if only is None else sorted(set(only)):
            pid = members.get(tr)
            if pid is None:
                q = quality.get(tr)
                reason = gates.reason(q) if q is not None else None
                waiting[tr] = (reason or "not_grouped", gates.describe(q) if reason else "not grouped yet (`headsearch people`)", None)
            elif pid in persons and not persons[pid].hidden and not _is_listed(persons[pid], sizes[pid], references.get(pid, 0), min_tracks):
                waiting[tr] = (ALONE, f"{persons[pid].name or f'person {pid}'} has {sizes[pid]} track{'s' if sizes[pid] != 1 else ''} "
                                      f"(listed from {min_tracks})", pid)
        rows = {r.id: r for r in store.tracks(track_ids=list(waiting))} if waiting else {}
        vectors = store.track_vectors(VectorKind.ID, list(waiting)) if waiting else {}
        pids, labels, centroids = _listed_centroids(store, min_tracks)
    out = []
    for tr, (reason, why, pid) in waiting.items():
        if tr not in rows:
            continue
        nearest, likely = None, False
        if centroids is not None and tr in vectors:
            sims = centroids @ vectors[tr]
            if pid is not None and pid in pids:
                sims[pids.index(pid)] = -np.inf
            k = int(np.argmax(sims))
            if np.isfinite(sims[k]):
                nearest = {"id": pids[k], "label": labels[pids[k]], "score": round(float(sims[k]), 4)}
                likely = bool(sims[k] > th.identity)
        r = rows[tr]
        out.append(InboxTrack(tr, r.video, r.video_kind, r.start_time, r.end_time, reason, why, pid, nearest, likely))
    return sorted(out, key=lambda t: (not t.likely, -(t.nearest["score"] if t.nearest else -1.0), t.video, t.start, t.track_id))


def inbox_reasons() -> dict[str, str]:
    """Each inbox reason's key and words."""
    return {**REASONS, ALONE: "in a person with too few tracks to be listed", "not_grouped": "not grouped yet"}


# ----- merge suggestions ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Suggestion:
    """Two listed persons whose tracks are alike enough to ask "are these the same person?"."""

    a: int
    b: int
    score: float  # mean identity similarity of a track of one to a track of the other

    def to_dict(self) -> dict:
        return asdict(self)


def suggestion_bar(library: Library, persons: int = 2) -> float:
    """The mean similarity from which two of `persons` listed persons are suggested for a merge: the identity score at the
    FAR that expects at most SUGGESTION_BUDGET wrong suggestions over all their pairs (never looser than SUGGEST_FAR),
    from the model's calibration; without one, the grouping's threshold less 0.07."""
    found = thresholds_for(library.root, library.model)
    if found is not None and "identity" in found.tails:
        pairs = max(1, persons * (persons - 1) // 2)
        return float(found.tails["identity"].threshold(min(SUGGEST_FAR, SUGGESTION_BUDGET / pairs))[0])
    return people_thresholds(library).identity - 0.07


def merge_suggestions(library: Library, min_tracks: int = MIN_TRACKS, bar: float | None = None,
                      person_id: int | None = None) -> list[Suggestion]:
    """Pairs of listed, shown persons whose tracks are alike on average (at least `bar`), most alike first; never two
    persons seen in one frame, nor two a user said are not the same; `person_id`: its pairs alone (its row of the
    similarities, not the library's whole table: a person's page)."""
    with library.people_reading() as store:
        pids, _, centroids = _listed_centroids(store, min_tracks)
        if centroids is None or len(pids) < 2:
            return []
        bar = suggestion_bar(library, len(pids)) if bar is None else bar
        apart = {frozenset((r.person_a, r.person_b)) for r in store.pairs()}
        members = store.memberships()
        seen_together = {frozenset((members[a], members[b])) for a, b in store.shared_frame_pairs() if a in members and b in members}
    means = centroids.astype(np.float64)
    if person_id is not None:
        if person_id not in pids:
            return []
        i = pids.index(person_id)
        row = means @ means[i]
        alike = [(i, int(j), float(row[j])) for j in np.nonzero(row >= bar)[0] if j != i]
    else:
        sims = means @ means.T
        alike = [(int(i), int(j), float(sims[i, j])) for i, j in zip(*np.nonzero(np.triu(sims >= bar, 1)), strict=True)]
    out = []
    for i, j, score in alike:
        pair = frozenset((pids[i], pids[j]))
        if pair in apart or pair in seen_together:
            continue
        out.append(Suggestion(min(pair), max(pair), round(score, 4)))
    return sorted(out, key=lambda s: (-s.score, s.a, s.b))


# ----- picking a person ------------------------------------------------------------------------------
def person_choices(library: Library, person_id: int | None = None, track_id: int | None = None,
                   min_tracks: int = MIN_TRACKS, suggested: int | None = None, exclude: int | None = None) -> list[dict]:
    """The shown persons of at least `min_tracks` tracks (1: the unlisted ones too) to pick from (merging into a person,
    moving a track), each {"id", "label", "tracks", "score", "preselect"}: the most like person `person_id` (its mean)
    or track `track_id` (its identity vector) first, that person itself left out; by size when there is nothing to
    compare with; `exclude` left out too (a track's own person). A picker pre-selects `suggested` (the inbox's
    suggestion) where it is given, else the first only when
    it is as alike as one person (above the identity threshold): otherwise nothing, so one careless click merges no
    stranger."""
    with library.people_reading() as store:
        pids, labels, centroids = _listed_centroids(store, min_tracks)
        sizes = Counter(store.memberships().values())
        like = None
        if person_id is not None:
            row = next((p for p in store.persons() if p.id == person_id), None)
            like = None if row is None or row.weight <= 0 else np.frombuffer(row.centroid, "<f4")
        elif track_id is not None:
            like = store.track_vectors(VectorKind.ID, [track_id]).get(track_id)
    if centroids is None:
        return []
    scores = centroids @ like if like is not None else np.zeros(len(pids), np.float32)
    out = [{"id": pid, "label": labels[pid], "tracks": sizes.get(pid, 0), "score": round(float(s), 4) if like is not None else None,
            "preselect": False} for pid, s in zip(pids, scores.tolist(), strict=True) if pid not in (person_id, exclude)]
    out.sort(key=lambda c: (-(c["score"] if c["score"] is not None else 0.0), -c["tracks"], c["id"]))
    bar = people_thresholds(library).identity
    for c in out:
        if suggested is not None:
            c["preselect"] = c["id"] == suggested
        elif c is out[0]:
            c["preselect"] = c["score"] is not None and c["score"] > bar
    return out
