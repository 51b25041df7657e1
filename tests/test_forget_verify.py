"""`headsearch people forget --verify` (issue 50): after the rewrite every file under the library folder and the web
app's cache folder is read and searched for the person's vectors (float32 as stored, and float16), their pictures (by
digest) and their name; the summary says what was searched and that nothing was found, and the library keeps the
outcome (`forget_checks`). A copy of one vector planted in a stray file, or of a thumbnail in the app's cache, is found:
the command names the file and exits non-zero."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import copy_of_library, library_db, needs_data, run

pytestmark = [needs_data, pytest.mark.slow]

NAME = "Planted Person"


@pytest.fixture(scope="module")
def base(tmp_path_factory, hamilton_alone) -> tuple[Path, int]:
    """The hamilton clip indexed, people grouped, the person with the most tracks named: (the library, their id)."""
    library = copy_of_library(hamilton_alone, tmp_path_factory.mktemp("forget-verify") / "library")
    people = json.loads(run("people", "--library", library, "--json", "--unlisted").stdout)
    person = max(people, key=lambda p: (len(p["tracks"]), -p["id"]))
    run("people", "name", person["id"], NAME, "--library", library)
    return library, person["id"]


def one_vector(library: Path, person_id: int) -> bytes:
    with library_db(library) as con:
        return bytes(con.execute("select v.embedding from vectors v join person_tracks p on p.track_id = v.track_id "
                                 "where p.person_id = ? and v.kind = 'head' order by v.id limit 1", [person_id]).fetchone()[0])


def cache_of(library: Path) -> Path:
    from serve.media import cache_folder

    return cache_folder(library, json.loads((library / "manifest.json").read_text()).get("created_at", ""))


@pytest.fixture
def own_cache(tmp_path, monkeypatch) -> Path:
    """The app's cache under this test's folder ($XDG_CACHE_HOME)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg"


def test_verify_on_the_hamilton_clip_finds_nothing_and_says_what_it_searched(base, tmp_path, own_cache):
    library = copy_of_library(base[0], tmp_path / "lib")
    cache = cache_of(library)
    cache.mkdir(parents=True)
    (cache / "preview.txt").write_text("a file of the app's cache\n")
    files = sum(1 for p in library.rglob("*") if p.is_file())
    r = run("people", "forget", base[1], "--yes", "--verify", "--library", library)
    line = r.stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"searched (\d+) files \(([\d.,]+) MB\) under (.+) and (.+) for (\d+) traces of them \(vectors as float32 and "
                     r"float16, picture digests, name\): nothing found", line)
    assert m, r.stdout
    assert int(m.group(1)) >= files - 4 and m.group(3) == str(library) and m.group(4) == str(cache) and int(m.group(5)) > 10
    with library_db(library) as con:
        [(files_read, found, needles)] = con.execute("select files, found, needles from forget_checks").fetchall()
    assert (files_read, found, needles) == (int(m.group(1)), "", int(m.group(5)))


def test_verify_finds_a_planted_vector_and_a_planted_picture_and_exits_non_zero(base, tmp_path, own_cache):
    library = copy_of_library(base[0], tmp_path / "lib")
    vector = one_vector(library, base[1])
    (library / "stray.bin").write_bytes(b"\x00" * 1001 + vector + b"\x01" * 77)  # a copy of one vector, as stored
    cache = cache_of(library)
    cache.mkdir(parents=True)
    half = np.frombuffer(vector, "<f4").astype("<f2").tobytes()
    (cache / "halved.bin").write_bytes(b"\x02" * 13 + half)  # the same vector halved
    with library_db(library) as con:
        thumbnail = con.execute("select t.thumbnail from tracks t join person_tracks p on p.track_id = t.id where p.person_id = ? limit 1",
                                [base[1]]).fetchone()[0]
    shutil.copy(library / thumbnail, cache / "copy.jpg")  # one of their thumbnails, copied
    (cache / "notes.txt").write_text(f"seen: {NAME}\n")
    r = run("people", "forget", base[1], "--yes", "--verify", "--library", library, ok=False)
    assert r.exit_code == 1 and "Traceback" not in r.output
    found = r.stdout.strip().splitlines()[-1]
    assert ": FOUND in 4: " in found, found
    for said in (f"{library / 'stray.bin'}: a vector of theirs (float32)", f"{cache / 'halved.bin'}: a vector of theirs (float16)",
                 f"{cache / 'copy.jpg'}: a picture of theirs", f"{cache / 'notes.txt'}: their name"):
        assert said in found, (said, found)
    assert r.stderr.strip() == f"error: something of person {base[1]} is still there after the forgetting (above): remove those files"
    with library_db(library) as con:
        assert str(library / "stray.bin") in con.execute("select found from forget_checks").fetchone()[0]
    # without --verify the library folder alone is searched (the app's cache is not)
    again = copy_of_library(base[0], tmp_path / "lib2")
    r = run("people", "forget", base[1], "--yes", "--library", again)
    assert r.stdout.strip().splitlines()[-1].endswith(": nothing found") and str(cache) not in r.stdout
