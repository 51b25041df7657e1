"""A library folder: DuckDB metadata, FAISS vectors, thumbnails and a manifest naming the model.

The DuckDB file is the source of truth, vectors included. FAISS files are a saved cache that
records the library generation it reflects; on open, a stale cache is brought up to date from
the database (missing vectors added, orphans removed), so a run killed at any moment leaves a
library that opens and answers, and vector ids and metadata rows always commit together.
DuckDB lets one process write at a time: writers hold the file only while they commit.

This module is the only one that reads or writes the tables: analysed files come in as
`FileResult` records (`store`), queries read through `reading()`.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from headsearch import migrations
from headsearch.errors import LibraryError, ModelMismatch
from headsearch.files import write_bytes_atomic, write_json_atomic
from headsearch.vector_index import VectorIndex
from schemas import tables as t
from schemas.records import FileResult, MediaKind, ModelInfo, VectorKind

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
DATABASE = "library.duckdb"
THUMBNAILS = "thumbnails"
WRITER_LOCK = ".writer.lock"
ID_TABLES = (t.videos, t.shots, t.tracks, t.observations, t.vectors)  # tables whose ids are never reused


@dataclass(frozen=True)
class StoredFile:
    """What the library knows about an indexed file."""

    id: int
    path: str
    fingerprint: str
    size: int
    mtime: float


@dataclass(frozen=True)
class HitRow:
    """A track and one of its sightings, as a search hit shows them."""

    path: str
    start: float
    end: float
    time: float
    thumbnail: str  # path relative to the library folder


def _is_lock_error(e: Exception) -> bool:
    text = str(e).lower()
    return "lock" in text or "conflicting" in text or "different configuration" in text


class LibraryReader:
    """Reads of one connection: where vectors belong, hit details, stored vectors."""

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

    def hit(self, track_id: int, observation_id: int) -> HitRow:
        row = self._conn.execute(
            sa.select(t.tracks.c.start_time, t.tracks.c.end_time, t.tracks.c.thumbnail, t.videos.c.path, t.observations.c.time)
            .select_from(t.tracks.join(t.videos, t.videos.c.id == t.tracks.c.video_id)
                         .join(t.observations, t.observations.c.id == observation_id))
            .where(t.tracks.c.id == track_id)
        ).one()
        return HitRow(row.path, row.start_time, row.end_time, row.time, row.thumbnail)

    def vector(self, observation_id: int, kind: VectorKind) -> np.ndarray | None:
        """A sighting's stored vector of one kind (None when it has none)."""
        emb = self._conn.execute(sa.select(t.vectors.c.embedding)
                                 .where(t.vectors.c.observation_id == observation_id, t.vectors.c.kind == str(kind))).scalar()
        return None if emb is None else np.frombuffer(emb, "<f4")


