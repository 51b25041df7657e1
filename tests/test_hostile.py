"""Hostile media: a corpus generated here (tests/hostile_media.py) through the real CLI. Every bad
file ends in one line, the rest of the run goes on, what is stored stays intact; memory stays bounded."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import AMY_DIR, DATA, library_db, needs_data, query_json, run
from hostile_media import CASES, SIDE_FILES, make_corpus
from test_index_query import assert_consistent, table_counts

from headsearch.models import DEFAULT_MODEL

pytestmark = [needs_data, pytest.mark.slow]

FACE = DATA / "face_recognition" / "examples" / "obama_small.jpg"
SHORT_CLIP = DATA / "more" / "dreamtalk" / "data" / "style_clip" / "video" / "M030_front_neutral_level1_001.mp4"
REPO = Path(__file__).resolve().parents[1]
PEAK_RSS_LIMIT = 1.5 * 2**30  # the bound for one input, on this machine


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    face = cv2.cvtColor(cv2.imread(str(FACE)), cv2.COLOR_BGR2RGB)
    return make_corpus(tmp_path_factory.mktemp("hostile") / "corpus", face)


def error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def lines_about(lines: list[str], name: str) -> list[str]:
    return [line for line in lines if f"/{name}:" in line]


def stored_paths(library: Path) -> set[str]:
    with library_db(library) as con:
        return {r[0] for r in con.execute("select path from videos").fetchall()}


def stored_rows(library: Path, path: Path) -> tuple:
    """A stored file's row, its tracks and its vector ids: what must not change when other files fail."""
    with library_db(library) as con:
        video = con.execute("select * from videos where path = ?", [str(path)]).fetchone()
        tracks = con.execute("select * from tracks where video_id = ? order by id", [video[0]]).fetchall()
        vectors = con.execute("select id, kind from vectors where video_id = ? order by id", [video[0]]).fetchall()
    return video, tracks, vectors


