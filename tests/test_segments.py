"""The library's vectors past memory (on-disk segments) against exact search on seeded synthetic vectors: the
same answers as the in-memory index through adds, removals, flushes, merges and reopening; the recall its
tuning promises; a writer killed (kill -9) at random moments, merges included, leaves the last good set; and
through the real CLI, a library forced into segments answers as the in-memory library does."""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import numpy as np
import pytest
from conftest import AMY_DIR, EXAMPLES, HAMILTON, RETALKING, needs_data, pixel_copy, run

from bench.search import exact_top_k, recall_at_k, synthetic_vectors
from headsearch.vectors.segment_files import SegmentRecipe, pq_size
from headsearch.vectors.segments import STATE, SegmentedIndex
from headsearch.vectors.vector_index import VectorIndex

pytestmark = pytest.mark.slow  # media-heavy: left out of the fast tier (`-m "not slow"`)

ROOT = Path(__file__).resolve().parents[1]


def exact_index(ids: np.ndarray, vectors: np.ndarray) -> VectorIndex:
    index = VectorIndex(vectors.shape[1])
    index.add(ids, vectors)
    return index


def assert_same_answers(store: SegmentedIndex, reference: VectorIndex, queries: np.ndarray, ks=(1, 10, 50)) -> None:
    """Each query alone (as the query engine searches): the same ids in the same order, the same scores to the bit."""
    assert len(store) == len(reference)
    for k in ks:
        for q in queries:
            got, want = store.search(q, k), reference.search(q, k)
            assert np.array_equal(got[1], want[1]) and np.array_equal(got[0], want[0]), (k, got, want)


