"""`headsearch reindex`: a library moved to another model keeps its files, people and corrections; the old
library answers until the swap, an interrupted or killed run resumes, and vectors of two models never share
a library."""
from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import AMY_DIR, EXAMPLES, HAMILTON, library_db, needs_data, pixel_copy, query_json, run
from test_index_query import assert_consistent

from headsearch.models.base import WEIGHTS_DIR
from headsearch.models.registry import DEFAULT_MODEL
from headsearch.store import reembedding
from schemas.records import ModelInfo

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "cli.main"]
OLD, NEW = "sface", "sface+lite0"  # the earlier default (identity vectors only) and the whole-head model
TWO_PEOPLE = EXAMPLES / "two_people.jpg"
MIRANDA = EXAMPLES / "lin-manuel-miranda.png"
INTERRUPTED_LINE = re.compile(r"^interrupted: .* is untouched and answers as before; run the same command again")


def manifest_model(library: Path) -> dict:
    return json.loads((library / "manifest.json").read_text())["model"]


def assert_one_model(library: Path) -> None:
    """Every vector of the library has a kind and a width of the model its manifest names."""
    model = ModelInfo.from_dict(manifest_model(library))
    with library_db(library) as con:
        found = con.execute("select kind, min(octet_length(embedding)), max(octet_length(embedding)) from vectors group by kind").fetchall()
    assert {kind for kind, _, _ in found} == {str(k) for k in model.kinds}, (model, found)
    for kind, low, high in found:
        assert low == high == 4 * model.dim_of(kind), (kind, low, high)


def people_json(library: Path, *extra) -> list[dict]:
    """Every person, those of one track too (`--unlisted`); "files": its videos and photos."""
    people = json.loads(run("people", "--library", library, "--json", "--unlisted", *extra).stdout)
    return [{**p, "files": p["videos"] + p["photos"]} for p in people]


def listed(library: Path) -> dict[str, str]:
    return {f["path"]: f["state"] for f in json.loads(run("list", "--library", library, "--json").stdout)}


def shape(people: list[dict]) -> dict[int, tuple]:
    """Each person as what survives re-embedding: its name, how many tracks, in which files (not the track ids)."""
    return {p["id"]: (p["name"], len(p["tracks"]), tuple(sorted(p["files"]))) for p in people}


def track_file(library: Path, track: int) -> str:
    with library_db(library) as con:
        return con.execute("select v.path from tracks t join videos v on v.id = t.video_id where t.id = ?", [track]).fetchone()[0]


pytestmark = [needs_data, pytest.mark.slow]


