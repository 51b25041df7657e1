"""A library moved to another model (`headsearch reindex`): the new library folder beside the old one, what
comes over from the old one, and the swap.

For a library at `L`:
- `L.reindexing/` is the new library while it is made: an ordinary library of the new model (incremental and
  crash-safe, so a killed run resumes it) with `.reindex.json`, naming the library it will replace. Its ids
  continue the old library's, so that the old track ids people and verdicts keep never name one of its own
  tracks: they find their tracks again by place (file, time, head box), as after any re-indexing.
- People (names, memberships with their places, merges, splits, hidden, "not this person") and the record of
  files that failed come over at the end, while the old library's people writers wait (`people_writers_waiting`).
  The old library's `thresholds.json` was calibrated for the old model: it does not come over.
- The swap exchanges the two folders in one rename where the file system can (`exchange_paths`: `L` always
  names a complete library), then renames the old one to `L.before-<model>-<date>/`. Until then the old
  library is not written to. `finish_swap` completes a swap that a kill interrupted.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from headsearch.basics.errors import LibraryError
from headsearch.basics.files import exchange_paths, fsync_folder, write_json_atomic
from headsearch.store.layout import MANIFEST, PEOPLE_LOCK, PERSON_PHOTOS, existing_model
from headsearch.store.library import Library
from headsearch.store.table_rows import ID_TABLES, next_free_ids, save_next_ids
from schemas import tables as t
from schemas.records import ModelInfo

MARKER = ".reindex.json"  # in the new folder: the library it replaces, the model, and (once swapping) the old one's new name
STAGING_SUFFIX = ".reindexing"


@dataclass(frozen=True)
class CarriedOver:
    """What came over from the old library."""

    people: int
    named: int
    verdicts: int  # users' corrections: merges, splits and "not this person" are kept as verdicts
    failed_files: int  # files that had failed before (skipped until they change, as in the old library)


def staging_path(root: Path) -> Path:
    """Where the re-embedded library of the library at `root` is made."""
    return root.parent / f"{root.name}{STAGING_SUFFIX}"


def _read_marker(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise LibraryError(f"{path}: unreadable ({e}); delete {path.parent} to start the re-index over") from e


def open_staging(old: Library, model: ModelInfo) -> Library:
    """The new library for `old` made by `model`: created, or an interrupted run's, resumed."""
    staging = staging_path(old.root)
    marker = staging / MARKER
    if staging.exists():
        if not marker.is_file():
            raise LibraryError(f"{staging}: in the way of the re-index of {old.root} (not made by `headsearch reindex`); move it away")
        made = existing_model(staging)
        if made is None:  # killed while it was being created: nothing in it yet
            shutil.rmtree(staging)
        elif not made.same_vectors_as(model):
            raise LibraryError(f"{staging}: an unfinished re-index of {old.root} to {made.label()} is there; finish it with "
                               f"`headsearch reindex --model {made.source} --library {old.root}`, or delete that folder to start over")
    if not staging.exists():
        try:
            staging.mkdir()
        except OSError as e:
            raise LibraryError(f"{staging}: cannot create the new library folder ({e.strerror})") from e
        write_json_atomic(marker, {"replaces": str(old.root), "model": model.to_dict(), "started_at": time.time(), "backup": None})
    new = Library.create(staging, model)
    _continue_ids(old, new)
    return new


def _continue_ids(old: Library, new: Library) -> None:
    """Number the new library's rows after the old one's (see the module's docstring)."""
    tables = (*ID_TABLES, t.people, t.person_feedback)
    with old.reader() as conn:
        theirs = next_free_ids(conn, tables)
    with new.transaction() as conn:
        mine = next_free_ids(conn, tables)
        save_next_ids(conn, {name: max(value, mine[name]) for name, value in theirs.items()})


