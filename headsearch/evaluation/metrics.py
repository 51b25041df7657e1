"""Verification metrics for head/face benchmarks (IJB-style VR@FAR, AUC, pair protocols).

Conventions:
* Scores are similarities: higher means "more likely the same".
* Pairs are accepted when ``score > threshold`` (strict).
* Relations between two samples: R1 = same identity and same state, R2 = same identity but
  different state, R3 = different identity. A missing state (``None`` or ``""``) is treated as
  one more state value, so two unknown-state samples of the same identity are R1, and an
  unknown-state sample vs a known-state sample of the same identity is R2.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger(__name__)

R1, R2, R3 = 1, 2, 3
PROTOCOLS = ("head", "identity")
PROTOCOL_TITLES = {"head": "head similarity (R1 vs R2+R3)", "identity": "identity verification (R1+R2 vs R3)"}
DEFAULT_FARS = (1e-2, 1e-3, 1e-4)


@dataclass(frozen=True)
class VerificationResult:
    """Verification rate at one target false accept rate."""

    far: float
    threshold: float | None
    vr: float | None
    measurable: bool
    n_genuine: int
    n_impostor: int


def _check_far(far: float) -> None:
    """Raise unless 0 < far < 1."""
    if not 0.0 < far < 1.0:
        raise ValueError(f"far must be in (0, 1), got {far}")


def needed_impostors(far: float) -> int:
    """Fewest impostor pairs for which an exact VR at `far` is measurable (floor(far * n) >= 1)."""
    return math.ceil(1.0 / far - 1e-9)


def allowed_false_accepts(far: float, n_impostor: int) -> int:
    """k = floor(far * n_impostor), tolerant to float rounding (3e-4 * 10000 -> 3, not 2)."""
    return math.floor(far * n_impostor + 1e-9)


def vr_at_far(genuine: np.ndarray, impostor: np.ndarray, far: float) -> VerificationResult:
    """Exact, non-interpolated VR at FAR: threshold = (k+1)-th largest impostor, k = floor(far*n).

    At most k impostors are strictly above the threshold. With ties at the threshold value fewer
    than k may exceed it (the realised FAR is then below the target): this is the conservative
    choice; the threshold is never lowered into a tie group. Not measurable when k < 1 (fewer than
    1/far impostor pairs) or when there are no genuine scores; threshold and vr are then None.
    """
    _check_far(far)
    gen, imp = np.asarray(genuine, dtype=np.float64).ravel(), np.asarray(impostor, dtype=np.float64).ravel()
    k = allowed_false_accepts(far, imp.size)
    if k < 1 or gen.size == 0:
        log.debug("VR@FAR=%g not measurable (%d genuine, %d impostor)", far, gen.size, imp.size)
        return VerificationResult(far, None, None, False, gen.size, imp.size)
    k = min(k, imp.size - 1)  # unreachable for far < 1, kept as a guard on indexing
    threshold = float(-np.sort(-imp)[k])
    assert np.count_nonzero(imp > threshold) <= k
    vr = float(np.mean(gen > threshold))
    return VerificationResult(far, threshold, vr, True, gen.size, imp.size)


def roc_curve(*args, **kwargs):
    """sklearn's `roc_curve`, imported when first used: scikit-learn takes a second to import, which a
    query (thresholds read from a file) does not need to spend."""
    from sklearn.metrics import roc_curve as sklearn_roc_curve

    return sklearn_roc_curve(*args, **kwargs)


def vr_at_far_insightface(genuine: np.ndarray, impostor: np.ndarray, far: float) -> VerificationResult:
    """insightface IJB-script convention: ROC point whose FPR is closest to far (no interpolation).

    As in ``ijb_11.py`` the ROC arrays are reversed before the argmin, so among equally close
    points the one with the highest sklearn index (largest TPR) wins. The value is reported even
    when there are fewer than 1/far impostors, but then ``measurable`` is False.
    """
    _check_far(far)
    gen, imp = np.asarray(genuine, dtype=np.float64).ravel(), np.asarray(impostor, dtype=np.float64).ravel()
    if gen.size == 0 or imp.size == 0:
        return VerificationResult(far, None, None, False, gen.size, imp.size)
    labels = np.r_[np.ones(gen.size), np.zeros(imp.size)]
    fpr, tpr, thr = (a[::-1] for a in roc_curve(labels, np.r_[gen, imp]))
    idx = int(np.argmin(np.abs(fpr - far)))
    measurable = allowed_false_accepts(far, imp.size) >= 1
    return VerificationResult(far, float(thr[idx]), float(tpr[idx]), measurable, gen.size, imp.size)


def roc_auc(genuine: np.ndarray, impostor: np.ndarray) -> float:
    """ROC AUC as the Mann-Whitney statistic P(g > i) + 0.5 P(g == i), via average ranks."""
    gen, imp = np.asarray(genuine, dtype=np.float64).ravel(), np.asarray(impostor, dtype=np.float64).ravel()
    if gen.size == 0 or imp.size == 0:
        raise ValueError("roc_auc needs at least one genuine and one impostor score")
    _, inverse, counts = np.unique(np.r_[gen, imp], return_inverse=True, return_counts=True)
    avg_rank = np.cumsum(counts) - (counts - 1) / 2.0  # 1-based average rank of each tie group
    rank_sum = avg_rank[inverse[: gen.size]].sum()
    u = rank_sum - gen.size * (gen.size + 1) / 2.0
    return float(u / (gen.size * imp.size))


def roc_points(genuine: np.ndarray, impostor: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fpr, tpr, thresholds) of the ROC curve for plotting (sklearn, drop_intermediate=True)."""
    gen, imp = np.asarray(genuine, dtype=np.float64).ravel(), np.asarray(impostor, dtype=np.float64).ravel()
    labels = np.r_[np.ones(gen.size), np.zeros(imp.size)]
    return roc_curve(labels, np.r_[gen, imp], drop_intermediate=True)


