"""One result for one redaction (issue 51): `redact --json` and the web app's redaction job answer the same dict
(`RedactSummary.to_dict`) for the same run: a clip, indexed, redacted by the CLI and by the web app with the
same choice (`conftest.talking_head`, 40 frames of a talking head: each run looks at every frame again). What may differ: the files each wrote (the CLI names its paths, the web app their names: `output`,
`audit`, `preview`, the summary's `line` that names the output, and the check's `output` and `sheet`, the web app
naming no contact sheet its pages cannot open) and how long each took (`seconds`, `analysis_seconds`, the check's
`seconds`, and the `line` that says them). Everything else is compared as it is."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import finished_job, library_db, needs_data, posting_client, run
from starlette.testclient import TestClient

from serve.app import create_app

pytestmark = [needs_data, pytest.mark.slow]

WAIT_S = 300.0  # a redaction of the 1.6 s clip takes seconds; a loaded machine may take longer, never this long
RUN_OWN = {"output", "audit", "preview", "line", "seconds", "analysis_seconds"}  # the run's own files and times
CHECK_OWN = {"output", "sheet", "line", "seconds"}


@pytest.fixture(scope="module")
def library(tmp_path_factory, talking_head) -> Path:
    folder = tmp_path_factory.mktemp("redact-result")
    (folder / "clips").mkdir()
    shutil.copyfile(talking_head, folder / "clips" / talking_head.name)
    run("index", folder / "clips", "--library", folder / "library", "--quiet")
    return folder / "library"


@pytest.fixture(scope="module")
def client(library, tmp_path_factory) -> TestClient:
    return posting_client(create_app(library, cache_dir=tmp_path_factory.mktemp("cache")))


def the_video(library: Path) -> tuple[int, Path]:
    with library_db(library) as con:
        vid, path = con.execute("select id, path from videos").fetchone()
    return vid, Path(path)


def a_person(library: Path) -> int:
    """The person with the most tracks in the video."""
    with library_db(library) as con:
        return con.execute("select person_id from person_tracks group by person_id order by count(*) desc, person_id").fetchone()[0]


def both(client: TestClient, library: Path, tmp_path: Path, cli: list, web: dict) -> tuple[dict, dict]:
    """The CLI's --json and the web job's result for the same choice."""
    vid, path = the_video(library)
    said = run("redact", path, "--library", library, "--out", tmp_path / "out.mp4", "--preview", tmp_path, "--json", *cli, ok=None)
    assert said.exit_code in (0, 5), said.output  # 5: written, and --verify found faces in it (the web job says it too)
    r = client.post(f"/api/videos/{vid}/redact", json=web)
    assert r.status_code == 202, r.text
    job = finished_job(client, r.json()["page"], WAIT_S)
    assert job["state"] == "done", job
    return json.loads(said.stdout), job["result"]


def same_but_the_runs_own(cli: dict, web: dict) -> None:
    assert cli.keys() == web.keys()
    assert {k: v for k, v in cli.items() if k not in RUN_OWN | {"verify"}} == {k: v for k, v in web.items() if k not in RUN_OWN | {"verify"}}
    assert (cli["verify"] is None) == (web["verify"] is None)
    if cli["verify"] is not None:
        assert cli["verify"].keys() == web["verify"].keys()
        assert ({k: v for k, v in cli["verify"].items() if k not in CHECK_OWN} ==
                {k: v for k, v in web["verify"].items() if k not in CHECK_OWN})
    # The files: the CLI's paths, the web job's names of the same files (no folder of the app's cache in its answer).
    assert Path(cli["output"]).is_absolute() and Path(cli["output"]).is_file() and "/" not in web["output"]
    assert web["audit"] == web["output"] + ".redactions.json" and Path(cli["audit"]).name == Path(cli["output"]).name + ".redactions.json"
    assert web["preview"] == web["output"] + ".redactions.png" and Path(cli["preview"]).name == Path(cli["output"]).name + ".redactions.png"
    assert web["line"].startswith(f"wrote {web['output']}: ") and cli["line"].startswith(f"wrote {cli['output']}: ")
    assert web["line"].split(": ", 1)[1].split(";")[0] == cli["line"].split(": ", 1)[1].split(";")[0]  # what was hidden, in words


def test_everyone_hidden_and_checked_is_one_dict_on_the_cli_and_the_web(client, library, tmp_path):
    cli, web = both(client, library, tmp_path, ["--everyone", "--style", "box", "--verify"], {"whom": "everyone", "style": "box"})
    same_but_the_runs_own(cli, web)
    assert cli["boxes"] > 0 and cli["tracks"] and cli["verify"]["frames"] == cli["frames"]
    assert web["verify"]["sheet"] is None and "/" not in web["verify"]["line"]


def test_a_person_hidden_is_one_dict_on_the_cli_and_the_web(client, library, tmp_path):
    person = a_person(library)
    cli, web = both(client, library, tmp_path, ["--person", person, "--style", "pixelate"],
                    {"whom": "person", "who": f"person:{person}", "style": "pixelate"})
    same_but_the_runs_own(cli, web)
    assert cli["verify"] is None and cli["tracks"] and {t["who"] for t in cli["tracks"]} == {t["who"] for t in web["tracks"]}
