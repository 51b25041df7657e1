"""Tests for headsearch.evaluation.metrics against brute-force reference implementations."""

import itertools
import json
import math

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score, roc_curve

from headsearch.evaluation.metrics import (
    R1,
    R2,
    R3,
    evaluate_protocol,
    hierarchy_accuracy,
    pair_relations,
    protocol_scores,
    roc_auc,
    roc_points,
    vr_at_far,
    vr_at_far_insightface,
)


def brute_vr_at_far(genuine, impostor, far):
    """Reference: smallest candidate threshold t with #(impostor > t) <= floor(far*n), scanned in a loop."""
    k = int(far * len(impostor) + 1e-9)
    if k < 1 or len(genuine) == 0:
        return None, None
    best = None
    for t in sorted(set(impostor.tolist())):  # ascending: first admissible one is the smallest
        if sum(1 for s in impostor if s > t) <= k:
            best = t
            break
    return best, sum(1 for g in genuine if g > best) / len(genuine)


def brute_insightface(genuine, impostor, far):
    """Reference for the ijb_11.py idiom: min over (|fpr - far|, index) on reversed ROC arrays."""
    labels = np.r_[np.ones(len(genuine)), np.zeros(len(impostor))]
    fpr, tpr, thr = roc_curve(labels, np.r_[genuine, impostor])
    fpr, tpr, thr = np.flipud(fpr), np.flipud(tpr), np.flipud(thr)
    _, idx = min(zip(abs(fpr - far), range(len(fpr)), strict=True))
    return tpr[idx], thr[idx]


@pytest.mark.parametrize("decimals", [None, 1, 2])
@pytest.mark.parametrize("far", [1e-1, 1e-2, 3e-2])
def test_vr_at_far_matches_brute_force(decimals, far):
    rng = np.random.default_rng(0)
    for _ in range(5):
        genuine = rng.normal(0.6, 0.2, size=rng.integers(20, 200))
        impostor = rng.normal(0.2, 0.2, size=rng.integers(100, 600))
        if decimals is not None:
            genuine, impostor = genuine.round(decimals), impostor.round(decimals)
        res = vr_at_far(genuine, impostor, far)
        thr, vr = brute_vr_at_far(genuine, impostor, far)
        assert res.measurable
        assert res.threshold == pytest.approx(thr)
        assert res.vr == pytest.approx(vr)
        assert np.count_nonzero(impostor > res.threshold) <= math.floor(far * impostor.size + 1e-9)
        assert (res.n_genuine, res.n_impostor) == (genuine.size, impostor.size)


def test_vr_at_far_exact_without_ties():
    impostor = np.arange(100, dtype=float)  # 0..99, all distinct
    genuine = np.array([97.5, 98.0, 98.5, 99.5])
    res = vr_at_far(genuine, impostor, 1e-2)  # k = 1: only 99 may exceed -> threshold 98
    assert res.threshold == 98.0
    assert res.vr == pytest.approx(0.5)  # 98.5 and 99.5 strictly above 98
    res = vr_at_far(genuine, impostor, 3e-2)  # k = 3 -> threshold 96, exactly 3 above
    assert res.threshold == 96.0 and res.vr == 1.0


def test_vr_at_far_ties_are_conservative():
    impostor = np.array([0.0] * 95 + [0.5] * 5)  # a tie group straddles the k = 2 boundary
    genuine = np.array([0.2, 0.6])
    res = vr_at_far(genuine, impostor, 2e-2)
    assert res.threshold == 0.5  # must not drop to 0.0, which would accept 5 impostors > k = 2
    assert np.count_nonzero(impostor > res.threshold) == 0
    assert res.vr == pytest.approx(0.5)


def test_vr_at_far_too_few_impostors():
    rng = np.random.default_rng(1)
    genuine = rng.normal(size=30)
    res = vr_at_far(genuine, rng.normal(size=50), 1e-2)
    assert not res.measurable and res.vr is None and res.threshold is None
    assert res.n_impostor == 50
    res = vr_at_far(genuine, rng.normal(size=99), 1e-2)
    assert not res.measurable
    res = vr_at_far(genuine, rng.normal(size=100), 1e-2)
    assert res.measurable and res.vr is not None
    res = vr_at_far(genuine, rng.normal(size=999), 1e-3)
    assert not res.measurable
    assert 3e-4 * 10_000 < 3  # float product is 2.9999...; k must still be 3, not 2
    imp = np.arange(10_000, dtype=float)
    assert vr_at_far(genuine, imp, 3e-4).threshold == 9996.0


