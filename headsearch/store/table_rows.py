"""What goes into the tables: an analysed file as rows numbered from the library's next free ids,
the counters kept in `library_state` (the generation, the next free ids), and the bulk insert."""
from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict

import numpy as np
import sqlalchemy as sa

from headsearch.detection.pose import face_yaw
from headsearch.store.database import GENERATION_SQL
from headsearch.store.layout import THUMBNAILS
from headsearch.store.rows import ShotRow, SightingRow, TrackRow, VectorRow, VideoRow, sample_bytes
from schemas import tables as t
from schemas.file_names import stored_path
from schemas.records import FileResult, VectorKind

ID_TABLES = (t.videos, t.shots, t.tracks, t.observations, t.vectors)  # tables whose ids are never reused


class FileRows:
    """One analysed file as table rows, numbered from the library's next free ids."""

    def __init__(self, result: FileResult, ids: dict[str, int]):
        video_id = ids["videos"]
        next_shot, next_track, next_obs, next_vec = ids["shots"], ids["tracks"], ids["observations"], ids["vectors"]
        s = result.stamp
        width, height = result.source_size or (result.width, result.height)
        self.video = VideoRow(id=video_id, path=s.path, kind=str(result.kind), fingerprint=s.fingerprint, size=s.size, mtime=s.mtime,
                              duration=result.duration, fps=result.fps, width=result.width, height=result.height,
                              frames_decoded=result.frames_decoded, frames_sampled=result.frames_sampled, decoder=result.decoder,
                              indexed_at=time.time(), source_width=width, source_height=height,
                              samples=sample_bytes([i for i, _ in result.samples]))
        shot_ids: dict[int, int] = {}
        self.shots: list[ShotRow] = []
        for sh in result.shots:
            shot_ids[sh.index] = next_shot
            self.shots.append(ShotRow(id=next_shot, video_id=video_id, shot_index=sh.index, start_frame=sh.start_frame,
                                      end_frame=sh.end_frame, start_time=sh.start_time, end_time=sh.end_time))
            next_shot += 1
        self.tracks: list[TrackRow] = []
        self.sightings: list[SightingRow] = []
        self.thumbnails: dict[int, bytes] = {}  # track id -> JPEG
        vec: dict[VectorKind, tuple[list, list, list, list]] = {}
        first_track = next_track
        for tr in result.tracks:
            track_id = next_track
            next_track += 1
            self.thumbnails[track_id] = tr.thumbnail
            join = tr.join
            self.tracks.append(TrackRow(id=track_id, video_id=video_id, shot_id=shot_ids.get(tr.shot_index, shot_ids[max(shot_ids)]),
                                        start_time=tr.start, end_time=tr.end, best_time=tr.observations[tr.best_index].time,
                                        n_observations=len(tr.observations), face_visible_share=tr.face_visible_share,
                                        thumbnail=f"{THUMBNAILS}/{track_id}.jpg", video=s.path, video_kind=str(result.kind),
                                        joined_to=None if join is None else first_track + join.to,
                                        join_cue=None if join is None else join.cue, join_score=None if join is None else join.score))
            for o in tr.observations:
                self.sightings.append(SightingRow(id=next_obs, track_id=track_id, video_id=video_id, frame_index=o.frame_index,
                                                  time=o.time, x1=o.head.x1, y1=o.head.y1, x2=o.head.x2, y2=o.head.y2,
                                                  face_visible=o.face_visible, face_score=o.face.score if o.face else None,
                                                  found_by=str(o.found_by), yaw=face_yaw(o.face)))
                for kind, v in o.embeddings.items():
                    ids_, obs_, trk_, vs_ = vec.setdefault(VectorKind(kind), ([], [], [], []))
                    ids_.append(next_vec)
                    obs_.append(next_obs)
                    trk_.append(track_id)
                    vs_.append(v)
                    next_vec += 1
                next_obs += 1
        self._vec = {k: (np.array(a, np.int64), np.array(b, np.int64), np.array(c, np.int64), np.stack(d).astype(np.float32))
                     for k, (a, b, c, d) in vec.items()}
        self.vectors = {k: (v[0], v[3]) for k, v in self._vec.items()}  # kind -> (ids, vectors), for the FAISS indexes
        self.next_ids = {"videos": video_id + 1, "shots": next_shot, "tracks": next_track, "observations": next_obs, "vectors": next_vec}

    def vector_rows(self) -> list[VectorRow]:
        rows = []
        for kind, (vec_ids, obs_ids, track_ids, vecs) in self._vec.items():
            for i in range(len(vec_ids)):
                rows.append(VectorRow(id=int(vec_ids[i]), kind=str(kind), observation_id=int(obs_ids[i]), track_id=int(track_ids[i]),
                                      video_id=self.video.id, embedding=np.asarray(vecs[i], dtype="<f4").tobytes()))
        return rows

    def insert(self, conn: sa.Connection) -> None:
        """Insert every row of the file (the caller's transaction)."""
        conn.execute(sa.insert(t.videos), [asdict(self.video)])
        bulk_insert(conn, t.shots, self.shots)
        bulk_insert(conn, t.tracks, self.tracks)
        bulk_insert(conn, t.observations, self.sightings)
        bulk_insert(conn, t.vectors, self.vector_rows())


def bulk_insert(conn: sa.Connection, table: sa.Table, rows: Sequence[object]) -> None:
    """Insert many rows (dataclasses holding at least the table's columns, by name) through DuckDB's
    Arrow path (SQLAlchemy executemany is ~5,000 rows/s)."""
    if not rows:
        return
    import pyarrow as pa

    columns = [c.name for c in table.columns]
    paths = {c.name for c in table.columns if isinstance(c.type, t.FilePath)}  # Arrow's path skips the column types
    arrow = pa.table({c: [stored_path(getattr(r, c)) if c in paths else getattr(r, c) for r in rows] for c in columns})
    raw = conn.connection.dbapi_connection
    name = f"_incoming_{table.name}"
    raw.register(name, arrow)
    try:
        raw.execute(f"INSERT INTO {table.name} ({', '.join(columns)}) SELECT {', '.join(columns)} FROM {name}")
    finally:
        raw.unregister(name)


# ----- library_state ------------------------------------------------------------------------------
def generation(conn: sa.Connection) -> int:
    """The library's generation (`headsearch.store.database.GENERATION_SQL`)."""
    return int(conn.exec_driver_sql(GENERATION_SQL).scalar_one())


def next_free_id(conn: sa.Connection, table: sa.Table) -> int:
    """The next free id of a table. Ids are never reused (a stale FAISS cache is told from the
    database by its set of ids; users' verdicts name persons), so a deleted top id stays taken."""
    top = int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(table.c.id), 0))).scalar_one()) + 1
    saved = conn.execute(sa.select(t.library_state.c.value).where(t.library_state.c.key == f"next_{table.name}")).scalar()
    return max(top, int(saved or 0))


def next_free_ids(conn: sa.Connection, tables: Iterable[sa.Table] = ID_TABLES) -> dict[str, int]:
    return {table.name: next_free_id(conn, table) for table in tables}


def save_next_ids(conn: sa.Connection, next_ids: dict[str, int]) -> None:
    for name, value in next_ids.items():
        key = f"next_{name}"
        conn.execute(sa.delete(t.library_state).where(t.library_state.c.key == key))
        conn.execute(sa.insert(t.library_state).values(key=key, value=str(value)))
