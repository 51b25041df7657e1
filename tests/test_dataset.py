"""`headsearch build-dataset`: segments, cross-video identities with cannot-link, labelled photos, the output folder."""
from __future__ import annotations

import json
import math
import os
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import main
from headsearch.evaluation.metrics import relation_counts
from schemas.records import Box, FaceDetection, Observation
from trainer.dataset_format import contact_sheet_name
from trainer.dataset_identities import cluster_with_cannot_link
from trainer.dataset_segments import DatasetOptions, select_segment

pytestmark = pytest.mark.slow  # media-heavy: left out of the fast tier (`-m "not slow"`)

DATA = Path(os.environ.get("HEADSEARCH_TEST_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
HAMILTON = DATA / "face_recognition" / "examples" / "short_hamilton_clip.mp4"
RETALKING = DATA / "video-retalking" / "examples" / "face"
LEONARD = DATA / "face-api.js" / "examples" / "images" / "leonard"
needs_data = pytest.mark.skipif(not HAMILTON.is_file(), reason=f"real test media not found at {DATA} (set HEADSEARCH_TEST_DATA)")

COLUMNS = {"sample_id": "int64", "identity": "string", "state": "string", "source": "string", "video": "string",
           "segment": "string", "time": "double", "pose_hint": "double", "face_visible": "bool", "head_crop": "string",
           "face_crop": "string", "teacher_index": "int64", "teacher_head_index": "int64"}


def build(*args, ok: bool = True):
    result = CliRunner().invoke(main, ["build-dataset", *map(str, args)], catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, result.output
    return result


# ----------------------------------------------------------------------------------------------
# Unit tests on synthetic data


def _obs(frame: int, face_w: float | None, face_h: float = 100.0) -> Observation:
    head = Box(0, 0, 175, 175)
    face = None
    if face_w is not None:
        face = FaceDetection(Box(40, 50, 40 + face_w, 50 + face_h), np.zeros((5, 2), np.float32), 0.9)
    return Observation(frame, frame / 4.0, head, face)


def test_segment_filter():
    opts = DatasetOptions(min_frames=5, min_visible=0.2, min_invisible=0.1, best_face_ratio=0.22)
    frontal, profile = 80.0, 55.0  # face-box widths: 80x100 in a 175 head box = 0.26, 55x100 = 0.18
    assert select_segment([_obs(i, frontal) for i in range(4)], opts) == (None, "too_few_frames")
    assert select_segment([_obs(0, frontal)] + [_obs(i, None) for i in range(1, 10)], opts) == (None, "too_few_face_visible")
    assert select_segment([_obs(i, frontal) for i in range(10)], opts) == (None, "too_few_face_invisible")
    assert select_segment([_obs(i, profile) for i in range(4)] + [_obs(4, None)], opts) == (None, "no_best_face")
    track = [_obs(0, profile), _obs(1, 70.0), _obs(2, frontal), _obs(3, 75.0), _obs(4, None), _obs(5, None)]
    assert select_segment(track, opts) == (2, None)
    # Shares at the boundary pass; min_invisible 0 keeps all-frontal tracks.
    assert select_segment([_obs(0, frontal)] + [_obs(i, None) for i in range(1, 5)], opts)[1] is None
    assert select_segment([_obs(i, frontal) for i in range(10)], DatasetOptions(min_invisible=0.0))[1] is None
    # Dict observations (as stored in the parts) give the same answer.
    as_dicts = [{"head": list(o.head.as_tuple()), "face": None if o.face is None else list(o.face.box.as_tuple())} for o in track]
    assert select_segment(as_dicts, opts) == (2, None)


def test_clustering_respects_cannot_link():
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((3, 64))
    vectors = np.concatenate([c + 0.15 * rng.standard_normal((4, 64)) for c in centres])  # 3 people x 4 segments
    plain = cluster_with_cannot_link(vectors, 0.9)
    assert plain.labels.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert plain.blocked_pairs == 0
    # Segments 0 and 1 were seen in the same frame: two people, however alike.
    constrained = cluster_with_cannot_link(vectors, 0.9, [(0, 1)])
    assert constrained.labels[0] != constrained.labels[1]
    assert len(set(constrained.labels[4:8])) == 1 and len(set(constrained.labels[8:])) == 1
    assert set(constrained.labels[:4]).isdisjoint(constrained.labels[4:])
    assert constrained.blocked_pairs >= 1
    # Constraints propagate through merges: 2 joins 0's cluster, 3 cannot-links 0 -> 3 is not with 0 nor 2.
    c = cluster_with_cannot_link(vectors[:4], 0.9, [(0, 3)])
    assert c.labels[0] != c.labels[3]
    # Threshold above every similarity: one cluster per segment; empty input.
    assert len(set(cluster_with_cannot_link(vectors, 1.01).labels)) == 12
    assert cluster_with_cannot_link(np.zeros((0, 8)), 0.5).labels.shape == (0,)


def test_pair_counts():
    assert relation_counts(["a", "a", "a", "b"], ["s1", "s1", "s2", "s3"]) == {"R1": 1, "R2": 2, "R3": 3}


# ----------------------------------------------------------------------------------------------
# The real command on real media


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    if not HAMILTON.is_file():
        pytest.skip(f"real test media not found at {DATA}")
    tmp = tmp_path_factory.mktemp("dataset")
    labels = tmp / "leonard.csv"
    rows = ["path,identity,appearance_state"]
    for name, state in (("leonard1.png", "glasses"), ("leonard2.png", "no_glasses"), ("leonard3.png", "no_glasses"),
                        ("leonard4.png", "glasses")):
        rows.append(f"{LEONARD / name},bbt_leonard,{state}")
    rows.append(f"{LEONARD / 'leonard5.png'},bbt_leonard;someone_else,glasses")  # several people: skipped
    rows.append(f"{RETALKING / '2.mp4'},vr_person2,studio")  # a labelled one-person video (also given as a video)
    labels.write_text("\n".join(rows) + "\n")
    bad = tmp / "broken.mp4"
    bad.write_bytes(np.random.default_rng(0).bytes(20_000))
    out = tmp / "out"
    args = [HAMILTON, RETALKING / "1.mp4", RETALKING / "2.mp4", bad, "--out", out, "--labels", labels,
            "--fps", 2, "--min-invisible", 0, "-q"]
    t0 = time.perf_counter()
    result = build(*args, ok=False)
    first_s = time.perf_counter() - t0
    assert result.exit_code == 2, result.output  # partial: the broken video failed, the others were used
    errors = [l for l in result.stderr.splitlines() if l.startswith("error:")]
    assert len(errors) == 1 and "broken.mp4" in errors[0], result.stderr
    assert "Traceback" not in result.output
    return {"out": out, "args": args, "first_s": first_s}


def _manifest(out: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(out / "manifest.parquet").to_pylist()


@needs_data
def test_manifest_columns_and_files(dataset):
    import pyarrow.parquet as pq

    out = dataset["out"]
    schema = pq.read_schema(out / "manifest.parquet")
    for name, kind in COLUMNS.items():
        assert str(schema.field(name).type) == kind, (name, schema.field(name).type)
    rows = _manifest(out)
    assert rows and [r["sample_id"] for r in rows] == list(range(len(rows)))
    teacher = np.load(out / "teacher.npy")
    assert teacher.dtype == np.float32 and teacher.shape == (sum(r["teacher_index"] >= 0 for r in rows), 128)
    assert np.allclose(np.linalg.norm(teacher, axis=1), 1.0, atol=1e-4)
    assert sorted(r["teacher_index"] for r in rows if r["teacher_index"] >= 0) == list(range(len(teacher)))
    assert json.loads((out / "teacher.json").read_text())["name"] == "sface"  # the default teacher
    assert all(r["teacher_head_index"] == -1 for r in rows) and not (out / "teacher_head.npy").exists()  # a face teacher
    for r in rows:
        assert r["source"] in ("video", "photo")
        assert (out / r["head_crop"]).is_file()
        assert r["face_visible"] == (r["face_crop"] is not None) == (r["teacher_index"] >= 0) == (not math.isnan(r["pose_hint"]))
        if r["face_crop"]:
            assert (out / r["face_crop"]).is_file()
    import cv2

    assert cv2.imread(str(out / rows[0]["head_crop"])).shape == (160, 160, 3)
    face = next(r for r in rows if r["face_crop"])
    assert cv2.imread(str(out / face["face_crop"])).shape == (112, 112, 3)


@needs_data
def test_segments_states_identities(dataset):
    out = dataset["out"]
    rows = _manifest(out)
    videos = json.loads((out / "videos.json").read_text())
    segments = defaultdict(list)
    for r in rows:
        segments[r["segment"]].append(r)
    video_rows = [r for r in rows if r["source"] == "video"]
    assert {Path(r["video"]).name for r in video_rows} >= {"1.mp4", "2.mp4"}
    for rs in segments.values():
        assert len({(r["video"], r["shot"], r["identity"], r["state"]) for r in rs}) == 1
        if rs[0]["source"] == "video":
            assert len(rs) >= 5 and any(r["face_visible"] for r in rs)
            shot = videos[rs[0]["video"]]["shots"][rs[0]["shot"]]
            assert all(shot["start_time"] - 1e-6 <= r["time"] <= shot["end_time"] + 1e-6 for r in rs)
            assert all(shot["start_frame"] <= r["frame_index"] <= shot["end_frame"] for r in rs)
    # Every state belongs to exactly one identity; video states are segments.
    owner = defaultdict(set)
    for r in rows:
        owner[r["state"]].add(r["identity"])
    assert all(len(v) == 1 for v in owner.values())
    # Cannot-link: no two segments of one identity seen in one frame.
    frames = defaultdict(lambda: defaultdict(set))
    for r in video_rows:
        frames[(r["identity"], r["video"], r["shot"])][r["segment"]].add(r["frame_index"])
    for by_segment in frames.values():
        segs = list(by_segment.values())
        for i in range(len(segs)):
            for j in range(i + 1, len(segs)):
                assert not segs[i] & segs[j]
    # The two talking-head clips are two different people.
    ids = {Path(r["video"]).name: r["identity"] for r in video_rows if Path(r["video"]).name in ("1.mp4", "2.mp4")}
    assert ids["1.mp4"] != ids["2.mp4"]
    # The labelled video: its person's segments take the label's identity and look, not a cluster's.
    labelled = [r for r in video_rows if Path(r["video"]).name == "2.mp4"]
    assert labelled and {(r["identity"], r["state"]) for r in labelled} == {("label:vr_person2", "label:vr_person2/studio")}
    # Labelled photos: their own identity, one state per appearance, the ';' row skipped.
    photos = [r for r in rows if r["source"] == "photo"]
    assert {r["identity"] for r in photos} == {"label:bbt_leonard"}
    assert {r["state"] for r in photos} == {"label:bbt_leonard/glasses", "label:bbt_leonard/no_glasses"}
    assert len(photos) == 4
    # Contact sheets for every identity; the summary agrees with the manifest.
    for ident in {r["identity"] for r in rows}:
        assert (out / "contact" / contact_sheet_name(ident)).stat().st_size > 1000
    summary = json.loads((out / "summary.json").read_text())
    assert summary["samples"] == len(rows) and summary["identities"] == len({r["identity"] for r in rows})
    assert summary["segments_kept"] == len({r["segment"] for r in video_rows})
    assert summary["segments_kept"] + sum(summary["segments_rejected"].values()) == summary["tracks"]
    assert sum(summary["pairs"].values()) == len(rows) * (len(rows) - 1) // 2
    assert summary["pairs"]["R1"] > 0 and summary["pairs"]["R2"] > 0 and summary["pairs"]["R3"] > 0
    assert summary["videos_failed"] == 1 and summary["photos"] == 4
    assert summary["labelled_video_segments"] == len({r["segment"] for r in labelled})


@needs_data
def test_rerun_reuses_parts_and_refilters(dataset):
    out, args = dataset["out"], dataset["args"]
    before = _manifest(out)
    t0 = time.perf_counter()
    result = build(*args, ok=False)
    assert result.exit_code == 2
    assert time.perf_counter() - t0 < max(8.0, dataset["first_s"] / 2)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["videos_reused"] == 3 and summary["videos_analysed"] == 0
    same = lambda rows: json.dumps(rows, sort_keys=True)  # noqa: E731  (NaN pose hints compare equal as text)
    assert same(_manifest(out)) == same(before)
    # A stricter filter is applied to the stored analysis: fewer segments, no re-analysis.
    build(*[a for a in args if Path(str(a)).name != "broken.mp4"], "--min-frames", 8)
    strict = json.loads((out / "summary.json").read_text())
    assert strict["videos_analysed"] == 0 and strict["segments_kept"] < summary["segments_kept"]
    assert strict["segments_rejected"]["too_few_frames"] > summary["segments_rejected"]["too_few_frames"]
    assert len(_manifest(out)) == strict["samples"] and len(np.load(out / "teacher.npy")) == strict["teacher_rows"]


@needs_data
def test_nothing_usable_fails(tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00" * 1000)
    result = build(bad, tmp_path / "missing.mp4", "--out", tmp_path / "out", "-q", ok=False)
    assert result.exit_code == 1
    errors = [l for l in result.stderr.splitlines() if l.startswith("error:")]
    assert any("bad.mp4" in l for l in errors) and any("missing.mp4" in l for l in errors)
    assert any("nothing usable" in l for l in errors)
    assert "Traceback" not in result.output
    assert build("--out", tmp_path / "out2", ok=False).exit_code == 2  # usage error: no inputs


@needs_data
def test_whole_head_teacher_stores_a_head_vector_for_every_sample(tmp_path):
    """--teacher sface+lite0: teacher.npy keeps SFace's vectors of the faces (the L_align targets) and teacher_head.npy the
    fused head vector of every sample, faces or not; a rebuild with a face teacher drops the head vectors."""
    from trainer.dataset_format import load_dataset

    labels = tmp_path / "labels.csv"
    labels.write_text("path,identity,appearance_state\n" + "".join(
        f"{LEONARD / n},bbt_leonard,{st}\n" for n, st in (("leonard1.png", "glasses"), ("leonard2.png", "no_glasses"))))
    out = tmp_path / "out"
    args = [RETALKING / "3.mp4", "--out", out, "--labels", labels, "--fps", 1, "--min-frames", 3, "--min-invisible", 0, "-q"]
    build(*args, "--teacher", "sface+lite0")
    rows = _manifest(out)
    teacher, head = np.load(out / "teacher.npy"), np.load(out / "teacher_head.npy")
    meta = json.loads((out / "teacher.json").read_text())
    assert meta["name"] == "sface+lite0" and meta["dims"] == {"id": 128, "head": 1088}
    assert len(rows) > 2 and head.dtype == np.float32 and head.shape == (len(rows), 1088)
    assert [r["teacher_head_index"] for r in rows] == list(range(len(rows)))
    assert np.allclose(np.linalg.norm(head, axis=1), 1.0, atol=1e-4)
    for r in rows:  # the head vector's identity part is the face's SFace vector (scaled); without a face it is empty
        part = head[r["teacher_head_index"], :128]
        if r["teacher_index"] >= 0:
            assert float(part @ teacher[r["teacher_index"]]) / float(np.linalg.norm(part)) > 0.999
        else:
            assert not part.any()
    assert json.loads((out / "summary.json").read_text())["teacher_head_rows"] == len(rows)
    info = load_dataset(out)
    assert info.has_head_vectors and info.head_dim == 1088
    # The same folder rebuilt with a face teacher: analysed again (other teacher), no head vectors left behind.
    build(*args)
    assert not (out / "teacher_head.npy").exists() and all(r["teacher_head_index"] == -1 for r in _manifest(out))
    assert not load_dataset(out).has_head_vectors
