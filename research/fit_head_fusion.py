"""Fit and measure the whole-head fusion s = cos_SFace + w * cos_Lite0 (issue 16), with the project's own crops
and metrics.

Head vectors compared: `sface` alone, `sface+hsv`, `dlib-resnet`, and SFace fused with the ImageNet EfficientNet-Lite0
ONNX graph of scripts/export_lite0_onnx.py (1280-d, averaged inside the head ellipse), for w in --grid, plain or with a
mean Lite0 vector (of the fitting crops only) subtracted before normalising. A fused head vector is
[u_SFace, sqrt(w) u_Lite0] (each part unit length), so its cosine is (cos_SFace + w cos_Lite0) / (1 + w): the same
order as s. Identity vectors of the fused model are SFace's.

Data (built by `research/split_labels.py ../shared/data/LABELS.csv --more ../shared/data/more/LABELS.csv --out SPLIT`):
  fit      SPLIT/train.csv, only the rows of PERMISSIVE_SOURCES (repository licences MIT / Apache-2.0 in
           ../shared/data/SOURCES.md): photos and one-person videos; nothing from ../shared/data/more (research-only
           terms: Glint360K crops, MEAD, HDTF) and nothing held out. w and the mean are chosen here only:
           the largest head-protocol AUC, ties broken by hierarchy accuracy, then by the smaller w.
  report   SPLIT/heldout-all.csv (face-api.js, openface, and halle_berry, keanu_reeves, tom_hanks of more/: evaluation
           only) and SPLIT/heldout.csv (its public-licence part: face-api.js and openface).
Photos: `headsearch.embedding.photo_heads.photo_heads` with `headsearch.detection.faces.FaceDetector` (the largest head, 256 px, as
`headsearch bench` and the indexer crop it). Videos: the indexer's own analysis (`indexer.analysis.analyse_file`,
default settings) and the labelled person's track (longest track with a face), one sample = the renormalised mean of
the per-sighting vectors of its embedded face sightings, as `headsearch bench` does.
Metrics: `headsearch.evaluation.verification.evaluate` (head protocol R1 vs R2+R3: VR@1e-2, VR@1e-3, AUC; identity R1+R2 vs R3;
hierarchy accuracy).

Head-only part: Lite0 cosines alone, same person same look (R1) against different people (R3) on the held-out photos:
AUC, the cosine at FAR 1e-2 / 1e-3 among R3 pairs, VR there; the same with R3 pairs of one photo collection only
(strangers photographed alike); and with the face box of one (or both) crops blacked out or blurred, a rough
stand-in for a view without a face.

    python research/split_labels.py ../shared/data/LABELS.csv --more ../shared/data/more/LABELS.csv --out /tmp/split
    python research/fit_head_fusion.py --split /tmp/split --json /tmp/fusion.json
    python research/fit_head_fusion.py --split /tmp/split --compare-lite0 /tmp/lite0_fp32.onnx   # another export
    python research/fit_head_fusion.py --speed                                                   # ms per crop

Crops and vectors are cached in --cache (default /tmp/headfusion-cache); delete it to recompute.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from headsearch.basics.files import sha256_file  # noqa: E402
from headsearch.detection.crops import HeadCrop  # noqa: E402
from headsearch.models.base import Embedder, ModelSpec, l2_normalise, mean_vector  # noqa: E402
from schemas.records import VectorKind  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
# Sources of ../shared/data/LABELS.csv whose repositories are MIT or Apache-2.0 (SOURCES.md). PySceneDetect (its
# own resources licence, "for testing purposes only") is not; its one row names several people anyway.
PERMISSIVE_SOURCES = ("face_recognition", "facenet-pytorch", "video-retalking", "LivePortrait")
DEFAULT_LITE0 = ROOT / "headsearch" / "models" / "efficientnet_lite0_head.onnx"
GRID = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5)
BASELINES = ("sface", "sface+hsv", "dlib-resnet")
FARS = (1e-2, 1e-3)


# ---------------------------------------------------------------------------------------------------- Lite0 loader

class Lite0Onnx:
    """The exported Lite0 head graph on onnxruntime: uint8 RGB head crops in, raw 1280-d features out."""

    def __init__(self, path: Path, threads: int | None = None):
        from headsearch.basics.runtime import inference_session

        self.path = Path(path)
        self.session = inference_session(self.path, threads)
        self.size = int(self.session.get_inputs()[0].shape[1])
        self.sha256 = sha256_file(self.path)

    def features(self, images: Sequence[np.ndarray], batch: int = 16) -> np.ndarray:
        import cv2

        out = []
        for start in range(0, len(images), batch):
            chunk = [im if im.shape[0] == self.size else cv2.resize(im, (self.size, self.size), interpolation=cv2.INTER_AREA)
                     for im in images[start:start + batch]]
            out.append(self.session.run(None, {"crops": np.stack(chunk).astype(np.float32)})[0])
        return np.concatenate(out) if out else np.zeros((0, 1280), np.float32)


# ---------------------------------------------------------------------------------------------------- samples

@dataclass
class Sample:
    path: str
    identity: str
    state: str | None
    keys: list[str]  # crop keys (one for a photo, the track's embedded sightings for a video)


class _Collector(Embedder):
    """Embeds nothing: keeps the crops the indexer's analysis hands over (face sightings only, as for SFace) and
    returns their numbers, so the chosen track's crops can be found again."""

    version = "1"

    def __init__(self):
        super().__init__(ModelSpec(name="collector", summary="the crops handed over, numbered", dims=(1,)))
        self.crops: list[HeadCrop] = []

    def embed(self, crops):
        first = len(self.crops)
        self.crops.extend(crops)
        return {VectorKind.ID: np.arange(first, first + len(crops), dtype=np.float32)[:, None]}


