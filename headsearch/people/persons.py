"""People: every track of a library good enough to join a person grouped into persons, with the names and
corrections users give (what users see of them: `headsearch.people.listing`; reference photos:
`headsearch.people.photos`; which tracks are good enough: `headsearch.people.quality`).

Clustering is incremental. Tracks not yet in a person are taken in batches, in the order they were
indexed, and clustered by average linkage on their identity vectors together with the existing
persons; a person is a fixed cluster (the mean of its tracks' unit vectors, so average linkage
against it is one dot product) and two persons are never merged by the clustering. Two tracks
seen in the same frame are never put together, nor a track into a person one of whose tracks
shares a frame with it. The linkage threshold is the identity threshold calibrated for the
library's model (`headsearch bench --calibrate`); without one, a named default is used and said.

Users' corrections are verdicts on tracks ("track T is / is not person P"), stored with where the
track was (file, time, head box) so that they find the track again when its file is re-indexed,
and a person keeps its mean vector when all its tracks are gone, so its name comes back with them.
A track the quality gates hold back joins no person by itself; a user may still put it in one ("move").
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from headsearch.basics.errors import HeadsearchError
from headsearch.basics.text import counted
from headsearch.evaluation.thresholds import thresholds_for
from headsearch.models.registry import find_spec
from headsearch.people.clustering import average_linkage
from headsearch.people.quality import DEFAULT_GATES, QualityGates, measure
from headsearch.store.library import Library
from headsearch.store.rows import FeedbackRow, PersonPairRow, PersonRow, Place, TrackQualityRow
from schemas.records import VectorKind

if TYPE_CHECKING:  # a query reads no people table: no SQLAlchemy on its path
    from headsearch.store.people_store import PeopleStore

# Used only when a library's model has no calibrated thresholds (`headsearch bench --calibrate`) and its spec
# names no `people_threshold` (dlib's 0.93: best F1 at precision >= 0.99 on ../shared/data, `headsearch bench people --sweep`).
UNCALIBRATED_IDENTITY_FALLBACK = 0.5
UNCALIBRATED_SAME_LOOK_FALLBACK = 0.8
BATCH = 2000  # new tracks clustered at once (memory grows with its square)
REBIND_SECONDS = 0.6  # a verdict's track is found again in a re-indexed file within this time...
REBIND_IOU = 0.5  # ...and this head-box overlap


class PersonNotFound(HeadsearchError):
    """No person has that id or name."""


@dataclass(frozen=True)
class PeopleThresholds:
    identity: float
    same_look: float
    source: str  # where they come from, for the user

    @property
    def calibrated(self) -> bool:
        return not self.source.startswith("uncalibrated")


def people_thresholds(library: Library) -> PeopleThresholds:
    """The identity (and same-look) thresholds people clustering uses for this library's model."""
    model = library.model
    calibrated = thresholds_for(library.root, model)
    if calibrated is not None:
        return PeopleThresholds(calibrated.identity, calibrated.same_look, f"calibrated at FAR {calibrated.far:g}")
    spec = find_spec(model)
    identity = spec.people_threshold if spec is not None and spec.people_threshold is not None else UNCALIBRATED_IDENTITY_FALLBACK
    return PeopleThresholds(identity, UNCALIBRATED_SAME_LOOK_FALLBACK,
                            f"uncalibrated default for {model.name} (identity {identity:g}); no thresholds.json in "
                            f"{library.root}: run `headsearch bench LABELS.csv --calibrate 1e-3 --library {library.root}`")


@dataclass
class UpdateSummary:
    """What one update of the people did."""

    new_tracks: int = 0
    joined: int = 0  # new tracks that joined existing persons
    new_people: int = 0
    rebound: int = 0  # re-indexed tracks (and verdicts) that found their places again
    removed_people: int = 0
    held_back: int = 0  # tracks the quality gates keep out of persons (in the inbox)
    left: int = 0  # tracks that were in a person and now fail a gate
    threshold: float = 0.0
    source: str = ""

    def line(self) -> str:
        return (f"{counted(self.new_tracks, 'new track')}: {self.joined} joined known people, {counted(self.new_people, 'new person')}"
                + (f", {counted(self.rebound, 're-indexed track')} found in their places" if self.rebound else "")
                + (f"; {counted(self.held_back, 'track')} held back by the quality gates (`headsearch people inbox`)" if self.held_back else "")
                + (f", {self.left} of them taken out of their persons" if self.left else "")
                + f" (identity threshold {self.threshold:.3f}, {self.source.split(';')[0]})")


