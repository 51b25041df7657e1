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

from headsearch.basics.errors import LibraryError, ModelMismatch, is_interruption
from headsearch.basics.files import write_bytes_atomic, write_json_atomic
from headsearch.store import migrations
from headsearch.store.vector_index import VectorIndex
from schemas import tables as t
from schemas.records import FileResult, MediaKind, ModelInfo, VectorKind

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
DATABASE = "library.duckdb"
THUMBNAILS = "thumbnails"
WRITER_LOCK = ".writer.lock"
PEOPLE_LOCK = ".people.lock"
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


@dataclass(frozen=True)
class FailedFile:
    """A file that could not be indexed, and which version of it failed."""

    path: str
    fingerprint: str
    size: int
    mtime: float
    error: str
    failed_at: float


@dataclass(frozen=True)
class Sighting:
    """Where and how a head was seen: the file, the box at that moment, the shot."""

    observation_id: int
    kind: MediaKind
    box: tuple[float, float, float, float]  # in the file's own pixels
    face_visible: bool
    shot_index: int
    shot_start: float
    shot_end: float
    frame_size: tuple[int, int]  # (width, height) the boxes were stored in
    source_size: tuple[int, int]  # the file's own (width, height)
    size: int  # the indexed version of the file
    mtime: float
    fingerprint: str


