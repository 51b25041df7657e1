"""The web redaction job a producer can check (issue 52 item 7, the web bits of item 9, issue 50 item 2's web half):
anyone seen in the video (every person, of one track or more, and every track) or the person in an uploaded photo is
chosen to hide or spare, beside the buttons it serves, with a margin; the job's page shows the check of its output, a
contact sheet and a player of the output before it offers the file; a job whose file changed since it was accepted
fails in one line with nothing offered; /compare fits a 390 px screen; a stopped `serve` says what is true. Looked at in
Debian's Chromium at 1280 and 390 px (screenshots in $HEADSEARCH_ARTEFACTS, as tests/test_browser.py keeps them)."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
from browser import launch, needs_chromium, screenshot
from conftest import EXAMPLES, HAMILTON, RETALKING, TALKING_HEAD_FRAMES, finished_job, library_db, needs_data, posting_client, run, serving
from markupsafe import escape
from starlette.testclient import TestClient

from serve.app import create_app

pytestmark = [needs_data, pytest.mark.slow]

WAIT_S = 180.0  # a redaction of the 9 s clip takes seconds; a loaded machine may take longer, never this long
# A file name as a newsroom's archive gives them: long enough that a list of the library's videos is wider than a phone.
LONG_NAME = "newsroom-archive_2026-12-04_hamilton-rehearsal_interview-with-the-cast_camera-2_take-3.mp4"


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    """The hamilton clip under a long file name, indexed into a library of its own (a test replaces the file, and puts
    it back)."""
    folder = tmp_path_factory.mktemp("web-redact-job")
    (folder / "clips").mkdir()
    shutil.copyfile(HAMILTON, folder / "clips" / LONG_NAME)
    run("index", folder / "clips", "--library", folder / "library", "--quiet")
    return folder / "library"


@pytest.fixture(scope="module")
def talking_head_library(tmp_path_factory, talking_head) -> Path:
    """A short talking head (`conftest.talking_head`) in a library of its own: a job that looks at every frame of its
    output again takes seconds on it."""
    folder = tmp_path_factory.mktemp("web-redact-job-short")
    run("index", talking_head, "--library", folder / "library", "--quiet")
    return folder / "library"


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def client(library, cache) -> TestClient:
    return posting_client(create_app(library, cache_dir=cache))


def video_id(library: Path) -> int:
    with library_db(library) as con:
        return con.execute("select id from videos").fetchone()[0]


def tracks_by_person(library: Path) -> tuple[list[int], dict[int, list[int]]]:
    """The video's tracks, and each person's tracks in it, from the library's own tables."""
    with library_db(library) as con:
        tracks = [r[0] for r in con.execute("select id from tracks order by id").fetchall()]
        people: dict[int, list[int]] = {}
        for track, person in con.execute("select track_id, person_id from person_tracks order by track_id").fetchall():
            people.setdefault(person, []).append(track)
    return tracks, people


def finished(client: TestClient, page: str) -> dict:
    return finished_job(client, page, WAIT_S)


def redacted(client: TestClient, vid: int, **body) -> dict:
    r = client.post(f"/api/videos/{vid}/redact", json=body)
    assert r.status_code == 202, r.text
    job = finished(client, r.json()["page"])
    assert job["state"] == "done", job
    return job


def test_anyone_seen_in_the_video_can_be_chosen_beside_its_buttons(client, library):
    """Every person with a track in the video is offered, those of one track too (the people page lists persons of two
    or more: single-track people could not be chosen), and every track; "only" hides one of them and nobody else."""
    vid = video_id(library)
    tracks, people = tracks_by_person(library)
    offered = client.get(f"/api/videos/{vid}").json()["redact"]
    listed = {p["id"] for p in client.get("/api/people").json()["people"]}
    single = [pid for pid, trs in people.items() if len(trs) == 1 and pid not in listed]
    assert single, people  # the clip has people seen in one track only (Obama's and Lacamoire's)
    assert {p["value"] for p in offered["people"]} == {f"person:{pid}" for pid in people}
    assert {p["id"]: p["tracks"] for p in offered["people"]} == {pid: len(trs) for pid, trs in people.items()}
    assert [t["value"] for t in sorted(offered["tracks"], key=lambda t: t["id"])] == [f"track:{t}" for t in tracks]
    # On the page the list sits with the two buttons it serves, in one box.
    page = client.get(f"/videos/{vid}").text
    pick = re.search(r'<div class="whom-pick">(.*?)</div>', page, re.S).group(1)
    assert 'value="person"> only' in pick and 'value="except"> everyone but' in pick and '<select name="who"' in pick
    assert f'<option value="person:{single[0]}">' in pick and f'<option value="track:{tracks[-1]}">' in pick
    job = redacted(client, vid, whom="person", who=f"person:{single[0]}", style="box")
    assert {t["track"] for t in job["result"]["tracks"]} == set(people[single[0]])
    audit = client.get(job["audit"]).json()
    assert audit["whom"] == {"person": str(single[0])} and audit["boxes"] == job["result"]["boxes"] > 0


