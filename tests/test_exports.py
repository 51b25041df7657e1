"""Exports for editors: every format read back with OpenTimelineIO (and its adapters, or the XML itself where the
adapter cannot read) gives the clips, files and ranges `query --json` gives, to the frame, for a 29.97 fps, a 25 fps,
a variable-frame-rate file and a file with a start timecode; markers; handles; a person's MLT selects rendered by
melt and indexed again; screen time of overlapping tracks; both people on screen, or one without the other; the web
app's export links and the player's cues."""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from clips import clip_info, frames_of, read_frames, write_clip
from conftest import DATA, EXAMPLES, HAMILTON, RETALKING, needs_data, run

pytestmark = [needs_data, pytest.mark.slow]

otio = pytest.importorskip("opentimelineio", reason="needs the export extra: pip install 'headsearch[export]'")

D0 = DATA / "more" / "LivePortrait" / "assets" / "examples" / "driving" / "d0.mp4"  # 25 fps
VFR = DATA / "PySceneDetect" / "tests" / "resources" / "goldeneye-vfr-drop3.mp4"
FORMATS = (".otio", ".edl", ".xml", ".fcpxml", ".mlt", ".csv")
ROOT = Path(__file__).resolve().parents[1]


def _with_timecode(src: Path, out: Path, timecode: str = "01:00:00:00") -> Path:
    """The clip again, at 25 fps, with a start timecode (a tmcd track)."""
    return write_clip(out, frames_of(src), fps=25, options={"preset": "ultrafast"}, timecode=timecode, even=True)


def _still(library: Path, video: Path, out: Path) -> Path:
    """A photo of the person of a video's track with the most faces: that track's thumbnail (a head crop)."""
    tracks = [t for t in json.loads(run("list", "--tracks", "--json", "--library", library).stdout) if t["video"] == str(video)]
    best = max(tracks, key=lambda t: (t["faces"], t["sightings"]))
    shutil.copyfile(library / "thumbnails" / f"{best['id']}.jpg", out)
    return out


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("exports")
    timecoded = _with_timecode(D0, folder / "d0-timecode.mov")
    library = folder / "library"
    run("index", HAMILTON, D0, VFR, timecoded, "--library", library, "-q")
    return {"library": library, "folder": folder, "timecoded": timecoded,
            "photos": {"hamilton": EXAMPLES / "lin-manuel-miranda.png", "d0": _still(library, D0, folder / "d0.jpg"),
                       "vfr": _still(library, VFR, folder / "vfr.jpg")}}


def _expected(hits: list[dict]) -> list[tuple[str, int, int]]:
    """Each hit in videos as (file, first frame, end frame) on its file's grid, from the times `query --json` gives."""
    from headsearch.basics.timeline import probe_timing

    out = []
    for h in hits:
        t = probe_timing(h["video"])
        start = _timecode_frames(t)
        out.append((h["video"], start + t.frame_at(h["start"]), start + max(t.frame_at(h["end"]), t.frame_at(h["start"]) + 1)))
    return out


def _timecode_frames(t) -> int:
    if not t.timecode:
        return 0
    hh, mm, ss, ff = (int(x) for x in t.timecode.replace(";", ":").split(":"))
    return ((hh * 60 + mm) * 60 + ss) * round(float(t.rate)) + ff


def _otio_clips(path: Path, rate: float | None = None) -> list[tuple[str, int, int]]:
    kwargs = {"rate": rate} if rate else {}
    tl = otio.adapters.read_from_file(str(path), **kwargs)
    out = []
    for c in tl.find_clips():
        r = c.source_range
        out.append((otio.url_utils.filepath_from_url(c.media_reference.target_url), round(r.start_time.value),
                    round(r.start_time.value + r.duration.value)))
    return out


