"""`headsearch bench accuracy|speed|people` (and the old spellings `bench SET`, `bench --speed`) through the real
CLI on real labelled photos and videos of shared/data."""
from __future__ import annotations

import csv
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA, FACES, LABELS, library_db, needs_data, run

from headsearch.models import DEFAULT_MODEL

pytestmark = [needs_data, pytest.mark.slow]

# Glasses states as LABELS.csv gives them: Leonard wears glasses in 1, 4, 5; Amy only in 4.
STATES = {"leonard": {1: "glasses", 4: "glasses", 5: "glasses", 2: "no_glasses", 3: "no_glasses"},
          "amy": {4: "glasses", 1: "no_glasses", 2: "no_glasses", 3: "no_glasses", 5: "no_glasses"}}


def bench(*args, ok: bool | None = True):
    return run("bench", *args, ok=ok)


def accuracy(*args, ok: bool | None = True):
    return run("bench", "accuracy", *args, ok=ok)


def speed(*args, ok: bool | None = True):
    return run("bench", "speed", *args, ok=ok)


def rows_of(people: dict[str, range]) -> list[tuple[str, str, str]]:
    """(absolute path, identity, state) of face-api.js crops."""
    return [(str(FACES / p / f"{p}{n}.png"), p, STATES.get(p, {}).get(n, "")) for p, ns in people.items() for n in ns]


def write_set(path: Path, rows, header=("path", "identity", "appearance_state")) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def brute_pairs(rows) -> dict[str, int]:
    """Relation counts over all pairs, by a plain loop over the labels."""
    counts = {"R1": 0, "R2": 0, "R3": 0}
    for (_, ia, sa), (_, ib, sb) in itertools.combinations(rows, 2):
        counts["R3" if ia != ib else "R1" if sa == sb else "R2"] += 1
    return counts


FOUR = rows_of({"leonard": range(1, 6), "amy": range(1, 6), "sheldon": range(1, 6), "raj": range(1, 6)})


def test_accuracy_json_both_protocols_and_brute_force_counts(tmp_path):
    csv_path = write_set(tmp_path / "set.csv", FOUR)
    plot = tmp_path / "roc.png"
    res = accuracy(csv_path, "--json", "--plot", plot, "-m", "dlib-resnet", "-m", tmp_path / "missing.onnx", "-q")
    out = json.loads(res.stdout)
    pairs = brute_pairs(FOUR)
    assert pairs == {"R1": 30, "R2": 10, "R3": 150}
    model = out["models"]["dlib-resnet"]
    assert model["error"] is None and model["samples"] == 20 and model["identities"] == 4
    assert model["pairs"] == pairs
    head, ident = model["protocols"]["head"], model["protocols"]["identity"]
    assert (head["n_genuine"], head["n_impostor"]) == (pairs["R1"], pairs["R2"] + pairs["R3"])
    assert (ident["n_genuine"], ident["n_impostor"]) == (pairs["R1"] + pairs["R2"], pairs["R3"])
    for p in (head, ident):
        assert 0.0 <= p["auc"] <= 1.0
        assert set(p["vr"]) == set(p["vr_insightface"]) == {"1e-2", "1e-3", "1e-4"}
        # 150-160 impostors: 1e-2 is measurable (k = 1), 1e-3 and 1e-4 are not.
        assert p["measurable"] == {"1e-2": True, "1e-3": False, "1e-4": False}
        assert 0.0 <= p["vr"]["1e-2"] <= 1.0 and p["vr"]["1e-3"] is None
    assert ident["auc"] > 0.9  # dlib tells these four people apart
    assert 0.0 <= model["hierarchy"]["accuracy"] <= 1.0 and model["hierarchy"]["quadruples"] > 0
    # The model that cannot load has its row, with the reason; the other still ran.
    broken = out["models"][str(tmp_path / "missing.onnx")]
    assert broken["error"] and "missing model file" in broken["error"]
    assert "missing.onnx" in res.stderr
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_labels_layout_unreadable_file_and_video(tmp_path):
    # LABELS.csv's layout: source folder + path, relative to --root; extra columns; rows to skip.
    (tmp_path / "broken.png").write_bytes(b"not an image")
    rows = [
        ("face-api.js", "examples/images/raj/raj1.png", "bbt_raj", "", "", ""),
        ("face-api.js", "examples/images/raj/raj2.png", "bbt_raj", "", "", ""),
        ("face-api.js", "examples/images/sheldon/sheldon1.png", "bbt_sheldon", "", "", ""),
        ("face-api.js", "examples/images/sheldon/sheldon2.png", "bbt_sheldon", "", "", ""),
        ("video-retalking", "examples/face/5.mp4", "vr_person5", "", "", "one talking head"),
        ("face_recognition", "examples/two_people.jpg", "barack_obama;joe_biden", "", "", "2 faces"),
        ("face-api.js", "examples/images/bbt1.jpg", "bbt_cast_group", "", "", "group photo, 2-7 faces"),
        ("", str(tmp_path / "broken.png"), "bbt_raj", "", "", ""),  # absolute path
        ("face-api.js", "examples/images/raj/no_such_raj.png", "bbt_raj", "", "", ""),
    ]
    csv_path = write_set(tmp_path / "labels.csv", rows, ("source", "path", "identity", "appearance_state", "label_origin", "note"))
    res = accuracy(csv_path, "--root", DATA, "-q", ok=False)
    assert res.exit_code == 2  # measured on the others; the unreadable and missing files had their lines
    assert "skipped 2 of 9 rows" in res.stderr
    assert "broken.png" in res.stderr and "no_such_raj.png" in res.stderr
    assert sum("broken.png" in line for line in res.stderr.splitlines()) == 1  # one line per problem
    assert DEFAULT_MODEL in res.stdout and "VR@1e-2" in res.stdout and "insightface convention" in res.stdout
    assert "5 samples (4 photos, 1 video tracks)" in res.stdout
    # Without --root the paths start from the CSV's folder: every file is missing, nothing to measure.
    res = accuracy(csv_path, "--json", "-q", ok=False)
    assert "nothing could be measured" in res.stderr


