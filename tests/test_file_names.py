"""File names are bytes on disk: a name that is not UTF-8 (from an old camera's card, a Windows disk) is indexed beside
the folder's other files, listed and queried escaped, exported, served, removed and found unchanged again; the bytes
go in and come out of the library's tables exactly."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import EXAMPLES, HAMILTON, needs_data, run
from starlette.testclient import TestClient

from schemas.file_names import disk_path, stored_path
from serve.app import create_app

pytestmark = [needs_data, pytest.mark.slow]


def strings(value) -> set[str]:
    if isinstance(value, dict):
        return {s for v in value.values() for s in strings(v)}
    if isinstance(value, list):
        return {s for v in value for s in strings(v)}
    return {value} if isinstance(value, str) else set()


def test_the_tables_keep_any_name_exactly():
    for raw in (b"/videos/caf\xe9.mp4", b"/v/\xff\xfe/\xc3(.mp4", "/v/plain é 中.mp4".encode(), b"/ascii.mp4"):
        name = os.fsdecode(raw)
        kept = stored_path(name)
        kept.encode("utf-8")  # DuckDB's text takes it
        assert disk_path(kept) == name and os.fsencode(disk_path(kept)) == raw


def test_a_name_that_is_not_utf8_is_indexed_with_the_others(tmp_path):
    folder = tmp_path / "card"
    folder.mkdir()
    odd = os.fsdecode(os.fsencode(folder) + b"/caf\xe9 \xff.jpg")
    shutil.copyfile(EXAMPLES / "obama_small.jpg", odd)
    clip = os.fsdecode(os.fsencode(folder) + b"/clip\xe9.mp4")
    shutil.copyfile(HAMILTON, clip)
    shutil.copyfile(EXAMPLES / "knn_examples" / "train" / "biden" / "biden.jpg", folder / "biden.jpg")
    library = tmp_path / "library"
    assert "3 indexed" in run("index", folder, "--library", library, "--model", "fake-pixels").stdout
    assert "3 unchanged" in run("index", folder, "--library", library, "--model", "fake-pixels").stdout
    listing = run("list", "--library", library).stdout
    assert "caf\\udce9 \\udcff.jpg" in listing and "biden.jpg" in listing
    files = {f["path"] for f in json.loads(run("list", "--json", "--library", library).stdout)}
    assert odd in files  # JSON's escapes of the bytes read back as the name itself

    other_photo = EXAMPLES / "knn_examples" / "train" / "obama" / "obama.jpg"  # the same photo would be left out of its own hits
    hits = json.loads(run("query", other_photo, "--library", library, "--json", "--show-weak", "--no-pictures").stdout)
    assert odd in {h["video"] for h in hits}
    exported = tmp_path / "hits.csv"
    run("query", EXAMPLES / "lin-manuel-miranda.png", "--library", library, "--show-weak", "--no-pictures", "--export", exported)
    assert "clip\\udce9.mp4" in exported.read_text()  # shown escaped

    client = TestClient(create_app(library, cache_dir=tmp_path / "cache"))
    answer = client.get("/api/videos")
    assert answer.status_code == 200 and odd in strings(answer.json())  # JSON's escapes of the bytes, as --json gives them
    page = client.get("/videos")
    assert page.status_code == 200 and "caf\\udce9" in page.text

    assert "removed" in run("remove", odd, "--library", library).stdout
    assert {f["path"] for f in json.loads(run("list", "--json", "--library", library).stdout)} == {str(folder / "biden.jpg"), clip}
