"""Head tracker: IoU association, short misses, following a head without a face, cuts."""
from __future__ import annotations

import cv2
import numpy as np

from headsearch.detection.faces import head_box_from_face
from indexer.tracker import HeadTracker
from schemas.records import Box, FaceDetection, HeadDetection


def head(x: float, y: float, side: float = 60.0, face: bool = True) -> HeadDetection:
    box = Box(x, y, x + side, y + side)
    lm = np.array([[x + 20, y + 25], [x + 40, y + 25], [x + 30, y + 35], [x + 22, y + 45], [x + 38, y + 45]], np.float32)
    return HeadDetection(box, FaceDetection(box, lm, 0.99) if face else None, 0.99)


def textured_frame(patches: list[tuple[int, int]], seed: int = 0, side: int = 60) -> np.ndarray:
    """A dark frame with a distinctive random texture (a 'head') at each position."""
    rng = np.random.default_rng(seed)
    frame = np.full((360, 640, 3), 20, np.uint8)
    tex = cv2.GaussianBlur(rng.integers(0, 255, (side, side, 3), dtype=np.uint8), (0, 0), 3)  # smooth, like a head
    tex = cv2.normalize(tex, None, 0, 255, cv2.NORM_MINMAX)
    for x, y in patches:
        frame[y : y + side, x : x + side] = tex
    return frame


def test_moving_head_is_one_track_and_two_heads_two_tracks():
    tr = HeadTracker()
    blank = np.zeros((360, 640, 3), np.uint8)
    for i in range(6):
        obs, ended = tr.update(i, i * 0.5, blank, [head(100 + 8 * i, 100), head(400, 200 - 5 * i)])
        assert len(obs) == 2 and not ended
    tracks = tr.finish()
    assert len(tracks) == 2
    assert sorted(len(t.observations) for t in tracks) == [6, 6]
    assert all(o.face_visible for t in tracks for o in t.observations)


def test_head_followed_without_face_then_ends_after_gap():
    tr = HeadTracker(max_gap_s=1.5)
    tr.update(0, 0.0, textured_frame([(200, 100)]), [head(200, 100)])
    # The face disappears (head turned away) while the head region moves a little.
    obs, _ = tr.update(1, 0.5, textured_frame([(206, 102)]), [])
    assert len(obs) == 1 and not obs[0][1].face_visible
    assert abs(obs[0][1].head.x1 - 206) <= 3 and abs(obs[0][1].head.y1 - 102) <= 3
    obs, _ = tr.update(2, 1.0, textured_frame([(212, 104)]), [])
    assert len(obs) == 1
    # The face comes back: the same track continues.
    obs, _ = tr.update(3, 1.5, textured_frame([(214, 104)]), [head(214, 104)])
    (track, o), = obs
    assert o.face_visible and len(track.observations) == 4
    # Nothing to follow (the head left): the track ends once the gap passes.
    ended = []
    for i, t in enumerate((2.0, 2.5, 3.0, 3.5)):
        _, e = tr.update(4 + i, t, np.zeros((360, 640, 3), np.uint8), [])
        ended += e
    assert len(ended) == 1 and ended[0] is track
    assert [ob.face_visible for ob in track.observations] == [True, False, False, True]


def test_short_detector_miss_keeps_the_track():
    tr = HeadTracker(max_gap_s=2.0)
    blank = np.zeros((360, 640, 3), np.uint8)  # nothing to follow: a plain miss
    tr.update(0, 0.0, blank, [head(100, 100)])
    tr.update(1, 0.5, blank, [])
    tr.update(2, 1.0, blank, [head(104, 100)])
    tracks = tr.finish()
    assert len(tracks) == 1 and len(tracks[0].observations) == 2


def test_tracks_never_cross_a_cut():
    tr = HeadTracker()
    blank = np.zeros((360, 640, 3), np.uint8)
    tr.update(0, 0.0, blank, [head(100, 100)])
    closed = tr.new_shot(1)
    tr.update(1, 0.5, blank, [head(100, 100)])
    after = tr.finish()
    assert len(closed) == 1 and len(after) == 1
    assert closed[0].shot_index == 0 and after[0].shot_index == 1


def test_head_box_contains_face_and_extends_above_it():
    lm = np.array([[120, 140], [160, 140], [140, 160], [125, 180], [155, 180]], np.float32)
    face = FaceDetection(Box(100, 110, 180, 210), lm, 0.99)
    hb = head_box_from_face(face)
    assert hb.x1 < 100 and hb.x2 > 180 and hb.y1 < 110 - 20 and hb.y2 >= 200
    assert abs(hb.width - hb.height) < 1e-6
    # A face turned to the right has the back of its head to the left.
    turned = FaceDetection(face.box, lm + np.array([[0, 0], [0, 0], [25, 0], [0, 0], [0, 0]], np.float32), 0.99)
    assert head_box_from_face(turned).center[0] < hb.center[0]
