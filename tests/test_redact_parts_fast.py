"""`redact`'s pure parts in the fast tier (issue 51), each on its own: the frames a track covers between samples and cuts
(`covered_frames`), one-frame gaps closed before the pass (`closing_gaps`) and counted after it (`one_frame_gap`), the
frames of the contact sheet (`preview_frames`), boxes between the stored frame and the upright picture (`to_stored`,
`to_upright`, held to numpy's own turn), grown and cut to whole pixels (`grown`, `pixel_box`), a head hidden on a
decoded frame's planes in each style (`hide`, on PyAV's frames), and the output's paths refused before any analysis
(`check_paths`)."""
from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
from conftest import made_photo

from actions.redact_frames import PREVIEW_MAX, hide, one_frame_gap, preview_frames
from actions.redact_heads import HeadPath, closing_gaps, covered_frames, grown, pixel_box, to_stored, to_upright
from actions.redact_output import audit_path, check_paths, partial_path
from headsearch.basics.errors import HeadsearchError, MediaError
from schemas.records import Box, RedactStyle


# ----- the frames a track covers -------------------------------------------------------------------------------------
def test_a_track_covers_the_frames_up_to_the_samples_around_it_within_its_shot():
    samples = [0, 5, 10, 15, 20, 25, 30, 35]
    # Seen at 10 and 20: back to the frame after sample 5, on to the frame before sample 25.
    assert covered_frames([10, 15, 20], (0, 40), samples) == (6, 24)
    # Seen at the shot's first sample: from the shot's first frame; the next sample bounds it.
    assert covered_frames([0], (0, 40), samples) == (0, 4)
    # A cut at 12-31: nothing before the shot's first frame or after its last, whatever the samples around.
    assert covered_frames([15, 20, 25], (12, 31), samples) == (12, 29)
    assert covered_frames([30], (12, 31), samples) == (26, 31)
    # After the last sample of the video: on to the shot's end.
    assert covered_frames([35], (30, 44), samples) == (31, 44)
    # A track seen at a frame that is no sample (a shot's first frame) still covers that frame.
    assert covered_frames([12], (12, 40), samples) == (12, 14)


# ----- one-frame gaps ------------------------------------------------------------------------------------------------
def path(track: int, first: int, last: int, box: Box, spared: bool = False) -> HeadPath:
    return HeadPath(track, f"track {track}", ((first, box), (last, box)), first, last, spared=spared)


HEAD = Box(40, 30, 80, 70)


def test_a_track_that_begins_one_frame_after_another_ends_at_its_place_closes_the_gap():
    before, after = path(1, 0, 11, HEAD), path(2, 13, 24, Box(44, 32, 84, 72))  # the head moved 4 pixels
    closed, count = closing_gaps([before, after])
    assert count == 1 and [(p.track, p.first, p.last) for p in closed] == [(1, 0, 11), (2, 12, 24)]
    # Two frames apart, or a head more than a box side away, or a spared head on either side: nothing to close.
    for later in (path(2, 14, 24, HEAD), path(2, 13, 24, Box(130, 30, 170, 70)), path(2, 13, 24, HEAD, spared=True)):
        assert closing_gaps([before, later]) == ([before, later], 0)
    assert closing_gaps([path(1, 0, 11, HEAD, spared=True), after]) == ([path(1, 0, 11, HEAD, spared=True), after], 0)


def test_a_one_frame_gap_is_a_place_hidden_before_and_after_and_not_now():
    moved = Box(42, 30, 82, 70)
    assert one_frame_gap([HEAD], [], [moved])
    assert not one_frame_gap([HEAD], [Box(40, 30, 80, 70)], [moved])
    # This frame's box covers less than half of the place hidden before and after: still a gap; more than half: none.
    common = Box(42, 30, 80, 70)  # 38 x 40
    assert one_frame_gap([HEAD], [Box(42, 30, 42 + 0.4 * common.width, 70)], [moved])
    assert not one_frame_gap([HEAD], [Box(42, 30, 42 + 0.6 * common.width, 70)], [moved])
    # A box before and another after that are not the same head (IoU under 0.3) make no gap.
    assert not one_frame_gap([HEAD], [], [Box(70, 30, 110, 70)])
    assert not one_frame_gap([], [], [HEAD]) and not one_frame_gap([HEAD], [], [])