def test_one_identity_set(tmp_path):
    # Leonard alone, with and without glasses: head similarity has R2 impostors, identity has none.
    leonard = rows_of({"leonard": range(1, 6)})
    res = accuracy(write_set(tmp_path / "leonard.csv", leonard), "--json", "-q")
    assert "no impostor pairs" in res.stderr
    model = json.loads(res.stdout)["models"][DEFAULT_MODEL]
    assert model["protocols"]["identity"]["auc"] is None and model["protocols"]["identity"]["n_impostor"] == 0
    assert model["protocols"]["head"]["n_impostor"] == brute_pairs(leonard)["R2"] == 6
    assert 0.0 <= model["protocols"]["head"]["auc"] <= 1.0
    # Raj alone, one state: nothing can be computed -> non-zero exit, one clear line.
    res = accuracy(write_set(tmp_path / "raj.csv", rows_of({"raj": range(1, 4)})), "-q", ok=False)
    assert "no impostor pairs" in res.stderr and "nothing could be measured" in res.stderr


def _exact_scores(rows):
    """The benchmark's scores recomputed independently with the library's own building blocks."""
    from headsearch.detection.faces import FaceDetector
    from headsearch.embedding.photo_heads import photo_heads, photo_pixels
    from headsearch.models import load_embedder

    detector, embedder = FaceDetector(), load_embedder("dlib-resnet")
    v = embedder.embed([photo_heads(photo_pixels(Path(p)), p, detector, embedder)[0].crop for p, _, _ in rows])["id"].astype(np.float64)
    gen = {"head": [], "identity": [], "looks": []}
    imp = {"head": [], "identity": [], "looks": []}
    for a, b in itertools.combinations(range(len(rows)), 2):
        s = float(v[a] @ v[b])
        same_id, same_state = rows[a][1] == rows[b][1], rows[a][2] == rows[b][2]
        (gen if same_id and same_state else imp)["head"].append(s)
        (gen if same_id else imp)["identity"].append(s)
        if same_id:  # same look against other look of one person
            (gen if same_state else imp)["looks"].append(s)
    return gen, imp


