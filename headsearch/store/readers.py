"""What pages show, read on one SQLAlchemy connection (`BrowseReader`, from `Library.browsing()`), returning
rows (`headsearch.store.rows`). A query's look-ups are `headsearch.store.query_reader`'s."""
from __future__ import annotations

from typing import TypeVar

import numpy as np
import sqlalchemy as sa

from headsearch.store.rows import (
    ListedFile,
    ShotRow,
    SightingRow,
    TrackRow,
    TrackSummary,
    VideoRow,
)
from schemas import tables as t
from schemas.records import HeadSource, VectorKind

Row = TypeVar("Row")


def rows_of(row_type: type[Row], result) -> list[Row]:
    """A result's rows as `row_type`, whose fields are the result's column names."""
    return [row_type(**r._mapping) for r in result]


def row_of(row_type: type[Row], row) -> Row | None:
    return None if row is None else row_type(**row._mapping)


_TRACK_COLUMNS = (t.tracks.c.id, t.tracks.c.video_id, t.tracks.c.shot_id, t.tracks.c.start_time, t.tracks.c.end_time,
                  t.tracks.c.best_time, t.tracks.c.n_observations, t.tracks.c.face_visible_share, t.tracks.c.thumbnail,
                  t.videos.c.path.label("video"), t.videos.c.kind.label("video_kind"), t.tracks.c.joined_to, t.tracks.c.join_cue,
                  t.tracks.c.join_score)


