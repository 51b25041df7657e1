"""People a person can curate: quality gates before a track joins a person, persons listed from two tracks, the
inbox, moving a track in one step, "are these the same person?" answers that stick, hidden people hidden on every
page, `query --person` best first with tiers, photos and videos apart; the same in the web app."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import AMY_DIR, FACES, HAMILTON, library_db, needs_data, run
from starlette.testclient import TestClient

from headsearch.evaluation.thresholds import thresholds_for
from headsearch.people.quality import QualityGates
from headsearch.store.library import Library
from headsearch.store.rows import TrackQualityRow
from serve.app import create_app
from serve.guard import CSRF_HEADER

pytestmark = [needs_data, pytest.mark.slow]

AMY = [AMY_DIR / f"amy{i}.png" for i in (1, 2, 3)]
RAJ = [FACES / "raj" / f"raj{i}.png" for i in (1, 2, 3)]


def people_json(library: Path, *extra) -> list[dict]:
    return json.loads(run("people", "--library", library, "--json", *extra).stdout)


def inbox_json(library: Path) -> list[dict]:
    return json.loads(run("people", "inbox", "--library", library, "--json").stdout)


def tracks_of(library: Path, path: Path) -> list[int]:
    with library_db(library) as con:
        return [r[0] for r in con.execute("select t.id from tracks t join videos v on v.id = t.video_id where v.path = ? order by t.id",
                                          [str(path)]).fetchall()]


def blurred_track(library: Path) -> int:
    """The track of the blurred copy of amy1.png (made beside the first library; copies keep its path)."""
    with library_db(library) as con:
        (track,) = con.execute("select t.id from tracks t join videos v on v.id = t.video_id where v.path like '%/amy1-blurred.png'").fetchone()
    return track


def owner(people: list[dict], track: int) -> dict | None:
    return next((p for p in people if track in p["tracks"]), None)


@pytest.fixture(scope="module")
def photos_library(tmp_path_factory) -> Path:
    """Three photos of Amy, three of Raj, one of Amy blurred and darkened past the sharpness gate (a face still found),
    and the hamilton clip."""
    root = tmp_path_factory.mktemp("curation")
    blurred = root / "amy1-blurred.png"
    cv2.imwrite(str(blurred), (cv2.GaussianBlur(cv2.imread(str(AMY[0])), (0, 0), 4) * 0.4).astype("uint8"))
    library = root / "library"
    run("index", *AMY, *RAJ, blurred, HAMILTON, "--library", library, "-q")
    run("people", "--library", library)
    return library


@pytest.fixture()
def library(photos_library, tmp_path) -> Path:
    copy = tmp_path / "library"
    shutil.copytree(photos_library, copy)
    return copy


def test_gates_are_the_measured_ones_in_order():
    gates = QualityGates()
    good = TrackQualityRow(track_id=1, face_px=120, sharpness=300, face_score=0.99, faces=5, photo=False)
    assert gates.reason(good) is None
    from dataclasses import replace
    cases = {"no_face": replace(good, faces=0), "small_face": replace(good, face_px=gates.min_face_px - 1),
             "blurred": replace(good, sharpness=gates.min_sharpness - 1), "unsure_face": replace(good, face_score=gates.min_face_score - 0.01),
             "glimpse": replace(good, faces=1)}
    assert {why: gates.reason(row) for why, row in cases.items()} == {why: why for why in cases}
    assert gates.reason(replace(good, faces=1, photo=True)) is None  # a photo is one sighting by nature
    assert gates.reason(replace(good, sharpness=-1)) is None  # an unreadable thumbnail says nothing
    assert "sharpness 24 < 25" in gates.describe(replace(good, sharpness=24))


def test_blurred_heads_wait_in_the_inbox_and_persons_are_listed_from_two_tracks(library):
    everyone = people_json(library, "--unlisted")
    listed = people_json(library)
    assert set(listed[0]) == {"id", "name", "hidden", "listed", "tracks", "videos", "photos", "looks", "references"}
    amy = {tuple(sorted(owner(everyone, tracks_of(library, f)[0])["tracks"])) for f in AMY}
    assert len(amy) == 1, "Amy's three sharp photos are one person"
    blurred = blurred_track(library)
    waiting = {t["track_id"]: t for t in inbox_json(library)}
    assert waiting[blurred]["reason"] == "blurred" and owner(everyone, blurred) is None  # the gate holds it back...
    assert waiting[blurred]["nearest"]["id"] == owner(everyone, tracks_of(library, AMY[0])[0])["id"]  # ...beside whom it is like
    assert all(len(p["tracks"]) >= 2 or p["name"] for p in listed) and all(p["listed"] for p in listed)
    alone = [p for p in everyone if not p["listed"]]
    assert alone and all(len(p["tracks"]) == 1 for p in alone)
    assert {t["track_id"] for t in waiting.values() if t["reason"] == "alone"} == {p["tracks"][0] for p in alone}
    for p in listed:  # photos and videos apart
        assert all(f.endswith(".png") for f in p["photos"]) and all(f.endswith(".mp4") for f in p["videos"])
    text = run("people", "--library", library)
    assert "tracks in the inbox" in text.stderr and "photos" in text.stdout
    assert "blurred or dark (sharpness" in run("people", "inbox", "--library", library).stdout


def test_a_track_moves_in_one_step_and_stays(library):
    everyone = people_json(library, "--unlisted")
    blurred = blurred_track(library)
    raj = owner(everyone, tracks_of(library, RAJ[0])[0])
    amy = owner(everyone, tracks_of(library, AMY[0])[0])
    # From the inbox into Raj (wrongly), then on to Amy: one command each, the track leaves Raj for good.
    assert f"moved to person {raj['id']}" in run("people", "move", blurred, "--to", raj["id"], "--library", library).stdout
    assert blurred in owner(people_json(library), blurred)["tracks"] and owner(people_json(library), blurred)["id"] == raj["id"]
    out = run("people", "move", blurred, "--to", amy["id"], "--library", library).stdout
    assert f"(from person {raj['id']})" in out
    for _ in range(2):  # grouping again (and again) keeps it where it was put
        run("people", "--library", library)
        assert owner(people_json(library), blurred)["id"] == amy["id"]
    assert blurred not in {t["track_id"] for t in inbox_json(library)}
    bad = run("people", "move", blurred, "--to", 99999, "--library", library, ok=False)
    assert bad.exit_code != 0 and "no person with id 99999" in bad.stderr and "Traceback" not in bad.output
    bad = run("people", "move", 99999, "--to", amy["id"], "--library", library, ok=False)
    assert bad.exit_code != 0 and "no track 99999" in bad.stderr
    assert owner(people_json(library), blurred)["id"] == amy["id"]  # nothing changed by the bad ones


def test_same_person_answers_stick(library):
    listed = people_json(library)
    amy = owner(listed, tracks_of(library, AMY[0])[0])
    raj = owner(listed, tracks_of(library, RAJ[0])[0])
    # Asked about Amy and Raj with the bar at the floor, as if they were alike: "no" sticks across re-grouping.
    from headsearch.people.listing import merge_suggestions
    from headsearch.store.library import Library

    pair = {amy["id"], raj["id"]}
    assert any({s.a, s.b} == pair for s in merge_suggestions(Library.open(library), bar=-1.0))
    assert "kept apart" in run("people", "different", amy["id"], raj["id"], "--library", library).stdout
    run("people", "--library", library)
    assert not any({s.a, s.b} == pair for s in merge_suggestions(Library.open(library), bar=-1.0))
    run("people", "different", raj["id"], amy["id"], "--library", library)  # said twice: still one answer
    with library_db(library) as con:
        assert con.execute("select count(*) from person_pairs").fetchone()[0] == 1
    bad = run("people", "different", amy["id"], amy["id"], "--library", library, ok=False)
    assert bad.exit_code != 0 and "is person" in bad.stderr
    # "Yes" merges, for good.
    run("people", "same", amy["id"], raj["id"], "--library", library)
    run("people", "--library", library)
    merged = owner(people_json(library), tracks_of(library, RAJ[0])[0])
    assert merged["id"] == amy["id"] and set(amy["tracks"]) | set(raj["tracks"]) <= set(merged["tracks"])


def test_query_person_is_ranked_by_score_with_tiers(library):
    amy = owner(people_json(library), tracks_of(library, AMY[0])[0])
    hits = json.loads(run("query", "--person", str(amy["id"]), "--library", library, "--json", "--no-pictures").stdout)
    assert [h["track_id"] for h in hits] and {h["track_id"] for h in hits} == set(amy["tracks"])
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True), scores
    assert all(h["tier"] in ("same_look", "other_look", "other_person") for h in hits)
    text = run("query", "--person", str(amy["id"]), "--library", library, "--no-pictures").stdout
    assert "same_look" in text or "other_look" in text


def track_means(library: Path, tracks: list[int]) -> dict[str, dict[int, np.ndarray]]:
    """Each track's vector of each kind as people read it: the mean of its sightings with a face (all where none), unit."""
    rows: dict[str, dict[int, tuple[list, list]]] = {}
    with library_db(library) as con:
        for kind, track, face, blob in con.execute("select x.kind, x.track_id, o.face_visible, x.embedding from vectors x join observations o "
                                                   "on o.id = x.observation_id order by x.id").fetchall():
            if track in tracks:
                rows.setdefault(kind, {}).setdefault(track, ([], []))[0 if face else 1].append(np.frombuffer(blob, "<f4"))
    out: dict[str, dict[int, np.ndarray]] = {}
    for kind, by_track in rows.items():
        for track, (faces, others) in by_track.items():
            m = np.mean(faces or others, axis=0)
            out.setdefault(kind, {})[track] = m / np.linalg.norm(m)
    return out


