"""The web app's long work as jobs (issue 51): a comparison and a cast are started by a POST that answers at once (202
with the job from /api, 303 to its page from a form), followed on /api/jobs/ID to their end, and give the entry the
CLI's `compare --json` gives; the job's page reloads itself while it runs, then shows the Compare page's result; a clip
that cannot be read fails its job in one line naming the clip, its files gone; jobs run one at a time."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import EXAMPLES, HAMILTON, copy_of_library, finished_job, needs_data, posting_client, run
from starlette.testclient import TestClient

from serve.app import create_app
from serve.guard import CSRF_HEADER

pytestmark = [needs_data, pytest.mark.slow]

WAIT_S = 300.0  # comparing the 9 s clip takes seconds to a minute; a loaded machine may take longer, never this long
MIRANDA = EXAMPLES / "lin-manuel-miranda.png"


@pytest.fixture(scope="module")
def library(hamilton_library, tmp_path_factory) -> Path:
    return copy_of_library(hamilton_library, tmp_path_factory.mktemp("web-jobs") / "library")


@pytest.fixture(scope="module")
def client(library, tmp_path_factory) -> TestClient:
    return posting_client(create_app(library, cache_dir=tmp_path_factory.mktemp("cache")))


def hamilton_choice(client: TestClient) -> str:
    return str(next(v["id"] for v in client.get("/api/compare").json()["videos"] if v["path"] == str(HAMILTON)))


def finished(client: TestClient, page: str) -> dict:
    return finished_job(client, page, WAIT_S)


def test_a_comparison_is_a_job_polled_to_the_entry_compare_json_gives(client, library):
    """POST /api/compare answers 202 at once with the job; polled to its end, its result is `compare --json`'s entry for
    the same photo and video (with the library's bars, as the app compares); the form's POST goes to the job's page,
    which reloads itself while the job runs and then shows the comparison's plot."""
    video_id = hamilton_choice(client)
    r = client.post("/api/compare", files={"photo": (MIRANDA.name, MIRANDA.read_bytes(), "image/png")}, data={"video_id": video_id})
    assert r.status_code == 202, r.text
    started = r.json()
    assert started["ok"] and started["kind"] == "compare" and started["page"] == f"/api/jobs/{started['id']}"
    assert started["video"] == HAMILTON.name and started["video_id"] == int(video_id)
    job = finished(client, started["page"])
    assert job["state"] == "done" and job["error"] is None, job
    assert job["frames_total"] and job["frames_done"] == job["frames_total"], job["seen"]
    cli = json.loads(run("compare", HAMILTON, "--ref", MIRANDA, "--library", library, "--json").stdout)[0]
    got = job["result"]
    assert got["video"] == cli["video"] and got["verdict"] == cli["verdict"]
    assert got["segments"] == cli["segments"] and got["frames"] == cli["frames"] and got["summary"] == cli["summary"]
    # The same dict (`CompareResult.entry`), but for how each named the photo it was given (the CLI its path, the web its name).
    assert {k: v for k, v in got.items() if k != "reference"} == {k: v for k, v in cli.items() if k != "reference"}
    assert {**got["reference"], "sources": None} == {**cli["reference"], "sources": None}
    # The page: the job's progress page first, then the result page (the Compare page with the comparison).
    page = client.post("/compare", files={"photo": (MIRANDA.name, MIRANDA.read_bytes(), "image/png")},
                       data={"video_id": video_id, "csrf": client.headers[CSRF_HEADER]}, follow_redirects=False)
    assert page.status_code == 303 and re.fullmatch(r"/jobs/[A-Za-z0-9_-]{16}", page.headers["location"]), page.text
    key = page.headers["location"].rsplit("/", 1)[1]
    running = client.get(f"/jobs/{key}").text
    if client.get(f"/api/jobs/{key}").json()["running"]:
        assert 'http-equiv="refresh"' in running and "compare-plot" not in running
    assert finished(client, f"/api/jobs/{key}")["state"] == "done"
    done = client.get(f"/jobs/{key}").text
    assert "http-equiv" not in done and 'class="compare-plot' in done and "form" in done and HAMILTON.name in done


def test_a_cast_is_a_job_polled_to_the_entry_compare_cast_json_gives(client, library):
    """The library's named people as the cast over the hamilton clip, as a job: its result is one video's entry of
    `compare --cast --json` (Lin in shot 3); the job's page shows the cast."""
    r = client.post("/api/compare", data={"cast": "people", "video_id": hamilton_choice(client)}, files={"clip": ("", b"", "video/mp4")})
    assert r.status_code == 400 and "no named people" in r.json()["error"], r.text  # refused at once, no job started
    run("people", "--library", library)
    lin_track = json.loads(run("query", MIRANDA, "--library", library, "--json", "-k", "1").stdout)[0]["track_id"]
    lin = next(p for p in json.loads(run("people", "--library", library, "--json", "--unlisted").stdout) if lin_track in p["tracks"])
    run("people", "name", str(lin["id"]), "Lin", "--library", library)
    r = client.post("/api/compare", data={"cast": "people", "video_id": hamilton_choice(client)}, files={"clip": ("", b"", "video/mp4")})
    assert r.status_code == 202 and r.json()["kind"] == "cast", r.text
    job = finished(client, r.json()["page"])
    assert job["state"] == "done", job
    got = job["result"]
    assert got["video"] == str(HAMILTON) and {c["character"] for c in got["characters"]} == {"Lin"}
    lin_summary = next(c for c in got["characters"] if c["character"] == "Lin")
    assert any(a["shot"] == 3 for a in lin_summary["appearances"])  # shot 3, 3.588-7.892 s: him, frontal
    page = client.get(f"/jobs/{job['id']}").text
    assert "the cast" in page and "cast-plot" in page and "http-equiv" not in page


def test_a_clip_that_cannot_be_read_fails_its_job_in_one_line(client):
    """An uploaded clip is kept in the job's folder while it waits (the upload itself goes with the request); one that
    cannot be decoded fails its job in one line naming the clip as the user named it, and its folder goes."""
    site = client.app.state.site
    with site.jobs._one:  # another job is running: this one waits its turn, its clip kept meanwhile
        r = client.post("/api/compare", files={"photo": (MIRANDA.name, MIRANDA.read_bytes(), "image/png"),
                                               "clip": ("broken clip.mp4", b"\0" * 4096, "video/mp4")})
        assert r.status_code == 202, r.text
        job = r.json()
        assert job["state"] == "waiting" and job["video"] == "broken clip.mp4" and job["video_id"] is None
        assert [p.name for p in (site.jobs.folder / job["id"]).iterdir()] == ["clip.part"]
        assert "waiting for another job" in client.get(f"/jobs/{job['id']}").text
    ended = finished(client, job["page"])
    assert ended["state"] == "failed" and ended["result"] == {}
    error = ended["error"]
    assert "broken clip.mp4" in error and "\n" not in error and str(site.jobs.folder) not in error and "clip.part" not in error, error
    assert not (site.jobs.folder / job["id"]).exists()
    shown = client.get(f"/jobs/{job['id']}").text
    assert "failed: " in shown and "broken clip.mp4" in shown
