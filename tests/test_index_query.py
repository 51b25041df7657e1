"""End to end on real media: index real videos and photos with the real CLI, query with photos."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from clips import frames_of, write_clip
from conftest import DATA, EXAMPLES, HAMILTON, library_db, needs_data, needs_train, pixel_copy, query_json, run

from headsearch.models import DEFAULT_MODEL
from headsearch.models.registry import find_spec
from headsearch.search.service import QueryOptions, SearchService
from headsearch.store.library import Library
from schemas.records import Tier, VectorKind

pytestmark = [needs_data, pytest.mark.slow]

LIN = EXAMPLES / "lin-manuel-miranda.png"
OBAMA = EXAMPLES / "knn_examples" / "train" / "obama" / "obama.jpg"
AMY = DATA / "face-api.js" / "examples" / "images" / "amy"


def table_counts(library) -> dict[str, int]:
    with library_db(library) as con:
        return {t: con.execute(f"select count(*) from {t}").fetchone()[0] for t in ("videos", "shots", "tracks", "observations", "vectors")}


def assert_consistent(library, thumbnails: bool = True) -> None:
    """No orphan or duplicate rows; FAISS holds exactly the database's vectors; every track has its thumbnail."""
    with library_db(library) as con:
        def q(sql):
            return con.execute(sql).fetchone()[0]

        assert q("select count(*) from (select path from videos group by path having count(*) > 1)") == 0
        assert q("select count(*) from observations o left join tracks t on o.track_id = t.id where t.id is null") == 0
        assert q("select count(*) from tracks t left join videos v on t.video_id = v.id where v.id is null") == 0
        assert q("select count(*) from vectors x left join observations o on x.observation_id = o.id where o.id is null") == 0
        assert q("select count(*) from tracks t where not exists (select 1 from observations o where o.track_id = t.id)") == 0
        db_ids = sorted(r[0] for r in con.execute("select id from vectors where kind = 'id'").fetchall())
        thumbs = {r[0] for r in con.execute("select thumbnail from tracks").fetchall()}
    # Opening the library brings the FAISS cache up to date with the database: exactly its ids.
    lib = Library.open(library)
    assert sorted(lib.vector_index(VectorKind.ID).ids().tolist()) == db_ids
    for rel in thumbs if thumbnails else ():
        assert (library / rel).is_file(), rel


def test_shots_and_tracks_of_hamilton(hamilton_library):
    with library_db(hamilton_library) as con:
        vid = con.execute("select id from videos where path = ?", [str(HAMILTON)]).fetchone()[0]
        starts = [r[0] for r in con.execute("select start_frame from shots where video_id = ? order by shot_index", [vid]).fetchall()]
        # Tracks never cross a cut.
        bad = con.execute("""select count(*) from tracks t join shots s on t.shot_id = s.id
                             where t.start_time < s.start_time - 1e-6 or t.end_time > s.end_time + 1e-6""").fetchone()[0]
    assert starts == [0, 20, 82, 211]
    assert bad == 0


def test_lin_manuel_miranda_first_in_third_shot(hamilton_library):
    hits = query_json(hamilton_library, LIN, "-k", "3", "--show-weak")
    assert len(hits) == 3
    assert set(hits[0]) >= {"video", "start", "end", "time", "score", "track_id", "thumbnail"}
    top = hits[0]
    assert top["video"] == str(HAMILTON)
    assert top["start"] >= 3.58 and top["end"] <= 7.9 and top["start"] <= top["time"] <= top["end"], top
    assert (hamilton_library / "thumbnails").is_dir() and top["thumbnail"].endswith(".jpg")


def test_obama_in_audience_shot_top3(hamilton_library):
    hits = query_json(hamilton_library, OBAMA, "-k", "3")
    assert any(h["video"] == str(HAMILTON) and h["start"] >= 7.0 for h in hits), hits


def test_alex_lacamoire_found_in_first_shot(hamilton_library):
    # The pianist in the wide first shot (0.852-1.519 s on the file's timeline).
    hits = query_json(hamilton_library, EXAMPLES / "alex-lacamoire.png", "-k", "3")
    assert any(h["video"] == str(HAMILTON) and h["start"] >= 0.85 and h["end"] <= 1.52 for h in hits), hits


@pytest.mark.xfail(strict=True, reason="in the second shot (1.519-3.588 s) he is in hard profile and turned away: SFace scores "
                   "the profile 0.264, the fused head 0.409, the look of his head alone 0.543, each far below its bar at this "
                   "library's false-hit budget (identity 0.36, head 0.53, appearance 0.86); see the model card")
def test_alex_lacamoire_found_in_second_shot(hamilton_library):
    hits = query_json(hamilton_library, EXAMPLES / "alex-lacamoire.png", "-k", "3")
    assert any(h["video"] == str(HAMILTON) and h["start"] >= 1.51 and h["end"] <= 3.6 for h in hits), hits


