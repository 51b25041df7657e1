"""Forgetting a person (`headsearch people forget PERSON`, the person page's "forget"): everything the library holds of
them goes, in one step a kill cannot leave half done, and the library keeps a record of it (`headsearch people
forgotten`). The store does it (`headsearch.store.forgetting`); here a person is found by name or id, after new
tracks have joined the people they are (so a file indexed again since is forgotten too). Only the person's tracks go:
a track in the inbox that is likely theirs is named first (`likely_theirs`), to be moved into the person if it is.

"For good" means: the library holds nothing of them any more, and keeps of the forgetting its date, the person's id and
counts (their name only with `keep_name`), and which files their tracks were in (by content fingerprint, `forgotten_videos`).
The videos stay indexed, with everyone else's tracks; a redaction that hides every head analyses those files again
(the library's analysis of them lacks the person's heads: `analysis_lost_heads`). The files themselves still show the
person: a file analysed again later (indexed again, a copy of it, `headsearch reindex`) finds their head again, as
someone new, and `index` and `people` say so (`returned_notes`): forget them again then.
"""
from __future__ import annotations

import time

from headsearch.basics.text import counted, printable
from headsearch.people.listing import Person, find_person, inbox
from headsearch.people.persons import update_people
from headsearch.store.database import IN_IDS
from headsearch.store.forgetting import forget_and_search
from headsearch.store.leftovers import Check
from headsearch.store.library import Library
from headsearch.store.rows import ForgottenRow


def person_to_forget(library: Library, key: str | int) -> Person:
    """The person named or numbered `key`, with every track that is theirs now (PersonNotFound when none is)."""
    update_people(library)
    return find_person(library, key)


def likely_theirs(library: Library, person: Person) -> list[int]:
    """Tracks in the inbox most like the person, and as alike as one person's tracks are: not theirs (a quality gate held
    them back, or a user said they are not), so not forgotten with them; `people move` puts them in the person first."""
    return sorted(t.track_id for t in inbox(library) if t.likely and t.nearest and t.nearest["id"] == person.id)


def likely_line(waiting: list[int], person_id: int) -> str:
    """The note naming the inbox tracks likely the person's (`likely_theirs`), which are not forgotten with them."""
    shown = " ".join(map(str, waiting[:20])) + (" ..." if len(waiting) > 20 else "")
    return (f"note: {counted(len(waiting), 'track')} in the inbox {'is' if len(waiting) == 1 else 'are'} likely theirs but not in the "
            f"person, and not forgotten with them: tracks {shown} (`headsearch people move TRACK... --to {person_id}` first)")


def forget(library: Library, person: Person, keep_name: bool = False, also: tuple = ()) -> tuple[ForgottenRow, Check]:
    """Forget a person found by `person_to_forget`; the record the library keeps of it, and what the search for their
    leftovers under the library folder and the folders `also` (the web app's cache) found."""
    return forget_and_search(library, person.id, keep_name, tuple(also))


def _marked(library: Library, sql: str, params: list) -> list[tuple]:
    """Rows of a query on the forgettings' marks; a library whose database has none yet (opened read-only before its
    upgrade) answers as if every file had lost someone when a person was forgotten in it (failing closed)."""
    with library.database.plain() as conn:
        try:
            return conn.execute(sql, params).fetchall()
        except Exception:  # noqa: BLE001 - the marks' table is missing: DuckDB's catalog error
            forgotten = conn.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'forgotten_people'").fetchone()[0]
            if forgotten and conn.execute("SELECT count(*) FROM forgotten_people").fetchone()[0]:
                return [("unknown", time.time())]
            return []


def analysis_lost_heads(library: Library, fingerprint: str) -> bool:
    """Whether the library's analysis of a file of this content lost tracks to a forgetting: a redaction that hides every
    head must not read it (it would leave the forgotten person's head showing) and analyses the file again."""
    return bool(_marked(library, "SELECT 1 FROM forgotten_videos m JOIN videos v ON v.id = m.video_id WHERE v.fingerprint = ? LIMIT 1",
                        [fingerprint]))


def returned_notes(library: Library, fingerprints: list[str] | None = None) -> list[str]:
    """One line for each file indexed after a forgetting that had a file of the same content in it (indexed again, a
    copy, after `remove`): the person forgotten is back in its analysis, as someone new. `fingerprints`: those files
    only (an index run's), else every file of the library."""
    only = "" if fingerprints is None else f"AND v.fingerprint {IN_IDS.replace('BIGINT', 'VARCHAR')}"
    rows = _marked(library, "SELECT v.path, max(f.forgotten_at), min(f.person_id) FROM videos v "
                            "JOIN forgotten_videos m ON m.fingerprint = v.fingerprint AND m.video_id <> v.id "
                            "JOIN forgotten_people f ON f.id = m.forgotten_id "
                            f"WHERE v.indexed_at > f.forgotten_at {only} GROUP BY v.path ORDER BY v.path",
                   [] if fingerprints is None else [list(fingerprints)])
    return [f"note: {printable(str(path))} held person {person} forgotten on {time.strftime('%Y-%m-%d %H:%M', time.localtime(when))}: "
            "analysed again, their head is back in the library as someone new (`headsearch people forget` them again)"
            for path, when, person in rows if path != "unknown"]


def forgotten(library: Library) -> list[ForgottenRow]:
    """The persons forgotten, oldest first: when, their id and name, how much was removed."""
    return library.forgotten()