def _best_separation(same: list[float], other: list[float]) -> float:
    """Brute force: the candidate threshold (accept strictly above) with the best mean of the two rates, the lowest on a tie."""
    def rate(t):
        return (np.mean(np.array(same) > t) + np.mean(np.array(other) <= t)) / 2
    return max(sorted(set(same) | set(other)), key=lambda t: (rate(t), -t))


def test_calibrate_writes_exact_thresholds(tmp_path):
    from conftest import make_arcface_like_onnx

    from headsearch.evaluation.metrics import vr_at_far

    lib = tmp_path / "lib"  # a face model's library (one score for identity and look), compared with brute force
    run("index", FACES / "raj" / "raj1.png", FACES / "amy" / "amy1.png", "--library", lib, "-q", "--model", "dlib-resnet")
    csv_path = write_set(tmp_path / "set.csv", FOUR)
    out = json.loads(accuracy(csv_path, "--calibrate", "1e-2", "--library", lib, "--json", "-q").stdout)
    written = json.loads((lib / "thresholds.json").read_text())
    assert out["calibration"]["identity"] == written["identity"]
    assert written["far"] == 0.01 and written["model"] == "dlib-resnet" and written["version"]
    gen, imp = _exact_scores(FOUR)
    assert written["counts"]["identity"] == {"genuine": len(gen["identity"]), "impostor": len(imp["identity"])}
    assert written["identity"] == pytest.approx(vr_at_far(np.array(gen["identity"]), np.array(imp["identity"]), 1e-2).threshold, abs=1e-5)
    # Same look: the score that best tells the person's same look from their other look.
    assert gen["looks"] and imp["looks"]
    assert written["same_look"] == pytest.approx(_best_separation(gen["looks"], imp["looks"]), abs=1e-5)
    # The highest impostor scores are kept, so a library sets its own bar for its size.
    assert written["tails"]["identity"]["count"] == len(imp["identity"])
    assert written["tails"]["identity"]["top"][:5] == pytest.approx(sorted(imp["identity"], reverse=True)[:5], abs=1e-5)
    # The query command reads it back.
    from headsearch.evaluation.thresholds import read_thresholds

    assert read_thresholds(lib).identity == written["identity"]
    from conftest import pixel_copy

    photo = pixel_copy(FACES / "amy" / "amy1.png", tmp_path)  # the query file itself is never a hit: its pixels are
    hits = json.loads(run("query", photo, "--library", lib, "--json", "-k", "2", "--show-weak").stdout)
    assert hits[0]["tier"] == "same_look"  # the same photo
    assert hits[1]["tier"] == ("other_person" if hits[1]["score"] <= written["identity"] else "other_look")

    # Not measurable at that FAR: refused, the file stays as it was.
    small = write_set(tmp_path / "small.csv", rows_of({"raj": range(1, 4), "sheldon": range(1, 4)}))
    res = accuracy(small, "--calibrate", "1e-2", "--library", lib, "-q", ok=False)
    assert "cannot calibrate at FAR 0.01" in res.stderr and "at least 100 impostor pairs" in res.stderr
    assert json.loads((lib / "thresholds.json").read_text()) == written
    # Another model than the library's: refused.
    onnx = make_arcface_like_onnx(tmp_path / "other.onnx")
    res = accuracy(small, "--calibrate", "0.5", "--library", lib, "--model", onnx, "-q", ok=False)
    assert "dlib-resnet" in res.stderr and "thresholds only hold for the model that made the library" in res.stderr
    assert json.loads((lib / "thresholds.json").read_text()) == written


