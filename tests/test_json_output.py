"""Every `--json` on the shortest media of ../shared/data (face-api.js's 5-frame clip, where the only heads are found by
keypoints, and a small still): valid JSON, numpy's numbers included, from the CLI and from the web app's twin; and a
face-only model indexes a clip whose heads show no face."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import DATA, EXAMPLES, needs_data, run

from headsearch.basics.json_text import json_text

pytestmark = [needs_data, pytest.mark.slow]

FIVE_FRAMES = DATA / "face-api.js" / "test" / "media" / "video.mp4"
STILL = EXAMPLES / "obama_small.jpg"


def numbers(value) -> list:
    """Every number of a JSON value."""
    if isinstance(value, dict):
        return [n for v in value.values() for n in numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in numbers(v)]
    return [value] if isinstance(value, int | float) and not isinstance(value, bool) else []


def test_one_encoder_takes_numpy_values_and_paths():
    data = {"score": np.float32(0.25), "n": np.int64(3), "box": np.array([1.5, 2.0]), "flag": np.bool_(True), "path": EXAMPLES}
    assert json.loads(json_text(data)) == {"score": 0.25, "n": 3, "box": [1.5, 2.0], "flag": True, "path": str(EXAMPLES)}
    with pytest.raises(TypeError):
        json_text({"what": object()})


def test_compare_json_on_a_five_frame_clip():
    out = json.loads(run("compare", FIVE_FRAMES, "--ref", STILL, "--json").stdout)
    assert out[0]["frames"] and out[0]["frames"][0]["box"] is not None
    assert all(math.isfinite(n) for n in numbers(out))
    assert all(v == round(v, 1) for f in out[0]["frames"] if f["box"] for v in f["box"])


@pytest.mark.parametrize("model", ["sface", "default"])
def test_every_json_of_a_library_of_the_shortest_media(tmp_path, model):
    """A face-only model (`sface`) keeps the clip's keypoint tracks with a picture each (it once failed the file: a
    track without a thumbnail), and every listing of the library is JSON."""
    library = tmp_path / "library"
    line = run("index", FIVE_FRAMES, STILL, "--library", library, "--model", model).stdout
    assert "2 indexed" in line and "0 failed" in line
    tracks = json.loads(run("list", "--tracks", "--json", "--library", library).stdout)
    clip = [t for t in tracks if t["video"] == str(FIVE_FRAMES)]
    assert clip and all(t["faces"] == 0 for t in clip)
    assert all((library / "thumbnails" / f"{t['id']}.jpg").is_file() for t in tracks)
    for args in (("list", "--json"), ("stats", "--json"), ("people", "--json"), ("query", STILL, "--json", "--show-weak", "--no-pictures"),
                 ("query", STILL, "--json", "--per-video", "--show-weak"), ("query", STILL, "--json", "--all", "--show-weak")):
        out = json.loads(run(*args, "--library", library).stdout)
        assert all(math.isfinite(n) for n in numbers(out))
