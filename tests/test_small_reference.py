"""A small reference photo: a head cut out of footage, as users crop people out of a frame. The detector enlarges a photo
smaller than its `detect_min_side` to it, and a 30 x 40 px face so enlarged (3-4 times) blurs past what RetinaFace
finds; the photo is looked at again at its own size (`headsearch.detection.faces.photo_faces`). The crowd clip's bald
man in the beige coat at frame 0: crops of 110-210 px gave no face before, and `redact --ref` refused them."""
from __future__ import annotations

import json

import pytest
from clips import first_frame
from conftest import CROWD, needs_data, run
from test_rejoin_crowd import FRONT, hidden_on_every_frame

pytestmark = [pytest.mark.slow, needs_data]

SIDE = 160  # the crop: 160 px square around his 94 px head (a 30 x 40 px face), in the source's 1920 x 1080 pixels


def test_redact_ref_with_a_small_crop_of_his_head_hides_him(tmp_path, crowd_library):
    import cv2

    library = crowd_library
    cx, cy = (int(v) for v in FRONT[0].center)
    crop = tmp_path / "small.png"
    cv2.imwrite(str(crop), cv2.cvtColor(first_frame(CROWD)[cy - SIDE // 2:cy + SIDE // 2, cx - SIDE // 2:cx + SIDE // 2], cv2.COLOR_RGB2BGR))
    out = tmp_path / "boxed.mp4"
    said = json.loads(run("redact", CROWD, "--ref", crop, "--library", library, "--out", out, "--style", "box", "--json").stdout)
    hidden_on_every_frame(out, said["tracks"])  # his face at the start and his back at the end (joined within the shot)
