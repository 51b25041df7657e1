"""`compare` for generation pipelines (issue 41): how each sampled frame was judged (by the face, by the look of the head,
or not, and why not) and the person's view, with summaries that add up; the seams of clips generated in chunks; specs."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest
from browser import launch, needs_chromium, screenshot
from clips import timed_frames, write_clip
from conftest import DATA, EXAMPLES, HAMILTON, needs_data, run

from headsearch.compare.reference import Reference, ReferenceHead
from headsearch.compare.report import coverage_line, whole_percents
from headsearch.compare.timeline import JUDGED, REASONS, VIEWS, compare_analysis, view_of
from headsearch.evaluation.thresholds import Thresholds
from schemas.records import Box, FaceDetection, FileResult, FileStamp, HeadTrack, MediaKind, Observation, Shot, VectorKind

FIVE_FRAMES = DATA / "face-api.js" / "test" / "media" / "video.mp4"  # the shortest clip
THRESHOLDS = Thresholds(far=1e-3, identity=0.4, same_look=0.6, model="m", version="1")


def unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(8).astype(np.float32)
    return v / np.linalg.norm(v)


def face(x: float, side: float, score: float = 0.9, yaw_shift: float = 0.0) -> FaceDetection:
    """A face box with five landmarks as on a face; `yaw_shift` moves the nose sideways (a turned face)."""
    lm = np.array([[x + 0.3 * side, 0.4 * side], [x + 0.7 * side, 0.4 * side], [x + (0.5 + yaw_shift) * side, 0.6 * side],
                   [x + 0.35 * side, 0.8 * side], [x + 0.65 * side, 0.8 * side]], np.float32)
    return FaceDetection(Box(x, 0, x + side, side), lm, score)


def sighting(frame: int, f: FaceDetection | None, vector: np.ndarray | None) -> Observation:
    box = f.box if f is not None else Box(300, 0, 360, 60)
    return Observation(frame, frame / 10, box, f, {VectorKind.ID: vector} if vector is not None else {})


def analysis(tracks: list[HeadTrack], dropped: list[tuple[HeadTrack, str]], frames: int = 6) -> FileResult:
    return FileResult(FileStamp("clip.mp4", 1, 0.0, "x"), MediaKind.VIDEO, 640, 360, 10.0, frames / 10, frames, frames, "test",
                      [Shot(0, 0, frames - 1, 0.0, frames / 10)], tracks, dropped_tracks=dropped,
                      samples=[(i, i / 10) for i in range(frames)])


def test_each_frame_is_judged_or_says_why_not_and_the_shares_add_up():
    me = unit(1)
    ref = Reference.of("me", [ReferenceHead({VectorKind.ID: me}, True)], ["me.jpg"])
    mine = HeadTrack(0, [sighting(0, face(10, 100), me), sighting(1, face(10, 100, yaw_shift=0.45), me), sighting(2, None, None)])
    tiny = HeadTrack(0, [sighting(3, face(400, 20, score=0.5), None)])
    blur = HeadTrack(0, [sighting(4, face(400, 80, score=0.5), None)])
    poster = HeadTrack(0, [sighting(4, face(200, 80), None), sighting(5, face(200, 80), None)])
    frames = compare_analysis(analysis([mine], [(tiny, "no confident face (1 face detections, best score 0.50)"),
                                                (blur, "no confident face (1 face detections, best score 0.50)"),
                                                (poster, "static overlay (the box and its pixels stay the same while the picture changes)")]),
                              [ref], THRESHOLDS)[0].frames
    assert [(f.judged, f.reason) for f in frames] == [("face", None), ("face", None), ("none", "no_face"), ("none", "too_small"),
                                                      ("none", "low_confidence"), ("none", "static_overlay")]
    assert frames[0].view == "frontal" and frames[1].view in ("three_quarter", "profile") and frames[2].view is None
    assert all(f.judged in JUDGED and (f.reason in REASONS) == (f.judged == "none") for f in frames)


def test_views_and_whole_percents():
    assert [view_of(True, y) for y in (0.0, -29.9, 30.0, 60.0, -61.0, None)] == ["frontal", "frontal", "three_quarter", "profile",
                                                                                  "profile", "frontal"]  # 60 is profile (YAW_VIEWS)
    assert view_of(False, None) == "back" and set(VIEWS) == {"frontal", "three_quarter", "profile", "back"}
    for shares in ({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}, {"a": 0.625, "b": 0.3125, "c": 0.0625}, {"a": 0.995, "b": 0.005}):
        pct = whole_percents(shares)
        assert sum(pct.values()) == 100 and all(abs(pct[k] - 100 * v) < 1 for k, v in shares.items())


@needs_data
@pytest.mark.slow
def test_every_frame_of_real_clips_is_judged_or_told_why_and_alex_turned_is_profile():
    alex = run("compare", HAMILTON, FIVE_FRAMES, "--ref", EXAMPLES / "alex-lacamoire.png", "--json", "--no-progress")
    out = json.loads(alex.stdout)
    assert len(out) == 2
    for c in out:
        cov = c["summary"]["coverage"]
        assert abs(cov["face"] + cov["head"] + cov["none"] - 1) < 1e-3 and abs(sum(cov["reasons"].values()) - cov["none"]) < 1e-3
        for f in c["frames"]:
            assert f["judged"] in JUDGED and (f["reason"] in REASONS) == (f["judged"] == "none")
            assert (f["view"] is None) == (f["judged"] == "none")
            if f["judged"] == "face" and f["yaw"] is not None and abs(f["yaw"]) > 60:
                assert f["view"] == "profile"
    hamilton = out[0]
    views = hamilton["summary"]["views"]
    assert views["profile"]["frames"] >= 3 and abs(sum(v["share"] for v in views.values()) - 1) < 1e-3  # Alex turned away
    text = run("compare", HAMILTON, "--ref", EXAMPLES / "alex-lacamoire.png", "--no-progress").stdout
    line = next(line for line in text.splitlines() if "judged by face" in line)
    pcts = [int(w.rstrip("%,:")) for w in line.split() if w.rstrip(",:").endswith("%")]
    assert sum(pcts[:3]) == 100 and "profile" in text


def test_the_coverage_line_adds_up_to_100():
    me = unit(1)
    ref = Reference.of("me", [ReferenceHead({VectorKind.ID: me}, True)], ["me.jpg"])
    mine = HeadTrack(0, [sighting(i, face(10, 100), me) for i in range(2)])
    c = compare_analysis(analysis([mine], [], frames=3), [ref], THRESHOLDS)[0]
    assert coverage_line(c) == "judged by face 67%, by head look 0%, not judged 33%: 33% no head"


# ----- seams of clips generated in chunks ----------------------------------------------------------------
def test_seam_frames_of_chunks_with_and_without_overlap():
    from headsearch.compare.timeline import CompareSettings

    assert CompareSettings(chunk_frames=50).seam_frames(200) == [50, 100, 150]
    assert CompareSettings(chunk_frames=50, chunk_overlap=10).seam_frames(200) == [45, 85, 125, 165]
    assert CompareSettings(chunk_frames=50).seam_frames(30) == [] and CompareSettings().seam_frames(200) == []


def _chunked_clip(out, pieces, seconds: float = 2.0, fps: int = 25):
    """A clip made of `pieces` ((clip, start s) each, `seconds` long), as a generator writes its chunks one after the other."""
    from itertools import islice

    import cv2

    def chunks():
        size = None
        for clip, start in pieces:
            from_start = (rgb for time, rgb in timed_frames(clip) if time >= start - 1e-3)
            for rgb in islice(from_start, round(seconds * fps)):
                size = size or (rgb.shape[1] // 2 * 2, rgb.shape[0] // 2 * 2)
                yield cv2.resize(rgb, size)

    return write_clip(out, chunks(), fps=fps, options={"preset": "ultrafast"})


@needs_data
@pytest.mark.slow
def test_chunk_frames_puts_the_seams_of_the_other_persons_chunk_first(tmp_path):
    from conftest import RETALKING

    from headsearch.basics.frames import frame_at
    from headsearch.basics.images import encode_jpeg

    aoc, other = RETALKING / "3.mp4", RETALKING / "1.mp4"
    clip = _chunked_clip(tmp_path / "chunks.mp4", [(aoc, 0.0), (aoc, 2.0), (other, 0.0), (aoc, 3.0)])  # the third chunk: another person
    still = tmp_path / "aoc.jpg"
    still.write_bytes(encode_jpeg(frame_at(aoc, 0.5), 95))
    report = tmp_path / "report"
    entry = json.loads(run("compare", clip, "--ref", still, "--chunk-frames", "50", "--json", "--no-frames", "--report", report,
                           ok=None).stdout)[0]
    seams = entry["seams"]
    assert sorted(m["frame"] for m in seams) == [50, 100, 150]
    assert {m["frame"] for m in seams[:2]} == {100, 150} and seams[0]["drop"] > 2 * (seams[2]["drop"] or 0.0)
    assert entry["summary"]["worst_seam"] == seams[0] and abs(seams[0]["time"] - seams[0]["frame"] / 25) < 0.05
    assert 'class="seam"' in next(report.glob("*.html")).read_text()
    text = run("compare", clip, "--ref", still, "--chunk-frames", "50", "--no-progress", ok=None).stdout
    assert "3 seams between chunks, the largest moves:" in text
    assert run("compare", clip, "--ref", still, "--overlap", "4", ok=None).exit_code == 2
    assert run("compare", clip, "--ref", still, "--chunk-frames", "8", "--overlap", "8", ok=None).exit_code == 2
    single = json.loads(run("compare", clip, "--ref", still, "--json", "--no-frames", ok=None).stdout)[0]
    assert "seams" not in single and "worst_seam" not in single["summary"]  # the single-reference JSON as it was


# ----- specs ------------------------------------------------------------------------------------------
@needs_data
@pytest.mark.slow
def test_the_same_spec_gives_the_same_verdicts_and_says_so(tmp_path):
    from headsearch.compare.spec import CompareSpec

    spec, other = tmp_path / "spec.json", tmp_path / "spec-1fps.json"
    ref = EXAMPLES / "lin-manuel-miranda.png"
    assert "spec: " in run("compare", "--ref", ref, "--write-spec", spec).stderr  # without videos: the spec alone
    runs = [run("compare", FIVE_FRAMES, HAMILTON, "--ref", ref, "--spec", spec, "--json").stdout for _ in range(2)]
    assert runs[0] == runs[1]  # to the frame (the JSON holds no timings)
    entries = json.loads(runs[0])
    assert {e["spec"] for e in entries} == {CompareSpec.read(spec).digest}
    run("compare", "--ref", ref, "--fps", "1", "--write-spec", other)
    assert CompareSpec.read(other).digest != CompareSpec.read(spec).digest
    assert CompareSpec.read(other).analysis["sample_fps"] == 1.0
    # What the spec decides is not given beside it; a damaged spec, or one of other weights, is one line.
    assert run("compare", HAMILTON, "--ref", ref, "--spec", spec, "--fps", "1", ok=None).exit_code == 2
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    said = run("compare", HAMILTON, "--ref", ref, "--spec", bad, ok=None)
    assert said.exit_code == 3 and said.stderr.count("\n") == 1 and "not a compare spec" in said.stderr
    d = json.loads(spec.read_text())
    d["model"]["version"] = "another"
    bad.write_text(json.dumps(d))
    said = run("compare", HAMILTON, "--ref", ref, "--spec", bad, ok=None)
    assert said.exit_code == 3 and "the spec was made with" in said.stderr and "Traceback" not in said.stderr


# ----- a cast across clips and shots ------------------------------------------------------------------
LIVEPORTRAIT = DATA / "LivePortrait" / "assets" / "examples" / "driving" / "d3.mp4"
KATIE = DATA / "more" / "SadTalker" / "examples" / "ref_video" / "WDA_KatieHill_000.mp4"


def _cast_folder(folder, characters: dict) -> object:
    """A cast folder: a folder per character, its photos (files, or (clip, time) for a still of a clip) inside."""
    import shutil

    from headsearch.basics.frames import frame_at
    from headsearch.basics.images import encode_jpeg

    for name, photos in characters.items():
        (folder / name).mkdir(parents=True)
        for n, photo in enumerate(photos):
            if isinstance(photo, tuple):
                (folder / name / f"still{n}.jpg").write_bytes(encode_jpeg(frame_at(photo[0], photo[1]), 95))
            else:
                shutil.copy(photo, folder / name / photo.name)
    return folder


@pytest.fixture(scope="module")
def cast_run(tmp_path_factory):
    """Six characters of the labels over the hamilton clip and the video-retalking, LivePortrait and SadTalker clips."""
    from conftest import RETALKING

    folder = tmp_path_factory.mktemp("cast")
    cast = _cast_folder(folder / "cast", {
        "miranda": [EXAMPLES / "lin-manuel-miranda.png"], "obama": sorted((EXAMPLES / "knn_examples" / "train" / "obama").iterdir()),
        "aoc": [(RETALKING / "3.mp4", 0.5)], "vr1": [(RETALKING / "1.mp4", 0.5)], "lp_d3": [(LIVEPORTRAIT, 0.5)], "katie": [(KATIE, 0.5)]})
    clips = {RETALKING / "3.mp4": "aoc", RETALKING / "1.mp4": "vr1", LIVEPORTRAIT: "lp_d3", KATIE: "katie"}
    result = run("compare", "--cast", cast, HAMILTON, *clips, "--json", "--report", folder / "report", "--fail-under-look", "0.9", ok=None)
    return {"result": result, "entries": json.loads(result.stdout), "clips": clips, "report": folder / "report", "folder": folder}


@needs_data
@pytest.mark.slow
def test_a_cast_puts_every_labelled_appearance_on_its_character(cast_run):
    entries = {e["video"]: e for e in cast_run["entries"]}
    for clip, name in cast_run["clips"].items():
        heads = entries[str(clip)]["frames"]
        assert {h["character"] for h in heads} - {None} == {name}, clip  # its own character, none other
        assert all(h["judged"] in JUDGED and (h["reason"] is not None) == (h["judged"] == "none") for h in heads)
    hamilton = entries[str(HAMILTON)]["frames"]
    assert {h["character"] for h in hamilton} - {None} <= {"miranda", "obama"}
    frontal = [h for h in hamilton if h["shot"] == 3 and h["character"] is not None]  # frames 82-210 (shot 3): Miranda, frontal
    assert frontal and {h["character"] for h in frontal} == {"miranda"}
    miranda = next(c for c in entries[str(HAMILTON)]["characters"] if c["character"] == "miranda")
    apps = miranda["appearances"]  # first seen, then each time after a gap
    assert apps and apps[0]["gap_shots"] is None and all(a["gap_shots"] is not None and a["gap_s"] >= 0 for a in apps[1:])
    # Per character: appearances with their gaps; the gate is per character (miranda's same look is under 90%).
    said = cast_run["result"]
    assert said.exit_code == 1 and "gate: miranda: same look" in said.stderr
    rows = (cast_run["report"] / "cast.csv").read_text().splitlines()
    assert rows[0] == "character,video,shot,start,end,frames,tier,score,gap_shots,gap_s" and len(rows) >= 7


@needs_data
@needs_chromium
@pytest.mark.slow
def test_the_cast_report_in_a_browser(cast_run):
    from playwright.sync_api import sync_playwright

    page_url = (cast_run["report"] / "cast.html").as_uri()
    with sync_playwright() as p:
        browser = launch(p)
        try:
            for width, name in ((1000, "cast-report.png"), (390, "cast-report-390.png")):
                page = browser.new_page(viewport={"width": width, "height": 900})
                page.goto(page_url)
                assert page.locator("svg.cast-plot").count() == 1 and page.locator("table tr").count() >= 8
                assert page.evaluate("document.scrollingElement.scrollWidth") <= width  # wide tables scroll in their card
                screenshot(page, name)
                page.close()
        finally:
            browser.close()


@needs_data
@pytest.mark.slow
def test_cast_mode_finds_the_switch_of_two_joined_clips(tmp_path):
    from conftest import RETALKING

    from bench.compare import join_clips

    aoc, other = RETALKING / "3.mp4", RETALKING / "1.mp4"
    joined = tmp_path / "joined.mp4"
    join = join_clips(aoc, other, joined, seconds=3.0)
    cast = _cast_folder(tmp_path / "cast", {"aoc": [(aoc, 0.5)], "vr1": [(other, 0.5)]})
    (tmp_path / "cast.csv").write_text("name,photo\n" + "".join(f"{c},cast/{c}/still0.jpg\n" for c in ("aoc", "vr1")))
    for refs in (cast, tmp_path / "cast.csv"):  # a folder of folders, or a CSV of name,photo
        entry = json.loads(run("compare", "--cast", refs, joined, "--json", "--no-frames").stdout)[0]
        apps = {c["character"]: c["appearances"] for c in entry["characters"]}
        assert abs(apps["aoc"][-1]["end"] - join) <= 0.5 and abs(apps["vr1"][0]["start"] - join) <= 0.5
    (tmp_path / "bad.csv").write_text("name,photo\naoc,nowhere.jpg\n")
    said = run("compare", "--cast", tmp_path / "bad.csv", joined, ok=None)
    assert said.exit_code == 3 and "nowhere.jpg: no such photo" in said.stderr and said.stderr.count("\n") == 1
    assert run("compare", "--cast", cast, "--ref", EXAMPLES / "lin-manuel-miranda.png", joined, ok=None).exit_code == 2


@needs_data
@pytest.mark.slow
def test_the_web_compare_takes_the_librarys_named_people_as_the_cast(hamilton_library, tmp_path):
    """/api/compare with `cast` = people answers one video's entry of `compare --cast --json`, the characters being the
    library's named people; the page shows the cast; without named people, one line."""
    import shutil

    from starlette.testclient import TestClient

    from serve.app import create_app
    from serve.guard import CSRF_HEADER

    library = tmp_path / "library"
    shutil.copytree(hamilton_library, library)
    run("people", "--library", library)
    lin_track = json.loads(run("query", EXAMPLES / "lin-manuel-miranda.png", "--library", library, "--json", "-k", "1").stdout)[0]["track_id"]
    people = json.loads(run("people", "--library", library, "--json", "--unlisted").stdout)
    lin = next(p for p in people if lin_track in p["tracks"])
    client = TestClient(create_app(library, cache_dir=tmp_path / "cache"))
    client.headers["origin"] = str(client.base_url).rstrip("/")
    client.headers[CSRF_HEADER] = client.get("/api/csrf").json()["token"]
    video = next(v for v in client.get("/api/compare").json()["videos"] if v["path"] == str(HAMILTON))
    none = client.post("/api/compare", data={"cast": "people", "video_id": str(video["id"])}, files={"clip": ("", b"", "video/mp4")})
    assert none.status_code == 400 and "no named people" in none.json()["error"], none.text
    run("people", "name", str(lin["id"]), "Lin", "--library", library)
    started = client.post("/api/compare", data={"cast": "people", "video_id": str(video["id"])}, files={"clip": ("", b"", "video/mp4")})
    assert started.status_code == 202, started.text  # a job: polled to its end (tests/test_web_jobs.py follows one closely)
    while (job := client.get(started.json()["page"]).json())["running"]:
        time.sleep(0.25)
    got = job["result"]
    lin_summary = next(c for c in got["characters"] if c["character"] == "Lin")
    assert lin_summary["appearances"] and any(a["shot"] == 3 for a in lin_summary["appearances"])  # shot 3, 3.588-7.892 s: him, frontal
    assert all(f["judged"] in JUDGED for f in got["frames"]) and {f["character"] for f in got["frames"]} - {None} == {"Lin"}
    page = client.get(f"/jobs/{job['id']}")
    assert page.status_code == 200 and "the cast" in page.text and "cast-plot" in page.text
