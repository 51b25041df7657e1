"""`redact --verify` (issue 49): the written video looked at again, every frame, with the redactor's most sensitive
look; every face still found is reported (frame, box, score, a contact sheet) and the exit status says so. The core's
`verify_output` is what the web job will call: it is tested on a video with one frame put back unredacted on purpose."""
from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from clips import read_frames, write_clip
from conftest import DATA, EXAMPLES, TALKING_HEAD_FRAMES, needs_data, run
from fake_detector import mark_face

from actions.redact import EveryFaceDetector
from actions.redact_verify import verify_output
from cli.options import EXIT_FACES_LEFT
from headsearch.basics.settings import IndexSettings
from headsearch.detection.faces import FaceDetector

CROWD = DATA / "facenet-pytorch" / "examples" / "video.mp4"
FAKE = ("--model", "fake-pixels")


def _encode(path: Path, frames: list[np.ndarray], fps: int = 25) -> Path:
    """Frames encoded without loss (a marked face keeps the fake detector's colour)."""
    return write_clip(path, frames, fps=fps, pix_fmt="yuv444p", options={"qp": "0"})
    return path


def _every_face() -> EveryFaceDetector:
    settings = IndexSettings()
    return EveryFaceDetector(settings, FaceDetector.from_settings(settings))


def _put_back(source: Path, redacted: Path, frame: int, dst: Path) -> Path:
    """The redacted video with one frame of the source put back in its place, unredacted."""
    frames = read_frames(redacted)
    frames[frame] = read_frames(source)[frame]
    return _encode(dst, frames)


# ----- fast tier: generated clips and the fake detector -------------------------------------------------------------
def _marked_clip(path: Path, n: int = 12) -> Path:
    rng = np.random.default_rng(3)
    frames = []
    for i in range(n):
        rgb = rng.integers(40, 200, (120, 160, 3), dtype=np.uint8)
        frames.append(mark_face(rgb, (20 + 2 * i, 20, 70 + 2 * i, 80)))
    return _encode(path, frames)


def test_verify_passes_a_clean_output_and_finds_a_frame_put_back(tmp_path):
    source = _marked_clip(tmp_path / "marked.mp4")
    out = tmp_path / "out.mp4"
    result = run("redact", source, "--everyone", "--out", out, "--verify", *FAKE)
    assert "verified: no face found in 12 frames of the output" in result.stdout
    said = json.loads(run("redact", source, "--everyone", "--out", tmp_path / "o2.mp4", "--verify", "--json", *FAKE).stdout)
    assert said["verify"]["clean"] is True and said["verify"]["faces"] == [] and said["verify"]["frames"] == 12
    leaked = _put_back(source, out, 5, tmp_path / "leaked.mp4")
    found = verify_output(leaked, _every_face())
    assert [f.frame for f in found.faces] == [5] and not found.clean
    x1, y1, x2, y2 = found.faces[0].box
    assert abs(x1 - 30) <= 2 and abs(y1 - 20) <= 2 and abs(x2 - 80) <= 2 and abs(y2 - 80) <= 2
    assert found.sheet == tmp_path / "leaked.mp4.verify.png" and cv2.imread(str(found.sheet)) is not None
    record = found.to_dict()
    assert record["frames_with_faces"] == [5] and record["faces"][0]["box"] == list(found.faces[0].box)
    assert "verify FAILED: 1 face still found in 1 of 12 frames of the output (frame 5)" in found.line()


# ----- slow tier: the real detector on real media -------------------------------------------------------------------
@pytest.mark.slow
@needs_data
def test_verify_finds_no_face_on_the_crowd_after_everyone(crowd_everyone):
    _, said = crowd_everyone
    assert said["verify"]["frames"] == 105
    assert said["verify"]["clean"], f"faces left: {said['verify']['faces']}"
    # What the look finds on the hidden patches themselves is set aside, each with how little it follows the source.
    assert all(f["follows_source"] < 0.5 for f in said["verify"]["on_hidden"])


@pytest.mark.slow
@needs_data
def test_verify_finds_the_face_of_a_crowd_frame_put_back(crowd_everyone, tmp_path):
    """Frame 30 of the source put back into the redacted crowd (frames 24-36 of it, so the look runs on 13 frames, not
    105): its faces are found there, and only there (their detail is the source's)."""
    out, _ = crowd_everyone
    window = range(24, 37)
    source = _encode(tmp_path / "source.mp4", read_frames(CROWD, window.start, window.stop))
    redacted = read_frames(out, window.start, window.stop)
    leaked = _put_back(source, _encode(tmp_path / "redacted.mp4", redacted), 30 - window.start, tmp_path / "leaked.mp4")
    found = verify_output(leaked, _every_face(), source=source)
    assert found.frames == 13 and found.frames_with_faces == [30 - window.start] and len(found.faces) >= 3
    assert all(f.follows_source is None or f.follows_source > 0.9 for f in found.faces)
    assert found.sheet is not None and found.sheet.is_file()


@pytest.mark.slow
@needs_data
def test_verify_exits_with_its_own_status_when_faces_are_left(talking_head, tmp_path):
    """A reference who is not in the clip hides nobody (--allow-none writes it unchanged): the talking head stays in
    view, and --verify lists its frames and exits 5 (a short clip, so the look at every frame takes seconds)."""
    out = tmp_path / "nobody-hidden.mp4"
    result = run("redact", talking_head, "--ref", EXAMPLES / "lin-manuel-miranda.png", "--allow-none", "--out", out,
                 "--verify", "--json", ok=False)
    assert result.exit_code == EXIT_FACES_LEFT, result.output
    said = json.loads(result.stdout)["verify"]
    assert not said["clean"] and len(said["frames_with_faces"]) >= TALKING_HEAD_FRAMES - 2 and Path(said["sheet"]).is_file()
    assert out.is_file()  # kept, to look at
    assert result.stderr.strip().splitlines()[-1].startswith("error: verify FAILED:")