@dataclass
class _State:
    """The people tables read at the start of an update, changed in memory, written at its end."""

    persons: dict[int, PersonRow]
    members: dict[int, int]  # track -> person
    new: set[int] = field(default_factory=set)  # persons made in this update, not stored yet
    pins: dict[int, int] = field(default_factory=dict)  # track -> person a user put it in
    nots: dict[int, set[int]] = field(default_factory=dict)  # track -> persons a user took it out of
    changed: set[int] = field(default_factory=set)  # persons whose row changed
    inherited: dict[int, int] = field(default_factory=dict)  # new track -> person of the old track at its place

    def centroid(self, pid: int) -> np.ndarray:
        return np.frombuffer(self.persons[pid].centroid, "<f4").astype(np.float64)

    def move(self, pid: int, vectors: list[np.ndarray], sign: int = 1) -> None:
        """Add (sign 1) or take out (-1) unit track vectors from a person's mean."""
        if not vectors:
            return
        p = self.persons[pid]
        total = self.centroid(pid) * p.weight + sign * np.sum(vectors, axis=0)
        weight = max(p.weight + sign * len(vectors), 0.0)
        self.persons[pid] = replace(p, weight=weight, centroid=(total / weight).astype("<f4").tobytes() if weight > 0 else p.centroid)
        self.changed.add(pid)


def _find_again(store: PeopleStore, place: Place) -> int | None:
    """The track now at a place (file, time, head box) a vanished track was, if any."""
    box = place.head_box
    near = [s for s in store.sightings_near(place.video_path, place.time, REBIND_SECONDS) if s.head_box.iou(box) >= REBIND_IOU]
    if not near:
        return None
    return int(max(near, key=lambda s: (s.head_box.iou(box), -abs(s.time - place.time))).track_id)


def _rebind(store: PeopleStore, feedback: list[FeedbackRow], existing: set[int]) -> tuple[list[FeedbackRow], int]:
    """Point verdicts whose track vanished (its file was re-indexed) at the same head in the new
    tracks; returns the verdicts as they now are, and how many were moved."""
    out, rebound = [], 0
    for f in feedback:
        found = None if f.track_id in existing else _find_again(store, f.place)
        if found is not None:
            store.update_feedback(f.id, track_id=found)
            f = replace(f, track_id=found)
            rebound += 1
        out.append(f)
    return out, rebound


def _read_state(store: PeopleStore, existing: set[int], summary: UpdateSummary) -> _State:
    feedback, summary.rebound = _rebind(store, store.feedback(), existing)
    state = _State({p.id: p for p in store.persons()}, store.memberships())
    stale = [tr for tr in state.members if tr not in existing]
    places = store.membership_places(stale)
    store.unassign(stale)
    for tr in stale:
        del state.members[tr]
    for member in places:  # a re-indexed file: its new tracks take the places of the old ones
        new = _find_again(store, member.place)
        if new is not None and new not in state.members:
            state.members[new] = member.person_id
            state.inherited[new] = member.person_id
    for f in feedback:  # later verdicts override earlier ones
        if f.person_id not in state.persons or f.track_id not in existing:
            continue
        if f.verdict == "is":
            state.pins[f.track_id] = f.person_id
            state.nots.get(f.track_id, set()).discard(f.person_id)
        else:
            state.nots.setdefault(f.track_id, set()).add(f.person_id)
            if state.pins.get(f.track_id) == f.person_id:
                del state.pins[f.track_id]
    return state


