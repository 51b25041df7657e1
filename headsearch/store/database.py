"""A library's DuckDB file (`library.duckdb`): its connections and transactions, and the errors they meet.

DuckDB lets one process write at a time, and a process writing the file locks every other one out, readers
too: writers hold the file only while they commit, and a connection waits a little for them (`Database`).
A file cut short or with blocks that cannot be read is said to be damaged (`LibraryDamaged`), and nothing
more is written to it.

Two kinds of connection, opened the same way (`Database._open`): DuckDB's own, for a query's reads
(`Database.plain`: plain SQL, and no SQLAlchemy to import, which is most of a cold query's start-up), and
SQLAlchemy's on top of it for writes and for what pages show (`Database.connection`, `transaction`).
"""
from __future__ import annotations

import contextlib
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

# DuckDB's compiled module (a top-level `_duckdb` in duckdb 2) holds the very objects the `duckdb` package re-exports;
# the package around it (its relation API, its version read from package metadata) costs a cold query 0.08 s more
# (-X importtime: 0.10 s against 0.02). `tests/test_query_reader.py` checks that both are the same.
try:
    import _duckdb as duckdb
except ImportError:  # pragma: no cover - a duckdb without it
    import duckdb

from headsearch.basics.errors import LibraryDamaged, LibraryError, is_disk_full, is_interruption
from headsearch.store.layout import DATABASE

if TYPE_CHECKING:
    import sqlalchemy as sa


def _is_lock_error(e: Exception) -> bool:
    """DuckDB's words for a file another process holds ("Could not set lock on file ...: Conflicting
    lock is held"), or this process holds with the other mode ("different configuration")."""
    return bool(re.search(r"set lock|conflicting lock|different configuration", str(e), re.IGNORECASE))


_DAMAGE_WORDS = re.compile(r"could not read enough bytes|not a valid duckdb database|corrupt|checksum|"
                           r"table with name \w+ does not exist|failed to read|invalidated", re.IGNORECASE)
DATABASE_HEADER_BYTES = 3 * 4096  # DuckDB's file headers; table data lies in blocks after them
# DuckDB shares one database instance between a process's connections to a file and shuts it down when the last
# one closes; a connect that meets that shutdown waits in a busy loop (duckdb/duckdb-java#277, duckdb#25965), and
# here it once never ended: two web-app threads, one opening the file while the other closed it, spun for 10 minutes.
# Opening and closing one at a time in the process (the queries between them still run side by side) avoids it.
_OPEN_OR_CLOSE = threading.Lock()
# The library's generation: it grows with every committed change (`Database.transaction`; saved FAISS files record theirs).
GENERATION_SQL = "SELECT CAST(value AS BIGINT) FROM library_state WHERE key = 'generation'"
# A list of ids as one parameter of plain SQL: `WHERE id IN (SELECT unnest(?))`, whatever their number.
IN_IDS = "IN (SELECT unnest(?::BIGINT[]))"


def error_line(e: BaseException) -> str:
    """The first line of a DuckDB error (the one under SQLAlchemy's, when it wraps one), else its type's name."""
    orig = getattr(e, "orig", None) or e
    return (str(orig).strip().splitlines() or [type(orig).__name__])[0]


def damage_reason(e: BaseException) -> str | None:
    """The first line of a DuckDB error that says the database file is damaged (cut short, checksums
    that do not match, structures that cannot be read); None for any other error."""
    orig = getattr(e, "orig", None) or e
    text = error_line(orig)
    if is_disk_full(orig) or _is_lock_error(orig):
        return None
    if isinstance(orig, duckdb.InternalException | duckdb.SerializationException | duckdb.FatalException) or _DAMAGE_WORDS.search(text):
        return text
    return None


