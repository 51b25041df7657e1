"""`people forget` in the fast tier (issue 51): the real CLI and web app on a library of the fake model, over clips the
tests make (faces framed for the fake detector). A is on two clips, B on one; A is forgotten: the record keeps an id and
counts, no listing, query, page or file of the library holds A afterwards, `--json` prints what the web's forget
answers, and hiding everyone in a clip that held A analyses it again and hides A's face all the same."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from clips import read_frames, write_clip
from conftest import run
from fake_model import FAKE_MODEL
from PIL import Image
from starlette.testclient import TestClient
from test_exports_fast import LOSSLESS, picture

from serve.app import create_app


@pytest.fixture
def library(tmp_path) -> dict:
    """stage.mp4: A from the start to 2 s, B from 2.4 s; solo.mp4: A from 1 s to 3 s; a photo of each; the library of
    both clips with the fake model, people grouped."""
    stage = write_clip(tmp_path / "stage.mp4", (picture(0, [("a", 20)] if i < 50 else [("b", 150)] if i >= 60 else [], i)
                                                for i in range(100)), fps=25, **LOSSLESS)
    solo = write_clip(tmp_path / "solo.mp4", (picture(1, [("a", 100)] if 25 <= i < 75 else [], i) for i in range(100)),
                      fps=25, **LOSSLESS)
    photos = {}
    for who, x in (("a", 120), ("b", 60)):
        photos[who] = tmp_path / f"{who}.png"
        Image.fromarray(picture(2, [(who, x)])).save(photos[who])
    lib = tmp_path / "library"
    run("index", stage, solo, "--library", lib, "--model", FAKE_MODEL, "-q")
    run("people", "--library", lib)
    return {"stage": stage, "solo": solo, "photos": photos, "library": lib}


def people_of(lib: Path) -> list[dict]:
    return json.loads(run("people", "--library", lib, "--unlisted", "--json").stdout)


def best_track(lib: Path, photo: Path) -> tuple[int, str]:
    """The track a photo finds first, and its video's file name."""
    hits = json.loads(run("query", photo, "--library", lib, "-k", "1", "--show-weak", "--json").stdout)
    return hits[0]["track_id"], Path(hits[0]["video"]).name


def test_a_forgotten_person_leaves_every_listing_query_page_and_file(library, tmp_path):
    lib = library["library"]
    a_track, _ = best_track(lib, library["photos"]["a"])
    (a,) = [p for p in people_of(lib) if a_track in p["tracks"]]
    assert len(a["tracks"]) == 2  # A on both clips, one person
    run("people", "name", a["id"], "Ada", "--library", lib)
    said = run("people", "forget", "Ada", "--yes", "--library", lib, "--json")
    record = json.loads(said.stdout)
    assert record["forgotten"]["person_id"] == a["id"] and record["forgotten"]["tracks"] == 2
    assert record["forgotten"]["name"] in (None, "")  # the name goes, unless --keep-name
    assert "Ada" not in said.stdout
    assert all(p["id"] != a["id"] and not set(p["tracks"]) & set(a["tracks"]) for p in people_of(lib))
    hits = json.loads(run("query", library["photos"]["a"], "--library", lib, "-k", "5", "--show-weak", "--json").stdout)
    assert not {h["track_id"] for h in hits} & set(a["tracks"])
    assert record["found"] == []  # nothing of A left in the library folder
    client = TestClient(create_app(lib, cache_dir=tmp_path / "cache"))
    assert client.get(f"/people/{a['id']}").status_code == 404
    listing = client.get("/people")
    assert listing.status_code == 200 and f'href="/people/{a["id"]}"' not in listing.text and "Ada" not in listing.text
    for path in lib.rglob("*"):  # nor the name in any file of the library
        assert not path.is_file() or b"Ada" not in path.read_bytes(), path


def test_hiding_everyone_after_a_forget_hides_the_forgotten_face_too(library, tmp_path):
    lib = library["library"]
    a_track, video = best_track(lib, library["photos"]["a"])
    assert video in ("stage.mp4", "solo.mp4")
    (a,) = [p for p in people_of(lib) if a_track in p["tracks"]]
    run("people", "forget", str(a["id"]), "--yes", "--library", lib)
    out = tmp_path / "hidden.mp4"
    said = json.loads(run("redact", library["stage"], "--everyone", "--library", lib, "--out", out, "--style", "box",
                          "--json").stdout)
    assert not said["analysis"].startswith("the library"), said["analysis"]  # analysed again: A still shows in it
    frames = read_frames(out)
    for n in (10, 30, 80):  # A at 0-2 s (frames 0-49), B from 2.4 s (60-99): each face boxed black
        x = 20 + n // 2 if n < 50 else 150 + n // 2
        face = frames[n][70:150, x + 10:x + 70]
        assert np.asarray(face).max() < 40, f"frame {n}: a face left in view"
