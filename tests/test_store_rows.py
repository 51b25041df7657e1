"""The rows of `headsearch.store.rows` hold their tables' columns, by name and in order: a column added
to `schemas/tables.py` without its field fails here, not in a reader at run time."""
from __future__ import annotations

from dataclasses import fields

import pytest

from headsearch.store.rows import (
    FailedFile,
    FeedbackRow,
    ForgetCheckRow,
    ForgottenRow,
    ForgottenVideoRow,
    MembershipRow,
    PersonPairRow,
    PersonPhotoRow,
    PersonRow,
    ShotRow,
    SightingRow,
    TrackQualityRow,
    TrackRow,
    VectorRow,
    VideoRow,
)
from schemas import tables as t

ROWS = [(VideoRow, t.videos), (ShotRow, t.shots), (SightingRow, t.observations), (VectorRow, t.vectors), (FailedFile, t.failed_files),
        (PersonRow, t.people), (MembershipRow, t.person_tracks), (FeedbackRow, t.person_feedback), (TrackQualityRow, t.track_quality),
        (PersonPairRow, t.person_pairs), (PersonPhotoRow, t.person_photos),
        (ForgottenRow, t.forgotten_people), (ForgottenVideoRow, t.forgotten_videos), (ForgetCheckRow, t.forget_checks)]


@pytest.mark.parametrize(("row", "table"), ROWS)
def test_a_table_row_holds_its_tables_columns(row, table):
    assert [f.name for f in fields(row)] == [c.name for c in table.columns]


def test_a_track_row_holds_its_tables_columns_and_its_file():
    assert [f.name for f in fields(TrackRow)] == [c.name for c in t.tracks.columns] + ["video", "video_kind"]


def test_every_table_but_the_librarys_state_has_its_row():
    """A table added without a row type guarded above fails here."""
    guarded = {table for _, table in ROWS} | {t.tracks}  # tracks: above, with its file's columns
    assert set(t.metadata.sorted_tables) - guarded == {t.library_state}  # the library's one row of settings: no row type
