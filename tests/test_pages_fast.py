"""The web app's pages in the fast tier (issue 51): Starlette's TestClient on the real app, over a library of the fake
model (`--model fake-pixels`) indexed from clips the tests make (faces framed for the fake detector, as in
test_exports_fast.py and test_forget_fast.py). Every page and its /api twin (videos, a video, people, a person, the
inbox, a track, the watch page and its file), a search by an uploaded photo, a comparison, a cast and a redaction as
jobs polled to their end (the redacted file fetched and looked at), a track moved from the inbox, a person named and a
person forgotten; bad input (an upload that is no photo, unknown ids, a comparison without bars) answered in one line
with its status.

The fake model has no measured bars, and compare, cast and redacting a person refuse to run without them (the test of
bad input shows it): the library gets its own thresholds.json, the file `bench accuracy --calibrate --library` writes,
with bars the test sets between what the fake model scores these faces: A against A about 1.0, A against B about 0.44
(a calibration on generated photos puts the bar among the A-B pairs themselves, so some of B's frames would pass as A)."""
from __future__ import annotations

import csv
import io
import json
import re
from html import unescape
from pathlib import Path

import fake_detector
import numpy as np
import pytest
from clips import read_frames, write_clip
from conftest import copy_of_library, finished_job, posting_client, query_json, run
from fake_model import FAKE_MODEL
from PIL import Image
from starlette.testclient import TestClient
from test_exports_fast import LOSSLESS, picture

from headsearch.evaluation.thresholds import write_thresholds
from headsearch.store.library import Library
from serve.app import create_app
from serve.guard import CSRF_HEADER

WAIT_S = 120.0  # a job on these 4 s clips takes about a second; a loaded machine may take longer, never this long
IDENTITY_BAR = 0.7  # between A against A (about 1.0) and A against B (about 0.44) as the fake model scores them
SAME_LOOK_BAR = 0.9


def a_face_at(n: int) -> int:
    """The left edge of A's face box on frame n of stage.mp4 (A from frame 0 to 49, at x 20, half a pixel a frame)."""
    return 20 + n // 2


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> dict:
    """stage.mp4: A from the start to 2 s, B from 2.4 s; solo.mp4: A from 1 s to 3 s (25 fps, 4 s each); a photo of A;
    the library of both clips with the fake model, its own bars, people grouped and A named Ada."""
    folder = tmp_path_factory.mktemp("pages-fast")
    stage = write_clip(folder / "stage.mp4", (picture(0, [("a", 20)] if i < 50 else [("b", 150)] if i >= 60 else [], i)
                                              for i in range(100)), fps=25, **LOSSLESS)
    solo = write_clip(folder / "solo.mp4", (picture(1, [("a", 100)] if 25 <= i < 75 else [], i) for i in range(100)),
                      fps=25, **LOSSLESS)
    photo = folder / "a.png"
    Image.fromarray(picture(2, [("a", 120)])).save(photo)
    lib = folder / "library"
    with fake_detector.installed():  # the module's fixture runs before the test's own fakes are in place
        run("index", stage, solo, "--library", lib, "--model", FAKE_MODEL, "-q")
        model = Library.open(lib).model
        write_thresholds(lib, {"far": 1e-3, "identity": IDENTITY_BAR, "same_look": SAME_LOOK_BAR, "model": model.name,
                               "version": model.version})
        run("people", "--library", lib)
        people = json.loads(run("people", "--library", lib, "--json").stdout)
        (ada,) = [p for p in people if len(p["videos"]) == 2]
        run("people", "name", ada["id"], "Ada", "--library", lib)
    return {"stage": stage, "solo": solo, "photo": photo, "library": lib, "folder": folder, "ada": ada["id"]}


@pytest.fixture(scope="module")
def client(media, tmp_path_factory) -> TestClient:
    return posting_client(create_app(media["library"], cache_dir=tmp_path_factory.mktemp("pages-cache")))


def video_ids(client: TestClient) -> dict[str, int]:
    return {v["name"]: v["id"] for v in client.get("/api/videos").json()["videos"]}


def both(client: TestClient, page: str) -> tuple[str, dict]:
    """A page's HTML and its /api twin's JSON, each checked to be what it says."""
    html, api = client.get(page), client.get("/api" + page)
    assert html.status_code == 200 and html.headers["content-type"].startswith("text/html"), (page, html.text[:300])
    assert api.status_code == 200 and api.headers["content-type"] == "application/json", (page, api.text[:300])
    return html.text, api.json()