# ----- the contact sheet's frames ------------------------------------------------------------------------------------
def test_the_contact_sheet_shows_every_hidden_track_and_frames_with_boxes():
    # Nothing hidden: four frames spread over the video (none of an empty one but its first).
    assert preview_frames([], 100) == [12, 38, 62, 88] and preview_frames([], 0) == [0]
    # One track hidden on frames 10-19, twelve tiles: every frame of it, its middle among them, none outside it.
    assert preview_frames([path(1, 10, 19, HEAD)], 100) == list(range(10, 20))
    # A spared head is never on the sheet; two tracks: each one's middle, the others spread over them both.
    spared = path(3, 50, 90, HEAD, spared=True)
    chosen = preview_frames([path(1, 0, 39, HEAD), path(2, 60, 79, HEAD), spared], 100, tiles=6)
    # Spread at 7, 22, 37 and 72 of their 60 frames; 22 and 72 lie within 5 frames (60 / 2 tiles) of a middle: left out.
    assert chosen == [7, 19, 37, 69]
    # Many tracks: the middle of each up to PREVIEW_MAX, and no more.
    many = [path(k, 10 * k, 10 * k + 4, HEAD) for k in range(PREVIEW_MAX + 6)]
    assert preview_frames(many, 10 * len(many)) == [10 * k + 2 for k in range(PREVIEW_MAX)]


# ----- boxes: upright and stored, grown, in whole pixels -------------------------------------------------------------
@pytest.mark.parametrize("turns", [0, 1, 2, 3])
def test_a_box_on_the_upright_picture_lies_on_the_same_pixels_of_the_stored_frame(turns):
    """`np.rot90(stored, turns)` is what the decoder shows upright: a patch marked on the stored frame is found by
    `to_upright` where the turned picture has it, and `to_stored` brings it back."""
    height, width = 6, 10
    stored = np.zeros((height, width), np.uint8)
    stored[1:3, 2:7] = 1  # x 2-7, y 1-3
    box = Box(2, 1, 7, 3)
    upright = np.rot90(stored, turns)
    ys, xs = np.nonzero(upright)
    found = Box(float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1))
    assert to_upright(box, turns, width, height) == found
    assert to_stored(found, turns, width, height) == box
    assert to_stored(found, turns + 4, width, height) == box  # whole turns count modulo four


def test_a_box_grows_by_its_margin_and_is_cut_to_the_frames_whole_pixels():
    assert grown(Box(10, 10, 30, 50), 0.2) == Box(8, 6, 32, 54)  # a tenth of its width and height on each side
    assert grown(Box(10, 10, 30, 50), 0.0) == Box(10, 10, 30, 50)
    assert pixel_box(Box(2.2, 1.5, 5.1, 3.9), 8, 6) == (2, 1, 6, 4)  # every pixel it touches
    assert pixel_box(Box(-3.5, -1, 12, 9), 8, 6) == (0, 0, 8, 6)  # clipped to the frame
    assert pixel_box(Box(9, 1, 12, 4), 8, 6) is None and pixel_box(Box(2, 2, 2, 4), 8, 6) is None  # nothing of it inside


# ----- a head hidden on the decoded frame's planes -------------------------------------------------------------------
def frame_of(rgb: np.ndarray, fmt: str) -> av.VideoFrame:
    return av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format=fmt)


def planes(frame: av.VideoFrame) -> list[np.ndarray]:
    return [np.frombuffer(p, np.uint8).reshape(p.height, p.line_size)[:, :p.width].copy() for p in frame.planes]