def test_moments_are_each_track_scored_against_the_rest_of_the_person(library):
    """A person's moments come from the scorer search uses (`headsearch.evaluation.track_scores`), the person as the
    query: checked against the vectors in the database, each track's identity score is its mean similarity to the
    person's other tracks (and reference photos), its head score the mean to the main look's other tracks (else the
    photos'); a person of one track is that track, score 1, same look."""
    everyone = people_json(library, "--unlisted")
    amy = owner(everyone, tracks_of(library, AMY[0])[0])
    thresholds = thresholds_for(library, Library.open(library).model)

    def moments(person: dict) -> dict[int, dict]:
        hits = json.loads(run("query", "--person", str(person["id"]), "--library", library, "--json", "--no-pictures").stdout)
        for h in hits:
            assert h["tier"] == str(thresholds.tier(h["id_score"], h["head_score"], h["appearance_score"]))
        return {h["track_id"]: h for h in hits}

    means = track_means(library, amy["tracks"])
    ids, heads = means["id"], means["head"]
    main = [tr for tr in amy["looks"][0] if tr in heads]
    assert len(ids) == len(amy["tracks"]) >= 3
    for tr, h in moments(amy).items():
        others = [t for t in main if t != tr]
        assert h["id_score"] == pytest.approx(np.mean([ids[t] @ ids[tr] for t in ids if t != tr]), abs=1e-4)
        assert h["head_score"] == pytest.approx(np.mean([heads[t] @ heads[tr] for t in others]) if others else 0.0, abs=1e-4)
        assert h["appearance_score"] is None and not h["matched_without_face"]  # every track of hers shows her face
    run("people", "add-photo", amy["id"], AMY_DIR / "amy4.png", "--library", library)
    with library_db(library) as con:
        ref_id, ref_head = (np.frombuffer(b, "<f4") for b in con.execute("select id_vector, head_vector from person_photos").fetchone())
    for tr, h in moments(amy).items():
        assert h["id_score"] == pytest.approx(np.mean([ids[t] @ ids[tr] for t in ids if t != tr] + [ref_id @ ids[tr]]), abs=1e-4)
        assert h["head_score"] == pytest.approx(float(ref_head @ heads[tr]), abs=1e-4)
    alone = next(p for p in everyone if not p["listed"] and len(p["tracks"]) == 1)
    (h,) = moments(alone).values()
    assert (h["score"], h["id_score"], h["head_score"], h["tier"]) == (1.0, 1.0, 1.0, "same_look")