def refused(answer, status: int, said: str) -> str:
    """An answer refused with `status` in one line that says `said` (JSON from /api, the error page otherwise)."""
    assert answer.status_code == status, (answer.status_code, answer.text[:300])
    if answer.headers["content-type"] == "application/json":
        line = answer.json()["error"]
    else:  # the error page: its status, then the line
        assert answer.headers["content-type"].startswith("text/html") and f"<h1>{status}</h1>" in answer.text
        (line,) = [unescape(m) for m in re.findall(r'<p class="error">(.*?)</p>', answer.text, re.S)]
    assert said in line and "\n" not in line and "Traceback" not in line, line
    return line


def photo_upload(path: Path) -> dict:
    return {"photo": (path.name, path.read_bytes(), "image/png")}


def test_the_library_pages_and_their_json_twins(client, media):
    home = client.get("/")
    assert home.status_code == 200 and 'name="photo"' in home.text and 'type="file"' in home.text  # the search form
    ids = video_ids(client)
    assert sorted(ids) == ["solo.mp4", "stage.mp4"]
    html, listing = both(client, "/videos")
    assert {v["name"]: v["tracks"] for v in listing["videos"]} == {"stage.mp4": 2, "solo.mp4": 1} and listing["total"] == 2
    assert "stage.mp4" in html and "solo.mp4" in html and f'href="/videos/{ids["stage.mp4"]}"' in html

    html, video = both(client, f"/videos/{ids['stage.mp4']}")
    assert video["video"]["name"] == "stage.mp4" and video["duration"] == 4.0 and len(video["shots"]) == 1
    tracks = {p["label"]: [(t["start"], t["end"]) for t in p["tracks"]] for p in video["people"]}
    assert tracks["Ada"] == [(0.0, pytest.approx(2.06, abs=0.1))]  # A on screen to 2 s
    (b_start, _), = [ranges[0] for label, ranges in tracks.items() if label != "Ada"]
    assert 2.4 <= b_start <= 2.7  # B from 2.4 s (the sample after)
    assert [p["label"] for p in video["redact"]["people"]][:1] == ["Ada"] and video["redact"]["styles"] == ["blur", "pixelate", "box"]
    assert "<h1>stage.mp4</h1>" in html and f'<a href="/people/{media["ada"]}">Ada</a>' in html
    cues = client.get(f"/videos/{ids['stage.mp4']}/who.vtt").text.splitlines()  # who is on screen, for the player
    assert cues[0] == "WEBVTT" and cues[3].startswith("00:00:00.000 --> 00:00:02.") and cues[4].startswith("Ada")

    html, people = both(client, "/people")
    (ada,) = [p for p in people["people"] if p["listed"]]
    assert (ada["id"], ada["label"], len(ada["tracks"])) == (media["ada"], "Ada", 2)
    assert sorted(Path(v).name for v in ada["videos"]) == ["solo.mp4", "stage.mp4"]
    assert people["inbox"] == 1 and f"the identity bar {IDENTITY_BAR:.3f} (calibrated at FAR 0.001" in people["thresholds"]
    assert f'href="/people/{ada["id"]}"' in html and "Ada" in html and f"the identity bar {IDENTITY_BAR:.3f}" in html

    html, person = both(client, f"/people/{ada['id']}")
    assert person["person"]["label"] == "Ada" and sorted(person["person"]["tracks"]) == sorted(ada["tracks"])
    moments = person["moments"]
    assert sorted(m["name"] for m in moments) == ["solo.mp4", "stage.mp4"]  # one moment a video, A's two tracks
    assert {m["name"]: m["start"] for m in moments} == {"stage.mp4": 0.0, "solo.mp4": pytest.approx(1.04, abs=0.1)}
    assert sorted(v["name"] for v in person["redact"]["videos"]) == ["solo.mp4", "stage.mp4"]
    assert f"/people/{ada['id']}/export.csv" in [e["href"] for e in person["exports"]]
    on_screen = {Path(t["video"]).name: t["seconds"] for t in person["screen_time"]}  # A's tracks: 0-2.06 s, 1.04-4 s
    assert on_screen == {"stage.mp4": pytest.approx(2.06, abs=0.1), "solo.mp4": pytest.approx(2.96, abs=0.1)}
    assert "<h1>Ada" in html and html.count('class="card"') == 2 and "Forget Ada" in html

    twin = client.get(f"/api/people/{ada['id']}/export").json()
    assert twin["person"] == "Ada" and sorted(Path(m["video"]).name for m in twin["moments"]) == ["solo.mp4", "stage.mp4"]
    export = client.get(f"/people/{ada['id']}/export.csv")
    assert export.status_code == 200
    rows = list(csv.DictReader(io.StringIO(export.text)))
    assert sorted(Path(r["video"]).name for r in rows) == ["solo.mp4", "stage.mp4"] and {r["person"] for r in rows} == {"Ada"}

    html, inbox = both(client, "/inbox")
    (waiting,) = inbox["tracks"]  # B: one track, too few to be listed
    assert waiting["name"] == "stage.mp4" and waiting["start"] == b_start and waiting["reason"] == "alone"
    assert "Inbox · 1 track" in html and "stage.mp4" in html and waiting["why"] in html

    html, track = both(client, f"/tracks/{waiting['track_id']}")
    assert track["track"]["id"] == waiting["track_id"] and track["sightings"] and track["person"]["label"] != "Ada"
    assert [c["track_id"] for c in track["more_like_this"]] and waiting["track_id"] not in [c["track_id"] for c in track["more_like_this"]]
    thumb = client.get(f"/thumbnails/{waiting['track_id']}.jpg")
    assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/jpeg" and thumb.content[:2] == b"\xff\xd8"