def test_top_k_are_distinct_tracks(hamilton_library):
    hits = query_json(hamilton_library, LIN, "-k", "8", "--rank", "identity", "--show-weak")
    assert len(hits) == 8
    assert len({h["track_id"] for h in hits}) == 8
    assert [h["score"] for h in hits] == [h["id_score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    # Appearance ranking (the default): the shipped thresholds label every hit; tiers in order (inside one, the
    # hits a face vouches for first), then the ranking score: the head score for the same person, else identity.
    ranked = query_json(hamilton_library, LIN, "-k", "8", "--show-weak")
    order = {"same_look": 0, "other_look": 1, "other_person": 2}
    keys = [(order[h["tier"]], h["matched_without_face"], -h["score"]) for h in ranked]
    assert keys == sorted(keys)
    for h in ranked:
        if h["matched_without_face"]:
            assert h["score"] == h["appearance_score"]
        elif h["tier"] == "other_person" or h["head_score"] is None:
            assert h["score"] == h["id_score"]
        else:
            assert h["score"] == h["head_score"]
    assert {h["track_id"] for h in ranked} <= {h["track_id"] for h in query_json(hamilton_library, LIN, "-k", "64", "--rank", "identity", "--show-weak")}


def sightings_vectors(library, track_id: int) -> dict[str, list[tuple[int, bool, np.ndarray]]]:
    """A track's stored vectors by kind, as (sighting, whether it showed a face, vector), read from the database."""
    out: dict[str, list] = {}
    with library_db(library) as con:
        for kind, obs, face, blob in con.execute("select x.kind, x.observation_id, o.face_visible, x.embedding from vectors x join observations o "
                                                 "on o.id = x.observation_id where x.track_id = ? order by x.id", [track_id]).fetchall():
            out.setdefault(kind, []).append((obs, bool(face), np.frombuffer(blob, "<f4")))
    return out


def test_each_hit_is_its_sightings_scored_against_the_photo(hamilton_library):
    """The scorer search shares with people (`headsearch.evaluation.track_scores`), checked against the vectors in
    the database: identity, the best sighting's; head, the best sighting with a face; the look alone, the best sighting
    without one; the tier, "matched without a face" and the sighting shown follow from them (the score a hit is ranked
    by is the ranking's, `headsearch.search.ranking`)."""
    service = SearchService(Library.open(hamilton_library))
    hits = [h.hit for h in service.search_photo(LIN, QueryOptions(k=12, show_weak=True, pictures=False)).shown]
    query = service.photos.heads(LIN)[0].vectors
    q_id, q_head = query[VectorKind.ID], query[VectorKind.HEAD]
    dims = find_spec(service.library.model).appearance_dims
    thresholds = service.thresholds()

    def look(v: np.ndarray) -> np.ndarray:
        return v[-dims:] / np.linalg.norm(v[-dims:])

    assert len(hits) == 12 and dims and any(h.appearance_score is not None for h in hits)  # tracks with sightings without a face
    for h in hits:
        stored = sightings_vectors(hamilton_library, h.track_id)
        by_id = max((float(v @ q_id), obs) for obs, _, v in stored["id"])
        by_head = max(((float(v @ q_head), obs) for obs, face, v in stored["head"] if face), default=(None, None))
        by_look = max(((float(look(v) @ look(q_head)), obs) for obs, face, v in stored["head"] if not face), default=(None, None))
        assert h.id_score == pytest.approx(by_id[0], abs=1e-5)
        assert (h.head_score is None) == (by_head[0] is None) and (h.head_score is None or h.head_score == pytest.approx(by_head[0], abs=1e-5))
        assert (h.appearance_score is None) == (by_look[0] is None)
        assert h.appearance_score is None or h.appearance_score == pytest.approx(by_look[0], abs=1e-5)
        assert h.tier == thresholds.tier(h.id_score, h.head_score, h.appearance_score)
        by_face = thresholds.tier(h.id_score, h.head_score) != Tier.OTHER_PERSON
        assert h.matched_without_face == (h.tier != Tier.OTHER_PERSON and not by_face)
        look_says_same = by_look[0] is not None and thresholds.tier(None, None, by_look[0]) != Tier.OTHER_PERSON
        assert h.observation_id == (by_look[1] if look_says_same and not by_face else by_id[1])


def test_table_output_and_stats(hamilton_library):
    out = run("query", LIN, "--library", hamilton_library, "-k", "2", "--show-weak").stdout
    assert out.count(str(HAMILTON)) >= 1 and len(out.strip().splitlines()) == 2
    stats = json.loads(run("stats", "--library", hamilton_library, "--json").stdout)
    assert stats["videos"] == 6 and stats["shots"] >= 4
    with library_db(hamilton_library) as con:  # identity vectors for sightings with a face, head vectors for any
        kinds = dict(con.execute("""select x.kind, count(*) filter (where not o.face_visible) from vectors x
                                    join observations o on o.id = x.observation_id group by x.kind""").fetchall())
        total = dict(con.execute("select kind, count(*) from vectors group by kind").fetchall())
    assert kinds["id"] == 0 and kinds["head"] > 0 and 0 < total["id"] <= total["head"] <= stats["observations"]
    assert stats["vectors"] == total["id"] + total["head"]
    assert stats["model"]["name"] == DEFAULT_MODEL


def test_incremental_skip_change_remove(tmp_path):
    media = tmp_path / "media"
    media.mkdir()
    clip = media / "clip.mp4"
    shutil.copy(RETALK1 := DATA / "video-retalking" / "examples" / "face" / "1.mp4", clip)
    shutil.copy(AMY / "amy1.png", media / "amy1.png")
    lib = tmp_path / "lib"
    first = run("index", media, "--library", lib, "-q").stdout
    assert "2 indexed" in first
    counts = table_counts(lib)
    assert "2 unchanged" in run("index", media, "--library", lib, "-q").stdout
    assert table_counts(lib) == counts
    # Same bytes, new mtime: still unchanged (content fingerprint).
    clip.touch()
    assert "2 unchanged" in run("index", media, "--library", lib, "-q").stdout
    # Changed content: re-indexed in place, no duplicates.
    shutil.copy(DATA / "video-retalking" / "examples" / "face" / "2.mp4", clip)
    assert "1 indexed" in run("index", media, "--library", lib, "-q").stdout
    assert table_counts(lib)["videos"] == 2
    assert_consistent(lib)
    # A file deleted from an indexed folder disappears on the next run.
    (media / "amy1.png").unlink()
    assert "1 removed" in run("index", media, "--library", lib, "-q").stdout
    assert table_counts(lib)["videos"] == 1
    # `remove` drops rows, vectors and thumbnails.
    run("remove", clip, "--library", lib)
    assert table_counts(lib) == {"videos": 0, "shots": 0, "tracks": 0, "observations": 0, "vectors": 0}
    assert not list((lib / "thumbnails").glob("*.jpg"))
    assert_consistent(lib)
    assert RETALK1.is_file()


def test_photo_folder_and_whole_image(tmp_path):
    lib = tmp_path / "lib"
    run("index", AMY, "--library", lib, "-q")
    assert table_counts(lib)["videos"] == 5
    hits = query_json(lib, pixel_copy(AMY / "amy3.png", tmp_path), "-k", "1")
    assert hits[0]["video"] == str(AMY / "amy3.png") and hits[0]["score"] > 0.99
    hits = query_json(lib, AMY / "amy3.png", "-k", "2", "--whole-image")
    assert len(hits) == 2


def test_all_heads_in_a_group_photo(hamilton_library):
    res = json.loads(run("query", EXAMPLES / "two_people.jpg", "--library", hamilton_library, "--json", "--all", "-k", "2", "--show-weak").stdout)
    assert len(res) == 2 and all(len(r["hits"]) == 2 for r in res)


def test_faiss_cache_rebuilt_from_database(tmp_path):
    lib = tmp_path / "lib"
    run("index", AMY, "--library", lib, "-q")
    photo = pixel_copy(AMY / "amy2.png", tmp_path)
    before = query_json(lib, photo, "-k", "3")
    (lib / "vectors_id.faiss").unlink()
    assert query_json(lib, photo, "-k", "3") == before
    (lib / "vectors_id.faiss").write_bytes(b"garbage")
    assert query_json(lib, photo, "-k", "3") == before
    assert np.isclose(before[0]["score"], 1.0, atol=1e-3)


@needs_train
def test_dual_cls_checkpoint_stores_id_and_head_vectors(tmp_path):
    from headsearch.models.dual_cls import HeadModelConfig, HeadSimilarityModel, save_checkpoint

    ckpt = tmp_path / "tiny.safetensors"
    save_checkpoint(HeadSimilarityModel(HeadModelConfig.tiny()).eval(), ckpt, {"name": "headsim-test"})
    lib = tmp_path / "lib"
    run("index", AMY, "--library", lib, "--model", ckpt, "-q")
    with library_db(lib) as con:
        kinds = dict(con.execute("select kind, count(*) from vectors group by kind").fetchall())
    assert kinds == {"id": 5, "head": 5}
    hits = query_json(lib, pixel_copy(AMY / "amy4.png", tmp_path), "-k", "2")
    assert hits[0]["video"] == str(AMY / "amy4.png") and hits[0]["head_score"] is not None
    assert abs(hits[0]["score"] - 1.0) < 1e-3 and abs(hits[0]["head_score"] - 1.0) < 1e-3


def test_av1_video_falls_back_to_pyav(tmp_path):
    import av
    import pytest

    if "libsvtav1" not in av.codecs_available:
        pytest.skip("this PyAV build has no AV1 encoder")
    clip = tmp_path / "clip-av1.mkv"
    write_clip(clip, frames_of(DATA / "video-retalking" / "examples" / "face" / "1.mp4", stop=50), fps=25, codec="libsvtav1")
    lib = tmp_path / "lib"
    run("index", clip, "--library", lib, "-q")
    with library_db(lib) as con:
        decoder, frames = con.execute("select decoder, frames_decoded from videos").fetchone()
        tracks = con.execute("select count(*) from tracks").fetchone()[0]
    assert decoder == "pyav" and frames == 50 and tracks >= 1