def test_reindex_moves_a_library_to_the_new_model_with_its_people(tmp_path):
    gone = pixel_copy(AMY_DIR / "amy1.png", tmp_path / "elsewhere")
    lib = tmp_path / "library"
    run("index", AMY_DIR, gone, TWO_PEOPLE, HAMILTON, "--library", lib, "--model", OLD, "-q")
    people = people_json(lib)
    amy = next(p for p in people if str(AMY_DIR / "amy2.png") in p["photos"])
    run("people", "name", amy["id"], "Amy", "--library", lib)
    rejected = next(tr for tr in amy["tracks"] if track_file(lib, tr) == str(AMY_DIR / "amy3.png"))
    run("people", "not", rejected, "--library", lib)  # "not this person": amy3 leaves Amy
    in_clip = [p for p in people if p["files"] == [str(HAMILTON)]]
    multi = next(p for p in in_clip if len(p["tracks"]) >= 2)
    split_id = int(run("people", "split", multi["id"], multi["tracks"][-1], "--library", lib).stdout.split()[-1])
    single = [p for p in in_clip if len(p["tracks"]) == 1]
    run("people", "merge", single[0]["id"], single[1]["id"], "--library", lib)
    run("people", "name", single[0]["id"], "Merged", "--library", lib)
    photo_only = next(p for p in people if p["files"] == [str(TWO_PEOPLE)])
    run("people", "hide", photo_only["id"], "--library", lib)
    run("people", "different", amy["id"], multi["id"], "--library", lib)  # an answer to "are these the same person?"
    run("people", "add-photo", amy["id"], AMY_DIR / "amy4.png", "--library", lib)  # a reference photo
    shutil.copy(WEIGHTS_DIR / "sface.thresholds.json", lib / "thresholds.json")  # the library's own, calibrated for sface
    before, hidden_before = people_json(lib), people_json(lib, "--all")
    old_tracks = {tr for p in hidden_before for tr in p["tracks"]}
    query = pixel_copy(MIRANDA, tmp_path / "query")
    asked = query_json(lib, query, "-k", "1")
    assert asked and asked[0]["video"] == str(HAMILTON)
    files_before = listed(lib)
    gone.unlink()

    result = run("reindex", "--model", NEW, "--library", lib)
    assert f"gone: {gone} (not on disk; left out of the new library)" in result.stderr
    assert f"thresholds.json was calibrated for {OLD} and is not carried over" in result.stderr
    backup = Path(re.search(r"the old library \(sface\) is at (\S+) ", result.stdout).group(1))
    assert backup.parent == lib.parent and backup.name.startswith(f"library.before-{NEW}-"), result.stdout
    assert not reembedding.staging_path(lib).exists()
    # The old library, renamed, is as it was: its model, its files, its thresholds; it answers.
    assert manifest_model(backup)["name"] == OLD and (backup / "thresholds.json").is_file()
    assert_one_model(backup)
    assert listed(backup) == {**files_before, str(gone): "missing"}
    assert query_json(backup, query, "-k", "1")[0]["start"] == asked[0]["start"]
    # The new one: the new model's vectors only, the same files but the gone one, no thresholds of the old model.
    model = manifest_model(lib)
    assert model["name"] == NEW and model["kinds"] == ["id", "head"]
    assert_one_model(lib)
    assert_consistent(lib)
    assert not (lib / "thresholds.json").exists()
    assert listed(lib) == {path: "indexed" for path in files_before if path != str(gone)}
    # People: the same persons, names, merges, splits, hidden ones and verdicts, on new tracks.
    after, hidden_after = people_json(lib), people_json(lib, "--all")
    assert not old_tracks & {tr for p in hidden_after for tr in p["tracks"]}, "new track ids"
    expected = {pid: (name, count - (str(gone) in files), tuple(f for f in files if f != str(gone)))  # the gone photo's one track
                for pid, (name, count, files) in shape(hidden_before).items()}
    assert shape(hidden_after) == {pid: p for pid, p in expected.items() if p[1]}
    assert {p["id"] for p in after} == {p["id"] for p in before} and photo_only["id"] not in {p["id"] for p in after}
    named = {p["name"]: p for p in after if p["name"]}
    assert set(named) == {"Amy", "Merged"} and named["Merged"]["id"] == single[0]["id"]
    assert str(AMY_DIR / "amy3.png") not in named["Amy"]["photos"]  # the verdict holds on the new track
    assert len(next(p for p in hidden_after if p["id"] == split_id)["tracks"]) == 1
    with library_db(lib) as con:  # the answer and the reference photo come over; the photo's old vectors are left aside
        assert con.execute("select person_a, person_b from person_pairs").fetchall() == [tuple(sorted((amy["id"], multi["id"])))]
    assert "give it again" in run("people", "photos", amy["id"], "--library", lib).stdout
    assert next(p for p in after if p["id"] == amy["id"])["references"] == 1
    moments = json.loads(run("query", "--person", "Amy", "--library", lib, "--json").stdout)
    assert {m["video"] for m in moments} == set(named["Amy"]["files"])
    # It answers with the new model.
    hits = query_json(lib, query, "-k", "1")
    assert hits[0]["video"] == str(HAMILTON) and hits[0]["start"] == asked[0]["start"]
    # Vectors of two models never meet: the old model is refused, naming the way to move the library.
    for command in (("index", AMY_DIR / "amy2.png", "--model", OLD, "-q"), ("query", query, "--model", OLD)):
        refused = run(*command, "--library", lib, ok=False)
        assert f"made by {NEW}" in refused.stderr and f"headsearch reindex --model {OLD}" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
    again = run("reindex", "--model", NEW, "--library", lib)
    assert "nothing to re-embed" in again.stdout and not reembedding.staging_path(lib).exists()


def query_json_photo(library: Path, photo: Path) -> list[dict]:
    return query_json(library, photo, "-k", "1")


