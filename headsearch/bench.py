"""Benchmarks that need no indexer: labelled sets, verification reports, calibration, search speed.

Accuracy: a labelled set (CSV ``path,identity[,appearance_state]``) becomes one sample per usable
file; all pairs of samples are scored by cosine similarity and evaluated with ``headsearch.metrics``
on two protocols (head similarity: R1 vs R2+R3; identity verification: R1+R2 vs R3) plus the
hierarchy accuracy. Videos are turned into samples by the indexer (``indexer.speed``), photos here.

Search speed: synthetic, seeded, clustered unit vectors searched with an exact FAISS index
(IndexFlatIP) and an approximate one (IndexIVFFlat), measured against exact float64 search.
"""
from __future__ import annotations

import csv
import math
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from headsearch.crops import HeadCrop
from headsearch.detect import FaceDetector
from headsearch.embedders import Embedder, l2_normalise
from headsearch.errors import HeadsearchError
from headsearch.files import write_json_atomic
from headsearch.metrics import (
    DEFAULT_FARS,
    PROTOCOLS,
    R1,
    R2,
    R3,
    ProtocolReport,
    _far_key,
    evaluate_protocol,
    hierarchy_accuracy,
    pair_relations,
    protocol_scores,
    roc_points,
    vr_at_far,
)
from headsearch.settings import VIDEO_EXTENSIONS
from headsearch.vector_index import NPROBE, build_ivf, ivf_nlist

Report = Callable[[str], None]

PROTOCOL_TITLES = {"head": "head similarity (R1 vs R2+R3)", "identity": "identity verification (R1+R2 vs R3)"}
THRESHOLDS_FILE = "thresholds.json"

# ----------------------------------------------------------------------------------------------
# Labelled sets

# Identity labels made of these words name several people or nobody in particular (LABELS.csv:
# bbt_cast_group, friends_cast_6, crowd_unknown, goldeneye_actors, none_clear, "audience").
MULTI_PERSON_WORDS = frozenset({"group", "crowd", "unknown", "audience", "cast", "actors", "people", "none"})
# A note saying the file shows several faces: "2 faces", "group photo, 2-7 faces", "many small faces".
_SEVERAL_FACES = re.compile(r"\b(?:([2-9]|\d{2,})(?:\s*-\s*\d+)?|many)\b[^,;]*?\bfaces\b", re.IGNORECASE)


@dataclass(frozen=True)
class LabeledFile:
    """One usable row of a labelled set."""

    path: Path
    identity: str
    state: str | None
    line: int

    @property
    def kind(self) -> str:
        return "video" if self.path.suffix.lower() in VIDEO_EXTENSIONS else "image"


@dataclass
class LabelSet:
    """The usable rows of a labelled set, and why the others were left out."""

    csv_path: Path
    rows: int
    files: list[LabeledFile]
    skipped: Counter = field(default_factory=Counter)  # reason -> rows

    def skipped_line(self) -> str | None:
        """One line counting the rows that do not name one person (None when all were usable)."""
        if not self.skipped:
            return None
        parts = ", ".join(f"{n} {reason}" for reason, n in self.skipped.most_common())
        return f"{self.csv_path}: skipped {sum(self.skipped.values())} of {self.rows} rows that do not name one person ({parts})"

    def to_dict(self) -> dict:
        return {"csv": str(self.csv_path), "rows": self.rows, "usable": len(self.files),
                "photos": sum(f.kind == "image" for f in self.files), "videos": sum(f.kind == "video" for f in self.files),
                "identities": len({f.identity for f in self.files}), "skipped": dict(self.skipped)}


def row_skip_reason(identity: str, note: str = "") -> str | None:
    """Why a row cannot be used as one person's sample, or None when it names exactly one identity."""
    identity = identity.strip()
    if not identity:
        return "without identity"
    if ";" in identity:
        return "with several identities"
    words = set(re.split(r"[^a-z0-9]+", identity.lower()))
    if words & MULTI_PERSON_WORDS or _SEVERAL_FACES.search(note or ""):
        return "group/crowd/unknown"
    return None