def _client(library: Path, tmp_path: Path) -> TestClient:
    client = TestClient(create_app(library, cache_dir=tmp_path / "cache"))
    client.headers["origin"] = str(client.base_url).rstrip("/")
    client.headers[CSRF_HEADER] = client.get("/api/csrf").json()["token"]
    return client


def test_web_inbox_move_pick_merge_and_hidden_everywhere(library, tmp_path):
    client = _client(library, tmp_path)
    blurred = blurred_track(library)
    inbox = client.get("/api/inbox").json()
    assert blurred in {t["track_id"] for t in inbox["tracks"]} and inbox["total"] == len(inbox_json(library))
    page = client.get("/inbox").text
    assert f'action="/tracks/{blurred}/move"' in page and "blurred or dark" in page
    listed = client.get("/api/people").json()["people"]
    amy = owner(listed, tracks_of(library, AMY[0])[0])
    raj = owner(listed, tracks_of(library, RAJ[0])[0])
    # Move from the inbox in one step.
    r = client.post(f"/tracks/{blurred}/move", data={"person": amy["id"], "back": "/inbox"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/inbox"
    assert blurred in client.get(f"/api/people/{amy['id']}").json()["person"]["tracks"]
    assert blurred not in {t["track_id"] for t in client.get("/api/inbox").json()["tracks"]}
    assert client.post(f"/api/tracks/{blurred}/move", data={"person": 99999}).status_code == 404
    # Merge by picking: the person page offers the others to pick, most alike first, no typed id.
    person = client.get(f"/api/people/{amy['id']}").json()
    assert raj["id"] in [c["id"] for c in person["merge_choices"]] and amy["id"] not in [c["id"] for c in person["merge_choices"]]
    html = client.get(f"/people/{amy['id']}").text
    assert '<select name="other"' in html and f'<option value="{raj["id"]}">' in html
    moments = [m["score"] for m in person["moments"]]
    assert moments == sorted(moments, reverse=True) and all(m["tier"] for m in person["moments"])
    # "No, not the same person" from the web sticks; it is never asked again.
    assert client.post(f"/api/people/{amy['id']}/different", data={"other": raj["id"]}).json()["ok"]
    with library_db(library) as con:
        assert con.execute("select person_a, person_b from person_pairs").fetchall() == [tuple(sorted((amy["id"], raj["id"])))]
    # Hidden people are hidden on the people page and on video pages too.
    hamilton = next(p for p in client.get("/api/people?all=1").json()["people"] if str(HAMILTON) in p["videos"])
    client.post(f"/api/people/{hamilton['id']}/hide", data={"hidden": "1"})
    assert hamilton["id"] not in [p["id"] for p in client.get("/api/people").json()["people"]]
    video_id = client.get(f"/api/tracks/{hamilton['tracks'][0]}").json()["track"]["video_id"]
    video = client.get(f"/api/videos/{video_id}").json()
    assert hamilton["id"] not in [p["id"] for p in video["people"]] and video["hidden_tracks"] == len(hamilton["tracks"])
    shown = {t["id"] for p in video["people"] for t in p["tracks"]}
    assert not shown & set(hamilton["tracks"])
    assert f'href="/people/{hamilton["id"]}"' not in client.get(f"/videos/{video_id}").text


def test_videos_page_by_folder_paged_and_searched(library, tmp_path):
    client = _client(library, tmp_path)
    every = client.get("/api/videos").json()
    assert every["total"] == 8 and every["pages"] == 1
    assert [f["folder"] for f in every["folders"]] == sorted(f["folder"] for f in every["folders"])  # grouped by folder, in order
    assert {f["folder"] for f in every["folders"]} >= {str(AMY_DIR), str(HAMILTON.parent)}
    paged = [client.get(f"/api/videos?per_page=3&page={n}").json() for n in (1, 2, 3)]
    assert [p["pages"] for p in paged] == [3, 3, 3] and [len(p["videos"]) for p in paged] == [3, 3, 2]
    assert sorted(v["id"] for p in paged for v in p["videos"]) == sorted(v["id"] for v in every["videos"])
    assert 'href="/videos?page=2&amp;q=&amp;kind=all&amp;per_page=3"' in client.get("/videos?per_page=3").text
    # By file name, by kind, by a person's name.
    assert {v["name"] for v in client.get("/api/videos?q=AMY").json()["videos"]} == {"amy1.png", "amy2.png", "amy3.png", "amy1-blurred.png"}
    assert {v["kind"] for v in client.get("/api/videos?kind=image").json()["videos"]} == {"image"}
    raj = owner(client.get("/api/people").json()["people"], tracks_of(library, RAJ[0])[0])
    client.post(f"/api/people/{raj['id']}/name", data={"name": "Rajesh Koothrappali"})
    found = client.get("/api/videos?q=koothra").json()
    assert {v["path"] for v in found["videos"]} == {str(f) for f in RAJ} and [p["id"] for p in found["people"]] == [raj["id"]]
    assert client.get("/api/videos?kind=audio").status_code == 400


def test_reference_photos_of_a_person(library, tmp_path):
    everyone = people_json(library, "--unlisted")
    amy = owner(everyone, tracks_of(library, AMY[0])[0])
    alone = next(p for p in everyone if not p["listed"])
    before = json.loads(run("query", "--person", str(amy["id"]), "--library", library, "--json", "--no-pictures").stdout)
    out = run("people", "add-photo", amy["id"], AMY_DIR / "amy4.png", "--library", library).stdout
    assert f"of person {amy['id']}" in out
    (photo,) = json.loads(run("people", "photos", amy["id"], "--library", library, "--json").stdout)
    assert photo["path"] == str(AMY_DIR / "amy4.png") and photo["face_visible"] and Path(photo["crop"]).is_file()
    # The moments are scored against the reference photo too: the same tracks, other scores, best first.
    after = json.loads(run("query", "--person", str(amy["id"]), "--library", library, "--json", "--no-pictures").stdout)
    assert {h["track_id"] for h in after} == {h["track_id"] for h in before}
    assert [h["score"] for h in after] != [h["score"] for h in before]
    assert [h["score"] for h in after] == sorted((h["score"] for h in after), reverse=True)
    # A person of one track with a reference photo is listed; the photo shows on the person page.
    run("people", "add-photo", alone["id"], RAJ[0], "--library", library)
    assert alone["id"] in [p["id"] for p in people_json(library)]
    client = _client(library, tmp_path)
    page = client.get(f"/api/people/{amy['id']}").json()
    assert [r["id"] for r in page["references"]] == [photo["id"]]
    assert not {c["track_id"] for c in page["found_by_photos"]} & set(amy["tracks"])
    # Searched with its reference photo, the library gives back a track of Amy's that was split off her, with a move.
    (amy3,) = tracks_of(library, AMY[2])
    run("people", "split", amy["id"], amy3, "--library", library)
    page = client.get(f"/api/people/{amy['id']}").json()
    assert amy3 in [c["track_id"] for c in page["found_by_photos"]]
    assert all(c["tier"] in ("same_look", "other_look") for c in page["found_by_photos"])
    assert f'action="/tracks/{amy3}/move"' in client.get(f"/people/{amy['id']}").text
    assert f'src="/person-photos/{photo["id"]}.jpg"' in client.get(f"/people/{amy['id']}").text
    r = client.get(f"/person-photos/{photo['id']}.jpg")
    assert r.status_code == 200 and r.headers["content-type"] == "image/jpeg" and r.content[:2] == b"\xff\xd8"
    assert client.get("/person-photos/99999.jpg").status_code == 404
    # Bad input: one line each, nothing kept.
    blank = tmp_path / "blank.png"
    cv2.imwrite(str(blank), (cv2.imread(str(AMY[0])) * 0 + 128).astype("uint8"))
    for args, message in [((amy["id"], blank), "no face found"), ((99999, AMY[1]), "no person with id 99999"),
                          ((amy["id"], AMY_DIR / "amy4.png"), "already a reference photo"),
                          ((amy["id"], tmp_path / "missing.png"), "missing.png")]:
        bad = run("people", "add-photo", *args, "--library", library, ok=False)
        assert bad.exit_code != 0 and message in bad.stderr and "Traceback" not in bad.output, (args, bad.output)
        assert len(bad.stderr.strip().splitlines()) == 1
    assert len(json.loads(run("people", "photos", amy["id"], "--library", library, "--json").stdout)) == 1
    run("people", "remove-photo", amy["id"], photo["id"], "--library", library)
    assert json.loads(run("people", "photos", amy["id"], "--library", library, "--json").stdout) == []
    assert not Path(photo["crop"]).exists()
