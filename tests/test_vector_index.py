"""The vector index against brute force on seeded synthetic data: exact search (ties allowed), the switch
to IVF with its tuned nprobe, ids kept through removals, saves and retraining, and the GPU fallback."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from conftest import FACES, library_db, needs_data, pixel_copy, query_json, run
from fake_model import FAKE_MODEL

from bench.search import exact_top_k, recall_at_k, synthetic_vectors
from headsearch.store.library import Library
from headsearch.vectors import vector_index
from headsearch.vectors.vector_index import TARGET_RECALL, VectorIndex, float32_dot_error, ivf_nlist
from schemas.records import VectorKind


def unit(rng, n, d=32):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def assert_exact(index: VectorIndex, ids: np.ndarray, db: np.ndarray, queries: np.ndarray, k: int) -> None:
    """Tie-aware: the k returned scores are the k best true scores, and each returned id has its returned score."""
    scores, found = index.search(queries, k)
    true = (queries.astype(np.float64) @ db.T.astype(np.float64))
    where = {int(i): p for p, i in enumerate(ids)}
    tol = 2 * float32_dot_error(db.shape[1])
    for q in range(len(queries)):
        assert len(set(found[q].tolist())) == k and (found[q] >= 0).all()
        best = np.sort(true[q])[::-1][:k]
        assert np.allclose(scores[q], best, atol=tol)
        assert np.allclose([true[q, where[int(i)]] for i in found[q]], scores[q], atol=tol)


def recall_of(index: VectorIndex, ids: np.ndarray, db: np.ndarray, queries: np.ndarray, k: int = 10) -> float:
    """recall@k of the index against exact float64 search (ties within float32 rounding count)."""
    truth, kth = exact_top_k(db, queries, k)
    _, found = index.search(queries, k)
    position = {int(i): p for p, i in enumerate(ids)}
    found_rows = np.vectorize(lambda i: position.get(int(i), -1))(found)
    return recall_at_k(found_rows, truth, db, queries, kth)


def test_flat_matches_brute_force_with_ties_and_removes_by_id(tmp_path):
    rng = np.random.default_rng(0)
    db, q = unit(rng, 500), unit(rng, 20)
    db[250:300] = db[200:250]  # 50 exact duplicates: ties the index may order either way
    q[:5] = db[200:205]
    ids = np.arange(1000, 1500, dtype=np.int64)
    index = VectorIndex(32)
    index.add(ids, db)
    assert_exact(index, ids, db, q, 5)
    assert index.remove(ids[:100]) == 100 and len(index) == 400
    assert_exact(index, ids[100:], db[100:], q, 5)
    index.save(tmp_path / "v.faiss", generation=7)
    loaded, generation = VectorIndex.load(tmp_path / "v.faiss")
    assert generation == 7 and loaded.kind == "flat" and sorted(loaded.ids().tolist()) == ids[100:].tolist()
    assert json.loads((tmp_path / "v.json").read_text()) == {"generation": 7, "count": 400, "dim": 32, "kind": "flat"}


def test_ivf_reaches_its_recall_keeps_ids_through_removals_and_saves(tmp_path):
    db, queries = synthetic_vectors(12_000, 300, dim=32, seed=3)
    ids = np.random.default_rng(1).permutation(10**6)[:12_000].astype(np.int64)
    index = VectorIndex(32)
    index.add(ids, db)
    assert not index.make_approximate_if_large(approximate_from=20_000) and index.kind == "flat"
    assert index.make_approximate_if_large(approximate_from=10_000) and index.kind == "ivf"
    assert index.nlist == ivf_nlist(12_000) and 1 <= index.nprobe <= index.nlist
    assert index.tuning.recall >= TARGET_RECALL and index.tuning.queries == 500
    assert sorted(index.ids().tolist()) == sorted(ids.tolist())
    # recall on queries the tuning never saw, against brute force
    assert recall_of(index, ids, db, queries) >= 0.95
    # Removing from an IVF keeps every other vector under its own id (IndexIDMap2 over an IVF did not).
    assert index.remove(ids[:500]) == 500 and len(index) == 11_500
    _, found = index.search(db[500:800], 1)
    assert (found[:, 0] == ids[500:800]).all()
    assert -1 not in found and not np.isin(index.search(db[:100], 10)[1], ids[:500]).any()
    stored_ids, stored = index.contents()
    order = np.argsort(stored_ids)
    assert (stored_ids[order] == np.sort(ids[500:])).all()
    assert np.array_equal(stored[order], db[500:][np.argsort(ids[500:])])
    index.add(np.array([2_000_000], np.int64), db[:1])
    index.save(tmp_path / "ivf.faiss", generation=1)
    loaded, generation = VectorIndex.load(tmp_path / "ivf.faiss")
    assert generation == 1 and loaded.kind == "ivf" and len(loaded) == 11_501
    assert (loaded.nlist, loaded.nprobe) == (index.nlist, index.nprobe)
    assert loaded.describe() == index.describe()
    assert loaded.search(db[:1], 1)[1][0, 0] == 2_000_000
    assert recall_of(loaded, ids[500:], db[500:], queries) >= 0.95


def test_ivf_is_retrained_as_the_library_grows():
    db, queries = synthetic_vectors(10_000, 200, dim=32, seed=4)
    ids = np.arange(10_000, dtype=np.int64) * 7
    index = VectorIndex(32)
    index.add(ids[:2_000], db[:2_000])
    assert index.make_approximate_if_large(approximate_from=2_000)
    first = index.nlist
    index.add(ids[2_000:3_000], db[2_000:3_000])
    assert not index.make_approximate_if_large(approximate_from=2_000) and index.nlist == first  # 1.5x: kept
    index.add(ids[3_000:], db[3_000:])
    assert index.make_approximate_if_large(approximate_from=2_000)  # 5x: new lists for the new size
    assert index.nlist == ivf_nlist(10_000) > first
    assert sorted(index.ids().tolist()) == ids.tolist()
    assert recall_of(index, ids, db, queries) >= 0.95


def test_an_ivf_index_of_0_1_0_is_rebuilt(tmp_path):
    import faiss

    rng = np.random.default_rng(5)
    db = unit(rng, 2_000, 16)
    quantizer = faiss.IndexFlatIP(16)
    ivf = faiss.IndexIVFFlat(quantizer, 16, 16, faiss.METRIC_INNER_PRODUCT)
    ivf.train(db)
    old = faiss.IndexIDMap2(ivf)
    old.add_with_ids(db, np.arange(2_000, dtype=np.int64))
    old.remove_ids(faiss.IDSelectorBatch(np.arange(10, dtype=np.int64)))  # its id table is now shifted
    faiss.write_index(old, str(tmp_path / "old.faiss"))
    (tmp_path / "old.json").write_text(json.dumps({"generation": 3, "count": 1990, "dim": 16}))
    loaded, generation = VectorIndex.load(tmp_path / "old.faiss")
    assert generation == -1 and len(loaded) == 0 and loaded.kind == "flat" and loaded.dim == 16


@needs_data
@pytest.mark.slow  # real photos: its query needs heads found
def test_a_library_with_a_0_1_0_ivf_index_answers_from_its_database(tmp_path):
    """A library whose saved IVF index has the shifted ids of 0.1.0 answers right: the index is rebuilt."""
    import faiss

    lib = tmp_path / "lib"
    amy, raj = FACES / "amy" / "amy1.png", FACES / "raj" / "raj1.png"
    run("index", amy, raj, "--library", lib, "--model", FAKE_MODEL, "-q")  # the model is incidental: the tests' fake
    with library_db(lib) as con:
        rows = con.execute("select id, embedding from vectors where kind = 'id' order by id").fetchall()
    ids = np.array([r[0] for r in rows], np.int64)
    vectors = np.stack([np.frombuffer(r[1], dtype="<f4") for r in rows])
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(vectors.shape[1]), vectors.shape[1], 1, faiss.METRIC_INNER_PRODUCT)
    ivf.train(vectors)
    old = faiss.IndexIDMap2(ivf)
    old.add_with_ids(vectors, ids[::-1].copy())  # each vector under the other's id, as after a removal in 0.1.0
    faiss.write_index(old, str(lib / "vectors_id.faiss"))  # the generation in vectors_id.json still matches
    hits = query_json(lib, pixel_copy(amy, tmp_path / "query"), "-k", "2")  # the query file itself is never a hit
    assert Path(hits[0]["video"]).name == "amy1.png" and hits[0]["score"] > 0.99
    index = Library.open(lib).vector_index(VectorKind.ID)
    assert index.kind == "flat" and sorted(index.ids().tolist()) == ids.tolist()


def test_gpu_copy_failures_fall_back_to_the_cpu(monkeypatch, caplog):
    """No GPU here: a faiss that reports one but cannot copy the index, then a GPU copy whose search fails."""
    import faiss

    db, queries = synthetic_vectors(3_000, 50, dim=32, seed=6)
    ids = np.arange(3_000, dtype=np.int64) + 10
    index = VectorIndex(32)
    index.add(ids, db)
    index.make_approximate_if_large(approximate_from=1_000)
    expected = index.search(queries, 10)
    monkeypatch.setattr(vector_index, "gpu_count", lambda: 1)
    with caplog.at_level(logging.WARNING, logger="headsearch.vectors.vector_index"):
        got = index.search(queries, 10)  # faiss-cpu's index_cpu_to_all_gpus raises
    assert "GPU search unavailable, using the CPU" in caplog.text
    assert np.array_equal(got[1], expected[1]) and np.array_equal(got[0], expected[0])
    caplog.clear()
    # A copy that is made but fails when searched (here: a faiss index of another dimension).
    index.add(np.array([1], np.int64), db[:1])  # any change drops the copy
    monkeypatch.setattr(faiss, "index_cpu_to_all_gpus", lambda cpu: faiss.IndexFlatIP(8), raising=False)
    with caplog.at_level(logging.WARNING, logger="headsearch.vectors.vector_index"):
        scores, found = index.search(queries[:1], 3)
        again = index.search(queries[:1], 3)
    assert caplog.text.count("GPU search failed, using the CPU") == 1  # then the CPU for good
    assert np.array_equal(found, again[1]) and found[0, 0] in ids


@pytest.mark.parametrize("n", [1, 11])
def test_tiny_ivf(n):
    """Tuning needs k+1 vectors: smaller indexes still switch and answer."""
    db = unit(np.random.default_rng(n), n, 8)
    index = VectorIndex(8)
    index.add(np.arange(n, dtype=np.int64), db)
    assert index.make_approximate_if_large(approximate_from=1)
    assert index.search(db[:1], 1)[1][0, 0] == 0


def test_single_queries_search_on_one_thread():
    import faiss

    from headsearch.vectors.vector_index import SINGLE_THREAD_BELOW, search_threads

    before = faiss.omp_get_max_threads()
    with search_threads(1):
        assert faiss.omp_get_max_threads() == 1
    with search_threads(SINGLE_THREAD_BELOW):
        assert faiss.omp_get_max_threads() == before
    assert faiss.omp_get_max_threads() == before
