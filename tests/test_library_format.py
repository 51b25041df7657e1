"""Library formats: a library made by an earlier release opens, is upgraded in place and answers the
same queries; a library of a newer release is refused with one line."""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

import duckdb
import pytest
from conftest import AMY_DIR, DATA, FIXTURES, library_db, needs_data, query_json, run
from test_index_query import assert_consistent, table_counts

from headsearch.store import migrations
from headsearch.store.library import Library

pytestmark = needs_data

ANSWERS = json.loads((FIXTURES / "library-format1-answers.json").read_text())
# Where ../shared/data lay when 0.1.0 made the fixture; its stored paths and answers are moved to DATA.
FIXTURE_DATA = "/work/shared/data"


def relocated(path: str) -> str:
    return str(DATA) + path[len(FIXTURE_DATA):] if path.startswith(FIXTURE_DATA + "/") else path


def format1_library(tmp_path: Path) -> Path:
    """The library folder headsearch 0.1.0 made (format 1; thumbnails left out of the fixture)."""
    with tarfile.open(FIXTURES / "library-format1.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    library = tmp_path / "library"
    if str(DATA) != FIXTURE_DATA:  # the media lie elsewhere on this machine (CI): as a user who moved them
        con = duckdb.connect(str(library / "library.duckdb"))
        try:
            con.execute("update videos set path = ? || substr(path, ?) where starts_with(path, ?)",
                        [str(DATA), len(FIXTURE_DATA) + 1, FIXTURE_DATA + "/"])
        finally:
            con.close()
    return library


def manifest(library: Path) -> dict:
    return json.loads((library / "manifest.json").read_text())


def database_format(library: Path) -> str | None:
    with library_db(library) as con:
        row = con.execute("select value from library_state where key = 'format'").fetchone()
    return None if row is None else row[0]


def test_format1_library_is_upgraded_and_answers_the_same_queries(tmp_path):
    library = format1_library(tmp_path)
    assert manifest(library)["format"] == 1 and database_format(library) is None
    counts = table_counts(library)
    for q in ANSWERS["queries"]:
        hits = query_json(library, DATA / q["photo"], *q["args"])
        # The same answers, field for field, less the query photo itself (never its own hit since
        # format 3); hits gained fields (kind, box, shot...) the fixture does not know.
        expected = [{**h, "video": relocated(h["video"])} for h in q["hits"] if not h["video"].endswith("/" + q["photo"])]
        got = [{key: h[key] for key in expected[0]} for h in hits[: len(expected)]]
        assert got == expected, q["photo"]
    assert manifest(library)["format"] == migrations.FORMAT_VERSION
    assert database_format(library) == str(migrations.FORMAT_VERSION)
    assert table_counts(library) == counts
    # The upgraded library takes new files like any other.
    run("index", AMY_DIR / "amy1.png", AMY_DIR.parent / "raj" / "raj1.png", "--library", library, "-q")
    assert table_counts(library)["videos"] == counts["videos"] + 1
    with library_db(library) as con:
        assert con.execute("select count(*) from videos where path like '%raj1.png'").fetchone()[0] == 1


def test_crash_between_commit_and_manifest_is_finished_on_open(tmp_path):
    library = format1_library(tmp_path)
    lib = Library(library, manifest(library), read_only=False)
    with lib.transaction() as conn:  # the database was upgraded, then the run died before the manifest
        migrations.upgrade(conn, 1)
    assert manifest(library)["format"] == 1
    Library.open(library)
    assert manifest(library)["format"] == migrations.FORMAT_VERSION
    assert_consistent(library, thumbnails=False)  # the fixture leaves its thumbnails out


def test_newer_format_is_refused(tmp_path):
    library = format1_library(tmp_path)
    m = manifest(library)
    m["format"] = migrations.FORMAT_VERSION + 1
    (library / "manifest.json").write_text(json.dumps(m))
    result = run("query", AMY_DIR / "amy2.png", "--library", library, ok=False)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "made by a newer headsearch" in lines[0] and "Traceback" not in result.output
    result = run("index", AMY_DIR / "amy2.png", "--library", library, ok=False)
    assert "made by a newer headsearch" in result.stderr


def test_upgrade_waits_for_a_running_indexer(tmp_path):
    library = format1_library(tmp_path)
    holder = Library(library, manifest(library), read_only=False)
    with holder.writer_lock():
        result = run("stats", "--library", library, ok=False)
    assert "another headsearch run is indexing this library" in result.stderr
    assert manifest(library)["format"] == 1
    run("stats", "--library", library)
    assert manifest(library)["format"] == migrations.FORMAT_VERSION


@pytest.mark.parametrize("broken", ['{"format": 1}', "not json", '{"model": {"name": "x"}}'])
def test_unreadable_manifest_is_one_line(tmp_path, broken):
    library = format1_library(tmp_path)
    (library / "manifest.json").write_text(broken)
    result = run("stats", "--library", library, ok=False)
    assert "unreadable manifest" in result.stderr and "Traceback" not in result.output