@dataclass(frozen=True)
class ListedFile:
    """An indexed file as `headsearch list` shows it."""

    path: str
    kind: str
    duration: float
    tracks: int
    size: int
    mtime: float
    fingerprint: str
    decoder: str
    indexed_at: float


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

    def sightings(self, observation_ids: list[int]) -> dict[int, Sighting]:
        """Details of sightings by observation id: the box (in the file's own pixels), face, shot, file version."""
        ids = [int(i) for i in observation_ids]
        if not ids:
            return {}
        o, v, sh, tr = t.observations, t.videos, t.shots, t.tracks
        rows = self._conn.execute(
            sa.select(o.c.id, o.c.x1, o.c.y1, o.c.x2, o.c.y2, o.c.face_visible, v.c.kind, v.c.width, v.c.height,
                      v.c.source_width, v.c.source_height, v.c.size, v.c.mtime, v.c.fingerprint,
                      sh.c.shot_index, sh.c.start_time, sh.c.end_time)
            .select_from(o.join(tr, tr.c.id == o.c.track_id).join(v, v.c.id == o.c.video_id).join(sh, sh.c.id == tr.c.shot_id))
            .where(o.c.id.in_(ids))).fetchall()
        out = {}
        for r in rows:
            frame = (int(r.width), int(r.height))
            source = (int(r.source_width or r.width), int(r.source_height or r.height))
            sx, sy = source[0] / max(frame[0], 1), source[1] / max(frame[1], 1)
            box = (r.x1 * sx, r.y1 * sy, r.x2 * sx, r.y2 * sy)
            out[int(r.id)] = Sighting(int(r.id), MediaKind(r.kind), box, bool(r.face_visible), int(r.shot_index), float(r.start_time),
                                      float(r.end_time), frame, source, int(r.size), float(r.mtime), r.fingerprint)
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
        self._index_generations: dict[VectorKind, int] = {}  # the generation each loaded index reflects (refresh_indexes)

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
        """Bring a library of an older format to this one (see `headsearch.store.migrations`)."""
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

    def discard_if_empty(self, remove_folder: bool) -> bool:
        """Delete this library when it holds no file: a run that created it and indexed nothing
        leaves nothing behind. `remove_folder` also removes the (then empty) folder itself."""
        with self.reader() as conn:
            if conn.execute(sa.select(sa.func.count()).select_from(t.videos)).scalar_one():
                return False
        self._indexes.clear()
        (self.root / MANIFEST).unlink(missing_ok=True)  # first: a folder without a manifest is no library
        for name in (DATABASE, f"{DATABASE}.wal", WRITER_LOCK, PEOPLE_LOCK):
            (self.root / name).unlink(missing_ok=True)
        for p in self.root.glob("vectors_*"):
            p.unlink(missing_ok=True)
        for sub in (THUMBNAILS, "pictures"):
            folder = self.root / sub
            if folder.is_dir():
                for p in folder.iterdir():
                    p.unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    folder.rmdir()
        if remove_folder:
            with contextlib.suppress(OSError):
                self.root.rmdir()
        return True

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
        except Exception as e:
            if is_interruption(e):  # Ctrl-C while DuckDB ran a query: rolled back, and an interruption
                raise KeyboardInterrupt from e
            raise
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

    @contextlib.contextmanager
    def browsing(self) -> Iterator[BrowseReader]:
        """Reads for pages that show the library (files, shots, tracks, sightings) on one short connection."""
        with self.reader() as conn:
            yield BrowseReader(conn)

    @contextlib.contextmanager
    def people_reading(self) -> Iterator[PeopleStore]:
        with self.reader() as conn:
            yield PeopleStore(conn)

    @contextlib.contextmanager
    def people_writing(self) -> Iterator[PeopleStore]:
        """One short transaction on the people tables. Allowed on a library opened read-only (a web
        page's "not this person"): it touches neither vectors nor the generation, and waits for an
        indexer only while that indexer commits. People writers take turns through their own lock."""
        path = self.root / PEOPLE_LOCK
        with open(path, "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                writable = Library(self.root, self.manifest, read_only=False)
                with writable._connection(begin=True) as conn:
                    yield PeopleStore(conn)
            except sa.exc.DBAPIError as e:
                reason = str(getattr(e, "orig", e)).splitlines()[0]
                raise LibraryError(f"{self.root}: could not save people ({reason})") from e
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def refresh_indexes(self) -> None:
        """Bring the loaded FAISS indexes up to date with commits made since they were loaded (by a
        running index, say); cheap when nothing changed."""
        if not self._indexes:
            return
        with self.reader() as conn:
            generation = self.generation(conn)
            for kind, index in self._indexes.items():
                if self._index_generations.get(kind) != generation:
                    self._sync_index(conn, index, kind)
                    self._index_generations[kind] = generation

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
        with self.transaction() as conn:
            next_ids = self._next_ids(conn)
            for result in results:
                old = conn.execute(sa.select(t.videos.c.id).where(t.videos.c.path == result.path)).scalar()
                if old is not None:
                    gone, thumbs = self._delete_file(conn, old)
                    for kind, vector_ids in gone.items():
                        removed.setdefault(kind, []).append(vector_ids)
                    old_thumbs.extend(thumbs)
                rows = _FileRows(result, next_ids)
                next_ids = rows.next_ids
                for track_id, jpeg in rows.thumbnails.items():
                    write_bytes_atomic(self.root / THUMBNAILS / f"{track_id}.jpg", jpeg, fsync=False)
                conn.execute(sa.delete(t.failed_files).where(t.failed_files.c.path == result.path))
                conn.execute(sa.insert(t.videos), [rows.video])
                _bulk_insert(conn, t.shots, rows.shots)
                _bulk_insert(conn, t.tracks, rows.tracks)
                _bulk_insert(conn, t.observations, rows.observations)
                _bulk_insert(conn, t.vectors, rows.vector_rows())
                added.append(rows.vectors)
                ids.append(rows.video["id"])
            self._save_next_ids(conn, next_ids)
        self._after_commit({k: np.concatenate(v) for k, v in removed.items()}, {}, old_thumbs)
        for vectors in added:
            self._after_commit({}, vectors, [])
        return ids

    # ----- failed files ----------------------------------------------------------------------
    def failed_files(self) -> dict[str, FailedFile]:
        """Files that failed to index, by path, with the version that failed."""
        with self.reader() as conn:
            rows = conn.execute(sa.select(t.failed_files)).fetchall()
        return {r.path: FailedFile(r.path, r.fingerprint, r.size, r.mtime, r.error, r.failed_at) for r in rows}

    def record_failure(self, path: str, size: int, mtime: float, fingerprint: str, error: str) -> None:
        """Remember that this version of a file failed (the next runs skip it until it changes)."""
        with self.transaction() as conn:
            conn.execute(sa.delete(t.failed_files).where(t.failed_files.c.path == path))
            conn.execute(sa.insert(t.failed_files).values(path=path, fingerprint=fingerprint, size=size, mtime=mtime,
                                                          error=error, failed_at=time.time()))

    def forget_failures(self, paths: list[str]) -> None:
        if not paths:
            return
        with self.transaction() as conn:
            conn.execute(sa.delete(t.failed_files).where(t.failed_files.c.path.in_(paths)))

    def listing(self) -> list[ListedFile]:
        """Every indexed file with its track count, by path."""
        v = t.videos
        counts = sa.select(t.tracks.c.video_id, sa.func.count().label("n")).group_by(t.tracks.c.video_id).subquery()
        with self.reader() as conn:
            rows = conn.execute(sa.select(v.c.path, v.c.kind, v.c.duration, sa.func.coalesce(counts.c.n, 0).label("n"), v.c.size,
                                          v.c.mtime, v.c.fingerprint, v.c.decoder, v.c.indexed_at)
                                .select_from(v.outerjoin(counts, counts.c.video_id == v.c.id)).order_by(v.c.path)).fetchall()
        return [ListedFile(r.path, r.kind, float(r.duration), int(r.n), int(r.size), float(r.mtime), r.fingerprint, r.decoder,
                           float(r.indexed_at)) for r in rows]

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
            index = VectorIndex(self.model.dim_of(kind))
        with self.reader() as conn:
            generation = self.generation(conn)
            if saved_generation != generation:
                self._sync_index(conn, index, kind)
        self._index_generations[kind] = generation
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
        return removed + self._collect_orphan_pictures()

    def _collect_orphan_pictures(self) -> int:
        """Delete hit pictures (`pictures/<sighting id>.jpg`) of sightings that are gone."""
        folder = self.root / "pictures"
        if not folder.is_dir():
            return 0
        with self.reader() as conn:
            keep = {str(r[0]) for r in conn.execute(sa.select(t.observations.c.id))}
        removed = 0
        for p in folder.glob("*.jpg"):
            if p.stem not in keep:
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
                      "decoder": result.decoder, "indexed_at": time.time(),
                      "source_width": (result.source_size or (result.width, result.height))[0],
                      "source_height": (result.source_size or (result.width, result.height))[1]}
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