def folder_files(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_pq_size_divides_the_dimension():
    assert [pq_size(d) for d in (128, 512, 1088, 100, 97)] == [32, 32, 68, 25, 1]


def test_segments_answer_as_exact_search_through_adds_removals_merges_and_reopening(tmp_path):
    db, queries = synthetic_vectors(9000, 30, 64, seed=3)
    ids = np.arange(9000, dtype=np.int64) * 3 + 11  # ids are not row numbers
    folder = tmp_path / "vectors_id.segments"
    recipe = SegmentRecipe(max_segments=3)
    store = SegmentedIndex.create(folder, 64, [(ids[:4000], db[:4000])], generation=1, recipe=recipe)
    live = dict(zip(ids[:4000].tolist(), range(4000), strict=True))
    assert store.describe()["segments"] == 1 and store.nprobe == store.nlist  # small: every list is searched
    rng = np.random.default_rng(0)
    for number, start in enumerate(range(4000, 9000, 1000)):
        store.add(ids[start:start + 1000], db[start:start + 1000])
        live.update(zip(ids[start:start + 1000].tolist(), range(start, start + 1000), strict=True))
        # removals from the oldest segment (past its compaction share once), from newer segments and from the tail
        gone = rng.choice(sorted(live), size=300 if number != 2 else 1500, replace=False)
        assert store.remove(np.concatenate([gone, gone[:5], [10**12]])) == len(gone)  # twice or unknown: not counted
        for i in gone.tolist():
            del live[i]
        store.save(generation=number + 2, tail_cap=0)  # the tail becomes a segment, neighbours merge past 3
        assert len(store._segments) <= 3 and not len(store._tail)
        reference = exact_index(np.array(list(live)), db[list(live.values())])
        assert_same_answers(store, reference, queries[:10])
        assert sorted(store.ids().tolist()) == sorted(live) and store.id_checksum() == reference.id_checksum()
        assert folder_files(folder) == store.named_files()  # what the saved set does not name is gone
    # Reopened from its files (as a query process opens them): the same answers, the generation it was saved at.
    again, generation = SegmentedIndex.open(folder, recipe)
    assert generation == 6 and again.describe()["segment_vectors"] == store.describe()["segment_vectors"]
    assert_same_answers(again, reference, queries)
    # The tail and removals not yet flushed are saved too when under the cap; a re-added id is found again.
    extra = db[:3] + 0.01
    again.add(np.array([10**9, 10**9 + 1, 10**9 + 2]), extra / np.linalg.norm(extra, axis=1, keepdims=True))
    again.remove(np.array(list(live)[:2]))
    again.save(generation=7, tail_cap=2**30)
    third, generation = SegmentedIndex.open(folder, recipe)
    assert generation == 7 and third.describe()["tail"] == 3 and len(third) == len(live) + 1
    assert third.search(extra[0] / np.linalg.norm(extra[0]), 1)[1][0, 0] == 10**9
    assert folder_files(folder) == third.named_files()


def test_tuned_segments_reach_their_recall(tmp_path):
    """Past the full scan, nprobe is the smallest whose recall@10 on the store's own vectors reaches the target;
    fresh queries from the same people find about as much of their true top 10."""
    db, queries = synthetic_vectors(12000, 200, 64, seed=1)
    recipe = SegmentRecipe(full_scan_bytes=0, tune_queries=300, target_recall=0.95)
    store = SegmentedIndex.create(tmp_path / "s", 64, [(np.arange(12000), db)], generation=0, recipe=recipe)
    tuning = store.tuning
    assert store.nprobe < store.nlist and tuning["recall"] >= 0.95 and tuning["queries"] == 300
    lower = [int(p) for p, r in tuning["tried"].items() if int(p) < store.nprobe]
    assert all(tuning["tried"][str(p)] < 0.95 for p in lower)  # nothing cheaper reached it
    truth, kth = exact_top_k(db, queries, 10)
    found = np.concatenate([store.search(q, 10)[1] for q in queries])
    assert recall_at_k(found, truth, db, queries, kth) >= 0.93
    scores, found = store.search(queries[:5], 10)
    assert np.allclose(scores, np.einsum("qd,qkd->qk", queries[:5], db[found]), atol=1e-6)  # re-ranked: exact scores


# The child of the kill test: rounds of adds, removals and saves that merge (max_segments=2), continuing from
# the generation the store was saved at. What round r does depends on r alone, so the parent knows the set
# each generation must hold.
KILL_CHILD = textwrap.dedent('''
    import sys
    import numpy as np
    DIM, FIRST, PER_ROUND = 32, 2000, 400

    def vectors_of(ids):
        rng = np.random.default_rng(ids[0])
        v = rng.standard_normal((len(ids), DIM)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    def round_change(r):
        """(ids added, ids removed) by round r >= 1 (generation r)."""
        added = np.arange(FIRST + (r - 1) * PER_ROUND, FIRST + r * PER_ROUND)
        earlier = np.arange(0, FIRST + (r - 1) * PER_ROUND)
        removed = np.random.default_rng(1000 + r).choice(earlier, size=150, replace=False)
        return added, removed

    def live_at(g):
        live = set(range(FIRST))
        for r in range(1, g + 1):
            added, removed = round_change(r)
            live |= set(added.tolist())
            live -= set(removed.tolist())
        return np.array(sorted(live))

    def child(folder):
        from headsearch.vectors import segment_files
        from headsearch.vectors.segment_files import SegmentRecipe
        from headsearch.vectors.segments import SegmentedIndex
        original = segment_files.write_lists

        def signalled(*args, **kwargs):  # tells the parent a merge (or a flush) is writing its codes
            sys.stdout.write("w")
            sys.stdout.flush()
            return original(*args, **kwargs)

        segment_files.write_lists = signalled
        store, g = SegmentedIndex.open(folder, SegmentRecipe(max_segments=2))
        while True:
            g += 1
            added, removed = round_change(g)
            store.add(added, vectors_of(added))
            store.remove(removed)
            store.save(g, tail_cap=0)
''')


def _kill_helpers() -> dict:
    helpers: dict = {}
    exec(KILL_CHILD, helpers)
    return helpers


def test_kill_during_merges_leaves_the_last_good_set(tmp_path):
    h = _kill_helpers()
    folder = tmp_path / "vectors_id.segments"
    first = np.arange(h["FIRST"])
    SegmentedIndex.create(folder, h["DIM"], [(first, h["vectors_of"](first))], generation=0, recipe=SegmentRecipe(max_segments=2))
    queries = np.random.default_rng(5).standard_normal((5, h["DIM"])).astype(np.float32)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    script = KILL_CHILD + f"\nchild({str(folder)!r})\n"
    rng = random.Random(0)
    generations = []
    for attempt in range(6):
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env)
        try:
            writes = rng.randint(1, 6)  # this many codes writes in, then a random moment of the next ones
            for _ in range(writes):
                assert child.stdout.read(1) == b"w", "the child ended early"
            time.sleep(rng.uniform(0, 0.05) if attempt % 2 == 0 else rng.uniform(0, 0.5))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        # The folder holds a complete set: the generation it names, its vectors exactly, exact answers.
        store, g = SegmentedIndex.open(folder)
        live = h["live_at"](g)
        assert sorted(store.ids().tolist()) == live.tolist(), f"generation {g}"
        assert_same_answers(store, exact_index(live, _vectors(h, live)), queries, ks=(10,))
        store.close()
        generations.append(g)
    assert generations == sorted(generations) and generations[-1] > 3  # the runs went on from each other
    # A writer's next save deletes what the killed runs left behind.
    store, g = SegmentedIndex.open(folder, SegmentRecipe(max_segments=2))
    store.save(g + 1, tail_cap=0)
    assert folder_files(folder) == store.named_files()