def _fcpxml_clips(path: Path) -> list[tuple[str, int, int]]:
    """FCPXML's clips from the XML (the adapter reads NTSC rates as whole numbers): rational seconds to frames."""
    root = ET.parse(path).getroot()
    duration = {f.get("id"): Fraction(f.get("frameDuration").rstrip("s")) for f in root.iter("format")}
    assets = {a.get("id"): (a.get("src"), a.get("format")) for a in root.iter("asset")}
    out = []
    for clip in root.iter("clip"):
        src, fmt = assets[clip.find("video").get("ref")]
        frame = duration[fmt]
        start, length = (Fraction(clip.get(k, "0s").rstrip("s")) for k in ("start", "duration"))
        assert (start / frame).denominator == 1 and (length / frame).denominator == 1, "not on the frame grid"
        out.append((otio.url_utils.filepath_from_url(src), int(start / frame), int((start + length) / frame)))
    return out


def _mlt_clips(path: Path) -> list[tuple[str, int, int]]:
    root = ET.parse(path).getroot()
    producers = {p.get("id"): p.find("property[@name='resource']").text for p in root.iter("producer") if p.find("property[@name='resource']") is not None}
    return [(otio.url_utils.filepath_from_url(producers[e.get("producer")]), int(float(e.get("in"))), int(float(e.get("out"))) + 1)
            for pl in root.iter("playlist") if pl.get("id") != "background" for e in pl.iter("entry") if e.get("producer") in producers]


def _csv_clips(path: Path) -> list[tuple[str, int, int]]:
    return [(r["video"], int(r["first_frame"]), int(r["last_frame"])) for r in csv.DictReader(path.open())]


@pytest.mark.parametrize("which", ["hamilton", "d0", "vfr"])
def test_every_format_gives_the_clips_files_and_ranges_of_query_json(media, which):
    from headsearch.basics.timeline import probe_timing

    photo, library, folder = media["photos"][which], media["library"], media["folder"] / which
    folder.mkdir()
    exports = [folder / f"selects{ext}" for ext in FORMATS]
    r = run("query", photo, "--library", library, "--json", "--no-pictures", "--videos-only", *[a for e in exports for a in ("--export", e)])
    hits = json.loads(r.stdout)
    assert hits, r.stderr
    expected = _expected(hits)
    # the start timecode's frames count only where a file carries one: the plain files start at frame 0
    plain = [(v, a - _timecode_frames(probe_timing(v)), b - _timecode_frames(probe_timing(v))) for v, a, b in expected]
    rates = {float(probe_timing(h["video"]).rate) for h in hits}
    assert _otio_clips(folder / "selects.otio") == expected
    assert _otio_clips(folder / "selects.xml") == expected
    assert _fcpxml_clips(folder / "selects.fcpxml") == expected
    assert _otio_clips(folder / "selects.edl", rate=min(rates)) == expected
    assert _mlt_clips(folder / "selects.mlt") == plain  # MLT counts frames from the file's first
    assert [(v, a, b) for v, a, b in _csv_clips(folder / "selects.csv")] == plain
    with open(folder / "selects.csv", newline="") as f:  # the score --json gives, in the same order
        assert [float(row["score"]) for row in csv.DictReader(f)] == [h["score"] for h in hits]
    if which == "vfr":
        assert "variable frame rate" in r.stderr
        t = probe_timing(VFR)
        for h, (_, a, _end) in zip(hits, plain, strict=True):  # the file's own times, within half a frame of its grid
            assert abs(t.time_of(a) - h["start"]) <= 0.5 / float(t.rate) + 1e-6
    if which == "d0":
        assert any(v == str(media["timecoded"]) for v, _, _ in expected)
        tc = next(a for v, a, _ in expected if v == str(media["timecoded"]))
        assert tc >= 3600 * 25  # 01:00:00:00 at 25 fps, and on from there