def read_label_set(csv_path: Path, root: Path | None = None) -> LabelSet:
    """Usable rows of a labelled CSV.

    Relative paths are resolved against ``root`` (default: the CSV's folder), under the row's
    ``source`` folder when the CSV has a ``source`` column (the layout of shared/data/LABELS.csv).
    """
    csv_path = Path(csv_path)
    try:
        text = csv_path.read_text(encoding="utf-8-sig")
    except OSError as e:
        raise HeadsearchError(f"{csv_path}: cannot read the labelled set ({e.strerror or e})") from e
    reader = csv.DictReader(text.splitlines())
    columns = {c.strip().lower(): c for c in (reader.fieldnames or []) if c}
    missing = [c for c in ("path", "identity") if c not in columns]
    if missing:
        raise HeadsearchError(f"{csv_path}: not a labelled set (columns path,identity[,appearance_state] expected; "
                              f"missing {', '.join(missing)})")
    base = Path(root).expanduser() if root is not None else csv_path.parent
    get = lambda row, name: (row.get(columns[name]) or "").strip() if name in columns else ""  # noqa: E731
    files, skipped, rows = [], Counter(), 0
    for row in reader:
        rel = get(row, "path")
        if not rel and not get(row, "identity"):
            continue  # blank line
        rows += 1
        reason = row_skip_reason(get(row, "identity"), get(row, "note"))
        if reason is None and not rel:
            reason = "without path"
        if reason is not None:
            skipped[reason] += 1
            continue
        path = Path(rel).expanduser()
        if not path.is_absolute():
            source = get(row, "source")
            path = (base / source / path) if source else (base / path)
        state = get(row, "appearance_state") or None
        files.append(LabeledFile(path, get(row, "identity"), state, reader.line_num))
    return LabelSet(csv_path, rows, files, skipped)


# ----------------------------------------------------------------------------------------------
# Samples


@dataclass
class Sample:
    """One labelled vector set: a photo's largest head, or a video's labelled head track."""

    path: Path
    identity: str
    state: str | None
    vectors: dict[str, np.ndarray]  # kind -> (dim,) unit vector
    source: str = "photo"  # "photo" or "video track"


def model_key(embedder: Embedder) -> tuple[str, str]:
    """What identifies a model's vectors (two specs loading the same weights share it)."""
    return (embedder.name, embedder.version)


@dataclass
class BenchCache:
    """In-memory caches of one benchmark run: head crops per photo, vectors per (model, file)."""

    crops: dict[tuple[Path, bool], HeadCrop | HeadsearchError] = field(default_factory=dict)
    vectors: dict[tuple[tuple[str, str], Path], dict[str, np.ndarray] | HeadsearchError] = field(default_factory=dict)


def photo_crop(path: Path, detector: FaceDetector, whole_image: bool, cache: BenchCache) -> HeadCrop:
    """The largest head of a photo (or the whole photo), cached; raises HeadsearchError."""
    from headsearch.query import query_crops

    key = (path, whole_image)
    if key not in cache.crops:
        try:
            cache.crops[key] = query_crops(path, detector, all_heads=False, whole_image=whole_image)[0]
        except HeadsearchError as e:
            cache.crops[key] = e
    hit = cache.crops[key]
    if isinstance(hit, HeadsearchError):
        raise hit
    return hit


def embed_photos(files: Sequence[LabeledFile], embedder: Embedder, detector: FaceDetector, whole_image: bool,
                 cache: BenchCache, report: Report, batch: int = 32) -> tuple[list[Sample], list[str]]:
    """Samples of labelled photos (largest head each); problems reported one line per file."""
    key = model_key(embedder)
    samples: list[Sample | None] = [None] * len(files)
    failed: list[str] = []
    todo: list[tuple[int, HeadCrop]] = []

    def flush():
        if not todo:
            return
        vectors = embedder.embed([c for _, c in todo])
        for row, (i, _) in enumerate(todo):
            v = {kind: np.asarray(vs[row], np.float32) for kind, vs in vectors.items()}
            cache.vectors[(key, files[i].path)] = v
            samples[i] = Sample(files[i].path, files[i].identity, files[i].state, v, "photo")
        todo.clear()

    for i, f in enumerate(files):
        hit = cache.vectors.get((key, f.path))
        if isinstance(hit, dict):
            samples[i] = Sample(f.path, f.identity, f.state, hit, "photo")
            continue
        try:
            todo.append((i, photo_crop(f.path, detector, whole_image, cache)))
        except HeadsearchError as e:
            failed.append(str(e))
            report(f"warning: {e}; skipped")
            continue
        if len(todo) >= batch:
            flush()
    flush()
    return [s for s in samples if s is not None], failed


