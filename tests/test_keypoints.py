"""Heads without a face: person keypoints -> head boxes, one box per head beside the faces, tracks that start
from keypoint heads and are followed between the frames the finder runs on."""
from __future__ import annotations

import numpy as np
import pytest
from clips import first_frame
from conftest import DATA, needs_data
from test_tracker import head, textured_frame

from headsearch.detection.keypoints import (
    HEAD_IN_BOX,
    LEFT_EAR,
    LEFT_SHOULDER,
    NOSE,
    RIGHT_EAR,
    RIGHT_SHOULDER,
    KeypointRule,
    PoseDetector,
    head_of_person,
    keypoint_heads,
    new_heads,
    scaled_about_centre,
)
from indexer.tracker import HeadTracker
from schemas.records import Box, HeadDetection, HeadSource

CROWD = DATA / "facenet-pytorch" / "examples" / "video.mp4"


def person(points: dict[int, tuple[float, float]], score: float = 0.5, point_score: float = 0.6) -> np.ndarray:
    """A MoveNet person row with the given keypoints (x, y) seen, the others unseen."""
    row = np.zeros(56, np.float32)
    for i, (x, y) in points.items():
        row[3 * i: 3 * i + 3] = (x, y, point_score)
    row[55] = score
    return row


def test_back_of_a_head_from_ears_and_shoulders():
    # Seen from behind: both ears (no eyes, no nose) and both shoulders.
    p = person({LEFT_EAR: (120, 100), RIGHT_EAR: (80, 100), LEFT_SHOULDER: (160, 160), RIGHT_SHOULDER: (40, 160)})
    box, score = head_of_person(p)
    rule = KeypointRule()
    side = max(rule.spread_k * 40, rule.shoulder_k * 120)  # the shoulders give the larger head here
    assert abs(box.width - side) < 1e-3 and abs(box.height - side) < 1e-3
    assert abs(box.center[0] - 100) < 1e-3 and box.center[1] < 100  # above the ears: hair
    assert abs(score - 0.5 * 0.6) < 1e-6
    # Too weak a person, or a single head point without both shoulders: no head.
    assert head_of_person(person({LEFT_EAR: (120, 100), RIGHT_EAR: (80, 100)}, score=0.05)) is None
    assert head_of_person(person({NOSE: (100, 100)})) is None


def test_keypoint_heads_are_framed_as_stored_heads_and_deduplicated():
    a = person({LEFT_EAR: (120, 100), RIGHT_EAR: (80, 100)}, score=0.6)
    twin = person({LEFT_EAR: (121, 101), RIGHT_EAR: (81, 101)}, score=0.4)  # the same person seen in a second window
    heads = keypoint_heads(np.stack([a, twin]))
    assert len(heads) == 1 and heads[0].source == HeadSource.KEYPOINTS and heads[0].face is None
    fitted, _ = head_of_person(a)
    stored = heads[0].head
    assert abs(stored.width * HEAD_IN_BOX - fitted.width) < 1e-3  # the stored box holds the fitted head with a margin
    assert abs(scaled_about_centre(stored, HEAD_IN_BOX).x1 - fitted.x1) < 1e-3


def test_a_face_head_wins_over_its_keypoint_head():
    face_head = head(100, 100, side=80)  # a head found through its face (face box = head box in this helper)
    on_face = HeadDetection(Box(95, 95, 185, 185), None, 0.3, HeadSource.KEYPOINTS)
    elsewhere = HeadDetection(Box(400, 100, 480, 180), None, 0.3, HeadSource.KEYPOINTS)
    assert new_heads([on_face, elsewhere], [face_head]) == [elsewhere]