def existing_model(root: Path) -> ModelInfo | None:
    """The model named by the manifest of the library at `root` (None when there is none or it is unreadable)."""
    try:
        return ModelInfo.from_dict(json.loads((Path(root) / MANIFEST).read_text())["model"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


class Library:
    """One library folder. Open with `Library.create(...)` for indexing or `Library.open(...)` to read."""

    def __init__(self, root: Path, manifest: dict, read_only: bool):
        self.root = root
        self.manifest = manifest
        self.read_only = read_only
        self._indexes: dict[VectorKind, VectorIndex] = {}

    # ----- opening -------------------------------------------------------------------------
    @classmethod
    def create(cls, root: Path, model: ModelInfo) -> Library:
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
        manifest = {"format": migrations.FORMAT_VERSION, "model": model.to_dict(), "created_at": time.time()}
        lib = cls(root, manifest, read_only=False)
        with lib.transaction() as conn:
            t.metadata.create_all(conn)
            conn.execute(sa.insert(t.library_state).values(key="generation", value="0"))
            migrations.set_database_format(conn, migrations.FORMAT_VERSION)
        write_json_atomic(manifest_path, manifest)  # last: a folder with a manifest is complete
        return lib

    @classmethod
    def open(cls, root: Path, read_only: bool = True) -> Library:
        """Open an existing library, upgrading it in place when an older release made it."""
        root = Path(root)
        manifest_path = root / MANIFEST
        if not manifest_path.is_file():
            raise LibraryError(f"{root}: no headsearch library here (run `headsearch index` first, or pass --library)")
        try:
            manifest = json.loads(manifest_path.read_text())
            version = int(manifest["format"])
            ModelInfo.from_dict(manifest["model"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise LibraryError(f"{manifest_path}: unreadable manifest ({e})") from e
        if version > migrations.FORMAT_VERSION:
            raise LibraryError(f"{root}: library format {version} was made by a newer headsearch; this version reads "
                               f"formats up to {migrations.FORMAT_VERSION} (upgrade headsearch to use it)")
        if not (root / DATABASE).is_file():
            raise LibraryError(f"{root}: library database {DATABASE} is missing")
        lib = cls(root, manifest, read_only)
        if version < migrations.FORMAT_VERSION:
            lib._upgrade(version)
        return lib

    def _upgrade(self, version: int) -> None:
        """Bring a library of an older format to this one (see `headsearch.migrations`)."""
        writable = Library(self.root, self.manifest, read_only=False)
        with writable.writer_lock(purpose="upgrade"):
            with writable.transaction() as conn:
                stored = migrations.database_format(conn)
                done = migrations.upgrade(conn, stored or version) if (stored or version) < migrations.FORMAT_VERSION else []
            self.manifest = {**self.manifest, "format": migrations.FORMAT_VERSION}
            write_json_atomic(self.root / MANIFEST, self.manifest)
        for line in done:
            log.info("%s: upgraded, %s", self.root, line)

    @property
    def model(self) -> ModelInfo:
        return ModelInfo.from_dict(self.manifest["model"])

    def check_model(self, model: ModelInfo) -> None:
        """Refuse to mix vectors of another model into this library."""
        mine = self.model
        if not mine.same_vectors_as(model):
            raise ModelMismatch(
                f"{self.root}: library vectors were made by {mine.label()}, not by {model.label()}; use --model "
                f"{mine.name} or a new --library (a model change means re-embedding every video)"
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
                    engine.dispose()
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
                    conn.execute(sa.text("UPDATE library_state SET value = CAST(CAST(value AS BIGINT) + 1 AS VARCHAR) "
                                         "WHERE key = 'generation'"))
        except sa.exc.DBAPIError as e:  # disk full, I/O error...: the transaction was rolled back
            reason = str(getattr(e, "orig", e)).splitlines()[0]
            raise LibraryError(f"{self.root}: could not commit ({reason}); the library keeps its last committed state") from e

    @contextlib.contextmanager
    def reader(self) -> Iterator[sa.Connection]:
        """A connection for reading (this module's own use)."""
        with self._connection(begin=False) as conn:
            yield conn

    @contextlib.contextmanager
    def reading(self) -> Iterator[LibraryReader]:
        """Reads on one connection, for a query's several look-ups."""
        with self.reader() as conn:
            yield LibraryReader(conn)

    @staticmethod
    def generation(conn: sa.Connection) -> int:
        return int(conn.execute(sa.select(t.library_state.c.value).where(t.library_state.c.key == "generation")).scalar_one())

    # ----- writers' lock -------------------------------------------------------------------
    @contextlib.contextmanager
    def writer_lock(self, purpose: str = "index") -> Iterator[None]:
        """Only one writing run (indexing, removing, upgrading) per library at a time."""
        path = self.root / WRITER_LOCK
        f = open(path, "a+")  # noqa: SIM115 - held open for the lock's lifetime
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            f.close()
            raise LibraryError(f"{self.root}: another headsearch run is indexing this library"
                               + ("" if purpose == "index" else f"; {purpose} it when that run is finished")) from e
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
            f.close()

    # ----- files ---------------------------------------------------------------------------
    def stored_files(self) -> dict[str, StoredFile]:
        """Indexed files by path."""
        with self.reader() as conn:
            rows = conn.execute(sa.select(t.videos.c.id, t.videos.c.path, t.videos.c.fingerprint, t.videos.c.size,
                                          t.videos.c.mtime)).fetchall()
        return {r.path: StoredFile(r.id, r.path, r.fingerprint, r.size, r.mtime) for r in rows}

    def _next_ids(self, conn: sa.Connection) -> dict[str, int]:
        """The next free id of every table. Ids are never reused, so a stale FAISS cache can
        always be told from the database by its set of ids."""
        result = {}
        for table in ID_TABLES:
            top = int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(table.c.id), 0))).scalar_one()) + 1
            saved = conn.execute(sa.select(t.library_state.c.value).where(t.library_state.c.key == f"next_{table.name}")).scalar()
            result[table.name] = max(top, int(saved or 0))
        return result

    @staticmethod
    def _save_next_ids(conn: sa.Connection, next_ids: dict[str, int]) -> None:
        for name, value in next_ids.items():
            key = f"next_{name}"
            conn.execute(sa.delete(t.library_state).where(t.library_state.c.key == key))
            conn.execute(sa.insert(t.library_state).values(key=key, value=str(value)))

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
        removed: dict[VectorKind, np.ndarray] = {}
        old_thumbs: list[str] = []
        with self.transaction() as conn:
            old = conn.execute(sa.select(t.videos.c.id).where(t.videos.c.path == result.path)).scalar()
            if old is not None:
                removed, old_thumbs = self._delete_file(conn, old)
            rows = _FileRows(result, self._next_ids(conn))
            self._save_next_ids(conn, rows.next_ids)
            for track_id, jpeg in rows.thumbnails.items():
                write_bytes_atomic(self.root / THUMBNAILS / f"{track_id}.jpg", jpeg, fsync=False)
            conn.execute(sa.insert(t.videos), [rows.video])
            _bulk_insert(conn, t.shots, rows.shots)
            _bulk_insert(conn, t.tracks, rows.tracks)
            _bulk_insert(conn, t.observations, rows.observations)
            _bulk_insert(conn, t.vectors, rows.vector_rows())
        self._after_commit(removed, rows.vectors, old_thumbs)
        return rows.video["id"]

    def remove(self, path: str) -> bool:
        """Delete a file's rows, vectors and thumbnails; False when it was not indexed."""
        with self.transaction() as conn:
            old = conn.execute(sa.select(t.videos.c.id).where(t.videos.c.path == path)).scalar()
            if old is None:
                return False
            removed, thumbs = self._delete_file(conn, old)
        self._after_commit(removed, {}, thumbs)
        return True

    def remove_paths(self, targets: list[Path]) -> tuple[list[str], list[Path]]:
        """Remove indexed files that are, or lie under, the targets (one writing run); returns the
        removed paths and the targets that matched nothing."""
        removed, unmatched = [], []
        with self.writer_lock(purpose="remove from"):
            self.load_indexes()
            stored = self.stored_files()
            for target in targets:
                matched = [s for s in stored if Path(s) == target or Path(s).is_relative_to(target)]
                if not matched:
                    unmatched.append(target)
                for s in matched:
                    if self.remove(s):
                        removed.append(s)
            self.save_indexes()
        return removed, unmatched

    def _after_commit(self, removed: dict[VectorKind, np.ndarray], added: dict[VectorKind, tuple[np.ndarray, np.ndarray]],
                      thumbnails: list[str]) -> None:
        for kind, ids in removed.items():
            if kind in self._indexes:
                self._indexes[kind].remove(ids)
        for kind, (ids, vecs) in added.items():
            if kind in self._indexes:
                self._indexes[kind].add(ids, vecs)
        for rel in thumbnails:
            with contextlib.suppress(OSError):
                (self.root / rel).unlink()

    # ----- vectors -------------------------------------------------------------------------
    def index_path(self, kind: VectorKind) -> Path:
        return self.root / f"vectors_{kind}.faiss"

    def load_indexes(self) -> None:
        """Load (and bring up to date) the FAISS index of every vector kind of the library's model,
        so that stores and removals keep them current."""
        for kind in self.model.kinds:
            self.vector_index(kind)

    def vector_index(self, kind: VectorKind = VectorKind.ID) -> VectorIndex:
        """The FAISS index of one vector kind, brought up to date with the database."""
        kind = VectorKind(kind)
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
            index = VectorIndex(self.model.dim)
        with self.reader() as conn:
            if saved_generation != self.generation(conn):
                self._sync_index(conn, index, kind)
        self._indexes[kind] = index
        return index

    def _sync_index(self, conn: sa.Connection, index: VectorIndex, kind: VectorKind) -> None:
        db_ids = np.array([r[0] for r in conn.execute(sa.select(t.vectors.c.id).where(t.vectors.c.kind == str(kind)))], dtype=np.int64)
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
            counts = {table.name: int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()) for table in ID_TABLES}
            duration = conn.execute(sa.select(sa.func.coalesce(sa.func.sum(t.videos.c.duration), 0.0))).scalar_one()
            images = conn.execute(sa.select(sa.func.count()).select_from(t.videos).where(t.videos.c.kind == MediaKind.IMAGE)).scalar_one()
            generation = self.generation(conn)
        size = sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file())
        return {"library": str(self.root), "model": self.model.to_dict(), **counts, "images": int(images),
                "video_seconds": float(duration), "generation": generation, "bytes": size}