def test_speed_search_and_indexing(tmp_path):
    out = json.loads(speed("--only", "search", "--sizes", "2000", "--queries", "200", "--json", "-q").stdout)
    assert set(out) == {"search"}
    by_index = {r["index"]: r for r in out["search"]}
    assert set(by_index) == {"flat", "ivf"} and all(r["vectors"] == 2000 and r["dim"] == 128 for r in out["search"])
    for r in out["search"]:  # the keys a script compares runs by
        assert {"vectors", "index", "p50_ms", "p95_ms", "recall_at_10", "memory_mb"} <= set(r)
        assert 0 < r["p50_ms"] <= r["p95_ms"] and r["memory_mb"] >= 2000 * 128 * 4 / 1e6
    assert by_index["flat"]["recall_at_10"] == 1.0
    assert by_index["ivf"]["recall_at_10"] >= 0.95
    ivf = by_index["ivf"]["params"]
    assert ivf["nlist"] == round(4 * 2000 ** 0.5) and ivf["tuned_recall"] >= 0.97 and ivf["tuned_on"] == 500
    assert ivf["tried"][str(ivf["nprobe"])] == ivf["tuned_recall"]
    # --speed without a video asks for one; unknown index names are refused in one line.
    assert "--video" in speed(ok=False).output
    res = speed("--only", "search", "--index", "ivf,annoy", ok=False)
    assert "--index: annoy is not one of flat, ivf, hnsw, ivfpq-ondisk" in res.stderr and "Traceback" not in res.output
    res = speed("--only", "search", "--sizes", "1000", "--dim", "100", "--index", "ivfpq-ondisk", ok=False)
    assert "--pq-bytes 32 must divide the dimension of the vectors (100)" in res.stderr and "Traceback" not in res.output
    # Indexing speed on a tiny real clip (5 frames): every stage reported, next to the decode-only bound.
    clip = DATA / "face-api.js" / "test" / "media" / "video.mp4"
    out = json.loads(speed("--only", "indexing", "--video", clip, "--json", "-q").stdout)["indexing"]
    assert list(out["stages"]) == ["decode", "shots", "detect", "keypoints", "track", "embed", "store"]
    assert out["frames_decoded"] == out["decode_only"]["frames"] == 5 and out["frames_sampled"] >= 1
    assert 1 <= out["keypoint_frames"] == out["stages"]["keypoints"]["items"] <= out["frames_sampled"]  # the shot's first sample
    assert out["x_real_time"] == out["realtime"] > 0 and out["decode_only_x_real_time"] == out["decode_only"]["realtime"] > 0
    assert out["ratio"] == pytest.approx(out["x_real_time"] / out["decode_only_x_real_time"])
    assert all({"seconds", "share", "per_second"} <= set(s) for s in out["stages"].values())
    # CPU seconds of both runs, and the ratio the CPU allows this work: the bound's seconds over indexing's CPU seconds
    # spread over every usable core.
    assert out["cpu_s"] > 0 and out["decode_only"]["cpu_s"] > 0 and out["usable_cpus"] >= 1
    assert out["cores"] == pytest.approx(out["cpu_s"] / out["wall_s"])
    assert out["cpu_ceiling_ratio"] == pytest.approx(out["decode_only"]["seconds"] * out["usable_cpus"] / out["cpu_s"])
    assert "runs" not in out
    # --repeat: every run with its own decode-only rate; the record shown is the run with the median ratio.
    out = json.loads(speed("--only", "indexing", "--video", clip, "--repeat", "3", "--json", "-q").stdout)["indexing"]
    ratios = sorted(r["ratio"] for r in out["runs"])
    assert len(ratios) == 3 and out["ratio"] == ratios[1] and all(r["decode_only_x_real_time"] > 0 for r in out["runs"])
    from bench.report import format_indexing

    assert "over 3 runs" in format_indexing(out) and "median run shown" in format_indexing(out)
    assert all(r["cpu_ceiling_ratio"] > 0 for r in out["runs"]) and "with every core busy this work reaches at most" in format_indexing(out)


