"""Reads on one connection, returning rows (`headsearch.store.rows`): a query's look-ups
(`LibraryReader`, from `Library.reading()`) and what pages show (`BrowseReader`, from
`Library.browsing()`)."""
from __future__ import annotations

from typing import TypeVar

import numpy as np
import sqlalchemy as sa

from headsearch.store.rows import (
    HitRow,
    ListedFile,
    ShotRow,
    Sighting,
    SightingRow,
    TrackRow,
    TrackSummary,
    TrackVectors,
    VideoRow,
)
from schemas import tables as t
from schemas.records import HeadSource, MediaKind, VectorKind

Row = TypeVar("Row")


def rows_of(row_type: type[Row], result) -> list[Row]:
    """A result's rows as `row_type`, whose fields are the result's column names."""
    return [row_type(**r._mapping) for r in result]


def row_of(row_type: type[Row], row) -> Row | None:
    return None if row is None else row_type(**row._mapping)


class LibraryReader:
    """A query's reads: where vectors belong, hit details, sightings placed in their files, stored vectors."""

    def __init__(self, conn: sa.Connection):
        self._conn = conn

    def locate(self, vector_ids: np.ndarray) -> dict[int, tuple[int, int]]:
        """Vector id -> (track id, observation id), for the ids that exist."""
        ids = [int(i) for i in vector_ids if i >= 0]
        if not ids:
            return {}
        rows = self._conn.execute(sa.select(t.vectors.c.id, t.vectors.c.track_id, t.vectors.c.observation_id)
                                  .where(t.vectors.c.id.in_(ids))).fetchall()
        return {r.id: (r.track_id, r.observation_id) for r in rows}

    def hits(self, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], HitRow]:
        """Hit details of (track id, observation id) pairs, in two look-ups whatever their number."""
        if not pairs:
            return {}
        tracks = {r.id: r for r in self._conn.execute(
            sa.select(t.tracks.c.id, t.tracks.c.start_time, t.tracks.c.end_time, t.tracks.c.thumbnail, t.videos.c.path)
            .select_from(t.tracks.join(t.videos, t.videos.c.id == t.tracks.c.video_id))
            .where(t.tracks.c.id.in_(sorted({int(tr) for tr, _ in pairs}))))}
        times = dict(self._conn.execute(sa.select(t.observations.c.id, t.observations.c.time)
                                        .where(t.observations.c.id.in_(sorted({int(o) for _, o in pairs})))).fetchall())
        return {(tr, o): HitRow(tracks[tr].path, tracks[tr].start_time, tracks[tr].end_time, times[o], tracks[tr].thumbnail)
                for tr, o in pairs if tr in tracks and o in times}

    def sightings(self, observation_ids: list[int]) -> dict[int, Sighting]:
        """Sightings by observation id, placed in their files: the box in the file's own pixels, face, shot, file version."""
        ids = [int(i) for i in observation_ids]
        if not ids:
            return {}
        o, v, sh, tr = t.observations, t.videos, t.shots, t.tracks
        rows = self._conn.execute(
            sa.select(o.c.id, o.c.time, o.c.x1, o.c.y1, o.c.x2, o.c.y2, o.c.face_visible, o.c.found_by, v.c.path, v.c.kind, v.c.width, v.c.height,
                      v.c.source_width, v.c.source_height, v.c.size, v.c.mtime, v.c.fingerprint,
                      sh.c.shot_index, sh.c.start_time, sh.c.end_time)
            .select_from(o.join(tr, tr.c.id == o.c.track_id).join(v, v.c.id == o.c.video_id).join(sh, sh.c.id == tr.c.shot_id))
            .where(o.c.id.in_(ids))).fetchall()
        out = {}
        for r in rows:
            frame = (int(r.width), int(r.height))
            source = (int(r.source_width or r.width), int(r.source_height or r.height))
            sx, sy = source[0] / max(frame[0], 1), source[1] / max(frame[1], 1)
            out[int(r.id)] = Sighting(observation_id=int(r.id), path=r.path, time=float(r.time), kind=MediaKind(r.kind),
                                      box=(r.x1 * sx, r.y1 * sy, r.x2 * sx, r.y2 * sy), face_visible=bool(r.face_visible), found_by=r.found_by,
                                      shot_index=int(r.shot_index), shot_start=float(r.start_time), shot_end=float(r.end_time),
                                      frame_size=frame, source_size=source, size=int(r.size), mtime=float(r.mtime), fingerprint=r.fingerprint)
        return out

    def paths_with_fingerprint(self, fingerprint: str) -> set[str]:
        """Indexed files with this content fingerprint (e.g. the query photo itself)."""
        return {r[0] for r in self._conn.execute(sa.select(t.videos.c.path).where(t.videos.c.fingerprint == fingerprint))}

    def track_count(self) -> int:
        return int(self._conn.execute(sa.select(sa.func.count()).select_from(t.tracks)).scalar_one())

    def vector(self, observation_id: int, kind: VectorKind) -> np.ndarray | None:
        """A sighting's stored vector of one kind (None when it has none)."""
        emb = self._conn.execute(sa.select(t.vectors.c.embedding)
                                 .where(t.vectors.c.observation_id == observation_id, t.vectors.c.kind == str(kind))).scalar()
        return None if emb is None else np.frombuffer(emb, "<f4")

    def tracks_vectors(self, track_ids: list[int]) -> dict[int, TrackVectors]:
        """Every stored vector of these tracks, by kind, with the sighting and whether its face was seen."""
        if not track_ids:
            return {}
        rows = self._conn.execute(
            sa.select(t.vectors.c.track_id, t.vectors.c.observation_id, t.vectors.c.kind, t.vectors.c.embedding, t.observations.c.face_visible)
            .select_from(t.vectors.join(t.observations, t.observations.c.id == t.vectors.c.observation_id))
            .where(t.vectors.c.track_id.in_([int(i) for i in track_ids])).order_by(t.vectors.c.id))
        parts: dict[int, dict[str, list[tuple[int, bool, np.ndarray]]]] = {}
        for track_id, obs_id, kind, emb, face in rows:
            parts.setdefault(int(track_id), {}).setdefault(kind, []).append((int(obs_id), bool(face), np.frombuffer(emb, "<f4")))
        return {tr: TrackVectors({VectorKind(k): (np.array([o for o, _, _ in v], np.int64), np.array([f for _, f, _ in v], bool),
                                                   np.stack([x for _, _, x in v])) for k, v in kinds.items()})
                for tr, kinds in parts.items()}


_TRACK_COLUMNS = (t.tracks.c.id, t.tracks.c.video_id, t.tracks.c.shot_id, t.tracks.c.start_time, t.tracks.c.end_time,
                  t.tracks.c.best_time, t.tracks.c.n_observations, t.tracks.c.face_visible_share, t.tracks.c.thumbnail,
                  t.videos.c.path.label("video"), t.videos.c.kind.label("video_kind"))


class BrowseReader(LibraryReader):
    """What pages show: files, their shots and tracks, a track's sightings, track vectors."""

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