def _new_person(store: PeopleStore, state: _State, vectors: list[np.ndarray]) -> int:
    pid = max([store.next_id("people") - 1, *state.persons]) + 1  # persons made in this update are not stored yet
    mean = np.mean(vectors, axis=0)
    state.persons[pid] = PersonRow(id=pid, name=None, hidden=False, centroid=mean.astype("<f4").tobytes(), weight=float(len(vectors)),
                                   created_at=time.time())
    state.new.add(pid)
    state.changed.add(pid)
    return pid


def _cluster_batch(store: PeopleStore, state: _State, batch: list[int], vectors: dict[int, np.ndarray],
                   cannot: dict[int, set[int]], threshold: float, summary: UpdateSummary) -> None:
    """Cluster one batch of new tracks together with the persons they could join."""
    v = np.stack([vectors[tr] for tr in batch]).astype(np.float32)
    pids = [pid for pid, p in state.persons.items() if p.weight > 0]
    if pids:
        centroids = np.stack([state.centroid(pid) for pid in pids]).astype(np.float32)
        near = (v @ centroids.T).max(axis=0) >= threshold  # a person no track comes near cannot join any cluster
        pids = [pid for pid, keep in zip(pids, near, strict=True) if keep]
    nodes = np.concatenate([np.stack([state.centroid(p) for p in pids]), v]) if pids else v.astype(np.float64)
    weights = np.array([state.persons[p].weight for p in pids] + [1.0] * len(batch))
    n_p = len(pids)
    blocked = np.zeros((len(nodes), len(nodes)), bool)
    blocked[:n_p, :n_p] = True  # persons are never merged by clustering
    index = {tr: n_p + i for i, tr in enumerate(batch)}
    person_of = {pid: i for i, pid in enumerate(pids)}
    members_of: dict[int, list[int]] = {}
    for tr, pid in state.members.items():
        members_of.setdefault(pid, []).append(tr)
    for tr in batch:
        i = index[tr]
        for other in cannot.get(tr, ()):
            if other in index:
                blocked[i, index[other]] = blocked[index[other], i] = True
            elif state.members.get(other) in person_of:
                j = person_of[state.members[other]]
                blocked[i, j] = blocked[j, i] = True
        for pid in state.nots.get(tr, ()):
            if pid in person_of:
                blocked[index[tr], person_of[pid]] = blocked[person_of[pid], index[tr]] = True
    labels = average_linkage(nodes, weights, threshold, blocked)
    for label in np.unique(labels):
        rows = np.flatnonzero(labels == label)
        tracks = [batch[r - n_p] for r in rows if r >= n_p]
        if not tracks:
            continue
        person_rows = [r for r in rows if r < n_p]
        if person_rows:
            pid = pids[person_rows[0]]
            state.move(pid, [vectors[tr] for tr in tracks])
            summary.joined += len(tracks)
        else:
            pid = _new_person(store, state, [vectors[tr] for tr in tracks])
            summary.new_people += 1
        for tr in tracks:
            state.members[tr] = pid


def _cannot_link(store: PeopleStore, tracks: Iterable[int]) -> dict[int, set[int]]:
    wanted = set(tracks)
    cannot: dict[int, set[int]] = {}
    for a, b in store.shared_frame_pairs():
        if a in wanted or b in wanted:
            cannot.setdefault(a, set()).add(b)
            cannot.setdefault(b, set()).add(a)
    return cannot


def _corrected_persons(store: PeopleStore, state: _State) -> set[int]:
    """Persons a user said something about (verdicts on tracks or pairs, reference photos): kept even when empty."""
    return ({pid for pids in state.nots.values() for pid in pids} | set(state.pins.values())
            | {p for row in store.pairs() for p in (row.person_a, row.person_b)} | {ph.person_id for ph in store.photos()})


def _measure_quality(store: PeopleStore, library: Library, existing: set[int]) -> dict[int, TrackQualityRow]:
    """Every track's measured quality; tracks not measured yet (new, or from before format 6) are measured now."""
    store.forget_quality(store.stale_quality())
    have = store.track_quality()
    missing = sorted(existing - have.keys())
    rows = measure(library.root, store.quality_inputs(missing))
    store.save_quality(rows)
    have.update({r.track_id: r for r in rows})
    return have