def test_speed_cold_query_beside_a_bare_import():
    """`bench speed --only query`: fresh `query` processes on a library of the video alone, each after a bare import of
    onnxruntime, OpenCV and numpy; the medians, their ratio and the median query's stages (issue 28)."""
    clip = DATA / "face-api.js" / "test" / "media" / "video.mp4"
    photo = FACES / "amy" / "amy2.png"
    assert "--photo" in speed("--only", "query", "--video", clip, ok=False).output
    out = json.loads(speed("--only", "query", "--video", clip, "--photo", photo, "--repeat", "2", "--json", "-q").stdout)
    assert set(out) == {"cold_query"}
    record = out["cold_query"]
    # Both times measured, in no order: under load a bare import has taken longer than a whole query (0.9-1.3 s each).
    assert len(record["runs"]) == 2 and all(r["bare_s"] > 0 and r["query_s"] > 0 for r in record["runs"])
    assert record["query_median_s"] == pytest.approx(sum(r["query_s"] for r in record["runs"]) / 2)
    assert record["ratio"] == pytest.approx(record["query_median_s"] / record["bare_median_s"])
    assert list(record["stages"]) == ["start", "imports", "library", "database", "index", "models", "photo", "search", "pictures"]
    from bench.report import format_cold_query

    assert "x the bare import" in format_cold_query(record)


def test_speed_ivfpq_on_disk_resumes_from_its_work_folder(tmp_path):
    """The on-disk IVF-PQ benchmark at a small size: exact ground truth from the raw file, shards merged
    into on-disk lists, searched in a fresh process; a rerun resumes from the kept folder."""
    args = ("--only", "search", "--sizes", "3000", "--queries", "100", "--index", "ivfpq-ondisk", "--nprobe", "2,64",
            "--rerank", "50", "--pq-bytes", "16", "--work-dir", tmp_path / "work", "--json", "-q")
    out = json.loads(speed(*args).stdout)["search"]
    assert [r["params"]["nprobe"] for r in out] == [2, 64] and all(r["index"] == "ivfpq-ondisk" for r in out)
    coarse, fine = out
    assert fine["recall_at_10"] >= 0.95 and fine["recall_at_10"] > coarse["recall_at_10"]
    for r in out:
        assert r["vectors"] == 3000 and r["params"]["nlist"] == round(4 * 3000 ** 0.5) and r["params"]["rerank"] == 50
        assert r["memory_mb"] == r["rss_mb"] >= r["baseline_rss_mb"] > 0 and r["rss_anon_mb"] > 0
        assert r["disk_mb"] > 3000 * (16 + 8) / 1e6 and r["raw_vectors_mb"] == 3000 * 128 * 4 / 1e6
        assert set(r["build_stages_s"]) == {"train", "shard-0000", "merge"}
    data = tmp_path / "work" / "n3000-d128-seed0-q100"
    folder = next(data.glob("ivfpq-*"))
    assert sorted(p.name for p in folder.iterdir()) == ["build.json", "index.faiss", "index.ivfdata", "trained.faiss"]
    # The exact ground truth on disk matches the in-memory brute force of the same vectors.
    from bench.search import exact_top_k

    db = np.fromfile(data / "vectors.f32", np.float32).reshape(3000, 128)
    truth = np.load(data / "truth-k10.npz")
    ids, kth = exact_top_k(db, np.load(data / "queries.npy"), 10)
    assert np.array_equal(truth["ids"], ids) and np.allclose(truth["kth"], kth)
    # A rerun finds everything built: same recall, nothing rebuilt.
    stamp = (folder / "index.ivfdata").stat().st_mtime_ns
    again = json.loads(speed(*args).stdout)["search"]
    assert [r["recall_at_10"] for r in again] == [r["recall_at_10"] for r in out]
    assert (folder / "index.ivfdata").stat().st_mtime_ns == stamp
    text = speed(*[a for a in args if a != "--json"]).stdout
    assert "ivfpq-ondisk (nlist 219, nprobe 64, PQ 16 B, re-rank 50)" in text and "ivfpq-ondisk (stand-alone)" in text