def test_the_watch_page_plays_the_file_indexed(client, media):
    """A moment's card on the person page links the watch page, which plays the file as indexed from the moment's start."""
    solo = video_ids(client)["solo.mp4"]
    (moment,) = [m for m in client.get(f"/api/people/{media['ada']}").json()["moments"] if m["name"] == "solo.mp4"]
    assert moment["watch"] == f"/watch/{solo}?start=1.040&end=4.000&track={moment['track_id']}"
    html, watch = both(client, moment["watch"])
    assert watch["video"]["name"] == "solo.mp4" and watch["track"] == moment["track_id"]
    assert watch["src"] == f"/media/{solo}" and watch["fragment"] == "#t=1.040,4.000" and watch["direct"] is True
    assert f'src="/media/{solo}' in html and "solo.mp4</a>" in html
    played = client.get(f"/media/{solo}")
    assert played.status_code == 200 and played.content == media["solo"].read_bytes()
    part = client.get(f"/media/{solo}", headers={"range": "bytes=0-99"})
    assert part.status_code == 206 and part.content == media["solo"].read_bytes()[:100]


def test_a_search_by_an_uploaded_photo(client, media):
    """/api/query answers what `query --json` prints; the page shows A's two moments (confident only), names the photo,
    and its export link gives those moments."""
    lib = media["library"]
    api = client.post("/api/query", files=photo_upload(media["photo"]), data={"k": "3", "show_weak": "1"})
    assert api.status_code == 200, api.text
    cli = query_json(lib, media["photo"], "-k", "3", "--show-weak")
    assert api.json() == cli
    assert [h["confident"] for h in cli] == [True, True, False]  # A's two tracks above the bar, then B's below it
    assert sorted(Path(h["video"]).name for h in cli[:2]) == ["solo.mp4", "stage.mp4"] and Path(cli[2]["video"]).name == "stage.mp4"
    page = client.post("/", files=photo_upload(media["photo"]), data={"k": "3", "csrf": client.headers[CSRF_HEADER]})
    assert page.status_code == 200, page.text[:300]
    assert page.text.count('class="card"') == 2 and "last: a.png" in page.text  # B, below the bar, is left out
    assert "solo.mp4" in page.text and "stage.mp4" in page.text and "below the identity threshold" in page.text
    key = re.search(r'href="/exports/([^".]+)\.csv"', page.text).group(1)
    rows = list(csv.DictReader(io.StringIO(client.get(f"/exports/{key}.csv").text)))
    assert sorted(Path(r["video"]).name for r in rows) == ["solo.mp4", "stage.mp4"]
    assert len(client.get(f"/api/exports/{key}").json()["moments"]) == 2


