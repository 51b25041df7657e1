"""Library format versions and the steps that upgrade an older library in place.

The format is recorded twice: in `manifest.json` (read before the database is opened) and in the
database's `library_state` (written in the same transaction as the tables it describes). A library
made by an older release is upgraded on open: every step runs inside one transaction with the
format bump, then the manifest is rewritten; a crash between the two leaves a database that
already says the new format, and the next open only rewrites the manifest. A library made by a
newer release is refused.

To change the tables: declare the new shape in `schemas/tables.py`, raise FORMAT_VERSION, and add
the step from the previous version here (SQL on the connection it is given; no data is lost).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa

from schemas import tables as t

FORMAT_VERSION = 3
FORMAT_KEY = "format"  # library_state key holding the database's format


@dataclass(frozen=True)
class Migration:
    from_version: int
    description: str
    apply: Callable[[sa.Connection], None]


def _record_format_in_database(conn: sa.Connection) -> None:
    """Format 1 recorded its version in the manifest only; 2 keeps it in the database too."""


def _add_people_tables(conn: sa.Connection) -> None:
    """Format 3 adds the people tables (persons, their tracks, users' verdicts on tracks)."""
    for table in (t.people, t.person_tracks, t.person_feedback):
        table.create(conn, checkfirst=True)


MIGRATIONS: dict[int, Migration] = {
    1: Migration(1, "record the library format in the database", _record_format_in_database),
    2: Migration(2, "add the people tables", _add_people_tables),
}


def database_format(conn: sa.Connection) -> int | None:
    """The format the database says it has (None for format 1, which did not record it)."""
    value = conn.execute(sa.select(t.library_state.c.value).where(t.library_state.c.key == FORMAT_KEY)).scalar()
    return None if value is None else int(value)


def set_database_format(conn: sa.Connection, version: int) -> None:
    conn.execute(sa.delete(t.library_state).where(t.library_state.c.key == FORMAT_KEY))
    conn.execute(sa.insert(t.library_state).values(key=FORMAT_KEY, value=str(version)))


def upgrade(conn: sa.Connection, from_version: int) -> list[str]:
    """Apply every step from `from_version` to FORMAT_VERSION on this connection (the caller's
    transaction); returns what was done, one line a step."""
    done = []
    version = from_version
    while version < FORMAT_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise ValueError(f"no migration from library format {version}")
        step.apply(conn)
        done.append(f"format {version} -> {version + 1}: {step.description}")
        version += 1
    set_database_format(conn, FORMAT_VERSION)
    return done