def mean_vector(vectors: Iterable[np.ndarray]) -> np.ndarray:
    """The renormalised mean of unit vectors."""
    return l2_normalise(np.mean(np.stack(list(vectors)).astype(np.float32), axis=0, keepdims=True))[0]


# ----------------------------------------------------------------------------------------------
# Accuracy reports


@dataclass
class ModelReport:
    """Verification results of one model on one labelled set."""

    spec: str
    model: dict | None = None
    error: str | None = None
    n_samples: int = 0
    n_photos: int = 0
    n_tracks: int = 0
    n_identities: int = 0
    pairs: dict[str, int] = field(default_factory=dict)
    head_kind: str = "id"  # vectors used for the head protocol and the hierarchy
    protocols: dict[str, ProtocolReport] = field(default_factory=dict)
    hierarchy: float | None = None
    quadruples: int = 0
    problems: list[str] = field(default_factory=list)  # what cannot be measured, one line each
    failed: list[str] = field(default_factory=list)  # files that gave no sample
    scores: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)  # protocol -> (genuine, impostor)

    @property
    def measured(self) -> bool:
        """Whether anything at all was computed (an AUC of some protocol)."""
        return any(p.auc is not None for p in self.protocols.values())

    def to_dict(self) -> dict:
        protocols = {}
        for name, p in self.protocols.items():
            d = p.to_dict()
            d["vectors"] = self.head_kind if name == "head" else "id"
            protocols[name] = d
        return {"spec": self.spec, "model": self.model, "error": self.error, "samples": self.n_samples,
                "photos": self.n_photos, "video_tracks": self.n_tracks, "identities": self.n_identities,
                "pairs": dict(self.pairs), "protocols": protocols,
                "hierarchy": {"accuracy": self.hierarchy, "quadruples": self.quadruples, "vectors": self.head_kind},
                "problems": list(self.problems), "failed_files": list(self.failed)}


def similarity_matrix(vectors: np.ndarray) -> np.ndarray:
    """Cosine similarities of unit row vectors (float64)."""
    v = np.asarray(vectors, dtype=np.float64)
    return v @ v.T


def evaluate_samples(report: ModelReport, samples: Sequence[Sample], fars: Sequence[float] = DEFAULT_FARS) -> ModelReport:
    """Fill `report` with both protocols, pair counts and hierarchy accuracy of these samples."""
    report.n_samples = len(samples)
    report.n_photos = sum(s.source == "photo" for s in samples)
    report.n_tracks = report.n_samples - report.n_photos
    report.n_identities = len({s.identity for s in samples})
    if len(samples) < 2:
        report.problems.append(f"only {len(samples)} usable sample(s): no pairs to score")
        report.pairs = {"R1": 0, "R2": 0, "R3": 0}
        return report
    identities, states = [s.identity for s in samples], [s.state for s in samples]
    i, j, relation = pair_relations(identities, states)
    report.pairs = {"R1": int(np.sum(relation == R1)), "R2": int(np.sum(relation == R2)), "R3": int(np.sum(relation == R3))}
    report.head_kind = "head" if all("head" in s.vectors for s in samples) else "id"
    sims = {"id": similarity_matrix(np.stack([s.vectors["id"] for s in samples]))}
    if report.head_kind == "head":
        sims["head"] = similarity_matrix(np.stack([s.vectors["head"] for s in samples]))
    for protocol in PROTOCOLS:
        sim = sims[report.head_kind if protocol == "head" else "id"]
        report.protocols[protocol] = evaluate_protocol(sim, i, j, relation, protocol, fars)
        report.scores[protocol] = protocol_scores(sim, i, j, relation, protocol)
    if report.pairs["R3"] == 0:
        report.problems.append("identity verification: no impostor pairs (R3): the set names a single identity; "
                               "add samples of other people")
    if report.pairs["R1"] + report.pairs["R2"] == 0:
        report.problems.append("identity verification: no genuine pairs (every identity has one sample)")
    if report.pairs["R1"] == 0:
        report.problems.append("head similarity: no genuine pairs (R1: two samples of one identity in one state)")
    if report.pairs["R2"] + report.pairs["R3"] == 0:
        report.problems.append("head similarity: no impostor pairs (R2 or R3)")
    report.hierarchy, report.quadruples = hierarchy_accuracy(sims[report.head_kind], identities, states)
    if report.quadruples == 0:
        report.problems.append("hierarchy accuracy: no (R1, R2, R3) triple around any sample "
                               "(needs an identity with two samples in one state and one in another, plus other people)")
    return report