def _start(lib: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "-v", "reindex", "--model", NEW, "--library", str(lib), "--no-progress", *extra], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _stop_after(proc: subprocess.Popen, line: re.Pattern, sig: int, pause: float = 0.0) -> str:
    """Read the run's stderr until a line matches, then send a signal; returns what it said."""
    seen = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        text = proc.stderr.readline()
        if not text:
            break
        seen.append(text)
        if line.search(text):
            time.sleep(pause)
            assert proc.poll() is None, "".join(seen)
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=120)
            return "".join(seen) + err
    raise AssertionError("the run ended before the line: " + "".join(seen))


def test_interrupted_and_killed_reindex_leave_the_old_library_answering_and_resume(tmp_path):
    lib = tmp_path / "library"
    run("index", AMY_DIR, HAMILTON, "--library", lib, "--model", OLD, "-q")  # the photos are stored before the clip is analysed
    amy = next(p for p in people_json(lib) if str(AMY_DIR / "amy1.png") in p["photos"])
    run("people", "name", amy["id"], "Amy", "--library", lib)
    query = pixel_copy(MIRANDA, tmp_path / "query")
    asked = query_json_photo(lib, query)
    staging = reembedding.staging_path(lib)

    def old_library_answers() -> None:
        assert manifest_model(lib)["name"] == OLD
        assert_one_model(lib)
        assert_consistent(lib)
        assert query_json_photo(lib, query) == asked

    # Ctrl-C once the first files are re-embedded: exit 130, one line, the old library untouched.
    proc = _start(lib)
    said = _stop_after(proc, re.compile(r"amy\d\.png: \d+ shots?, \d+ tracks? kept"), signal.SIGINT)
    assert proc.returncode == 130, said
    assert [line for line in said.splitlines() if line.startswith("interrupted")] == [said.strip().splitlines()[-1]]
    assert INTERRUPTED_LINE.match(said.strip().splitlines()[-1]) and "Traceback" not in said
    old_library_answers()
    assert staging.is_dir() and manifest_model(staging)["name"] == NEW
    with library_db(staging) as con:
        kept = con.execute("select count(*) from videos").fetchone()[0]
    assert kept >= 1
    # Killed (SIGKILL) while the clip is analysed: the old library still answers.
    proc = _start(lib)
    said = _stop_after(proc, re.compile(r"re-embedding .* re-embedded by an earlier run are kept"), signal.SIGKILL, pause=0.5)
    assert proc.returncode == -signal.SIGKILL
    old_library_answers()
    assert_one_model(staging)
    # An unfinished re-index to another model is in the way of a third one, and says so.
    other = run("reindex", "--model", "sface+hsv", "--library", lib, ok=False)
    assert f"an unfinished re-index of {lib} to {NEW}" in other.stderr and "Traceback" not in other.output
    # The next run resumes (with two workers) and finishes; --delete-old leaves only the new library.
    done = run("reindex", "--model", NEW, "--library", lib, "--workers", 2, "--delete-old")
    resumed = int(re.search(r"(\d+) by an earlier run", done.stdout).group(1))
    assert resumed >= kept and "the old library was deleted" in done.stdout
    assert sorted(p.name for p in lib.parent.iterdir() if p.name.startswith("library")) == ["library"]
    assert manifest_model(lib)["name"] == NEW
    assert_one_model(lib)
    assert_consistent(lib)
    assert next(p for p in people_json(lib) if p["name"] == "Amy")["id"] == amy["id"]
    hits = query_json_photo(lib, query)
    assert hits[0]["video"] == asked[0]["video"] and hits[0]["start"] == asked[0]["start"]


def test_reindex_without_a_model_means_the_default(tmp_path):
    lib = tmp_path / "library"
    run("index", AMY_DIR / "amy1.png", "--library", lib, "--model", "default", "-q")
    result = run("reindex", "--library", lib)
    assert f"made by {DEFAULT_MODEL} already; nothing to re-embed" in result.stdout
    missing = run("reindex", "--library", tmp_path / "nothing", ok=False)
    assert "no headsearch library here" in missing.stderr and not (tmp_path / "nothing.reindexing").exists()


