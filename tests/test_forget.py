"""`headsearch people forget PERSON` (issue 40): the person's tracks, sightings, vectors, thumbnails, pictures, reference
photos, name and corrections gone in one step; afterwards their photo finds nothing, they are in no listing or page,
and no file of the library holds their vectors (read byte for byte, the database's file and every vector index, in
memory and in on-disk segments); a kill -9 during it leaves the library as before or as after, never between; the
web page's "forget" asks for the name first."""
from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from conftest import EXAMPLES, FACES, HAMILTON, library_db, needs_data, query_json, run
from starlette.testclient import TestClient
from test_trust import _read_only

from headsearch.store.library import Library
from serve.app import create_app
from serve.guard import CSRF_HEADER

pytestmark = [needs_data, pytest.mark.slow]

import fault_kill as fault  # noqa: E402 - tests/fault_kill.py: the real command in a process of its own, and its kill

MIRANDA = EXAMPLES / "lin-manuel-miranda.png"
LACAMOIRE = EXAMPLES / "alex-lacamoire.png"
NAME = "Lin-Manuel Miranda"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> tuple[Path, int, int]:
    """The hamilton clip and two group photos, people grouped, Miranda's person named, given his reference photo and
    a "different" answer about another person; (the library, his person id, the track his photo finds best)."""
    library = tmp_path_factory.mktemp("forget") / "library"
    run("index", HAMILTON, FACES / "bbt1.jpg", FACES / "bbt2.jpg", "--library", library, "--quiet")
    people = json.loads(run("people", "--library", library, "--json", "--unlisted").stdout)
    best = query_json(library, MIRANDA, "--no-pictures")[0]["track_id"]
    person = next(p for p in people if best in p["tracks"])
    assert len(person["tracks"]) >= 2, person
    run("people", "name", person["id"], NAME, "--library", library)
    run("people", "add-photo", person["id"], MIRANDA, "--library", library)
    other = next(p for p in people if p["id"] != person["id"] and p["photos"])
    run("people", "different", person["id"], other["id"], "--library", library)
    return library, person["id"], best


def copy_of(prepared, folder: Path) -> Path:
    return Path(shutil.copytree(prepared[0], folder))


def their_vectors(library: Path, person_id: int) -> list[bytes]:
    """Every vector the library holds of a person: their tracks' (both kinds), their reference photos', their mean."""
    with library_db(library) as con:
        tracks = [r[0] for r in con.execute("select track_id from person_tracks where person_id = ?", [person_id]).fetchall()]
        vectors = [r[0] for r in con.execute("select embedding from vectors where track_id in (select unnest(?::BIGINT[]))",
                                             [tracks]).fetchall()]
        photos = [v for r in con.execute("select id_vector, head_vector from person_photos where person_id = ?", [person_id]).fetchall()
                  for v in r if v is not None]
        mean = [r[0] for r in con.execute("select centroid from people where id = ?", [person_id]).fetchall()]
    return [bytes(v) for v in vectors + photos + mean]


def holders(library: Path, vectors: list[bytes]) -> dict[str, int]:
    """Each file of the library folder holding any of the vectors (its first 32 bytes, float32 as stored), and how many."""
    found = {}
    for path in sorted(p for p in library.rglob("*") if p.is_file()):
        data = path.read_bytes()
        held = sum(v[:32] in data for v in vectors)
        if held:
            found[str(path.relative_to(library))] = held
    return found


def schema(library: Path) -> list:
    with library_db(library) as con:
        return sorted(con.execute("select sql from duckdb_tables() union all select sql from duckdb_indexes()").fetchall())


def people_of(library: Path) -> list[dict]:
    return json.loads(run("people", "--library", library, "--json", "--unlisted", "--all").stdout)


def track_ids(library: Path) -> set[int]:
    with library_db(library) as con:
        return {r[0] for r in con.execute("select id from tracks").fetchall()}


def forgotten(library: Path) -> list[dict]:
    return json.loads(run("people", "forgotten", "--library", library, "--json").stdout)