def test_vr_at_far_no_genuine_and_bad_far():
    assert not vr_at_far(np.array([]), np.zeros(1000), 1e-2).measurable
    with pytest.raises(ValueError):
        vr_at_far(np.zeros(3), np.zeros(3), 0.0)
    with pytest.raises(ValueError):
        vr_at_far(np.zeros(3), np.zeros(3), 1.0)


@pytest.mark.parametrize("decimals", [None, 1])
def test_vr_at_far_insightface_matches_reference(decimals):
    rng = np.random.default_rng(2)
    for _ in range(10):
        genuine = rng.normal(0.6, 0.2, size=rng.integers(10, 300))
        impostor = rng.normal(0.2, 0.2, size=rng.integers(50, 3000))
        if decimals is not None:
            genuine, impostor = genuine.round(decimals), impostor.round(decimals)
        for far in (1e-1, 1e-2, 1e-3):
            res = vr_at_far_insightface(genuine, impostor, far)
            tpr, thr = brute_insightface(genuine, impostor, far)
            assert res.vr == pytest.approx(tpr)
            assert res.threshold == thr
            assert res.measurable == (impostor.size * far >= 1 - 1e-9)
            assert res.vr is not None  # reported even when not measurable


def test_vr_at_far_insightface_picks_nearest_point():
    impostor = np.arange(1000, dtype=float) / 1000  # fpr steps of 1e-3
    genuine = np.linspace(0.9, 1.1, 50)
    res = vr_at_far_insightface(genuine, impostor, 1e-2)
    assert res.measurable
    assert np.mean(impostor >= res.threshold) == pytest.approx(1e-2, abs=1e-3)
    assert not vr_at_far_insightface(genuine, impostor[:500], 1e-3).measurable


@pytest.mark.parametrize("decimals", [None, 1, 0])
def test_roc_auc_matches_sklearn(decimals):
    rng = np.random.default_rng(3)
    for _ in range(10):
        genuine = rng.normal(1.0, 1.0, size=rng.integers(1, 200))
        impostor = rng.normal(0.0, 1.0, size=rng.integers(1, 400))
        if decimals is not None:
            genuine, impostor = genuine.round(decimals), impostor.round(decimals)
        labels = np.r_[np.ones(genuine.size), np.zeros(impostor.size)]
        expected = roc_auc_score(labels, np.r_[genuine, impostor])
        assert roc_auc(genuine, impostor) == pytest.approx(expected, abs=1e-12)


def test_roc_auc_hand_values():
    assert roc_auc(np.array([1.0, 2.0]), np.array([0.0])) == 1.0
    assert roc_auc(np.array([0.0]), np.array([1.0, 2.0])) == 0.0
    assert roc_auc(np.array([1.0]), np.array([1.0])) == 0.5
    assert roc_auc(np.array([1.0, 3.0]), np.array([1.0, 2.0])) == pytest.approx((0.5 + 0 + 1 + 1) / 4)
    with pytest.raises(ValueError):
        roc_auc(np.array([]), np.array([1.0]))


def test_roc_points_shape_and_range():
    rng = np.random.default_rng(4)
    fpr, tpr, thr = roc_points(rng.normal(1, 1, 100), rng.normal(0, 1, 500))
    assert fpr.shape == tpr.shape == thr.shape
    assert fpr[0] == 0 and fpr[-1] == 1 and tpr[-1] == 1
    assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)


def test_pair_relations_hand_example():
    ids = ["a", "a", "a", "b", "a", "a"]
    states = ["x", "x", "y", "x", None, ""]
    i, j, rel = pair_relations(ids, states)
    got = {(int(p), int(q)): int(r) for p, q, r in zip(i, j, rel, strict=True)}
    assert len(got) == 15 and all(p < q for p, q in got)
    expected = {
        (0, 1): R1, (0, 2): R2, (0, 3): R3, (0, 4): R2, (0, 5): R2,
        (1, 2): R2, (1, 3): R3, (1, 4): R2, (1, 5): R2,
        (2, 3): R3, (2, 4): R2, (2, 5): R2,
        (3, 4): R3, (3, 5): R3,
        (4, 5): R1,  # None and '' are the same "unknown" state of identity a
    }
    assert got == expected


