"""The rows of `headsearch.store.rows` hold their tables' columns, by name and in order: a column added
to `schemas/tables.py` without its field fails here, not in a reader at run time."""
from __future__ import annotations

from dataclasses import fields

import pytest

from headsearch.store.rows import FailedFile, FeedbackRow, MembershipRow, PersonRow, ShotRow, SightingRow, TrackRow, VectorRow, VideoRow
from schemas import tables as t


@pytest.mark.parametrize(("row", "table"), [(VideoRow, t.videos), (ShotRow, t.shots), (SightingRow, t.observations), (VectorRow, t.vectors),
                                            (FailedFile, t.failed_files), (PersonRow, t.people), (MembershipRow, t.person_tracks),
                                            (FeedbackRow, t.person_feedback)])
def test_a_table_row_holds_its_tables_columns(row, table):
    assert [f.name for f in fields(row)] == [c.name for c in table.columns]


def test_a_track_row_holds_its_tables_columns_and_its_file():
    assert [f.name for f in fields(TrackRow)] == [c.name for c in t.tracks.columns] + ["video", "video_kind"]