def assert_forgotten(library: Path, person_id: int, tracks: list[int], vectors: list[bytes], everyone_else: set[int]) -> None:
    """The person is gone: from every listing, the tables, the folder's files."""
    assert person_id not in {p["id"] for p in people_of(library)}
    assert not set(tracks) & {t["track_id"] for t in json.loads(run("people", "inbox", "--library", library, "--json").stdout)}
    assert track_ids(library) == everyone_else
    assert holders(library, vectors) == {}, "a file of the library still holds their vectors"
    assert not [t for t in tracks if (library / "thumbnails" / f"{t}.jpg").exists()]
    assert not list((library / "person-photos").glob("*.jpg"))
    assert not (library / ".forgetting").exists() and not (library / ".library.duckdb.forgetting").exists()


def test_forget_removes_the_person_and_every_copy_of_their_vectors(prepared, tmp_path):
    library = copy_of(prepared, tmp_path / "lib")
    pid = prepared[1]
    person = next(p for p in people_of(library) if p["id"] == pid)
    before_tracks, before_schema = track_ids(library), schema(library)
    alex = [h["track_id"] for h in query_json(library, LACAMOIRE, "--no-pictures")]
    assert {h["track_id"] for h in query_json(library, MIRANDA)} >= set(person["tracks"])  # his pictures made too
    vectors = their_vectors(library, pid)
    with library_db(library) as con:
        stored = con.execute("select count(*) from vectors where track_id in (select unnest(?::BIGINT[]))", [person["tracks"]]).fetchone()[0]
    assert stored >= 2 * len(person["tracks"]) and len(vectors) > stored  # both kinds a sighting, the photo's, the mean
    found = holders(library, vectors)  # the test sees them where they are: the database and both vector indexes
    assert {"library.duckdb", "vectors_id.faiss", "vectors_head.faiss"} <= set(found), found

    refused = run("people", "forget", NAME, "--library", library, ok=False)  # the input is not a terminal: --yes or nothing
    assert "--yes" in refused.output and len(refused.output.strip().splitlines()) == 1 and "Traceback" not in refused.output
    assert pid in {p["id"] for p in people_of(library)}
    assert "no person named" in run("people", "forget", "Nobody Here", "--yes", "--library", library, ok=False).output

    out = run("people", "forget", NAME.lower(), "--yes", "--library", library).stdout  # a name, as other commands take it
    assert out.startswith(f"forgot {NAME} (person {pid}:") and f"removed {len(person['tracks'])} tracks" in out, out
    assert query_json(library, MIRANDA) == []  # his photo finds nothing
    assert [h["track_id"] for h in query_json(library, LACAMOIRE, "--no-pictures")] == alex  # Alex Lacamoire is still found
    assert_forgotten(library, pid, person["tracks"], vectors, before_tracks - set(person["tracks"]))
    assert schema(library) == before_schema  # the database written again has the tables and indexes it had
    [record] = forgotten(library)
    assert record["person_id"] == pid and record["name"] is None and record["tracks"] == len(person["tracks"])
    assert record["reference_photos"] == 1 and record["corrections"] >= 1 and record["vectors"] == stored
    assert set(record) == {"id", "person_id", "name", "forgotten_at", "tracks", "sightings", "vectors", "thumbnails", "pictures",
                           "reference_photos", "corrections"}  # counts, never a vector or a place
    assert record["thumbnails"] == len(person["tracks"]) and record["pictures"] >= len(person["tracks"])
    assert "no person with id" in run("people", "forget", str(pid), "--yes", "--library", library, ok=False).output
    # Ids are never reused: a file indexed now numbers its tracks after the forgotten ones.
    run("index", FACES / "amy" / "amy1.png", "--library", library, "--quiet")
    assert min(track_ids(library) - before_tracks) > max(before_tracks)


