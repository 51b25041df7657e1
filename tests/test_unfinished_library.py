"""A library folder left by a run killed while it made the library is cleared and made again by the
next run; a folder holding anything of the user's is still refused, untouched."""
from __future__ import annotations

import json

import duckdb
import pytest
from conftest import made_photo, run
from fake_model import FAKE_MODEL

import headsearch.store.library as library_module
from headsearch.models import load_embedder
from headsearch.store.layout import UNFINISHED
from headsearch.store.library import Library

REFUSED = "folder exists, is not empty, and holds no headsearch library"
FAKE = ("--model", FAKE_MODEL)  # the model is incidental here: the tests' fake, registered as a real one is


@pytest.fixture
def photo(tmp_path):
    return made_photo(tmp_path / "photo.png")


def indexed_paths(lib) -> list[str]:
    return [f["path"] for f in json.loads(run("list", "--library", lib, "--json").stdout)]


def test_a_folder_holding_only_thumbnails_is_made_into_a_library(tmp_path, photo):
    """What a first run killed before its first commit left with earlier releases."""
    lib = tmp_path / "lib"
    (lib / "thumbnails").mkdir(parents=True)
    (lib / "thumbnails" / "3.jpg").write_bytes(b"\xff\xd8 a thumbnail cut short")
    run("index", photo, "--library", lib, *FAKE, "-q")
    assert indexed_paths(lib) == [str(photo)]
    assert not (lib / UNFINISHED).exists()
    assert not (lib / "thumbnails" / "3.jpg").exists()


def test_a_creation_killed_before_the_manifest_is_cleared_and_made_again(tmp_path, photo, monkeypatch):
    lib = tmp_path / "lib"

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # as if killed before the manifest was written

    with monkeypatch.context() as m:
        m.setattr(library_module, "write_json_atomic", killed)
        with pytest.raises(KeyboardInterrupt):
            Library.create(lib, load_embedder(FAKE_MODEL).describe())
    assert (lib / UNFINISHED).exists() and (lib / "library.duckdb").exists() and not (lib / "manifest.json").exists()
    (lib / "vectors_id.faiss").write_bytes(b"half a cache")
    (lib / "vectors_head.segments").mkdir()
    (lib / "vectors_head.segments" / "seg-0123456789ab.f32").write_bytes(b"half a segment")
    run("index", photo, "--library", lib, *FAKE, "-q")
    assert indexed_paths(lib) == [str(photo)]
    assert not (lib / UNFINISHED).exists() and not (lib / "vectors_head.segments" / "seg-0123456789ab.f32").exists()


def test_an_unfinished_database_without_marker_is_cleared(tmp_path, photo):
    lib = tmp_path / "lib"
    (lib / "thumbnails").mkdir(parents=True)
    (lib / "library.duckdb").write_bytes(b"DUCK" * 100)  # cut short while its tables were being made
    run("index", photo, "--library", lib, *FAKE, "-q")
    assert indexed_paths(lib) == [str(photo)]


def test_a_run_that_indexes_nothing_removes_the_folder_a_killed_run_made(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / UNFINISHED).write_text(json.dumps({"made_folder": True}))
    (lib / "thumbnails").mkdir()
    bad = tmp_path / "bad.jpg"
    bad.write_text("not a photo")
    run("index", bad, "--library", lib, *FAKE, "-q", ok=False)
    assert not lib.exists()


@pytest.mark.parametrize("case", ["user-file", "user-photo-in-thumbnails", "user-database", "user-file-with-marker"])
def test_a_folder_holding_the_users_files_is_refused_untouched(tmp_path, photo, case):
    lib = tmp_path / "lib"
    (lib / "thumbnails").mkdir(parents=True)
    if case == "user-file":
        (lib / "notes.txt").write_text("mine")
    elif case == "user-photo-in-thumbnails":
        (lib / "thumbnails" / "holiday.jpg").write_bytes(b"mine")
    elif case == "user-database":
        con = duckdb.connect(str(lib / "library.duckdb"))
        con.execute("CREATE TABLE accounts (id INTEGER)")
        con.close()
    else:
        (lib / UNFINISHED).write_text("{}")
        (lib / "holiday.mp4").write_bytes(b"mine")
    before = sorted((p.relative_to(lib), p.read_bytes() if p.is_file() else None) for p in lib.rglob("*"))
    result = run("index", photo, "--library", lib, *FAKE, "-q", ok=False)
    assert REFUSED in result.stderr and "Traceback" not in result.output
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1, result.stderr
    after = sorted((p.relative_to(lib), p.read_bytes() if p.is_file() else None) for p in lib.rglob("*"))
    assert after == before