BOX = (16, 8, 48, 40)  # x1, y1, x2, y2 on a 64 x 48 frame


def noise(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (48, 64, 3), dtype=np.uint8)


@pytest.mark.parametrize("style", list(RedactStyle))
def test_every_style_changes_the_box_and_no_pixel_outside_it(style):
    frame = frame_of(noise(), "yuv420p")
    before = planes(frame)
    after = planes(hide(frame, [BOX], style))
    x1, y1, x2, y2 = BOX
    for i, (a, b) in enumerate(zip(before, after, strict=True)):
        s = 1 if i == 0 else 2  # the colour planes at half size
        inside = np.zeros(a.shape, bool)
        inside[y1 // s:y2 // s, x1 // s:x2 // s] = True
        assert np.array_equal(a[~inside], b[~inside]), f"plane {i}: a pixel outside the box changed"
        assert not np.array_equal(a[inside], b[inside]), f"plane {i}: the box is as it was"
        assert b[inside].std() < 0.6 * a[inside].std(), f"plane {i}: the noise of the face is still there ({style})"


def test_a_box_is_black_in_the_frames_range_and_pixelate_leaves_blocks():
    limited = planes(hide(frame_of(noise(), "yuv420p"), [BOX], RedactStyle.BOX))
    assert (limited[0][8:40, 16:48] == 16).all() and (limited[1][4:20, 8:24] == 128).all() and (limited[2][4:20, 8:24] == 128).all()
    full = planes(hide(frame_of(noise(), "yuvj420p"), [BOX], RedactStyle.BOX))
    assert (full[0][8:40, 16:48] == 0).all()  # full range: black is 0, not 16
    luma = planes(hide(frame_of(noise(), "yuv444p"), [BOX], RedactStyle.PIXELATE))[0][8:40, 16:48]
    blocks = luma.reshape(8, 4, 8, 4)  # 32 pixels across in 8 blocks of 4
    assert (blocks == blocks[:, :1, :, :1]).all() and len(np.unique(luma)) > 8  # each block one grey, the blocks not all one


# ----- the output's paths, refused before any analysis ---------------------------------------------------------------
def test_an_output_is_refused_in_one_line_where_it_cannot_be_written(tmp_path):
    video = tmp_path / "clip.mp4"
    video.write_bytes(b"\0" * 64)  # the paths are checked, not the video: that is check_readable's
    photo = made_photo(tmp_path / "still.png")
    cases = [
        (video, tmp_path / "out.mp4", 4.5, HeadsearchError, "--margin 4.5: a share of the head box from 0 to 4"),
        (tmp_path / "gone.mp4", tmp_path / "out.mp4", 0.2, MediaError, "gone.mp4: no such file"),
        (photo, tmp_path / "out.mp4", 0.2, MediaError, "still.png: a photo, not a video"),
        (video, video, 0.2, HeadsearchError, "that is the source video; redact never overwrites its source"),
        (video, tmp_path / "none" / "out.mp4", 0.2, HeadsearchError, "no folder"),
        (video, tmp_path / "out.txt", 0.2, HeadsearchError, "name it as a video"),
    ]
    for source, out, margin, kind, said in cases:
        with pytest.raises(kind) as refused:
            check_paths(source, out, margin)
        assert said in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
    (tmp_path / "folder.mp4").mkdir()
    with pytest.raises(HeadsearchError, match="a folder; give a file name"):
        check_paths(video, tmp_path / "folder.mp4")
    check_paths(video, tmp_path / "out.mkv")  # fine: nothing refused, nothing left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4", "folder.mp4", "still.png"]


def test_the_outputs_trail_and_partial_file_lie_beside_it():
    out = Path("/videos/take 3.mp4")
    assert audit_path(out).name == "take 3.mp4.redactions.json" and audit_path(out).parent == out.parent
    partial = partial_path(out)
    assert partial.parent == out.parent and partial.name.startswith(".take 3.redacting-") and partial.suffix == ".mp4"