# ----- pages and people ---------------------------------------------------------------------
def _rows(result) -> list[dict]:
    return [dict(r._mapping) for r in result]


_TRACK_COLUMNS = (t.tracks.c.id, t.tracks.c.video_id, t.tracks.c.shot_id, t.tracks.c.start_time, t.tracks.c.end_time,
                  t.tracks.c.best_time, t.tracks.c.n_observations, t.tracks.c.face_visible_share, t.tracks.c.thumbnail,
                  t.videos.c.path.label("video"), t.videos.c.kind.label("video_kind"))


class BrowseReader(LibraryReader):
    """What pages show: files, their shots and tracks, a track's sightings, one sighting (rows as dicts)."""

    def videos(self) -> list[dict]:
        counts = (sa.select(t.tracks.c.video_id, sa.func.count().label("tracks")).group_by(t.tracks.c.video_id).subquery())
        rows = self._conn.execute(
            sa.select(t.videos.c.id, t.videos.c.path, t.videos.c.kind, t.videos.c.duration, t.videos.c.fps, t.videos.c.width,
                      t.videos.c.height, t.videos.c.decoder, t.videos.c.indexed_at,
                      sa.func.coalesce(counts.c.tracks, 0).label("tracks"))
            .select_from(t.videos.outerjoin(counts, counts.c.video_id == t.videos.c.id)).order_by(t.videos.c.path))
        return _rows(rows)

    def video(self, video_id: int) -> dict | None:
        row = self._conn.execute(sa.select(t.videos).where(t.videos.c.id == video_id)).first()
        return None if row is None else dict(row._mapping)

    def shots(self, video_id: int) -> list[dict]:
        return _rows(self._conn.execute(sa.select(t.shots).where(t.shots.c.video_id == video_id).order_by(t.shots.c.shot_index)))

    def tracks(self, video_id: int | None = None, track_ids: list[int] | None = None) -> list[dict]:
        q = sa.select(*_TRACK_COLUMNS).select_from(t.tracks.join(t.videos, t.videos.c.id == t.tracks.c.video_id))
        if video_id is not None:
            q = q.where(t.tracks.c.video_id == video_id)
        if track_ids is not None:
            q = q.where(t.tracks.c.id.in_([int(i) for i in track_ids]))
        return _rows(self._conn.execute(q.order_by(t.videos.c.path, t.tracks.c.start_time, t.tracks.c.id)))

    def track(self, track_id: int) -> dict | None:
        found = self.tracks(track_ids=[track_id])
        return found[0] if found else None

    def sightings(self, track_id: int) -> list[dict]:
        return _rows(self._conn.execute(sa.select(t.observations).where(t.observations.c.track_id == track_id)
                                        .order_by(t.observations.c.time)))

    def sighting(self, observation_id: int) -> dict | None:
        row = self._conn.execute(
            sa.select(t.observations, t.videos.c.path.label("video"), t.videos.c.kind.label("video_kind"))
            .select_from(t.observations.join(t.videos, t.videos.c.id == t.observations.c.video_id))
            .where(t.observations.c.id == observation_id)).first()
        return None if row is None else dict(row._mapping)

    def best_sighting(self, track_id: int) -> dict | None:
        """The sighting a track's thumbnail shows (at its best time)."""
        row = self._conn.execute(
            sa.select(t.observations).select_from(t.observations.join(t.tracks, t.tracks.c.id == t.observations.c.track_id))
            .where(t.observations.c.track_id == track_id)
            .order_by(sa.func.abs(t.observations.c.time - t.tracks.c.best_time), t.observations.c.id).limit(1)).first()
        return None if row is None else dict(row._mapping)

    def track_vectors(self, kind: VectorKind, track_ids: list[int] | None = None) -> dict[int, np.ndarray]:
        """Each track's vector of one kind: the renormalised mean of its sightings' vectors (for identity,
        of the sightings that showed a face, when any did)."""
        q = (sa.select(t.vectors.c.track_id, t.vectors.c.embedding, t.observations.c.face_visible)
             .select_from(t.vectors.join(t.observations, t.observations.c.id == t.vectors.c.observation_id))
             .where(t.vectors.c.kind == str(kind)))
        if track_ids is not None:
            q = q.where(t.vectors.c.track_id.in_([int(i) for i in track_ids]))
        groups: dict[int, tuple[list, list]] = {}
        for track_id, emb, face in self._conn.execute(q):
            faces, others = groups.setdefault(int(track_id), ([], []))
            (faces if face or kind != VectorKind.ID else others).append(np.frombuffer(emb, "<f4"))
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

    def sightings_near(self, video_path: str, time_s: float, tolerance: float) -> list[dict]:
        """Sightings in one file within `tolerance` seconds of a time (to find a track again after re-indexing)."""
        return _rows(self._conn.execute(
            sa.select(t.observations).select_from(t.observations.join(t.videos, t.videos.c.id == t.observations.c.video_id))
            .where(t.videos.c.path == video_path, sa.func.abs(t.observations.c.time - time_s) <= tolerance)))