# ----------------------------------------------------------------------------------------------
# Calibration


def needed_impostors(far: float) -> int:
    """Fewest impostor pairs for which an exact VR at `far` is measurable (floor(far * n) >= 1)."""
    return math.ceil(1.0 / far - 1e-9)


def calibrate_thresholds(report: ModelReport, far: float) -> dict:
    """Exact thresholds at `far`: identity on the identity protocol, same_look on the head protocol."""
    if report.error:
        raise HeadsearchError(f"cannot calibrate {report.spec}: {report.error}")
    results = {}
    for protocol in ("identity", "head"):
        genuine, impostor = report.scores.get(protocol, (np.zeros(0), np.zeros(0)))
        r = vr_at_far(genuine, impostor, far)
        if not r.measurable:
            raise HeadsearchError(
                f"cannot calibrate at FAR {far:g}: the {PROTOCOL_TITLES[protocol]} protocol has {impostor.size} impostor "
                f"and {genuine.size} genuine pairs; at least {needed_impostors(far)} impostor pairs and one genuine pair "
                f"are needed (use a larger set or a higher FAR)")
        results[protocol] = r
    model = report.model or {}
    return {
        "far": float(far),
        "identity": results["identity"].threshold,
        "same_look": results["head"].threshold,
        "model": model.get("name"),
        "version": model.get("version"),
        "same_look_vectors": report.head_kind,
        "rule": "accept when score > threshold (exact VR@FAR: threshold = (k+1)-th highest impostor score, k = floor(FAR x impostors))",
        "vr": {"identity": results["identity"].vr, "same_look": results["head"].vr},
        "counts": {
            "samples": report.n_samples, "identities": report.n_identities, "pairs": dict(report.pairs),
            "identity": {"genuine": results["identity"].n_genuine, "impostor": results["identity"].n_impostor},
            "same_look": {"genuine": results["head"].n_genuine, "impostor": results["head"].n_impostor},
        },
        "calibrated_at": time.time(),
    }


def write_thresholds(library_root: Path, thresholds: dict) -> Path:
    """Write `<library>/thresholds.json` atomically."""
    path = Path(library_root) / THRESHOLDS_FILE
    write_json_atomic(path, thresholds)
    return path


# ----------------------------------------------------------------------------------------------
# Printing and plotting


def format_table(rows: list[list[str]], align: str) -> list[str]:
    """Rows of cells as fixed-width lines; align[i] is '<' or '>' for column i."""
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return ["  ".join(f"{cell:{align[c]}{widths[c]}}" for c, cell in enumerate(r)).rstrip() for r in rows]


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _vr_cell(r, insightface: bool = False) -> str:
    if r.vr is None:
        return "n/m"
    return f"{r.vr:.3f}" + ("*" if insightface and not r.measurable else "")


