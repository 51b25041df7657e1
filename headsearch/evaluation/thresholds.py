"""Score thresholds: calibrated by `headsearch bench --calibrate` at one false-accept rate, read by `query` to
label every hit with its tier.

Two homes, the first found wins:
* a library's own `thresholds.json` (`bench --calibrate FAR --library L`), calibrated on the user's data;
* thresholds shipped with the model, as its spec (`headsearch.models.registry`) says: a file in the package for a
  registered model (the default ships one), `<model file>.thresholds.json` beside a checkpoint (`bench --calibrate FAR
  --thresholds-out FILE` writes one), so a fresh install labels every hit without calibrating.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from headsearch.basics.errors import HeadsearchError
from headsearch.basics.files import write_json_atomic
from headsearch.basics.text import counted
from headsearch.evaluation.metrics import PROTOCOL_TITLES, allowed_false_accepts, needed_impostors, vr_at_far
from headsearch.evaluation.verification import EvaluationReport
from headsearch.models.registry import find_spec
from schemas.records import ModelInfo, Tier

log = logging.getLogger(__name__)

THRESHOLDS_FILE = "thresholds.json"
RULE = ("accept when score > threshold (exact VR@FAR: threshold = (k+1)-th highest impostor score, "
        "k = floor(FAR x impostors); below 1/impostors, an exponential tail fitted to the highest impostor scores)")
FALSE_HIT_BUDGET = 0.05  # expected false hits per query: the identity bar of a library of N tracks is set at FAR = budget / N
MAX_LIBRARY_FAR = 1e-2  # ...but never looser than this, however small the library
TAIL_KEEP = 2000  # highest impostor scores kept per score kind
TAIL_FIT = 100  # of which the highest this many fit the exponential tail beyond the measured range


@dataclass(frozen=True)
class ImpostorTail:
    """The highest impostor scores of one kind of score in a calibration: a threshold at any false-accept
    rate, exact where the calibration had enough impostor pairs, extrapolated beyond."""

    count: int  # impostor pairs scored
    top: tuple[float, ...]  # the highest of them, descending

    @classmethod
    def of(cls, impostor: np.ndarray) -> ImpostorTail:
        scores = np.sort(np.asarray(impostor, np.float64).ravel())[::-1]
        return cls(int(scores.size), tuple(float(x) for x in scores[:TAIL_KEEP]))

    def threshold(self, far: float) -> tuple[float, bool]:
        """(threshold, extrapolated) at `far`: the (k+1)-th highest impostor score, k = floor(far x count), as
        `vr_at_far`; where k < 1, u + lambda ln(m / (far x count)) of an exponential tail (mean excess lambda over
        u, the m-th highest score) fitted to the m highest scores."""
        k = allowed_false_accepts(far, self.count)
        if k >= 1:
            return self.top[min(k, len(self.top) - 1)], False
        m = min(TAIL_FIT, len(self.top))
        if m < 2:
            return self.top[0] if self.top else 1.0, True
        u = self.top[m - 1]
        excess = float(np.mean(np.array(self.top[: m - 1]) - u))
        return float(u + max(excess, 1e-6) * np.log(m / (far * self.count))), True

    def to_dict(self) -> dict:
        return {"count": self.count, "top": [round(x, 6) for x in self.top]}

    @classmethod
    def from_dict(cls, d: dict) -> ImpostorTail:
        return cls(int(d["count"]), tuple(float(x) for x in d["top"]))


@dataclass(frozen=True)
class Thresholds:
    """Score thresholds for one model: at the false-accept rate they were calibrated at, or, for a library,
    at the rate that holds its expected false hits per query to the budget (`for_library`)."""

    far: float
    identity: float  # same person strictly above this identity score
    same_look: float  # same look strictly above this head score (identity score for models without head vectors)
    model: str
    version: str
    head_identity: float | None = None  # same person strictly above this head score (both sides show a face)
    appearance: float | None = None  # same look strictly above this appearance-only score (a side without a face)
    tails: dict[str, ImpostorTail] = field(default_factory=dict, compare=False, repr=False)
    budget: str = ""  # how the identity bar was set, in words (for -v)
    # With a head_identity bar, "same person" is said above either bar: each is set at FAR / union_factor, so that
    # the pairs either accepts (measured at calibration, `head_route`) hold to the FAR.
    union_factor: float = 1.0
    # How much a frame's scores wander around their clip's mean in a consistent clip (`measure_frame_noise`, by `bench
    # compare --noise-out`): {"identity": sd, "head": sd, "independent_per_s": n, ...}; None: not measured.
    frame_noise: dict | None = field(default=None, compare=False)

    def tier(self, id_score: float | None, head_score: float | None = None, appearance_score: float | None = None) -> Tier:
        """The relation of a hit to the query: by its face (identity score, or the head score of face sightings),
        else by the appearance of the head alone (a sighting or a query without a face) above its strict bar."""
        by_face = id_score is not None and id_score > self.identity
        by_head = head_score is not None and self.head_identity is not None and head_score > self.head_identity
        if by_face or by_head:
            look = head_score if head_score is not None else id_score
            return Tier.SAME_LOOK if look is not None and look > self.same_look else Tier.OTHER_LOOK
        if appearance_score is not None and self.appearance is not None and appearance_score > self.appearance:
            return Tier.SAME_LOOK
        return Tier.OTHER_PERSON

    def holds_for(self, model: ModelInfo) -> bool:
        return model.same_vectors_as(ModelInfo(self.model, self.version, model.dim))

    def for_library(self, tracks: int, budget: float = FALSE_HIT_BUDGET) -> Thresholds:
        """The bars for a library of `tracks` tracks: each "same person" bar at FAR = budget / tracks (at most
        MAX_LIBRARY_FAR), so a query expects at most `budget` false hits; unchanged without calibration tails."""
        if "identity" not in self.tails:
            return self
        far = min(MAX_LIBRARY_FAR, budget / max(tracks, 1))
        bars, extrapolated = {}, []
        for name in ("identity", "head_identity", "appearance"):
            if name in self.tails:
                either = name != "appearance" and "head_identity" in self.tails  # two bars share the "same person" budget
                bars[name], beyond = self.tails[name].threshold(far / self.union_factor if either else far)
                if beyond:
                    extrapolated.append(name)
        note = (f"false-hit budget {budget:g} per query over {counted(tracks, 'track')}: FAR {far:.2g}"
                + (f" ({', '.join(extrapolated)} extrapolated beyond the calibration's {self.tails['identity'].count:,} impostor pairs)"
                   if extrapolated else ""))
        return replace(self, far=far, budget=note, **bars)


def thresholds_path(folder: Path) -> Path:
    return Path(folder) / THRESHOLDS_FILE


def read_thresholds(folder: Path, model: ModelInfo | None = None) -> Thresholds | None:
    """The thresholds stored in a library folder (None when absent, unreadable, or made for another model)."""
    return read_thresholds_file(thresholds_path(folder), model)


def shipped_thresholds_path(model: ModelInfo | str) -> Path | None:
    """Where the thresholds shipped with a model are (its spec says: in the package, or beside its file)."""
    spec = find_spec(model)
    if spec is None:
        return None
    return spec.thresholds_path(model.source if isinstance(model, ModelInfo) else model)


def thresholds_for(library_root: Path | None, model: ModelInfo) -> Thresholds | None:
    """The thresholds a library's queries use: its own (`bench --calibrate`), else those shipped with
    its model (in the package for a registered model, beside the file for one loaded from a file);
    None when the scores are uncalibrated. Each must name the model's exact version. Without a library
    (`library_root` None), those shipped with the model."""
    own = read_thresholds(library_root, model) if library_root is not None else None
    if own is not None:
        return own
    shipped = shipped_thresholds_path(model)
    return read_thresholds_file(shipped, model) if shipped is not None else None


def read_thresholds_file(path: Path, model: ModelInfo | None = None) -> Thresholds | None:
    """Thresholds from a file (None when absent, unreadable, or made for another model)."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        d = json.loads(path.read_text())
        if d.get("head_identity") is not None and "head_route" not in d:
            # Calibrated before the two "same person" bars shared one budget: each let the whole FAR through.
            log.warning("%s: leaving out its head-identity bar, calibrated on a budget of its own (recalibrate with "
                        "`headsearch bench accuracy SET --calibrate FAR` to decide whether it pays)", path)
            d = {**d, "head_identity": None, "tails": {k: v for k, v in (d.get("tails") or {}).items() if k != "head_identity"}}
        optional = {name: float(d[name]) for name in ("head_identity", "appearance") if d.get(name) is not None}
        tails = {name: ImpostorTail.from_dict(t) for name, t in (d.get("tails") or {}).items()}
        noise = d.get("frame_noise")
        thresholds = Thresholds(float(d["far"]), float(d["identity"]), float(d["same_look"]), d["model"], d["version"],
                                tails=tails, union_factor=float(d.get("union_factor", 1.0)),
                                frame_noise=noise if isinstance(noise, dict) else None, **optional)
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("%s: ignoring unreadable thresholds (%s)", path, e)
        return None
    if model is not None and not thresholds.holds_for(model):
        log.warning("%s: ignoring thresholds of another model (%s %s)", path, thresholds.model, thresholds.version)
        return None
    return thresholds