def test_forget_writes_on_disk_segments_again_without_their_vectors(prepared, tmp_path, monkeypatch):
    library = copy_of(prepared, tmp_path / "lib")
    pid = prepared[1]
    monkeypatch.setenv("HEADSEARCH_VECTOR_MEMORY", "0")  # every vector kind in on-disk segments
    lib = Library.open(library, read_only=False)
    with lib.writer_lock():
        lib.load_indexes()
        lib.save_indexes()  # a writer's save moves them to segments past the budget, as an index run's does
    assert (library / "vectors_id.segments" / "state.json").is_file() and not (library / "vectors_id.faiss").exists()
    tracks = next(p for p in people_of(library) if p["id"] == pid)["tracks"]
    kept = next(t for t in tracks if t != prepared[2])
    run("people", "not", kept, "--library", library)  # another track of his is "not him": it waits in the inbox, likely his
    person = next(p for p in people_of(library) if p["id"] == pid)
    assert kept not in person["tracks"] and person["tracks"]
    vectors = their_vectors(library, pid)
    found = holders(library, vectors)
    assert any(f.startswith("vectors_id.segments/") and f.endswith(".f32") for f in found), found  # raw vectors in a segment
    before = track_ids(library)
    r = run("people", "forget", str(pid), "--yes", "--library", library)
    assert f"note: 1 track in the inbox is likely theirs but not in the person, and not forgotten with them: tracks {kept} " in r.stderr
    assert (library / "vectors_id.segments" / "state.json").is_file()  # still in segments, written again
    assert [h["track_id"] for h in query_json(library, MIRANDA)] == [kept]  # only the track that was said not to be him
    assert_forgotten(library, pid, person["tracks"], vectors, before - set(person["tracks"]))


def test_forget_is_refused_while_an_index_run_writes_the_library(prepared, tmp_path):
    library = copy_of(prepared, tmp_path / "lib")
    with Library.open(library, read_only=False).writer_lock():
        r = run("people", "forget", NAME, "--yes", "--library", library, ok=False)
    assert "another headsearch run is indexing this library" in r.output and len(r.output.strip().splitlines()) == 1
    assert prepared[1] in {p["id"] for p in people_of(library)}


def test_a_read_only_library_says_so_in_one_line(prepared, tmp_path):
    made = _read_only(copy_of(prepared, tmp_path / "lib"))
    if made is None:
        pytest.skip("cannot make a folder read-only here (no bind mount, no chattr)")
    ro, undo = made
    try:
        r = run("people", "forget", NAME, "--yes", "--library", ro, ok=False)
        assert "the library is read-only here" in r.output and len(r.output.strip().splitlines()) == 1, r.output
        client = TestClient(create_app(ro, cache_dir=tmp_path / "cache"), raise_server_exceptions=False)
        token = client.get("/api/csrf").json()["token"]
        r = client.post(f"/api/people/{prepared[1]}/forget", json={"confirm": NAME},
                        headers={"origin": "http://testserver", CSRF_HEADER: token})
        assert r.status_code == 503 and "the library is read-only here" in r.json()["error"], r.text
        assert prepared[1] in {p["id"] for p in client.get("/api/people?all=1").json()["people"]}
    finally:
        undo()


