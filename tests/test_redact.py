"""`headsearch redact`: the issue's acceptance on the hamilton clip (Miranda's head hidden in every frame he is on
screen, judged from the pixels by a judge that never reads the redactor's boxes; the other heads untouched; the
source's frames, rate, duration and audio kept), its audit trail and contact sheet, a library's analysis and person,
and bad input on generated media."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
from clips import read_frames
from conftest import DATA, EXAMPLES, HAMILTON, copy_of_library, needs_data, run
from hostile_media import write_video

from actions.redact import EveryFaceDetector
from schemas.records import Box

pytestmark = [pytest.mark.slow, needs_data]

MIRANDA = EXAMPLES / "lin-manuel-miranda.png"
CROWD = DATA / "facenet-pytorch" / "examples" / "video.mp4"  # 1080p, a crowd walking past, small faces among them
ALEX = EXAMPLES / "alex-lacamoire.png"
OBAMA = EXAMPLES / "obama_small.jpg"
CODEC_NOISE = 4.0  # mean absolute difference (grey levels) of a head left alone: encoded again, nothing more
ROOT = Path(__file__).resolve().parents[1]


def frames_rgb(path: Path, count: int | None = None) -> list[np.ndarray]:
    """The video's frames (the first `count` of them), RGB."""
    return read_frames(path, 0, count)


def probe(path: Path) -> dict:
    """What a player reads of a file, by PyAV: each stream's kind, codec, rate, start and duration, the video's frames
    (decoded, counted) and times, and the audio packets (their bytes and times)."""
    import av

    with av.open(str(path)) as c:
        v = c.streams.video[0]
        out = {"duration": c.duration, "size": (v.codec_context.width, v.codec_context.height), "rate": v.average_rate,
               "video_start": float(v.start_time * v.time_base), "streams": [(s.type, s.codec_context.name) for s in c.streams]}
        times, rotation = [], None
        for f in c.decode(video=0):
            times.append(round(float(f.time), 6))
            rotation = f.rotation if rotation is None else rotation
        out["times"], out["rotation"] = times, rotation
    with av.open(str(path)) as c:
        out["audio"] = [(p.pts, bytes(p)) for p in c.demux(audio=0) if p.size] if c.streams.audio else []
    return out


def _box_pixels(rgb: np.ndarray, box: Box) -> np.ndarray:
    h, w = rgb.shape[:2]
    x1, y1, x2, y2 = max(0, int(box.x1)), max(0, int(box.y1)), min(w, int(np.ceil(box.x2))), min(h, int(np.ceil(box.y2)))
    return rgb[y1:y2, x1:x2]


def _sharpness(rgb: np.ndarray) -> float:
    return float(cv2.Laplacian(cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY), cv2.CV_64F).var())


@pytest.fixture(scope="module")
def judged() -> dict:
    """Who is where in every frame of the clip, found without the redactor: the face detector on every source frame,
    faces linked frame to frame by overlap (never across a change of picture: a cut), each run of faces identified by
    the SFace model's mean vector of up to five of its faces against the three photos at SFace's calibrated bar.
    {"frames": source frames, "faces": [(frame, face box, head box, who or None, best photo)]}."""
    from headsearch.detection.crops import crop_head
    from headsearch.detection.faces import FaceDetector, detect_heads
    from headsearch.embedding.photo_heads import PhotoEmbedder
    from headsearch.evaluation.thresholds import thresholds_for
    from schemas.records import VectorKind

    sface = PhotoEmbedder("sface")
    bar = thresholds_for(None, sface.embedder.describe()).identity
    photos = {"miranda": MIRANDA, "alex": ALEX, "obama": OBAMA}
    refs = {name: sface.head(path).vectors[VectorKind.ID] for name, path in photos.items()}
    detector = FaceDetector().load()
    frames = frames_rgb(HAMILTON)
    runs: list[list] = []
    live: list[list] = []
    previous = None
    for i, rgb in enumerate(frames):
        small = cv2.resize(rgb, (64, 36), interpolation=cv2.INTER_AREA).astype(np.float32)
        if previous is not None and float(np.abs(small - previous).mean()) > 25:  # a cut: no face run continues across it
            live = []
        previous = small
        now = []
        for d in detect_heads(detector, rgb):
            best = max(live, key=lambda r: r[-1][1].face.box.iou(d.face.box), default=None)
            if best is None or best[-1][1].face.box.iou(d.face.box) < 0.3 or best in now:
                best = []
                runs.append(best)
            best.append((i, d))
            now.append(best)
        live = now
    faces = []
    for r in runs:
        picked = [r[k] for k in sorted({round(x) for x in np.linspace(0, len(r) - 1, min(5, len(r)))})]
        vectors = sface.embedder.embed([crop_head(frames[i], d.head, d.face, 256) for i, d in picked])[VectorKind.ID]
        mean = vectors.mean(axis=0) / np.linalg.norm(vectors.mean(axis=0))
        scores = {name: float(mean @ v) for name, v in refs.items()}
        best = max(scores, key=scores.get)
        faces += [(i, d.face.box, d.head, best if scores[best] > bar else None, best) for i, d in r]
    return {"frames": frames, "faces": faces}


