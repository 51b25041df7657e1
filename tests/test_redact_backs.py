"""`redact --everyone` hides heads in view before any detector found them: each track followed back in time to its
shot's first sample (`indexer.every_head`)."""
from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import DATA, needs_data
from hostile_media import write_video

from indexer.every_head import BackReach, TrackStart, followed_back
from schemas.records import Box

CROWD = DATA / "facenet-pytorch" / "examples" / "video.mp4"  # 1080p, a crowd walking past, some of it walking away
SIDE = 40  # the moving "head" of the generated clips, pixels
STEP = 6  # ...moves this far right each frame


def _head_patch() -> np.ndarray:
    rng = np.random.default_rng(7)
    noise = rng.integers(0, 256, (SIDE, SIDE, 3)).astype(np.uint8)
    return cv2.GaussianBlur(noise, (0, 0), 2.0)  # texture the codec keeps


def _clip(path: Path, n: int = 30, cut_at: int | None = None) -> list[Box]:
    """A textured square moving right over a smooth background (a different one from frame `cut_at`: a new shot);
    its box in each frame."""
    patch = _head_patch()
    ys, xs = np.mgrid[0:240, 0:320]
    boxes, frames = [], []
    for i in range(n):
        background = (xs * 0.3 + ys * 0.2 + (120 if cut_at is not None and i >= cut_at else 40)).clip(0, 255).astype(np.uint8)
        frame = np.repeat(background[..., None], 3, 2)
        x, y = 20 + STEP * i, 100
        frame[y:y + SIDE, x:x + SIDE] = patch
        frames.append(frame)
        boxes.append(Box(x, y, x + SIDE, y + SIDE))
    write_video(path, frames, fps=10)
    return boxes


def _near(a: Box, b: Box, px: float = 4.0) -> bool:
    return max(abs(a.x1 - b.x1), abs(a.y1 - b.y1), abs(a.x2 - b.x2), abs(a.y2 - b.y2)) <= px


def test_a_track_is_followed_back_to_its_shots_first_sample(tmp_path):
    video = tmp_path / "walk.mp4"
    boxes = _clip(video)
    samples = list(range(0, 30, 5))
    track = TrackStart(((20, boxes[20]), (25, boxes[25])), 0)
    found = followed_back(video, 1280, [track], samples, 10.0, BackReach(max_gap_s=10.0))[0]
    assert [f for f, _ in found] == [0, 5, 10, 15, 20, 25]
    assert all(_near(box, boxes[f]) for f, box in found), found


def test_following_back_stops_at_the_shot_the_reach_and_a_head_another_track_holds(tmp_path):
    video = tmp_path / "walk.mp4"
    boxes = _clip(video)
    samples = list(range(0, 30, 5))
    # Its shot begins at frame 8: frames 0 and 5 belong to another shot.
    in_shot = followed_back(video, 1280, [TrackStart(((20, boxes[20]),), 8)], samples, 10.0, BackReach(max_gap_s=10.0))[0]
    assert [f for f, _ in in_shot] == [10, 15, 20]
    # 1 s back at 10 frames a second: samples 15 and 10, not 5.
    reach = followed_back(video, 1280, [TrackStart(((20, boxes[20]),), 0)], samples, 10.0, BackReach(max_gap_s=1.0))[0]
    assert [f for f, _ in reach] == [10, 15, 20]
    # Another track holds the head at frame 10 (and, followed back itself, at 0 and 5): following stops before it
    # (one head is one box).
    held = followed_back(video, 1280, [TrackStart(((20, boxes[20]),), 0), TrackStart(((10, boxes[10]),), 0)], samples, 10.0,
                         BackReach(max_gap_s=10.0))
    assert [[f for f, _ in seen] for seen in held] == [[15, 20], [0, 5, 10]]
    # A track that starts on its shot's first sample is left as it is.
    first = TrackStart(((0, boxes[0]), (5, boxes[5])), 0)
    assert followed_back(video, 1280, [first], samples, 10.0)[0] == first.sightings


def test_a_head_that_was_not_there_is_not_followed_back(tmp_path):
    """The square comes into the picture at frame 12: before that there is nothing to follow, and no sighting is made
    up on the empty background."""
    video = tmp_path / "appears.mp4"
    patch = _head_patch()
    frames = []
    for i in range(30):
        frame = np.full((240, 320, 3), 90, np.uint8)
        frame[:, :, 1] = np.linspace(40, 200, 320, dtype=np.uint8)[None, :]
        if i >= 12:
            frame[100:100 + SIDE, 20 + STEP * i:20 + STEP * i + SIDE] = patch
        frames.append(frame)
    write_video(video, frames, fps=10)
    box = Box(20 + STEP * 15, 100, 20 + STEP * 15 + SIDE, 100 + SIDE)
    found = followed_back(video, 1280, [TrackStart(((15, box),), 0)], [0, 5, 10, 15], 10.0, BackReach(max_gap_s=10.0))[0]
    assert [f for f, _ in found] == [15]


# ----- real media --------------------------------------------------------------------------------------------
@pytest.mark.slow
@needs_data
def test_everyone_hides_backs_of_heads_in_view_before_a_detector_finds_them(crowd_everyone):
    """On the 1080p crowd, a white-haired woman walking away is first found at 1.04 s and a bald man at 3.64 s; the old
    code left the back of her head visible at 0 and 0.52 s and his at 3.12 s (bench/sets/heads.csv). Judged from the
    pixels by bench redact's judge, all three are hidden now, and the audit trail names her box on the first frame."""
    from bench.redact import HEAD_CORE, _region, detail, frame_times, frames_by_number, hidden, nearest

    out, _ = crowd_everyone
    backs = {0.0: Box(1476, 666, 1556, 738), 0.52: Box(1510, 686, 1594, 762), 3.12: Box(642, 657, 683, 703)}
    numbers = {t: nearest(frame_times(CROWD), t) for t in backs}
    source = frames_by_number(CROWD, sorted(numbers.values()))
    output = frames_by_number(out, sorted(numbers.values()))
    left = [t for t, box in backs.items() if not hidden(_region(detail(source[numbers[t]]), box, HEAD_CORE),
                                                        _region(detail(output[numbers[t]]), box, HEAD_CORE))]
    assert not left, f"backs of heads left visible at {left} s"
    said = json.loads(Path(f"{out}.redactions.json").read_text())
    assert any(any(b["box"][0] < 1516 < b["box"][2] and b["box"][1] < 702 < b["box"][3] for b in f["boxes"])
               for f in said["frames"] if f["frame"] == numbers[0.0])  # the audit trail names her box on frame 0