def format_accuracy(reports: Sequence[ModelReport], fars: Sequence[float] = DEFAULT_FARS) -> str:
    """The benchmark as a paper-style table (rows = models, columns = protocol x metric)."""
    keys = [_far_key(f) for f in fars]
    head = ["model"]
    for p in PROTOCOLS:
        head += [f"VR@{k}" for k in keys] + ["AUC"]
    head.append("hierarchy")
    rows, errors = [head], []
    for r in reports:
        if r.error:
            errors.append(f"{r.spec}: not measured: {r.error}")
            rows.append([r.spec] + ["-"] * (len(head) - 1))
            continue
        row = [r.spec]
        for p in PROTOCOLS:
            pr = r.protocols.get(p)
            if pr is None:
                row += ["n/m"] * (len(keys) + 1)
                continue
            row += [_vr_cell(pr.vr[k]) for k in keys] + ["n/m" if pr.auc is None else f"{pr.auc:.4f}"]
        row.append("n/m" if r.hierarchy is None else f"{r.hierarchy:.3f}")
        rows.append(row)
    lines, widths = format_table(rows, "<" + ">" * (len(head) - 1)), [max(len(r[c]) for r in rows) for c in range(len(head))]
    # Protocol titles above their column groups.
    group = len(keys) + 1
    offset = lambda col: sum(w + 2 for w in widths[:col])  # noqa: E731
    title = " " * offset(1) + PROTOCOL_TITLES[PROTOCOLS[0]]
    title = title.ljust(offset(1 + group) - 1) + " " + PROTOCOL_TITLES[PROTOCOLS[1]]
    out = [title.rstrip()] + lines
    out += errors
    out.append("VR: exact verification rate at the FAR (threshold = (k+1)-th highest impostor score, k = floor(FAR x impostors)); "
               "n/m: not measurable (fewer than 1/FAR impostor pairs, or no genuine pair).")
    for r in reports:
        if r.error:
            continue
        counts = "; ".join(f"{p} {r.protocols[p].n_genuine} genuine / {r.protocols[p].n_impostor} impostor"
                           for p in PROTOCOLS if p in r.protocols)
        unmeasurable = sorted({f"VR@{k} needs {needed_impostors(f)}" for p in r.protocols.values() for k, f in zip(keys, fars)
                               if not p.vr[k].measurable and p.n_genuine}, key=len)
        out.append(f"{r.spec}: {r.n_samples} samples ({r.n_photos} photos, {r.n_tracks} video tracks) of {_count(r.n_identities, 'identity', 'identities')}; "
                   f"pairs R1 {r.pairs.get('R1', 0)}, R2 {r.pairs.get('R2', 0)}, R3 {r.pairs.get('R3', 0)}; {counts or 'no pairs'}; "
                   f"hierarchy over {r.quadruples} quadruples ({r.head_kind} vectors)"
                   + (f"; n/m: {', '.join(unmeasurable)} impostors" if unmeasurable else ""))
    # The insightface convention, labelled as such.
    measured = [r for r in reports if not r.error and r.protocols]
    if measured:
        out.append("")
        out.append("insightface convention (ROC point whose FPR is closest to the FAR, no interpolation; "
                   "* = fewer than 1/FAR impostors, not a real VR@FAR):")
        ihead = ["model"] + [f"{p} VR@{k}" for p in PROTOCOLS for k in keys]
        irows = [ihead]
        for r in measured:
            irows.append([r.spec] + [_vr_cell(r.protocols[p].vr_insightface[k], True) for p in PROTOCOLS for k in keys])
        out += format_table(irows, "<" + ">" * (len(ihead) - 1))
    return "\n".join(out)


