"""Exports in the fast tier: `query --export` and `people export` (OTIO, WebVTT, CSV of moments) through the real CLI,
on clips the tests make (faces framed for the fake detector, written without loss so the frame stays magenta) and a
library of the fake model. Each file holds the moments `query --json` answers, on each clip's own frame grid: its rate
(25, and 30000/1001), its start timecode, handles within the file, rank or time order, markers on whole clips."""
from __future__ import annotations

import csv
import io
import json
from fractions import Fraction
from pathlib import Path

import fake_detector
import numpy as np
import pytest
from clips import clip_info, write_clip
from conftest import made_picture, run
from fake_model import FAKE_MODEL
from PIL import Image

FACES = {"a": made_picture(11, 80, 100), "b": made_picture(12, 80, 100)}  # two people: their faces' own colours
LOSSLESS = {"pix_fmt": "yuv444p", "options": {"qp": "0", "preset": "ultrafast"}}  # the magenta frame kept exactly
NTSC = Fraction(30000, 1001)


def picture(background: int, people: list[tuple[str, int]], step: int = 0) -> np.ndarray:
    """A generated background with each person's face at x (moving half a pixel a frame), framed as a face."""
    pic = made_picture(background, 320, 240)
    for who, x in people:
        x += step // 2
        pic[60:160, x:x + 80] = FACES[who]
        fake_detector.mark_face(pic, (x, 60, x + 80, 160))
    return pic


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> dict[str, Path]:
    """stage.mp4: 25 fps, 4 s, A from the start to 2 s, B from 2.4 s; tc.mp4: 29.97 fps, 4 s, start timecode
    01:00:00:00, A from 1 s to 3 s; a photo of A; a library of both clips with the fake model."""
    folder = tmp_path_factory.mktemp("exports-fast")
    stage = write_clip(folder / "stage.mp4", (picture(0, [("a", 20)] if i < 50 else [("b", 150)] if i >= 60 else [], i)
                                              for i in range(100)), fps=25, **LOSSLESS)
    tc = write_clip(folder / "tc.mp4", (picture(1, [("a", 100)] if 30 <= i < 90 else [], i) for i in range(120)), fps=NTSC,
                    timecode="01:00:00:00", **LOSSLESS)
    photo = folder / "a.png"
    Image.fromarray(picture(2, [("a", 120)])).save(photo)
    library = folder / "library"
    with fake_detector.installed():  # the module's fixture runs before the test's own fakes are in place
        run("index", stage, tc, "--library", library, "--model", FAKE_MODEL, "-q")
    return {"stage": stage, "tc": tc, "photo": photo, "library": library, "out": folder / "out"}


def query_hits(media, *extra) -> list[dict]:
    """A's two tracks (stage.mp4 and tc.mp4), as `query --json` ranks them."""
    return json.loads(run("query", media["photo"], "--library", media["library"], "-k", "2", "--json", *extra).stdout)


def exported(media, name: str, *args) -> Path:
    out = media["out"]
    out.mkdir(exist_ok=True)
    path = out / name
    run("query", media["photo"], "--library", media["library"], "-k", "2", "--export", path, *args)
    return path