def calibrate(evaluation: EvaluationReport, far: float, model: ModelInfo) -> dict:
    """Thresholds at `far`, as the record `write_thresholds` stores; HeadsearchError when not measurable there.

    - identity: identity scores, same person (R1, R2) against other people (R3), exact at `far`;
    - same_look: the head score (identity score without head vectors) that best tells same look (R1) from other
      look (R2) of the same person: the largest mean of the two rates (same looks above, other looks not above);
    - head_identity (models with head vectors): a second "same person" bar on the head score, kept only where it
      pays (`head_route`): then both bars are raised so that the pairs either accepts hold to `far`;
    - appearance (models with an appearance part): that part alone on same look against other people, at `far`;
    - tails: the highest impostor scores of each, from which a library sets its bars for its own size."""
    genuine, impostor = evaluation.scores.get("identity", (np.zeros(0), np.zeros(0)))
    identity = vr_at_far(genuine, impostor, far)
    if not identity.measurable:
        raise HeadsearchError(
            f"cannot calibrate at FAR {far:g}: the {PROTOCOL_TITLES['identity']} protocol has {impostor.size} impostor "
            f"and {genuine.size} genuine pairs; at least {needed_impostors(far)} impostor pairs and one genuine pair "
            f"are needed (use a larger set or a higher FAR)")
    looks = evaluation.scores.get("looks", (np.zeros(0), np.zeros(0)))
    same_look, look_accuracy = separating_threshold(*looks)
    record = {"far": float(far), "identity": identity.threshold, "same_look": same_look, "model": model.name, "version": model.version,
              "same_look_vectors": str(evaluation.head_kind), "rule": RULE,
              "vr": {"identity": identity.vr}, "same_look_accuracy": look_accuracy,
              "counts": {"samples": evaluation.n_samples, "identities": evaluation.n_identities, "pairs": dict(evaluation.pairs),
                         "identity": {"genuine": identity.n_genuine, "impostor": identity.n_impostor},
                         "same_look": {"same_look": int(len(looks[0])), "other_look": int(len(looks[1]))}},
              "tails": {"identity": ImpostorTail.of(impostor).to_dict()}, "calibrated_at": time.time()}
    if "head_identity" in evaluation.scores:
        route = head_route(evaluation.scores["identity"], evaluation.scores["head_identity"], far)
        record["head_route"] = route
        if route["kept"]:
            record.update(identity=route["identity"], head_identity=route["head_identity"], union_factor=route["union_factor"])
            record["vr"].update(identity=route["vr_identity_bar"], head_identity=route["vr_head_bar"], either=route["vr_either"])
            record["tails"]["head_identity"] = ImpostorTail.of(evaluation.scores["head_identity"][1]).to_dict()
    if "appearance" in evaluation.scores:
        gen, imp = evaluation.scores["appearance"]
        r = vr_at_far(gen, imp, far)
        if r.measurable:
            record["appearance"], record["vr"]["appearance"] = r.threshold, r.vr
            record["tails"]["appearance"] = ImpostorTail.of(imp).to_dict()
    return record