def test_a_track_or_a_photo_names_the_person(client, library):
    """Everyone but one track spares that track; an uploaded photo (the page's second form: multipart, its token in a
    field) hides the person in it, named by the photo's name; a photo of two heads is refused in one line naming it."""
    vid = video_id(library)
    tracks, _ = tracks_by_person(library)
    spared = tracks[-1]
    job = redacted(client, vid, whom="except", who=f"track:{spared}", style="box")
    hidden = {t["track"] for t in job["result"]["tracks"]}
    assert spared not in hidden and len(hidden) >= len(tracks) - 2, (spared, hidden)
    assert job["whom"] == f"everyone but track {spared}"
    page = client.get(f"/videos/{vid}").text
    form = re.search(r'<form method="post" action="/videos/\d+/redact" enctype="multipart/form-data"[^>]*>(.*?)</form>', page, re.S).group(1)
    field = re.search(r'name="csrf" value="([0-9a-f]{64})"', form).group(1)
    assert '<input type="file" name="photo"' in form and 'name="margin"' in form
    browser = TestClient(client.app, cookies=client.cookies)  # the page's form: its hidden field, no header
    browser.headers["origin"] = client.headers["origin"]
    with open(EXAMPLES / "obama_small.jpg", "rb") as photo:
        r = browser.post(f"/videos/{vid}/redact", data={"csrf": field, "whom": "person", "style": "pixelate"},
                         files={"photo": ("obama_small.jpg", photo, "image/jpeg")}, follow_redirects=False)
    assert r.status_code == 303, r.text
    job = finished(client, "/api" + r.headers["location"])
    assert job["state"] == "done" and job["whom"] == "obama_small" and job["result"]["tracks"], job
    assert all(t["who"] == "obama_small" and t["why"].startswith("same person") for t in job["result"]["tracks"])
    assert client.get(job["audit"]).json()["whom"] == {"photos": ["obama_small.jpg"]}
    with open(EXAMPLES / "two_people.jpg", "rb") as photo:
        r = client.post(f"/api/videos/{vid}/redact", data={"whom": "except"}, files={"photo": ("two_people.jpg", photo, "image/jpeg")})
    assert r.status_code == 400 and r.json()["error"].startswith("two_people.jpg: 2 heads in this photo"), r.text


def test_the_margin(client, library):
    vid = video_id(library)
    job = redacted(client, vid, whom="everyone", style="box", margin="0.5", verify=False)
    assert job["margin"] == 0.5 and client.get(job["audit"]).json()["margin"] == 0.5
    assert "margin 0.5" in client.get(f"/jobs/{job['id']}").text
    for margin, words in (("9", "margin 9.0: a share of the head box from 0 to 4"), ("wide", "margin must be a number"),
                          ("nan", "margin nan: a share of the head box")):
        r = client.post(f"/api/videos/{vid}/redact", json={"whom": "everyone", "margin": margin})
        assert r.status_code == 400 and r.json()["error"].startswith(words) and "\n" not in r.json()["error"], r.text


def test_the_job_page_shows_the_check_the_sheet_and_a_player_before_the_file(talking_head_library, tmp_path):
    client, library = posting_client(create_app(talking_head_library, cache_dir=tmp_path / "cache")), talking_head_library
    vid = video_id(library)
    job = redacted(client, vid, whom="everyone", style="box")
    key = job["id"]
    assert job["sheet"] == f"/jobs/{key}/sheet" and "check" in job
    page = client.get(f"/jobs/{key}").text
    order = [page.find(s) for s in ("<h2>Check of the output</h2>", f'<img class="sheet" src="/jobs/{key}/sheet"',
                                    f'<video class="job-video" controls preload="metadata" src="/jobs/{key}/file"',
                                    f'<a href="/jobs/{key}/file" download>')]
    assert -1 not in order and order == sorted(order), order
    # Everyone's redaction is looked at again before the file is offered (redact --verify): its line, and each face it
    # still found with its frame; a job that leaves people in view on purpose says it was not looked at again.
    check = job["result"]["verify"]
    assert check is not None and check["frames"] == TALKING_HEAD_FRAMES and "was not looked at again" not in page
    assert str(escape(check["line"])) in page and "/tmp" not in check["line"]  # as the page escapes it
    assert all(f'<td>{f["frame"]}</td>' in page for f in check["faces"])
    assert ("verified: no face found" in check["line"]) == (not check["faces"])
    kept = redacted(client, vid, whom="except", who=f"track:{tracks_by_person(library)[0][0]}", style="box")
    assert kept["result"]["verify"] is None and "was not looked at again" in client.get(f"/jobs/{kept['id']}").text
    r = client.get(f"/jobs/{key}/sheet")
    assert r.status_code == 200 and r.headers["content-type"] == "image/png" and r.headers["content-disposition"].startswith("inline")
    sheet = cv2.imdecode(np.frombuffer(r.content, np.uint8), cv2.IMREAD_COLOR)
    assert sheet is not None and sheet.shape[1] > 600
    assert client.get(f"/jobs/{key}/file", headers={"range": "bytes=0-99"}).status_code == 206  # a player seeks in it
    assert client.get("/jobs/nosuchjob0000000/sheet").status_code == 404


