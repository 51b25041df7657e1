"""A library folder: DuckDB metadata, FAISS vectors, thumbnails and a manifest naming the model.

The DuckDB file is the source of truth, vectors included. FAISS files are a saved cache that
records the library generation it reflects (`headsearch.vectors.index_cache`), so a run killed at any
moment leaves a library that opens and answers, and vector ids and metadata rows always commit
together. DuckDB lets one process write at a time: writers hold the file only while they commit
(`headsearch.store.database`).

`headsearch.store` is the only package that reads or writes the tables: analysed files come in as
`FileResult` records (`Library.files`: `headsearch.store.library_files`, through `headsearch.store.table_rows`), reads go through
the readers of `headsearch.store.readers` and `headsearch.store.people_store`, and return the rows
of `headsearch.store.rows`.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import json
import logging
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from headsearch.basics.errors import LibraryError
from headsearch.basics.files import write_json_atomic
from headsearch.store.database import Database, error_line
from headsearch.store.layout import (
    DATABASE,
    FORGETTING,
    FORMAT_VERSION,
    MANIFEST,
    PEOPLE_LOCK,
    PICTURES,
    THUMBNAILS,
    UNFINISHED,
    WRITER_LOCK,
    check_model,
)
from headsearch.store.query_reader import LibraryReader
from headsearch.store.rows import ForgottenRow, LibraryStats
from headsearch.store.unfinished import clear_unfinished, mark_finished, mark_unfinished, refuse_foreign
from headsearch.store.vector_source import DatabaseVectors
from headsearch.vectors.index_cache import VECTOR_INDEX_GLOB, Index, IndexCache
from schemas.records import MediaKind, ModelInfo, VectorKind

# What writes, browses or reads the people tables goes through SQLAlchemy and is imported where it is used:
# a query opens a library and reads it without SQLAlchemy (`headsearch.store.query_reader`), most of a cold
# query's start-up otherwise.
if TYPE_CHECKING:
    import sqlalchemy as sa

    from headsearch.store.library_files import LibraryFiles
    from headsearch.store.people_store import PeopleStore
    from headsearch.store.readers import BrowseReader

log = logging.getLogger(__name__)
NOTICES = logging.getLogger("headsearch.notices")  # what a user is told whatever the verbosity (the CLI shows them)


@contextlib.contextmanager
def _writer_lock(root: Path, busy: str | None) -> Iterator[bool]:
    """The library's writer lock, held for the block. When another run holds it: LibraryError saying
    `busy`, or (`busy` None) a block that runs with False and without the lock."""
    f = open(root / WRITER_LOCK, "a+")  # noqa: SIM115 - held open for the lock's lifetime
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as e:
        f.close()
        if busy is None:
            yield False
            return
        raise LibraryError(f"{root}: {busy}") from e
    try:
        yield True
    finally:
        fcntl.flock(f, fcntl.LOCK_UN)
        f.close()


class Library:
    """One library folder. Open with `Library.create(...)` for indexing or `Library.open(...)` to read.

    It makes, opens, upgrades and discards the folder and names its model; it holds the folder's database
    (`database`: connections and transactions), its files (`files`: stored, replaced, removed, failed) and
    its vector indexes (`vector_index`: a cache of the database's vectors), and gives out readers."""

    def __init__(self, root: Path, manifest: dict, read_only: bool):
        self.root = root
        self.manifest = manifest
        self.read_only = read_only
        self.database = Database(root, read_only)
        self.made_folder = False  # whether `create` made the folder (a run that indexes nothing removes it again)
        self._index_cache = IndexCache(root, DatabaseVectors(self.database.plain), writable=not read_only)

    @functools.cached_property
    def files(self) -> LibraryFiles:
        """The library's files: stored, replaced, removed, failed (`headsearch.store.library_files`)."""
        from headsearch.store.library_files import LibraryFiles

        return LibraryFiles(self.root, self.database, self._index_cache)

    # ----- opening -------------------------------------------------------------------------
    @classmethod
    def create(cls, root: Path, model: ModelInfo) -> Library:
        """Open a library for writing, creating it for `model` if it does not exist.

        Creation is resumable: the `UNFINISHED` marker is written first and the manifest last, so a
        run killed meanwhile leaves a folder the next run recognises, clears and makes again
        (`headsearch.store.unfinished`); a folder holding files of the user's is refused."""
        root = Path(root)
        if (root / MANIFEST).exists():
            return cls._open_for(root, model)
        made_folder = not root.exists()
        refuse_foreign(root)  # before the lock file is written into someone's folder
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise LibraryError(f"{root}: cannot create library folder ({e.strerror})") from e
        with _writer_lock(root, "another headsearch run is creating this library"):
            if (root / MANIFEST).exists():  # made by another run meanwhile
                return cls._open_for(root, model)
            made_folder = clear_unfinished(root) or made_folder
            try:
                mark_unfinished(root, made_folder)
                (root / THUMBNAILS).mkdir(exist_ok=True)
            except OSError as e:
                raise LibraryError(f"{root}: cannot create library folder ({e.strerror})") from e
            manifest = {"format": FORMAT_VERSION, "model": model.to_dict(), "created_at": time.time()}
            lib = cls(root, manifest, read_only=False)
            lib._make_tables()
            write_json_atomic(root / MANIFEST, manifest)  # a folder with a manifest is complete
            mark_finished(root)
        lib.made_folder = made_folder
        return lib

    def _make_tables(self) -> None:
        """A new library's tables, its generation and its format, in one transaction."""
        import sqlalchemy as sa

        from headsearch.store import migrations
        from schemas import tables as t

        with self.transaction() as conn:
            t.metadata.create_all(conn)
            conn.execute(sa.insert(t.library_state).values(key="generation", value="0"))
            migrations.set_database_format(conn, FORMAT_VERSION)

    @classmethod
    def _open_for(cls, root: Path, model: ModelInfo) -> Library:
        lib = cls.open(root, read_only=False)
        lib.check_model(model)
        if (root / UNFINISHED).exists():  # a run killed after it wrote the manifest, before it removed the marker
            with _writer_lock(root, None) as held:
                if held and (root / MANIFEST).exists():
                    mark_finished(root)
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
        if version > FORMAT_VERSION:
            raise LibraryError(f"{root}: library format {version} was made by a newer headsearch; this version reads "
                               f"formats up to {FORMAT_VERSION} (upgrade headsearch to use it)")
        if not (root / DATABASE).is_file():
            raise LibraryError(f"{root}: library database {DATABASE} is missing")
        lib = cls(root, manifest, read_only)
        if version < FORMAT_VERSION:
            lib._upgrade(version)
        if (root / FORGETTING).exists():  # a run killed while it forgot a person: undone or finished now
            from headsearch.store.forgetting import finish_forgetting

            finish_forgetting(lib)
        return lib

    def _upgrade(self, version: int) -> None:
        """Bring a library of an older format to this one (see `headsearch.store.migrations`)."""
        from headsearch.store import migrations

        with self.writer_lock(purpose="upgrade"):
            with Database(self.root, read_only=False).transaction() as conn:
                stored = migrations.database_format(conn)
                done = migrations.upgrade(conn, stored or version) if (stored or version) < FORMAT_VERSION else []
            self.manifest = {**self.manifest, "format": FORMAT_VERSION}
            write_json_atomic(self.root / MANIFEST, self.manifest)
        for line in done:
            log.info("%s: upgraded, %s", self.root, line)
        if done:  # said whatever the command (a `list` too): the folder changed, and older releases cannot read it now
            NOTICES.info("%s: upgraded in place from library format %d to %d (once; older releases of headsearch cannot "
                         "read it any more)", self.root, stored or version, FORMAT_VERSION)

    @property
    def model(self) -> ModelInfo:
        return ModelInfo.from_dict(self.manifest["model"])

    def check_model(self, model: ModelInfo) -> None:
        """Refuse to mix vectors of another model into this library."""
        check_model(self.root, self.model, model)

    def discard_if_empty(self, remove_folder: bool) -> bool:
        """Delete this library when it holds no file: a run that created it and indexed nothing
        leaves nothing behind. `remove_folder` also removes the (then empty) folder itself. The
        `UNFINISHED` marker comes first: a run killed meanwhile leaves a folder the next one clears."""
        with _writer_lock(self.root, None) as held:
            if not held:
                return False  # another run is writing it: not ours to discard
            with self.database.plain() as conn:
                if conn.execute("SELECT count(*) FROM videos").fetchone()[0]:
                    return False
            self._index_cache.clear()
            mark_unfinished(self.root, remove_folder)
            (self.root / MANIFEST).unlink(missing_ok=True)  # first: a folder without a manifest is no library
            for name in (DATABASE, f"{DATABASE}.wal", PEOPLE_LOCK):
                (self.root / name).unlink(missing_ok=True)
            for p in self.root.glob(VECTOR_INDEX_GLOB):
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
            for sub in (THUMBNAILS, PICTURES):
                folder = self.root / sub
                if folder.is_dir():
                    for p in folder.iterdir():
                        p.unlink(missing_ok=True)
                    with contextlib.suppress(OSError):
                        folder.rmdir()
            mark_finished(self.root)
            (self.root / WRITER_LOCK).unlink(missing_ok=True)
        if remove_folder:
            with contextlib.suppress(OSError):
                self.root.rmdir()
        return True

    # ----- database access (`headsearch.store.database`) ---------------------------------
    def session(self) -> contextlib.AbstractContextManager[None]:
        """Every read of this thread inside the block goes through one connection (`Database.session`)."""
        return self.database.session()

    def transaction(self) -> contextlib.AbstractContextManager[sa.Connection]:
        """A write transaction that bumps the library generation on commit."""
        return self.database.transaction()

    def reader(self) -> contextlib.AbstractContextManager[sa.Connection]:
        """A connection for reading (for `headsearch.store`'s own use)."""
        return self.database.reader()

    @contextlib.contextmanager
    def reading(self) -> Iterator[LibraryReader]:
        """Reads on one connection, for a query's several look-ups."""
        with self.database.plain() as conn:
            yield LibraryReader(conn)

    @contextlib.contextmanager
    def browsing(self) -> Iterator[BrowseReader]:
        """Reads for pages that show the library (files, shots, tracks, sightings) on one short connection."""
        from headsearch.store.readers import BrowseReader

        with self.reader() as conn:
            yield BrowseReader(conn)

    @contextlib.contextmanager
    def people_reading(self) -> Iterator[PeopleStore]:
        from headsearch.store.people_store import PeopleStore

        with self.reader() as conn:
            yield PeopleStore(conn)

    @contextlib.contextmanager
    def people_writing(self) -> Iterator[PeopleStore]:
        """One short transaction on the people tables. Allowed on a library opened read-only (a web
        page's "not this person"): it touches neither vectors nor the generation, and waits for an
        indexer only while that indexer commits. People writers take turns through their own lock."""
        import sqlalchemy as sa

        from headsearch.store.people_store import PeopleStore

        path = self.root / PEOPLE_LOCK
        try:
            f = open(path, "a+")  # noqa: SIM115 - closed below, after the lock is let go
        except OSError as e:
            if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise LibraryError(f"{self.root}: the library is read-only here ({e.strerror}): corrections cannot be saved; "
                                   "open it where it can be written") from e
            raise
        with f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                with Database(self.root, read_only=False).connection(begin=True) as conn:
                    yield PeopleStore(conn)
            except sa.exc.DBAPIError as e:
                raise LibraryError(f"{self.root}: could not save people ({error_line(e)})") from e
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    # ----- writers' lock -------------------------------------------------------------------
    def writer_lock(self, purpose: str = "index") -> contextlib.AbstractContextManager[None]:
        """Only one writing run (indexing, removing, upgrading) per library at a time."""
        return _writer_lock(self.root, "another headsearch run is indexing this library"
                            + ("" if purpose == "index" else f"; {purpose} it when that run is finished"))

    # ----- files (`Library.files`: `headsearch.store.library_files`) ----------------------------
    def remove_paths(self, targets: list[Path]) -> tuple[list[str], list[Path]]:
        """Remove indexed files that are, or lie under, the targets (one writing run); returns the
        removed paths and the targets that matched nothing."""
        removed, unmatched = [], []
        with self.writer_lock(purpose="remove from"):
            self.load_indexes()
            stored = self.files.stored_files()
            for target in targets:
                matched = [s for s in stored if Path(s) == target or Path(s).is_relative_to(target)]
                if not matched:
                    unmatched.append(target)
                for s in matched:
                    if self.files.remove(s):
                        removed.append(s)
            self.save_indexes()
        return removed, unmatched

    # ----- people forgotten (`headsearch.store.forgetting`) -----------------------------------
    def forget_person(self, person_id: int) -> ForgottenRow:
        """Remove a person, their tracks, sightings, vectors, thumbnails, pictures, reference photos, verdicts and
        answers in one step a kill cannot leave half done, leaving no file of the library with their vectors; returns
        the record the library keeps of it (counts, no biometric data). Allowed on a library opened read-only (a web
        page's "forget"): it takes the writer lock itself."""
        from headsearch.store.forgetting import forget_person

        return forget_person(self, person_id)

    def forgotten(self) -> list[ForgottenRow]:
        """The record of persons forgotten, oldest first."""
        with self.people_reading() as store:
            return store.forgotten()

    # ----- vectors -------------------------------------------------------------------------
    def index_path(self, kind: VectorKind) -> Path:
        return self._index_cache.path(VectorKind(kind))

    def vector_index(self, kind: VectorKind = VectorKind.ID) -> Index:
        """The vector index of one kind (in memory, or in on-disk segments), brought up to date with the database."""
        kind = VectorKind(kind)
        return self._index_cache.load(kind, self.model.dim_of(kind))

    def load_indexes(self) -> None:
        """Load (and bring up to date) the FAISS index of every vector kind of the library's model,
        so that stores and removals keep them current."""
        for kind in self.model.kinds:
            self.vector_index(kind)

    def refresh_indexes(self) -> None:
        """Bring the loaded FAISS indexes up to date with commits made since they were loaded (by a
        running index, say); cheap when nothing changed."""
        self._index_cache.refresh()

    def save_indexes(self) -> None:
        """Save every loaded FAISS index with the current generation."""
        self._index_cache.save()

    def rewrite_vector_indexes(self) -> None:
        """Write the saved index of every vector kind of the library's model again from the database alone (the
        writer's, under the writer lock): nothing of a removed vector stays in their files (`IndexCache.rewrite`)."""
        for kind in self.model.kinds:
            self._index_cache.rewrite(kind, self.model.dim_of(kind))

    # ----- reading -------------------------------------------------------------------------
    def stats(self) -> LibraryStats:
        """Counts and totals of what the library holds."""
        import sqlalchemy as sa

        from headsearch.store.table_rows import ID_TABLES, generation
        from schemas import tables as t

        with self.reader() as conn:
            counts = {table.name: int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()) for table in ID_TABLES}
            duration = conn.execute(sa.select(sa.func.coalesce(sa.func.sum(t.videos.c.duration), 0.0))).scalar_one()
            images = conn.execute(sa.select(sa.func.count()).select_from(t.videos).where(t.videos.c.kind == MediaKind.IMAGE)).scalar_one()
            current = generation(conn)
        size = sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file())
        return LibraryStats(library=str(self.root), model=self.model.to_dict(), **counts, images=int(images),
                            video_seconds=float(duration), generation=current, bytes=size)