@pytest.fixture(scope="module")
def redacted(tmp_path_factory) -> dict:
    """`redact` of the clip with Miranda's photo: blurred (with a contact sheet, and --json), and as black boxes."""
    folder = tmp_path_factory.mktemp("redact")
    blur, boxed = folder / "blur.mp4", folder / "boxed.mp4"
    said = json.loads(run("redact", HAMILTON, "--ref", MIRANDA, "--out", blur, "--preview", folder / "preview", "--json").stdout)
    run("redact", HAMILTON, "--ref", MIRANDA, "--out", boxed, "--style", "box")
    return {"folder": folder, "blur": blur, "boxed": boxed, "json": said, "blur_frames": frames_rgb(blur), "boxed_frames": frames_rgb(boxed)}


def test_miranda_is_hidden_in_every_frame_he_is_seen(judged, redacted):
    """Every frame where the judge finds Miranda's face: the face is destroyed in the output (far from the source, its
    detail gone), and the whole head box the detector gives it (hair, skull) is black in the boxed output wherever the
    source is not black itself."""
    seen = [(i, face, head) for i, face, head, who, _ in judged["faces"] if who == "miranda"]
    assert len({i for i, _, _ in seen}) >= 140  # he is on screen in shots 1 and 3 (149 frames): the judge must see him
    src, out, boxed = judged["frames"], redacted["blur_frames"], redacted["boxed_frames"]
    for i, face, head in seen:
        a, b = _box_pixels(src[i], face), _box_pixels(out[i], face)
        diff = float(np.abs(a.astype(int) - b.astype(int)).mean())
        assert diff > 15 and _sharpness(b) < 0.05 * _sharpness(a), f"frame {i}: his face is still there ({diff:.1f} grey levels from the source)"
        lit = _box_pixels(src[i], head).max(axis=2) > 40
        black = _box_pixels(boxed[i], head).max(axis=2) < 12
        assert black[lit].mean() >= 0.99, f"frame {i}: {black[lit].mean():.3f} of his head box hidden"


def test_the_others_are_untouched(judged, redacted):
    """Every other face the judge finds (Alex's, Obama's, the audience's) is as in the source, within codec noise."""
    others = [(i, face, best) for i, face, _, who, best in judged["faces"] if who != "miranda"]
    assert any(who == "obama" for _, _, _, who, _ in judged["faces"])
    assert any(best == "alex" for _, _, best in others)
    src, out = judged["frames"], redacted["blur_frames"]
    for i, face, best in others:
        diff = float(np.abs(_box_pixels(src[i], face).astype(int) - _box_pixels(out[i], face).astype(int)).mean())
        assert diff < CODEC_NOISE, f"frame {i}: a face most like {best} changed by {diff:.1f} grey levels"