def source_of(path: Path) -> str | None:
    try:
        return Path(path).resolve().relative_to(DATA.resolve()).parts[0]
    except ValueError:
        return None


def load_sets(split: Path) -> dict[str, list]:
    from headsearch.evaluation.labels import read_label_set

    fit = [f for f in read_label_set(split / "train.csv").files if source_of(f.path) in PERMISSIVE_SOURCES]
    return {"fit": fit, "heldout-all": read_label_set(split / "heldout-all.csv").files,
            "heldout": read_label_set(split / "heldout.csv").files}


def collect_crops(sets: dict[str, list], cache: Path) -> tuple[dict[str, HeadCrop], dict[str, list[Sample]], list[str]]:
    """Head crops of every labelled file (cached), the samples of each set, and the files that gave none."""
    from headsearch.basics.errors import HeadsearchError
    from headsearch.basics.media import media_kind
    from headsearch.basics.settings import IndexSettings
    from headsearch.detection.faces import FaceDetector
    from headsearch.embedding.photo_heads import photo_heads, photo_pixels
    from indexer.analysis import analyse_file
    from schemas.records import MediaKind

    store = cache / "crops.pkl"
    crops: dict[str, HeadCrop] = {}
    per_file: dict[str, list[str] | str] = {}
    if store.is_file():
        crops, per_file = pickle.loads(store.read_bytes())
    detector = FaceDetector()
    settings = IndexSettings()
    changed = False
    for files in sets.values():
        for f in files:
            key = str(f.path)
            if key in per_file:
                continue
            changed = True
            try:
                if media_kind(f.path) == MediaKind.IMAGE:
                    crops[key] = photo_heads(photo_pixels(f.path), f.path, detector, _Collector())[0].crop
                    per_file[key] = [key]
                else:
                    collector = _Collector()
                    result = analyse_file(f.path, settings, detector, collector)
                    tracks = [tr for tr in result.tracks if any(o.face_visible and o.embeddings for o in tr.observations)]
                    if not tracks:
                        raise HeadsearchError(f"{f.path}: no head track with an embedded face")
                    track = max(tracks, key=lambda tr: (len(tr.observations), float(np.mean([o.head.area for o in tr.observations]))))
                    keys = []
                    for o in track.observations:
                        if o.face_visible and o.embeddings:
                            k = f"{key}#{o.frame_index}"
                            crops[k] = collector.crops[int(o.embeddings[VectorKind.ID][0])]
                            keys.append(k)
                    per_file[key] = keys
                    print(f"  {f.path.name}: track of {len(track.observations)} sightings, {len(keys)} embedded faces", flush=True)
            except HeadsearchError as e:
                per_file[key] = str(e)
    if changed:
        cache.mkdir(parents=True, exist_ok=True)
        store.write_bytes(pickle.dumps((crops, per_file)))
    samples, failed = {}, []
    for name, files in sets.items():
        samples[name] = []
        for f in files:
            got = per_file[str(f.path)]
            if isinstance(got, str):
                failed.append(f"{name}: {got}")
                continue
            samples[name].append(Sample(str(f.path), f.identity, f.state, got))
    return crops, samples, sorted(set(failed))


