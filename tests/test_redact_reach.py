"""How far a hidden track reaches past its last sighting: a person's own tracks (--ref, --person) on to the next sampled
frame of its shot, where the analysis looked and did not find the head (it turned away or is walking out, and may still
show there); where every head is hidden, to the frame before it; never past the shot."""
from __future__ import annotations

import json

import pytest
from clips import read_frames
from conftest import CROWD, needs_data, run

from actions.redact_heads import covered_frames

SAMPLES = [0, 13, 26, 39, 52]


def test_a_persons_track_covers_the_sampled_frame_after_its_last_sighting_within_its_shot():
    assert covered_frames([26], (0, 104), SAMPLES, to_next_sample=True) == (14, 39)
    assert covered_frames([13, 26], (0, 30), SAMPLES, to_next_sample=True) == (1, 30)  # the shot ends before the next sample
    assert covered_frames([52], (0, 60), SAMPLES, to_next_sample=True) == (40, 60)  # no sample after it: to the shot's end
    assert covered_frames([10], (5, 40), None, period=13, to_next_sample=True) == (5, 23)  # one sample every `period` frames


def test_where_every_head_is_hidden_a_track_stops_before_the_next_sample():
    assert covered_frames([26], (0, 104), SAMPLES) == (14, 38)
    assert covered_frames([10], (5, 40), None, period=13) == (5, 22)


# The scarf woman of the crowd clip (facenet-pytorch's video.mp4, 1920 x 1080) walks right across the foreground: her
# tracks are one sighting each (frames 0, 13, 26); at frame 39, a sampled frame where nothing found her (her back at
# the red door), her fur hood still shows at the door's edge: this box, checked by eye on frames 38-39 enlarged.
REFERENCE_BOX = (193, 616, 462, 884)  # her face at frame 0 (bench/sets/presence.csv's reference for her)
HOOD_AT_39 = (1655, 865, 1695, 935)


@pytest.mark.slow
@needs_data
def test_redact_ref_hides_her_at_the_sampled_frame_after_her_last_sighting(tmp_path, crowd_library):
    import cv2

    library = crowd_library
    source = read_frames(CROWD)
    x1, y1, x2, y2 = REFERENCE_BOX
    crop = tmp_path / "scarf.png"
    cv2.imwrite(str(crop), cv2.cvtColor(source[0][y1:y2, x1:x2], cv2.COLOR_RGB2BGR))
    out = tmp_path / "boxed.mp4"
    run("redact", CROWD, "--ref", crop, "--library", library, "--out", out, "--style", "box")
    hx1, hy1, hx2, hy2 = HOOD_AT_39
    hidden = read_frames(out)
    for frame in (38, 39):
        lit = source[frame][hy1:hy2, hx1:hx2].max(axis=2) > 40
        black = hidden[frame][hy1:hy2, hx1:hx2].max(axis=2) < 12
        assert lit.mean() > 0.5 and black[lit].mean() >= 0.98, f"frame {frame}: {black[lit].mean():.3f} of her hood hidden"
    trail = json.loads((tmp_path / "boxed.mp4.redactions.json").read_text())
    assert max(t["last_frame"] for t in trail["tracks"]) == 39, trail["tracks"]
