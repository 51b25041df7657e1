"""The vector index: exact search against brute force, the switch to IVF, ids kept through it."""
from __future__ import annotations

import numpy as np

from headsearch.vector_index import VectorIndex


def unit(rng, n, d=32):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_flat_matches_brute_force_and_removes_by_id(tmp_path):
    rng = np.random.default_rng(0)
    db, q = unit(rng, 500), unit(rng, 20)
    ids = np.arange(1000, 1500, dtype=np.int64)
    index = VectorIndex(32)
    index.add(ids, db)
    scores, found = index.search(q, 5)
    truth = np.argsort(-(q @ db.T), axis=1)[:, :5]
    assert (found == ids[truth]).all()
    assert np.allclose(scores, np.take_along_axis(q @ db.T, truth, axis=1), atol=1e-5)
    assert index.remove(ids[:100]) == 100 and len(index) == 400
    index.save(tmp_path / "v.faiss", generation=7)
    loaded, generation = VectorIndex.load(tmp_path / "v.faiss")
    assert generation == 7 and sorted(loaded.ids().tolist()) == ids[100:].tolist()


def test_large_index_switches_to_ivf_keeping_ids_and_recall(tmp_path):
    rng = np.random.default_rng(1)
    centres = unit(rng, 40)
    db = centres[rng.integers(0, 40, 4000)] + 0.3 * unit(rng, 4000)
    db /= np.linalg.norm(db, axis=1, keepdims=True)
    ids = rng.permutation(100_000)[:4000].astype(np.int64)
    index = VectorIndex(32)
    index.add(ids, db)
    exact_scores, exact = index.search(db[:50], 10)
    assert not index.make_approximate_if_large(approximate_from=5000)
    assert index.make_approximate_if_large(approximate_from=3000) and index.kind == "ivf"
    assert sorted(index.ids().tolist()) == sorted(ids.tolist())
    _, approx = index.search(db[:50], 10)
    recall = np.mean([len(set(a) & set(e)) / 10 for a, e in zip(approx, exact, strict=True)])
    assert recall > 0.9
    assert (approx[:, 0] == ids[:50]).all()  # each vector finds itself
    index.remove(ids[:10])
    index.add(np.array([999_999], np.int64), db[:1])
    index.save(tmp_path / "ivf.faiss", generation=1)
    loaded, _ = VectorIndex.load(tmp_path / "ivf.faiss")
    assert loaded.kind == "ivf" and len(loaded) == 3991
    assert loaded.search(db[:1], 1)[1][0, 0] == 999_999