def test_the_output_keeps_frames_rate_duration_and_audio(redacted):
    source, out = probe(HAMILTON), probe(redacted["blur"])
    assert out["times"] == source["times"] and len(out["times"]) == 275  # every frame, at its time (the video starts at 0.852 s)
    for key in ("duration", "size", "rate", "video_start", "streams"):
        assert out[key] == source[key], key
    assert out["audio"] == source["audio"] and len(source["audio"]) > 400  # every audio packet copied, byte for byte


def test_audit_trail_names_every_box_and_the_contact_sheet_shows_them(redacted):
    said = redacted["json"]
    audit = json.loads(Path(said["audit"]).read_text())
    assert Path(said["audit"]) == Path(str(redacted["blur"]) + ".redactions.json")
    assert audit["source"] == str(HAMILTON) and audit["whom"] == {"photos": [str(MIRANDA)]} and audit["style"] == "blur"
    assert [t["who"] for t in audit["tracks"]] == ["lin-manuel-miranda"] * 2
    assert all(t["why"].startswith("same person: identity") for t in audit["tracks"])
    times = probe(HAMILTON)["times"]
    frames = audit["frames"]
    assert len(frames) == said["frames_with_boxes"] == audit["frames_with_boxes"] == 149 and audit["frames_written"] == 275
    assert {f["frame"] for f in frames} == set(range(0, 20)) | set(range(82, 211))  # his two shots, every frame of them
    for f in frames:
        assert f["time"] == pytest.approx(times[f["frame"]], abs=1e-5)
        (box,) = f["boxes"]
        assert box["who"] == "lin-manuel-miranda" and box["track"] in {t["track"] for t in audit["tracks"]}
        x1, y1, x2, y2 = box["box"]
        assert 0 <= x1 < x2 <= 640 and 0 <= y1 < y2 <= 360
    sheet = cv2.imread(str(said["preview"]))
    assert Path(said["preview"]).parent == redacted["folder"] / "preview" and sheet is not None and sheet.shape[1] > 700


def test_a_person_of_the_library_from_its_analysis(tmp_path, redacted, hamilton_alone):
    """Indexed, the clip is redacted from the library's analysis (nothing analysed again), a person by name."""
    library = copy_of_library(hamilton_alone, tmp_path / "lib")
    people = json.loads(run("people", "--library", library, "--json").stdout)
    ours = {t["track"] for t in json.loads(Path(redacted["json"]["audit"]).read_text())["tracks"]}
    assert len(ours) == 2
    (person,) = [p for p in people if len(p["tracks"]) == 2]
    run("people", "name", person["id"], "Lin", "--library", library)
    said = json.loads(run("redact", HAMILTON, "--person", "lin", "--library", library, "--out", tmp_path / "out.mkv", "--json").stdout)
    assert said["analysis"].startswith(f"the library {library.resolve()}")
    assert said["frames_with_boxes"] == 149 and {t["why"] for t in said["tracks"]} == {f"a track of person {person['id']} in the library"}
    assert probe(tmp_path / "out.mkv")["times"] == pytest.approx(probe(HAMILTON)["times"], abs=5e-4)  # Matroska counts milliseconds
    bad = run("redact", HAMILTON, "--person", "nobody", "--library", library, "--out", tmp_path / "x.mp4", ok=False)
    assert bad.output.startswith("error: no person named 'nobody'") and not (tmp_path / "x.mp4").exists()


# ----- generated media ---------------------------------------------------------------------------------
def _clip(path: Path, n: int = 37, fps: int = 25, audio: bool = True, rotation: int | None = None) -> Path:
    """A small video (moving colour bars, no one in it), with a tone as AAC audio as long as it (`audio`)."""
    rng = np.random.default_rng(1)
    frames = [np.roll(np.repeat(np.linspace(0, 255, 96, dtype=np.uint8)[None, :, None], 64, axis=0).repeat(3, axis=2), 3 * i, axis=1)
              + rng.integers(0, 20, (64, 96, 3), dtype=np.uint8) for i in range(n)]
    write_video(path, frames, fps=fps, rotation=rotation, tone_s=n / fps if audio else 0.0)
    return path


