"""Times on the file's presentation timeline (what players and PyAV's `frame.time` show), for
decord and PyAV alike, in new libraries and in libraries made before (migration)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from clips import frame_times, remux, write_clip
from conftest import EXAMPLES, HAMILTON, RETALKING, library_db, made_picture, needs_data, query_json, run
from fake_model import FAKE_MODEL
from test_library_format import format1_library

from headsearch.basics.timeline import format_time
from indexer.decode import VideoStream

LIN = EXAMPLES / "lin-manuel-miranda.png"


def made_clip(path: Path, fps: int = 30, frames: int = 45) -> Path:
    """A generated clip: a picture sliding one way, `frames` frames at `fps`."""
    picture = made_picture(0)
    write_clip(path, (np.roll(picture, 4 * i, axis=1) for i in range(frames)), fps=fps)
    return path


def stored_times(library: Path, video: Path) -> tuple[list[tuple], list[tuple]]:
    with library_db(library) as con:
        vid = con.execute("select id from videos where path = ?", [str(video)]).fetchone()[0]
        shots = con.execute("select start_frame, start_time, end_time from shots where video_id = ? order by shot_index", [vid]).fetchall()
        obs = con.execute("select frame_index, time from observations where video_id = ?", [vid]).fetchall()
    return shots, obs


@needs_data
@pytest.mark.slow  # the real clip, indexed with the default model
def test_hamilton_times_are_pyav_presentation_times(hamilton_library):
    truth = frame_times(HAMILTON)
    assert truth[0] == pytest.approx(0.852, abs=1e-3)
    assert [round(truth[i], 3) for i in (20, 82, 211)] == [1.519, 3.588, 7.892]
    shots, obs = stored_times(hamilton_library, HAMILTON)
    assert [s[0] for s in shots] == [0, 20, 82, 211]
    assert [s[1] for s in shots] == pytest.approx([truth[0], truth[20], truth[82], truth[211]], abs=1e-4)
    assert shots[-1][2] == pytest.approx(truth[-1] + 1001 / 30000, abs=2e-3)  # the last frame ends there
    assert obs and all(t == pytest.approx(truth[i], abs=1e-4) for i, t in obs)
    # Lin's shot starts at 3.588 s in a player: JSON in seconds, text as h:mm:ss.mmm.
    top = query_json(hamilton_library, LIN, "-k", "1")[0]
    assert top["start"] == pytest.approx(3.588, abs=1e-3) and top["shot"]["start"] == pytest.approx(3.588, abs=1e-3)
    text = run("query", LIN, "--library", hamilton_library, "-k", "1").stdout
    assert "0:00:03.588-0:00:07.892" in text and f"at {format_time(top['time'])}" in text


@pytest.mark.parametrize("decoder", ["decord", "pyav"])
def test_late_start_video_both_decoders(tmp_path, decoder):
    source = made_clip(tmp_path / "clip.mp4")
    late = remux(source, tmp_path / "late.mp4", shift=2.5)  # its video starts 2.5 s late on the timeline
    truth = frame_times(late)
    assert truth[0] == pytest.approx(2.5 + frame_times(source)[0], abs=1e-3)  # 2.5 s later than the source starts
    stream = VideoStream(late, decoders=(decoder,))
    assert stream.info.decoder == decoder and stream.info.start_time == pytest.approx(truth[0], abs=1e-4)
    times = [f.time for f in stream]
    assert len(times) == len(truth)
    assert np.abs(np.array(times) - np.array(truth)).max() < 1e-4


@needs_data
@pytest.mark.slow  # a real clip: its sightings' times need heads found
def test_late_start_video_indexed_and_queried(tmp_path):
    late = remux(RETALKING / "1.mp4", tmp_path / "late.mp4", shift=2.5)  # its video starts 2.5 s late on the timeline
    lib = tmp_path / "lib"
    run("index", late, "--library", lib, "--model", FAKE_MODEL, "-q")  # the model is incidental: the tests' fake
    truth = frame_times(late)
    shots, obs = stored_times(lib, late)
    assert shots[0][1] == pytest.approx(truth[0], abs=1e-4)
    assert obs and all(t == pytest.approx(truth[i], abs=1e-4) for i, t in obs)
    with library_db(lib) as con:
        duration = con.execute("select duration from videos").fetchone()[0]
    assert duration == pytest.approx(truth[-1] - truth[0] + (truth[1] - truth[0]), abs=0.05)  # how long it plays, not where it ends


@needs_data
@pytest.mark.slow  # the committed library names a real clip
def test_format1_library_times_moved_onto_the_timeline(tmp_path):
    """The committed format-1 library (decord times counted from the first frame) is upgraded in place:
    its video's shots, tracks and sightings move by where the video stream starts."""
    library = format1_library(tmp_path)
    video = RETALKING / "1.mp4"
    _, before = stored_times(library, video)
    with library_db(library) as con:
        track_before = con.execute("select start_time, end_time, best_time from tracks t join videos v on t.video_id = v.id "
                                   "where v.path = ?", [str(video)]).fetchone()
    truth = frame_times(video)
    assert before[0][1] == pytest.approx(truth[before[0][0]] - truth[0], abs=1e-4)  # as decord counted
    run("stats", "--library", library)  # opening upgrades it
    shots, after = stored_times(library, video)
    assert len(after) == len(before) and all(t == pytest.approx(truth[i], abs=1e-4) for i, t in after)
    assert shots[0][1] == pytest.approx(truth[0], abs=1e-4)
    with library_db(library) as con:
        track_after = con.execute("select start_time, end_time, best_time from tracks t join videos v on t.video_id = v.id "
                                  "where v.path = ?", [str(video)]).fetchone()
        sizes = con.execute("select source_width, source_height from videos where path = ?", [str(video)]).fetchone()
        photo_times = con.execute("select count(*) from observations o join videos v on o.video_id = v.id "
                                  "where v.kind = 'image' and o.time <> 0").fetchone()[0]
    assert track_after == pytest.approx(tuple(x + truth[0] for x in track_before), abs=1e-4)
    assert sizes == (700, 700) and photo_times == 0
    # Opening it again changes nothing more.
    run("stats", "--library", library)
    assert stored_times(library, video)[1] == after
    assert json.loads((library / "manifest.json").read_text())["format"] >= 3


def test_time_format():
    assert format_time(0) == "0:00:00.000"
    assert format_time(3.5881) == "0:00:03.588"
    assert format_time(3725.0004) == "1:02:05.000"
