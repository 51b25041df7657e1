"""Calibrated bars: a second "same person" bar on the head score is kept only where it accepts more genuine pairs than
the identity bar alone with the false accepts of both held to the FAR together, and a library sets both for its size."""
from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from headsearch.evaluation.thresholds import ImpostorTail, Thresholds, head_route, read_thresholds_file
from schemas.records import Tier

FAR = 1e-3
IMPOSTORS = 20_000


def _accepted(route: dict, scores_id: np.ndarray, scores_head: np.ndarray) -> np.ndarray:
    return (scores_id > route["identity"]) | (scores_head > route["head_identity"])


def test_a_head_bar_that_finds_what_the_identity_bar_misses_is_kept_within_the_far():
    rng = np.random.default_rng(0)
    imp_id, imp_head = rng.normal(0, 1, IMPOSTORS), rng.normal(0, 1, IMPOSTORS)  # independent: the union doubles
    # Half the genuine pairs are clear by their face, the other half only by their head (a face the model misses).
    gen_id = np.r_[rng.normal(5, 0.5, 500), rng.normal(0, 1, 500)]
    gen_head = np.r_[rng.normal(0, 1, 500), rng.normal(5, 0.5, 500)]
    route = head_route((gen_id, imp_id), (gen_head, imp_head), FAR)
    assert route["kept"] and route["vr_either"] > route["vr_identity_alone"] + 0.4
    assert int(_accepted(route, imp_id, imp_head).sum()) <= int(FAR * IMPOSTORS)  # both bars together hold to the FAR
    assert 1.5 <= route["union_factor"] <= 2.5  # ...each set at about half of it
    assert route["identity"] > -np.sort(-imp_id)[int(FAR * IMPOSTORS)]  # stricter than the identity bar alone


def test_a_head_bar_that_only_echoes_the_identity_score_is_left_out():
    rng = np.random.default_rng(1)
    imp_id = rng.normal(0, 1, IMPOSTORS)
    imp_head = imp_id + rng.normal(0, 0.5, IMPOSTORS)  # the head score holds the identity score, plus noise
    gen_id = rng.normal(3.5, 1, 2000)
    gen_head = gen_id + rng.normal(0, 0.5, 2000)
    route = head_route((gen_id, imp_id), (gen_head, imp_head), FAR)
    assert not route["kept"] and route["vr_either"] < route["vr_identity_alone"]


def _thresholds(**extra) -> Thresholds:
    tail = ImpostorTail.of(np.linspace(0.0, 0.5, IMPOSTORS))
    return Thresholds(FAR, 0.45, 0.6, "m", "v", tails={"identity": tail, **extra.pop("tails", {})}, **extra)


def test_a_library_sets_both_bars_for_its_size_within_one_budget():
    head_tail = ImpostorTail.of(np.linspace(0.1, 0.6, IMPOSTORS))
    both = _thresholds(head_identity=0.55, union_factor=2.0, tails={"head_identity": head_tail}).for_library(100)
    assert both.far == pytest.approx(0.05 / 100)
    assert both.identity == pytest.approx(_thresholds().tails["identity"].threshold(0.05 / 100 / 2.0)[0])
    assert both.head_identity == pytest.approx(head_tail.threshold(0.05 / 100 / 2.0)[0])
    alone = _thresholds().for_library(100)  # no head bar: the identity bar has the whole budget
    assert alone.head_identity is None and alone.identity < both.identity


def test_without_a_head_bar_a_high_head_score_alone_is_not_the_same_person():
    bars = _thresholds(appearance=0.8)
    assert bars.tier(0.40, head_score=0.9) == Tier.OTHER_PERSON  # a look-alike: the face says no
    assert bars.tier(0.50, head_score=0.9) == Tier.SAME_LOOK
    assert bars.tier(0.50, head_score=0.5) == Tier.OTHER_LOOK
    assert bars.tier(None, appearance_score=0.85) == Tier.SAME_LOOK  # no face on one side: the appearance bar


def test_a_head_bar_calibrated_on_a_budget_of_its_own_is_left_out(tmp_path):
    tail = ImpostorTail.of(np.linspace(0.0, 0.5, IMPOSTORS)).to_dict()
    record = {"far": FAR, "identity": 0.45, "same_look": 0.6, "model": "m", "version": "v", "head_identity": 0.5,
              "tails": {"identity": tail, "head_identity": tail}}
    old = tmp_path / "old.json"
    old.write_text(json.dumps(record))  # written before calibration decided on the head bar (no head_route)
    said, logger = _Said(), logging.getLogger("headsearch.evaluation.thresholds")
    level = logger.level
    logger.addHandler(said)
    logger.setLevel(logging.WARNING)  # the CLI (run by other tests in this process) quiets headsearch's loggers without -v
    try:
        read = read_thresholds_file(old)
    finally:
        logger.removeHandler(said)
        logger.setLevel(level)
    assert read.head_identity is None and "head_identity" not in read.tails
    assert any("leaving out its head-identity bar" in m for m in said.messages)
    kept = tmp_path / "kept.json"
    kept.write_text(json.dumps({**record, "head_route": {"kept": True}, "union_factor": 1.7}))
    read = read_thresholds_file(kept)
    assert read.head_identity == 0.5 and read.union_factor == 1.7


class _Said(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
