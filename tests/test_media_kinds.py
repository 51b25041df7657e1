"""One rule for what is a photo and what is a video (`headsearch.basics.media`), on every road a
file takes in: a folder walk, a path named on the command line, a labelled set, a web upload."""
from __future__ import annotations

import json

import pytest
from conftest import made_photo, run
from fake_model import FAKE_MODEL

from headsearch.basics.media import IMAGE_EXTENSIONS, VIDEO_EXTENSIONS, is_media_name, media_kind
from headsearch.evaluation.labels import read_label_set
from schemas.records import MediaKind


@pytest.mark.parametrize("name", ["a.gif", "b.GIF", "c.jfif", "d.jpe", "e.jpg", "f.PNG", "g.webp", "h.tiff"])
def test_photo_names_are_photos_everywhere(name):
    assert media_kind(name) == MediaKind.IMAGE
    assert is_media_name(name)  # a folder walk picks up every photo a named path would take as one


@pytest.mark.parametrize("name", ["a.mp4", "b.MKV", "c.webm", "d.ts"])
def test_video_names_are_videos(name):
    assert media_kind(name) == MediaKind.VIDEO
    assert is_media_name(name)


def test_walk_and_named_paths_agree_on_every_known_extension():
    for ext in IMAGE_EXTENSIONS | VIDEO_EXTENSIONS:
        walked = is_media_name(f"x{ext}")
        assert walked, ext
        assert (media_kind(f"x{ext}") == MediaKind.IMAGE) == (ext in IMAGE_EXTENSIONS), ext
    assert not IMAGE_EXTENSIONS & VIDEO_EXTENSIONS


def test_a_gif_and_a_jfif_are_photos_walked_or_named(tmp_path):
    media = tmp_path / "media"
    media.mkdir()
    made_photo(media / "one.gif", seed=1)
    made_photo(media / "two.jfif", seed=2, fmt="JPEG")
    walked, named = tmp_path / "walked", tmp_path / "named"
    run("index", media, "--library", walked, "--model", FAKE_MODEL, "-q")  # the model is incidental: the tests' fake
    run("index", media / "one.gif", media / "two.jfif", "--library", named, "--model", FAKE_MODEL, "-q")
    for lib in (walked, named):
        files = json.loads(run("list", "--library", lib, "--json").stdout)
        kinds = {f["path"].rsplit("/", 1)[-1]: f["kind"] for f in files}
        assert kinds == {"one.gif": "image", "two.jfif": "image"}, (lib, files)


def test_a_labelled_jfif_counts_as_a_photo(tmp_path):
    made_photo(tmp_path / "two.jfif", seed=2, fmt="JPEG")
    made_photo(tmp_path / "one.gif", seed=1)
    csv = tmp_path / "labels.csv"
    csv.write_text("path,identity,appearance_state\ntwo.jfif,b,a\none.gif,a,a\n")
    counts = read_label_set(csv).to_dict()
    assert (counts["photos"], counts["videos"]) == (2, 0)


def test_the_upload_check_takes_the_photo_formats():
    import io

    import numpy as np
    from PIL import Image

    from serve.uploads import check_image

    for fmt in ("GIF", "JPEG", "PNG", "WEBP", "BMP", "TIFF"):
        buf = io.BytesIO()
        Image.fromarray(np.full((64, 48, 3), 128, np.uint8)).save(buf, format=fmt)
        assert check_image(buf.getvalue()) == (48, 64), fmt