def test_frame_count_and_audio_kept_with_nobody_to_hide(tmp_path):
    source = _clip(tmp_path / "bars.mp4")
    result = run("redact", source, "--everyone", "--out", tmp_path / "out.mp4")
    assert "nobody to hide in 37 frames" in result.stdout
    a, b = probe(source), probe(tmp_path / "out.mp4")
    assert len(b["times"]) == 37 and b["times"] == a["times"] and b["audio"] == a["audio"] and b["streams"] == a["streams"]
    assert json.loads((tmp_path / "out.mp4.redactions.json").read_text())["frames"] == []


def test_a_video_without_audio_and_its_display_rotation(tmp_path):
    source = _clip(tmp_path / "silent.mp4", n=12, audio=False, rotation=90)
    run("redact", source, "--everyone", "--out", tmp_path / "out.mkv", "--style", "pixelate")
    a, b = probe(source), probe(tmp_path / "out.mkv")
    assert b["streams"] == [("video", "h264")] and b["times"] == a["times"] and len(b["times"]) == 12
    assert b["rotation"] == a["rotation"] != 0 and b["size"] == a["size"]


def test_the_source_is_never_overwritten(tmp_path):
    source = _clip(tmp_path / "bars.mp4", n=5)
    before = source.read_bytes()
    (tmp_path / "sub").mkdir()
    for out in (source, tmp_path / "sub" / ".." / "bars.mp4"):
        result = run("redact", source, "--everyone", "--out", out, ok=False)
        assert result.output.startswith("error: --out") and "never overwrites its source" in result.output
    os.link(source, tmp_path / "same.mp4")  # the same file under another name
    assert "never overwrites" in run("redact", source, "--everyone", "--out", tmp_path / "same.mp4", ok=False).output
    assert source.read_bytes() == before


@pytest.mark.parametrize("case", ["missing folder", "corrupt video", "missing video", "photo with no head", "no library", "not a video name"])
def test_bad_input_is_one_line(tmp_path, case):
    source = _clip(tmp_path / "bars.mp4", n=5)
    out = tmp_path / "out.mp4"
    if case == "missing folder":
        args, said = [source, "--everyone", "--out", tmp_path / "no" / "out.mp4"], "no folder"
    elif case == "corrupt video":
        (tmp_path / "cut.mp4").write_bytes(HAMILTON.read_bytes()[:3000])
        args, said = [tmp_path / "cut.mp4", "--everyone", "--out", out], "not a readable video"
    elif case == "missing video":
        args, said = [tmp_path / "gone.mp4", "--everyone", "--out", out], "no such file"
    elif case == "photo with no head":
        cv2.imwrite(str(tmp_path / "wall.png"), np.full((200, 200, 3), 128, np.uint8))
        args, said = [source, "--ref", tmp_path / "wall.png", "--out", out], "no head found"
    elif case == "no library":
        args, said = [source, "--person", "Lin", "--library", tmp_path / "nolib", "--out", out], "no headsearch library here"
    else:
        args, said = [source, "--everyone", "--out", tmp_path / "out.txt"], "name it as a video"
    result = run("redact", *args, ok=False)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and said in lines[0] and "Traceback" not in result.output
    assert not out.exists() and not list(tmp_path.glob(".out*")) and not list(tmp_path.glob("*.redactions.json"))


def test_a_killed_run_leaves_nothing_under_the_output_name(tmp_path):
    """SIGKILL while the video is being written: no file under the output's name (nor its audit trail); the next run
    writes it and clears the killed run's partial file."""
    source = _clip(tmp_path / "long.mp4", n=900, fps=60, audio=False)
    out = tmp_path / "out.mp4"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "redact", str(source), "--everyone", "--out", str(out)],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    partial: list[Path] = []
    while not partial and proc.poll() is None and time.monotonic() < deadline:
        partial = list(tmp_path.glob(".out.redacting-*.mp4"))
        time.sleep(0.005)
    assert partial, "the run ended before its output was being written"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists() and not (tmp_path / "out.mp4.redactions.json").exists() and partial[0].exists()
    run("redact", source, "--everyone", "--out", out)
    assert out.exists() and not partial[0].exists() and len(probe(out)["times"]) == 900


