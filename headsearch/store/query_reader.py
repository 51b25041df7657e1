"""A query's look-ups, in DuckDB's own SQL on a plain connection (`Library.reading()`): where vectors belong,
hit details, sightings placed in their files, stored vectors. Plain SQL so that a query imports no SQLAlchemy
(most of a cold query's start-up); the tables are `schemas.tables`' (`tests/test_query_reader.py` checks these reads against them)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from headsearch.store.database import IN_IDS
from headsearch.store.rows import HitRow, JoinedPiece, Sighting, TrackVectors
from schemas.file_names import disk_path
from schemas.records import MediaKind, VectorKind

if TYPE_CHECKING:
    import duckdb



class LibraryReader:
    """A query's reads: where vectors belong, hit details, sightings placed in their files, stored vectors."""

    def __init__(self, conn: duckdb.DuckDBPyConnection):
        self._conn = conn

    def _rows(self, sql: str, *params) -> list[tuple]:
        return self._conn.execute(sql, list(params)).fetchall()

    def locate(self, vector_ids: np.ndarray) -> dict[int, tuple[int, int]]:
        """Vector id -> (track id, observation id), for the ids that exist."""
        ids = [int(i) for i in vector_ids if i >= 0]
        if not ids:
            return {}
        return {int(i): (int(tr), int(o)) for i, tr, o in
                self._rows(f"SELECT id, track_id, observation_id FROM vectors WHERE id {IN_IDS}", ids)}

    def hits(self, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], HitRow]:
        """Hit details of (track id, observation id) pairs, in two look-ups whatever their number."""
        if not pairs:
            return {}
        tracks = {int(r[0]): r[1:] for r in self._rows(
            f"SELECT t.id, v.path, t.start_time, t.end_time, t.thumbnail FROM tracks t JOIN videos v ON v.id = t.video_id "
            f"WHERE t.id {IN_IDS}", sorted({int(tr) for tr, _ in pairs}))}
        times = {int(r[0]): (r[1], r[2]) for r in self._rows(f"SELECT id, time, yaw FROM observations WHERE id {IN_IDS}",
                                                             sorted({int(o) for _, o in pairs}))}
        return {(tr, o): HitRow(disk_path(path), start, end, times[o][0], thumbnail, times[o][1])
                for tr, o in pairs if tr in tracks and o in times for path, start, end, thumbnail in [tracks[tr]]}

    def sightings(self, observation_ids: list[int]) -> dict[int, Sighting]:
        """Sightings by observation id, placed in their files: the box in the file's own pixels, face, shot, file version."""
        ids = [int(i) for i in observation_ids]
        if not ids:
            return {}
        rows = self._rows(
            "SELECT o.id, o.time, o.x1, o.y1, o.x2, o.y2, o.face_visible, o.found_by, v.path, v.kind, v.width, v.height, "
            "v.source_width, v.source_height, v.size, v.mtime, v.fingerprint, sh.shot_index, sh.start_time, sh.end_time "
            "FROM observations o JOIN tracks tr ON tr.id = o.track_id JOIN videos v ON v.id = o.video_id "
            f"JOIN shots sh ON sh.id = tr.shot_id WHERE o.id {IN_IDS}", ids)
        out = {}
        for (oid, time, x1, y1, x2, y2, face, found_by, path, kind, width, height, source_width, source_height, size, mtime,
             fingerprint, shot_index, shot_start, shot_end) in rows:
            frame = (int(width), int(height))
            source = (int(source_width or width), int(source_height or height))
            sx, sy = source[0] / max(frame[0], 1), source[1] / max(frame[1], 1)
            out[int(oid)] = Sighting(observation_id=int(oid), path=disk_path(path), time=float(time), kind=MediaKind(kind),
                                     box=(x1 * sx, y1 * sy, x2 * sx, y2 * sy), face_visible=bool(face), found_by=found_by,
                                     shot_index=int(shot_index), shot_start=float(shot_start), shot_end=float(shot_end),
                                     frame_size=frame, source_size=source, size=int(size), mtime=float(mtime), fingerprint=fingerprint)
        return out

    def joined_pieces(self, track_ids: list[int]) -> dict[int, list[JoinedPiece]]:
        """For each of these tracks, the other tracks of its person within its shot (joins: `indexer.rejoin`), in time
        order; the cue is the later piece's (a person's first track was joined by none)."""
        ids = sorted({int(i) for i in track_ids})
        if not ids:
            return {}
        rows = self._rows(
            "SELECT q.id, t.id, v.path, t.start_time, t.end_time, t.best_time, t.thumbnail, "
            "(SELECT o.id FROM observations o WHERE o.track_id = t.id ORDER BY abs(o.time - t.best_time), o.id LIMIT 1), "
            "coalesce(CASE WHEN t.joined_to IS NULL THEN q.join_cue ELSE t.join_cue END, 'head') "
            "FROM tracks q JOIN tracks t ON coalesce(t.joined_to, t.id) = coalesce(q.joined_to, q.id) AND t.id <> q.id "
            f"JOIN videos v ON v.id = t.video_id WHERE q.id {IN_IDS} ORDER BY q.id, t.start_time, t.id", ids)
        out: dict[int, list[JoinedPiece]] = {}
        for asked, track, path, start, end, best, thumbnail, obs, cue in rows:
            if obs is not None:
                out.setdefault(int(asked), []).append(JoinedPiece(int(asked), int(track), disk_path(path), float(start), float(end),
                                                                  float(best), thumbnail, int(obs), str(cue)))
        return out

    def paths_with_fingerprint(self, fingerprint: str) -> set[str]:
        """Indexed files with this content fingerprint (e.g. the query photo itself)."""
        return {disk_path(path) for (path,) in self._rows("SELECT path FROM videos WHERE fingerprint = ?", fingerprint)}

    def track_count(self) -> int:
        return int(self._rows("SELECT count(*) FROM tracks")[0][0])

    def vector(self, observation_id: int, kind: VectorKind) -> np.ndarray | None:
        """A sighting's stored vector of one kind (None when it has none)."""
        found = self._rows("SELECT embedding FROM vectors WHERE observation_id = ? AND kind = ? LIMIT 1", int(observation_id), str(kind))
        return np.frombuffer(found[0][0], "<f4") if found else None

    def tracks_vectors(self, track_ids: list[int]) -> dict[int, TrackVectors]:
        """Every stored vector of these tracks, by kind, with the sighting and whether its face was seen."""
        if not track_ids:
            return {}
        rows = self._rows("SELECT v.track_id, v.observation_id, v.kind, v.embedding, o.face_visible FROM vectors v "
                          f"JOIN observations o ON o.id = v.observation_id WHERE v.track_id {IN_IDS} ORDER BY v.id",
                          [int(i) for i in track_ids])
        parts: dict[int, dict[str, list[tuple[int, bool, np.ndarray]]]] = {}
        for track_id, obs_id, kind, emb, face in rows:
            parts.setdefault(int(track_id), {}).setdefault(kind, []).append((int(obs_id), bool(face), np.frombuffer(emb, "<f4")))
        return {tr: TrackVectors({VectorKind(k): (np.array([o for o, _, _ in v], np.int64), np.array([f for _, f, _ in v], bool),
                                                   np.stack([x for _, _, x in v])) for k, v in kinds.items()})
                for tr, kinds in parts.items()}