@contextlib.contextmanager
def people_writers_waiting(library: Library) -> Iterator[None]:
    """Hold a library's people lock: its people writers (a web page's "not this person") wait meanwhile, so no
    correction falls between the copy of its people and the swap."""
    with open(library.root / PEOPLE_LOCK, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def carry_over(old: Library, new: Library) -> CarriedOver:
    """Copy the old library's people tables (as they are: `update_people(new, fresh_vectors=True)` then binds
    them to the new tracks) and its record of failed files into the new library. Repeatable: the new library's
    people tables are replaced, failed files already recorded there are left as they are."""
    with old.people_reading() as src:
        persons, members, feedback = src.persons(), src.all_memberships(), src.feedback()
        pairs, photos, forgotten, marks = src.pairs(), src.photos(), src.forgotten(), src.forget_marks()
        next_ids = {name: src.next_id(name) for name in ("people", "person_feedback", "person_pairs", "person_photos")}
    if (old.root / PERSON_PHOTOS).is_dir():  # the reference photos' crops (their vectors, of the old model, are left aside)
        shutil.copytree(old.root / PERSON_PHOTOS, new.root / PERSON_PHOTOS, dirs_exist_ok=True)
    with new.people_writing() as dst:
        dst.replace_people(persons, members, feedback, next_ids, pairs, photos)
        dst.keep_forgotten(forgotten)  # the record of persons forgotten stays with the library
        dst.keep_forget_marks(marks)  # ...with the files they were in (by content)
    known = new.files.stored_files().keys() | new.files.failed_files().keys()
    failed = [f for path, f in old.files.failed_files().items() if path not in known]
    for f in failed:
        new.files.record_failure(f.path, f.size, f.mtime, f.fingerprint, f.error)
    return CarriedOver(people=len(persons), named=sum(1 for p in persons if p.name), verdicts=len(feedback), failed_files=len(failed))


def backup_path(root: Path, model: ModelInfo) -> Path:
    """A free name beside `root` for the old library: `<name>.before-<new model>-<date>`."""
    slug = re.sub(r"[^A-Za-z0-9+._-]+", "_", model.name).strip("._") or "model"
    base = f"{root.name}.before-{slug}-{time.strftime('%Y-%m-%d')}"
    path, n = root.parent / base, 2
    while path.exists() or path.is_symlink():
        path, n = root.parent / f"{base}-{n}", n + 1
    return path


def swap(root: Path, model: ModelInfo) -> Path:
    """Put the new library (complete) in the place of the old one at `root`; returns where the old one is now."""
    staging = staging_path(root)
    backup = backup_path(root, model)
    marker = staging / MARKER
    write_json_atomic(marker, {**_read_marker(marker), "backup": backup.name})  # before the first rename: `finish_swap` reads it
    if exchange_paths(staging, root):
        os.rename(staging, backup)  # the old library, now under the new folder's name
    else:  # no exchange here: for a moment there is no library at `root` (a kill then is undone by `finish_swap`)
        os.rename(root, backup)
        os.rename(staging, root)
    (root / MARKER).unlink(missing_ok=True)
    fsync_folder(root.parent)
    return backup


def finish_swap(root: Path) -> Path | None:
    """Complete a swap that a kill interrupted; returns where the old library went (None: none was under way)."""
    staging = staging_path(root)
    marker = root / MARKER
    if marker.is_file() and (root / MANIFEST).is_file():  # exchanged: the new library is in place
        backup = root.parent / _read_marker(marker)["backup"]
        if staging.is_dir() and not (staging / MARKER).exists():  # the old library, not yet renamed
            os.rename(staging, backup)
        marker.unlink()
        fsync_folder(root.parent)
        return backup
    staged = staging / MARKER
    if not root.exists() and not root.is_symlink() and staged.is_file():  # renamed away, the new one not yet in place
        backup_name = _read_marker(staged).get("backup")
        if backup_name and (root.parent / backup_name).is_dir():
            os.rename(staging, root)
            (root / MARKER).unlink(missing_ok=True)
            fsync_folder(root.parent)
            return root.parent / backup_name
    return None
