"""Look-sensitive variants of the SFace + EfficientNet-Lite0 head vector (issue 16, after research/fit_head_fusion.py):
region pooling of Lite0 maps, a three-way fusion with the HSV histogram of `sface+hsv`, mirror averaging. Fitted on
an enlarged permissive fitting set, reported on the held-out sets with `headsearch.evaluation.verification.evaluate`.

Head score of a variant (every part a unit vector, so the fused head vector [u_S, sqrt(a) u_G, sqrt(b/R) u_1..u_R,
sqrt(c) h] has cosine s / (1 + a + b + c), the same order as)
    s = cos_SFace + a cos_G + b mean_r cos_r + c BC_hsv
  G      the ellipse mean of Lite0's final 1280-channel map (the shipped `efficientnet_lite0_head.onnx`);
  r      R regions of one Lite0 layer's map: `bands3` (top 3/7 of the crop: hair and forehead; 3/7..5/7: eyes, nose
         and the sides of the head; bottom 2/7: mouth, chin, beard) or `grid3` (3x3 thirds), each region the mean
         over its cells weighted by the share of each cell's pixels inside both the region and the head ellipse;
         optionally each region vector centred by its fitting mean before normalising;
  BC_hsv the Bhattacharyya coefficient of the `sface+hsv` head histograms (16x4x4 HSV inside the ellipse);
  mirror the Lite0 maps averaged with those of the mirrored crop (mirrored back) before pooling.
Layers (timm tf_efficientnet_lite0 at 224 on the area-resampled 256-px crop): blocks.3 (80 ch, 14x14), blocks.4 (112,
14x14), blocks.5 (192, 7x7), blocks.6 (320, 7x7), head (1280, 7x7). The Lite0 output (G and the regions) is kept at
most MAX_DIMS wide (the library stores a head vector per embedded sighting).

Fitting sets (permissive only; nothing held out, nothing of Face-Applications / dreamtalk / HDTF):
  fit-real   the fit rows of fit_head_fusion (face_recognition: 20 photos, Obama in two labelled states) and every
             labelled one-person video of video-retalking and LivePortrait (LABELS.csv) and more/LivePortrait d0, d6,
             d13 (MIT): the indexer's analysis, the labelled person's track, FRAMES_PER_VIDEO of its embedded face
             sightings spread over the track, each a sample (one look per video: same-look pairs);
  fit-looks  fit-real plus SYNTHETIC looks (research/synthetic_looks.py): per video person, drawn glasses on two
             frames, a drawn moustache/beard on two, recoloured hair on two: three more looks of that person;
  fit        (PRIMARY) fit-looks with SYNTHETIC scene randomisation: every video-derived sample's background replaced
             (OpenCV GrabCut mask, no model) by one of a shared pool of 16 backgrounds, and a photometric change
             (exposure, contrast, white balance, gamma, sometimes blur and JPEG) on every sample. Why: on fit-real and
             fit-looks, same-look pairs are frames of one clip (same scene, same light) and strangers come from other
             clips, so the scene alone separates them: there Lite0 alone (weight -> infinity) scores as well as any
             fusion and the rule runs to the grid's edge (measured on those sets, before any held-out number).
Selection rule (fixed before any held-out number was computed): over the grid (GRID_A x GRID_B x GRID_C x centring x
mirror x region part, Lite0 output <= MAX_DIMS), the largest J = hierarchy + (head VR@1e-2 + head VR@1e-3) / 2 on the
PRIMARY fitting set, ties by head AUC (4 decimals), then the smaller Lite0 output, no mirror, the smaller a + b + c.
The same rule picks the best of each family (a region part, or none) on PRIMARY, and the choice on fit-looks and
fit-real, for the held-out table (which shows what the synthetic material changes).

    python research/split_labels.py ../shared/data/LABELS.csv --more ../shared/data/more/LABELS.csv --out /tmp/split
    python research/fit_head_regions.py --split /tmp/split --fit-only            # the fit; no held-out numbers
    python research/fit_head_regions.py --split /tmp/split --json /tmp/regions.json
"""
from __future__ import annotations

import argparse
import itertools
import json
import pickle
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

