"""A library folder: DuckDB metadata, FAISS vectors, thumbnails and a manifest naming the model.

The DuckDB file is the source of truth, vectors included. FAISS files are a saved cache that
records the library generation it reflects; on open, a stale cache is brought up to date from
the database (missing vectors added, orphans removed), so a run killed at any moment leaves a
library that opens and answers, and vector ids and metadata rows always commit together.
DuckDB lets one process write at a time: writers hold the file only while they commit.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from headsearch.errors import LibraryError, ModelMismatch
from headsearch.files import write_bytes_atomic, write_json_atomic
from headsearch.vector_index import VectorIndex
from schemas import tables as t

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
DATABASE = "library.duckdb"
THUMBNAILS = "thumbnails"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class StoredVideo:
    """What the library knows about an indexed file."""

    id: int
    path: str
    fingerprint: str
    size: int
    mtime: float


@dataclass
class VideoRows:
    """Everything one indexed file adds to the library, ready to commit in one transaction."""

    video: dict
    shots: list[dict]
    tracks: list[dict]
    observations: list[dict]
    vectors: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]  # kind -> (ids, obs_ids, track_ids, vecs)
    thumbnails: dict[int, bytes]  # track id -> JPEG thumbnail


def _is_lock_error(e: Exception) -> bool:
    text = str(e).lower()
    return "lock" in text or "conflicting" in text or "different configuration" in text


class Library:
    """One library folder. Open with `Library.create(...)` for indexing or `Library.open(...)` to read."""

    def __init__(self, root: Path, manifest: dict, read_only: bool):
        self.root = root
        self.manifest = manifest
        self.read_only = read_only
        self._indexes: dict[str, VectorIndex] = {}
        self._pending_thumbnail_deletes: list[str] = []

    # ----- opening -------------------------------------------------------------------------
    @classmethod
    def create(cls, root: Path, model: dict) -> "Library":
        """Open a library for writing, creating it for `model` if it does not exist."""
        root = Path(root)
        manifest_path = root / MANIFEST
        if manifest_path.exists():
            lib = cls.open(root, read_only=False)
            lib.check_model(model)
            return lib
        if root.exists() and any(p for p in root.iterdir() if not p.name.startswith(".")):
            raise LibraryError(f"{root}: folder exists, is not empty, and holds no headsearch library")
        try:
            (root / THUMBNAILS).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise LibraryError(f"{root}: cannot create library folder ({e.strerror})") from e
        manifest = {"format": FORMAT_VERSION, "model": model, "created_at": time.time()}
        lib = cls(root, manifest, read_only=False)
        with lib.transaction() as conn:
            t.metadata.create_all(conn)
            conn.execute(sa.insert(t.library_state).values(key="generation", value="0"))
        write_json_atomic(manifest_path, manifest)  # last: a folder with a manifest is complete
        return lib

    @classmethod
    def open(cls, root: Path, read_only: bool = True) -> "Library":
        """Open an existing library."""
        root = Path(root)
        manifest_path = root / MANIFEST
        if not manifest_path.is_file():
            raise LibraryError(f"{root}: no headsearch library here (run `headsearch index` first, or pass --library)")
        try:
            manifest = json.loads(manifest_path.read_text())
        except (OSError, ValueError) as e:
            raise LibraryError(f"{manifest_path}: unreadable manifest ({e})") from e
        if manifest.get("format") != FORMAT_VERSION:
            raise LibraryError(f"{root}: library format {manifest.get('format')} is not supported by this version")
        if not (root / DATABASE).is_file():
            raise LibraryError(f"{root}: library database {DATABASE} is missing")
        return cls(root, manifest, read_only)

    @property
    def model(self) -> dict:
        return self.manifest["model"]

    def check_model(self, model: dict) -> None:
        """Refuse to mix vectors of another model into this library."""
        mine = self.model
        if (mine["name"], mine["version"]) != (model["name"], model["version"]):
            raise ModelMismatch(
                f"{self.root}: library vectors were made by {mine['name']} ({mine['version']}), not by "
                f"{model['name']} ({model['version']}); use --model {mine['name']} or a new --library "
                f"(a model change means re-embedding every video)"
            )

    # ----- database access -----------------------------------------------------------------
    def _engine(self) -> sa.Engine:
        args = {"read_only": True} if self.read_only else {}
        return sa.create_engine(f"duckdb:///{self.root / DATABASE}", poolclass=NullPool, connect_args=args)

    @contextlib.contextmanager
    def _connection(self, begin: bool) -> Iterator[sa.Connection]:
        engine = self._engine()
        delay = 0.05
        for attempt in range(40):  # writers hold the file only while committing: wait a little
            try:
                conn = engine.connect()
                break
            except sa.exc.OperationalError as e:
                if not _is_lock_error(e) or attempt == 39:
                    raise LibraryError(
                        f"{self.root}: library database is busy (another headsearch process is writing it); try again"
                        if _is_lock_error(e) else f"{self.root}: cannot open library database ({e.orig})"
                    ) from e
                time.sleep(delay)
                delay = min(delay * 1.5, 1.0)
        try:
            if begin:
                with conn.begin():
                    yield conn
            else:
                yield conn
        finally:
            conn.close()
            engine.dispose()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sa.Connection]:
        """A write transaction that bumps the library generation on commit."""
        if self.read_only:
            raise LibraryError(f"{self.root}: opened read-only")
        try:
            with self._connection(begin=True) as conn:
                yield conn
                if sa.inspect(conn).has_table("library_state"):
                    conn.execute(sa.text("UPDATE library_state SET value = CAST(CAST(value AS BIGINT) + 1 AS VARCHAR) WHERE key = 'generation'"))
        except sa.exc.DBAPIError as e:  # disk full, I/O error...: the transaction was rolled back
            reason = str(getattr(e, "orig", e)).splitlines()[0]
            raise LibraryError(f"{self.root}: could not commit ({reason}); the library keeps its last committed state") from e

    @contextlib.contextmanager
    def reader(self) -> Iterator[sa.Connection]:
        """A connection for reading."""
        with self._connection(begin=False) as conn:
            yield conn

    @staticmethod
    def generation(conn: sa.Connection) -> int:
        return int(conn.execute(sa.select(t.library_state.c.value).where(t.library_state.c.key == "generation")).scalar_one())

    # ----- writers' lock -------------------------------------------------------------------
    @contextlib.contextmanager
    def writer_lock(self) -> Iterator[None]:
        """Only one indexing run per library at a time."""
        path = self.root / ".writer.lock"
        f = open(path, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            f.close()
            raise LibraryError(f"{self.root}: another headsearch run is indexing this library") from e
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
            f.close()

    # ----- videos --------------------------------------------------------------------------
    def stored_videos(self) -> dict[str, StoredVideo]:
        """Indexed files by path."""
        with self.reader() as conn:
            rows = conn.execute(sa.select(t.videos.c.id, t.videos.c.path, t.videos.c.fingerprint, t.videos.c.size, t.videos.c.mtime)).fetchall()
        return {r.path: StoredVideo(r.id, r.path, r.fingerprint, r.size, r.mtime) for r in rows}

    def next_ids(self, conn: sa.Connection) -> dict[str, int]:
        """The next free id of every table. Ids are never reused, so a stale FAISS cache can
        always be told from the database by its set of ids."""
        result = {}
        for table in (t.videos, t.shots, t.tracks, t.observations, t.vectors):
            top = int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(table.c.id), 0))).scalar_one()) + 1
            saved = conn.execute(sa.select(t.library_state.c.value).where(t.library_state.c.key == f"next_{table.name}")).scalar()
            result[table.name] = max(top, int(saved or 0))
        return result

    @staticmethod
    def _save_next_ids(conn: sa.Connection, used: dict[str, int]) -> None:
        for name, value in used.items():
            key = f"next_{name}"
            conn.execute(sa.delete(t.library_state).where(t.library_state.c.key == key))
            conn.execute(sa.insert(t.library_state).values(key=key, value=str(value)))

    def _delete_video(self, conn: sa.Connection, video_id: int) -> dict[str, np.ndarray]:
        removed: dict[str, np.ndarray] = {}
        for kind, ids in _group_ids(conn.execute(sa.select(t.vectors.c.kind, t.vectors.c.id).where(t.vectors.c.video_id == video_id)).fetchall()).items():
            removed[kind] = ids
        thumbs = [r.thumbnail for r in conn.execute(sa.select(t.tracks.c.thumbnail).where(t.tracks.c.video_id == video_id))]
        for table in (t.vectors, t.observations, t.tracks, t.shots):
            conn.execute(sa.delete(table).where(table.c.video_id == video_id))
        conn.execute(sa.delete(t.videos).where(t.videos.c.id == video_id))
        self._pending_thumbnail_deletes.extend(thumbs)
        return removed

    def store_video(self, rows_for: "callable[[dict[str, int]], VideoRows]", replace_path: str | None) -> VideoRows:
        """Commit one file's rows and vectors in one transaction (replacing an older version of it).

        `rows_for` receives the first free ids and returns the rows to insert; thumbnails are
        written before the commit (an orphan thumbnail is harmless and cleaned up later).
        """
        self._pending_thumbnail_deletes = []
        with self.transaction() as conn:
            removed: dict[str, np.ndarray] = {}
            if replace_path is not None:
                old = conn.execute(sa.select(t.videos.c.id).where(t.videos.c.path == replace_path)).scalar()
                if old is not None:
                    removed = self._delete_video(conn, old)
            ids = self.next_ids(conn)
            rows = rows_for(ids)
            self._save_next_ids(conn, {
                "videos": rows.video["id"] + 1,
                "shots": max([r["id"] for r in rows.shots], default=ids["shots"] - 1) + 1,
                "tracks": max([r["id"] for r in rows.tracks], default=ids["tracks"] - 1) + 1,
                "observations": max([r["id"] for r in rows.observations], default=ids["observations"] - 1) + 1,
                "vectors": max([int(v[0].max()) for v in rows.vectors.values() if len(v[0])], default=ids["vectors"] - 1) + 1,
            })
            for track_id, jpeg in rows.thumbnails.items():
                write_bytes_atomic(self.root / THUMBNAILS / f"{track_id}.jpg", jpeg, fsync=False)
            conn.execute(sa.insert(t.videos), [rows.video])
            _bulk_insert(conn, t.shots, rows.shots)
            _bulk_insert(conn, t.tracks, rows.tracks)
            _bulk_insert(conn, t.observations, rows.observations)
            vector_rows = []
            for kind, (vec_ids, obs_ids, track_ids, vecs) in rows.vectors.items():
                for i in range(len(vec_ids)):
                    vector_rows.append({"id": int(vec_ids[i]), "kind": kind, "observation_id": int(obs_ids[i]), "track_id": int(track_ids[i]),
                                        "video_id": rows.video["id"], "embedding": np.asarray(vecs[i], dtype="<f4").tobytes()})
            _bulk_insert(conn, t.vectors, vector_rows)
        self._after_commit(removed, {k: (v[0], v[3]) for k, v in rows.vectors.items()})
        return rows

    def remove_video(self, path: str) -> bool:
        """Delete a file's rows, vectors and thumbnails; False when it was not indexed."""
        self._pending_thumbnail_deletes = []
        with self.transaction() as conn:
            old = conn.execute(sa.select(t.videos.c.id).where(t.videos.c.path == path)).scalar()
            if old is None:
                return False
            removed = self._delete_video(conn, old)
        self._after_commit(removed, {})
        return True

    def _after_commit(self, removed: dict[str, np.ndarray], added: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        for kind, ids in removed.items():
            if kind in self._indexes:
                self._indexes[kind].remove(ids)
        for kind, (ids, vecs) in added.items():
            if kind in self._indexes:
                self._indexes[kind].add(ids, vecs)
        for rel in self._pending_thumbnail_deletes:
            with contextlib.suppress(OSError):
                (self.root / rel).unlink()
        self._pending_thumbnail_deletes = []

    # ----- vectors -------------------------------------------------------------------------
    def index_path(self, kind: str) -> Path:
        return self.root / f"vectors_{kind}.faiss"

    def vector_index(self, kind: str = "id") -> VectorIndex:
        """The FAISS index of one vector kind, brought up to date with the database."""
        if kind in self._indexes:
            return self._indexes[kind]
        path = self.index_path(kind)
        index, saved_generation = None, -1
        if path.is_file():
            try:
                index, saved_generation = VectorIndex.load(path)
            except Exception as e:  # a damaged cache is rebuilt from the database
                log.warning("%s: unreadable vector index, rebuilding it (%s)", path, e)
        if index is None:
            index = VectorIndex(int(self.model["dim"]))
        with self.reader() as conn:
            if saved_generation != self.generation(conn):
                self._sync_index(conn, index, kind)
        self._indexes[kind] = index
        return index

    def _sync_index(self, conn: sa.Connection, index: VectorIndex, kind: str) -> None:
        db_ids = np.array([r[0] for r in conn.execute(sa.select(t.vectors.c.id).where(t.vectors.c.kind == kind))], dtype=np.int64)
        have = index.ids()
        extra = np.setdiff1d(have, db_ids)
        missing = np.setdiff1d(db_ids, have)
        if len(extra):
            index.remove(extra)
        for start in range(0, len(missing), 50_000):
            chunk = missing[start : start + 50_000]
            rows = conn.execute(sa.select(t.vectors.c.id, t.vectors.c.embedding).where(t.vectors.c.id.in_([int(i) for i in chunk]))).fetchall()
            index.add(np.array([r.id for r in rows], np.int64), np.stack([np.frombuffer(r.embedding, dtype="<f4") for r in rows]))
        if len(extra) or len(missing):
            log.info("vector index %s brought up to date: %d added, %d removed", kind, len(missing), len(extra))

    def save_indexes(self) -> None:
        """Save every loaded FAISS index with the current generation."""
        if not self._indexes:
            return
        with self.reader() as conn:
            generation = self.generation(conn)
        for kind, index in self._indexes.items():
            index.make_approximate_if_large()
            index.save(self.index_path(kind), generation)

    def collect_orphan_thumbnails(self) -> int:
        """Delete thumbnails whose track is not in the database (left by a killed run)."""
        with self.reader() as conn:
            keep = {r.thumbnail for r in conn.execute(sa.select(t.tracks.c.thumbnail))}
        removed = 0
        for p in (self.root / THUMBNAILS).glob("*"):
            if f"{THUMBNAILS}/{p.name}" not in keep:
                with contextlib.suppress(OSError):
                    p.unlink()
                    removed += 1
        return removed

    # ----- reading -------------------------------------------------------------------------
    def stats(self) -> dict:
        """Counts and totals of what the library holds."""
        with self.reader() as conn:
            counts = {table.name: int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())
                      for table in (t.videos, t.shots, t.tracks, t.observations, t.vectors)}
            duration = conn.execute(sa.select(sa.func.coalesce(sa.func.sum(t.videos.c.duration), 0.0))).scalar_one()
            images = conn.execute(sa.select(sa.func.count()).select_from(t.videos).where(t.videos.c.kind == "image")).scalar_one()
            generation = self.generation(conn)
        size = sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file())
        return {"library": str(self.root), "model": self.model, **counts, "images": int(images),
                "video_seconds": float(duration), "generation": generation, "bytes": size}


def _group_ids(rows) -> dict[str, np.ndarray]:
    groups: dict[str, list[int]] = {}
    for kind, i in rows:
        groups.setdefault(kind, []).append(int(i))
    return {k: np.array(v, dtype=np.int64) for k, v in groups.items()}


def _bulk_insert(conn: sa.Connection, table: sa.Table, rows: list[dict]) -> None:
    """Insert many rows through DuckDB's Arrow path (SQLAlchemy executemany is ~5,000 rows/s)."""
    if not rows:
        return
    import pyarrow as pa

    columns = [c.name for c in table.columns]
    arrow = pa.table({c: [r[c] for r in rows] for c in columns})
    raw = conn.connection.dbapi_connection
    name = f"_incoming_{table.name}"
    raw.register(name, arrow)
    try:
        raw.execute(f"INSERT INTO {table.name} ({', '.join(columns)}) SELECT {', '.join(columns)} FROM {name}")
    finally:
        raw.unregister(name)