def test_a_kill_during_forget_leaves_the_library_as_before_or_as_after(prepared, tmp_path):
    pid = prepared[1]
    vectors = their_vectors(prepared[0], pid)
    with library_db(prepared[0]) as con:
        tracks = sorted(r[0] for r in con.execute("select track_id from person_tracks where person_id = ?", [pid]).fetchall())
    everyone = track_ids(prepared[0])

    def forget_in_a_process(library: Path, kill_after: float | None) -> tuple[int, list[float]]:
        """Run `people forget` in a process of its own, killed (SIGKILL) `kill_after` seconds after it wrote its marker;
        (its exit status, the seconds from its marker to the rename of the database and to the marker's removal, as
        far as it got)."""
        tag = uuid.uuid4().hex
        marker, database = library / ".forgetting", library / "library.duckdb"
        inode = database.stat().st_ino
        proc = subprocess.Popen(fault.command("people", "forget", pid, "--yes", "--library", library), env=fault.environment(tag),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=fault.HERE)
        try:
            seen, moments = None, []
            while proc.poll() is None:
                now = time.monotonic()
                if seen is None:
                    seen = now if marker.exists() else None
                elif kill_after is not None and now - seen >= kill_after:
                    proc.send_signal(signal.SIGKILL)
                    break
                elif len(moments) == 0 and database.stat().st_ino != inode:
                    moments.append(now - seen)  # renamed: the person is gone
                elif len(moments) == 1 and not marker.exists():
                    moments.append(now - seen)  # finished
                time.sleep(0.001)
            return proc.wait(timeout=60), moments
        finally:
            if proc.poll() is None:
                proc.kill()
            fault.kill_all(fault.tagged_processes(tag))

    code, (renamed, finished) = forget_in_a_process(copy_of(prepared, tmp_path / "clean"), None)  # the moments of a whole run
    assert code == 0 and 0 < renamed < finished
    rng = random.Random(40)
    kills = [rng.uniform(0, renamed), rng.uniform(renamed, finished), rng.uniform(0, finished)]  # before, after the rename, either
    outcomes = []
    for trial, kill_after in enumerate(kills):
        library = copy_of(prepared, tmp_path / f"killed{trial}")
        code, _ = forget_in_a_process(library, kill_after)
        assert code in (0, -signal.SIGKILL)
        with library_db(library) as con:  # the database itself, before anything opens the library: one or the other
            there = con.execute("select count(*) from people where id = ?", [pid]).fetchone()[0]
            theirs = con.execute("select count(*) from vectors where track_id in (select unnest(?::BIGINT[]))", [tracks]).fetchone()[0]
            records = con.execute("select count(*) from forgotten_people").fetchone()[0]
        assert (there, theirs > 0, records) in ((1, True, 0), (0, False, 1)), (there, theirs, records)
        listed = {p["id"]: p for p in people_of(library)}  # opens the library: a forgetting left unfinished is undone or finished
        if pid in listed:  # as before
            assert sorted(listed[pid]["tracks"]) == tracks
            assert track_ids(library) == everyone and forgotten(library) == []
            assert "library.duckdb" in holders(library, vectors)  # nothing of theirs was lost half way
            assert list((library / "person-photos").glob("*.jpg"))
            outcomes.append("before")
        else:  # as after
            assert_forgotten(library, pid, tracks, vectors, everyone - set(tracks))
            assert [r["person_id"] for r in forgotten(library)] == [pid]
            outcomes.append("after")


def test_the_person_page_forgets_once_the_name_is_typed(prepared, tmp_path):
    library = copy_of(prepared, tmp_path / "lib")
    pid = prepared[1]
    person = next(p for p in people_of(library) if p["id"] == pid)
    client = TestClient(create_app(library, cache_dir=tmp_path / "cache"))
    client.headers["origin"] = "http://testserver"
    token = client.get("/api/csrf").json()["token"]
    photo = {"photo": ("lmm.png", MIRANDA.read_bytes(), "image/png")}
    assert {h["track_id"] for h in client.post("/api/query", files=photo).json()} >= set(person["tracks"])  # indexes loaded here
    page = client.get(f"/people/{pid}").text
    assert f'action="/people/{pid}/forget"' in page and 'name="confirm"' in page
    r = client.post(f"/people/{pid}/forget", data={"confirm": "Lin", "csrf": token}, follow_redirects=False)
    assert r.status_code == 400 and "to forget this person: nothing was forgotten" in r.text and NAME in r.text
    r = client.post(f"/api/people/{pid}/forget", json={"confirm": NAME})  # no token
    assert r.status_code == 403
    assert client.get(f"/api/people/{pid}").status_code == 200
    r = client.post(f"/people/{pid}/forget", data={"confirm": f"  {NAME.upper()} ", "csrf": token}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/people"
    assert client.get(f"/api/people/{pid}").status_code == 404
    assert pid not in {p["id"] for p in client.get("/api/people?all=1").json()["people"]}
    assert all(client.get(f"/thumbnails/{t}.jpg").status_code == 404 for t in person["tracks"])
    assert client.get(f"/api/tracks/{person['tracks'][0]}").status_code == 404
    r = client.post("/api/query", files=photo)  # the app's own loaded indexes no longer hold him
    assert r.status_code == 200 and r.json() == []
    assert [row["name"] for row in forgotten(library)] == [None]  # an id and counts, no name (people forget --keep-name keeps it)
    r = client.post(f"/api/people/{pid}/forget", json={"confirm": NAME}, headers={CSRF_HEADER: token})
    assert r.status_code == 404