SCRIPTS = Path(__file__).resolve().parent  # research/, beside it scripts/ (the exporter) and the checkout
sys.path.insert(0, str(SCRIPTS))
sys.path.insert(0, str(SCRIPTS.parent / "scripts"))
sys.path.insert(0, str(SCRIPTS.parent))

import fit_head_fusion as fhf  # noqa: E402
import synthetic_looks  # noqa: E402
from export_lite0_onnx import BAND_CUTS, n_regions, region_weights  # noqa: E402,F401 - the pooling the exporter bakes in

from headsearch.detection.crops import HeadCrop  # noqa: E402
from headsearch.models.base import l2_normalise  # noqa: E402
from schemas.records import VectorKind  # noqa: E402

FRAMES_PER_VIDEO = 4
SIZE, INPUT = 224, 256
LAYERS = {"b3": ("blocks.3", 80, 14), "b4": ("blocks.4", 112, 14), "b5": ("blocks.5", 192, 7), "b6": ("blocks.6", 320, 7),
          "head": ("head", 1280, 7)}
PARTITIONS = ("bands3", "grid3")
MAX_DIMS = 1536
GRID_A = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
GRID_B = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0)
GRID_C = (0.0, 0.1, 0.25, 0.5)
FIT_SETS = ("fit", "fit-looks", "fit-real")
PRIMARY = "fit"
REGION_PARTS = [(layer, part) for layer in ("b3", "b4", "b5", "b6", "head") for part in PARTITIONS]


# ---------------------------------------------------------------------------------------------------- regions

# ---------------------------------------------------------------------------------------------------- Lite0 maps

