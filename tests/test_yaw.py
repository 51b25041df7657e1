"""How far a face is turned (yaw from the five landmarks), labelled heads in video frames, and identity by yaw band:
generated landmarks and vectors (the real media's part is in tests/test_profiles.py)."""
from __future__ import annotations

import numpy as np
import pytest

from headsearch.detection.pose import yaw_from_landmarks, yaws_from_landmarks
from headsearch.evaluation.labels import read_label_set
from headsearch.evaluation.metrics import pair_relations
from headsearch.evaluation.verification import yaw_bands
from schemas.records import Box

# left eye, right eye, nose, left mouth corner, right mouth corner: a frontal face, upright
FRONTAL = np.array([[40.0, 50.0], [80.0, 50.0], [60.0, 70.0], [45.0, 90.0], [75.0, 90.0]])


def rotated(points: np.ndarray, degrees: float) -> np.ndarray:
    a = np.radians(degrees)
    r = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    return (points - points.mean(0)) @ r.T + 200.0


def test_a_frontal_face_is_not_turned_and_a_turn_has_its_side():
    assert abs(yaw_from_landmarks(FRONTAL)) < 1.0
    right, left = FRONTAL.copy(), FRONTAL.copy()
    right[2, 0] += 12  # the nose right of the eye-mouth midline in the image
    left[2, 0] -= 12
    assert yaw_from_landmarks(right) > 20 and yaw_from_landmarks(left) < -20
    assert yaw_from_landmarks(right) == pytest.approx(-yaw_from_landmarks(left))
    more = FRONTAL.copy()
    more[2, 0] += 24
    assert yaw_from_landmarks(more) > yaw_from_landmarks(right)


def test_yaw_ignores_roll_and_size_and_stops_at_a_profile():
    turned = FRONTAL.copy()
    turned[2, 0] += 12
    for roll in (-40, -15, 20, 35):
        assert yaw_from_landmarks(rotated(turned, roll)) == pytest.approx(yaw_from_landmarks(turned), abs=1e-6)
    assert yaw_from_landmarks(turned * 3.5) == pytest.approx(yaw_from_landmarks(turned), abs=1e-6)
    profile = FRONTAL.copy()
    profile[[0, 1, 3, 4], 0] = 60.0  # the far eye and mouth corner drawn onto the near ones: no width left
    profile[2, 0] = 75.0
    assert yaw_from_landmarks(profile) == pytest.approx(90.0)
    assert np.allclose(yaws_from_landmarks(np.stack([turned, profile])), [yaw_from_landmarks(turned), 90.0])


def test_identity_by_yaw_band_pairs_a_frontal_side_with_a_side_in_the_band():
    # a, b: frontal; c: turned 45; d: turned 75; e: turned 80; f: yaw unknown
    identities = ["p", "p", "p", "p", "q", "q"]
    yaws = [2.0, -10.0, 45.0, -75.0, 80.0, None]
    sim = np.full((6, 6), 0.1)
    i, j, relation = pair_relations(identities, [None] * 6)
    bands = yaw_bands(sim, yaws, i, j, relation, fars=(1e-1,))
    # 0-30: a-b (same); 30-60: a-c, b-c (same); 60+: a-d, b-d (same), a-e, b-e (other); never d-e, c-d (both turned)
    assert (bands["0-30"].n_genuine, bands["0-30"].n_impostor) == (1, 0)
    assert (bands["30-60"].n_genuine, bands["30-60"].n_impostor) == (2, 0)
    assert (bands["60+"].n_genuine, bands["60+"].n_impostor) == (2, 2)


def test_labelled_heads_in_video_frames(tmp_path):
    (tmp_path / "clip.mp4").write_bytes(b"")
    csv = tmp_path / "heads.csv"
    csv.write_text("file,time,x1,y1,x2,y2,identity,yaw\n"
                   "clip.mp4,1.519,10,20,110,130.5,alex,-80\n"
                   "clip.mp4,soon,10,20,110,130,alex,-80\n"
                   "clip.mp4,2.0,10,20,110,130,crowd_unknown,0\n")
    labels = read_label_set(csv)
    assert [(f.path, f.identity, f.time, f.box) for f in labels.files] == [(tmp_path / "clip.mp4", "alex", 1.519, Box(10, 20, 110, 130.5))]
    assert labels.skipped == {"with an unreadable time or box": 1, "group/crowd/unknown": 1}


def test_compare_views_and_bench_yaw_bands_are_one_rule():
    """compare's views and bench's yaw bands once disagreed at exactly 60 degrees (three-quarter for one, the 60+ band
    for the other): both come from `YAW_VIEWS`, a band holding its lower bound."""
    from headsearch.compare.timeline import view_of
    from headsearch.evaluation.verification import YAW_BANDS
    for yaw in (0.0, 29.99, 30.0, 45.0, 59.99, 60.0, -60.0, 75.0, 90.0):
        band = next(i for i, (_, lo, hi) in enumerate(YAW_BANDS) if lo <= abs(yaw) < hi)
        assert view_of(True, yaw) == ("frontal", "three_quarter", "profile")[band], yaw
    assert view_of(True, 60.0) == "profile" and view_of(False, None) == "back"
