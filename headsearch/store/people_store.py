"""The people tables on one connection, read and written (`headsearch.people.persons` decides what
goes in them): persons, which person each track is in, users' verdicts."""
from __future__ import annotations

from dataclasses import asdict

import sqlalchemy as sa

from headsearch.store.readers import BrowseReader, rows_of
from headsearch.store.rows import FeedbackRow, MembershipRow, PersonRow, Place
from headsearch.store.table_rows import bulk_insert, next_free_id, save_next_ids
from schemas import tables as t

_PEOPLE_TABLES = {"people": t.people, "person_feedback": t.person_feedback}


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
        """The next free id of a people table ("people" or "person_feedback"); ids are never reused
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
                       next_ids: dict[str, int]) -> None:
        """Replace the people tables with these rows, as they are (a library re-embedded from another, whose
        people and verdicts come over: `headsearch.store.reembedding`); ids stay above `next_ids`."""
        for table in (t.person_tracks, t.person_feedback, t.people):
            self._conn.execute(sa.delete(table))
        bulk_insert(self._conn, t.people, persons)
        bulk_insert(self._conn, t.person_tracks, members)
        bulk_insert(self._conn, t.person_feedback, feedback)
        save_next_ids(self._conn, {name: max(int(value), self.next_id(name)) for name, value in next_ids.items()})

    def delete_feedback(self, feedback_ids: list[int]) -> None:
        if feedback_ids:
            self._conn.execute(sa.delete(t.person_feedback).where(t.person_feedback.c.id.in_([int(i) for i in feedback_ids])))