def _write(store: PeopleStore, state: _State, assigned: dict[int, int], summary: UpdateSummary, feedback_persons: set[int]) -> None:
    store.assign(assigned)
    counts: dict[int, int] = {}
    for pid in state.members.values():
        counts[pid] = counts.get(pid, 0) + 1
    for pid in sorted(state.changed):
        p = state.persons[pid]
        if pid in state.new:
            store.add_person(p)
        else:
            store.update_person(pid, centroid=p.centroid, weight=p.weight)
    for pid, p in state.persons.items():  # an empty person nobody named or corrected is gone
        if not counts.get(pid) and not p.name and pid not in feedback_persons:
            store.delete_person(pid)
            summary.removed_people += 1


def _retake_means(store: PeopleStore, state: _State, dim: int) -> None:
    """Each person's mean taken again from its tracks as they are now, found in their places (their vectors
    were all made anew by another model: `headsearch reindex`); a person without tracks keeps its name at
    weight 0, its mean a zero vector of the new width."""
    vectors = store.track_vectors(VectorKind.ID, sorted(state.members))
    tracks_of: dict[int, list[np.ndarray]] = {}
    for tr, pid in state.members.items():
        if tr in vectors:
            tracks_of.setdefault(pid, []).append(vectors[tr])
    for pid, p in state.persons.items():
        vs = tracks_of.get(pid, [])
        mean = np.mean(vs, axis=0) if vs else np.zeros(dim)
        state.persons[pid] = replace(p, centroid=mean.astype("<f4").tobytes(), weight=float(len(vs)))
        store.update_person(pid, centroid=state.persons[pid].centroid, weight=state.persons[pid].weight)


def _release(store: PeopleStore, state, loose: list[int], held: set[int], vectors: dict[int, np.ndarray]) -> None:
    """Tracks that leave their persons (a verdict against them, a pin elsewhere, a failed gate): out of the persons'
    means; those the gates hold back out of the tables too."""
    old: dict[int, list[np.ndarray]] = {}
    for tr in loose:
        if tr in vectors:
            old.setdefault(state.members[tr], []).append(vectors[tr])
        del state.members[tr]
    for pid, vs in old.items():
        state.move(pid, vs, sign=-1)
    store.unassign([tr for tr in loose if tr in held])


def _place_pinned(state, new: list[int], vectors: dict[int, np.ndarray]) -> list[int]:
    """New tracks a user put in a person join it (a track without a face too); those tracks."""
    pinned = [tr for tr in new if tr in state.pins]
    for tr in pinned:
        state.members[tr] = state.pins[tr]
        if tr in vectors:
            state.move(state.pins[tr], [vectors[tr]])
    return pinned


def _update(store: PeopleStore, library: Library, report: Callable[[str], None] | None, fresh_vectors: bool = False,
            gates: QualityGates = DEFAULT_GATES) -> UpdateSummary:
    th = people_thresholds(library)
    summary = UpdateSummary(threshold=th.identity, source=th.source)
    existing = store.track_ids()
    state = _read_state(store, existing, summary)
    if fresh_vectors:
        _retake_means(store, state, library.model.dim_of(VectorKind.ID))
    quality = _measure_quality(store, library, existing)
    # A track that fails a quality gate joins no person (it waits in the inbox), unless a user put it in one.
    held = {tr for tr in existing if tr not in state.pins and tr in quality and gates.reason(quality[tr]) is not None}
    summary.held_back = len(held)
    # Tracks whose place a verdict contradicts leave it; pinned tracks go where the user put them.
    loose = [tr for tr, pid in state.members.items()
             if pid in state.nots.get(tr, ()) or state.pins.get(tr, pid) != pid or tr in held]
    summary.left = sum(1 for tr in loose if tr in held)
    new = [tr for tr in sorted(existing) if tr not in state.members and tr not in held] + [tr for tr in loose if tr not in held]
    kept = {tr: pid for tr, pid in state.inherited.items() if tr not in loose}
    summary.rebound += len(kept)
    if not new and not loose:
        store.assign(kept)
        return summary
    vectors = store.track_vectors(VectorKind.ID, sorted(set(new) | set(loose)))
    _release(store, state, loose, held, vectors)
    new = list(dict.fromkeys(new))
    pinned = _place_pinned(state, new, vectors)
    rest = [tr for tr in new if tr not in state.pins and tr in vectors]
    summary.new_tracks = len(pinned) + len(rest)
    cannot = _cannot_link(store, rest)
    for start in range(0, len(rest), BATCH):
        _cluster_batch(store, state, rest[start : start + BATCH], vectors, cannot, th.identity, summary)
    _write(store, state, {**kept, **{tr: state.members[tr] for tr in pinned + rest}}, summary, _corrected_persons(store, state))
    if report and not th.calibrated:
        report(f"note: {th.source}")
    return summary