def rows_of(path: Path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


def rate_of(video: str) -> Fraction:
    return Fraction(25) if Path(video).name == "stage.mp4" else NTSC


def frame_of(seconds: float, video: str) -> int:
    """The frame of the generated clip shown at `seconds` (frame n at n / rate; both clips start at 0)."""
    return round(seconds * rate_of(video))


def smpte(frames: int, start: str | None) -> str:
    """HH:MM:SS:FF of `frames` counted at the nominal rate from a start timecode (30 for 29.97, non-drop)."""
    fps = 30 if start else 25
    total = frames + (3600 * fps if start == "01:00:00:00" else 0)
    return f"{total // fps // 3600:02d}:{total // fps // 60 % 60:02d}:{total // fps % 60:02d}:{total % fps:02d}"


def test_the_generated_clips_are_read_as_made(media):
    assert clip_info(media["stage"]).frames == 100 and clip_info(media["tc"]).frames == 120
    hits = query_hits(media)
    assert sorted(Path(h["video"]).name for h in hits) == ["stage.mp4", "tc.mp4"]
    by_name = {Path(h["video"]).name: h for h in hits}
    assert by_name["stage.mp4"]["start"] == 0.0 and 1.0 <= by_name["tc.mp4"]["start"] < 1.5  # A appears at 1 s there


def test_csv_rows_are_the_query_hits_on_each_files_grid_and_timecode(media):
    hits = query_hits(media)
    rows = rows_of(exported(media, "moments.csv"))
    assert [(r["video"], float(r["start"]), float(r["end"]), int(r["rank"])) for r in rows] == \
        [(h["video"], h["start"], h["end"], n) for n, h in enumerate(hits, 1)]
    for r in rows:
        first, last = int(r["first_frame"]), int(r["last_frame"])
        assert first == frame_of(float(r["start"]), r["video"]) and last == max(frame_of(float(r["end"]), r["video"]), first + 1)
        tc = "01:00:00:00" if Path(r["video"]).name == "tc.mp4" else None
        assert (r["rate"], r["source_in"], r["source_out"]) == (
            "25" if tc is None else "30000/1001", smpte(first, tc), smpte(last, tc))
        assert r["person"] == "a" and r["track_id"] and float(r["score"]) > 0.9


def test_handles_stay_within_the_file_and_time_order_sorts_by_file(media):
    plain = {r["video"]: r for r in rows_of(exported(media, "plain.csv"))}
    rows = rows_of(exported(media, "handles.csv", "--handles", "0.4", "--order", "time"))
    assert [Path(r["video"]).name for r in rows] == ["stage.mp4", "tc.mp4"]  # by file, not by rank
    for r in rows:
        handle = round(0.4 * float(rate_of(r["video"])))  # 10 frames at 25 fps, 12 at 29.97
        frames = clip_info(r["video"]).frames
        assert int(r["first_frame"]) == max(0, int(plain[r["video"]]["first_frame"]) - handle)
        assert int(r["last_frame"]) == min(frames, int(plain[r["video"]]["last_frame"]) + handle)
    assert rows[0]["first_frame"] == "0"  # A is on stage.mp4's first frame: no handle before the file


def test_otio_selects_hold_the_same_frames_and_reference_the_files(media):
    otio = pytest.importorskip("opentimelineio", reason="needs the export extra: pip install 'headsearch[export]'")
    rows = rows_of(exported(media, "selects.csv"))
    timeline = otio.adapters.read_from_file(str(exported(media, "selects.otio")))
    assert [t.name for t in timeline.tracks] == ["a"]  # one track a query head
    clips = list(timeline.tracks[0])
    assert len(clips) == len(rows) == 2
    for clip, row in zip(clips, rows, strict=True):
        rate = float(rate_of(row["video"]))
        start = otio.opentime.from_timecode("01:00:00:00", rate) if Path(row["video"]).name == "tc.mp4" else otio.opentime.RationalTime(0, rate)
        assert clip.media_reference.target_url == Path(row["video"]).resolve().as_uri()
        assert clip.source_range.start_time.rate == pytest.approx(rate)
        assert clip.source_range.start_time.value - start.value == int(row["first_frame"])
        assert clip.source_range.duration.value == int(row["last_frame"]) - int(row["first_frame"])
        assert clip.media_reference.available_range.duration.value == clip_info(row["video"]).frames
        assert clip.metadata["headsearch"]["track_id"] == int(row["track_id"])


def test_otio_markers_lie_on_the_whole_source_clips(media):
    otio = pytest.importorskip("opentimelineio", reason="needs the export extra: pip install 'headsearch[export]'")
    rows = rows_of(exported(media, "markers.csv"))
    timeline = otio.adapters.read_from_file(str(exported(media, "markers.otio", "--markers")))
    assert [t.name for t in timeline.tracks] == ["sources"]
    sources = {Path(c.media_reference.target_url).name: c for c in timeline.tracks[0]}
    assert sorted(sources) == ["stage.mp4", "tc.mp4"]
    for row in rows:
        clip = sources[Path(row["video"]).name]
        assert clip.source_range == clip.media_reference.available_range  # the whole file
        (marker,) = clip.markers
        assert marker.name == "a uncalibrated" and marker.color == otio.schema.MarkerColor.PURPLE  # the fake model has no bars
        assert marker.marked_range.start_time.value - clip.source_range.start_time.value == int(row["first_frame"])
        assert marker.marked_range.duration.value == int(row["last_frame"]) - int(row["first_frame"])


def test_webvtt_holds_one_videos_cues(media):
    out = media["out"]
    out.mkdir(exist_ok=True)
    r = run("query", media["photo"], "--library", media["library"], "-k", "2", "--export", out / "both.vtt", ok=False)
    assert "holds the cues of one video: narrow the moments with --under FILE" in r.stderr and "Traceback" not in r.output
    assert not (out / "both.vtt").exists()
    (hit,) = query_hits(media, "--under", media["tc"])
    path = exported(media, "tc.vtt", "--under", media["tc"])
    header, blank, number, times, label = path.read_text().splitlines()
    assert (header, blank, number, label) == ("WEBVTT", "", "1", "a")

    def seconds(cue_time: str) -> float:  # hh:mm:ss.mmm
        h, m, s = cue_time.split(":")
        return int(h) * 3600 + int(m) * 60 + float(s)

    start, end = (seconds(t) for t in times.split(" --> "))
    assert start == pytest.approx(hit["start"], abs=1e-3) and end == pytest.approx(hit["end"], abs=1e-3)  # a player's times, not timecode


def test_people_export_and_the_chapters_of_a_video(media):
    people = json.loads(run("people", "--library", media["library"], "--json").stdout)
    (a,) = [p for p in people if sorted(Path(v).name for v in p["videos"]) == ["stage.mp4", "tc.mp4"]]
    out = media["out"]
    out.mkdir(exist_ok=True)
    run("people", "name", a["id"], "Ada", "--library", media["library"])
    r = run("people", "export", "Ada", out / "ada.csv", "--library", media["library"])
    assert "exported 2 moments of 2 files" in r.stderr
    rows = rows_of(out / "ada.csv")
    assert {r["person"] for r in rows} == {"Ada"} and sorted(int(r["track_id"]) for r in rows) == sorted(a["tracks"])
    cues = run("people", "export", out / "stage.vtt", "--video", media["stage"], "--library", media["library"])
    assert "exported 1 moment of 1 file" in cues.stderr
    assert (out / "stage.vtt").read_text().splitlines()[4] == "Ada"  # who is on screen
    run("people", "export", out / "chapters.vtt", "--video", media["stage"], "--chapters", "--library", media["library"])
    assert (out / "chapters.vtt").read_text().splitlines()[2:5] == ["shot-1", "00:00:00.000 --> 00:00:04.000", "Shot 1"]


@pytest.mark.parametrize(("name", "said"), [
    ("moments.txt", "no export format for .txt"),
    ("missing/moments.csv", "no such folder to export into"),
])
def test_a_bad_export_is_one_line_before_any_file_is_written(media, name, said):
    out = media["out"] / f"bad-{Path(name).stem}"
    out.mkdir(parents=True, exist_ok=True)
    r = run("query", media["photo"], "--library", media["library"], "--export", out / "first.csv", "--export", out / name, ok=False)
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and said in errors[0] and "Traceback" not in r.output
    assert not (out / "first.csv").exists()  # every file checked before any is written
