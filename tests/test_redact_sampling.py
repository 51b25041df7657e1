"""The library keeps the frames its analysis sampled (`videos.samples`, format 11), and a redaction that reads the
library's analysis covers each head from the sampled frame before it to the sampled frame after it with them. Before,
it guessed the sampling from the gaps between sightings (their median, else the default rate): a file indexed at
another rate (`index --fps 1`) with a head seen at one sample only was covered half as far as it shows. A library made
before format 11 keeps the guess, and the audit trail says so. Fast tier: generated clips, the tests' fake detector
and `--model fake-pixels`."""
from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pytest
from clips import write_clip
from conftest import library_db, run
from fake_detector import mark_face

from headsearch.store import migrations
from headsearch.store.layout import FORMAT_VERSION

FAKE = ("--model", "fake-pixels")
RATE = 25
FRAMES = 75
SHOWN = range(20, 46)  # the frames the face is in: at 1 sample a second (frames 0, 25, 50) the analysis sees it at 25 only


def _passer_by(path: Path, seed: int = 7) -> Path:
    """3 s at 25 fps of one shot of grey noise (new in every frame: a head gone matches nothing there), a marked face in
    frames 20-45 only, drifting right."""
    w, h = 192, 144
    rng = np.random.default_rng(seed)
    ground = np.full((h, w, 3), 100, np.uint8)
    face = rng.integers(60, 200, (50, 40, 3), dtype=np.uint8)

    def frame(i: int) -> np.ndarray:
        rgb = (ground + rng.integers(0, 50, ground.shape, dtype=np.uint8)).astype(np.uint8)
        if i in SHOWN:
            x = 40 + 2 * (i - SHOWN[0])
            rgb[30:80, x:x + 40] = face
            mark_face(rgb, (x, 30, x + 40, 80))
        return rgb

    return write_clip(path, (frame(i) for i in range(FRAMES)), fps=RATE, options={"qp": "0"}, pix_fmt="yuv444p")


def _everyone_hidden(clip: Path, library: Path, out: Path) -> dict:
    run("redact", clip, "--everyone", "--library", library, "--out", out)
    return json.loads(Path(f"{out}.redactions.json").read_text())


def _shown_unhidden(trail: dict) -> list[int]:
    """The frames the face is in where the trail says no box was drawn."""
    hidden = {f["frame"] for f in trail["frames"] if f["boxes"]}
    return [i for i in SHOWN if i not in hidden]


def test_a_head_is_hidden_from_sample_to_sample_at_the_rate_the_library_was_indexed_at(tmp_path):
    clip = _passer_by(tmp_path / "passer-by.mp4")
    library = tmp_path / "library"
    run("index", clip, "--library", library, "--fps", "1", *FAKE)
    with library_db(library) as con:
        blob, sampled = con.execute("select samples, frames_sampled from videos").fetchone()
    assert np.frombuffer(blob, "<i4").tolist() == [0, 25, 50] and sampled == 3

    trail = _everyone_hidden(clip, library, tmp_path / "out.mp4")
    assert [(t["first_frame"], t["last_frame"], t["sightings"]) for t in trail["tracks"]] == [(1, 49, 1)]
    assert "guessed" not in trail["analysis"]
    # Hidden in every frame it shows. Before: covered 14-36 (one sample every 12 frames, guessed from the default rate),
    # the face left unhidden in frames 37-45.
    assert _shown_unhidden(trail) == []


def _as_format_10(library: Path) -> None:
    """The library as format 10 made it: no `samples` column, the format 10 in its database and manifest."""
    con = duckdb.connect(str(library / "library.duckdb"))
    try:
        con.execute("alter table videos drop column samples")
        con.execute("update library_state set value = '10' where key = 'format'")
    finally:
        con.close()
    manifest = json.loads((library / "manifest.json").read_text())
    (library / "manifest.json").write_text(json.dumps({**manifest, "format": 10}))


def _samples(library: Path) -> list[list[int] | None]:
    with library_db(library) as con:
        return [None if b is None else np.frombuffer(b, "<i4").tolist() for (b,) in con.execute("select samples from videos order by id").fetchall()]


def test_a_library_made_before_it_kept_its_samples_is_upgraded_and_its_sampling_guessed(tmp_path):
    """A library of format 10 (its `samples` column dropped, its format set back) opens upgraded: the column there, empty
    for the video indexed before; the redaction guesses as it did and its trail says so; a video indexed now records its
    samples."""
    clip = _passer_by(tmp_path / "passer-by.mp4")
    library = tmp_path / "library"
    run("index", clip, "--library", library, "--fps", "1", *FAKE)
    _as_format_10(library)

    trail = _everyone_hidden(clip, library, tmp_path / "out.mp4")
    assert FORMAT_VERSION == 11 and migrations.MIGRATIONS[10].from_version == 10
    assert json.loads((library / "manifest.json").read_text())["format"] == FORMAT_VERSION
    assert _samples(library) == [None]
    assert "its sampling guessed from the gaps between sightings, one frame in 12" in trail["analysis"]
    assert [(t["first_frame"], t["last_frame"]) for t in trail["tracks"]] == [(14, 36)]  # the old guess, kept...
    assert _shown_unhidden(trail) == list(range(37, 46))  # ...and the face it leaves where it was wrong

    later = _passer_by(tmp_path / "later.mp4", seed=8)
    run("index", later, "--library", library, "--fps", "1")
    with library_db(library) as con:
        rows = con.execute("select path, samples from videos order by id").fetchall()
    assert [(Path(p).name, None if b is None else np.frombuffer(b, "<i4").tolist()) for p, b in rows] == [
        ("passer-by.mp4", None), ("later.mp4", [0, 25, 50])]


@pytest.mark.slow
def test_reindex_records_the_samples_of_its_new_analysis(tmp_path):
    """`reindex` analyses every file again: the new library keeps the frames that analysis sampled, those of a video
    indexed before format 11 among them (at the rate the re-index runs at)."""
    clip = _passer_by(tmp_path / "passer-by.mp4")
    library = tmp_path / "library"
    run("index", clip, "--library", library, "--fps", "1", *FAKE)
    _as_format_10(library)
    run("list", "--library", library)  # opened: upgraded, its video without samples
    assert _samples(library) == [None]
    run("reindex", "--library", library, "--model", "sface", "--fps", "2", "--delete-old")
    assert _samples(library) == [[0, 13, 26, 39, 52, 65]]
