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
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from headsearch.basics.errors import HeadsearchError
from headsearch.basics.files import write_json_atomic
from headsearch.evaluation.metrics import PROTOCOL_TITLES, needed_impostors, vr_at_far
from headsearch.evaluation.verification import EvaluationReport
from headsearch.models.registry import find_spec
from schemas.records import ModelInfo, Tier

log = logging.getLogger(__name__)

THRESHOLDS_FILE = "thresholds.json"
RULE = ("accept when score > threshold (exact VR@FAR: threshold = (k+1)-th highest impostor score, "
        "k = floor(FAR x impostors))")


@dataclass(frozen=True)
class Thresholds:
    """Score thresholds at one false-accept rate, for one model."""

    far: float
    identity: float  # same person strictly above this z_id score
    same_look: float  # same look strictly above this score (z_head for dual-CLS models, else z_id)
    model: str
    version: str

    def tier(self, id_score: float, head_score: float | None) -> Tier:
        if id_score <= self.identity:  # accepted only strictly above, as the thresholds were measured
            return Tier.OTHER_PERSON
        look = head_score if head_score is not None else id_score
        return Tier.SAME_LOOK if look > self.same_look else Tier.OTHER_LOOK

    def holds_for(self, model: ModelInfo) -> bool:
        return model.same_vectors_as(ModelInfo(self.model, self.version, model.dim))


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


def thresholds_for(library_root: Path, model: ModelInfo) -> Thresholds | None:
    """The thresholds a library's queries use: its own (`bench --calibrate`), else those shipped with
    its model (in the package for a registered model, beside the file for one loaded from a file);
    None when the scores are uncalibrated. Each must name the model's exact version."""
    own = read_thresholds(library_root, model)
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
        thresholds = Thresholds(float(d["far"]), float(d["identity"]), float(d["same_look"]), d["model"], d["version"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("%s: ignoring unreadable thresholds (%s)", path, e)
        return None
    if model is not None and not thresholds.holds_for(model):
        log.warning("%s: ignoring thresholds of another model (%s %s)", path, thresholds.model, thresholds.version)
        return None
    return thresholds


def calibrate(evaluation: EvaluationReport, far: float, model: ModelInfo) -> dict:
    """Exact thresholds at `far` (identity on the identity protocol, same_look on the head protocol),
    as the record `write_thresholds` stores; HeadsearchError when not measurable at that FAR."""
    results = {}
    for protocol in ("identity", "head"):
        genuine, impostor = evaluation.scores.get(protocol, (np.zeros(0), np.zeros(0)))
        r = vr_at_far(genuine, impostor, far)
        if not r.measurable:
            raise HeadsearchError(
                f"cannot calibrate at FAR {far:g}: the {PROTOCOL_TITLES[protocol]} protocol has {impostor.size} impostor "
                f"and {genuine.size} genuine pairs; at least {needed_impostors(far)} impostor pairs and one genuine pair "
                f"are needed (use a larger set or a higher FAR)")
        results[protocol] = r
    return {
        "far": float(far),
        "identity": results["identity"].threshold,
        "same_look": results["head"].threshold,
        "model": model.name,
        "version": model.version,
        "same_look_vectors": str(evaluation.head_kind),
        "rule": RULE,
        "vr": {"identity": results["identity"].vr, "same_look": results["head"].vr},
        "counts": {
            "samples": evaluation.n_samples, "identities": evaluation.n_identities, "pairs": dict(evaluation.pairs),
            "identity": {"genuine": results["identity"].n_genuine, "impostor": results["identity"].n_impostor},
            "same_look": {"genuine": results["head"].n_genuine, "impostor": results["head"].n_impostor},
        },
        "calibrated_at": time.time(),
    }


def write_thresholds(folder: Path, record: dict) -> Path:
    """Write `<folder>/thresholds.json` atomically."""
    return write_thresholds_file(thresholds_path(folder), record)


def write_thresholds_file(path: Path, record: dict) -> Path:
    """Write a thresholds record to `path` atomically."""
    write_json_atomic(Path(path), record)
    return Path(path)
