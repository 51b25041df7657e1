"""Library format versions and the steps that upgrade an older library in place.

The format is recorded twice: in `manifest.json` (read before the database is opened) and in the
database's `library_state` (written in the same transaction as the tables it describes). A library
made by an older release is upgraded on open: every step runs inside one transaction with the
format bump, then the manifest is rewritten; a crash between the two leaves a database that
already says the new format, and the next open only rewrites the manifest. A library made by a
newer release is refused.

To change the tables: declare the new shape in `schemas/tables.py`, raise FORMAT_VERSION (in `headsearch.store.layout`), and add
the step from the previous version here (SQL on the connection it is given; no data is lost).
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from headsearch.store.layout import FORMAT_VERSION
from schemas import tables as t

log = logging.getLogger(__name__)

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


def _is_unchanged(path: Path, size: int, mtime: float, fingerprint: str) -> bool:
    """Whether the file on disk is the version that was indexed."""
    from headsearch.basics.media import fingerprint as file_fingerprint

    try:
        stat = path.stat()
        return stat.st_size == size and (stat.st_mtime == mtime or file_fingerprint(path, stat.st_size) == fingerprint)
    except OSError:
        return False


def _presentation_times(conn: sa.Connection) -> None:
    """Format 4: every stored time on the file's presentation timeline, failed files remembered,
    files' own frame sizes recorded.

    Formats up to 3 stored decord's times, which count from the first frame: each still-present,
    unchanged, decord-indexed video is probed with PyAV and its shots, tracks and sightings are
    shifted by where its video stream starts (0.852 s in short_hamilton_clip.mp4). A video that is
    gone keeps its times (it leaves the library when its folder is indexed again); a changed one
    is re-indexed, with the right times, by the next `index`.
    """
    from headsearch.basics.timeline import probe_video

    conn.execute(sa.text("ALTER TABLE videos ADD COLUMN IF NOT EXISTS source_width INTEGER"))
    conn.execute(sa.text("ALTER TABLE videos ADD COLUMN IF NOT EXISTS source_height INTEGER"))
    t.failed_files.create(conn, checkfirst=True)
    conn.execute(sa.text("UPDATE videos SET source_width = width, source_height = height WHERE kind = 'image'"))
    rows = conn.execute(sa.select(t.videos.c.id, t.videos.c.path, t.videos.c.decoder, t.videos.c.size, t.videos.c.mtime,
                                  t.videos.c.fingerprint).where(t.videos.c.kind == "video")).fetchall()
    shifted, unchecked = 0, 0
    for r in rows:
        path = Path(r.path)
        if not _is_unchanged(path, r.size, r.mtime, r.fingerprint):
            unchecked += r.decoder == "decord"
            log.info("%s: missing or changed since it was indexed; its times are left as they are", path)
            continue
        probe = probe_video(path)
        if probe is None:
            unchecked += r.decoder == "decord"
            continue
        conn.execute(sa.update(t.videos).where(t.videos.c.id == r.id).values(source_width=probe.width, source_height=probe.height))
        if r.decoder != "decord" or abs(probe.first_time) < 1e-6:
            continue
        offset = probe.first_time  # decord's first frame was at 0
        conn.execute(sa.update(t.shots).where(t.shots.c.video_id == r.id).values(
            start_time=t.shots.c.start_time + offset, end_time=t.shots.c.end_time + offset))
        conn.execute(sa.update(t.tracks).where(t.tracks.c.video_id == r.id).values(
            start_time=t.tracks.c.start_time + offset, end_time=t.tracks.c.end_time + offset, best_time=t.tracks.c.best_time + offset))
        conn.execute(sa.update(t.observations).where(t.observations.c.video_id == r.id).values(time=t.observations.c.time + offset))
        log.info("%s: times shifted by %+.3f s onto the presentation timeline", path, offset)
        shifted += 1
    log.info("presentation times: %d videos shifted, %d decord-indexed videos could not be checked", shifted, unchecked)


def _how_heads_were_found(conn: sa.Connection) -> None:
    """Format 5: each sighting records how its head was found. Up to format 4 every track started from a face
    and was followed through frames without one: a sighting with a face was found by it, the others followed."""
    conn.execute(sa.text("ALTER TABLE observations ADD COLUMN IF NOT EXISTS found_by VARCHAR"))
    conn.execute(sa.text("UPDATE observations SET found_by = CASE WHEN face_visible THEN 'face' ELSE 'followed' END "
                         "WHERE found_by IS NULL"))


def _people_curation(conn: sa.Connection) -> None:
    """Format 6: what people's curation keeps: each track's measured quality (the gates before it joins a person),
    "not the same person" answers to merge suggestions, and persons' reference photos. Empty at first: the next
    `headsearch people` (or index run) measures every track and takes the gates' verdict."""
    for table in (t.track_quality, t.person_pairs, t.person_photos):
        table.create(conn, checkfirst=True)