def _vectors(h: dict, ids: np.ndarray) -> np.ndarray:
    """The vectors the kill test's rounds stored for `ids` (ascending): each batch is drawn from its first id."""
    rounds = (int(ids.max()) - h["FIRST"]) // h["PER_ROUND"] + 1
    batches = [np.arange(h["FIRST"])] + [h["round_change"](r)[0] for r in range(1, rounds + 1)]
    every = np.concatenate(batches)
    return np.concatenate([h["vectors_of"](b) for b in batches])[np.searchsorted(every, ids)]


# ----- through the library and the real CLI -----------------------------------------------------------------
def _answers(library: Path, photos: list[Path]) -> list:
    """The JSON answers of `query` for each photo, with the library's own folder taken out of the paths."""
    out = []
    for photo in photos:
        text = run("query", photo, "--library", library, "--json", "-k", "20", "--show-weak").stdout
        out.append(json.loads(text.replace(str(library.resolve()), "LIB").replace(str(library), "LIB")))
    return out


@needs_data
def test_a_library_forced_into_segments_answers_as_in_memory(hamilton_library, tmp_path, monkeypatch):
    photos = [pixel_copy(p, tmp_path / "q") for p in (AMY_DIR / "amy1.png", EXAMPLES / "lin-manuel-miranda.png",
                                                     EXAMPLES / "alex-lacamoire.png")]
    memory, forced = tmp_path / "memory", tmp_path / "forced"
    shutil.copytree(hamilton_library, memory)
    shutil.copytree(hamilton_library, forced)

    def both(*args):  # a writing command on each library, the forced one with every vector kind in segments
        for library, budget in ((memory, None), (forced, "0")):
            if budget is None:
                monkeypatch.delenv("HEADSEARCH_VECTOR_MEMORY", raising=False)
            else:
                monkeypatch.setenv("HEADSEARCH_VECTOR_MEMORY", budget)
            run(*args, "--library", library)
        monkeypatch.delenv("HEADSEARCH_VECTOR_MEMORY")

    both("index", HAMILTON, RETALKING, "--quiet")  # nothing new: the forced library's save moves its kinds to segments
    kinds = json.loads((forced / "manifest.json").read_text())["model"]["kinds"]
    for kind in kinds:
        assert (forced / f"vectors_{kind}.segments" / STATE).is_file() and not (forced / f"vectors_{kind}.faiss").exists()
    assert _answers(forced, photos) == _answers(memory, photos)
    # A file removed (its ids join the removed set, or its segment is written again without them), then indexed
    # again under new ids (the tail written as a segment).
    clip = sorted(RETALKING.glob("*.mp4"))[0]
    both("remove", clip)
    assert _answers(forced, photos) == _answers(memory, photos)
    both("index", clip, "--quiet")
    assert _answers(forced, photos) == _answers(memory, photos)
    # With the default budget the next writer moves the small kinds back to memory, answers unchanged.
    run("index", HAMILTON, RETALKING, "--library", forced, "--quiet")
    assert not list(forced.glob("*.segments")) and (forced / "vectors_id.faiss").is_file()
    assert _answers(forced, photos) == _answers(memory, photos)