def head_route(identity: tuple[np.ndarray, np.ndarray], head: tuple[np.ndarray, np.ndarray], far: float) -> dict:
    """Whether "same person" should also be said above a bar on the head score, besides the identity bar, decided on
    the calibration's pairs ((genuine, impostor) scores of the same pairs on both).

    Two bars accept the pairs either accepts: at one FAR each, up to twice the false accepts. So both are set at
    the (k+1)-th highest impostor score of their kind, k lowered until the pairs either bar accepts hold to `far`
    (union_factor = the FAR each bar was set at, per `far`); the route is kept only when that accepts more genuine
    pairs than the identity bar alone at `far`. For SFace + Lite0 on all labelled pairs of ../shared/data it did not, at
    any FAR from 1e-2 to 1e-4: at 1e-3 both bars at 1e-3 each let 1.6 times the false accepts through for 4 more of
    3,342 genuine pairs, and held to 1e-3 together they accept 0.892 of them, the identity bar alone 0.906."""
    (gen_id, imp_id), (gen_head, imp_head) = ((np.asarray(a, np.float64).ravel() for a in pair) for pair in (identity, head))
    alone = vr_at_far(gen_id, imp_id, far)
    out = {"kept": False, "vr_identity_alone": alone.vr}
    if not alone.measurable or imp_id.size != imp_head.size or gen_id.size != gen_head.size:
        return out
    allowed = allowed_false_accepts(far, imp_id.size)
    top_id, top_head = -np.sort(-imp_id), -np.sort(-imp_head)

    def either(k: int, scores_id: np.ndarray, scores_head: np.ndarray) -> np.ndarray:
        return (scores_id > top_id[k]) | (scores_head > top_head[k])

    lo, hi = 0, allowed  # the largest k whose union holds to `allowed` (the union grows with k)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if int(either(mid, imp_id, imp_head).sum()) <= allowed:
            lo = mid
        else:
            hi = mid - 1
    k = lo
    if k < 1:
        return out
    vr_either = float(either(k, gen_id, gen_head).mean())
    out.update(vr_either=vr_either, union_factor=allowed / k, identity=float(top_id[k]), head_identity=float(top_head[k]),
               vr_identity_bar=float((gen_id > top_id[k]).mean()), vr_head_bar=float((gen_head > top_head[k]).mean()))
    out["kept"] = vr_either > alone.vr
    return out


