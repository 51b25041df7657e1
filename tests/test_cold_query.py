"""A cold `query` as the program runs it: its models load (and find the photo's heads) in a thread while the
library's code loads, it leaves without tearing the interpreter down, `-v` says where its seconds went, and a
built-in model costs no scan of the installed packages' entry points. What fails meanwhile is still one line."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import AMY_DIR, needs_data, pixel_copy, query_json, run

pytestmark = [needs_data, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
STAGES = ("start", "imports", "library", "database", "index", "models", "photo", "search", "pictures")


def _program(*args, code: str | None = None) -> subprocess.CompletedProcess:
    """`headsearch ARGS` as a user runs it (`python -m cli.main`), or the program started from `code` first."""
    argv = ["headsearch", *map(str, args)]
    command = ([sys.executable, "-m", "cli.main", *argv[1:]] if code is None else
               [sys.executable, "-c", f"{code}\nimport sys\nsys.argv = {argv!r}\nfrom cli.main import main\nmain()\n"])
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def amy_library(tmp_path_factory) -> Path:
    lib = tmp_path_factory.mktemp("cold") / "lib"
    run("index", AMY_DIR / "amy1.png", AMY_DIR / "amy3.png", "--library", lib, "-q")
    return lib


def test_the_program_answers_as_the_command_does_and_says_its_stages(amy_library, tmp_path):
    photo = pixel_copy(AMY_DIR / "amy2.png", tmp_path)
    result = _program("query", photo, "--library", amy_library, "--json", "-k", "3", "-v")  # stdout a pipe
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == query_json(amy_library, photo, "-k", "3")
    assert {h["video"] for h in json.loads(result.stdout)} <= {str(AMY_DIR / "amy1.png"), str(AMY_DIR / "amy3.png")}
    assert json.loads(result.stdout), "amy2 finds amy"
    line = next(ln for ln in result.stderr.splitlines() if ln.startswith("cli: seconds: "))
    said = [part.split()[0] for part in line.removeprefix("cli: seconds: ").split(";")[0].split(", ")]
    assert said == list(STAGES), line
    assert "since the command started" in line and "Traceback" not in result.stderr


def test_a_built_in_model_and_the_database_need_no_entry_point_scan(amy_library, tmp_path):
    """Scanning every installed distribution's entry points cost ~0.06 s each time (SQLAlchemy's dialect look-up,
    the model plugins): a query of the default model never does it."""
    code = ("import importlib.metadata as m\n"
            "def scanned(*a, **k):\n    raise SystemExit('entry points scanned')\n"
            "m.entry_points = scanned\n")
    result = _program("query", pixel_copy(AMY_DIR / "amy2.png", tmp_path), "--library", amy_library, "--json", code=code)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout), "amy2 finds amy"


def test_what_fails_while_the_models_load_is_one_line(amy_library, tmp_path):
    blank = tmp_path / "blank.png"
    cv2.imwrite(str(blank), np.full((240, 320, 3), 128, np.uint8))
    no_head = _program("query", blank, "--library", amy_library)
    assert no_head.returncode != 0 and no_head.stdout == ""
    assert no_head.stderr.strip().splitlines() == [f"error: {blank}: no head found (if the photo is already a head crop, "
                                                   "e.g. the back of a head, use --whole-image)"]

    other_model = _program("query", AMY_DIR / "amy2.png", "--library", amy_library, "--model", "sface")
    assert other_model.returncode != 0 and len(other_model.stderr.strip().splitlines()) == 1, other_model.stderr
    assert "library vectors were made by" in other_model.stderr

    missing = _program("query", tmp_path / "gone.png", "--library", amy_library)
    assert missing.returncode != 0 and len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    assert "Traceback" not in no_head.stderr + other_model.stderr + missing.stderr