def test_markers_handles_and_vtt(media):
    folder = media["folder"] / "markers"
    folder.mkdir()
    photo, library = media["photos"]["hamilton"], media["library"]
    hits = json.loads(run("query", photo, "--library", library, "--json", "--no-pictures", "--export", folder / "m.otio", "--markers").stdout)
    tl = otio.adapters.read_from_file(str(folder / "m.otio"))
    clips = list(tl.find_clips())
    assert [Path(otio.url_utils.filepath_from_url(c.media_reference.target_url)) for c in clips] == [HAMILTON]
    clip = clips[0]
    assert clip.source_range == clip.media_reference.available_range  # the whole source clip
    assert len(clip.markers) == len(hits)
    for m, h in zip(sorted(clip.markers, key=lambda m: m.marked_range.start_time.value), sorted(hits, key=lambda h: h["start"]), strict=True):
        meta = m.metadata["headsearch"]
        assert meta["track_id"] == h["track_id"] and meta["tier"] == h["tier"] and m.name.startswith("lin-manuel-miranda")
        assert m.color == {"same_look": "GREEN", "other_look": "YELLOW"}[h["tier"]]
    run("query", photo, "--library", library, "--no-pictures", "--export", folder / "h.otio", "--handles", "1", "--export", folder / "w.vtt")
    with_handles, without = _otio_clips(folder / "h.otio"), _expected(hits)
    for (_, a, b), (_, a0, b0) in zip(with_handles, without, strict=True):
        assert a == max(0, a0 - 30) and b == min(275, b0 + 30)  # 1 s at 30000/1001 is 30 frames, within the file
    cues = (folder / "w.vtt").read_text().split("\n\n")
    assert cues[0] == "WEBVTT" and "00:00:03.588 --> 00:00:07.892\nlin-manuel-miranda (same look)" in (folder / "w.vtt").read_text()
    r = run("query", photo, "--library", library, "--export", folder / "x.mov", ok=False)
    assert r.exit_code == 1 and "no export format for .mov" in r.stderr