def masked(crop: HeadCrop, how: str) -> np.ndarray:
    """The crop with its face box blacked out or blurred (a rough stand-in for a view without a face)."""
    import cv2

    image = crop.image.copy()
    b = crop.face_box
    x1, y1 = max(0, int(round(b.x1))), max(0, int(round(b.y1)))
    x2, y2 = min(image.shape[1], int(round(b.x2))), min(image.shape[0], int(round(b.y2)))
    if x2 <= x1 or y2 <= y1:
        return image
    if how == "black":
        image[y1:y2, x1:x2] = 0
    else:
        sigma = max(x2 - x1, y2 - y1) / 6.0
        image[y1:y2, x1:x2] = cv2.GaussianBlur(image, (0, 0), sigma)[y1:y2, x1:x2]
    return image


# ---------------------------------------------------------------------------------------------------- vectors

def model_vectors(spec: str, keys: list[str], crops: dict[str, HeadCrop], cache: Path) -> dict[str, dict[VectorKind, np.ndarray]]:
    """Per crop key, a project embedder's vectors (cached per model name and version)."""
    from headsearch.models import load_embedder

    embedder = load_embedder(spec)
    store = cache / f"vectors-{embedder.name}-{embedder.version}.pkl".replace("/", "_")
    got = pickle.loads(store.read_bytes()) if store.is_file() else {}
    todo = [k for k in keys if k not in got]
    for start in range(0, len(todo), 32):
        chunk = todo[start:start + 32]
        vectors = embedder.embed([crops[k] for k in chunk])
        for i, k in enumerate(chunk):
            got[k] = {kind: np.asarray(v[i], np.float32) for kind, v in vectors.items()}
    if todo:
        store.write_bytes(pickle.dumps(got))
    return got


def lite0_vectors(lite0: Lite0Onnx, keys: list[str], images: dict[str, np.ndarray], cache: Path) -> dict[str, np.ndarray]:
    """Per key, raw Lite0 features (cached per file SHA-256)."""
    store = cache / f"lite0-{lite0.sha256[:16]}.pkl"
    got = pickle.loads(store.read_bytes()) if store.is_file() else {}
    todo = [k for k in keys if k not in got]
    if todo:
        feats = lite0.features([images[k] for k in todo])
        got.update(zip(todo, feats, strict=True))
        store.write_bytes(pickle.dumps(got))
    return got


def sample_vectors(samples: Sequence[Sample], per_crop) -> dict[VectorKind, np.ndarray]:
    """One row per sample: the crop's vectors, or the renormalised mean over a video track's crops."""
    kinds = per_crop(samples[0].keys[0]).keys()
    return {kind: np.stack([mean_vector(per_crop(k)[kind] for k in s.keys) for s in samples]) for kind in kinds}


def fused(sface: dict, lite: dict[str, np.ndarray], w: float, mean: np.ndarray | None):
    """Per-crop vectors of the fused model: id = SFace, head = [u_SFace, sqrt(w) u_Lite0]."""
    def per_crop(key: str) -> dict[VectorKind, np.ndarray]:
        s = sface[key][VectorKind.ID]
        f = lite[key] - (mean if mean is not None else 0.0)
        u = l2_normalise(f[None])[0]
        return {VectorKind.ID: s, VectorKind.HEAD: np.concatenate([s, np.sqrt(w) * u]).astype(np.float32)}
    return per_crop


