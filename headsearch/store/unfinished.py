"""A library folder left by a run killed while it made (or discarded) the library.

Making a library writes the `UNFINISHED` marker first and the manifest last, then removes the
marker; discarding one writes the marker before it removes the manifest. A folder without a manifest
that holds only what headsearch writes there (the marker, thumbnails and pictures named by their
ids, the database, the FAISS caches, temporary files of atomic writes) is the leftover of such a
run: the next run removes it and starts again (nothing in it was ever a complete library, so nothing
is lost). A folder holding anything else is the user's, and is refused.

Releases before the marker left a killed first run's folder with `thumbnails/` alone, or with an
unfinished database: those are recognised by their names and contents too.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import time
from pathlib import Path

from headsearch.basics.errors import LibraryError
from headsearch.basics.failures import ERROR_LOG
from headsearch.basics.files import write_json_atomic
from headsearch.store.layout import DATABASE, PICTURES, THUMBNAILS, UNFINISHED

log = logging.getLogger(__name__)

_ID_PICTURE = re.compile(r"^(\d+\.jpg|\.\d+\.jpg\.[^/]*\.tmp)$")  # `<id>.jpg`, or atomic_write's temporary file of one
_OUR_FILES = re.compile(r"^(vectors_\w+\.(faiss|json)|\.(vectors_\w+\.(faiss|json)|manifest\.json|\.unfinished)\.[^/]*\.tmp)$")
_DATABASE_FILES = (DATABASE, f"{DATABASE}.wal")
_OUR_FOLDERS = re.compile(r"^vectors_\w+\.segments$")  # a vector kind's on-disk segments


def mark_unfinished(root: Path, made_folder: bool) -> None:
    """Say, before anything else is written or removed, that the library at `root` is being made or
    discarded (and whether headsearch made the folder itself, so that a later run may remove it)."""
    write_json_atomic(root / UNFINISHED, {"made_folder": made_folder, "pid": os.getpid(), "at": time.time()})


def mark_finished(root: Path) -> None:
    (root / UNFINISHED).unlink(missing_ok=True)


def _marker(root: Path) -> dict | None:
    try:
        found = json.loads((root / UNFINISHED).read_text())
        return found if isinstance(found, dict) else {}
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # written by us, cut short: still ours


def _is_our_database(path: Path) -> bool:
    """Whether a database file without a manifest beside it is an unfinished library's: no tables but
    ours (or unreadable, as a database cut short while its tables were being made is)."""
    import duckdb

    from schemas import tables as t

    if path.name.endswith(".wal"):
        return True  # goes with the database beside it
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return True
    try:
        names = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    except duckdb.Error:
        return True
    finally:
        con.close()
    return names <= set(t.metadata.tables)


def _sorted_out(root: Path, marked: bool) -> tuple[list[Path], list[str]]:
    """The leftovers of an unfinished library in `root`, and the names of what is not ours."""
    ours: list[Path] = []
    foreign: list[str] = []
    for entry in sorted(root.iterdir()):
        name = entry.name
        if name in (UNFINISHED, ERROR_LOG):  # the marker goes last; a log of errors is the user's to read
            continue
        if name in (THUMBNAILS, PICTURES) and entry.is_dir() and not entry.is_symlink():
            strays = [p.name for p in entry.iterdir() if not (_ID_PICTURE.match(p.name) and p.is_file() and not p.is_symlink())]
            if strays:
                foreign.append(f"{name}/{strays[0]}")
            else:
                ours.append(entry)
        elif name in _DATABASE_FILES and entry.is_file() and not entry.is_symlink():
            if marked or _is_our_database(entry):
                ours.append(entry)
            else:
                foreign.append(f"{name} (a database with other tables)")
        elif not entry.is_symlink() and ((_OUR_FILES.match(name) and entry.is_file()) or (_OUR_FOLDERS.match(name) and entry.is_dir())):
            ours.append(entry)
        elif not name.startswith("."):
            foreign.append(name)
    return ours, foreign


def _leftovers(root: Path, marker: dict | None) -> list[Path]:
    """What a killed run left in `root`; LibraryError when the folder holds anything else."""
    ours, foreign = _sorted_out(root, marker is not None)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise LibraryError(f"{root}: folder exists, is not empty, and holds no headsearch library ({shown}); "
                           "give an empty or new folder as --library")
    return ours


def refuse_foreign(root: Path) -> None:
    """LibraryError, before anything is written there, when the folder `root` (without a manifest)
    holds anything but an unfinished library's leftovers."""
    if root.is_dir():
        _leftovers(root, _marker(root))


def clear_unfinished(root: Path) -> bool:
    """Remove what a killed run left while it made or discarded the library at `root` (which has no
    manifest), or refuse a folder that holds anything else; returns whether headsearch made the folder."""
    marker = _marker(root)
    ours = _leftovers(root, marker)
    for entry in ours:
        with contextlib.suppress(FileNotFoundError):
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    if ours or marker is not None:
        log.info("%s: removed an unfinished library left by a run that was killed while it made or discarded it", root)
    return bool(marker and marker.get("made_folder"))