def separating_threshold(positive: np.ndarray, negative: np.ndarray) -> tuple[float, float | None]:
    """The threshold (accept strictly above) that maximises the mean of the share of `positive` above it and
    the share of `negative` not above it; (1.0, None) when either side is empty."""
    pos, neg = np.asarray(positive, np.float64), np.asarray(negative, np.float64)
    if pos.size == 0 or neg.size == 0:
        return 1.0, None
    candidates = np.unique(np.concatenate([pos, neg]))
    pos_sorted, neg_sorted = np.sort(pos), np.sort(neg)
    tpr = 1.0 - np.searchsorted(pos_sorted, candidates, side="right") / pos.size
    tnr = np.searchsorted(neg_sorted, candidates, side="right") / neg.size
    best = int(np.argmax((tpr + tnr) / 2.0))
    return float(candidates[best]), float((tpr[best] + tnr[best]) / 2.0)


def write_thresholds(folder: Path, record: dict) -> Path:
    """Write `<folder>/thresholds.json` atomically."""
    return write_thresholds_file(thresholds_path(folder), record)


def write_thresholds_file(path: Path, record: dict) -> Path:
    """Write a thresholds record to `path` atomically."""
    write_json_atomic(Path(path), record)
    return Path(path)


def measure_frame_noise(series: dict[str, list[np.ndarray]], fps: float) -> dict:
    """How a frame's score wanders in clips of one person in one look, from each clip's frame scores in time order
    (kind -> one array a clip), sampled at `fps`: per kind the pooled standard deviation around each clip's mean, and
    the lag-one autocorrelation of those residuals, from which `independent_per_s`, the frames a second that count as
    independent evidence (fps x (1 - r) / (1 + r)). `compare` holds its drift events to the false-accept rate with it."""
    out: dict = {"fps": float(fps)}
    correlations = []
    for kind, clips in series.items():
        residuals = [np.asarray(c, np.float64) - float(np.mean(c)) for c in clips if len(c) >= 2]
        if not residuals:
            continue
        dof = sum(len(r) - 1 for r in residuals)
        out[kind] = float(np.sqrt(sum(float(r @ r) for r in residuals) / max(dof, 1)))
        pairs = [(r[:-1], r[1:]) for r in residuals if len(r) >= 3]
        num = sum(float(a @ b) for a, b in pairs)
        den = sum(float(a @ a) for a, _ in pairs)
        if den > 0:
            correlations.append(num / den)
        out.setdefault("clips", {})[kind] = len(residuals)
        out.setdefault("frames", {})[kind] = int(sum(len(r) for r in residuals))
    rho = min(max(float(np.mean(correlations)) if correlations else 0.0, 0.0), 0.95)
    out["autocorrelation"] = rho
    out["independent_per_s"] = float(fps) * (1.0 - rho) / (1.0 + rho)
    out["measured_at"] = time.time()
    return out


def write_frame_noise(path: Path, model: ModelInfo, noise: dict) -> Path:
    """Add a frame-noise record (`measure_frame_noise`) to a model's thresholds file, which must be that model's."""
    path = Path(path)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise HeadsearchError(f"{path}: cannot read the thresholds file to add the frame noise to ({e})") from e
    if (record.get("model"), record.get("version")) != (model.name, model.version):
        raise HeadsearchError(f"{path}: thresholds of {record.get('model')} {record.get('version')}, not of {model.label()}")
    return write_thresholds_file(path, {**record, "frame_noise": noise})