def lite_only(lite: dict[str, np.ndarray], mean: np.ndarray | None):
    def per_crop(key: str) -> dict[VectorKind, np.ndarray]:
        f = lite[key] - (mean if mean is not None else 0.0)
        return {VectorKind.ID: l2_normalise(f[None])[0]}
    return per_crop


# ---------------------------------------------------------------------------------------------------- metrics

def scores(samples: Sequence[Sample], vectors: dict[VectorKind, np.ndarray]) -> dict:
    from headsearch.evaluation.metrics import far_key
    from headsearch.evaluation.verification import evaluate

    report = evaluate(vectors, [s.identity for s in samples], [s.state for s in samples], FARS)
    out = {"n": report.n_samples, "identities": report.n_identities, "pairs": dict(report.pairs)}
    for protocol in ("head", "identity"):
        p = report.protocols[protocol]
        out[f"{protocol}_auc"] = p.auc
        for far in FARS:
            vr = p.vr.get(far_key(far))
            out[f"{protocol}_vr@{far_key(far)}"] = vr.vr if vr is not None and vr.measurable else None
    out["hierarchy"] = report.hierarchy
    out["quadruples"] = report.quadruples
    return out


def collection(path: str) -> str:
    """The photo collection a file comes from: its source folder of ../shared/data (or more/<repo>)."""
    parts = Path(path).resolve().relative_to(DATA.resolve()).parts
    return "/".join(parts[:2]) if parts[0] == "more" else parts[0]