def make_failing_onnx(path: Path, dim: int = 128) -> Path:
    """An ArcFace-shaped ONNX model that loads (its interface is right) but fails whenever it runs
    (a Reshape that cannot hold): a user's broken model, raising onnxruntime's own exception type."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((3 * 14 * 14, dim)).astype(np.float32), "w")
    odd = numpy_helper.from_array(np.array([3, -1], np.int64), "odd")
    back = numpy_helper.from_array(np.array([-1, dim], np.int64), "back")
    nodes = [
        helper.make_node("AveragePool", ["input.1"], ["pooled"], kernel_shape=[8, 8], strides=[8, 8]),
        helper.make_node("Flatten", ["pooled"], ["flat"], axis=1),
        helper.make_node("MatMul", ["flat", "w"], ["emb"]),
        helper.make_node("Reshape", ["emb", "odd"], ["bad"]),
        helper.make_node("Reshape", ["bad", "back"], ["683"]),
    ]
    graph = helper.make_graph(nodes, "broken", [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, ["None", 3, 112, 112])],
                              [helper.make_tensor_value_info("683", TensorProto.FLOAT, ["None", dim])], initializer=[weight, odd, back])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_hostile_corpus_index(corpus, tmp_path):
    lib = tmp_path / "lib"
    run("index", AMY_DIR / "amy1.png", "--library", lib, "-q")  # already stored: must come out untouched
    amy_before = stored_rows(lib, AMY_DIR / "amy1.png")
    answer_before = query_json(lib, AMY_DIR / "amy2.png", "-k", "1")
    folder = corpus["bomb-40000x40000.png"].parent
    explicit = [corpus[c.name] for c in CASES if c.explicit]
    result = run("index", folder, *explicit, SHORT_CLIP, "--library", lib, "-q", ok=False)
    assert result.exit_code == 2, result.output  # some failed, the others were indexed
    assert "Traceback" not in result.output
    errors = error_lines(result)
    assert not [line for line in errors if "unexpected error" in line], errors  # every failure here is a foreseen one
    stored = stored_paths(lib)
    for case in CASES:
        lines = lines_about(errors, case.name)
        indexed = str(corpus[case.name]) in stored
        if case.expect == "failed":
            assert len(lines) == 1 and not indexed, (case.name, lines)
            assert case.message in lines[0], (case.name, lines[0])
        elif case.expect == "indexed":
            assert indexed and not lines, (case.name, lines)
        elif case.expect == "either":
            assert indexed != (len(lines) == 1) and len(lines) <= 1, (case.name, lines)
        else:
            assert not indexed and not lines, (case.name, lines)
    for side, twin in SIDE_FILES.items():
        assert len(lines_about(errors, side)) == 1, (side, twin)
    # One line per failed input, nothing else.
    failed_names = {c.name for c in CASES if lines_about(errors, c.name)} | set(SIDE_FILES)
    assert len(errors) == len(failed_names), errors
    # The good files of the run were indexed, and what was stored before is intact.
    assert str(SHORT_CLIP) in stored and str(AMY_DIR / "amy1.png") in stored
    assert stored_rows(lib, AMY_DIR / "amy1.png") == amy_before
    assert query_json(lib, AMY_DIR / "amy2.png", "-k", "1")[0] == answer_before[0]
    assert_consistent(lib)
    # Large photos are decoded reduced (within the pixel limit), rotated video upright, with their heads.
    with library_db(lib) as con:
        rows = {Path(p).name: (w, h, n) for p, w, h, n in con.execute(
            "select path, width, height, (select count(*) from tracks t where t.video_id = v.id) from videos v").fetchall()}
        absurd = con.execute("select duration from videos where path like '%absurd-duration.mp4'").fetchone()[0]
    assert absurd == pytest.approx(1.5)  # the header's 111 hours were not believed
    assert rows["large-8200-baseline.jpg"] == (4100, 4100, 1)
    assert rows["rotated-90.mp4"][:2] == (240, 320) and rows["rotated-90.mp4"][2] >= 1
    assert rows["exif-rotated.jpg"] == (480, 360, 1)
    # A second run skips what is stored and, until they change, the files that failed (counted);
    # what cannot even be opened as a file (broken links, pipes, devices) is said again.
    counts = table_counts(lib)
    again = run("index", folder, *explicit, SHORT_CLIP, "--library", lib, "-q", ok=None)
    unopenable = [e for e in errors if "symbolic link" in e or "not a regular file" in e]
    assert unopenable and sorted(error_lines(again)) == sorted(unopenable)
    assert f"{len(errors) - len(unopenable)} failed before and unchanged" in again.stdout
    # --retry-failed tries them again: the same files fail in the same way, nothing stored changes.
    retried = run("index", folder, *explicit, SHORT_CLIP, "--library", lib, "-q", "--retry-failed", ok=False)
    assert retried.exit_code == 2 and sorted(error_lines(retried)) == sorted(errors)
    assert table_counts(lib) == counts


def test_hostile_photos_query(corpus, tmp_path):
    lib = tmp_path / "lib"
    run("index", AMY_DIR / "amy1.png", "--library", lib, "-q")
    for case in CASES:
        path = corpus[case.name]
        if path.suffix.lower() not in (".png", ".jpg", ".tif", ".webp") or case.name in ("folder-loop",):
            continue
        result = run("query", path, "--library", lib, "-k", "1", ok=None)
        assert "Traceback" not in result.output, case.name
        if result.exit_code != 0:
            assert result.exit_code == 1, (case.name, result.output)
            errors = error_lines(result)
            assert len(errors) == 1 and path.name in errors[0] and "unexpected" not in errors[0], (case.name, result.output)
    assert table_counts(lib)["videos"] == 1
    # The photo: a PNG claiming 40000x40000 pixels.
    result = run("query", corpus["bomb-40000x40000.png"], "--library", lib, ok=False)
    assert error_lines(result) == [f"error: {corpus['bomb-40000x40000.png']}: 40000x40000 pixels (1,600.0 MP) exceeds the "
                                   "50 MP limit ($HEADSEARCH_MAX_IMAGE_PIXELS); refused before decoding"]


def test_unexpected_errors_are_one_line_with_a_log(corpus, tmp_path):
    """Whatever is raised while one file is analysed, even by a broken model, is one line naming the
    log that holds its traceback; the run goes on and ends in exit 2; nothing stored is touched."""
    model = make_failing_onnx(tmp_path / "broken.onnx")
    lib = tmp_path / "lib"
    blank = tmp_path / "blank.png"  # no head: the model never runs on it
    cv2.imwrite(str(blank), np.full((120, 160, 3), 200, np.uint8))
    run("index", blank, "--library", lib, "--model", model, "-q")
    before = table_counts(lib)
    faces = [AMY_DIR / "amy1.png", corpus["palette.png"], SHORT_CLIP]
    wall = tmp_path / "wall.png"
    cv2.imwrite(str(wall), np.full((100, 100, 3), 90, np.uint8))
    result = run("index", *faces, wall, "--library", lib, "--model", model, "-q", ok=False)
    assert result.exit_code == 2 and "Traceback" not in result.output
    errors = error_lines(result)
    log = lib / "errors.log"
    assert len(errors) == len(faces)
    for path, line in zip(faces, errors, strict=True):
        assert line.startswith(f"error: {path}: unexpected error (Fail: [ONNXRuntimeError]") and line.endswith(f"traceback in {log}")
    text = log.read_text()
    assert text.count("Traceback (most recent call last)") == len(faces) and "Reshape" in text
    assert stored_paths(lib) == {str(blank), str(wall)}
    assert table_counts(lib)["videos"] == before["videos"] + 1
    assert_consistent(lib)
    # query: one line, exit 1, the traceback appended to the library's log
    result = run("query", AMY_DIR / "amy2.png", "--library", lib, ok=False)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert error_lines(result) == [f"error: {AMY_DIR / 'amy2.png'}: unexpected error ({error_reason(errors[0])}); traceback in {log}"]
    assert log.read_text().count("Traceback (most recent call last)") == len(faces) + 1


def error_reason(line: str) -> str:
    return line.split("unexpected error (", 1)[1].rsplit("); traceback in", 1)[0]


def test_bench_and_build_dataset_isolate_bad_inputs(corpus, tmp_path):
    # bench: hostile photos and videos in a labelled set are one line each; the rest is measured; exit 2.
    people = {"amy": [AMY_DIR / f"amy{i}.png" for i in (1, 2, 3)],
              "leonard": [DATA / "face-api.js" / "examples" / "images" / "leonard" / f"leonard{i}.png" for i in (1, 2)]}
    rows = [(str(p), who) for who, ps in people.items() for p in ps]
    bad = ["bomb-40000x40000.png", "large-8200-progressive.jpg", "tiny-2x2.mp4", "audio-only.mp4", "self-loop.mp4", "pipe.mp4"]
    rows += [(str(corpus[name]), "amy") for name in bad]
    labels = tmp_path / "set.csv"
    with open(labels, "w", newline="") as f:
        csv.writer(f).writerows([("path", "identity"), *rows])
    result = run("bench", "accuracy", labels, "--json", "-q", ok=False)
    assert result.exit_code == 2 and "Traceback" not in result.output
    for name in bad:
        assert sum(f"/{name}:" in line for line in result.stderr.splitlines()) == 1, (name, result.stderr)
    model = json.loads(result.stdout)["models"][DEFAULT_MODEL]
    assert model["samples"] == 5 and len(model["failed_files"]) == len(bad)
    # build-dataset: hostile videos among a real one are one line each; the dataset is built from the rest.
    videos = ["tiny-2x2.mp4", "audio-only.mp4", "truncated-10.mp4", "absurd-duration.mkv", "huge-frames-16000.avi", "pipe.mp4"]
    out = tmp_path / "dataset"
    result = run("build-dataset", SHORT_CLIP, *(corpus[v] for v in videos), "--out", out, "--min-invisible", "0", "-q", ok=False)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    for name in videos:
        assert len(lines_about(error_lines(result), name)) == 1, (name, result.stderr)
    assert (out / "manifest.parquet").is_file() and json.loads((out / "summary.json").read_text())["samples"] > 0
    assert not list((out / "parts").glob("*.tmp"))  # partial work discarded


def test_reduced_decoding_bounds_memory(corpus):
    """A large JPEG is decoded at 1/2, 1/4 or 1/8 by libjpeg, never whole: measured in a fresh process."""
    # VmHWM: the peak of this process's own memory since it started (ru_maxrss would carry pytest's over).
    code = ("import sys; from headsearch.basics.images import read_image_rgb; "
            "import numpy; a = read_image_rgb(sys.argv[1]); "
            "hwm = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')); "
            "print(a.shape[0], a.shape[1], hwm * 1024)")
    env = {**os.environ, "HEADSEARCH_MAX_IMAGE_PIXELS": "5000000"}
    baseline = subprocess.run([sys.executable, "-c", code.replace("a = read_image_rgb(sys.argv[1]); ", "a = numpy.zeros((1, 1)); "), "x"],
                              capture_output=True, text=True, check=True, env=env, cwd=REPO)
    big = subprocess.run([sys.executable, "-c", code, str(corpus["large-8200-baseline.jpg"])],
                         capture_output=True, text=True, check=True, env=env, cwd=REPO)
    h, w, rss = map(int, big.stdout.split())
    base = int(baseline.stdout.split()[2])
    assert (h, w) == (2050, 2050)  # 8200 / 4: within 5 MP
    # The whole image would be 8200 x 8200 x 3 = 202 MB before any reduction; the reduced one is 12.6 MB.
    assert rss - base < 120 * 2**20, (rss - base) / 2**20


def test_heavy_inputs_stay_within_memory(corpus, tmp_path):
    """The memory-heavy cases in one real `headsearch index` process: its peak stays under 1.5 GB."""
    heavy = ["bomb-40000x40000.png", "huge-header-65000.jpg", "large-8200-baseline.jpg", "large-8200-progressive.jpg",
             "huge-frames-16000.avi", "huge-jpeg-frames-16000.avi", "absurd-duration.mkv", "absurd-frame-count.avi"]
    # A small launcher runs it: ru_maxrss of a child counts its parent's memory at fork, and the
    # launcher's is small (pytest's is not).
    code = ("import os, resource, subprocess, sys; p = subprocess.run(sys.argv[1:]); "
            "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)")
    args = [sys.executable, "-m", "cli.main", "index", *(str(corpus[n]) for n in heavy), "--library", str(tmp_path / "lib"), "-q"]
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO, timeout=600)
    code_, rss = map(int, proc.stdout.split()[-2:])
    assert code_ == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert rss < PEAK_RSS_LIMIT, rss / 2**30