class BrowseReader:
    """What pages show: files, their shots and tracks, a track's sightings, track vectors."""

    def __init__(self, conn: sa.Connection):
        self._conn = conn

    def videos(self) -> list[ListedFile]:
        """Every indexed file with its track count, by path."""
        v = t.videos
        counts = sa.select(t.tracks.c.video_id, sa.func.count().label("tracks")).group_by(t.tracks.c.video_id).subquery()
        first = sa.select(t.shots.c.video_id, sa.func.min(t.shots.c.start_time).label("first_time")).group_by(t.shots.c.video_id).subquery()
        return rows_of(ListedFile, self._conn.execute(
            sa.select(v.c.id, v.c.path, v.c.kind, v.c.duration, v.c.fps, v.c.width, v.c.height, v.c.size, v.c.mtime, v.c.fingerprint,
                      v.c.decoder, v.c.indexed_at, sa.func.coalesce(counts.c.tracks, 0).label("tracks"),
                      sa.func.coalesce(first.c.first_time, 0.0).label("first_time"))
            .select_from(v.outerjoin(counts, counts.c.video_id == v.c.id).outerjoin(first, first.c.video_id == v.c.id)).order_by(v.c.path)))

    def video(self, video_id: int) -> VideoRow | None:
        return row_of(VideoRow, self._conn.execute(sa.select(t.videos).where(t.videos.c.id == video_id)).first())

    def shots(self, video_id: int) -> list[ShotRow]:
        return rows_of(ShotRow, self._conn.execute(sa.select(t.shots).where(t.shots.c.video_id == video_id).order_by(t.shots.c.shot_index)))

    def tracks(self, video_id: int | None = None, track_ids: list[int] | None = None) -> list[TrackRow]:
        q = sa.select(*_TRACK_COLUMNS).select_from(t.tracks.join(t.videos, t.videos.c.id == t.tracks.c.video_id))
        if video_id is not None:
            q = q.where(t.tracks.c.video_id == video_id)
        if track_ids is not None:
            q = q.where(t.tracks.c.id.in_([int(i) for i in track_ids]))
        return rows_of(TrackRow, self._conn.execute(q.order_by(t.videos.c.path, t.tracks.c.start_time, t.tracks.c.id)))

    def track(self, track_id: int) -> TrackRow | None:
        found = self.tracks(track_ids=[track_id])
        return found[0] if found else None

    def track_summaries(self, track_ids: list[int] | None = None) -> list[TrackSummary]:
        """Tracks with their sightings counted: with a face, and by how each head was found; by file and time."""
        o = t.observations
        counts = [sa.func.count(sa.case((o.c.found_by == str(src), 1))).label(str(src)) for src in HeadSource]
        per_track = (sa.select(o.c.track_id, sa.func.count().label("sightings"),
                               sa.func.count(sa.case((o.c.face_visible, 1))).label("faces"), *counts,
                               sa.func.arg_min(o.c.found_by, o.c.time).label("started_by"))
                     .group_by(o.c.track_id).subquery())
        q = (sa.select(t.tracks.c.id, t.videos.c.path, t.tracks.c.shot_id, t.tracks.c.start_time, t.tracks.c.end_time, per_track)
             .select_from(t.tracks.join(t.videos, t.videos.c.id == t.tracks.c.video_id)
                          .join(per_track, per_track.c.track_id == t.tracks.c.id)))
        if track_ids is not None:
            q = q.where(t.tracks.c.id.in_([int(i) for i in track_ids]))
        out = []
        for r in self._conn.execute(q.order_by(t.videos.c.path, t.tracks.c.start_time, t.tracks.c.id)):
            m = r._mapping
            out.append(TrackSummary(id=int(r.id), video=r.path, shot_id=int(r.shot_id), start=float(r.start_time), end=float(r.end_time),
                                    sightings=int(r.sightings), faces=int(r.faces), found_by={str(src): int(m[str(src)]) for src in HeadSource},
                                    started_by=str(r.started_by)))
        return out

    def sightings_of_track(self, track_id: int) -> list[SightingRow]:
        """A track's sightings in time order."""
        return rows_of(SightingRow, self._conn.execute(sa.select(t.observations).where(t.observations.c.track_id == track_id)
                                                       .order_by(t.observations.c.time)))

    def best_sighting(self, track_id: int) -> SightingRow | None:
        """The sighting a track's thumbnail shows (at its best time)."""
        return row_of(SightingRow, self._conn.execute(
            sa.select(t.observations).select_from(t.observations.join(t.tracks, t.tracks.c.id == t.observations.c.track_id))
            .where(t.observations.c.track_id == track_id)
            .order_by(sa.func.abs(t.observations.c.time - t.tracks.c.best_time), t.observations.c.id).limit(1)).first())

    def track_vectors(self, kind: VectorKind, track_ids: list[int] | None = None) -> dict[int, np.ndarray]:
        """Each track's vector of one kind: the renormalised mean of its sightings' vectors (of the sightings
        that showed a face, when any did)."""
        q = (sa.select(t.vectors.c.track_id, t.vectors.c.embedding, t.observations.c.face_visible)
             .select_from(t.vectors.join(t.observations, t.observations.c.id == t.vectors.c.observation_id))
             .where(t.vectors.c.kind == str(kind)))
        if track_ids is not None:
            q = q.where(t.vectors.c.track_id.in_([int(i) for i in track_ids]))
        groups: dict[int, tuple[list, list]] = {}
        for track_id, emb, face in self._conn.execute(q):
            faces, others = groups.setdefault(int(track_id), ([], []))
            (faces if face else others).append(np.frombuffer(emb, "<f4"))
        out = {}
        for track_id, (faces, others) in groups.items():
            m = np.mean(np.stack(faces or others), axis=0)
            out[track_id] = (m / max(float(np.linalg.norm(m)), 1e-12)).astype(np.float32)
        return out

    def shared_frame_pairs(self) -> list[tuple[int, int]]:
        """Pairs of tracks seen in the same frame of the same file (two heads at once: two people)."""
        a, b = t.observations.alias("a"), t.observations.alias("b")
        rows = self._conn.execute(
            sa.select(a.c.track_id, b.c.track_id).distinct()
            .select_from(a.join(b, sa.and_(a.c.video_id == b.c.video_id, a.c.frame_index == b.c.frame_index,
                                           a.c.track_id < b.c.track_id))))
        return [(int(x), int(y)) for x, y in rows]

    def sightings_near(self, video_path: str, time_s: float, tolerance: float) -> list[SightingRow]:
        """Sightings in one file within `tolerance` seconds of a time (to find a track again after re-indexing)."""
        return rows_of(SightingRow, self._conn.execute(
            sa.select(t.observations).select_from(t.observations.join(t.videos, t.videos.c.id == t.observations.c.video_id))
            .where(t.videos.c.path == video_path, sa.func.abs(t.observations.c.time - time_s) <= tolerance)))
