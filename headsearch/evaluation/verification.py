"""The evaluation recipe, once: labelled vectors in, both verification protocols, pair counts and
the hierarchy accuracy out. `headsearch bench` and training's per-epoch validation both use it."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from headsearch.detection.pose import YAW_VIEWS
from headsearch.evaluation.metrics import (
    DEFAULT_FARS,
    PROTOCOLS,
    R1,
    R2,
    R3,
    ProtocolReport,
    evaluate_protocol,
    far_key,
    hierarchy_accuracy,
    pair_relations,
    protocol_scores,
    relation_counts,
)
from headsearch.models.scoring import appearance_part, has_face, head_matrix
from schemas.records import VectorKind


@dataclass
class EvaluationReport:
    """Verification results of one set of labelled vectors."""

    n_samples: int = 0
    n_identities: int = 0
    pairs: dict[str, int] = field(default_factory=lambda: {"R1": 0, "R2": 0, "R3": 0})
    head_kind: VectorKind = VectorKind.ID  # vectors used for the head protocol and the hierarchy
    protocols: dict[str, ProtocolReport] = field(default_factory=dict)
    hierarchy: float | None = None
    quadruples: int = 0
    problems: list[str] = field(default_factory=list)  # what cannot be measured, one line each
    scores: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)  # protocol -> (genuine, impostor)
    # The identity protocol by yaw band (band name -> report): the pairs of a frontal side and a side turned that far
    # (degrees of yaw from the five landmarks; samples without a known yaw are in no band).
    bands: dict[str, ProtocolReport] = field(default_factory=dict)

    @property
    def measured(self) -> bool:
        """Whether anything at all was computed (an AUC of some protocol)."""
        return any(p.auc is not None for p in self.protocols.values())

    def protocols_dict(self) -> dict:
        out = {}
        for name, p in self.protocols.items():
            d = p.to_dict()
            d["vectors"] = str(self.head_kind if name == "head" else VectorKind.ID)
            out[name] = d
        return out

    def summary(self, far: float) -> dict:
        """A compact line for logs: per protocol its AUC and exact VR at `far` (None when not measurable)."""
        out: dict = {"n": self.n_samples}
        for protocol in PROTOCOLS:
            p = self.protocols.get(protocol)
            vr = p.vr.get(far_key(far)) if p else None
            out[f"{protocol}_auc"] = p.auc if p else None
            out[f"{protocol}_vr@{far_key(far)}"] = vr.vr if vr is not None and vr.measurable else None
        out["hierarchy"] = self.hierarchy
        out["hierarchy_quads"] = self.quadruples
        return out


YAW_BANDS = tuple((f"{lo:g}-{hi:g}" if hi < 360 else f"{lo:g}+", lo, hi) for _, lo, hi in YAW_VIEWS)  # lo <= |yaw| < hi


def cosine_matrix(vectors: np.ndarray) -> np.ndarray:
    """Cosine similarities of the rows (float64; rows are normalised first)."""
    v = np.asarray(vectors, dtype=np.float64)
    v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    return v @ v.T


def evaluate(vectors: dict[VectorKind, np.ndarray], identities: Sequence[str], states: Sequence[str | None],
             fars: Sequence[float] = DEFAULT_FARS, appearance_dims: int = 0, yaws: Sequence[float | None] | None = None) -> EvaluationReport:
    """Both protocols (head similarity on head vectors when given, identity on id vectors), pair counts
    and hierarchy accuracy of labelled vectors, one row per sample. Head vectors are compared as the search
    compares them (`headsearch.models.scoring`: a sample without a face on its appearance part alone).

    Besides the two protocols' scores, `scores` keeps what calibrating a head model needs: head vectors on
    the identity protocol (`head_identity`), same look against other look of the same person (`looks`: R1
    vs R2), and, for a model with an appearance part, that part alone on same look against other people
    (`appearance`: R1 vs R3).
    With `yaws` (each sample's face turn in degrees, None where unknown), the identity protocol is also reported per
    yaw band (`bands`)."""
    report = EvaluationReport(n_samples=len(identities), n_identities=len(set(identities)))
    report.pairs = relation_counts(identities, states)
    if len(identities) < 2:
        report.problems.append(f"only {len(identities)} usable sample(s): no pairs to score")
        return report
    report.head_kind = VectorKind.HEAD if VectorKind.HEAD in vectors else VectorKind.ID
    sims = {VectorKind.ID: cosine_matrix(vectors[VectorKind.ID])}
    if report.head_kind == VectorKind.HEAD:
        face = has_face(vectors[VectorKind.ID], len(identities))
        sims[VectorKind.HEAD] = head_matrix(vectors[VectorKind.HEAD], face, appearance_dims)
    i, j, relation = pair_relations(identities, states)
    for protocol in PROTOCOLS:
        sim = sims[report.head_kind if protocol == "head" else VectorKind.ID]
        report.protocols[protocol] = evaluate_protocol(sim, i, j, relation, protocol, fars)
        report.scores[protocol] = protocol_scores(sim, i, j, relation, protocol)
    if yaws is not None:
        report.bands = yaw_bands(sims[VectorKind.ID], yaws, i, j, relation, fars)
    head = sims[report.head_kind][i, j]
    report.scores["looks"] = (head[relation == R1], head[relation == R2])
    if report.head_kind == VectorKind.HEAD:
        report.scores["head_identity"] = protocol_scores(sims[VectorKind.HEAD], i, j, relation, "identity")
        if appearance_dims:
            part = appearance_part(vectors[VectorKind.HEAD], appearance_dims).astype(np.float64)
            app = (part @ part.T)[i, j]
            report.scores["appearance"] = (app[relation == R1], app[relation == R3])
    pairs = report.pairs
    if pairs["R3"] == 0:
        report.problems.append("identity verification: no impostor pairs (R3): the set names a single identity; "
                               "add samples of other people")
    if pairs["R1"] + pairs["R2"] == 0:
        report.problems.append("identity verification: no genuine pairs (every identity has one sample)")
    if pairs["R1"] == 0:
        report.problems.append("head similarity: no genuine pairs (R1: two samples of one identity in one state)")
    if pairs["R2"] + pairs["R3"] == 0:
        report.problems.append("head similarity: no impostor pairs (R2 or R3)")
    report.hierarchy, report.quadruples = hierarchy_accuracy(sims[report.head_kind], identities, states)
    if report.quadruples == 0:
        report.problems.append("hierarchy accuracy: no (R1, R2, R3) triple around any sample "
                               "(needs an identity with two samples in one state and one in another, plus other people)")
    return report


def yaw_bands(sim: np.ndarray, yaws: Sequence[float | None], i: np.ndarray, j: np.ndarray, relation: np.ndarray,
              fars: Sequence[float] = DEFAULT_FARS) -> dict[str, ProtocolReport]:
    """The identity protocol per yaw band (`YAW_BANDS`), across a turn as a frontal photo asks for a turned sighting:
    the pairs of a frontal side (in the first band) and a side in the band; pairs with a side of unknown yaw, and
    pairs of two turned sides (most of them near-copies of one track's frames), in none."""
    known = np.array([y is not None for y in yaws], bool)
    turn = np.array([abs(y) if y is not None else np.nan for y in yaws], np.float64)
    pair_turn = np.fmax(turn[i], turn[j])
    both = known[i] & known[j] & (np.fmin(turn[i], turn[j]) < YAW_BANDS[0][2])
    out = {}
    for name, lo, hi in YAW_BANDS:
        m = both & (pair_turn >= lo) & (pair_turn < hi)
        out[name] = evaluate_protocol(sim, i[m], j[m], relation[m], "identity", fars)
    return out
