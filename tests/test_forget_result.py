"""One result for one forgetting (issue 51): `people forget --json` and the web app's forget (its /api answer) give
the same dict (`actions.forget.Forgetting.to_dict`) for the same person of the same library: two copies of the hamilton
clip's library, one person forgotten by the CLI in one and by the web app in the other. What may differ: when each
ran (`forgotten.forgotten_at`) and the search's line (`searched`: the folders each searched, the library's copy and
each one's cache, and what they held). Everything else is compared as it is."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import HAMILTON, library_db, needs_data, run
from starlette.testclient import TestClient

from serve.app import create_app
from serve.guard import CSRF_HEADER

pytestmark = [needs_data, pytest.mark.slow]

NAME = "The Forgotten"


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> tuple[Path, int]:
    """The hamilton clip indexed, its person of the most tracks named NAME."""
    folder = tmp_path_factory.mktemp("forget-result")
    (folder / "clips").mkdir()
    shutil.copyfile(HAMILTON, folder / "clips" / HAMILTON.name)
    run("index", folder / "clips", "--library", folder / "library", "--quiet")
    with library_db(folder / "library") as con:
        pid = con.execute("select person_id from person_tracks group by person_id order by count(*) desc, person_id").fetchone()[0]
    run("people", "name", pid, NAME, "--library", folder / "library")
    return folder / "library", pid


def test_people_forget_json_is_the_web_apps_answer(library, tmp_path):
    base, pid = library
    by_cli, by_web = tmp_path / "cli" / "library", tmp_path / "web" / "library"
    shutil.copytree(base, by_cli)
    shutil.copytree(base, by_web)
    cli = json.loads(run("people", "forget", NAME, "--yes", "--verify", "--json", "--library", by_cli).stdout)
    client = TestClient(create_app(by_web, cache_dir=tmp_path / "web" / "cache"))
    client.headers["origin"] = str(client.base_url).rstrip("/")
    r = client.post(f"/api/people/{pid}/forget", json={"confirm": NAME}, headers={CSRF_HEADER: client.get("/api/csrf").json()["token"]})
    assert r.status_code == 200, r.text
    web = {k: v for k, v in r.json().items() if k != "ok"}
    assert cli.keys() == web.keys() == {"forgotten", "likely_theirs", "note", "searched", "found"}
    assert {k: v for k, v in cli.items() if k not in ("forgotten", "searched")} == {k: v for k, v in web.items() if k not in ("forgotten", "searched")}
    assert {k: v for k, v in cli["forgotten"].items() if k != "forgotten_at"} == {k: v for k, v in web["forgotten"].items() if k != "forgotten_at"}
    assert cli["forgotten"]["person_id"] == pid and cli["forgotten"]["tracks"] > 0 and cli["found"] == []
    assert str(by_cli) in cli["searched"] and str(by_web) in web["searched"] and cli["searched"].endswith(": nothing found")