def lite0_maps(images: dict[str, np.ndarray], cache: Path, threads: int = 2) -> dict[str, dict[str, np.ndarray]]:
    """Per key, {layer: (C, g, g) float16} of the plain and the mirrored crop (the mirrored one flipped back), keys
    `layer` and `layer|m`. Torch + timm, float32 (the ONNX graph matches it to a cosine of 0.9999)."""
    import cv2
    import torch

    from headsearch.models.stems import efficientnet_lite0_imagenet

    store = cache / "lite0-maps.pkl"
    got = pickle.loads(store.read_bytes()) if store.is_file() else {}
    todo = [k for k in images if k not in got]
    if not todo:
        return got
    torch.set_num_threads(threads)
    net = efficientnet_lite0_imagenet()
    t0 = time.perf_counter()
    with torch.no_grad():
        for start in range(0, len(todo), 16):
            chunk = todo[start:start + 16]
            x = np.stack([cv2.resize(images[k].astype(np.float32), (SIZE, SIZE), interpolation=cv2.INTER_AREA) for k in chunk])
            x = torch.from_numpy(np.concatenate([x, x[:, :, ::-1].copy()])).permute(0, 3, 1, 2) / 127.5 - 1.0
            maps = {}
            x = net.bn1(net.conv_stem(x))
            for n, block in enumerate(net.blocks):
                x = block(x)
                if f"blocks.{n}" in {v[0] for v in LAYERS.values()}:
                    maps[f"blocks.{n}"] = x
            maps["head"] = net.bn2(net.conv_head(x))
            for i, k in enumerate(chunk):
                got[k] = {}
                for name, (layer, _, _) in LAYERS.items():
                    m = maps[layer]
                    got[k][name] = m[i].numpy().astype(np.float16)
                    got[k][name + "|m"] = m[len(chunk) + i].flip(-1).numpy().astype(np.float16)
            print(f"  lite0 maps {start + len(chunk)}/{len(todo)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    store.write_bytes(pickle.dumps(got))
    return got


def pooled(maps: dict, keys: list[str], layer: str, partition: str, mirror: bool) -> np.ndarray:
    """(N, R, C) region means of `layer` (mirror: of the mean of the plain and mirrored maps)."""
    _, _, grid = LAYERS[layer]
    w = region_weights(partition, grid)
    out = []
    for k in keys:
        m = maps[k][layer].astype(np.float32)
        if mirror:
            m = 0.5 * (m + maps[k][layer + "|m"].astype(np.float32))
        out.append(np.einsum("cyx,ryx->rc", m, w))
    return np.stack(out)


# ---------------------------------------------------------------------------------------------------- data

@dataclass
class Item:
    """One sample: a single crop (key), its identity and look label; `synthetic` names a drawn look change."""

    key: str
    identity: str
    state: str | None
    source: str
    synthetic: str | None = None


BACKGROUNDS = 16  # size of the shared pool of replacement backgrounds (strangers share some, as in one studio)


def build_sets(split: Path, cache: Path, seed: int = 0) -> tuple[dict[str, list[Item]], dict[str, HeadCrop], list[str]]:
    """The held-out sets and three fitting sets: `fit-real` (photos and video frames), `fit-looks` (plus the
    synthetic looks) and `fit` (the same samples, every video-derived one with its background replaced by one of a
    shared pool and a photometric change, every photo with a photometric change: scene randomisation)."""
    from headsearch.evaluation.labels import read_label_set

    sets = fhf.load_sets(split)
    more_lp = [f for f in read_label_set(split / "more-train.csv").files if fhf.collection(f.path) == "more/LivePortrait"]
    sets["fit"] = sets["fit"] + more_lp
    crops, samples, failed = fhf.collect_crops(sets, cache)
    out: dict[str, list[Item]] = {}
    for name, ss in samples.items():
        items = []
        for s in ss:
            if len(s.keys) == 1 and "#" not in s.keys[0]:
                items.append(Item(s.keys[0], s.identity, s.state, fhf.collection(s.path)))
                continue
            if name != "fit":
                raise SystemExit(f"{name}: video sample {s.path} (held-out sets are photos here)")
            picks = sorted({int(round(x)) for x in np.linspace(0, len(s.keys) - 1, min(FRAMES_PER_VIDEO, len(s.keys)))})
            items += [Item(s.keys[p], s.identity, s.state, fhf.collection(s.path)) for p in picks]
        out[name] = items
    real = out.pop("fit")
    out["fit-real"] = real
    # synthetic looks: per video person, glasses on frames 0 and 2, moustache/beard on 1 and 3, hair colour on 0 and 3
    rng = np.random.default_rng(seed)
    by_id: dict[str, list[Item]] = {}
    for it in real:
        if "#" in it.key:
            by_id.setdefault(it.identity, []).append(it)
    looks = []
    for identity, frames in sorted(by_id.items()):
        if len(frames) < 4:
            continue
        for kind, idx in {"glasses": (0, 2), "beard": (1, 3), "hair": (0, 3)}.items():
            if kind == "glasses" and frames[0].state and "glasses" in frames[0].state:
                continue  # already wears glasses (lp_d13_man)
            for i in idx:
                base = frames[i]
                crop = crops[base.key]
                key = f"{base.key}|synth-{kind}"
                crops[key] = HeadCrop(synthetic_looks.make(crop, kind, rng), crop.face_box, crop.landmarks, True)
                looks.append(Item(key, identity, f"{base.state or 'video'}+synth_{kind}", base.source, kind))
    out["fit-looks"] = real + looks
    # scene randomisation
    rng = np.random.default_rng(seed + 1)
    donors = [crops[it.key].image for it in real if "#" in it.key]
    pool = [synthetic_looks.background(n % 4, INPUT, rng, donors[int(rng.integers(len(donors)))]) for n in range(BACKGROUNDS)]
    masks: dict[str, np.ndarray] = {}
    randomised = []
    for it in out["fit-looks"]:
        base_key = it.key.split("|")[0]
        video = "#" in base_key
        if video and base_key not in masks:
            masks[base_key] = synthetic_looks.foreground_mask(crops[base_key])
        crop = crops[it.key]
        bg = pool[int(rng.integers(BACKGROUNDS))] if video else None
        key = f"{it.key}|scene"
        crops[key] = HeadCrop(synthetic_looks.randomise(crop.image, masks.get(base_key), bg, rng) if video else
                              synthetic_looks.photometric(crop.image, rng), crop.face_box, crop.landmarks, True)
        randomised.append(Item(key, it.identity, it.state, it.source, (it.synthetic or "") + "+scene"))
    out["fit"] = randomised
    return out, crops, failed


# ---------------------------------------------------------------------------------------------------- variants

@dataclass(frozen=True)
class Variant:
    a: float  # weight of G (head-layer ellipse mean, 1280)
    b: float  # weight of the region part
    c: float  # weight of the HSV histogram's BC
    layer: str | None = None  # region part: layer and partition
    partition: str | None = None
    centre: bool = False  # region vectors centred by their fitting mean
    mirror: bool = False

    @property
    def lite_dims(self) -> int:
        d = LAYERS["head"][1] if self.a > 0 else 0
        if self.b > 0:
            d += LAYERS[self.layer][1] * n_regions(self.partition)
        return d

    def name(self) -> str:
        parts = ["sface"]
        if self.a:
            parts.append(f"{self.a:g}*G")
        if self.b:
            parts.append(f"{self.b:g}*{self.layer}-{self.partition}{'(c)' if self.centre else ''}")
        if self.c:
            parts.append(f"{self.c:g}*hsv")
        return " + ".join(parts) + (" [mirror]" if self.mirror else "") + f" ({self.lite_dims} d)"


class Parts:
    """Unit vectors of every part for a list of items: SFace, G, each region part (plain / centred, mirror or not),
    HSV. Built lazily and cached by (part, options)."""

    def __init__(self, items: list[Item], sface: dict, maps: dict, images: dict, fit_means: dict):
        self.items, self.sface, self.maps, self.images, self.fit_means = items, sface, maps, images, fit_means
        self.keys = [it.key for it in items]
        self._cache: dict = {}

    def sface_u(self) -> np.ndarray:
        return l2_normalise(np.stack([self.sface[k][VectorKind.ID] for k in self.keys]))

    def hsv(self) -> np.ndarray:
        if "hsv" not in self._cache:
            from headsearch.models.sface_hsv import hsv_vector
            self._cache["hsv"] = np.stack([hsv_vector(self.images[k]) for k in self.keys])
        return self._cache["hsv"]

    def regions(self, layer: str, partition: str, centre: bool, mirror: bool) -> np.ndarray:
        """(N, R, C) unit region vectors."""
        key = (layer, partition, centre, mirror)
        if key not in self._cache:
            p = pooled(self.maps, self.keys, layer, partition, mirror)
            if centre:
                p = p - self.fit_means[(layer, partition, mirror)][None]
            self._cache[key] = p / np.maximum(np.linalg.norm(p, axis=2, keepdims=True), 1e-12)
        return self._cache[key]

    def g(self, mirror: bool) -> np.ndarray:
        return self.regions("head", "ellipse", False, mirror)[:, 0]

    def cosines(self, name: str, *args) -> np.ndarray:
        """(N, N) cosine matrix of a part (regions: the mean over regions)."""
        key = ("cos", name, *args)
        if key not in self._cache:
            if name == "sface":
                u = self.sface_u()
                self._cache[key] = u @ u.T
            elif name == "hsv":
                h = self.hsv()
                self._cache[key] = h @ h.T
            elif name == "G":
                u = self.g(*args)
                self._cache[key] = u @ u.T
            else:
                r = self.regions(*args)
                self._cache[key] = np.einsum("irc,jrc->ij", r, r) / r.shape[1]
        return self._cache[key]

    def similarity(self, v: Variant) -> np.ndarray:
        s = self.cosines("sface").copy()
        if v.a:
            s += v.a * self.cosines("G", v.mirror)
        if v.b:
            s += v.b * self.cosines("regions", v.layer, v.partition, v.centre, v.mirror)
        if v.c:
            s += v.c * self.cosines("hsv")
        return s / (1.0 + v.a + v.b + v.c)

    def head_vectors(self, v: Variant) -> np.ndarray:
        """The fused head vectors themselves (what a library would store), for `evaluate`."""
        cols = [self.sface_u()]
        if v.a:
            cols.append(np.sqrt(v.a) * self.g(v.mirror))
        if v.b:
            r = self.regions(v.layer, v.partition, v.centre, v.mirror)
            cols.append(np.sqrt(v.b / r.shape[1]) * r.reshape(len(r), -1))
        if v.c:
            cols.append(np.sqrt(v.c) * self.hsv())
        return np.concatenate(cols, axis=1).astype(np.float32)


def fast_scores(sim: np.ndarray, rel: tuple, identities, states) -> dict:
    """head VR@1e-2 / 1e-3, head AUC, hierarchy from a similarity matrix (the same functions `evaluate` uses)."""
    from headsearch.evaluation.metrics import evaluate_protocol, hierarchy_accuracy

    i, j, relation = rel
    p = evaluate_protocol(sim, i, j, relation, "head", fhf.FARS)
    vr2, vr3 = p.vr["1e-2"], p.vr["1e-3"]
    h, _ = hierarchy_accuracy(sim, identities, states)
    return {"head_vr@1e-2": vr2.vr if vr2.measurable else None, "head_vr@1e-3": vr3.vr if vr3.measurable else None,
            "head_auc": p.auc, "hierarchy": h}


def objective(r: dict) -> float:
    vrs = [r["head_vr@1e-2"] or 0.0, r["head_vr@1e-3"] or 0.0]
    return (r["hierarchy"] or 0.0) + sum(vrs) / 2


def rank_key(v: Variant, r: dict) -> tuple:
    return (round(objective(r), 6), round(r["head_auc"], 4), -v.lite_dims, not v.mirror, -(v.a + v.b + v.c))


def grid(max_dims: int = MAX_DIMS) -> list[Variant]:
    out = set()
    for a, c, mirror in itertools.product(GRID_A, GRID_C, (False, True)):
        out.add(Variant(a, 0.0, c, mirror=mirror if a else False))
        for (layer, part), b, centre in itertools.product(REGION_PARTS, [b for b in GRID_B if b], (False, True)):
            out.add(Variant(a, b, c, layer, part, centre, mirror))
    return sorted((v for v in out if v.lite_dims <= max_dims), key=lambda v: v.name())


def family(v: Variant) -> str:
    if v.b:
        return f"regions {v.layer}-{v.partition}" + (" +G" if v.a else "")
    return {(True, False): "sface+lite0 (G)", (True, True): "three-way (G + hsv)", (False, True): "sface+hsv (refit)",
            (False, False): "sface"}[(bool(v.a), bool(v.c))]


# ---------------------------------------------------------------------------------------------------- main

@dataclass
class Context:
    """The samples of every set, their crops and images, SFace vectors, Lite0 maps and each fitting set's means."""

    sets: dict
    crops: dict
    images: dict
    sface: dict
    maps: dict
    means: dict
    cache: Path

    def parts_of(self, name: str, fit_set: str) -> tuple[Parts, tuple, list, list]:
        from headsearch.evaluation.metrics import pair_relations

        items = self.sets[name]
        ids, sts = [it.identity for it in items], [it.state for it in items]
        return Parts(items, self.sface, self.maps, self.images, self.means[fit_set]), pair_relations(ids, sts), ids, sts


def prepare(args, result: dict) -> Context:
    from headsearch.evaluation.metrics import relation_counts

    sets, crops, failed = build_sets(args.split, args.cache)
    for line in failed:
        print(f"  no sample: {line}")
    for name, items in sets.items():
        rc = relation_counts([it.identity for it in items], [it.state for it in items])
        print(f"  {name}: {len(items)} samples, {len({it.identity for it in items})} identities, pairs {rc}, "
              f"synthetic {sum(1 for it in items if it.synthetic)}")
        result.setdefault("sets", {})[name] = {"samples": len(items), "identities": len({it.identity for it in items}), "pairs": rc}
    keys = sorted({it.key for items in sets.values() for it in items})
    images = {k: crops[k].image for k in keys}
    t0 = time.perf_counter()
    sface = fhf.model_vectors("sface", keys, crops, args.cache)
    maps = lite0_maps(images, args.cache, args.threads)
    print(f"vectors and maps ready ({time.perf_counter() - t0:.0f} s)", flush=True)

    def means_of(fit_set: str) -> dict:
        fit_keys = [it.key for it in sets[fit_set]]
        return {(layer, part, mirror): pooled(maps, fit_keys, layer, part, mirror).mean(axis=0)
                for layer, part in [*REGION_PARTS, ("head", "ellipse")] for mirror in (False, True)}

    return Context(sets, crops, images, sface, maps, {f: means_of(f) for f in FIT_SETS}, args.cache)



def run_fit(ctx: Context, args, result: dict) -> dict[str, tuple[Variant, str]]:
    """The rule on each fitting set; PRIMARY's choice is the recommendation, the others show what the synthetic
    material changes. Returns label -> (variant, fitting set whose means it uses)."""
    sets, parts_of = ctx.sets, ctx.parts_of
    variants = grid(args.max_dims)
    chosen: dict[str, tuple[Variant, str]] = {}
    result["fit"] = {}
    for fit_set in FIT_SETS:
        fit_parts, rel, ids, sts = parts_of(fit_set, fit_set)
        t0 = time.perf_counter()
        fit_scores = {v: fast_scores(fit_parts.similarity(v), rel, ids, sts) for v in variants}
        print(f"\ngrid: {len(variants)} variants on {fit_set} ({time.perf_counter() - t0:.0f} s)")
        best = max(variants, key=lambda v: rank_key(v, fit_scores[v]))
        rows = {f"chosen on {fit_set}": best}
        if fit_set == PRIMARY:
            fams: dict[str, Variant] = {}
            for v in variants:
                f = family(v)
                if f not in fams or rank_key(v, fit_scores[v]) > rank_key(fams[f], fit_scores[fams[f]]):
                    fams[f] = v
            rows["shipped (w=0.75)"] = Variant(0.75, 0.0, 0.0)
            rows.update({f"best {f} on {fit_set}": v for f, v in sorted(fams.items())})
            for extra in args.also:
                v = Variant(**json.loads(extra))
                rows[f"extra {v.name()}"] = v
        for v in rows.values():
            fit_scores.setdefault(v, fast_scores(fit_parts.similarity(v), rel, ids, sts))
        print(f"\n## {fit_set}: pairs {result['sets'][fit_set]['pairs']}\n")
        print("| | variant | J | head VR@1e-2 | head VR@1e-3 | head AUC | hierarchy |\n|---|---|---|---|---|---|---|")
        for label, v in rows.items():
            r = fit_scores[v]
            print(f"| {label} | {v.name()} | {objective(r):.3f} | {fhf.fmt(r['head_vr@1e-2'])} | {fhf.fmt(r['head_vr@1e-3'])} | "
                  f"{fhf.fmt(r['head_auc'], 4)} | {fhf.fmt(r['hierarchy'])} |")
        top = sorted(variants, key=lambda v: rank_key(v, fit_scores[v]), reverse=True)[:12]
        print(f"\ntop 12 of the grid on {fit_set}:")
        for v in top:
            print(f"  J {objective(fit_scores[v]):.3f}  AUC {fit_scores[v]['head_auc']:.4f}  {v.name()}")
        edge = [n for n, x, g in (("a", best.a, GRID_A), ("b", best.b, GRID_B), ("c", best.c, GRID_C)) if x and x == max(g)]
        if edge:
            print(f"  note: the chosen {', '.join(edge)} lies on the grid's edge")
        check = fhf.scores(sets[fit_set], {VectorKind.ID: fit_parts.sface_u(), VectorKind.HEAD: fit_parts.head_vectors(best)})
        print("  chosen, by evaluate on its vectors: " +
              json.dumps({k: round(check[k], 4) for k in ("head_vr@1e-2", "head_vr@1e-3", "head_auc", "hierarchy")}))
        result["fit"][fit_set] = {label: {"variant": asdict(v), "name": v.name(), **fit_scores[v]} for label, v in rows.items()}
        result["fit"][fit_set]["top12"] = [{"variant": asdict(v), "name": v.name(), **fit_scores[v]} for v in top]
        chosen.update({label: (v, fit_set) for label, v in rows.items()})
    result["chosen"] = {"variant": asdict(chosen[f"chosen on {PRIMARY}"][0]), "name": chosen[f"chosen on {PRIMARY}"][0].name()}

    return chosen


def fhf_cos(v: np.ndarray) -> np.ndarray:
    u = l2_normalise(v)
    return u @ u.T


def bootstrap_vr(sims: dict[str, np.ndarray], items: list[Item], rel: tuple, pairs: list[tuple[str, str]], n: int = 1000,
                 seed: int = 0) -> dict:
    """Paired bootstrap over identities (resampled with replacement; a drawn identity brings all its photos, pairs
    weighted by how often their identities were drawn) of the head VR@1e-2 / 1e-3 difference of each (A, B) pair of
    systems: median and the 5th / 95th percentiles, the share of draws where A > B, and how many draws could measure it."""
    from headsearch.evaluation.metrics import R1, vr_at_far

    i, j, relation = rel
    names = sorted({it.identity for it in items})
    index = {name: k for k, name in enumerate(names)}
    ii = np.array([index[items[x].identity] for x in i])
    jj = np.array([index[items[x].identity] for x in j])
    rng = np.random.default_rng(seed)
    out = {f"{a} - {b}": {far: [] for far in fhf.FARS} for a, b in pairs}
    for _ in range(n):
        count = np.bincount(rng.integers(len(names), size=len(names)), minlength=len(names))
        w = np.where(ii == jj, count[ii], count[ii] * count[jj])
        for a, b in pairs:
            for far in fhf.FARS:
                vr = []
                for name in (a, b):
                    sc = np.repeat(sims[name][i, j], w)
                    rel_w = np.repeat(relation, w)
                    vr.append(vr_at_far(sc[rel_w == R1], sc[rel_w != R1], far).vr)
                if None not in vr:  # a draw with fewer than 1/far impostor pairs is left out
                    out[f"{a} - {b}"][far].append(vr[0] - vr[1])
    return {key: {f"vr@{far:g}": {"median": float(np.median(d)), "p5": float(np.percentile(d, 5)), "p95": float(np.percentile(d, 95)),
                                  "share_a_better": float(np.mean(np.array(d) > 0)), "draws": len(d)} for far, d in by_far.items()}
            for key, by_far in out.items()}


def onnx_rows(ctx: Context, specs: list[str], names: tuple[str, ...], threads: int) -> dict[str, list[tuple[str, dict]]]:
    """Rows for exported graphs: FILE:W means head = [u_SFace, sqrt(W) * unit(graph output)] (for a region graph,
    whose output is R unit vectors, the Lite0 cosine is the mean region cosine, as in `Variant`)."""
    out: dict[str, list[tuple[str, dict]]] = {n: [] for n in names}
    for spec in specs:
        path, _, w = spec.rpartition(":")
        lite = fhf.Lite0Onnx(Path(path), threads)
        keys = sorted({it.key for n in names for it in ctx.sets[n]})
        feats = fhf.lite0_vectors(lite, keys, ctx.images, ctx.cache)
        for n in names:
            items = ctx.sets[n]
            u = l2_normalise(np.stack([feats[it.key] for it in items]))
            s_u = l2_normalise(np.stack([ctx.sface[it.key][VectorKind.ID] for it in items]))
            head = np.concatenate([s_u, np.sqrt(float(w)) * u], axis=1)
            out[n].append((f"ONNX {Path(path).name} (SHA-256 {lite.sha256[:12]}), w {float(w):g}", fhf.scores(items, {VectorKind.ID: s_u, VectorKind.HEAD: head})))
    return out


def run_heldout(ctx: Context, chosen: dict[str, tuple[Variant, str]], result: dict, extra_rows: dict | None = None) -> None:
    sets, crops, parts_of, cache = ctx.sets, ctx.crops, ctx.parts_of, ctx.cache
    from headsearch.evaluation.metrics import R1, R2, roc_auc
    for name in ("heldout-all", "heldout"):
        items = sets[name]
        rows = []
        for spec in fhf.BASELINES:
            vec = fhf.model_vectors(spec, [it.key for it in items], crops, cache)
            vs = {kind: np.stack([vec[it.key][kind] for it in items]) for kind in vec[items[0].key]}
            rows.append((spec, fhf.scores(items, vs)))
        sims = {}
        for label, (v, fit_set) in chosen.items():
            parts, rel_h, _, _ = parts_of(name, fit_set)
            r = fhf.scores(items, {VectorKind.ID: parts.sface_u(), VectorKind.HEAD: parts.head_vectors(v)})
            rows.append((f"{label}: {v.name()}", r))
            sims[f"{label}: {v.name()}"] = parts.similarity(v)
        rows += (extra_rows or {}).get(name, [])
        print(f"\n## {name} ({len(items)} samples, pairs {rows[0][1]['pairs']})\n")
        print(fhf.table(rows))
        result[name] = {n: r for n, r in rows}
        # same look vs other look of the same person (R1 vs R2 alone)
        i, j, relation = rel_h
        for spec in ("sface", "sface+hsv"):
            vec = fhf.model_vectors(spec, [it.key for it in items], crops, cache)
            h = l2_normalise(np.stack([vec[it.key][VectorKind.HEAD if spec != "sface" else VectorKind.ID] for it in items]))
            sims[spec] = h @ h.T
        sep = {}
        for label, sim in sims.items():
            sc = sim[i, j]
            sep[label] = roc_auc(sc[relation == R1], sc[relation == R2]) if (relation == R2).any() else None
        print("\nR1 vs R2 alone (AUC: same look above other look, same person):")
        for label, x in sep.items():
            print(f"  {fhf.fmt(x, 4)}  {label}")
        result[name]["r1_vs_r2_auc"] = sep
        if name == "heldout-all":
            for spec in ("dlib-resnet",):
                vec = fhf.model_vectors(spec, [it.key for it in items], crops, cache)
                sims[spec] = fhf_cos(np.stack([vec[it.key][VectorKind.ID] for it in items]))
            pick, ship = chosen[f"chosen on {PRIMARY}"][0], chosen["shipped (w=0.75)"][0]
            a, b = f"chosen on {PRIMARY}: {pick.name()}", f"shipped (w=0.75): {ship.name()}"
            boot = bootstrap_vr(sims, items, rel_h, [(a, "sface"), (a, "sface+hsv"), (a, "dlib-resnet"), (a, b)])
            print("\npaired bootstrap over identities (1000 draws), head VR difference: median [5%, 95%], share of draws A > B (measurable draws)")
            for key, by_far in boot.items():
                print("  " + key + ": " + "; ".join(f"{f} {x['median']:+.3f} [{x['p5']:+.3f}, {x['p95']:+.3f}] {x['share_a_better']:.2f} ({x['draws']})"
                                                    for f, x in by_far.items()))
            result[name]["bootstrap"] = boot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", type=Path, default=Path("/tmp/split"))
    parser.add_argument("--cache", type=Path, default=Path("/tmp/headregions-cache"))
    parser.add_argument("--fit-only", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--max-dims", type=int, default=MAX_DIMS, help="widest Lite0 output in the grid (information runs only)")
    parser.add_argument("--save-means", type=Path, default=None,
                        help=".npy: the chosen variant's region means (R, C) of the primary fitting set, for export_lite0_onnx.py --region-means")
    parser.add_argument("--onnx", nargs="*", default=[], help="exported graphs to score too, as FILE:W (head = [u_SFace, sqrt(W) unit(output)])")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--also", nargs="*", default=[], help="extra variants to report, as JSON Variant dicts")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    result: dict = {"primary_fit_set": PRIMARY}
    ctx = prepare(args, result)
    chosen = run_fit(ctx, args, result)
    if args.save_means:
        v = chosen[f"chosen on {PRIMARY}"][0]
        if not (v.b and v.centre):
            raise SystemExit(f"the chosen variant {v.name()} has no centred regions")
        np.save(args.save_means, ctx.means[PRIMARY][(v.layer, v.partition, v.mirror)].astype(np.float32))
        print(f"wrote {args.save_means} (means of {v.layer} {v.partition}{' mirror' if v.mirror else ''} over {PRIMARY})")
    extra = onnx_rows(ctx, args.onnx, (PRIMARY, "heldout-all", "heldout"), args.threads) if args.onnx else {}
    if extra:
        print(f"\n## exported graphs on {PRIMARY}\n")
        print(fhf.table(extra[PRIMARY]))
        result["onnx_fit"] = {n: r for n, r in extra[PRIMARY]}
    if not args.fit_only:
        run_heldout(ctx, chosen, result, extra)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
