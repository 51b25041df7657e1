"""A query's look-ups read the library in DuckDB's own SQL (`headsearch.store.query_reader`, `vector_source`): here
they are checked against the same rows read through SQLAlchemy and `schemas.tables`, on a real indexed clip."""
from __future__ import annotations

import _duckdb
import duckdb
import numpy as np
import pytest
import sqlalchemy as sa
from conftest import copy_of_library, needs_data

from headsearch.store.library import Library
from headsearch.store.table_rows import generation
from headsearch.store.vector_source import DatabaseVectors
from schemas import tables as t
from schemas.records import VectorKind


def test_the_compiled_module_is_the_packages():
    assert _duckdb.connect is duckdb.connect and _duckdb.Error is duckdb.Error
    assert _duckdb.DuckDBPyConnection is duckdb.DuckDBPyConnection and _duckdb.IOException is duckdb.IOException


@pytest.fixture(scope="module")
def library(tmp_path_factory, hamilton_alone) -> Library:
    root = copy_of_library(hamilton_alone, tmp_path_factory.mktemp("reads") / "lib")
    return Library.open(root)


@needs_data
@pytest.mark.slow  # the real clip indexed with the default model
def test_a_querys_reads_are_the_tables_rows(library):
    with library.reader() as conn:
        vectors = conn.execute(sa.select(t.vectors.c.id, t.vectors.c.track_id, t.vectors.c.observation_id, t.vectors.c.kind,
                                         t.vectors.c.embedding).order_by(t.vectors.c.id)).fetchall()
        observations = {r.id: r for r in conn.execute(sa.select(t.observations))}
        tracks = {r.id: r for r in conn.execute(sa.select(t.tracks))}
        shots = {r.id: r for r in conn.execute(sa.select(t.shots))}
        (video,) = conn.execute(sa.select(t.videos)).fetchall()
        stored_generation = generation(conn)
    assert vectors and len(tracks) > 3
    with library.reading() as reader:
        assert reader.track_count() == len(tracks)
        assert reader.locate(np.array([v.id for v in vectors] + [-1, 10**9])) == {v.id: (v.track_id, v.observation_id) for v in vectors}
        pairs = [(v.track_id, v.observation_id) for v in vectors]
        for (track_id, obs_id), hit in reader.hits(pairs).items():
            tr = tracks[track_id]
            assert (hit.path, hit.start, hit.end, hit.time, hit.thumbnail) == (video.path, tr.start_time, tr.end_time,
                                                                              observations[obs_id].time, tr.thumbnail)
        sightings = reader.sightings(list(observations))
        assert set(sightings) == set(observations)
        for obs_id, s in sightings.items():
            o = observations[obs_id]
            shot = shots[tracks[o.track_id].shot_id]
            assert (s.path, s.time, s.face_visible, s.found_by, s.shot_index, s.shot_start, s.shot_end, s.fingerprint) == (
                video.path, o.time, o.face_visible, o.found_by, shot.shot_index, shot.start_time, shot.end_time, video.fingerprint)
            assert s.box == pytest.approx((o.x1, o.y1, o.x2, o.y2))  # the clip is stored at its own size
        by_track = reader.tracks_vectors(list(tracks))
        for v in vectors:
            ids, faces, rows = by_track[v.track_id].kinds[VectorKind(v.kind)]
            at = list(ids).index(v.observation_id)
            np.testing.assert_array_equal(rows[at], np.frombuffer(v.embedding, "<f4"))
            assert faces[at] == observations[v.observation_id].face_visible
            assert np.array_equal(reader.vector(v.observation_id, VectorKind(v.kind)), np.frombuffer(v.embedding, "<f4"))
        assert reader.paths_with_fingerprint(video.fingerprint) == {video.path}
    source = DatabaseVectors(library.database.plain)
    assert source.generation() == stored_generation
    for kind in library.model.kinds:
        of_kind = [v for v in vectors if v.kind == str(kind)]
        assert source.count(kind) == len(of_kind)
        read = [(int(i), row) for ids, rows in source.chunks(kind) for i, row in zip(ids, rows, strict=True)]
        assert [i for i, _ in read] == [v.id for v in of_kind]
        np.testing.assert_array_equal(np.stack([row for _, row in read]), np.stack([np.frombuffer(v.embedding, "<f4") for v in of_kind]))
