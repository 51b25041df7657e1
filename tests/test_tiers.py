"""The guard of the fast tier (tests/tiers.py): a test outside `slow` that is marked `needs_data` or whose code reaches
the real media is found at collection; while one runs, the real media and the real embedders' weights are refused,
and a refusal the code under test swallowed still fails it. Here on a folder of this test's own playing the media."""
from __future__ import annotations

import contextlib
from pathlib import Path

import fake_detector
import numpy as np
import pytest
import tiers
from conftest import library_db, made_picture, needs_data, pixel_copy, query_json, run
from fake_model import FAKE_MODEL
from PIL import Image

from headsearch.detection.faces import FaceDetector
from headsearch.detection.keypoints import MOVENET_PATH
from headsearch.models.base import WEIGHTS_DIR
from headsearch.models.whole_head import LITE0_FILE

REAL_DETECT = FaceDetector.detect  # at import, before any test's fakes
MEDIA = Path("/media-of-test-tiers")  # the real media, for `misplaced` here: nothing lies there
CLIP = MEDIA / "clips" / "clip.mp4"


def _reads_a_clip():
    return CLIP.read_bytes()


def _indexes_a_clip():
    return _reads_a_clip()


class _Item:
    """What `tiers.misplaced` reads of a pytest item."""

    def __init__(self, function, *marks):
        self.function, self.marks = function, [m.mark for m in marks]

    def get_closest_marker(self, name):
        return next((m for m in self.marks if m.name == name), None)

    def iter_markers(self, name):
        return (m for m in self.marks if m.name == name)


def test_a_test_that_reaches_the_media_is_misplaced_unless_slow():
    assert tiers.misplaced(_Item(_indexes_a_clip), MEDIA, needs_data) == \
        "reaches the real media through _reads_a_clip -> CLIP"
    assert tiers.misplaced(_Item(lambda clip=CLIP: clip), MEDIA, needs_data) == \
        "reaches the real media through a default argument of <lambda>"
    assert tiers.misplaced(_Item(_indexes_a_clip, pytest.mark.slow), MEDIA, needs_data) is None
    assert tiers.misplaced(_Item(lambda: None, needs_data), MEDIA, needs_data) == "marked needs_data"
    assert tiers.misplaced(_Item(lambda: None, needs_data, pytest.mark.slow), MEDIA, needs_data) is None
    assert tiers.misplaced(_Item(lambda: Path("/elsewhere").read_bytes()), MEDIA, needs_data) is None


def test_the_guard_refuses_the_media_and_the_weights_while_it_watches(tmp_path):
    media = tmp_path / "media"
    media.mkdir()
    (media / "clip.mp4").write_bytes(b"a clip")
    guard = tiers.Guard(media)
    with guard.watching("this test") as refused:
        with pytest.raises(tiers.TierError, match="real media in the fast tier"):
            (media / "clip.mp4").read_bytes()
        with pytest.raises(tiers.TierError, match="real media"):
            list(media.glob("*.mp4"))
        with contextlib.suppress(Exception):  # the code under test swallows it: the refusal is still noted
            (media / "clip.mp4").open("rb")
        import onnxruntime

        with pytest.raises(tiers.TierError, match="onnxruntime.InferenceSession"):
            onnxruntime.InferenceSession(str(media / "model.onnx"))
        (tmp_path / "made.txt").write_text("a file of the test's own")  # elsewhere: allowed
        assert (tmp_path / "made.txt").read_text() == "a file of the test's own"
    assert len(refused) == 4 and all(r.startswith("this test (") for r in refused)
    assert (media / "clip.mp4").read_bytes() == b"a clip"  # no longer watching
    assert guard.why(WEIGHTS_DIR / LITE0_FILE) == "a real model's weights"
    assert guard.why(tmp_path / "cache" / "models" / "sface_2021dec_folded_float.onnx") == "a real model's weights"
    assert guard.why(MOVENET_PATH) == "a real model's weights"
    with guard.watching("this test") as refused, pytest.raises(tiers.TierError, match="RetinaFace's session in the fast tier"):
        onnxruntime.InferenceSession(tiers.detector_bytes())
    assert len(refused) == 1


def test_the_fast_tier_detects_the_faces_it_framed_and_finds_them_again(tmp_path):
    """Outside the slow tier the fake detectors stand in for RetinaFace and MoveNet (conftest): a face framed in
    magenta is found with its box, through the indexer and a query, and the fake embedder tells two of them apart."""
    assert FaceDetector.detect is not REAL_DETECT
    media = tmp_path / "media"
    media.mkdir()
    for seed in (1, 2):
        picture = made_picture(seed, 480, 360)
        picture[100:260, 160:300] = made_picture(seed + 10, 140, 160)  # a "face" of its own colours
        Image.fromarray(fake_detector.mark_face(picture, (160, 100, 300, 260))).save(media / f"face{seed}.png")
    Image.fromarray(made_picture(3, 480, 360)).save(media / "nobody.png")
    faces = fake_detector.marked_faces(np.asarray(Image.open(media / "face1.png")))
    assert [tuple(round(v) for v in (f.box.x1, f.box.y1, f.box.x2, f.box.y2)) for f in faces] == [(160, 100, 300, 260)]
    library = tmp_path / "library"
    run("index", media, "--library", library, "--model", FAKE_MODEL, "-q")
    with library_db(library) as con:
        heads = dict(con.execute("select v.path, count(*) from tracks t join videos v on v.id = t.video_id group by v.path").fetchall())
    assert {Path(p).name: n for p, n in heads.items()} == {"face1.png": 1, "face2.png": 1}
    for seed in (1, 2):
        hits = query_json(library, pixel_copy(media / f"face{seed}.png", tmp_path / "asked"), "-k", "2", "--show-weak")
        assert Path(hits[0]["video"]).name == f"face{seed}.png" and hits[0]["score"] > hits[-1]["score"]


@pytest.mark.slow
def test_the_slow_tier_runs_the_real_detectors():
    assert FaceDetector.detect is REAL_DETECT
