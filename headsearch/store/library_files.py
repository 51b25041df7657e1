"""The files a library holds: analysed files stored as their rows, vectors and thumbnails in one commit,
replacing an older version of their path, and removed; the files that failed, by version; and the
thumbnails and pictures a killed run left without rows."""
from __future__ import annotations

import contextlib
import time
from pathlib import Path

import numpy as np
import sqlalchemy as sa

from headsearch.basics.files import write_bytes_atomic
from headsearch.store.database import Database
from headsearch.store.layout import PICTURES, THUMBNAILS
from headsearch.store.readers import BrowseReader
from headsearch.store.rows import FailedFile, ListedFile, StoredFile
from headsearch.store.table_rows import FileRows, next_free_ids, save_next_ids
from headsearch.vectors.index_cache import IndexCache
from schemas import tables as t
from schemas.records import FileResult, VectorKind


class LibraryFiles:
    """The indexed and failed files of the library folder `root`, written through its database; each commit's
    vectors go into the loaded indexes (`vectors`) once it is done."""

    def __init__(self, root: Path, database: Database, vectors: IndexCache):
        self.root = root
        self._database = database
        self._vectors = vectors

    def stored_files(self) -> dict[str, StoredFile]:
        """Indexed files by path."""
        with self._database.reader() as conn:
            rows = conn.execute(sa.select(t.videos.c.id, t.videos.c.path, t.videos.c.fingerprint, t.videos.c.size,
                                          t.videos.c.mtime)).fetchall()
        return {r.path: StoredFile(r.id, r.path, r.fingerprint, r.size, r.mtime) for r in rows}

    def _delete_file(self, conn: sa.Connection, file_id: int) -> tuple[dict[VectorKind, np.ndarray], list[str]]:
        """Delete one file's rows; returns its vector ids by kind and its thumbnails, to drop after the commit."""
        removed: dict[VectorKind, list[int]] = {}
        for kind, i in conn.execute(sa.select(t.vectors.c.kind, t.vectors.c.id).where(t.vectors.c.video_id == file_id)):
            removed.setdefault(VectorKind(kind), []).append(int(i))
        thumbs = [r.thumbnail for r in conn.execute(sa.select(t.tracks.c.thumbnail).where(t.tracks.c.video_id == file_id))]
        for table in (t.vectors, t.observations, t.tracks, t.shots):
            conn.execute(sa.delete(table).where(table.c.video_id == file_id))
        conn.execute(sa.delete(t.videos).where(t.videos.c.id == file_id))
        return {k: np.array(v, np.int64) for k, v in removed.items()}, thumbs

    def store(self, result: FileResult) -> int:
        """Commit one analysed file's rows and vectors in one transaction, replacing an older version
        of the same path; returns its id. Thumbnails are written before the commit (an orphan
        thumbnail is harmless and cleaned up later)."""
        return self.store_many([result])[0]

    def store_many(self, results: list[FileResult]) -> list[int]:
        """Commit several analysed files in one transaction (all of them or none), each replacing an
        older version of its path; returns their ids. One commit per batch of small files (photos)
        instead of one per file: opening, committing and checkpointing the database is most of what
        storing a photo costs."""
        removed: dict[VectorKind, list[np.ndarray]] = {}
        old_thumbs: list[str] = []
        added: list[dict[VectorKind, tuple[np.ndarray, np.ndarray]]] = []
        ids = []
        with self._database.transaction() as conn:
            next_ids = next_free_ids(conn)
            for result in results:
                old = conn.execute(sa.select(t.videos.c.id).where(t.videos.c.path == result.path)).scalar()
                if old is not None:
                    gone, thumbs = self._delete_file(conn, old)
                    for kind, vector_ids in gone.items():
                        removed.setdefault(kind, []).append(vector_ids)
                    old_thumbs.extend(thumbs)
                rows = FileRows(result, next_ids)
                next_ids = rows.next_ids
                for track_id, jpeg in rows.thumbnails.items():
                    write_bytes_atomic(self.root / THUMBNAILS / f"{track_id}.jpg", jpeg, fsync=False)
                conn.execute(sa.delete(t.failed_files).where(t.failed_files.c.path == result.path))
                rows.insert(conn)
                added.append(rows.vectors)
                ids.append(rows.video.id)
            save_next_ids(conn, next_ids)
        self._after_commit({k: np.concatenate(v) for k, v in removed.items()}, {}, old_thumbs)
        for vectors in added:
            self._after_commit({}, vectors, [])
        return ids

    # ----- files that failed -----------------------------------------------------------------
    def failed_files(self) -> dict[str, FailedFile]:
        """Files that failed to index, by path, with the version that failed."""
        with self._database.reader() as conn:
            rows = conn.execute(sa.select(t.failed_files)).fetchall()
        return {r.path: FailedFile(r.path, r.fingerprint, r.size, r.mtime, r.error, r.failed_at) for r in rows}

    def record_failure(self, path: str, size: int, mtime: float, fingerprint: str, error: str) -> None:
        """Remember that this version of a file failed (the next runs skip it until it changes)."""
        with self._database.transaction() as conn:
            conn.execute(sa.delete(t.failed_files).where(t.failed_files.c.path == path))
            conn.execute(sa.insert(t.failed_files).values(path=path, fingerprint=fingerprint, size=size, mtime=mtime,
                                                          error=error, failed_at=time.time()))

    def forget_failures(self, paths: list[str]) -> None:
        if not paths:
            return
        with self._database.transaction() as conn:
            conn.execute(sa.delete(t.failed_files).where(t.failed_files.c.path.in_(paths)))

    def listing(self) -> list[ListedFile]:
        """Every indexed file with its track count, by path."""
        with self._database.reader() as conn:
            return BrowseReader(conn).videos()

    def remove(self, path: str) -> bool:
        """Delete a file's rows, vectors and thumbnails; False when it was not indexed."""
        with self._database.transaction() as conn:
            old = conn.execute(sa.select(t.videos.c.id).where(t.videos.c.path == path)).scalar()
            if old is None:
                return False
            removed, thumbs = self._delete_file(conn, old)
        self._after_commit(removed, {}, thumbs)
        return True

    def _after_commit(self, removed: dict[VectorKind, np.ndarray], added: dict[VectorKind, tuple[np.ndarray, np.ndarray]],
                      thumbnails: list[str]) -> None:
        self._vectors.apply(removed, added)
        for rel in thumbnails:
            with contextlib.suppress(OSError):
                (self.root / rel).unlink()

    def collect_orphan_thumbnails(self) -> int:
        """Delete thumbnails whose track is not in the database (left by a killed run)."""
        with self._database.reader() as conn:
            keep = {r.thumbnail for r in conn.execute(sa.select(t.tracks.c.thumbnail))}
        removed = 0
        for p in (self.root / THUMBNAILS).glob("*"):
            if f"{THUMBNAILS}/{p.name}" not in keep:
                with contextlib.suppress(OSError):
                    p.unlink()
                    removed += 1
        return removed + self._collect_orphan_pictures()

    def _collect_orphan_pictures(self) -> int:
        """Delete hit pictures (`pictures/<sighting id>.jpg`) of sightings that are gone."""
        folder = self.root / PICTURES
        if not folder.is_dir():
            return 0
        with self._database.reader() as conn:
            keep = {str(r[0]) for r in conn.execute(sa.select(t.observations.c.id))}
        removed = 0
        for p in folder.glob("*.jpg"):
            if p.stem not in keep:
                with contextlib.suppress(OSError):
                    p.unlink()
                    removed += 1
        return removed