def r1_r3(sim: np.ndarray, samples: Sequence[Sample], symmetric: bool = True, same_collection: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Scores of same-person-same-look pairs (R1) and different-person pairs (R3); R2 left out. `symmetric`: pairs
    i < j; otherwise every ordered pair i != j (sim[i, j] need not equal sim[j, i]). `same_collection`: only R3 pairs
    of one photo collection (strangers photographed alike, as strangers in one video are)."""
    ids = np.array([s.identity for s in samples], dtype=object)
    st = np.array(["" if s.state is None else s.state for s in samples], dtype=object)
    src = np.array([collection(s.path) for s in samples], dtype=object)
    n = len(samples)
    i, j = np.triu_indices(n, 1) if symmetric else np.nonzero(~np.eye(n, dtype=bool))
    same_id, same_st = ids[i] == ids[j], st[i] == st[j]
    r3 = ~same_id & (src[i] == src[j]) if same_collection else ~same_id
    return sim[i[same_id & same_st], j[same_id & same_st]], sim[i[r3], j[r3]]


def head_only(gen: np.ndarray, imp: np.ndarray, reference: dict | None = None) -> dict:
    """AUC, threshold and VR at FAR 1e-2 / 1e-3 among R3; with `reference` thresholds, VR and FAR at those too."""
    from headsearch.evaluation.metrics import far_key, roc_auc, vr_at_far

    out = {"r1": int(gen.size), "r3": int(imp.size), "auc": roc_auc(gen, imp)}
    for far in FARS:
        r = vr_at_far(gen, imp, far)
        out[f"thr@{far_key(far)}"] = r.threshold
        out[f"vr@{far_key(far)}"] = r.vr
        if reference is not None and reference.get(f"thr@{far_key(far)}") is not None:
            t = reference[f"thr@{far_key(far)}"]
            out[f"vr_at_ref@{far_key(far)}"] = float(np.mean(gen > t))
            out[f"far_at_ref@{far_key(far)}"] = float(np.mean(imp > t))
    return out


def fmt(v, digits=3) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def table(rows: list[tuple[str, dict]]) -> str:
    head = "| variant | head VR@1e-2 | head VR@1e-3 | head AUC | id VR@1e-3 | id AUC | hierarchy |"
    lines = [head, "|" + "---|" * 7]
    for name, r in rows:
        lines.append(f"| {name} | {fmt(r['head_vr@1e-2'])} | {fmt(r['head_vr@1e-3'])} | {fmt(r['head_auc'], 4)} | "
                     f"{fmt(r['identity_vr@1e-3'])} | {fmt(r['identity_auc'], 4)} | {fmt(r['hierarchy'])} |")
    return "\n".join(lines)


def variant_name(w: float, mean: bool) -> str:
    return f"sface+lite0 w={w:g}{' -mean' if mean else ''}"


# ---------------------------------------------------------------------------------------------------- main parts

def speed(lite0_path: Path, threads: int, repeat: int, cache: Path) -> dict:
    """ms per crop at batch 1 and 16 on `threads` threads, on 16 cached real 256-px head crops (noise when none are
    cached; a CNN's cost does not depend on the pixels). Crops of another size are resized in the timed part."""
    rng = np.random.default_rng(0)
    lite0 = Lite0Onnx(lite0_path, threads)
    store = cache / "crops.pkl"
    real = [c.image for c in pickle.loads(store.read_bytes())[0].values()][:16] if store.is_file() else []
    images = real if len(real) == 16 else [rng.integers(0, 256, (256, 256, 3), dtype=np.uint8) for _ in range(16)]
    out = {"file": str(lite0_path), "threads": threads, "real_crops": len(real) == 16, "loadavg_before": os.getloadavg()}
    for batch in (1, 16):
        lite0.features(images[:batch], batch)  # warm up
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            lite0.features(images[:batch], batch)
            times.append((time.perf_counter() - t0) * 1000 / batch)
        out[f"ms_per_crop_batch{batch}"] = {"median": float(np.median(times)), "min": float(np.min(times)), "runs": repeat}
    out["loadavg_after"] = os.getloadavg()
    return out


@dataclass
class Run:
    """What every part of a run shares: the samples of each set, the crops' images, and their vectors."""

    samples: dict[str, list[Sample]]
    images: dict[str, np.ndarray]  # crop key (and "key|black", "key|blur" for held-out crops) -> RGB crop
    base: dict[str, dict]  # baseline model -> crop key -> vectors
    lite: dict[str, np.ndarray]  # crop key -> raw Lite0 features
    mean: np.ndarray  # mean raw Lite0 feature of the fitting crops
    fit_keys: list[str]


def prepare(args, result: dict) -> Run:
    sets = load_sets(args.split)
    print("collecting crops (project photo path; indexer analysis for videos)", flush=True)
    crops, samples, failed = collect_crops(sets, args.cache)
    for line in failed:
        print(f"  no sample: {line}")
    for name, s in samples.items():
        print(f"  {name}: {len(s)} samples, {len({x.identity for x in s})} identities, {sum(len(x.keys) for x in s)} crops")
    result["sets"] = {name: {"samples": len(s), "identities": len({x.identity for x in s}), "crops": sum(len(x.keys) for x in s)}
                      for name, s in samples.items()}
    result["failed"] = failed
    keys = sorted({k for s in samples.values() for x in s for k in x.keys})
    held_keys = sorted({k for x in samples["heldout-all"] for k in x.keys})
    images = {k: crops[k].image for k in keys}
    for how in ("black", "blur"):
        images.update({f"{k}|{how}": masked(crops[k], how) for k in held_keys})
    t0 = time.perf_counter()
    base = {spec: model_vectors(spec, keys, crops, args.cache) for spec in BASELINES}
    lite0 = Lite0Onnx(args.lite0, args.threads)
    lite = lite0_vectors(lite0, sorted(images), images, args.cache)
    print(f"vectors ready ({time.perf_counter() - t0:.0f} s); Lite0 file {args.lite0} ({lite0.size} px, SHA-256 {lite0.sha256})")
    result["lite0"] = {"file": str(args.lite0), "sha256": lite0.sha256, "input": lite0.size}
    fit_keys = sorted({k for x in samples["fit"] for k in x.keys})
    mean = np.mean(np.stack([lite[k] for k in fit_keys]), axis=0)
    result["fit_mean_crops"] = len(fit_keys)
    np.save(args.cache / "fit_mean.npy", mean)
    result["fit_mean_file"] = str(args.cache / "fit_mean.npy")
    return Run(samples, images, base, lite, mean, fit_keys)


def run_fit(run: Run, grid_ws: Sequence[float], result: dict) -> tuple[float, bool]:
    """The grid on the fitting set; (w, mean subtracted) by the rule of the module docstring."""
    fit, base, lite, mean = run.samples["fit"], run.base, run.lite, run.mean
    fit_rows, grid = [], {}
    for spec in BASELINES:
        fit_rows.append((spec, scores(fit, sample_vectors(fit, lambda k, spec=spec: base[spec][k]))))
    fit_rows.append(("lite0 alone", scores(fit, sample_vectors(fit, lite_only(lite, None)))))
    fit_rows.append(("lite0 alone -mean", scores(fit, sample_vectors(fit, lite_only(lite, mean)))))
    for use_mean in (False, True):
        for w in grid_ws:
            r = scores(fit, sample_vectors(fit, fused(base["sface"], lite, w, mean if use_mean else None)))
            grid[(w, use_mean)] = r
            fit_rows.append((variant_name(w, use_mean), r))
    w_fit, mean_fit = max(grid, key=lambda wm: (round(grid[wm]["head_auc"], 4), grid[wm]["hierarchy"] or 0.0, -wm[0]))
    print(f"\n## Fit set ({len(fit)} samples, pairs {fit_rows[0][1]['pairs']})\n")
    print(table(fit_rows))
    print(f"\nfitted: w = {w_fit:g}, mean subtracted: {mean_fit} (largest fit head AUC, then hierarchy, then smaller w)")
    result["fit"] = {name: r for name, r in fit_rows}
    result["fitted"] = {"w": w_fit, "mean_subtracted": mean_fit}
    return w_fit, mean_fit


def run_heldout(run: Run, grid_ws: Sequence[float], w_fit: float, mean_fit: bool, result: dict) -> None:
    base, lite, mean = run.base, run.lite, run.mean
    m_fit = mean if mean_fit else None
    for name in ("heldout-all", "heldout"):
        s = run.samples[name]
        rows = [(spec, scores(s, sample_vectors(s, lambda k, spec=spec: base[spec][k]))) for spec in BASELINES]
        rows.append((f"**fitted: {variant_name(w_fit, mean_fit)}**", scores(s, sample_vectors(s, fused(base["sface"], lite, w_fit, m_fit)))))
        rows.append(("lite0 alone" + (" -mean" if mean_fit else ""), scores(s, sample_vectors(s, lite_only(lite, m_fit)))))
        for use_mean in (False, True):
            for w in grid_ws:
                rows.append((variant_name(w, use_mean), scores(s, sample_vectors(s, fused(base["sface"], lite, w, mean if use_mean else None)))))
        print(f"\n## {name} ({len(s)} samples, {rows[0][1]['identities']} identities, pairs {rows[0][1]['pairs']})\n")
        print(table(rows))
        result[name] = {n: r for n, r in rows}


def run_head_only(run: Run, result: dict) -> None:
    result["head_only"] = {}
    for name in ("heldout-all", "heldout"):
        s = [x for x in run.samples[name] if len(x.keys) == 1]
        out = {}
        for label, m in (("plain", None), ("-mean", run.mean)):
            def unit(suffix: str, m=m, s=s):
                return l2_normalise(np.stack([run.lite[x.keys[0] + suffix] - (m if m is not None else 0.0) for x in s]))
            orig = unit("")
            ref = head_only(*r1_r3(orig @ orig.T, s))
            out[label] = {"both faces": ref,
                          "both faces, R3 of one collection": head_only(*r1_r3(orig @ orig.T, s, same_collection=True), reference=ref)}
            for how in ("black", "blur"):
                mk = unit(f"|{how}")
                out[label][f"one face {how}"] = head_only(*r1_r3(mk @ orig.T, s, symmetric=False), reference=ref)
                out[label][f"both faces {how}"] = head_only(*r1_r3(mk @ mk.T, s), reference=ref)
        result["head_only"][name] = out
        print(f"\n## Head-only part on {name}: Lite0 cosine alone, R1 (same person, same look) vs R3 (different people)\n")
        print("| Lite0 | condition | R1 | R3 | AUC | cos@FAR1e-2 | VR | cos@FAR1e-3 | VR | VR / FAR at the both-faces thresholds (1e-2; 1e-3) |")
        print("|" + "---|" * 10)
        for label, conds in out.items():
            for cond, r in conds.items():
                at_ref = (f"{fmt(r.get('vr_at_ref@1e-2'))} / {fmt(r.get('far_at_ref@1e-2'), 4)}; "
                          f"{fmt(r.get('vr_at_ref@1e-3'))} / {fmt(r.get('far_at_ref@1e-3'), 4)}") if "vr_at_ref@1e-2" in r else ""
                print(f"| {label} | {cond} | {r['r1']} | {r['r3']} | {fmt(r['auc'], 4)} | {fmt(r['thr@1e-2'])} | {fmt(r['vr@1e-2'])} | "
                      f"{fmt(r['thr@1e-3'])} | {fmt(r['vr@1e-3'])} | {at_ref} |")


def run_compare(run: Run, args, w_fit: float, mean_fit: bool, result: dict) -> None:
    """Another export of the same graph (e.g. float32 against float16): cosines per crop and the fitted variant's numbers."""
    other = Lite0Onnx(args.compare_lite0, args.threads)
    olite = lite0_vectors(other, sorted(run.images), run.images, args.cache)
    ks = sorted(run.images)
    a, b = np.stack([run.lite[k] for k in ks]), np.stack([olite[k] for k in ks])
    raw = (l2_normalise(a) * l2_normalise(b)).sum(1)
    cen = (l2_normalise(a - run.mean) * l2_normalise(b - run.mean)).sum(1)
    cmp = {"file": str(args.compare_lite0), "sha256": other.sha256, "crops": len(ks),
           "cosine_raw": {"min": float(raw.min()), "median": float(np.median(raw)), "mean": float(raw.mean())},
           "cosine_minus_fit_mean": {"min": float(cen.min()), "median": float(np.median(cen)), "mean": float(cen.mean())},
           "max_abs_diff": float(np.abs(a - b).max())}
    print(f"\n## {args.lite0.name} vs {args.compare_lite0.name} on {len(ks)} real head crops (incl. face-masked)\n")
    print(json.dumps(cmp, indent=1))
    omean = np.mean(np.stack([olite[k] for k in run.fit_keys]), axis=0)
    for name in ("heldout-all", "heldout"):
        s = run.samples[name]
        rows = [(f"{args.lite0.name}: {variant_name(w_fit, mean_fit)}", result[name][f"**fitted: {variant_name(w_fit, mean_fit)}**"]),
                (f"{args.compare_lite0.name}: {variant_name(w_fit, mean_fit)}",
                 scores(s, sample_vectors(s, fused(run.base["sface"], olite, w_fit, omean if mean_fit else None))))]
        print(f"\n{name}:\n")
        print(table(rows))
        cmp[name] = rows[1][1]
    result["compare"] = cmp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", type=Path, default=Path("/tmp/split"))
    parser.add_argument("--lite0", type=Path, default=DEFAULT_LITE0)
    parser.add_argument("--compare-lite0", type=Path, default=None, help="another export: cosines against --lite0 and its numbers")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/headfusion-cache"))
    parser.add_argument("--grid", type=float, nargs="+", default=list(GRID))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--fit-only", action="store_true", help="stop after the fit (no held-out numbers)")
    parser.add_argument("--speed", action="store_true", help="only measure ms per crop of --lite0 (and --compare-lite0)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    result: dict = {}
    if args.speed:
        for path in [args.lite0] + ([args.compare_lite0] if args.compare_lite0 else []):
            result[str(path)] = speed(path, args.threads, args.repeat, args.cache)
            print(json.dumps(result[str(path)], indent=1))
    else:
        run = prepare(args, result)
        w_fit, mean_fit = run_fit(run, args.grid, result)
        if not args.fit_only:
            run_heldout(run, args.grid, w_fit, mean_fit, result)
            run_head_only(run, result)
            if args.compare_lite0:
                run_compare(run, args, w_fit, mean_fit, result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