def test_bad_input_gets_one_line_and_its_status(client, media, tmp_path):
    ids = video_ids(client)
    notes = {"photo": ("notes.png", b"these are notes, not a photo\n" * 20, "image/png")}
    refused(client.post("/api/query", files=notes), 415, "not an image")
    refused(client.post("/", files=notes, data={"csrf": client.headers[CSRF_HEADER]}), 415, "not an image")
    refused(client.post("/api/query", files={"photo": ("empty.png", b"", "image/png")}), 400, "empty upload")
    refused(client.post("/api/compare", files=notes, data={"video_id": str(ids["stage.mp4"])}), 415, "not an image")
    for page, said in (("/people/4242", "no person 4242"), ("/videos/4242", "no video 4242"), ("/tracks/4242", "no track 4242"),
                       ("/watch/4242", "no video 4242"), ("/people/99999999999999999999", "is no id (ids are below 2^63)"),
                       ("/jobs/no-such-job", "no such redaction or comparison")):
        refused(client.get("/api" + page), 404, said)
        refused(client.get(page), 404, said)
    redact = f"/api/videos/{ids['stage.mp4']}/redact"
    refused(client.post(redact, json={"whom": "person", "style": "box"}), 400, "whom=person needs a person")
    refused(client.post(redact, json={"whom": "everyone", "style": "sparkle"}), 400, "sparkle")
    refused(client.post(redact, json={"whom": "person", "person": "4242"}), 404, "4242")
    refused(client.post(redact, json={"whom": "everyone", "margin": "wide"}), 400, "margin must be a number")
    # Without bars, compare cannot tell a person from another: refused at once, no job started.
    bare = copy_of_library(media["library"], tmp_path / "bare")
    (bare / "thresholds.json").unlink()
    unsure = posting_client(create_app(bare, cache_dir=tmp_path / "cache"))
    refused(unsure.post("/api/compare", files=photo_upload(media["photo"]), data={"video_id": str(ids["stage.mp4"])}), 400,
            "no thresholds for fake-pixels")
    assert not (tmp_path / "cache" / "jobs").exists()  # no job was started


def test_a_comparison_is_a_job_polled_to_the_entry_compare_json_gives(client, media):
    html, form = both(client, "/compare")  # the form: the library's videos to pick from
    stage = video_ids(client)["stage.mp4"]
    assert sorted(Path(v["path"]).name for v in form["videos"]) == ["solo.mp4", "stage.mp4"] and f'value="{stage}"' in html
    r = client.post("/api/compare", files=photo_upload(media["photo"]), data={"video_id": str(stage)})
    assert r.status_code == 202, r.text
    started = r.json()
    assert started["kind"] == "compare" and started["video"] == "stage.mp4" and started["page"] == f"/api/jobs/{started['id']}"
    job = finished_job(client, started["page"], WAIT_S)
    assert job["state"] == "done" and job["error"] is None, job
    assert job["frames_done"] == job["frames_total"] == 100, job["seen"]
    got = job["result"]
    cli = json.loads(run("compare", media["stage"], "--ref", media["photo"], "--library", media["library"], "--json").stdout)[0]
    assert {k: v for k, v in got.items() if k != "reference"} == {k: v for k, v in cli.items() if k != "reference"}
    assert {**got["reference"], "sources": None} == {**cli["reference"], "sources": None} and got["reference"]["sources"] == ["a.png"]
    # A to 2 s (the same person: another look, the head crop's background moved), then B, someone else: a drift at 2.6 s.
    assert [(s["tier"], s["start"]) for s in got["segments"]] == [("other_look", 0.0), ("other_person", 2.6)]
    assert got["verdict"] == "drift" and [d["time"] for d in got["drifts"]] == [2.6]
    assert got["thresholds"]["identity"] == IDENTITY_BAR
    page = client.post("/compare", files=photo_upload(media["photo"]), data={"video_id": str(stage), "csrf": client.headers[CSRF_HEADER]},
                       follow_redirects=False)
    assert page.status_code == 303 and re.fullmatch(r"/jobs/[A-Za-z0-9_-]{16}", page.headers["location"]), page.text
    key = page.headers["location"].rsplit("/", 1)[1]
    assert finished_job(client, f"/api/jobs/{key}", WAIT_S)["state"] == "done"
    done = client.get(f"/jobs/{key}").text
    assert 'class="compare-plot' in done and "stage.mp4" in done and "http-equiv" not in done and "drift" in done


