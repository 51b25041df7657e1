"""The people tables on one connection, read and written (`headsearch.people` decides what goes in them):
persons, which person each track is in, users' verdicts on tracks and on pairs of persons, tracks' measured
quality, persons' reference photos."""
from __future__ import annotations

from dataclasses import asdict

import sqlalchemy as sa

from headsearch.store.readers import BrowseReader, rows_of
from headsearch.store.rows import (
    FeedbackRow,
    ForgetCheckRow,
    ForgottenRow,
    ForgottenVideoRow,
    MembershipRow,
    PersonPairRow,
    PersonPhotoRow,
    PersonRow,
    Place,
    TrackQualityInput,
    TrackQualityRow,
)
from headsearch.store.table_rows import bulk_insert, next_free_id, save_next_ids
from schemas import tables as t

_PEOPLE_TABLES = {"people": t.people, "person_feedback": t.person_feedback, "person_pairs": t.person_pairs,
                  "person_photos": t.person_photos}


class PeopleStore(BrowseReader):
    """The people tables, beside what pages read (from `Library.people_reading()` or `people_writing()`)."""

    def persons(self) -> list[PersonRow]:
        return rows_of(PersonRow, self._conn.execute(sa.select(t.people).order_by(t.people.c.id)))

    def memberships(self) -> dict[int, int]:
        """Track id -> person id."""
        return {int(a): int(b) for a, b in self._conn.execute(sa.select(t.person_tracks.c.track_id, t.person_tracks.c.person_id))}

    def membership_places(self, track_ids: list[int]) -> list[MembershipRow]:
        """These members with where they were (file, time, head box), as stored with their membership."""
        if not track_ids:
            return []
        return rows_of(MembershipRow, self._conn.execute(
            sa.select(t.person_tracks).where(t.person_tracks.c.track_id.in_([int(i) for i in track_ids]))))

    def all_memberships(self) -> list[MembershipRow]:
        """Every membership with its place, by track."""
        return rows_of(MembershipRow, self._conn.execute(sa.select(t.person_tracks).order_by(t.person_tracks.c.track_id)))

    def places(self, track_ids: list[int]) -> dict[int, Place]:
        """Each track's best sighting with its file: where it is, to find it again after re-indexing."""
        if not track_ids:
            return {}
        o = t.observations
        best = (sa.select(o.c.track_id, o.c.time, o.c.x1, o.c.y1, o.c.x2, o.c.y2, t.videos.c.path.label("video_path"),
                          sa.func.row_number().over(partition_by=o.c.track_id,
                                                    order_by=(sa.func.abs(o.c.time - t.tracks.c.best_time), o.c.id)).label("rank"))
                .select_from(o.join(t.tracks, t.tracks.c.id == o.c.track_id).join(t.videos, t.videos.c.id == o.c.video_id))
                .where(o.c.track_id.in_([int(i) for i in track_ids])).subquery())
        rows = self._conn.execute(sa.select(best).where(best.c.rank == 1))
        return {int(r.track_id): Place(video_path=r.video_path, time=r.time, x1=r.x1, y1=r.y1, x2=r.x2, y2=r.y2) for r in rows}

    def feedback(self) -> list[FeedbackRow]:
        """Users' verdicts, oldest first."""
        return rows_of(FeedbackRow, self._conn.execute(sa.select(t.person_feedback).order_by(t.person_feedback.c.id)))

    def track_ids(self) -> set[int]:
        return {int(r[0]) for r in self._conn.execute(sa.select(t.tracks.c.id))}

    def next_id(self, table_name: str) -> int:
        """The next free id of a people table ("people", "person_feedback", "person_pairs", "person_photos"); ids are never reused
        (verdicts and links name them)."""
        return next_free_id(self._conn, _PEOPLE_TABLES[table_name])

    def _used_id(self, table_name: str, used: int) -> None:
        if used + 1 > self.next_id(table_name):
            save_next_ids(self._conn, {table_name: used + 1})

    def add_person(self, row: PersonRow) -> None:
        self._conn.execute(sa.insert(t.people).values(**asdict(row)))
        self._used_id("people", row.id)

    def update_person(self, person_id: int, **values) -> None:
        self._conn.execute(sa.update(t.people).where(t.people.c.id == person_id).values(**values))

    def delete_person(self, person_id: int) -> None:
        self._conn.execute(sa.delete(t.person_tracks).where(t.person_tracks.c.person_id == person_id))
        self._conn.execute(sa.delete(t.people).where(t.people.c.id == person_id))

    def assign(self, assignments: dict[int, int]) -> None:
        """Set the person of these tracks (replacing what they had), with where each track is."""
        if not assignments:
            return
        self.unassign(list(assignments))
        places = self.places(list(assignments))
        bulk_insert(self._conn, t.person_tracks, [MembershipRow(track_id=int(k), person_id=int(v), **asdict(places[int(k)]))
                                                  for k, v in assignments.items() if int(k) in places])

    def unassign(self, track_ids: list[int]) -> None:
        for start in range(0, len(track_ids), 10_000):
            chunk = [int(i) for i in track_ids[start : start + 10_000]]
            self._conn.execute(sa.delete(t.person_tracks).where(t.person_tracks.c.track_id.in_(chunk)))

    def add_feedback(self, row: FeedbackRow) -> None:
        self._conn.execute(sa.insert(t.person_feedback).values(**asdict(row)))
        self._used_id("person_feedback", row.id)

    def update_feedback(self, feedback_id: int, **values) -> None:
        self._conn.execute(sa.update(t.person_feedback).where(t.person_feedback.c.id == feedback_id).values(**values))

    def replace_people(self, persons: list[PersonRow], members: list[MembershipRow], feedback: list[FeedbackRow],
                       next_ids: dict[str, int], pairs: list[PersonPairRow] = (), photos: list[PersonPhotoRow] = ()) -> None:
        """Replace the people tables with these rows, as they are (a library re-embedded from another, whose
        people, verdicts, answers about pairs and reference photos come over: `headsearch.store.reembedding`); ids
        stay above `next_ids`."""
        for table in (t.person_tracks, t.person_feedback, t.people, t.person_pairs, t.person_photos):
            self._conn.execute(sa.delete(table))
        bulk_insert(self._conn, t.people, persons)
        bulk_insert(self._conn, t.person_tracks, members)
        bulk_insert(self._conn, t.person_feedback, feedback)
        bulk_insert(self._conn, t.person_pairs, list(pairs))
        bulk_insert(self._conn, t.person_photos, list(photos))
        save_next_ids(self._conn, {name: max(int(value), self.next_id(name)) for name, value in next_ids.items()})

    def delete_feedback(self, feedback_ids: list[int]) -> None:
        if feedback_ids:
            self._conn.execute(sa.delete(t.person_feedback).where(t.person_feedback.c.id.in_([int(i) for i in feedback_ids])))

    # ----- tracks' quality -------------------------------------------------------------------------
    def quality_inputs(self, track_ids: list[int]) -> list[TrackQualityInput]:
        """What each track's quality is measured from: sightings with a face, the detector's best score, the
        largest head box of a face sighting, the thumbnail."""
        if not track_ids:
            return []
        o = t.observations
        out: list[TrackQualityInput] = []
        for start in range(0, len(track_ids), 10_000):
            chunk = [int(i) for i in track_ids[start : start + 10_000]]
            per_track = (sa.select(o.c.track_id, sa.func.count(sa.case((o.c.face_visible, 1))).label("faces"),
                                   sa.func.coalesce(sa.func.max(sa.case((o.c.face_visible, o.c.face_score))), 0.0).label("face_score"),
                                   sa.func.coalesce(sa.func.max(sa.case((o.c.face_visible, o.c.y2 - o.c.y1))), 0.0).label("head_height"))
                         .where(o.c.track_id.in_(chunk)).group_by(o.c.track_id).subquery())
            rows = self._conn.execute(
                sa.select(t.tracks.c.id.label("track_id"), t.videos.c.kind, per_track.c.faces, per_track.c.face_score, per_track.c.head_height,
                          t.tracks.c.thumbnail)
                .select_from(t.tracks.join(t.videos, t.videos.c.id == t.tracks.c.video_id).join(per_track, per_track.c.track_id == t.tracks.c.id))
                .order_by(t.tracks.c.id))
            out += [TrackQualityInput(track_id=int(r.track_id), kind=r.kind, faces=int(r.faces), face_score=float(r.face_score or 0.0),
                                      head_height=float(r.head_height or 0.0), thumbnail=r.thumbnail) for r in rows]
        return out

    def track_quality(self, track_ids: list[int] | None = None) -> dict[int, TrackQualityRow]:
        """Tracks' measured quality (only of tracks measured so far)."""
        q = sa.select(t.track_quality)
        if track_ids is not None:
            if not track_ids:
                return {}
            q = q.where(t.track_quality.c.track_id.in_([int(i) for i in track_ids]))
        return {r.track_id: r for r in rows_of(TrackQualityRow, self._conn.execute(q))}

    def save_quality(self, rows: list[TrackQualityRow]) -> None:
        if not rows:
            return
        self.forget_quality([r.track_id for r in rows])
        bulk_insert(self._conn, t.track_quality, rows)

    def forget_quality(self, track_ids: list[int]) -> None:
        for start in range(0, len(track_ids), 10_000):
            chunk = [int(i) for i in track_ids[start : start + 10_000]]
            self._conn.execute(sa.delete(t.track_quality).where(t.track_quality.c.track_id.in_(chunk)))

    def stale_quality(self) -> list[int]:
        """Tracks measured that are no longer in the library (their file was removed or re-indexed)."""
        q = t.track_quality
        gone = sa.select(q.c.track_id).where(~sa.exists().where(t.tracks.c.id == q.c.track_id))
        return [int(r[0]) for r in self._conn.execute(gone)]

    # ----- answers about pairs of persons --------------------------------------------------------------
    def pairs(self) -> list[PersonPairRow]:
        return rows_of(PersonPairRow, self._conn.execute(sa.select(t.person_pairs).order_by(t.person_pairs.c.id)))

    def add_pair(self, row: PersonPairRow) -> None:
        self._conn.execute(sa.insert(t.person_pairs).values(**asdict(row)))
        self._used_id("person_pairs", row.id)

    def repoint_person(self, old: int, new: int) -> None:
        """What was said of person `old` (answers about pairs, reference photos) now holds for person `new`."""
        p = t.person_pairs
        self._conn.execute(sa.update(p).where(p.c.person_a == old).values(person_a=new))
        self._conn.execute(sa.update(p).where(p.c.person_b == old).values(person_b=new))
        self._conn.execute(sa.delete(p).where(p.c.person_a == p.c.person_b))
        self._conn.execute(sa.update(t.person_photos).where(t.person_photos.c.person_id == old).values(person_id=new))

    # ----- reference photos ----------------------------------------------------------------------------
    def photos(self, person_id: int | None = None) -> list[PersonPhotoRow]:
        q = sa.select(t.person_photos).order_by(t.person_photos.c.id)
        if person_id is not None:
            q = q.where(t.person_photos.c.person_id == int(person_id))
        return rows_of(PersonPhotoRow, self._conn.execute(q))

    def add_photo(self, row: PersonPhotoRow) -> None:
        self._conn.execute(sa.insert(t.person_photos).values(**asdict(row)))
        self._used_id("person_photos", row.id)

    def delete_photo(self, photo_id: int) -> None:
        self._conn.execute(sa.delete(t.person_photos).where(t.person_photos.c.id == int(photo_id)))

    # ----- persons forgotten -------------------------------------------------------------------------
    def forgotten(self) -> list[ForgottenRow]:
        """The record of persons forgotten (`headsearch.store.forgetting`), oldest first."""
        return rows_of(ForgottenRow, self._conn.execute(sa.select(t.forgotten_people).order_by(t.forgotten_people.c.id)))

    def keep_forgotten(self, rows: list[ForgottenRow]) -> None:
        """The record of persons forgotten replaced by these rows (a library re-embedded from another keeps its record)."""
        self._conn.execute(sa.delete(t.forgotten_people))
        bulk_insert(self._conn, t.forgotten_people, rows)

    def forget_marks(self) -> tuple[list[ForgottenVideoRow], list[ForgetCheckRow]]:
        """The rest of the record of persons forgotten: the files each forgetting touched (`forgotten_videos`) and what its
        searches for leftovers found (`forget_checks`)."""
        return (rows_of(ForgottenVideoRow, self._conn.execute(sa.select(t.forgotten_videos))),
                rows_of(ForgetCheckRow, self._conn.execute(sa.select(t.forget_checks))))

    def keep_forget_marks(self, marks: tuple[list[ForgottenVideoRow], list[ForgetCheckRow]]) -> None:
        """`forget_marks` of another library replace this one's (a library re-embedded from another keeps them, so a file
        that held a forgotten person is still known by its content)."""
        for table, rows in zip((t.forgotten_videos, t.forget_checks), marks, strict=True):
            self._conn.execute(sa.delete(table))
            bulk_insert(self._conn, table, rows)
