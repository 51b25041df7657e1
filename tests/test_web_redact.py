"""The web app's Redact (issue 40): a job started from the video page's form or the person page's, or their /api twins,
followed to the end on its page, its file downloaded (the source's frame count, every head of the hamilton clip hidden)
and its audit trail read; bad input answered in one line; the files in the app's cache, the library's video untouched."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from clips import frame_times
from conftest import HAMILTON, finished_job, library_db, needs_data
from starlette.testclient import TestClient

from headsearch.basics.files import sha256_file
from serve.app import create_app
from serve.guard import CSRF_HEADER

pytestmark = [needs_data, pytest.mark.slow]

WAIT_S = 180.0  # a redaction of the 9 s clip takes seconds; a loaded machine may take longer, never this long


@pytest.fixture(scope="module")
def library(hamilton_library, tmp_path_factory) -> Path:
    lib = tmp_path_factory.mktemp("web-redact") / "library"
    shutil.copytree(hamilton_library, lib)
    return lib


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def client(library, cache) -> TestClient:
    client = TestClient(create_app(library, cache_dir=cache))
    client.headers["origin"] = str(client.base_url).rstrip("/")  # as the app's own pages post (tests/test_serve.py)
    client.headers[CSRF_HEADER] = client.get("/api/csrf").json()["token"]
    return client


def hamilton_id(library: Path) -> int:
    with library_db(library) as con:
        return con.execute(f"select id from videos where path = '{HAMILTON.resolve()}'").fetchone()[0]


def finished(client: TestClient, page: str) -> dict:
    return finished_job(client, page, WAIT_S)


def frame_count(path: Path) -> int:
    return len(frame_times(path))


def test_redact_everyone_through_the_api(client, library, cache, tmp_path):
    before = sha256_file(HAMILTON)
    vid = hamilton_id(library)
    r = client.post(f"/api/videos/{vid}/redact", json={"whom": "everyone", "style": "box", "verify": False})
    assert r.status_code == 202, r.text
    started = r.json()
    assert started["ok"] and started["page"] == f"/api/jobs/{started['id']}" and started["whom"] == "everyone"
    job = finished(client, started["page"])
    assert job["state"] == "done", job
    assert job["frames_total"] and job["frames_done"] == job["frames_total"] == job["result"]["frames"]
    assert any(state == "redacting" and 0 < done < total for state, done, total in job["seen"]) or len(job["seen"]) == 1
    # The file, offered for download: as many frames as the source, written in the app's cache.
    r = client.get(job["file"])
    assert r.status_code == 200 and r.headers["content-type"] == "video/mp4"
    assert r.headers["content-disposition"].startswith("attachment;") and "short_hamilton_clip.redacted.mp4" in r.headers["content-disposition"]
    out = tmp_path / "out.mp4"
    out.write_bytes(r.content)
    assert frame_count(out) == frame_count(HAMILTON) == job["result"]["frames"]
    assert [p.name for p in cache.rglob("*.redacted.mp4")] == ["short_hamilton_clip.redacted.mp4"]
    # The audit trail: every head of the clip, in the frames they are in.
    audit = client.get(job["audit"]).json()
    assert audit["whom"] == {"everyone": True} and audit["style"] == "box" and audit["source"] == str(HAMILTON.resolve())
    assert len(audit["tracks"]) >= 3 and audit["boxes"] == job["result"]["boxes"] > 0
    assert len(audit["frames"]) == audit["frames_with_boxes"] > frame_count(HAMILTON) // 2
    assert all(b["who"].startswith("track ") for f in audit["frames"] for b in f["boxes"])
    # The source is only read; the HTML page offers the file and no longer reloads itself.
    assert sha256_file(HAMILTON) == before
    page = client.get(f"/jobs/{job['id']}").text
    assert f'href="/jobs/{job["id"]}/file"' in page and "http-equiv" not in page


def test_redact_a_person_from_the_person_page(client, library):
    people = client.get("/api/people").json()["people"]
    vid = hamilton_id(library)
    person = next(p for p in people if str(HAMILTON.resolve()) in p["videos"])
    page = client.get(f"/people/{person['id']}").text
    form = re.search(rf'<form method="post" action="/people/{person["id"]}/redact">(.*?)</form>', page, re.S).group(1)
    field = re.search(r'name="csrf" value="([0-9a-f]{64})"', form).group(1)
    assert f'<option value="{vid}">short_hamilton_clip.mp4</option>' in form
    browser = TestClient(client.app, cookies=client.cookies)  # the page's form: its hidden field, no header
    browser.headers["origin"] = client.headers["origin"]
    r = browser.post(f"/people/{person['id']}/redact", data={"csrf": field, "video_id": str(vid), "style": "pixelate"},
                     follow_redirects=False)
    assert r.status_code == 303 and re.fullmatch(r"/jobs/[A-Za-z0-9_-]{16}", r.headers["location"]), r.text
    job = finished(client, "/api" + r.headers["location"])
    assert job["state"] == "done", job
    label = person["name"] or f"person {person['id']}"
    assert job["whom"] == label and job["result"]["tracks"]
    audit = json.loads(client.get(job["audit"]).content)
    assert audit["whom"] == {"person": str(person["id"])} and audit["style"] == "pixelate"
    mine = set(person["tracks"])
    assert all(b["who"] == label for f in audit["frames"] for b in f["boxes"]) and audit["boxes"] > 0
    assert any(t["track"] in mine for t in audit["tracks"])  # their own tracks of the library count as them
    # everyone but that person hides the others, never them
    r = client.post(f"/api/videos/{vid}/redact", json={"whom": "except", "person": person["id"]})
    other = finished(client, r.json()["page"])
    assert other["state"] == "done" and not {t["track"] for t in other["result"]["tracks"]} & {t["track"] for t in job["result"]["tracks"]}


def test_the_video_page_has_the_form(client, library):
    vid = hamilton_id(library)
    page = client.get(f"/videos/{vid}").text
    form = re.search(rf'<form method="post" action="/videos/{vid}/redact"[^>]*>(.*?)</form>', page, re.S).group(1)
    assert 'name="csrf"' in form and 'value="everyone"' in form and 'value="except"' in form
    assert re.search(r'<select name="who"[^>]*>\s*<optgroup label="people seen in this video"><option value="person:\d+">', form)
    assert '<option value="pixelate">' in form
    assert client.get(f"/api/videos/{vid}").json()["redact"]["styles"] == ["blur", "pixelate", "box"]


def test_bad_input_is_one_line(client, library):
    vid = hamilton_id(library)
    people = client.get("/api/people").json()["people"]
    cases = [(f"/api/videos/{2**40}/redact", {"whom": "everyone"}, 404, "no video"),
             (f"/api/videos/{vid}/redact", {"whom": "person", "person": 2**40}, 404, "no person"),
             (f"/api/videos/{vid}/redact", {"whom": "person"}, 400, "needs a person"),
             (f"/api/videos/{vid}/redact", {"whom": "nobody"}, 400, "whom must be"),
             (f"/api/videos/{vid}/redact", {"whom": "everyone", "style": "sepia"}, 400, "one of blur, pixelate, box"),
             (f"/api/people/{2**40}/redact", {"video_id": vid}, 404, "no person"),
             (f"/api/people/{people[0]['id']}/redact", {"video_id": 2**40}, 404, "no video"),
             (f"/api/people/{people[0]['id']}/redact", {"video_id": "x"}, 400, "video id")]
    for url, body, status, words in cases:
        r = client.post(url, json=body)
        assert r.status_code == status and words in r.json()["error"] and "\n" not in r.json()["error"], (url, body, r.text)
    for url in ("/api/jobs/nosuchjob0000000", "/jobs/nosuchjob0000000", "/jobs/nosuchjob0000000/file", "/jobs/x/audit"):
        r = client.get(url)
        assert r.status_code == 404 and "no such redaction" in r.text, (url, r.text)
    # no origin or no token: refused as every change is
    assert TestClient(client.app).post(f"/api/videos/{vid}/redact", json={"whom": "everyone"}).status_code == 403


def test_a_read_only_library_redacts_into_the_cache(library, tmp_path):
    """The library is only read: a folder the app cannot write to redacts all the same, into the app's cache."""
    lib = tmp_path / "read-only"
    shutil.copytree(library, lib)
    paths = [lib, *lib.rglob("*")]
    for p in paths:
        p.chmod(p.stat().st_mode & ~0o222)
    try:
        client = TestClient(create_app(lib, cache_dir=tmp_path / "cache"))
        client.headers["origin"] = str(client.base_url).rstrip("/")
        client.headers[CSRF_HEADER] = client.get("/api/csrf").json()["token"]
        r = client.post(f"/api/videos/{hamilton_id(lib)}/redact", json={"whom": "everyone", "style": "blur", "verify": False})
        assert r.status_code == 202, r.text
        job = finished(client, r.json()["page"])
        assert job["state"] == "done" and job["result"]["boxes"] > 0, job
        assert list((tmp_path / "cache").rglob("*.redacted.mp4")) and not list(lib.rglob("*.redacted.*"))
    finally:
        for p in paths:
            p.chmod(p.stat().st_mode | 0o200)