def test_a_cast_is_a_job_polled_to_its_end(client, media):
    """The library's named people (Ada) as the cast over stage.mp4: Ada in the first 2 s, B nobody of the cast."""
    stage = video_ids(client)["stage.mp4"]
    r = client.post("/api/compare", data={"cast": "people", "video_id": str(stage)}, files={"clip": ("", b"", "video/mp4")})
    assert r.status_code == 202 and r.json()["kind"] == "cast", r.text
    job = finished_job(client, r.json()["page"], WAIT_S)
    assert job["state"] == "done", job
    got = job["result"]
    assert got["video"] == str(media["stage"]) and [c["character"] for c in got["characters"]] == ["Ada"]
    (seen,) = got["characters"][0]["appearances"]
    assert seen["start"] == 0.0 and seen["end"] == pytest.approx(2.08, abs=0.1) and seen["tier"] == "same_look"
    after = [f for f in got["frames"] if f["time"] >= 2.6]
    assert after and all(f["character"] is None and f["tier"] == "other_person" for f in after)  # B is nobody of the cast
    page = client.get(f"/jobs/{job['id']}").text
    assert "the cast" in page and "cast-plot" in page and "Ada" in page


def face_left(frame: np.ndarray, x: int) -> np.ndarray:
    """The inside of the face framed at x (its 80 x 100 box at y 60)."""
    return frame[70:150, x + 10:x + 70]


def test_a_redaction_is_a_job_whose_file_hides_the_person(client, media, tmp_path):
    """Ada hidden in stage.mp4 from the video page's form (as JSON from /api): the job is polled to its end, its result
    is what `redact --json` prints for the same run, and the file fetched hides A's face and spares B's."""
    stage = video_ids(client)["stage.mp4"]
    r = client.post(f"/api/videos/{stage}/redact", json={"whom": "person", "person": str(media["ada"]), "style": "box"})
    assert r.status_code == 202, r.text
    assert r.json()["kind"] == "redact" and r.json()["whom"] == "Ada"
    job = finished_job(client, r.json()["page"], WAIT_S)
    assert job["state"] == "done" and job["error"] is None, job
    got = job["result"]
    assert got["output"] == "stage.redacted.mp4" and got["frames"] == 100 and got["tracks"] == [
        {"track": got["tracks"][0]["track"], "who": "Ada", "why": f"a track of person {media['ada']} in the library"}]
    assert got["analysis"].startswith("the library") and got["frames_with_boxes"] == got["boxes"] >= 50
    out = tmp_path / "cli.mp4"
    cli = json.loads(run("redact", media["stage"], "--person", "Ada", "--library", media["library"], "--out", out, "--style", "box",
                         "--json").stdout)
    timing = {"seconds", "analysis_seconds", "line", "output", "audit", "preview"}
    assert {k: v for k, v in got.items() if k not in timing} == {k: v for k, v in cli.items() if k not in timing}

    fetched = client.get(job["file"])
    assert fetched.status_code == 200 and fetched.headers["content-type"] == "video/mp4"
    assert 'filename="stage.redacted.mp4"' in fetched.headers["content-disposition"]
    frames = read_frames(io.BytesIO(fetched.content))
    assert len(frames) == 100
    for n in (10, 30):
        assert face_left(frames[n], a_face_at(n)).max() < 40, f"frame {n}: A's face left in view"
    assert face_left(frames[80], 150 + 40).max() > 100  # B is not Ada: spared
    audit = client.get(job["audit"])
    assert audit.status_code == 200 and audit.headers["content-type"] == "application/json" and audit.json()
    sheet = client.get(f"/jobs/{job['id']}/sheet")
    assert sheet.status_code == 200 and sheet.content[:8] == b"\x89PNG\r\n\x1a\n"
    shown = client.get(f"/jobs/{job['id']}").text
    assert "hiding Ada" in shown and "Download stage.redacted.mp4" in shown and f'src="{job["file"]}"' in shown

    # The person page's form: their video chosen there, the job's page next.
    page = client.post(f"/people/{media['ada']}/redact", data={"video_id": str(video_ids(client)["solo.mp4"]), "style": "pixelate",
                                                               "csrf": client.headers[CSRF_HEADER]}, follow_redirects=False)
    assert page.status_code == 303, page.text[:300]
    key = page.headers["location"].rsplit("/", 1)[1]
    assert finished_job(client, f"/api/jobs/{key}", WAIT_S)["result"]["output"] == "solo.redacted.mp4"