def test_a_file_changed_after_the_job_was_accepted_fails_it(client, library, cache):
    """Accepted for the version indexed, the job finds another file there when its turn comes: it fails in one line,
    writes nothing and offers nothing (the redactor would have analysed and written the new file)."""
    vid = video_id(library)
    site = client.app.state.site
    with library_db(library) as con:
        path = Path(con.execute("select path from videos").fetchone()[0])
    kept = path.with_name("kept.bin")
    shutil.copyfile(path, kept)
    try:
        with site.redactions._one:  # another redaction is running: this one waits its turn (RedactJobs runs one at a time)
            r = client.post(f"/api/videos/{vid}/redact", json={"whom": "everyone", "style": "box", "verify": False})
            assert r.status_code == 202, r.text
            assert client.get(r.json()["page"]).json()["state"] == "waiting"
            shutil.copyfile(RETALKING / "1.mp4", path.with_name("new.part"))
            os.replace(path.with_name("new.part"), path)  # another video under the same name
        job = finished(client, r.json()["page"])
        assert job["state"] == "failed" and job["file"] is None, job
        assert job["error"].startswith(f"{LONG_NAME} changed since it was indexed: nothing was written") and "\n" not in job["error"]
        assert client.get(f"/jobs/{job['id']}/file").status_code == 404
        assert not (site.redactions.folder / job["id"]).exists()
    finally:
        os.replace(kept, path)


def test_a_stopped_server_says_what_is_true(library):
    """Ctrl+C (or a SIGTERM) stops `serve`: its line says the server stopped, not "run the same command again to finish"
    (which is what an interrupted index is told)."""
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--library", str(library), "--port", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while not any(line.startswith("headsearch: http://") for line in lines) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, lines
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    reader.join(timeout=10)
    last = lines[-1].strip()
    assert proc.returncode == 130 and last.startswith("interrupted: the server stopped;"), (proc.returncode, lines)
    assert "same command again" not in "".join(lines)


def _images_loaded(page) -> None:
    page.wait_for_function("Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)", timeout=60_000)


@needs_chromium
def test_the_person_choice_and_the_job_page_in_a_browser(library, tmp_path):
    """At 1280 and 390 px: the video page's redaction forms (a person of one track picked for "everyone but", the margin
    set), the job's page with its check, contact sheet and player before the download, and /compare with the library's
    long file name in its list: nothing wider than the screen. The screenshots are kept to be looked at."""
    from playwright.sync_api import sync_playwright

    _, people = tracks_by_person(library)
    single = min(pid for pid, trs in people.items() if len(trs) == 1)
    app = create_app(library, cache_dir=tmp_path / "cache", allowed_hosts={"127.0.0.1", "localhost"})
    with serving(app) as port, sync_playwright() as p:
        browser = launch(p)
        try:
            for width in (1280, 390):
                page = browser.new_page(viewport={"width": width, "height": 900}, bypass_csp=True)
                page.goto(f"http://127.0.0.1:{port}/videos/{video_id(library)}")
                page.click("details.redact summary")
                page.check("form.redact-form >> nth=0 >> input[name=whom][value=except]")
                page.select_option("select[name=who]", f"person:{single}")
                page.fill("form.redact-form >> nth=0 >> input[name=margin]", "0.3")
                screenshot(page.locator("details.redact"), f"redact-form-{width}.png")
                assert page.evaluate("document.documentElement.scrollWidth") <= width
                buttons = page.locator("form.redact-form >> nth=0 >> .whom-buttons").bounding_box()
                choice = page.locator("select[name=who]").bounding_box()
                assert choice["y"] - (buttons["y"] + buttons["height"]) < 40, (buttons, choice)  # the list beside its buttons
                page.click("form.redact-form >> nth=0 >> button")
                page.wait_for_selector("section.job-check", timeout=int(WAIT_S * 1000))
                _images_loaded(page)
                screenshot(page, f"redact-job-{width}.png")
                assert page.evaluate("document.documentElement.scrollWidth") <= width
                note = page.inner_text("p.note")
                assert f"everyone but person {single}" in note and "margin 0.3" in note, note
                assert page.evaluate("document.querySelector('img.sheet').naturalWidth") > 600
                page.goto(f"http://127.0.0.1:{port}/compare")
                screenshot(page, f"compare-{width}.png")
                assert LONG_NAME in page.inner_text("select[name=video_id]")
                assert page.evaluate("document.documentElement.scrollWidth") <= width, "the compare page is wider than the screen"
                page.close()
        finally:
            browser.close()