def test_track_starts_from_a_keypoint_head_and_is_followed_between_runs():
    tr = HeadTracker(max_gap_s=1.5)
    back = HeadDetection(Box(200, 100, 260, 160), None, 0.4, HeadSource.KEYPOINTS)
    obs, _ = tr.update(0, 0.0, textured_frame([(200, 100)]), [back])
    assert len(obs) == 1 and obs[0][1].found_by == HeadSource.KEYPOINTS and obs[0][1].keypoint_score == 0.4
    # The finder does not run on the next samples: the head region is followed.
    obs, _ = tr.update(1, 0.5, textured_frame([(205, 101)]), [])
    assert len(obs) == 1 and obs[0][1].found_by == HeadSource.FOLLOWED and not obs[0][1].face_visible
    # Found again by keypoints: the same track, kept alive.
    obs, _ = tr.update(2, 1.0, textured_frame([(210, 102)]), [HeadDetection(Box(210, 102, 270, 162), None, 0.5, HeadSource.KEYPOINTS)])
    (track, o), = obs
    assert o.found_by == HeadSource.KEYPOINTS and len(track.observations) == 3
    # No detector finds it for longer than the gap: it ends, even while its region could be followed.
    ended = []
    for i, t in enumerate((1.5, 2.0, 2.5, 3.0)):
        _, e = tr.update(3 + i, t, textured_frame([(210, 102)]), [])
        ended += e
    assert ended == [track]
    assert [str(ob.found_by) for ob in track.observations][:3] == ["keypoints", "followed", "keypoints"]


def test_a_faceless_box_without_a_finder_does_not_start_a_track():
    tr = HeadTracker()
    obs, _ = tr.update(0, 0.0, np.zeros((360, 640, 3), np.uint8), [head(100, 100, face=False)])
    assert obs == [] and tr.finish() == []


@needs_data
@pytest.mark.slow  # a real video
def test_movenet_finds_the_walking_crowd():
    rgb = first_frame(CROWD)
    people = PoseDetector().people(rgb, side=512, tiles=3)
    assert people.shape == (18, 56)
    heads = keypoint_heads(people)
    h, w = rgb.shape[:2]
    assert len(heads) >= 5  # people walking towards and away from the camera
    assert all(0 <= d.head.center[0] <= w and 0 <= d.head.center[1] <= h for d in heads)


class _CountedPose(PoseDetector):
    """The real MoveNet, noting the long side of every pass it is asked for."""

    def __init__(self):
        super().__init__()
        self.sides: list[int] = []

    def people(self, rgb, side=KeypointRule.side, tiles=1):
        self.sides.append(side)
        return super().people(rgb, side, tiles)


@needs_data
@pytest.mark.slow  # a real photo
def test_a_first_look_spares_the_pass_where_every_person_is_a_face_and_not_in_a_crowd():
    from headsearch.basics.images import read_image_rgb
    from headsearch.detection.faces import FaceDetector, detect_heads
    from headsearch.detection.keypoints import KeypointHeadFinder

    detector = FaceDetector()
    unscreened = KeypointHeadFinder(KeypointRule(screen_side=0), _CountedPose())
    # One person, whose head is the face found: the first look (192 px) is all MoveNet is asked for.
    portrait = read_image_rgb(DATA / "face_recognition" / "examples" / "knn_examples" / "train" / "obama" / "obama.jpg")
    faces = detect_heads(detector, portrait)
    assert len(faces) == 1
    screened = KeypointHeadFinder(pose=_CountedPose())
    assert screened.only_faces(portrait, faces)
    assert screened.find(portrait, faces) == [] == unscreened.find(portrait, faces)
    assert screened.pose.sides == [192, 192] and unscreened.pose.sides == [512]
    # Without a face there is nothing to spare: the pass runs as before.
    screened.pose.sides.clear()
    screened.find(portrait, [])
    assert screened.pose.sides == [512]
    # The walking crowd: more people than the first look may stand for, so the pass runs, and finds what it found without it.
    crowd = first_frame(CROWD)
    faces = detect_heads(detector, crowd)
    screened.pose.sides.clear()
    unscreened.pose.sides.clear()
    found = screened.find(crowd, faces)
    assert screened.pose.sides[0] == 192 and 512 in screened.pose.sides
    assert found == unscreened.find(crowd, faces) and len(found) >= 1