def _face_yaw(conn: sa.Connection) -> None:
    """Format 7: each sighting with a face records how far it is turned (yaw). Sightings indexed before have none (NULL):
    their landmarks were not kept; re-indexing a file (or `headsearch reindex`) measures them."""
    conn.execute(sa.text("ALTER TABLE observations ADD COLUMN IF NOT EXISTS yaw DOUBLE"))


def _forgotten_people(conn: sa.Connection) -> None:
    """Format 8: the record of persons forgotten (`headsearch people forget`), empty at first."""
    t.forgotten_people.create(conn, checkfirst=True)


def _forget_marks(conn: sa.Connection) -> None:
    """Format 9: a forgetting marks the videos whose analysis lost tracks (redactions of every head analyse them again)
    and keeps what its search for the person's leftovers found; empty at first. The names already recorded of persons
    forgotten go: the record keeps an id and counts (`people forget --keep-name` keeps a name from now on)."""
    for table in (t.forgotten_videos, t.forget_checks):
        table.create(conn, checkfirst=True)
    conn.execute(sa.text("UPDATE forgotten_people SET name = NULL"))


def _joins_within_shots(conn: sa.Connection) -> None:
    """Format 10: a track joined within its shot to an earlier track's person records it (`indexer.rejoin`). Tracks
    indexed before have no joins (NULL); re-indexing a file (or `headsearch reindex`) joins them."""
    for column, kind in (("joined_to", "BIGINT"), ("join_cue", "VARCHAR"), ("join_score", "DOUBLE")):
        conn.execute(sa.text(f"ALTER TABLE tracks ADD COLUMN IF NOT EXISTS {column} {kind}"))


def _sampled_frames(conn: sa.Connection) -> None:
    """Format 11: each video records the frames its analysis sampled. Videos indexed before have none (NULL): a redaction
    guesses their sampling from the gaps between sightings, as it did, and says so; re-indexing a file (or `headsearch
    reindex`) records them."""
    conn.execute(sa.text("ALTER TABLE videos ADD COLUMN IF NOT EXISTS samples BLOB"))


MIGRATIONS: dict[int, Migration] = {
    1: Migration(1, "record the library format in the database", _record_format_in_database),
    2: Migration(2, "add the people tables", _add_people_tables),
    3: Migration(3, "times on the files' presentation timeline, failed files remembered, source frame sizes", _presentation_times),
    4: Migration(4, "how each sighting's head was found (face, keypoints, followed)", _how_heads_were_found),
    5: Migration(5, "people's curation: track quality, answers to merge suggestions, reference photos", _people_curation),
    6: Migration(6, "how far each sighting's face is turned (yaw)", _face_yaw),
    7: Migration(7, "the record of persons forgotten", _forgotten_people),
    8: Migration(8, "the videos a forgetting touched, and what its search for leftovers found", _forget_marks),
    9: Migration(9, "tracks joined within their shot to an earlier track's person", _joins_within_shots),
    10: Migration(10, "the frames each video's analysis sampled", _sampled_frames),
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