def test_a_missing_extra_is_one_line(media, tmp_path):
    """Without OpenTimelineIO (as the lean install has it) a timeline export says how to get it; VTT and CSV still work."""
    code = ("import sys; sys.modules['opentimelineio'] = None; from cli.main import main; main()")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    base = [sys.executable, "-c", code, "query", str(media["photos"]["hamilton"]), "--library", str(media["library"]), "--no-pictures"]
    r = subprocess.run([*base, "--export", str(tmp_path / "x.otio")], env=env, capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0 and f"pip install -e '{ROOT}[export]'" in r.stderr, r.stderr  # as installed
    r = subprocess.run([*base, "--export", str(tmp_path / "x.csv")], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and (tmp_path / "x.csv").is_file(), r.stderr


def test_a_persons_mlt_selects_render_and_are_found_again(tmp_path):
    """A person of two clips, exported as MLT selects, rendered headless by melt, indexed again: the person is found in
    every cut of the render."""
    melt = shutil.which("melt")
    if melt is None:
        assert not os.environ.get("CI"), "CI needs melt (apt-get install melt; .ci/run does)"
        pytest.skip("no melt (apt-get install melt)")
    mead = DATA / "more" / "dreamtalk" / "data" / "style_clip" / "video"
    clips = [mead / "M030_front_angry_level3_001.mp4", mead / "M030_front_happy_level3_001.mp4"]
    library = tmp_path / "library"
    run("index", *clips, "--library", library, "-q")
    people = json.loads(run("people", "--library", library, "--json", "--unlisted").stdout)
    person = max(people, key=lambda p: len(p["tracks"]))
    assert len(person["tracks"]) == 2 and len(person["videos"]) == 2
    run("people", "--library", library, "name", person["id"], "M030")
    selects = tmp_path / "m030.mlt"
    r = run("people", "export", "M030", selects, "--library", library)
    assert "exported 2 moments of 2 files" in r.stderr
    render = tmp_path / "render.mp4"
    subprocess.run([melt, str(selects), "-consumer", f"avformat:{render}", "vcodec=libx264", "preset=ultrafast", "an=1", "-silent"],
                   check=True, capture_output=True, timeout=300)
    rendered, source = clip_info(render), clip_info(clips[0])  # the source's size, not melt's 720x576
    assert (rendered.width, rendered.height) == (source.width, source.height)
    again = tmp_path / "again"
    run("index", render, "--library", again, "-q")
    shots = json.loads(run("list", "--tracks", "--json", "--library", again).stdout)
    still = _still(library, clips[0], tmp_path / "m030.jpg")
    hits = json.loads(run("query", still, "--library", again, "--json", "--no-pictures").stdout)
    entries = [e for e in ET.parse(selects).getroot().iter("entry") if e.get("producer") != "solid_black"]
    cuts, at = [], 0.0
    fps = 25.0
    for e in entries:  # where each cut lies in the render
        n = int(float(e.get("out"))) - int(float(e.get("in"))) + 1
        cuts.append((at, at + n / fps))
        at += n / fps
    assert len(cuts) == 2 and shots
    for a, b in cuts:
        assert any(h["start"] < b - 0.05 and h["end"] > a + 0.05 for h in hits), (a, b, hits)


def test_screen_time_counts_overlapping_tracks_once(tmp_path):
    """One person twice in the same frames (the clip beside its mirror image): two tracks that overlap, one person
    once merged; screen time is the union of their ranges, not their sum."""
    import cv2

    out = tmp_path / "twice.mp4"
    frames = read_frames(RETALKING / "3.mp4", stop=100)
    h, w = frames[0].shape[:2]
    write_clip(out, (cv2.resize(np.hstack([rgb, cv2.flip(rgb, 1)]), (w, h // 2 * 2), interpolation=cv2.INTER_AREA)
                     for rgb in frames), fps=25, options={"preset": "ultrafast"})
    library = tmp_path / "library"
    run("index", out, "--library", library, "-q")
    tracks = json.loads(run("list", "--tracks", "--json", "--library", library).stdout)
    people = json.loads(run("people", "--library", library, "--json", "--unlisted").stdout)
    assert len(tracks) == 2 and len(people) == 2  # two heads in one frame are never one person by themselves
    run("people", "--library", library, "merge", people[0]["id"], people[1]["id"])
    rows = json.loads(run("people", "screen-time", "--json", "--library", library).stdout)
    assert len(rows) == 1
    (a1, b1), (a2, b2) = sorted((t["start"], t["end"]) for t in tracks)
    assert a2 < b1  # they overlap
    union = max(b1, b2) - min(a1, a2)
    assert abs(rows[0]["seconds"] - union) < 1e-3 and rows[0]["appearances"] == 1
    assert rows[0]["seconds"] < (b1 - a1) + (b2 - a2) - 1.0  # the overlap counted once
    from headsearch.people.screen_time import union as merged
    assert merged([(0.0, 2.0), (1.0, 3.0), (3.0, 4.0), (5.0, 6.0)]) == [(0.0, 4.0), (5.0, 6.0)]
    text = run("people", "screen-time", "--csv", "--library", library).stdout.splitlines()
    assert text[0].startswith("person_id,person,video,seconds") and len(text) == 2
    sheet = tmp_path / "sheet.png"
    run("people", "screen-time", str(people[0]["id"]), "--sheet", sheet, "--library", library)
    assert sheet.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_both_on_screen_or_one_without_the_other(hamilton_library):
    """In the hamilton clip Miranda and Alex are both on the stage in the first shot only."""
    miranda, alex = EXAMPLES / "lin-manuel-miranda.png", EXAMPLES / "alex-lacamoire.png"
    alone = json.loads(run("query", miranda, "--library", hamilton_library, "--json", "--no-pictures", "--videos-only").stdout)
    both = json.loads(run("query", miranda, "--with", alex, "--library", hamilton_library, "--json", "--no-pictures").stdout)
    without = json.loads(run("query", miranda, "--without", alex, "--library", hamilton_library, "--json", "--no-pictures").stdout)
    assert [(h["start"], h["end"]) for h in both] == [(0.852, 1.519)]
    assert {(h["start"], h["end"]) for h in without} == {(h["start"], h["end"]) for h in alone} - {(0.852, 1.519)}
    assert run("query", miranda, "--with", alex, "--without", alex, "--library", hamilton_library, ok=False).exit_code == 2
    # Miranda's medium shot ends on the cut (7.892 s) where Obama's begins: never on screen together, no moment at the cut.
    obama = EXAMPLES / "obama_small.jpg"
    apart = json.loads(run("query", miranda, "--with", obama, "--library", hamilton_library, "--json", "--no-pictures").stdout)
    assert not [h for h in apart if h["video"].endswith("short_hamilton_clip.mp4") and h["start"] >= 3.588], apart


def test_web_export_links_and_the_players_cues(hamilton_library, tmp_path):
    from starlette.testclient import TestClient

    from serve.app import create_app

    library = shutil.copytree(hamilton_library, tmp_path / "library")
    run("people", "--library", library)
    client = TestClient(create_app(library, cache_dir=tmp_path / "cache"))
    page = client.get("/")
    token = page.text.split('name="csrf" value="')[1].split('"')[0]
    r = client.post("/", files={"photo": ("miranda.png", (EXAMPLES / "lin-manuel-miranda.png").read_bytes(), "image/png")},
                    data={"k": "3", "csrf": token}, headers={"origin": "http://testserver"})
    assert r.status_code == 200 and "Export for an editor" in r.text
    href = r.text.split('href="/exports/')[1].split('"')[0]
    assert href.endswith(".otio")
    tl = otio.adapters.read_from_string(client.get(f"/exports/{href}").text, "otio_json")
    assert Path(otio.url_utils.filepath_from_url(tl.find_clips()[0].media_reference.target_url)) == HAMILTON
    people = client.get("/api/people").json()["people"]
    pid = next(p["id"] for p in people if any(Path(v).name == HAMILTON.name for v in p["videos"]))
    twin = client.get(f"/api/people/{pid}/export").json()
    assert twin["moments"] and any(e["format"] == "EDL" for e in twin["exports"])
    assert client.get(f"/people/{pid}/export.edl").text.startswith("TITLE:")
    assert "on screen" in client.get(f"/people/{pid}").text
    video = next(v for v in client.get("/api/videos").json()["videos"] if v["name"] == HAMILTON.name)
    who = client.get(f"/videos/{video['id']}/who.vtt")
    chapters = client.get(f"/videos/{video['id']}/chapters.vtt").text
    assert who.headers["content-type"].startswith("text/vtt") and who.text.startswith("WEBVTT")
    assert chapters.count("Shot ") == 4 and "00:00:01.519 --> 00:00:03.588" in chapters
    watch = client.get(f"/watch/{video['id']}?start=1.520&end=3.588").text
    assert f'src="/videos/{video["id"]}/who.vtt"' in watch and 'kind="chapters"' in watch
    run("people", "export", "--video", HAMILTON, tmp_path / "who.vtt", "--library", library)
    said = run("people", "export", "--video", HAMILTON, tmp_path / "chapters.vtt", "--chapters", "--library", library).stderr
    assert "exported 4 chapters of 1 file" in said, said  # chapters counted as chapters
    assert (tmp_path / "who.vtt").read_bytes() == who.content and (tmp_path / "chapters.vtt").read_text() == chapters


def test_every_export_is_checked_before_any_is_written(hamilton_library, tmp_path):
    """A .vtt holds one video's cues: asked beside a .csv for moments of several videos, neither is written, one line."""
    csv_file, vtt_file = tmp_path / "hits.csv", tmp_path / "hits.vtt"
    result = run("query", EXAMPLES / "lin-manuel-miranda.png", "--library", hamilton_library, "--show-weak", "-k", "10",
                 "--export", csv_file, "--export", vtt_file, ok=False)
    assert "holds the cues of one video" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) <= 2
    assert not csv_file.exists() and not vtt_file.exists()


def test_an_export_is_an_ordinary_file_in_a_folder_that_exists(media, tmp_path):
    """Made with the user's umask (not 0600), and never into a mistyped folder, which is said in one line."""
    target = tmp_path / "moments.csv"
    old = os.umask(0o022)
    try:
        run("query", media["photos"]["hamilton"], "--library", media["library"], "--no-pictures", "--export", target)
    finally:
        os.umask(old)
    assert target.stat().st_mode & 0o777 == 0o644
    missing = tmp_path / "no-such-folder" / "moments.csv"
    r = run("query", media["photos"]["hamilton"], "--library", media["library"], "--no-pictures", "--export", missing, ok=False)
    assert "no-such-folder: no such folder to export into" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not missing.parent.exists()