class PeopleStore(BrowseReader):
    """The people tables on one connection (`headsearch.people.persons` decides what goes in them)."""

    def persons(self) -> list[dict]:
        return _rows(self._conn.execute(sa.select(t.people).order_by(t.people.c.id)))

    def memberships(self) -> dict[int, int]:
        return {int(a): int(b) for a, b in self._conn.execute(sa.select(t.person_tracks.c.track_id, t.person_tracks.c.person_id))}

    def membership_places(self, track_ids: list[int]) -> list[dict]:
        """Where these members were (file, time, head box), as stored with their membership."""
        if not track_ids:
            return []
        return _rows(self._conn.execute(sa.select(t.person_tracks).where(t.person_tracks.c.track_id.in_([int(i) for i in track_ids]))))

    def places(self, track_ids: list[int]) -> dict[int, dict]:
        """Each track's best sighting with its file: where it is, to find it again after re-indexing."""
        if not track_ids:
            return {}
        best = (sa.select(t.observations.c.track_id, t.observations.c.time, t.observations.c.x1, t.observations.c.y1,
                          t.observations.c.x2, t.observations.c.y2, t.videos.c.path.label("video_path"),
                          sa.func.row_number().over(partition_by=t.observations.c.track_id,
                                                    order_by=(sa.func.abs(t.observations.c.time - t.tracks.c.best_time),
                                                              t.observations.c.id)).label("rank"))
                .select_from(t.observations.join(t.tracks, t.tracks.c.id == t.observations.c.track_id)
                             .join(t.videos, t.videos.c.id == t.observations.c.video_id))
                .where(t.observations.c.track_id.in_([int(i) for i in track_ids])).subquery())
        rows = self._conn.execute(sa.select(best).where(best.c.rank == 1))
        return {int(r.track_id): {k: v for k, v in r._mapping.items() if k not in ("rank", "track_id")} for r in rows}

    def feedback(self) -> list[dict]:
        return _rows(self._conn.execute(sa.select(t.person_feedback).order_by(t.person_feedback.c.id)))

    def track_ids(self) -> set[int]:
        return {int(r[0]) for r in self._conn.execute(sa.select(t.tracks.c.id))}

    def next_id(self, table_name: str) -> int:
        """The next free id of a people table; ids are never reused (verdicts and links name them)."""
        table = {"people": t.people, "person_feedback": t.person_feedback}[table_name]
        top = int(self._conn.execute(sa.select(sa.func.coalesce(sa.func.max(table.c.id), 0))).scalar_one()) + 1
        saved = self._conn.execute(sa.select(t.library_state.c.value).where(t.library_state.c.key == f"next_{table_name}")).scalar()
        return max(top, int(saved or 0))

    def _used_id(self, table_name: str, used: int) -> None:
        if used + 1 > self.next_id(table_name):
            Library._save_next_ids(self._conn, {table_name: used + 1})

    def add_person(self, row: dict) -> None:
        self._conn.execute(sa.insert(t.people).values(**row))
        self._used_id("people", int(row["id"]))

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
        _bulk_insert(self._conn, t.person_tracks, [{"track_id": int(k), "person_id": int(v), **places[int(k)]}
                                                   for k, v in assignments.items() if int(k) in places])

    def unassign(self, track_ids: list[int]) -> None:
        for start in range(0, len(track_ids), 10_000):
            chunk = [int(i) for i in track_ids[start : start + 10_000]]
            self._conn.execute(sa.delete(t.person_tracks).where(t.person_tracks.c.track_id.in_(chunk)))

    def add_feedback(self, row: dict) -> None:
        self._conn.execute(sa.insert(t.person_feedback).values(**row))
        self._used_id("person_feedback", int(row["id"]))

    def update_feedback(self, feedback_id: int, **values) -> None:
        self._conn.execute(sa.update(t.person_feedback).where(t.person_feedback.c.id == feedback_id).values(**values))

    def delete_feedback(self, feedback_ids: list[int]) -> None:
        if feedback_ids:
            self._conn.execute(sa.delete(t.person_feedback).where(t.person_feedback.c.id.in_([int(i) for i in feedback_ids])))
