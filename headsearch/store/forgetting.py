"""Forgetting a person (`headsearch people forget`): their tracks, sightings, vectors, verdicts, answers about pairs,
reference photos and row leave the library in one step that a kill cannot leave half done, and afterwards no file
of the library holds their vectors; a row of `forgotten_people` says what was removed, how many and when (never a
vector, a picture or where they were seen).

DuckDB leaves a deleted row's bytes in its file until the block is used again (a CHECKPOINT or VACUUM does not clear
them: measured with duckdb 2.0.1), so the database is not changed in place: a new file is written beside it holding
every table's rows but the person's, the record and the next generation (`Database.write_copy`), and renamed over
`library.duckdb`. That rename is the one step: before it the library is as it was, after it the person is gone.
Then their thumbnails, photo crops and the cached pictures of the frames they were in are deleted, and every vector
kind's saved index is written again from the new database (`IndexCache.rewrite`: segments keep a removed vector's
raw bytes and codes until they are compacted, and lists and codebooks were trained on it).

The marker `FORGETTING` (the generation before, the files to delete) is written before the new file and removed
last. A run killed meanwhile is finished by the next open of the library (`finish_forgetting`): an unfinished new
file is deleted, and when the rename was done (the generation moved on) the files are deleted and the indexes
written again. Every other writer waits meanwhile: an index run holds the writer lock (and forgetting is refused
while it runs), people's corrections take the people lock.

Forgetting rewrites the whole database file: it takes about as long as copying it, and as much free space.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from headsearch.basics.errors import HeadsearchError, LibraryError
from headsearch.basics.files import fsync_folder, write_json_atomic
from headsearch.store.database import GENERATION_SQL, IN_IDS
from headsearch.store.layout import DATABASE, FORGETTING, FORGOTTEN_DATABASE, PEOPLE_LOCK, PERSON_PHOTOS, PICTURES
from headsearch.store.leftovers import Check, Needles, search
from headsearch.store.rows import ForgottenRow
from schemas.tables import metadata as schema

if TYPE_CHECKING:
    import duckdb

    from headsearch.store.database import Database
    from headsearch.store.library_files import LibraryFiles


class Library(Protocol):
    """What forgetting needs of `headsearch.store.library.Library` (which calls it: no import back, no circle)."""

    root: Path
    database: Database
    files: LibraryFiles

    def writer_lock(self, purpose: str = ...) -> contextlib.AbstractContextManager: ...

    def rewrite_vector_indexes(self) -> None: ...

log = logging.getLogger(__name__)

# Tables whose ids are never reused (a stale vector index is told from the database by its ids; verdicts name
# persons): their next free ids are kept in `library_state`, so that the person's ids, top ones included, stay taken.
_NUMBERED = ("videos", "shots", "tracks", "observations", "vectors", "people", "person_feedback", "person_pairs", "person_photos")
# What the copy of the database leaves out is read from the schema (`schemas.tables`): every row whose person column
# (`person_id`, `person_a`, `person_b`, the id of `people`) names the person, or whose track column (`track_id`, the id of
# `tracks`) one of their tracks. A table added later is filtered by the same columns; a table the schema does not declare
# is refused. The record of forgettings names forgotten persons by id on purpose, and is kept whole.
_PERSON_COLUMN_NAMES = ("person_id", "person_a", "person_b")
_TRACK_COLUMN_NAMES = ("track_id",)
_PERSON_COLUMNS = {"people": ("id",)}
_TRACK_COLUMNS = {"tracks": ("id",)}
_RECORD_TABLES = ("forgotten_people", "forgotten_videos", "forget_checks", "library_state")
_SCHEMA_TABLES = frozenset(schema.tables)


def _filters(table: str) -> list[str]:
    """The columns of a schema table that name a person or a track."""
    names = [c.name for c in schema.tables[table].columns]
    wanted = (*_PERSON_COLUMN_NAMES, *_TRACK_COLUMN_NAMES, *_PERSON_COLUMNS.get(table, ()), *_TRACK_COLUMNS.get(table, ()))
    return [n for n in names if n in wanted]


@contextlib.contextmanager
def _writers_held_off(library: Library) -> Iterator[None]:
    """The library's writer lock (LibraryError when an index run holds it) and its people lock (corrections wait)."""
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(library.writer_lock(purpose="forget a person in"))
            people = held.enter_context(open(library.root / PEOPLE_LOCK, "a+"))
        except OSError as e:
            if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise LibraryError(f"{library.root}: the library is read-only here ({e.strerror}): nobody can be forgotten; "
                                        "open it where it can be written") from e
            raise
        fcntl.flock(people, fcntl.LOCK_EX)
        held.callback(fcntl.flock, people, fcntl.LOCK_UN)
        yield