def update_people(library: Library, report: Callable[[str], None] | None = None, fresh_vectors: bool = False,
                  gates: QualityGates = DEFAULT_GATES) -> UpdateSummary:
    """Put every track not yet in a person and good enough (`gates`) into one (joining a known person or starting a
    new one), honouring users' verdicts; one transaction on the people tables. A track that fails a gate leaves its
    person unless a user put it there. `fresh_vectors`: every vector was made anew by another model since the people
    were grouped (`headsearch reindex`): tracks found in their places keep their persons, whose means are taken again
    from them before the other tracks are grouped."""
    with library.people_writing() as store:
        return _update(store, library, report, fresh_vectors, gates)


# ----- users' corrections --------------------------------------------------------------------------
def person_of_track(library: Library, track_id: int) -> int | None:
    with library.people_reading() as store:
        return store.memberships().get(int(track_id))


def _person_row(store: PeopleStore, person_id: int, root) -> PersonRow:
    for p in store.persons():
        if p.id == person_id:
            return p
    raise PersonNotFound(f"no person with id {person_id} in {root} (`headsearch people` lists them)")


def _verdict(store: PeopleStore, person_id: int, track_id: int, verdict: str) -> None:
    best = store.best_sighting(track_id)
    video = store.track(track_id)
    if best is None or video is None:
        raise HeadsearchError(f"no track {track_id} in the library")
    store.add_feedback(FeedbackRow(id=store.next_id("person_feedback"), person_id=person_id, verdict=verdict, track_id=track_id,
                                   video_path=video.video, time=best.time, x1=best.x1, y1=best.y1, x2=best.x2, y2=best.y2,
                                   created_at=time.time()))


def name_person(library: Library, person_id: int, name: str) -> None:
    """Name a person (an empty name clears it); names are unique."""
    name = " ".join(name.split())
    with library.people_writing() as store:
        _person_row(store, person_id, library.root)
        clash = [p for p in store.persons() if name and p.name and p.name.casefold() == name.casefold() and p.id != person_id]
        if clash:
            raise HeadsearchError(f"person {clash[0].id} is already named {name!r}; if they are the same person: "
                                  f"headsearch people merge {clash[0].id} {person_id}")
        store.update_person(person_id, name=name or None)


def hide_person(library: Library, person_id: int, hidden: bool = True) -> None:
    with library.people_writing() as store:
        _person_row(store, person_id, library.root)
        store.update_person(person_id, hidden=hidden)


def merge_people(library: Library, into: int, other: int) -> None:
    """Person `other` is person `into`: its tracks move there for good (kept across re-indexing)."""
    if into == other:
        raise HeadsearchError(f"cannot merge person {into} with itself")
    with library.people_writing() as store:
        a, b = _person_row(store, into, library.root), _person_row(store, other, library.root)
        members = store.memberships()
        moved = [tr for tr, pid in members.items() if pid == other]
        for f in store.feedback():  # what was said about `other` now holds for `into`
            if f.person_id == other:
                store.update_feedback(f.id, person_id=into)
        for tr in moved:
            _verdict(store, into, tr, "is")
        total = a.weight + b.weight
        if total > 0:
            mean = (np.frombuffer(a.centroid, "<f4") * a.weight + np.frombuffer(b.centroid, "<f4") * b.weight) / total
            store.update_person(into, centroid=mean.astype("<f4").tobytes(), weight=total, name=a.name or b.name)
        store.assign({tr: into for tr in moved})
        store.repoint_person(other, into)
        store.delete_person(other)