def _state_keys(states: Sequence[str | None]) -> np.ndarray:
    """States as strings, with None and '' both mapped to the same 'unknown' value."""
    return np.array(["" if s is None else str(s) for s in states], dtype=object)


def pair_relations(
    identities: Sequence[str], states: Sequence[str | None]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All pairs i < j with their relation code (R1 same id+state, R2 same id other state, R3 other id)."""
    if len(identities) != len(states):
        raise ValueError("identities and states must have the same length")
    ids, st = np.array(list(identities), dtype=object), _state_keys(states)
    i, j = np.triu_indices(len(ids), k=1)
    same_id = ids[i] == ids[j]
    relation = np.where(same_id, np.where(st[i] == st[j], R1, R2), R3).astype(np.int8)
    return i, j, relation


def relation_counts(identities: Sequence[str], states: Sequence[str | None]) -> dict[str, int]:
    """Pairs by relation: R1 same identity and state, R2 same identity other state, R3 other identity."""
    def pairs(k: int) -> int:
        return k * (k - 1) // 2

    st = _state_keys(states)
    same_id = sum(pairs(k) for k in Counter(identities).values())
    same_state = sum(pairs(k) for k in Counter(zip(identities, st, strict=True)).values())
    return {"R1": same_state, "R2": same_id - same_state, "R3": pairs(len(identities)) - same_id}


def protocol_scores(
    sim: np.ndarray, i: np.ndarray, j: np.ndarray, relation: np.ndarray, protocol: str
) -> tuple[np.ndarray, np.ndarray]:
    """(genuine, impostor) scores: 'head' = R1 vs R2+R3, 'identity' = R1+R2 vs R3."""
    scores, relation = np.asarray(sim)[i, j], np.asarray(relation)
    if protocol == "head":
        positive = relation == R1
    elif protocol == "identity":
        positive = relation != R3
    else:
        raise ValueError(f"unknown protocol {protocol!r}, expected one of {PROTOCOLS}")
    return scores[positive], scores[~positive]


def hierarchy_accuracy(
    sim: np.ndarray, identities: Sequence[str], states: Sequence[str | None]
) -> tuple[float | None, int]:
    """Share of (a, p1 in R1, p2 in R2, n in R3) with sim[a,p1] > sim[a,p2] > sim[a,n]; None if no quadruple."""
    sim = np.asarray(sim, dtype=np.float64)
    ids, st = np.array(list(identities), dtype=object), _state_keys(states)
    correct = total = 0
    for a in range(len(ids)):
        same_id, same_st = ids == ids[a], st == st[a]
        not_self = np.arange(len(ids)) != a
        r1 = np.sort(sim[a, same_id & same_st & not_self])
        r2 = sim[a, same_id & ~same_st]
        r3 = np.sort(sim[a, ~same_id])
        n_quads = r1.size * r2.size * r3.size
        if n_quads == 0:
            continue
        above = r1.size - np.searchsorted(r1, r2, side="right")  # R1 partners strictly above s2
        below = np.searchsorted(r3, r2, side="left")  # R3 partners strictly below s2
        correct += int(np.dot(above, below))
        total += n_quads
    return (correct / total if total else None), total


def far_key(far: float) -> str:
    """Compact FAR label: 1e-2, 1e-3, 2.5e-3."""
    mantissa, exponent = f"{far:e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


@dataclass
class ProtocolReport:
    """Verification summary of one protocol."""

    protocol: str
    n_genuine: int
    n_impostor: int
    auc: float | None
    vr: dict[str, VerificationResult] = field(default_factory=dict)
    vr_insightface: dict[str, VerificationResult] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-serialisable summary (vr, vr_insightface, thresholds and measurable keyed by FAR)."""
        return {
            "protocol": self.protocol,
            "n_genuine": int(self.n_genuine),
            "n_impostor": int(self.n_impostor),
            "auc": None if self.auc is None else float(self.auc),
            "vr": {k: r.vr for k, r in self.vr.items()},
            "thresholds": {k: r.threshold for k, r in self.vr.items()},
            "measurable": {k: r.measurable for k, r in self.vr.items()},
            "vr_insightface": {k: r.vr for k, r in self.vr_insightface.items()},
        }


def evaluate_protocol(
    sim: np.ndarray,
    i: np.ndarray,
    j: np.ndarray,
    relation: np.ndarray,
    protocol: str,
    fars: Sequence[float] = DEFAULT_FARS,
) -> ProtocolReport:
    """AUC, exact VR@FAR and insightface-style VR@FAR for one protocol."""
    genuine, impostor = protocol_scores(sim, i, j, relation, protocol)
    auc = roc_auc(genuine, impostor) if genuine.size and impostor.size else None
    report = ProtocolReport(protocol, int(genuine.size), int(impostor.size), auc)
    for far in fars:
        report.vr[far_key(far)] = vr_at_far(genuine, impostor, far)
        report.vr_insightface[far_key(far)] = vr_at_far_insightface(genuine, impostor, far)
    log.info("protocol=%s genuine=%d impostor=%d auc=%s", protocol, genuine.size, impostor.size, auc)
    return report