def test_a_track_moved_from_the_inbox_and_a_person_named_and_hidden(media, tmp_path):
    """The inbox's form moves B's track into Ada and goes back to the inbox, now empty; the person page's forms name
    and hide a person; each shows on the pages after."""
    lib = copy_of_library(media["library"], tmp_path / "library")
    client = posting_client(create_app(lib, cache_dir=tmp_path / "cache"))
    (waiting,) = client.get("/api/inbox").json()["tracks"]
    csrf = client.headers[CSRF_HEADER]
    moved = client.post(f"/tracks/{waiting['track_id']}/move", data={"person": str(media["ada"]), "back": "/inbox", "csrf": csrf},
                        follow_redirects=False)
    assert moved.status_code == 303 and moved.headers["location"] == "/inbox"
    assert client.get("/api/inbox").json()["tracks"] == []
    ada = client.get(f"/api/people/{media['ada']}").json()
    assert waiting["track_id"] in ada["person"]["tracks"] and len(ada["moments"]) == 3
    named = client.post(f"/api/people/{media['ada']}/name", json={"name": "  Ada   Lovelace "})
    assert named.status_code == 200 and named.json() == {"ok": True, "id": media["ada"], "name": "Ada Lovelace"}
    assert "<h1>Ada Lovelace" in client.get(f"/people/{media['ada']}").text
    assert [p["label"] for p in client.get("/api/people").json()["people"]] == ["Ada Lovelace"]
    hid = client.post(f"/people/{media['ada']}/hide", data={"hidden": "1", "csrf": csrf}, follow_redirects=False)
    assert hid.status_code == 303 and client.get("/api/people").json()["people"] == []  # hidden: listed only on asking
    assert [(p["label"], p["hidden"]) for p in client.get("/api/people?all=1").json()["people"]] == [("Ada Lovelace", True)]
    assert client.post(f"/api/people/{media['ada']}/hide", json={"hidden": False}).json() == {"ok": True, "id": media["ada"], "hidden": False}
    again = client.post("/people/update", data={"csrf": csrf}, follow_redirects=False)  # the people page's "update"
    assert again.status_code == 303 and again.headers["location"] == "/people"
    assert client.post("/api/people/update", json={}).json()["summary"].startswith("0 new tracks")  # every track is in a person


def test_forgetting_a_person_from_the_web(media, tmp_path):
    """The person page's forget: refused in one line until the confirmation is their name; then the answer is the
    record `people forget --json` prints, the person's pages are gone, and so are the searches and jobs the app kept."""
    lib = copy_of_library(media["library"], tmp_path / "library")
    client = posting_client(create_app(lib, cache_dir=tmp_path / "cache"))
    ada = media["ada"]
    csrf = client.headers[CSRF_HEADER]
    page = client.post("/", files=photo_upload(media["photo"]), data={"csrf": csrf})
    key = re.search(r'href="/exports/([^".]+)\.csv"', page.text).group(1)  # a kept search that lists Ada's moments
    wrong = client.post(f"/people/{ada}/forget", data={"confirm": "Bob", "csrf": csrf})
    refused(wrong, 400, "type 'Ada' to forget this person: nothing was forgotten")
    assert client.get(f"/api/people/{ada}").status_code == 200
    r = client.post(f"/api/people/{ada}/forget", json={"confirm": " ada "})
    assert r.status_code == 200, r.text
    said = r.json()
    assert said["ok"] and said["forgotten"]["person_id"] == ada and said["forgotten"]["tracks"] == 2 and said["found"] == []
    assert said["forgotten"]["name"] in (None, "")
    refused(client.get(f"/people/{ada}"), 404, f"no person {ada}")
    listing = client.get("/people").text
    assert "Ada" not in listing and f'href="/people/{ada}"' not in listing
    assert client.get("/api/people").json()["people"] == []
    refused(client.get(f"/api/exports/{key}"), 404, "search again")
    assert "stage.mp4" in client.get("/videos").text  # the videos stay