@needs_data
def test_damaged_segments_are_rebuilt_from_the_database(hamilton_library, tmp_path, monkeypatch):
    photos = [pixel_copy(AMY_DIR / "amy1.png", tmp_path / "q")]
    library = tmp_path / "lib"
    shutil.copytree(hamilton_library, library)
    want = _answers(library, photos)
    monkeypatch.setenv("HEADSEARCH_VECTOR_MEMORY", "0")
    run("index", HAMILTON, RETALKING, "--library", library, "--quiet")
    folder = library / "vectors_id.segments"
    codes = next(folder.glob("*.ivfdata"))
    codes.write_bytes(codes.read_bytes()[:-8])  # cut short: mapping it would crash a reader (SIGBUS), so it is refused
    assert _answers(library, photos) == want  # a query rebuilds in memory from the database
    run("index", HAMILTON, RETALKING, "--library", library, "--quiet")  # a writer writes the segments again
    assert not codes.exists() and SegmentedIndex.open(folder)[0].describe()["count"] > 0
    assert _answers(library, photos) == want


HOLD_DATABASE = textwrap.dedent('''
    import sys, time
    import duckdb
    con = duckdb.connect(sys.argv[1])  # read-write: the file is locked against every other process, as while a run commits
    con.execute("BEGIN")
    print("held", flush=True)
    time.sleep(120)
''')


@needs_data
def test_segments_answer_from_their_files_while_another_process_holds_the_database(hamilton_library, tmp_path, monkeypatch):
    """The vectors a search re-ranks with are read from the segments' files, never from the database: a process
    holding the library's DuckDB file (as an index run does while it commits) does not stop a search."""
    library = tmp_path / "lib"
    shutil.copytree(hamilton_library, library)
    monkeypatch.setenv("HEADSEARCH_VECTOR_MEMORY", "0")
    run("index", HAMILTON, "--library", library, "--quiet")  # nothing new: the save moves every kind to segments
    kinds = json.loads((library / "manifest.json").read_text())["model"]["kinds"]
    holder = subprocess.Popen([sys.executable, "-c", HOLD_DATABASE, str(library / "library.duckdb")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(duckdb.IOException, match="lock"):  # the lock is real: the database cannot be read now
            duckdb.connect(str(library / "library.duckdb"), read_only=True)
        for kind in kinds:
            store, _ = SegmentedIndex.open(library / f"vectors_{kind}.segments")
            ids, vectors = store.contents()  # read back from the segments' raw vector files
            assert len(ids) >= 32
            assert_same_answers(store, exact_index(ids, vectors), vectors[::max(1, len(ids) // 5)][:5], ks=(10,))
            store.close()
    finally:
        holder.kill()
        holder.wait()

@needs_data
def test_an_index_run_killed_in_segments_leaves_a_library_that_answers(hamilton_library, tmp_path):
    """`headsearch index` with every kind in segments, killed (kill -9) at random moments: each time the library
    answers, and the run after the last kill ends with the answers of the library indexed in one go."""
    photos = [pixel_copy(AMY_DIR / "amy1.png", tmp_path / "q")]
    want = _answers(hamilton_library, photos)
    library = tmp_path / "lib"
    env = {**os.environ, "HEADSEARCH_VECTOR_MEMORY": "0",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-c", "from cli.main import main; main()", "index", str(HAMILTON), str(RETALKING),
               "--library", str(library), "--quiet"]
    subprocess.run([*command[:4], str(RETALKING), *command[6:]], env=env, check=True, capture_output=True)  # a library to kill in
    rng = random.Random(1)
    for _ in range(2):
        child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(3, 12))
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert run("query", photos[0], "--library", library, "--json").exit_code == 0
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (library / "vectors_id.segments" / STATE).is_file()
    assert _without_ids(_answers(library, photos)) == _without_ids(want)  # indexed in another order: other ids


def _without_ids(answers: list) -> list:
    return [[{k: v for k, v in hit.items() if k not in ("track_id", "thumbnail", "picture")} for hit in a] for a in answers]


@pytest.mark.parametrize("budget", ["0", "1K"])
def test_the_budget_setting_is_read(monkeypatch, budget):
    from headsearch.basics.settings import vector_memory_budget

    monkeypatch.setenv("HEADSEARCH_VECTOR_MEMORY", budget)
    assert vector_memory_budget() == {"0": 0, "1K": 1024}[budget]