def test_speed_library_store_answers_as_exact_search_and_is_kept(tmp_path):
    """`--index library` at a small size: the library's own segments (created from 99% of the vectors, the rest
    added in 10 saves that flush and merge), searched by a fresh process: every list is searched, so every
    query's top 10 is the exact in-memory index's; a rerun reuses the kept store."""
    args = ("--only", "search", "--sizes", "3000", "--queries", "100", "--index", "library", "--work-dir", tmp_path / "work",
            "--json", "-q")
    (r,) = json.loads(speed(*args).stdout)["search"]
    assert r["index"] == "library" and r["vectors"] == 3000 and r["store"]["count"] == 3000
    assert r["recall_at_10"] == 1.0 and r["same_as_exact"] == 1.0
    assert r["params"]["nprobe"] == r["params"]["nlist"] == r["store"]["nlist"] and r["params"]["pq_bytes"] == 32
    assert r["build"]["created_from"] == 2970 and r["build"]["added"] == 30 and r["build"]["saves"] == 10
    assert 1 < r["params"]["segments"] <= 8 and sum(r["store"]["segment_vectors"]) == 3000 and r["store"]["tail"] == 0
    assert r["memory_mb"] == r["rss_mb"] >= r["baseline_rss_mb"] > 0 and r["device"] == "cpu"
    assert r["disk_mb"] > 3000 * 128 * 4 / 1e6  # the raw vectors are in the store's own files
    folder = tmp_path / "work" / "n3000-d128-seed0-q100" / "library-store-seed0"
    stamp = (folder / "state.json").stat().st_mtime_ns
    text = speed(*[a for a in args if a != "--json"]).stdout
    assert (folder / "state.json").stat().st_mtime_ns == stamp  # built once
    assert "library segments (nlist" in text and "same as exact" in text

def test_labels_csv_rows():
    from headsearch.evaluation.labels import read_label_set

    if not LABELS.is_file():
        pytest.skip(f"{LABELS} not found")
    labels = read_label_set(LABELS)
    assert all(f.path.is_file() for f in labels.files), [str(f.path) for f in labels.files if not f.path.is_file()]
    assert all(";" not in f.identity for f in labels.files)
    assert not {"bbt_cast_group", "friends_cast_6", "crowd_unknown"} & {f.identity for f in labels.files}
    assert labels.skipped["with several identities"] == sum(";" in r["identity"] for r in csv.DictReader(LABELS.open()))
    leonard = {f.path.name: f.state for f in labels.files if f.identity == "bbt_leonard"}
    assert leonard["leonard1.png"] == "glasses" and leonard["leonard2.png"] == "no_glasses"


def _without_timings(out: dict) -> dict:
    """A benchmark's JSON without what differs between two runs of it (embedder milliseconds)."""
    return {**out, "models": {spec: {k: v for k, v in m.items() if k != "ms_per_face"} for spec, m in out["models"].items()}}


def test_old_spellings_are_the_subcommands(tmp_path):
    # `bench SET` is `bench accuracy SET`, options before or after SET: the same measurement, the same JSON.
    csv_path = write_set(tmp_path / "set.csv", rows_of({"raj": range(1, 4), "sheldon": range(1, 4)}))
    new = json.loads(accuracy(csv_path, "--json", "-q").stdout)
    assert set(new) == {"set", "fars", "models"} and new["models"][DEFAULT_MODEL]["samples"] == 6
    for old in ((csv_path, "--json", "-q"), ("--json", "-q", csv_path)):
        assert _without_timings(json.loads(bench(*old).stdout)) == _without_timings(new)
    assert "VR@1e-2" in bench(csv_path, "-q").stdout
    # `bench --speed` is `bench speed`: the same options, the same keys and exact recall.
    args = ("--only", "search", "--sizes", "2000", "--queries", "100", "--index", "flat", "--json", "-q")
    new = json.loads(speed(*args).stdout)
    old = json.loads(bench("--speed", *args).stdout)
    assert set(old) == set(new) == {"search"}
    assert [(r["index"], r["vectors"], r["recall_at_10"]) for r in old["search"]] == [("flat", 2000, 1.0)]
    assert [set(r) for r in old["search"]] == [set(r) for r in new["search"]]
    assert "--video" in bench("--speed", ok=False).output  # the old error, word for word
    # A SET and --speed were one run; now they are two, said in one line.
    res = bench(csv_path, "--speed", "--only", "search", "-q", ok=False)
    assert res.exit_code == 2 and "bench accuracy SET" in res.output and "bench speed" in res.output
    assert "Traceback" not in res.output
    res = bench("--speed", "--sizes", "2000", "-m", "sface", csv_path, ok=False)  # option values are not taken for a SET
    assert "bench accuracy SET" in res.output
    # The group's help lists the subcommands and the old spellings.
    text = bench("--help").output
    assert all(name in text for name in ("accuracy", "speed", "people", "headsearch bench SET", "headsearch bench --speed"))