class Database:
    """The database of the library folder `root`, opened read-only or for writing: one short connection per
    use, or one per thread for a block of reads (`session`)."""

    def __init__(self, root: Path, read_only: bool):
        self.root = root
        self.read_only = read_only
        self._sa_engine: sa.Engine | None = None
        self._read_checked = False  # whether a read connection checked that the file is whole (`_check_intact`)
        self._held = threading.local()  # this thread's session connection (`session`)

    def damaged(self, reason: str) -> LibraryDamaged:
        return LibraryDamaged(f"{self.root}: the library database {DATABASE} is damaged ({reason}); nothing more is written "
                              f"to it: put back a copy of {DATABASE} from a backup, or index into a new --library")

    # ----- opening ------------------------------------------------------------------------
    def _open(self) -> duckdb.DuckDBPyConnection:
        """A DuckDB connection to the library's database; waits a little while another process commits."""
        path = self.root / DATABASE
        with contextlib.suppress(OSError):
            if path.stat().st_size < DATABASE_HEADER_BYTES:  # cut short: DuckDB must not write a new file over it
                raise self.damaged(f"{path.stat().st_size} bytes, less than a database's headers")
        delay = 0.05
        for attempt in range(40):  # writers hold the file only while committing: wait a little
            try:
                with _OPEN_OR_CLOSE:
                    return duckdb.connect(str(path), read_only=self.read_only)
            except duckdb.Error as e:
                reason = damage_reason(e)
                if reason is not None:
                    raise self.damaged(reason) from e
                if not _is_lock_error(e) or attempt == 39:
                    raise LibraryError(
                        f"{self.root}: library database is busy (another headsearch process is writing it); try again"
                        if _is_lock_error(e) else f"{self.root}: cannot open library database ({error_line(e)})"
                    ) from e
                time.sleep(delay)
                delay = min(delay * 1.5, 1.0)
        raise AssertionError("unreachable")

    @staticmethod
    def _close(conn) -> None:
        with _OPEN_OR_CLOSE:
            conn.close()

    def _check_intact(self, conn: duckdb.DuckDBPyConnection) -> None:
        """The file must hold every block that the tables' stored data lies in (a file cut short does
        not, though DuckDB notices only when it reads a missing block, and may write into the file
        meanwhile)."""
        tables = [name for (name,) in conn.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()").fetchall() if name.isidentifier()]
        if not tables:
            return
        blocks = " UNION ALL ".join(f"SELECT block_id AS b, additional_block_ids AS more FROM pragma_storage_info('{name}') "
                                    "WHERE persistent" for name in tables)
        (highest,) = conn.execute(f"SELECT greatest(max(b), max(list_max(more))) FROM ({blocks})").fetchone()
        if highest is None:
            return
        (block_size,) = conn.execute("SELECT block_size FROM pragma_database_size()").fetchone()
        need = DATABASE_HEADER_BYTES + (int(highest) + 1) * int(block_size)
        size = (self.root / DATABASE).stat().st_size
        if size < need:
            raise self.damaged(f"cut short: {size:,} bytes, its tables lie in the first {need:,}")

    def _check_first_read(self, conn: duckdb.DuckDBPyConnection) -> None:
        """Reads check the file once (a damaged block read later says so itself)."""
        if not self._read_checked:
            self._check_intact(conn)
            self._read_checked = True

    @contextlib.contextmanager
    def _errors_said(self) -> Iterator[None]:
        """A Ctrl-C while DuckDB ran a query is an interruption (the query was rolled back); an error
        that says the file is damaged is `LibraryDamaged` (a write transaction rolled back with it)."""
        try:
            yield
        except Exception as e:
            if is_interruption(e):
                raise KeyboardInterrupt from e
            reason = damage_reason(e) if isinstance(e, duckdb.Error) or hasattr(e, "orig") else None
            if reason is not None:
                raise self.damaged(reason) from e
            raise

    # ----- DuckDB's own connections: a query's reads ----------------------------------------
    @contextlib.contextmanager
    def plain(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A DuckDB connection for reading plain SQL: this thread's session's when it is in one."""
        held = getattr(self._held, "conn", None)
        if held is not None:
            with self._errors_said():
                yield held
            return
        conn = self._open()
        try:
            with self._errors_said():
                self._check_first_read(conn)
                yield conn
        finally:
            self._close(conn)

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """Every plain read of this thread inside the block goes through one connection (a query's several
        look-ups: one open of the database instead of one each). Keep it short: another process
        that writes the library waits while a reader holds the file."""
        if getattr(self._held, "conn", None) is not None:
            yield
            return
        with self.plain() as conn:
            self._held.conn = conn
            try:
                yield
            finally:
                self._held.conn = None

    # ----- SQLAlchemy's connections: writes, and what pages read ------------------------------
    def _engine(self) -> sa.Engine:
        if self._sa_engine is None:  # made once: creating an engine costs about as much as a query
            import duckdb_engine
            import sqlalchemy as sa
            from sqlalchemy.pool import NullPool

            # Named here, SQLAlchemy need not look for the dialect among every installed package's entry points.
            sa.dialects.registry.register("duckdb", "duckdb_engine", "Dialect")
            self._sa_engine = sa.create_engine("duckdb://", poolclass=NullPool,
                                               creator=lambda: duckdb_engine.ConnectionWrapper(self._open()))
        return self._sa_engine

    @contextlib.contextmanager
    def connection(self, begin: bool) -> Iterator[sa.Connection]:
        """A SQLAlchemy connection for the block: for reading (`begin` False), or for writing (`begin` True, on a
        database opened writable) in a transaction committed when the block ends, with no generation bumped
        (the people tables' writes; `transaction` bumps it)."""
        conn = self._engine().connect()
        duck = conn.connection.driver_connection  # DuckDB's own, under SQLAlchemy's
        try:
            with self._errors_said():
                if begin:
                    with conn.begin():
                        self._check_intact(duck)  # never a write into a damaged file
                        yield conn
                else:
                    self._check_first_read(duck)
                    yield conn
        finally:
            self._close(conn)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sa.Connection]:
        """A write transaction that bumps the library generation on commit."""
        import sqlalchemy as sa

        if self.read_only:
            raise LibraryError(f"{self.root}: opened read-only")
        try:
            with self.connection(begin=True) as conn:
                yield conn
                if sa.inspect(conn).has_table("library_state"):
                    conn.execute(sa.text("UPDATE library_state SET value = CAST(CAST(value AS BIGINT) + 1 AS VARCHAR) "
                                         "WHERE key = 'generation'"))
        except sa.exc.DBAPIError as e:  # disk full, I/O error...: the transaction was rolled back
            raise LibraryError(f"{self.root}: could not commit ({error_line(e)}); the library keeps its last committed state") from e

    # ----- the file written again ------------------------------------------------------------------
    def write_copy(self, target: Path, keep: dict[str, tuple[str, list]],
                   then: Callable[[duckdb.DuckDBPyConnection, str], None]) -> None:
        """Write a new database file at `target` holding this one's tables with their indexes (DuckDB's `COPY FROM
        DATABASE ... (SCHEMA)`) and their rows: of a table `keep` names, only those its SQL condition keeps (with its
        parameters; a table it does not name is refused); `then(conn, catalog)` runs on the copy, in the same transaction, before the file is closed.

        Rows left out are never written, so nothing of them is in the new file (DuckDB leaves a deleted row's bytes
        in its file until the block is used again: a CHECKPOINT or VACUUM does not clear them, measured with duckdb
        2.0.1). This file is checkpointed first, so that no write-ahead log of it holds a change the copy has and the
        file not (the caller holds every writer off meanwhile); the copy itself reads it read-only, so readers go on."""
        for stale in (target, target.with_name(target.name + ".wal")):
            stale.unlink(missing_ok=True)
        writer = Database(self.root, read_only=False)._open()
        try:
            with self._errors_said():
                writer.execute("CHECKPOINT")
        finally:
            self._close(writer)
        conn = Database(self.root, read_only=True)._open()
        try:
            with self._errors_said():
                self._check_intact(conn)
                (source,) = conn.execute("SELECT current_database()").fetchone()
                tables = [name for (name,) in conn.execute(
                    "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() ORDER BY table_name").fetchall()]
                conn.execute("ATTACH ? AS forgetting_copy (READ_WRITE)", [str(target)])
                try:
                    conn.execute(f'COPY FROM DATABASE "{source}" TO forgetting_copy (SCHEMA)')
                    conn.execute("BEGIN")
                    for name in tables:
                        if name not in keep:  # a table its caller did not read: it may hold what is being left out
                            raise LibraryError(f"{self.root}: table {name} appeared while the database was written again; "
                                               "the library is as it was")
                        where, params = keep[name]
                        conn.execute(f'INSERT INTO forgetting_copy.main."{name}" SELECT * FROM "{source}".main."{name}" WHERE {where}',
                                     params)
                    then(conn, "forgetting_copy")
                    conn.execute("COMMIT")
                except BaseException:
                    with contextlib.suppress(duckdb.Error):
                        conn.execute("ROLLBACK")
                    with contextlib.suppress(duckdb.Error):
                        conn.execute("DETACH forgetting_copy")
                    raise
                conn.execute("DETACH forgetting_copy")  # the copy checkpointed and closed
        except duckdb.Error as e:
            raise self._copy_failed(target, e) from e
        finally:
            self._close(conn)

    def _copy_failed(self, target: Path, e: duckdb.Error) -> LibraryError:
        """The copy goes, log included, and one line says why: a full disk in words (DuckDB says only that the
        checkpoint of the copy failed when it closes it, or that a write failed), else DuckDB's first line."""
        for stale in (target, target.with_name(target.name + ".wal")):
            with contextlib.suppress(OSError):
                stale.unlink(missing_ok=True)
        try:
            need, free = (self.root / DATABASE).stat().st_size, shutil.disk_usage(target.parent).free
        except OSError:
            need, free = 0, 0
        if is_disk_full(e) or (isinstance(e, duckdb.IOException) and free < need):
            return LibraryError(f"{self.root}: disk full: writing the database again needs about {need / 1e6:,.1f} MB free beside it, "
                                f"{free / 1e6:,.1f} MB are; nothing was changed, the library is as it was")
        return LibraryError(f"{self.root}: could not write the database again ({error_line(e)}); the library is as it was")

    @contextlib.contextmanager
    def reader(self) -> Iterator[sa.Connection]:
        """A SQLAlchemy connection for reading (for `headsearch.store`'s own use)."""
        with self.connection(begin=False) as conn:
            yield conn