# ----- everyone, every head ---------------------------------------------------------------------------
def test_everyone_hides_the_small_faces_of_a_crowd(crowd_everyone):
    """--everyone on a 1080p crowd: every face and profile labelled in bench/sets/heads.csv is hidden, judged from the
    pixels by bench redact's judge (a man's profile some 35 x 50 pixels at 2.6 s, which the index's detector does not
    see, and a face at 4.16 s its tracker lost at the last sample were left before), and so is every face RetinaFace
    finds, the frame enlarged to 2560 pixels (score 0.8 and up), in every fifth frame, the frames between samples
    included; tracks the evidence rule would drop are hidden too, and the audit trail says so."""
    from bench.redact import HEAD_CORE, _region, detail, frame_times, hidden, nearest
    from headsearch.detection.faces import FaceDetector
    from headsearch.evaluation.head_boxes import read_head_set

    out, _ = crowd_everyone
    source, output = frames_rgb(CROWD), frames_rgb(out)
    assert len(output) == len(source) == 105
    shown = frame_times(CROWD)
    labelled = [(nearest(shown, f.time), h) for f in read_head_set(ROOT / "bench" / "sets" / "heads.csv", DATA)
                if f.path == CROWD for h in f.heads if not h.ignore and h.view in ("face", "profile")]
    assert len(labelled) > 50
    left = [(n, h.view, h.box) for n, h in labelled
            if not hidden(_region(detail(source[n]), h.box, HEAD_CORE), _region(detail(output[n]), h.box, HEAD_CORE))]
    assert not left, f"labelled heads left visible: {left}"
    judge = FaceDetector(0.8, 2560, 2560, 10.0)
    faces = [(n, f.box) for n in range(0, len(source), 5) for f in judge.detect(source[n])]
    assert len(faces) > 120
    seen = [(n, box) for n, box in faces if hidden(_region(detail(source[n]), box, 0.8), _region(detail(output[n]), box, 0.8)) is False]
    assert not seen, f"faces left visible: {seen}"
    tracks = json.loads(Path(f"{out}.redactions.json").read_text())["tracks"]
    assert any("unconfirmed, hidden all the same" in t["why"] for t in tracks)


def test_where_everyone_is_hidden_small_faces_come_from_the_enlarged_frame_and_large_ones_from_the_index_look():
    """The enlarged look: twice the decoded frame, at most 2560 pixels across, faces from score 0.5. It adds small faces
    only: on close-ups (LivePortrait's d3, the 10-minute video's frame 6000 alike) the enlarged frame alone gave a second,
    partial face on the one face (score 0.70 here; up to 0.99 and six faces on the long video), which became boxes of
    the whole frame and several tracks on one head."""
    from headsearch.basics.settings import IndexSettings
    from headsearch.detection.faces import FaceDetector

    settings = IndexSettings()
    detector = EveryFaceDetector(settings, FaceDetector.from_settings(settings))
    assert detector.scale_for(1280, 720) == 2.0 and detector.scale_for(1920, 1080) == pytest.approx(2560 / 1920)
    assert detector.scale_for(320, 240) == 2.0 and detector.scale_for(4000, 3000) == pytest.approx(2560 / 4000)
    assert detector.score_threshold < IndexSettings.face_score_threshold and detector.min_face_px < IndexSettings.min_face_px
    close_up = frames_rgb(DATA / "LivePortrait" / "assets" / "examples" / "driving" / "d3.mp4", 1)[0]
    usual = FaceDetector.from_settings(settings).detect(close_up)
    assert len(usual) == 1 and len(FaceDetector.detect(detector, close_up)) == 2  # the enlarged look alone
    assert [f.box for f in detector.detect(close_up)] == [usual[0].box]
    crowd = frames_rgb(CROWD, 66)[65]  # 1080p: a man's profile at 2.6 s, labelled (1518, 680)-(1556, 748)

    def at_the_profile(faces):
        return [f for f in faces if 1518 <= f.box.center[0] <= 1556 and 680 <= f.box.center[1] <= 748]

    assert not at_the_profile(FaceDetector.from_settings(settings).detect(crowd)) and at_the_profile(detector.detect(crowd))