def _library_pairs(library: Path, labelled: dict[str, str]) -> dict:
    """Pairwise precision and recall of `headsearch people` against labels, by a plain loop over track pairs."""
    with library_db(library) as con:
        track_file = dict(con.execute("select t.id, v.path from tracks t join videos v on t.video_id = v.id").fetchall())
    assert sorted(set(track_file.values())) == sorted(labelled), "one track per labelled photo"
    person = {tr: p["id"] for p in json.loads(run("people", "--library", library, "--json").stdout) for tr in p["tracks"]}
    person = {tr: person.get(tr, -tr) for tr in track_file}  # a track in no listed person (the inbox) is a person of its own
    same_person = same_identity = correct = 0
    for a, b in itertools.combinations(sorted(track_file), 2):
        together, alike = person[a] == person[b], labelled[track_file[a]] == labelled[track_file[b]]
        same_person += together
        same_identity += alike
        correct += together and alike
    return {"clustered_pairs": same_person, "true_pairs": same_identity, "correct_pairs": correct,
            "clusters": len(set(person.values())), "tracks": len(track_file)}


def test_bench_people(tmp_path):
    photos = {p: [FACES / p / f"{p}{i}.png" for i in (1, 2, 3)] for p in ("amy", "raj", "sheldon")}
    labelled = {str(f): p for p, fs in photos.items() for f in fs}
    library = tmp_path / "lib"
    run("index", *labelled, "--library", library, "-q")
    labels = write_set(tmp_path / "people.csv", [(f, p, "") for f, p in labelled.items()])
    rows = json.loads(bench("people", "--library", library, labels, "--json").stdout)
    assert len(rows) == 1 and rows[0]["all_tracks"] == 9 and rows[0]["tracks"] + rows[0]["inbox_tracks"] == 9
    expected = _library_pairs(library, labelled)
    assert {k: rows[0]["all"][k] for k in expected} == expected
    assert rows[0]["photo"] == rows[0]["all"] and rows[0]["video"]["tracks"] == 0
    assert rows[0]["all"]["precision"] == round(expected["correct_pairs"] / expected["clustered_pairs"], 4)
    # A sweep groups copies: at 1.0 nobody merges, at -1 everybody does; the library keeps its people.
    people_before = run("people", "--library", library, "--json").stdout
    rows = json.loads(bench("people", "--library", library, "--sweep", "1.0,-1", labels, "--json").stdout)
    assert [r["identity_threshold"] for r in rows] == [1.0, -1.0]
    apart, together = rows[0]["all"], rows[1]["all"]
    assert (apart["clusters"], apart["correct_pairs"], apart["precision"], apart["recall"]) == (9, 0, 1.0, 0.0)
    assert (together["clusters"], together["precision"], together["recall"]) == (1, 0.25, 1.0)  # 9 of 36 pairs
    assert run("people", "--library", library, "--json").stdout == people_before
    text = bench("people", "--library", library, "--sweep", "1.0,-1", labels).stdout
    assert ("threshold 1.000  0 people (9 more of too few tracks unlisted, 9 of them single-track; 9 of 9 tracks in the inbox, "
            "9 labelled ones counted as persons of their own); all: 9 tracks of 3 identities in 9 people, precision 1.000 recall 0.000") in text
    # `python -m bench.people` runs the same code: the same rows as JSON, then the same lines.
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "bench.people", "--library", str(library), "--sweep", "1.0,-1", str(labels)],
                          capture_output=True, text=True, cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)}, timeout=300)
    assert done.returncode == 0, done.stderr
    printed, end = json.JSONDecoder().raw_decode(done.stdout)
    assert printed == rows and done.stdout[end:].strip() == text.strip()
    # Bad thresholds and a missing label set are one line each.
    assert "--sweep" in bench("people", "--library", library, "--sweep", "high", labels, ok=False).output
    assert "Traceback" not in bench("people", "--library", library, tmp_path / "none.csv", ok=False).output
