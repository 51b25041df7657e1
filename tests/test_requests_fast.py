"""Every action a request in and a result out (issue 51), in the fast tier: for the same request, what the CLI's `--json`
prints and what the web app's JSON answers are one dict, for compare, cast, redact and forget. The real CLI and web
app on a library of the fake model over a clip the tests make (faces framed for the fake detector): A from the start to
2 s, B from 2.4 s; bars written for the fake model (it ships none)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import fake_detector
import pytest
from clips import write_clip
from conftest import finished_job, posting_client, run
from fake_model import FAKE_MODEL
from PIL import Image
from test_exports_fast import LOSSLESS, picture

from actions.compare import cast
from actions.redact_output import DEFAULT_MARGIN
from actions.requests import CompareRequest, ReferenceSpec
from serve.app import create_app

WAIT_S = 120.0  # a job over the 4 s clip with the fake model takes a second or two; a loaded machine may take longer
NAME = "Ada"


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict:
    """stage.mp4 and a photo of A; the library of the clip with the fake model, its bars, its people, A named NAME."""
    folder = tmp_path_factory.mktemp("requests-fast")
    stage = write_clip(folder / "stage.mp4", (picture(0, [("a", 20)] if i < 50 else [("b", 150)] if i >= 60 else [], i)
                                              for i in range(100)), fps=25, **LOSSLESS)
    photo = folder / "a.png"
    Image.fromarray(picture(2, [("a", 120)])).save(photo)
    library = folder / "library"
    with fake_detector.installed():  # the module's fixture runs before the test's own fakes are in place
        run("index", stage, "--library", library, "--model", FAKE_MODEL, "-q")
        model = json.loads((library / "manifest.json").read_text())["model"]
        (library / "thresholds.json").write_text(json.dumps({"far": 1e-3, "identity": 0.5, "same_look": 0.9,
                                                             "model": model["name"], "version": model["version"]}))
        run("people", "--library", library)
        track = json.loads(run("query", photo, "--library", library, "-k", "1", "--show-weak", "--json").stdout)[0]["track_id"]
        people = json.loads(run("people", "--library", library, "--unlisted", "--json").stdout)
        person = next(p["id"] for p in people if track in p["tracks"])
        run("people", "name", person, NAME, "--library", library)
    return {"stage": stage, "photo": photo, "library": library, "person": person, "folder": folder}


def copy(made: dict, to: Path) -> Path:
    """A library of its own for a test that changes it (or whose app keeps it open)."""
    shutil.copytree(made["library"], to)
    return to


def client_of(library: Path, cache: Path):
    return posting_client(create_app(library, cache_dir=cache))


def video_id(client) -> int:
    (video,) = client.get("/api/compare").json()["videos"]
    return video["id"]


def test_compare_json_is_the_web_compare_jobs_answer(made, tmp_path):
    """`compare CLIP --ref PHOTO --json`'s entry is the web compare job's result for the same photo and video (but for the
    photo's name in the reference's sources: the CLI names it by its path, the web as it was uploaded)."""
    library = copy(made, tmp_path / "library")
    said = run("compare", made["stage"], "--ref", made["photo"], "--library", library, "--json")
    (cli,) = json.loads(said.stdout)
    client = client_of(library, tmp_path / "cache")
    r = client.post("/api/compare", files={"photo": ("a.png", made["photo"].read_bytes(), "image/png")},
                    data={"video_id": str(video_id(client))})
    assert r.status_code == 202, r.text
    job = finished_job(client, r.json()["page"], WAIT_S)
    assert job["state"] == "done", job
    web = job["result"]
    assert cli["summary"]["same_person_share"] > 0 and cli["verdict"] == "drift" and cli["frames"]  # A, then B: the dict says something
    assert {k: v for k, v in web.items() if k != "reference"} == {k: v for k, v in cli.items() if k != "reference"}
    assert {**web["reference"], "sources": None} == {**cli["reference"], "sources": None}
    assert cli["reference"]["sources"] == [str(made["photo"])] and web["reference"]["sources"] == ["a.png"]


def test_cast_of_the_named_people_is_the_web_cast_jobs_answer(made, tmp_path):
    """The web's cast (the library's named people over one video) answers the entry `cast()` gives for the request the
    CLI would make of the same people (`compare --cast` takes photos, not persons: the action is called here)."""
    library = copy(made, tmp_path / "library")
    client = client_of(library, tmp_path / "cache")
    r = client.post("/api/compare", data={"cast": "people", "video_id": str(video_id(client))}, files={"clip": ("", b"", "video/mp4")})
    assert r.status_code == 202, r.text
    job = finished_job(client, r.json()["page"], WAIT_S)
    assert job["state"] == "done", job
    result = cast(CompareRequest(videos=(made["stage"],), references=(ReferenceSpec(persons=(made["person"],)),), library=library))
    (entry,) = result.to_json()
    assert [c["character"] for c in entry["characters"]] == [NAME] and entry["characters"][0]["appearances"]
    assert job["result"] == entry


RUN_OWN = {"output", "audit", "preview", "line", "seconds", "analysis_seconds"}  # the run's own files and times
CHECK_OWN = {"output", "sheet", "line", "seconds"}


def test_redact_json_is_the_web_redaction_jobs_answer(made, tmp_path):
    """`redact CLIP --everyone --verify --json` and the web's redaction of everyone give one dict (how the heads were
    hidden, the style and margin, included), but for the run's own files (the CLI's paths, the web's names of the same
    files) and times."""
    library = copy(made, tmp_path / "library")
    said = run("redact", made["stage"], "--everyone", "--style", "box", "--verify", "--library", library, "--out", tmp_path / "stage.redacted.mp4",
               "--preview", tmp_path, "--json", ok=None)
    assert said.exit_code in (0, 5), said.output  # 5: written, and --verify found faces in it (the web job says it too)
    cli = json.loads(said.stdout)
    client = client_of(library, tmp_path / "cache")
    r = client.post(f"/api/videos/{video_id(client)}/redact", json={"whom": "everyone", "style": "box"})
    assert r.status_code == 202, r.text
    job = finished_job(client, r.json()["page"], WAIT_S)
    assert job["state"] == "done", job
    web = job["result"]
    assert cli["boxes"] > 0 and len(cli["tracks"]) == 2 and cli["style"] == "box" and cli["margin"] == DEFAULT_MARGIN
    assert cli.keys() == web.keys()
    assert {k: v for k, v in cli.items() if k not in RUN_OWN | {"verify"}} == {k: v for k, v in web.items() if k not in RUN_OWN | {"verify"}}
    assert {k: v for k, v in cli["verify"].items() if k not in CHECK_OWN} == {k: v for k, v in web["verify"].items() if k not in CHECK_OWN}
    assert web["output"] == Path(cli["output"]).name and web["audit"] == Path(cli["audit"]).name


def test_forget_json_is_the_web_forgets_answer(made, tmp_path):
    """`people forget NAME --verify --json` and the web's forget of the same person give one dict, but for the time of
    the forgetting and the folders searched (each its own library and cache)."""
    by_cli, by_web = copy(made, tmp_path / "cli" / "library"), copy(made, tmp_path / "web" / "library")
    cli = json.loads(run("people", "forget", NAME, "--yes", "--verify", "--json", "--library", by_cli).stdout)
    client = client_of(by_web, tmp_path / "web" / "cache")
    r = client.post(f"/api/people/{made['person']}/forget", json={"confirm": NAME})
    assert r.status_code == 200, r.text
    web = {k: v for k, v in r.json().items() if k != "ok"}
    assert cli.keys() == web.keys() == {"forgotten", "likely_theirs", "note", "searched", "found"}
    assert cli["forgotten"]["person_id"] == made["person"] and cli["forgotten"]["tracks"] > 0 and cli["found"] == []

    def but(d: dict, *keys: str) -> dict:
        return {k: v for k, v in d.items() if k not in keys}

    assert but(cli["forgotten"], "forgotten_at") == but(web["forgotten"], "forgotten_at")
    assert but(cli, "forgotten", "searched") == but(web, "forgotten", "searched")
    assert str(by_cli) in cli["searched"] and str(by_web) in web["searched"]