class _FileRows:
    """One analysed file as table rows, numbered from the library's next free ids."""

    def __init__(self, result: FileResult, ids: dict[str, int]):
        video_id = ids["videos"]
        next_shot, next_track, next_obs, next_vec = ids["shots"], ids["tracks"], ids["observations"], ids["vectors"]
        shot_ids: dict[int, int] = {}
        self.shots: list[dict] = []
        for sh in result.shots:
            shot_ids[sh.index] = next_shot
            self.shots.append({"id": next_shot, "video_id": video_id, "shot_index": sh.index, "start_frame": sh.start_frame,
                               "end_frame": sh.end_frame, "start_time": sh.start_time, "end_time": sh.end_time})
            next_shot += 1
        self.tracks: list[dict] = []
        self.observations: list[dict] = []
        self.thumbnails: dict[int, bytes] = {}
        vec: dict[VectorKind, tuple[list, list, list, list]] = {}
        for tr in result.tracks:
            track_id = next_track
            next_track += 1
            self.thumbnails[track_id] = tr.thumbnail
            self.tracks.append({"id": track_id, "video_id": video_id, "shot_id": shot_ids.get(tr.shot_index, shot_ids[max(shot_ids)]),
                                "start_time": tr.start, "end_time": tr.end, "best_time": tr.observations[tr.best_index].time,
                                "n_observations": len(tr.observations), "face_visible_share": tr.face_visible_share,
                                "thumbnail": f"{THUMBNAILS}/{track_id}.jpg"})
            for o in tr.observations:
                self.observations.append({"id": next_obs, "track_id": track_id, "video_id": video_id, "frame_index": o.frame_index,
                                          "time": o.time, "x1": o.head.x1, "y1": o.head.y1, "x2": o.head.x2, "y2": o.head.y2,
                                          "face_visible": o.face_visible, "face_score": o.face.score if o.face else None})
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
        s = result.stamp
        self.video = {"id": video_id, "path": s.path, "kind": str(result.kind), "fingerprint": s.fingerprint, "size": s.size,
                      "mtime": s.mtime, "duration": result.duration, "fps": result.fps, "width": result.width,
                      "height": result.height, "frames_decoded": result.frames_decoded, "frames_sampled": result.frames_sampled,
                      "decoder": result.decoder, "indexed_at": time.time()}
        self.next_ids = {"videos": video_id + 1, "shots": next_shot, "tracks": next_track, "observations": next_obs, "vectors": next_vec}

    def vector_rows(self) -> list[dict]:
        rows = []
        for kind, (vec_ids, obs_ids, track_ids, vecs) in self._vec.items():
            for i in range(len(vec_ids)):
                rows.append({"id": int(vec_ids[i]), "kind": str(kind), "observation_id": int(obs_ids[i]), "track_id": int(track_ids[i]),
                             "video_id": self.video["id"], "embedding": np.asarray(vecs[i], dtype="<f4").tobytes()})
        return rows


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