def test_protocol_scores_splits():
    ids = ["a", "a", "a", "b"]
    states = ["x", "x", "y", "x"]
    sim = np.arange(16, dtype=float).reshape(4, 4)  # sim[p, q] = 4p + q identifies the pair
    i, j, rel = pair_relations(ids, states)
    # pairs: (0,1) R1=1, (0,2) R2=2, (0,3) R3=3, (1,2) R2=6, (1,3) R3=7, (2,3) R3=11
    gen, imp = protocol_scores(sim, i, j, rel, "head")
    assert sorted(gen) == [1] and sorted(imp) == [2, 3, 6, 7, 11]
    gen, imp = protocol_scores(sim, i, j, rel, "identity")
    assert sorted(gen) == [1, 2, 6] and sorted(imp) == [3, 7, 11]
    with pytest.raises(ValueError):
        protocol_scores(sim, i, j, rel, "face")


def brute_hierarchy(sim, ids, states):
    """Reference: enumerate every (anchor, p1, p2, n) quadruple."""
    st = ["" if s is None else s for s in states]
    n = len(ids)
    hits = total = 0
    for a, p1, p2, q in itertools.product(range(n), repeat=4):
        if len({a, p1, p2, q}) < 4:
            continue
        if not (ids[p1] == ids[a] and st[p1] == st[a]):
            continue
        if not (ids[p2] == ids[a] and st[p2] != st[a]):
            continue
        if ids[q] == ids[a]:
            continue
        total += 1
        hits += sim[a, p1] > sim[a, p2] > sim[a, q]
    return (hits / total if total else None), total


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("decimals", [None, 1])
def test_hierarchy_accuracy_matches_brute_force(seed, decimals):
    rng = np.random.default_rng(seed)
    ids = [f"id{k}" for k in rng.integers(0, 3, size=12)]
    states = [["s0", "s1", None][k] for k in rng.integers(0, 3, size=12)]
    emb = rng.normal(size=(12, 4))
    sim = emb @ emb.T + rng.normal(scale=0.3, size=(12, 12))  # deliberately non-symmetric
    if decimals is not None:
        sim = sim.round(decimals)
    acc, n = hierarchy_accuracy(sim, ids, states)
    ref_acc, ref_n = brute_hierarchy(sim, ids, states)
    assert n == ref_n and n > 0
    assert acc == pytest.approx(ref_acc)


def test_hierarchy_accuracy_perfect_and_empty():
    ids = ["a", "a", "a", "b"]
    states = ["x", "x", "y", "x"]
    sim = np.array([[0, 3, 2, 1], [3, 0, 2, 1], [2, 2, 0, 1], [1, 1, 1, 0]], dtype=float)
    assert hierarchy_accuracy(sim, ids, states) == (1.0, 2)  # anchors 0 and 1
    sim[0, 2] = 3.0  # tie with the R1 partner -> counted as a failure
    assert hierarchy_accuracy(sim, ids, states) == (0.5, 2)
    assert hierarchy_accuracy(sim, ["a", "a", "b", "b"], ["x"] * 4) == (None, 0)


def test_evaluate_protocol_report_is_json_serialisable():
    rng = np.random.default_rng(5)
    n = 60
    ids = [f"id{k}" for k in rng.integers(0, 6, size=n)]
    states = [["s0", "s1"][k] for k in rng.integers(0, 2, size=n)]
    emb = rng.normal(size=(n, 8))
    sim = emb @ emb.T
    i, j, rel = pair_relations(ids, states)
    report = evaluate_protocol(sim, i, j, rel, "identity")
    gen, imp = protocol_scores(sim, i, j, rel, "identity")
    assert report.n_genuine == gen.size and report.n_impostor == imp.size
    assert report.auc == pytest.approx(roc_auc(gen, imp))
    assert set(report.vr) == set(report.vr_insightface) == {"1e-2", "1e-3", "1e-4"}
    assert report.vr["1e-2"] == vr_at_far(gen, imp, 1e-2)
    d = json.loads(json.dumps(report.to_dict()))
    assert d["vr"]["1e-4"] is None and d["thresholds"]["1e-4"] is None  # 1770 pairs < 1e4
    assert d["vr"]["1e-2"] == report.vr["1e-2"].vr and d["measurable"]["1e-2"] is True
    assert d["vr_insightface"]["1e-4"] is not None
    assert d["n_genuine"] + d["n_impostor"] == n * (n - 1) // 2


def test_evaluate_protocol_empty_side_gives_no_auc():
    ids, states = ["a", "b", "c"], ["x", "x", "x"]
    i, j, rel = pair_relations(ids, states)
    report = evaluate_protocol(np.eye(3), i, j, rel, "head")
    assert report.auc is None and report.n_genuine == 0
    assert all(not r.measurable for r in report.vr.values())
    assert json.loads(json.dumps(report.to_dict()))["auc"] is None