def _next_ids(conn: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """The next free id of each numbered table: past its highest id and past the one saved before."""
    saved = {key: int(value) for key, value in conn.execute("SELECT key, value FROM library_state WHERE key LIKE 'next_%'").fetchall()}
    return {name: max(int(conn.execute(f"SELECT coalesce(max(id), 0) + 1 FROM {name}").fetchone()[0]), saved.get(f"next_{name}", 0))
            for name in _NUMBERED}


class _Plan:
    """What forgetting one person removes, read on one connection while every writer is held off."""

    def __init__(self, conn: duckdb.DuckDBPyConnection, root: Path, person_id: int, keep_name: bool = False):
        self.root = root
        found = conn.execute("SELECT id, name FROM people WHERE id = ?", [person_id]).fetchone()
        if found is None:
            raise HeadsearchError(f"no person with id {person_id} in {root} (`headsearch people` lists them)")
        self.person_id, self.name = int(found[0]), found[1]
        # Their tracks, and the pieces joined within a shot to one of them (`indexer.rejoin`: the same person turned away
        # or hidden a moment) that no other person holds: a joined piece shows them as much as the track it was joined to.
        self.tracks = [int(r[0]) for r in conn.execute(
            "SELECT t.id FROM tracks t WHERE coalesce(t.joined_to, t.id) IN (SELECT coalesce(m.joined_to, m.id) FROM tracks m "
            "JOIN person_tracks p ON p.track_id = m.id WHERE p.person_id = ?) "
            "AND t.id NOT IN (SELECT track_id FROM person_tracks WHERE person_id <> ?) ORDER BY t.id", [person_id, person_id]).fetchall()]
        t = [self.tracks]
        thumbnails = [r[0] for r in conn.execute(f"SELECT thumbnail FROM tracks WHERE id {IN_IDS}", t).fetchall()]
        present = len(thumbnails)
        sightings = int(conn.execute(f"SELECT count(*) FROM observations WHERE track_id {IN_IDS}", t).fetchone()[0])
        vectors = int(conn.execute(f"SELECT count(*) FROM vectors WHERE track_id {IN_IDS}", t).fetchone()[0])
        # the cached pictures of every frame they were in (a picture is the whole frame, the sighting's head boxed)
        framed = [r[0] for r in conn.execute(
            "SELECT DISTINCT o.id FROM observations o JOIN observations p ON o.video_id = p.video_id AND o.frame_index = p.frame_index "
            f"WHERE p.track_id {IN_IDS}", t).fetchall()]
        # the files their tracks were in: a redaction of every head analyses them again, a copy indexed again is told
        self.videos = [(int(r[0]), r[1]) for r in conn.execute(
            f"SELECT DISTINCT v.id, v.fingerprint FROM videos v JOIN tracks t ON t.video_id = v.id WHERE t.id {IN_IDS} ORDER BY v.id",
            t).fetchall()]
        crops = [r[0] for r in conn.execute("SELECT crop FROM person_photos WHERE person_id = ?", [person_id]).fetchall()]
        corrections = int(conn.execute(f"SELECT count(*) FROM person_feedback WHERE person_id = ? OR track_id {IN_IDS}",
                                       [person_id, self.tracks]).fetchone()[0])
        corrections += int(conn.execute("SELECT count(*) FROM person_pairs WHERE person_a = ? OR person_b = ?",
                                        [person_id, person_id]).fetchone()[0])
        self.generation = int(conn.execute(GENERATION_SQL).fetchone()[0])
        self.next_ids = _next_ids(conn)
        audit_id = int(conn.execute("SELECT coalesce(max(id), 0) + 1 FROM forgotten_people").fetchone()[0])
        thumbs = [rel for rel in thumbnails if (root / rel).is_file()]
        pictures = [f"{PICTURES}/{i}.jpg" for i in framed if (root / PICTURES / f"{i}.jpg").is_file()]
        self.files = thumbs + pictures + crops  # relative to the library folder
        # what the search after the rewrite looks for (`headsearch.store.leftovers`): read now, while it is there
        self.needles = Needles()
        for (raw,) in conn.execute(f"SELECT embedding FROM vectors WHERE track_id {IN_IDS}", t).fetchall():
            self.needles.add_vector(raw)
        for row in conn.execute("SELECT id_vector, head_vector FROM person_photos WHERE person_id = ?", [person_id]).fetchall():
            for raw in row:
                if raw is not None:
                    self.needles.add_vector(raw)
        for (raw,) in conn.execute("SELECT centroid FROM people WHERE id = ?", [person_id]).fetchall():
            self.needles.add_vector(raw)
        for rel in self.files:
            self.needles.add_picture(root / rel, "a picture of theirs")
        if keep_name:
            self.needles.skipped.append("their name (kept in the record: --keep-name)")
        else:
            self.needles.add_name(self.name)
        self.row = ForgottenRow(id=audit_id, person_id=self.person_id, name=self.name if keep_name else None, forgotten_at=time.time(), tracks=present,
                                sightings=sightings, vectors=vectors, thumbnails=len(thumbs), pictures=len(pictures),
                                reference_photos=len(crops), corrections=corrections)

    def keep(self, conn: duckdb.DuckDBPyConnection) -> dict[str, tuple[str, list]]:
        """The rows each table of the database keeps (`Database.write_copy`): all but the person's, told by the schema's
        person and track columns (`_filters`); a table the schema does not declare is refused (it may hold them)."""
        p = self.person_id
        tables = [r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()").fetchall()]
        unknown = sorted(name for name in tables if name not in _SCHEMA_TABLES)
        if unknown:
            raise LibraryError(f"{self.root}: the database has {'a table' if len(unknown) == 1 else 'tables'} this release does not know "
                               f"({', '.join(unknown)}): it may hold the person, so nobody is forgotten; the library is as it was")
        kept = {}
        for name in tables:
            where, params = ["TRUE"], []
            if name not in _RECORD_TABLES:
                for column in _filters(name):
                    if column in _PERSON_COLUMNS.get(name, ()) or column in _PERSON_COLUMN_NAMES:
                        where.append(f"{column} IS DISTINCT FROM ?")
                        params.append(p)
                    else:
                        where.append(f"({column} IS NULL OR NOT ({column} {IN_IDS}))")
                        params.append(self.tracks)
            kept[name] = (" AND ".join(where), params)
        return kept

    def record(self, conn: duckdb.DuckDBPyConnection, catalog: str) -> None:
        """On the new file: the record of this forgetting, the next free ids, the next generation."""
        state = f"{catalog}.main.library_state"
        keys = [f"next_{name}" for name in self.next_ids]
        conn.execute(f"DELETE FROM {state} WHERE key IN (SELECT unnest(?::VARCHAR[]))", [keys])
        conn.executemany(f"INSERT INTO {state} (key, value) VALUES (?, ?)", [[k, str(v)] for k, v in zip(keys, self.next_ids.values(), strict=True)])
        conn.execute(f"UPDATE {state} SET value = ? WHERE key = 'generation'", [str(self.generation + 1)])
        values = asdict(self.row)
        conn.execute(f"INSERT INTO {catalog}.main.forgotten_people ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                     list(values.values()))
        conn.executemany(f"INSERT INTO {catalog}.main.forgotten_videos (forgotten_id, video_id, fingerprint) VALUES (?, ?, ?)",
                         [[self.row.id, video_id, fingerprint] for video_id, fingerprint in self.videos])


def forget_person(library: Library, person_id: int, keep_name: bool = False) -> ForgottenRow:
    """Forget one person of the library (see the module's docstring); returns the record kept of it (their name in it
    only with `keep_name`)."""
    return forget_and_search(library, person_id, keep_name)[0]


def forget_and_search(library: Library, person_id: int, keep_name: bool = False, also: tuple[Path, ...] = ()) -> tuple[ForgottenRow, Check]:
    """`forget_person`, then every file under the library folder and the folders `also` searched for what is left of
    them (`headsearch.store.leftovers`), the search kept in the record (`forget_checks`)."""
    root = library.root
    with _writers_held_off(library):
        finish_forgetting(library, held=True)  # one left by a killed run, first
        with library.database.plain() as conn:
            plan = _Plan(conn, root, person_id, keep_name)
            keep = plan.keep(conn)
        write_json_atomic(root / FORGETTING, {"person_id": plan.person_id, "generation": plan.generation, "files": plan.files,
                                              "pid": os.getpid(), "started_at": time.time()})
        target = root / FORGOTTEN_DATABASE
        try:
            library.database.write_copy(target, keep, plan.record)
            shutil.copymode(root / DATABASE, target)  # the file as it was shared (a group's library stays the group's)
            with open(target, "rb+") as f:
                os.fsync(f.fileno())
            for wal in (target.with_name(target.name + ".wal"), root / f"{DATABASE}.wal"):
                if wal.exists():  # a log beside the file would be replayed into the new one
                    raise LibraryError(f"{root}: {wal.name} is left after the database was written again; the library is as it was")
            os.replace(target, root / DATABASE)  # the one step: the person is gone
        except BaseException:
            for leftover in (target, target.with_name(target.name + ".wal"), root / FORGETTING):
                with contextlib.suppress(OSError):
                    leftover.unlink(missing_ok=True)
            raise
        fsync_folder(root)
        _read_anew(library, plan.generation + 1)
        _clean_up(library, plan.files)
        check = search([root, *also], plan.needles)
        _keep_check(library, plan.row.id, check)
    log.info("%s: person %d forgotten: %s; %s", root, plan.person_id, plan.row, check.line())
    return plan.row, check


def _keep_check(library: Library, forgotten_id: int, check: Check) -> None:
    """The search's outcome in the record (a plain write: it changes nothing a search or a page reads). The person is
    gone whatever happens here: a library that cannot take the row (busy, disk full) keeps the forgetting without it,
    and the summary still says what the search found."""
    from headsearch.store.database import Database

    try:
        with Database(library.root, read_only=False).plain() as conn:
            conn.execute("INSERT INTO forget_checks (forgotten_id, checked_at, files, bytes, needles, found) VALUES (?, ?, ?, ?, ?, ?)",
                         [forgotten_id, check.checked_at, check.files, check.bytes, check.needles, "\n".join(check.found)])
    except Exception as e:  # noqa: BLE001 - DuckDB's errors (a busy file, a full disk) as much as ours: the forgetting stands
        log.warning("%s: the search after forgetting is not kept in the record (%s)", library.root, e)


def _read_anew(library: Library, generation: int, wait: float = 30.0) -> None:
    """Wait until this process reads the new database file: DuckDB keeps one instance of a file per process while any
    connection to it is open, so a connection another thread opened before the rename (a web request) keeps the old
    file in sight for the connections opened after it, until it closes; what is cleaned up must be read from the new."""
    deadline = time.monotonic() + wait
    while True:
        with library.database.plain() as conn:
            if int(conn.execute(GENERATION_SQL).fetchone()[0]) == generation:
                return
        if time.monotonic() > deadline:
            raise LibraryError(f"{library.root}: the person is forgotten, but a connection of this process still reads the "
                               "database as it was; the next open of the library deletes their files and vector indexes")
        time.sleep(0.05)


def _clean_up(library: Library, files: list[str]) -> None:
    """After the rename: the person's files, anything else no row names, every vector index written again from the
    new database; then the marker goes."""
    root = library.root
    for rel in files:
        with contextlib.suppress(OSError):
            (root / rel).unlink(missing_ok=True)
    library.files.collect_orphan_thumbnails()  # thumbnails and pictures of rows that are gone
    folder = root / PERSON_PHOTOS
    if folder.is_dir():
        with library.database.plain() as conn:
            keep = {Path(r[0]).name for r in conn.execute("SELECT crop FROM person_photos").fetchall()}
        for p in folder.glob("*.jpg"):
            if p.name not in keep:
                with contextlib.suppress(OSError):
                    p.unlink()
    library.rewrite_vector_indexes()
    (root / FORGETTING).unlink(missing_ok=True)
    fsync_folder(root)


def finish_forgetting(library: Library, held: bool = False) -> None:
    """Finish a forgetting that a killed run left (its marker is there): undone when the database was not yet
    replaced, else completed. Nothing when there is none, when another run writes the library (it finishes it on its
    own open), or when the folder cannot be written here (readers see the database, as before or as after)."""
    root = library.root
    if not (root / FORGETTING).exists():
        return
    if not held:
        try:
            with _writers_held_off(library):
                finish_forgetting(library, held=True)
        except (LibraryError, OSError) as e:
            log.info("%s: a forgetting left unfinished is not finished now (%s)", root, e)
        return
    try:
        marker = json.loads((root / FORGETTING).read_text())
        before, files = int(marker["generation"]), [str(f) for f in marker["files"]]
    except FileNotFoundError:
        return
    except (OSError, ValueError, KeyError, TypeError):
        before, files = None, []  # written by us, unreadable: completing is right whichever side of the rename it was
    target = root / FORGOTTEN_DATABASE
    for stale in (target, target.with_name(target.name + ".wal")):
        stale.unlink(missing_ok=True)
    with library.database.plain() as conn:
        now = int(conn.execute(GENERATION_SQL).fetchone()[0])
    if before is not None and now == before:  # killed before the rename: nothing was changed
        (root / FORGETTING).unlink(missing_ok=True)
        log.info("%s: a forgetting killed before it was done left the library as it was", root)
        return
    _clean_up(library, files)
    log.info("%s: a forgetting killed after the person was gone is finished (files and vector indexes)", root)