def _folder(path: Path, model: str, marker: dict | None = None) -> Path:
    path.mkdir()
    (path / "manifest.json").write_text(json.dumps({"model": {"name": model}}))
    if marker is not None:
        (path / reembedding.MARKER).write_text(json.dumps(marker))
    return path


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
def test_swap_puts_the_new_library_in_place_and_keeps_the_old(tmp_path, monkeypatch, exchange):
    if not exchange:
        monkeypatch.setattr(reembedding, "exchange_paths", lambda a, b: False)
    root = _folder(tmp_path / "lib", "old")
    _folder(reembedding.staging_path(root), "new", {"replaces": str(root), "backup": None})
    backup = reembedding.swap(root, ModelInfo("new", "v1", 4))
    assert manifest_model(root)["name"] == "new" and manifest_model(backup)["name"] == "old"
    assert backup.name.startswith("lib.before-new-") and not reembedding.staging_path(root).exists()
    assert not (root / reembedding.MARKER).exists() and reembedding.finish_swap(root) is None


def test_a_swap_cut_short_by_a_kill_is_finished_by_the_next_run(tmp_path):
    # Killed after the exchange: the new library (with its marker) is in place, the old one under the staging name.
    root = _folder(tmp_path / "lib", "new", {"backup": "lib.before-new-x"})
    _folder(reembedding.staging_path(root), "old")
    assert reembedding.finish_swap(root) == tmp_path / "lib.before-new-x"
    assert manifest_model(root)["name"] == "new" and manifest_model(tmp_path / "lib.before-new-x")["name"] == "old"
    assert not (root / reembedding.MARKER).exists() and not reembedding.staging_path(root).exists()
    # Killed between two renames (no exchange): no library at its name for a moment.
    root2 = tmp_path / "two"
    _folder(tmp_path / "two.before-new-x", "old")
    _folder(reembedding.staging_path(root2), "new", {"backup": "two.before-new-x"})
    assert reembedding.finish_swap(root2) == tmp_path / "two.before-new-x"
    assert manifest_model(root2)["name"] == "new" and not (root2 / reembedding.MARKER).exists()


def test_files_that_fail_with_the_new_model_keep_the_old_library_unless_left_out(tmp_path):
    media = tmp_path / "media"
    media.mkdir()
    spoilt = media / "spoilt.png"
    shutil.copy(AMY_DIR / "amy2.png", spoilt)
    broken = media / "broken.jpg"
    broken.write_bytes(b"not a photo")
    lib = tmp_path / "library"
    run("index", AMY_DIR / "amy1.png", media, "--library", lib, "--model", OLD, "-q", ok=None)  # broken.jpg fails
    assert listed(lib) == {str(AMY_DIR / "amy1.png"): "indexed", str(spoilt): "indexed", str(broken): "failed"}
    spoilt.write_bytes(b"spoilt since it was indexed")
    refused = run("reindex", "--model", NEW, "--library", lib, ok=None)
    assert refused.exit_code == 2 and "not swapped: 1 file could not be re-embedded" in refused.stderr
    assert f"error: {spoilt}" in refused.stderr and "not re-indexed" in refused.stdout
    assert manifest_model(lib)["name"] == OLD and reembedding.staging_path(lib).is_dir()
    done = run("reindex", "--model", NEW, "--library", lib, "--leave-out-failed", ok=None)
    assert done.exit_code == 2 and "re-indexed with sface+lite0: 1 of 2 files" in done.stdout, done.output
    assert manifest_model(lib)["name"] == NEW and not reembedding.staging_path(lib).exists()
    assert listed(lib) == {str(AMY_DIR / "amy1.png"): "indexed", str(spoilt): "failed", str(broken): "failed"}


def test_a_query_of_a_library_of_an_older_built_in_model_says_reindex_would_move_it(tmp_path, hamilton_library):
    """An old `sface` (or `dlib-resnet`) library answers as its model did: the answer says that `reindex` moves it to
    the default; a library of the default says nothing of the kind."""
    library = tmp_path / "old"
    run("index", EXAMPLES / "obama_small.jpg", EXAMPLES / "knn_examples" / "train" / "biden" / "biden.jpg", "--library", library,
        "--model", "sface", "-q")
    photo = EXAMPLES / "knn_examples" / "train" / "obama" / "obama.jpg"
    said = run("query", photo, "--library", library, "--no-pictures").stderr
    assert f"was made by sface, not by the default model ({DEFAULT_MODEL}): `headsearch reindex --library {library}`" in said
    assert "reindex" not in run("query", photo, "--library", hamilton_library, "--no-pictures").stderr