def split_person(library: Library, person_id: int, track_ids: list[int]) -> int:
    """These tracks are someone else: they leave the person together, as a new person; returns its id."""
    with library.people_writing() as store:
        _person_row(store, person_id, library.root)
        members = store.memberships()
        mine = [tr for tr, pid in members.items() if pid == person_id]
        wrong = [tr for tr in track_ids if members.get(tr) != person_id]
        if wrong:
            raise HeadsearchError(f"tracks {', '.join(map(str, wrong))} are not in person {person_id}")
        if set(track_ids) >= set(mine):
            raise HeadsearchError(f"that is every track of person {person_id}; name or hide the person instead")
        vectors = store.track_vectors(VectorKind.ID, track_ids)
        state = _State({p.id: p for p in store.persons()}, members)
        state.move(person_id, [vectors[tr] for tr in track_ids if tr in vectors], sign=-1)
        new = _new_person(store, state, [vectors[tr] for tr in track_ids if tr in vectors])
        store.add_person(state.persons[new])
        store.update_person(person_id, centroid=state.persons[person_id].centroid, weight=state.persons[person_id].weight)
        for tr in track_ids:
            _verdict(store, person_id, tr, "not")
            _verdict(store, new, tr, "is")
        store.assign({tr: new for tr in track_ids})
        return new


def not_this_person(library: Library, track_id: int, person_id: int | None = None) -> int | None:
    """A track is not the person it was put in: it leaves, never to be put back by clustering, and
    joins whoever else it matches; returns the person it was taken out of."""
    with library.people_writing() as store:
        members = store.memberships()
        if store.track(track_id) is None:
            raise HeadsearchError(f"no track {track_id} in {library.root}")
        person_id = members.get(track_id) if person_id is None else person_id
        if person_id is None:
            raise HeadsearchError(f"track {track_id} is in no person yet (run `headsearch people`)")
        _person_row(store, person_id, library.root)
        _verdict(store, person_id, track_id, "not")
    update_people(library)
    return person_id


def move_track(library: Library, track_id: int, person_id: int) -> int | None:
    """Track `track_id` is person `person_id`: it leaves the person it was in (never to be put back there by the
    grouping) and joins this one for good, in one step, even if a quality gate held it back; returns the person it
    left (None: it was in none)."""
    with library.people_writing() as store:
        _person_row(store, person_id, library.root)
        if store.track(track_id) is None:
            raise HeadsearchError(f"no track {track_id} in {library.root}")
        members = store.memberships()
        was = members.get(track_id)
        if was == person_id:
            return was
        state = _State({p.id: p for p in store.persons()}, members)
        vector = store.track_vectors(VectorKind.ID, [track_id]).get(track_id)
        if was is not None:
            _verdict(store, was, track_id, "not")
            if vector is not None:
                state.move(was, [vector], sign=-1)
        _verdict(store, person_id, track_id, "is")
        if vector is not None:
            state.move(person_id, [vector])
        for pid in state.changed:
            store.update_person(pid, centroid=state.persons[pid].centroid, weight=state.persons[pid].weight)
        store.assign({track_id: person_id})
        return was


def keep_apart(library: Library, a: int, b: int) -> None:
    """"Not the same person": persons `a` and `b` are not suggested for a merge again (kept across re-indexing and
    re-grouping, as both persons are)."""
    if a == b:
        raise HeadsearchError(f"person {a} is person {a}")
    with library.people_writing() as store:
        _person_row(store, a, library.root)
        _person_row(store, b, library.root)
        if any({r.person_a, r.person_b} == {a, b} for r in store.pairs()):
            return
        store.add_pair(PersonPairRow(id=store.next_id("person_pairs"), person_a=min(a, b), person_b=max(a, b), verdict="different",
                                     created_at=time.time()))