def plot_roc(reports: Sequence[ModelReport], path: Path, fars: Sequence[float] = DEFAULT_FARS) -> Path:
    """ROC curves of all models, one panel per protocol, log-FAR x axis (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PROTOCOLS), figsize=(6 * len(PROTOCOLS), 5), squeeze=False)
    for ax, protocol in zip(axes[0], PROTOCOLS):
        curves = [(r, *r.scores[protocol]) for r in reports if not r.error and protocol in r.scores]
        curves = [(r, g, i) for r, g, i in curves if g.size and i.size]
        # A FAR of 0 cannot sit on a log axis: such points are drawn at the left edge.
        left = min([min(fars)] + [1.0 / i.size for _, _, i in curves]) / 2
        for r, genuine, impostor in curves:
            fpr, tpr, _ = roc_points(genuine, impostor)
            auc = r.protocols[protocol].auc
            ax.step(np.maximum(fpr, left), tpr, where="post", label=f"{r.spec} (AUC {auc:.3f}, {impostor.size} impostors)")
        for far in fars:
            ax.axvline(far, color="0.85", lw=0.8, zorder=0)
        ax.set_xscale("log")
        ax.set_xlim(left, 1.0)
        ax.set_ylim(0.0, 1.01)
        ax.set_xlabel("false accept rate (log; 0 at the left edge)")
        ax.set_ylabel("verification rate")
        ax.set_title(PROTOCOL_TITLES[protocol])
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower right", fontsize=8)
        else:
            ax.text(0.5, 0.5, "not measurable", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------------------------
# Search speed (pure FAISS + numpy)


SYNTHETIC_PER_CLUSTER = 100  # vectors per synthetic person
# Noise norm relative to the centre: same-cluster pairs at cosine ~ 1/(1+1^2) = 0.5 and other pairs at
# 0 +- 1/sqrt(dim), roughly ArcFace's genuine/impostor similarities. Larger spreads overlap the
# clusters and cost IVF recall (1.5: 0.98 at 1e5, 0.37 at 1e6 with nprobe 16).
SYNTHETIC_SPREAD = 1.0


def synthetic_vectors(n: int, n_queries: int, dim: int = 128, seed: int = 0, per_cluster: int = SYNTHETIC_PER_CLUSTER,
                      spread: float = SYNTHETIC_SPREAD) -> tuple[np.ndarray, np.ndarray]:
    """Seeded, clustered unit vectors and queries drawn from the same clusters.

    Like a library of people: ``n // per_cluster`` random unit centres, each vector a centre plus
    isotropic noise of expected norm ``spread`` (cosine to its centre ~ 1/sqrt(1+spread^2), two
    vectors of one cluster ~ 1/(1+spread^2)).
    """
    rng = np.random.default_rng(seed)
    n_clusters = max(1, n // per_cluster)
    centres = l2_normalise(rng.standard_normal((n_clusters, dim), dtype=np.float32))
    sigma = np.float32(spread / math.sqrt(dim))

    def draw(count: int) -> np.ndarray:
        out = np.empty((count, dim), np.float32)
        for start in range(0, count, 1 << 16):
            stop = min(count, start + (1 << 16))
            labels = rng.integers(0, n_clusters, stop - start)
            out[start:stop] = l2_normalise(centres[labels] + sigma * rng.standard_normal((stop - start, dim), dtype=np.float32))
        return out

    return draw(n), draw(n_queries)


def exact_top_k(db: np.ndarray, queries: np.ndarray, k: int, chunk: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k ids by inner product (float32 shortlist, rescored in float64) and the k-th best score."""
    k = min(k, len(db))
    extra = min(len(db), k + 32)
    ids = np.empty((len(queries), k), np.int64)
    kth = np.empty(len(queries), np.float64)
    for start in range(0, len(queries), chunk):
        q = queries[start:start + chunk]
        scores = q @ db.T
        cand = np.argpartition(-scores, extra - 1, axis=1)[:, :extra] if extra < len(db) else np.tile(np.arange(len(db)), (len(q), 1))
        exact = np.einsum("qd,qcd->qc", q.astype(np.float64), db[cand].astype(np.float64))
        order = np.argsort(-exact, axis=1, kind="stable")[:, :k]
        ids[start:start + chunk] = np.take_along_axis(cand, order, axis=1)
        kth[start:start + chunk] = np.take_along_axis(exact, order[:, -1:], axis=1)[:, 0]
    return ids, kth


def float32_dot_error(dim: int) -> float:
    """Worst-case rounding error of a float32 dot product of two unit vectors: gamma_d = d u / (1 - d u), u = 2^-24."""
    du = dim * 2.0 ** -24
    return du / (1.0 - du)


def recall_at_k(found: np.ndarray, truth: np.ndarray, db: np.ndarray, queries: np.ndarray, kth: np.ndarray) -> float:
    """Share of the true top-k found.

    A found vector outside the true top-k still counts when its exact score ties the true k-th
    best within float32 rounding (an index computing in float32 cannot order such near-ties).
    """
    k = truth.shape[1]
    tolerance = float32_dot_error(db.shape[1])
    hits = 0
    for q in range(len(found)):
        f = found[q][found[q] >= 0][:k]
        inside = np.isin(f, truth[q])
        if not inside.all():
            outside = f[~inside]
            exact = db[outside].astype(np.float64) @ queries[q].astype(np.float64)
            inside[~inside] = exact >= kth[q] - tolerance
        hits += int(inside.sum())
    return hits / (len(found) * k)


@dataclass
class SearchSpeed:
    """One index type at one size."""

    index: str
    n: int
    dim: int
    params: dict
    build_s: float
    p50_ms: float
    p95_ms: float
    batch_qps: float
    recall_at_k: float
    k: int
    memory_bytes: int
    queries: int
    threads: int

    def to_dict(self) -> dict:
        return {"index": self.index, "n": self.n, "dim": self.dim, "params": self.params, "build_s": self.build_s,
                "p50_ms": self.p50_ms, "p95_ms": self.p95_ms, "batch_qps": self.batch_qps,
                f"recall@{self.k}": self.recall_at_k, "memory_bytes": self.memory_bytes,
                "queries": self.queries, "threads": self.threads}


