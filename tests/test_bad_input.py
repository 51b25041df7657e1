"""Bad input: one clear line, a non-zero exit where the command failed, the library intact."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import cv2
import numpy as np
import pytest
from clips import remux
from conftest import AMY_DIR, DATA, EXAMPLES, HAMILTON, library_db, make_arcface_like_onnx, needs_data, pixel_copy, query_json, run
from test_index_query import assert_consistent, table_counts

from headsearch.models import DEFAULT_MODEL
from headsearch.store.library import Library

pytestmark = [needs_data, pytest.mark.slow]


def one_line_error(result, *fragments: str) -> None:
    assert result.exit_code != 0
    lines = [l for l in result.stderr.splitlines() if l.startswith("error:")]
    assert lines, result.output
    assert "Traceback" not in result.output
    for f in fragments:
        assert any(f in l for l in lines), (f, result.stderr)


def test_bad_files_do_not_stop_the_others(tmp_path):
    media = tmp_path / "media"
    media.mkdir()
    (media / "random.mp4").write_bytes(np.random.default_rng(0).bytes(50_000))
    (media / "notes.mkv").write_text("this is not a video\n")
    (media / "fake.jpg").write_text("not an image either")
    data = HAMILTON.read_bytes()
    (media / "cut-before-index.mp4").write_bytes(data[: len(data) // 2])  # its moov index is at the end
    remux(HAMILTON, tmp_path / "full.ts", fmt="mpegts")  # stays readable when cut short
    ts = (tmp_path / "full.ts").read_bytes()
    (media / "truncated.ts").write_bytes(ts[: len(ts) // 2])
    cv2.imwrite(str(media / "amy.png"), cv2.imread(str(AMY_DIR / "amy1.png")))
    lib = tmp_path / "lib"
    result = run("index", media, tmp_path / "missing-folder", "--library", lib, "-q", ok=False)
    assert result.exit_code == 2  # partial: others indexed
    one_line_error(result, "random.mp4", "notes.mkv", "fake.jpg", "missing-folder", "cut-before-index.mp4")
    assert "Traceback" not in result.output
    counts = table_counts(lib)
    assert counts["videos"] == 2  # amy.png and what the truncated video held
    # A stream cut short without an index is indexed up to where it ends.
    with library_db(lib) as con:
        frames = con.execute("select frames_decoded from videos where path like '%truncated.ts'").fetchone()[0]
    assert 50 < frames < 200
    assert_consistent(lib)
    assert query_json(lib, AMY_DIR / "amy1.png", "-k", "1")[0]["video"].endswith("amy.png")


def test_nothing_indexable_fails(tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00" * 1000)
    result = run("index", bad, "--library", tmp_path / "lib", "-q", ok=False)
    assert result.exit_code == 1
    one_line_error(result, "bad.mp4")


def test_query_photo_without_head(tmp_path):
    lib = tmp_path / "lib"
    run("index", AMY_DIR / "amy1.png", "--library", lib, "-q")
    blank = tmp_path / "wall.png"
    cv2.imwrite(str(blank), np.full((200, 300, 3), 180, np.uint8))
    one_line_error(run("query", blank, "--library", lib, ok=False), "no head found", "wall.png")
    one_line_error(run("query", tmp_path / "nope.jpg", "--library", lib, ok=False), "nope.jpg")
    one_line_error(run("query", blank, "--library", tmp_path / "no-library", ok=False), "no headsearch library")
    # --whole-image: the default model sees whole heads and searches with the photo as a head (a wall
    # matches nobody); a face-recognition model says it has no face to see.
    result = run("query", blank, "--library", lib, "--whole-image")
    assert "no confident match" in result.output and "Traceback" not in result.output
    faces_only = tmp_path / "faces-only"
    run("index", AMY_DIR / "amy1.png", "--library", faces_only, "--model", "sface", "-q")
    one_line_error(run("query", blank, "--library", faces_only, "--whole-image", ok=False), "face-recognition model", "wall.png")


def test_other_model_and_missing_model(tmp_path):
    lib = tmp_path / "lib"
    run("index", AMY_DIR / "amy1.png", "--library", lib, "-q")
    before = table_counts(lib)
    onnx = make_arcface_like_onnx(tmp_path / "w600k_r50.onnx")
    result = run("index", AMY_DIR / "amy2.png", "--library", lib, "--model", onnx, "-q", ok=False)
    one_line_error(result, f"made by {DEFAULT_MODEL}", "re-embedding")
    result = run("query", AMY_DIR / "amy2.png", "--library", lib, "--model", onnx, ok=False)
    one_line_error(result, f"made by {DEFAULT_MODEL}")
    one_line_error(run("index", AMY_DIR, "--library", lib, "--model", tmp_path / "absent.onnx", ok=False), "missing model file")
    (tmp_path / "broken.onnx").write_bytes(b"not onnx")
    one_line_error(run("index", AMY_DIR, "--library", lib, "--model", tmp_path / "broken.onnx", ok=False), "broken.onnx")
    assert table_counts(lib) == before


def test_user_arcface_onnx_and_insightface_folder(tmp_path):
    pack = tmp_path / "buffalo_l"
    pack.mkdir()
    make_arcface_like_onnx(pack / "w600k_r50.onnx")
    lib = tmp_path / "lib"
    run("index", AMY_DIR, "--library", lib, "--model", pack, "-q")
    hits = query_json(lib, pixel_copy(AMY_DIR / "amy2.png", tmp_path), "-k", "1")
    assert hits[0]["video"].endswith("amy2.png") and hits[0]["score"] > 0.999


def test_killed_run_leaves_a_consistent_library(tmp_path):
    media = tmp_path / "media"
    media.mkdir()
    clips = [DATA / "video-retalking" / "examples" / "face" / f"{i}.mp4" for i in range(1, 6)]
    for i, clip in enumerate(clips):
        os.symlink(clip, media / f"clip{i}.mp4")
    lib = tmp_path / "lib"
    cmd = [sys.executable, "-m", "cli.main", "index", str(media), "--library", str(lib), "-q"]

    def thumbnails() -> int:
        return len(list((lib / "thumbnails").glob("*.jpg"))) if (lib / "thumbnails").is_dir() else 0

    for pause in (0.5, 0.0):  # mid-file, and right after a file's thumbnails were written (before or during its commit)
        seen = thumbnails()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while thumbnails() <= seen and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(pause)
        assert proc.poll() is None, proc.stderr.read().decode()  # still indexing when killed
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        run("stats", "--library", lib)  # opens and answers after a kill
        assert_consistent(lib)
        query_json(lib, EXAMPLES / "obama_small.jpg", "-k", "1")
    killed_with = table_counts(lib)["videos"]
    assert killed_with < len(clips)
    result = run("index", media, "--library", lib, "-q")
    assert "0 failed" in result.stdout and f"{killed_with} unchanged" in result.stdout
    assert table_counts(lib)["videos"] == len(clips)
    assert_consistent(lib)

def test_queries_answer_while_another_process_indexes(tmp_path):
    lib = tmp_path / "lib"
    run("index", AMY_DIR, "--library", lib, "-q")
    media = tmp_path / "media"
    media.mkdir()
    os.symlink(DATA / "video-retalking" / "examples" / "face" / "1.mp4", media / "clip.mp4")  # its index run takes seconds
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "index", str(media), "--library", str(lib), "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    answered = 0
    photo = pixel_copy(AMY_DIR / "amy2.png", tmp_path)
    while proc.poll() is None and answered < 3:  # three answers while it writes: the machine's time is the indexer's after
        hits = query_json(lib, photo, "-k", "1")
        assert hits[0]["video"].endswith("amy2.png")
        answered += 1
    assert proc.wait(timeout=300) == 0, proc.stderr.read().decode()
    assert answered >= 1
    assert_consistent(lib)


def test_second_indexer_is_refused_while_the_writer_lock_is_held(tmp_path):
    """Held here for as long as the check takes (a first indexer may finish before a second one starts), so
    the refusal is checked on every run; flock locks belong to the open file, so holding it in this process
    is what a running indexer's holding it is to the CLI's run."""
    lib = tmp_path / "lib"
    run("index", AMY_DIR / "amy1.png", "--library", lib, "-q")
    new = DATA / "video-retalking" / "examples" / "face" / "4.mp4"
    before = table_counts(lib)
    with Library.open(lib, read_only=False).writer_lock():
        second = run("index", AMY_DIR / "amy2.png", new, "--library", lib, "-q", ok=False)
        one_line_error(second, "another headsearch run is indexing this library")
        assert second.exit_code == 1, second.output
        assert query_json(lib, pixel_copy(AMY_DIR / "amy1.png", tmp_path), "-k", "1")[0]["video"].endswith("amy1.png")  # reads go on
    assert table_counts(lib) == before  # nothing of the refused run was stored
    assert_consistent(lib)
    # Released: the same run goes through.
    assert "2 indexed" in run("index", AMY_DIR / "amy2.png", new, "--library", lib, "-q").stdout
    assert table_counts(lib)["videos"] == before["videos"] + 2


def test_full_disk_stops_cleanly_and_keeps_the_library(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(mount)], capture_output=True).returncode != 0:
        import pytest

        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        lib = mount / "lib"
        run("index", AMY_DIR, "--library", lib, "-q")
        before = table_counts(lib)
        filler = mount / "filler"
        with open(filler, "wb") as f:  # fill the disk to the last block
            try:
                while True:
                    f.write(bytes(65536))
                    f.flush()
            except OSError:
                pass
        result = run("index", DATA / "video-retalking" / "examples" / "face", DATA / "face-api.js" / "examples" / "images",
                     "--library", lib, "-q", ok=False)
        one_line_error(result, "disk full")
        assert result.stderr.count("disk full") == 1
        assert table_counts(lib) == before
        assert query_json(lib, pixel_copy(AMY_DIR / "amy2.png", tmp_path), "-k", "1")[0]["video"].endswith("amy2.png")
        filler.unlink()
        run("index", DATA / "video-retalking" / "examples" / "face" / "1.mp4", "--library", lib, "-q")
        assert table_counts(lib)["videos"] == before["videos"] + 1
        assert_consistent(lib)
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)