def _index_bytes(index) -> int:
    import faiss

    return int(faiss.serialize_index(index).nbytes)


def _measure(name: str, index, params: dict, build_s: float, db: np.ndarray, queries: np.ndarray, truth: np.ndarray,
             kth: np.ndarray, k: int, latency_queries: int) -> SearchSpeed:
    import faiss

    latencies = []
    for q in queries[:latency_queries]:
        t0 = time.perf_counter()
        index.search(q[None, :], k)
        latencies.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    _, found = index.search(queries, k)
    batch_s = time.perf_counter() - t0
    return SearchSpeed(name, int(index.ntotal), int(index.d), params, build_s,
                       float(np.percentile(latencies, 50) * 1e3), float(np.percentile(latencies, 95) * 1e3),
                       len(queries) / batch_s if batch_s > 0 else float("inf"),
                       recall_at_k(found, truth, db, queries, kth), k, _index_bytes(index), len(queries),
                       faiss.omp_get_max_threads())


def search_speed(n: int, dim: int = 128, seed: int = 0, n_queries: int = 1000, latency_queries: int = 200, k: int = 10,
                 nprobe: int = NPROBE, train_per_list: int = 40) -> list[SearchSpeed]:
    """Exact (IndexFlatIP) and approximate (IndexIVFFlat) search over n synthetic clustered vectors."""
    import faiss

    db, queries = synthetic_vectors(n, n_queries, dim, seed)
    truth, kth = exact_top_k(db, queries, k)
    results = []
    t0 = time.perf_counter()
    flat = faiss.IndexFlatIP(dim)
    flat.add(db)
    results.append(_measure("flat", flat, {}, time.perf_counter() - t0, db, queries, truth, kth, k, latency_queries))
    del flat
    nlist = ivf_nlist(n)
    t0 = time.perf_counter()
    ivf = build_ivf(db, nlist, nprobe, seed, train_per_list)  # the library's own IVF recipe
    ivf.add(db)
    params = {"nlist": nlist, "nprobe": int(ivf.nprobe), "trained_on": int(min(n, train_per_list * nlist))}
    results.append(_measure("ivf", ivf, params, time.perf_counter() - t0, db, queries, truth, kth, k, latency_queries))
    return results


def format_search(results: Sequence[SearchSpeed], seed: int) -> str:
    if not results:
        return ""
    r0 = results[0]
    lines = [f"search: {r0.dim}-d synthetic unit vectors (seed {seed}; clusters of {SYNTHETIC_PER_CLUSTER}, in-cluster cosine "
             f"~{1 / (1 + SYNTHETIC_SPREAD ** 2):.2f}), {r0.queries} queries, k={r0.k}, latency of single queries, "
             f"{r0.threads} faiss threads; recall against exact float64 search"]
    rows = [["vectors", "index", "p50 ms", "p95 ms", "batch q/s", f"recall@{r0.k}", "memory MB", "build s"]]
    for r in results:
        name = "flat (exact)" if r.index == "flat" else f"ivf (nlist {r.params['nlist']}, nprobe {r.params['nprobe']})"
        rows.append([f"{r.n:,}", name, f"{r.p50_ms:.3f}", f"{r.p95_ms:.3f}", f"{r.batch_qps:,.0f}", f"{r.recall_at_k:.4f}",
                     f"{r.memory_bytes / 1e6:.1f}", f"{r.build_s:.2f}"])
    return "\n".join(lines + format_table(rows, ">" + "<" + ">" * 6))


def parse_sizes(text: str) -> list[int]:
    """'1e4,1e5' -> [10000, 100000]."""
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = float(part)
        except ValueError:
            raise HeadsearchError(f"--sizes: {part!r} is not a number (e.g. --sizes 1e4,1e5)") from None
        if value != int(value) or value < 1:
            raise HeadsearchError(f"--sizes: {part!r} is not a positive whole number")
        sizes.append(int(value))
    if not sizes:
        raise HeadsearchError("--sizes: give at least one size (e.g. --sizes 1e4,1e5)")
    return sizes
