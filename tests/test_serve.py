"""`headsearch serve` through Starlette's TestClient: every route and its JSON twin, /api/query equal to
`query --json`, corrections from the web page, preview clips, and the safety cases (paths in
requests, unknown ids and ids past BIGINT, oversized, non-image and decompression-bomb uploads,
Range requests, tokens, cross-site posts and the session's token, files swapped or linked behind the
library, many large uploads at once against a real server)."""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import socket
import struct
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import upload_memory  # noqa: E402 - tests/upload_memory.py, which runs the issue's 50 uploads on its own
from clips import clip_info, frames_of, write_clip
from conftest import DATA, EXAMPLES, HAMILTON, RETALKING, http_answer, library_db, needs_data, pixel_copy, query_json, run, serving, upload_head
from starlette.testclient import TestClient

from headsearch.basics.media import fingerprint
from serve.app import create_app, hms
from serve.files import IndexedFiles, OpenFileResponse
from serve.guard import CSRF_HEADER

pytestmark = [needs_data, pytest.mark.slow]

MIRANDA = EXAMPLES / "lin-manuel-miranda.png"
TWO_PEOPLE = EXAMPLES / "two_people.jpg"


@pytest.fixture(scope="module")
def library(hamilton_library, tmp_path_factory) -> Path:
    """A copy of the session's library (hamilton + video-retalking) with a photo of two people and an
    AVI (MPEG-4 Part 2, which browsers cannot play) cut from the hamilton clip."""
    lib = tmp_path_factory.mktemp("serve") / "library"
    shutil.copytree(hamilton_library, lib)
    avi = lib.parent / "hamilton.avi"
    write_clip(avi, frames_of(HAMILTON, stop=100, width=320, height=180), fps=25, codec="mpeg4")
    run("index", TWO_PEOPLE, avi, "--library", lib, "-q")
    return lib


def as_the_pages(client: TestClient) -> TestClient:
    """The client posts as the app's own pages do: from its origin, with the session cookie and its token."""
    client.headers["origin"] = str(client.base_url).rstrip("/")
    client.headers[CSRF_HEADER] = client.get("/api/csrf").json()["token"]
    return client


@pytest.fixture(scope="module")
def client(library, tmp_path_factory) -> TestClient:
    return as_the_pages(TestClient(create_app(library, cache_dir=tmp_path_factory.mktemp("cache"))))


def ids(library: Path, sql: str) -> list:
    with library_db(library) as con:
        return [r[0] for r in con.execute(sql).fetchall()]


def video_id(library: Path, path: Path) -> int:
    return ids(library, f"select id from videos where path = '{path}'")[0]


def test_hms():
    assert [hms(x) for x in (0, None, 59.6, 61, 3725.2, 1.51935)] == [
        "0:00:00.000", "0:00:00.000", "0:00:59.600", "0:01:01.000", "1:02:05.200", "0:00:01.519"]


def test_watch_links_never_start_before_the_frame():
    """A frame presented at 1.51935 s is linked as 1.520 (1.519 shows the frame before it); exact milliseconds stay."""
    from headsearch.basics.timeline import seek_text, seek_time
    from serve.views import watch_url

    assert [seek_text(x) for x in (1.51935, 1.519, 1.5, 0.1 + 0.2, 0.0, -0.5, 7.8923923)] == [
        "1.520", "1.519", "1.500", "0.300", "0.000", "0.000", "7.893"]
    assert all(seek_time(x) >= x - 1e-6 for x in np.linspace(0, 30, 3001) + 1 / 3)
    assert watch_url(3, 1.5193526860193527, 3.588088088088088, 94) == "/watch/3?start=1.520&end=3.589&track=94"


def test_api_query_is_query_json(client, library):
    for photo, extra in ((MIRANDA, {"k": "3"}), (TWO_PEOPLE, {"k": "2", "all": "1"})):
        r = client.post("/api/query", files={"photo": (photo.name, photo.read_bytes(), "image/png")}, data=extra)
        assert r.status_code == 200, r.text
        cli = query_json(library, photo, "-k", extra["k"], *(["--all"] if "all" in extra else []))
        assert cli and r.json() == cli
    # the raw image as the body, fields in the query string
    r = client.post("/api/query?k=3", content=MIRANDA.read_bytes(), headers={"content-type": "image/png"})
    assert r.json() == query_json(library, MIRANDA, "-k", "3")


def test_search_page_shows_cards_and_heads(client, library):
    weak = {"k": "4", "all": "1", "show_weak": "1"}
    r = client.post("/", files={"photo": ("two.jpg", TWO_PEOPLE.read_bytes(), "image/jpeg")}, data=weak)
    assert r.status_code == 200
    assert r.text.count('class="head') >= 2 and r.text.count('class="card"') == 8  # two heads, four cards each (weak ones too)
    assert "/watch/" in r.text and "/frames/" in r.text and "uncalibrated" not in r.text  # the default model's thresholds
    # Confident-only by default, as `query`: what is left out is said, never "the library is empty".
    r = client.post("/", files={"photo": ("two.jpg", TWO_PEOPLE.read_bytes(), "image/jpeg")}, data={"k": "4", "all": "1"})
    assert r.text.count('class="card"') < 8 and "below the identity threshold" in r.text and "weak matches too" in r.text
    # "weak matches too", as the page suggests, without picking the photo again: the form names the photo it searched.
    kept = re.search(r'name="photo_id" value="([^"]+)"', r.text).group(1)
    again = client.post("/", files={"photo": ("", b"", "application/octet-stream")}, data={**weak, "photo_id": kept})
    assert again.status_code == 200 and again.text.count('class="card"') == 8 and "last: two.jpg" in again.text
    gone = client.post("/", files={"photo": ("", b"", "application/octet-stream")}, data={**weak, "photo_id": "no-such-id"})
    assert gone.status_code == 404 and "pick it again" in gone.text
    r = client.post("/", files={"photo": ("lmm.png", MIRANDA.read_bytes(), "image/png")}, data={"k": "2"})
    assert r.text.count('class="card"') == 2 and "short_hamilton_clip.mp4" in r.text and "0:00:0" in r.text


def test_every_page_and_its_json_twin(client, library):
    vid = video_id(library, HAMILTON)
    track = ids(library, f"select id from tracks where video_id = {vid} order by id")[0]
    sighting = ids(library, f"select id from observations where track_id = {track}")[0]
    run("people", "--library", library)
    person = json.loads(run("people", "--library", library, "--json").stdout)[0]["id"]
    pages = ["/videos", f"/videos/{vid}", f"/tracks/{track}", "/people", f"/people/{person}", f"/watch/{vid}?start=3.5&end=6&track={track}"]
    for page in pages:
        html, api = client.get(page), client.get("/api" + page)
        assert html.status_code == 200 and html.headers["content-type"].startswith("text/html"), page
        assert api.status_code == 200 and api.headers["content-type"] == "application/json", page
    assert {v["name"] for v in client.get("/api/videos").json()["videos"]} >= {"short_hamilton_clip.mp4", "two_people.jpg", "hamilton.avi"}
    listing = client.get("/api/videos").json()
    assert listing["root"] and all(not f["shown"].startswith("/") for f in listing["folders"])  # folders under the one root said
    video = client.get(f"/api/videos/{vid}").json()
    assert len(video["shots"]) >= 3 and sum(len(p["tracks"]) for p in video["people"]) == len(ids(library, f"select id from tracks where video_id = {vid}"))
    tr = client.get(f"/api/tracks/{track}?k=4").json()
    assert tr["track"]["id"] == track and tr["sightings"] and len(tr["more_like_this"]) == 4
    assert all(c["track_id"] != track for c in tr["more_like_this"])
    people = client.get("/api/people").json()
    assert people["people"][0].keys() >= {"id", "name", "tracks", "videos", "looks"} and people["ungrouped_tracks"] == 0
    assert re.search(r"Grouped by the identity bar \d\.\d{3} \((calibrated at FAR|uncalibrated default)", client.get("/people").text)
    assert client.get(f"/api/people/{person}").json()["moments"]
    watch = client.get(f"/api/watch/{vid}?start=3.5&end=6").json()
    assert watch["src"] == f"/media/{vid}" and watch["fragment"] == "#t=3.500,6.000" and watch["direct"]
    assert f'src="/media/{vid}#t=3.500,6.000"' in client.get(f"/watch/{vid}?start=3.5&end=6").text
    for url, kind in ((f"/thumbnails/{track}.jpg", "image/jpeg"), (f"/frames/{sighting}.jpg", "image/jpeg"), (f"/media/{vid}", "video/mp4"),
                      ("/static/style.css", "text/css"), ("/static/app.js", "text/javascript")):
        r = client.get(url)
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind), url
    frame = np.frombuffer(client.get(f"/frames/{sighting}.jpg").content, np.uint8)
    import cv2

    assert cv2.imdecode(frame, cv2.IMREAD_COLOR).shape[:2] == (360, 640)
    photo = video_id(library, TWO_PEOPLE)
    assert client.get(f"/api/watch/{photo}").json()["image"] is True


def test_range_requests(client, library):
    vid = video_id(library, HAMILTON)
    data = HAMILTON.read_bytes()
    r = client.get(f"/media/{vid}", headers={"Range": "bytes=100-199"})
    assert r.status_code == 206 and r.content == data[100:200] and r.headers["content-range"] == f"bytes 100-199/{len(data)}"
    r = client.get(f"/media/{vid}", headers={"Range": "bytes=-50"})
    assert r.status_code == 206 and r.content == data[-50:]
    r = client.get(f"/media/{vid}", headers={"Range": f"bytes={len(data) + 10}-"})
    assert r.status_code == 416
    assert client.get(f"/media/{vid}").headers["accept-ranges"] == "bytes"


def test_preview_clip_for_files_browsers_cannot_play(client, library):
    vid = video_id(library, library.parent / "hamilton.avi")
    watch = client.get(f"/api/watch/{vid}?start=2.5&end=3").json()
    assert not watch["direct"] and "mpeg4" in watch["reason"] and watch["src"].startswith(f"/media/{vid}/preview?")
    assert watch["fragment"] == "#t=2.000,2.500" and watch["offset"] == 0.5  # the clip starts 2 s before the moment
    assert client.get(f"/media/{vid}").status_code == 415
    r = client.get(watch["src"])
    assert r.status_code == 200 and r.headers["content-type"] == "video/mp4"
    assert clip_info(io.BytesIO(r.content)).codec == "h264"
    frames = sum(1 for _ in frames_of(io.BytesIO(r.content)))
    assert 86 <= frames <= 89  # 0.5 s to the end of the 4 s file (100 frames at 25 fps)
    assert client.get(watch["src"]).content == r.content  # cached
    assert client.get(watch["src"], headers={"Range": "bytes=0-9"}).status_code == 206


@pytest.mark.parametrize("url", [
    "/media/../../../etc/passwd", "/media/%2e%2e/%2e%2e/etc/passwd", "/media/..%2f..%2fetc%2fpasswd", "/thumbnails/../manifest.json",
    "/thumbnails/%2Fetc%2Fpasswd.jpg", "/frames//etc/passwd", "/static/../app.py", "/static/%2e%2e/app.py", "/static/", "/static",
    "/thumbnails/", "/media/", "/media/-1", "/media/1.5", "/etc/passwd", "//etc/passwd", "/media/99999", "/thumbnails/99999.jpg",
    "/frames/99999.jpg", "/tracks/99999", "/api/tracks/99999", "/videos/99999", "/api/people/99999", "/watch/99999",
    "/media/99999/preview", "/api/videos/abc",
])
def test_no_path_from_a_request_reaches_the_file_system(client, url):
    r = client.get(url)
    assert r.status_code == 404, (url, r.status_code)
    assert b"root:" not in r.content and b"headsearch" not in r.content[:20] and b'"format"' not in r.content


def test_bad_parameters(client, library):
    vid = video_id(library, HAMILTON)
    assert client.get(f"/watch/{vid}?start=abc").status_code == 400
    assert client.get(f"/watch/{vid}?start=-5").status_code == 400
    assert client.get(f"/watch/{vid}?track=../1").status_code == 400
    assert client.get("/api/tracks/1?k=0").status_code == 400
    r = client.post("/api/query", files={"photo": ("a.png", MIRANDA.read_bytes(), "image/png")}, data={"k": "1000"})
    assert r.status_code == 400 and "k must be" in r.json()["error"]


def _png_header_only(width: int, height: int) -> bytes:
    """A tiny PNG that claims to be width x height (a decompression bomb's calling card)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def test_uploads_are_checked_before_decoding(library, tmp_path):
    client = as_the_pages(TestClient(create_app(library, cache_dir=tmp_path, max_upload=2_000_000)))
    big = MIRANDA.read_bytes() + b"\0" * 2_000_000
    for body, status, message in [
        (big, 413, "too large"),
        (b"this is not an image at all", 415, "not an image"),
        (b"", 400, "empty"),
        (_png_header_only(60_000, 60_000), 413, "pixels"),
        (_png_header_only(9_000, 9_000), 413, "pixels"),
        ((HAMILTON.read_bytes()[:100_000]), 415, "not an image"),
    ]:
        for r in (client.post("/api/query", files={"photo": ("x.png", body, "image/png")}),
                  client.post("/api/query", content=body, headers={"content-type": "image/png"}),
                  client.post("/", files={"photo": ("x.png", body, "image/png")})):
            assert r.status_code == status, (message, r.status_code, r.text[:200])
            assert message in r.text
    r = client.post("/api/query", files={"picture": ("a.png", MIRANDA.read_bytes(), "image/png")}, data={"k": "3"})
    assert r.status_code == 400 and "no photo in the form" in r.text
    assert client.post("/api/query", data={"k": "3"}).status_code == 415  # a form without a file is no image
    blank = io.BytesIO()
    from PIL import Image

    Image.new("RGB", (64, 64), (128, 128, 128)).save(blank, "PNG")
    r = client.post("/api/query", files={"photo": ("blank.png", blank.getvalue(), "image/png")})
    assert r.status_code == 422 and "no head found" in r.json()["error"]


SECRET = "s3cret-T0ken-of-the-tests"


def test_token_and_origin_and_host(library, tmp_path):
    client = TestClient(create_app(library, token=SECRET, cache_dir=tmp_path))
    assert client.get("/videos").status_code == 401
    assert client.get("/api/videos", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/api/videos", headers={"Authorization": f"Bearer {SECRET}"}).status_code == 200
    r = client.get(f"/videos?token={SECRET}")
    assert r.status_code == 200 and "headsearch_token" in r.headers["set-cookie"]
    assert client.get("/api/people").status_code == 200  # the cookie carries on
    local = TestClient(create_app(library, cache_dir=tmp_path, allowed_hosts={"127.0.0.1", "localhost"}), base_url="http://127.0.0.1")
    assert local.get("/videos").status_code == 200
    assert local.get("/videos", headers={"host": "evil.example"}).status_code == 400  # DNS rebinding
    r = local.post("/api/people/update", headers={"origin": "http://evil.example"})
    assert r.status_code == 403
    token = local.get("/api/csrf").json()["token"]
    assert local.post("/api/people/update", headers={"origin": "http://127.0.0.1", CSRF_HEADER: token}).status_code == 200


def test_serve_refuses_weak_tokens(library):
    for weak in ("   ", "a", "short-token", "sixteen chars ok"):
        result = run("serve", "--library", library, "--host", "0.0.0.0", "--token", weak, ok=False)
        assert "--token" in result.stderr and "Traceback" not in result.output, weak
    result = run("serve", "--library", library.parent / "nothing-here", ok=False)
    assert "no headsearch library here" in result.stderr


def test_corrections_from_the_web_page(client, library):
    run("people", "--library", library)
    people = client.get("/api/people").json()["people"]
    target = next(p for p in people if len(p["tracks"]) >= 2)
    track = target["tracks"][0]
    assert f'action="/tracks/{track}/not-this-person"' in client.get(f"/people/{target['id']}").text
    r = client.post(f"/tracks/{track}/not-this-person", data={"person": str(target["id"])}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/people/{target['id']}"
    after = client.get(f"/api/people/{target['id']}").json()["person"]
    assert track not in after["tracks"]
    r = client.post(f"/api/people/{target['id']}/name", json={"name": "  Web   Name "})
    assert r.json() == {"ok": True, "id": target["id"], "name": "Web Name"}
    assert json.loads(run("people", "--library", library, "--json").stdout)[0]  # the CLI sees the same
    assert any(p["name"] == "Web Name" for p in json.loads(run("people", "--library", library, "--json").stdout))
    assert client.post(f"/api/people/{target['id']}/hide", json={"hidden": True}).json()["hidden"] is True
    assert all(p["id"] != target["id"] for p in client.get("/api/people").json()["people"])
    assert any(p["id"] == target["id"] for p in client.get("/api/people?all=1").json()["people"])
    assert client.post("/api/tracks/99999/not-this-person").status_code == 400


def test_the_app_sees_a_running_index_and_never_holds_the_database(library, tmp_path):
    client = TestClient(create_app(library, cache_dir=tmp_path))
    before = client.post("/api/query?k=50", content=MIRANDA.read_bytes(), headers={"content-type": "image/png"}).json()
    assert before and all(h["video"] != str(MIRANDA) for h in before)
    run("index", MIRANDA, "--library", library, "-q")  # while the app is up: it holds no connection
    names = {v["name"] for v in client.get("/api/videos").json()["videos"]}
    assert MIRANDA.name in names
    same_pixels = pixel_copy(MIRANDA, tmp_path / "copies")  # the query file itself is never a hit: ask with its pixels
    after = client.post("/api/query?k=3", content=same_pixels.read_bytes(), headers={"content-type": "image/png"}).json()
    assert after[0]["video"] == str(MIRANDA) and after[0]["score"] > 0.99  # the new vector was picked up
    # ... while the photo itself, uploaded, is not its own hit (as `query` never answers with the query file)
    itself = client.post("/api/query?k=3", content=MIRANDA.read_bytes(), headers={"content-type": "image/png"}).json()
    assert itself and all(h["video"] != str(MIRANDA) for h in itself)  # other hits (Lin in the clip) are still there
    run("remove", MIRANDA, "--library", library)


# ----- ids past DuckDB's BIGINT ---------------------------------------------------------------------
HUGE_IDS = ["9" * 52, str(2**63), str(2**64), "1" + "0" * 5000]


def test_ids_out_of_range_are_not_found_on_every_id_route(client, library):
    vid = video_id(library, HAMILTON)
    person = json.loads(run("people", "--library", library, "--json", "--all").stdout)[0]["id"]
    for n in HUGE_IDS:
        for url in ("/media/{}", "/media/{}/preview", "/thumbnails/{}.jpg", "/frames/{}.jpg", "/videos/{}", "/api/videos/{}", "/tracks/{}",
                    "/api/tracks/{}", "/people/{}", "/api/people/{}", "/watch/{}", "/api/watch/{}", f"/watch/{vid}?track={{}}"):
            r = client.get(url.format(n))
            assert r.status_code == 404, (url, len(n), r.status_code)
        for url, form in (("/api/people/{}/name", {"name": "x"}), ("/api/people/{}/hide", {}), ("/api/people/{}/merge", {"other": "1"}),
                          ("/api/people/{}/split", {"tracks": "1"}), ("/api/tracks/{}/not-this-person", {}),
                          (f"/api/people/{person}/merge", {"other": n}), (f"/api/people/{person}/split", {"tracks": n}),
                          ("/api/tracks/1/not-this-person", {"person": n}), ("/people/{}/name", {"name": "x"})):
            r = client.post(url.format(n), data=form, follow_redirects=False)
            assert r.status_code == 404 and "below 2^63" in r.text, (url, form.keys(), len(n), r.status_code)


# ----- files served only as indexed ----------------------------------------------------------------
@pytest.fixture(scope="module")
def own_files(tmp_path_factory) -> tuple[Path, Path, Path, Path]:
    """A library of our own copies of a photo and a video (the tests swap them behind its back), and a
    secret file beside them that must never come out."""
    root = tmp_path_factory.mktemp("swapped").resolve()
    media = root / "media"
    media.mkdir()
    photo, clip = media / "two_people.jpg", media / "clip.mp4"
    shutil.copyfile(TWO_PEOPLE, photo)
    shutil.copyfile(HAMILTON, clip)
    secret = root / "secret.txt"
    secret.write_bytes(b"SECRET-KEY " * 5000)
    library = root / "library"
    run("index", media, "--library", library, "-q")
    return library, photo, clip, secret


@contextlib.contextmanager
def swapped(path: Path, replace) -> None:
    """`path` replaced by whatever `replace(path, original)` puts there (the original moved aside), then put back."""
    aside = path.with_name(path.name + ".aside")
    os.rename(path, aside)
    try:
        replace(path, aside)
        yield
    finally:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif os.path.lexists(path):
            path.unlink()
        os.rename(aside, path)


def link_to(target: Path):
    return lambda path, _: os.symlink(target, path)


def same_size_other_bytes(path: Path, original: Path) -> None:
    data = bytearray(original.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    st = original.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # even the same mtime


def test_media_thumbnails_and_pictures_only_as_indexed(own_files, tmp_path):
    library, photo, clip, secret = own_files
    client = TestClient(create_app(library, cache_dir=tmp_path / "cache"))
    pid, vid = video_id(library, photo), video_id(library, clip)
    track = ids(library, f"select id from tracks where video_id = {vid} order by id")[0]
    sighting = ids(library, f"select id from observations where track_id = {track} order by id")[0]
    thumbnail = library / "thumbnails" / f"{track}.jpg"
    urls = {photo: [f"/media/{pid}"], clip: [f"/media/{vid}", f"/media/{vid}/preview?start=1&end=2", f"/frames/{sighting}.jpg"]}
    for url in [*urls[photo], *urls[clip], f"/thumbnails/{track}.jpg"]:
        assert client.get(url).status_code == 200, url
    picture = library / "pictures" / f"{sighting}.jpg"
    assert picture.is_file()

    def refused(url: str, status: int, words: str) -> None:
        r = client.get(url)
        assert r.status_code == status and words in r.json()["error"], (url, r.status_code, r.text[:300])
        assert b"SECRET" not in r.content and len(r.json()["error"].splitlines()) == 1

    def fifo(path: Path, _) -> None:
        os.mkfifo(path)

    def folder_link(folder: Path, original: Path) -> None:  # the folder: a link to a copy holding the very same files
        copy = folder.with_name(folder.name + ".copy")
        shutil.copytree(original, copy, symlinks=True, copy_function=shutil.copy2)
        os.symlink(copy, folder)

    for path in (photo, clip):
        with swapped(path, link_to(secret)):
            for url in urls[path]:
                refused(url, 404, "symbolic link")
        with swapped(path, lambda p, original: os.symlink(original, p)):  # a link to the very file indexed: not what was indexed
            for url in urls[path]:
                refused(url, 404, "symbolic link")
        with swapped(path, lambda p, _: os.link(secret, p)):  # a hard link to another file
            refused(urls[path][0], 409, "changed since it was indexed")
        with swapped(path, same_size_other_bytes):
            for url in urls[path]:
                refused(url, 409, "changed since it was indexed")
        with swapped(path, fifo):
            refused(urls[path][0], 404, "not a regular file")
        with swapped(path, lambda p, _: None):
            refused(urls[path][0], 404, "no longer there")
    with swapped(photo.parent, folder_link):
        refused(urls[photo][0], 404, "symbolic link")
        refused(urls[clip][0], 404, "symbolic link")
    with swapped(photo.parent, lambda p, _: p.write_bytes(b"a file where the folder was")):
        refused(urls[photo][0], 404, "a file stands where a folder was")
    os.utime(photo)  # touched, the same content: still the file indexed (as for the indexer)
    assert client.get(urls[photo][0]).content == TWO_PEOPLE.read_bytes()

    with swapped(thumbnail, link_to(secret)):
        refused(f"/thumbnails/{track}.jpg", 404, "symbolic link")
    with swapped(thumbnail, fifo):
        refused(f"/thumbnails/{track}.jpg", 404, "not a regular file")
    with swapped(library / "thumbnails", folder_link):
        refused(f"/thumbnails/{track}.jpg", 404, "symbolic link")
    with swapped(picture, link_to(secret)):
        refused(f"/frames/{sighting}.jpg", 404, "symbolic link")
    with swapped(library / "pictures", folder_link):
        refused(f"/frames/{sighting}.jpg", 404, "symbolic link")
    for url in [*urls[photo], *urls[clip], f"/thumbnails/{track}.jpg"]:  # all put back: served again
        assert client.get(url).status_code == 200, url


def test_the_file_checked_is_the_file_sent(tmp_path):
    """Swapped between the check and the sending, the file sent is still the one checked."""
    from starlette.applications import Starlette
    from starlette.routing import Route

    indexed, secret = tmp_path / "clip.mp4", tmp_path / "secret.txt"
    indexed.write_bytes(b"indexed " * 4096)
    secret.write_bytes(b"SECRET " * 4096)
    size, digest = indexed.stat().st_size, fingerprint(indexed, indexed.stat().st_size)
    files = IndexedFiles()

    async def send(request):
        opened = files.open(str(indexed), size, digest, "video 1")
        os.rename(indexed, tmp_path / "moved")
        os.symlink(secret, indexed)
        return OpenFileResponse(opened)

    client = TestClient(Starlette(routes=[Route("/", send)]))
    for headers, body in (({}, b"indexed " * 4096), ({"Range": "bytes=8-15"}, b"indexed ")):
        r = client.get("/", headers=headers)
        assert r.content == body and b"SECRET" not in r.content
        indexed.unlink()
        os.rename(tmp_path / "moved", indexed)


# ----- cross-site requests and the session's token -------------------------------------------------
def test_every_change_needs_the_same_origin_and_the_session_token(library, tmp_path):
    from starlette.routing import Route

    own = "http://127.0.0.1:8765"
    app = create_app(library, cache_dir=tmp_path, allowed_hosts={"127.0.0.1", "localhost"})
    client = TestClient(app, base_url=own)
    run("people", "--library", library)
    people = json.loads(run("people", "--library", library, "--json", "--all").stdout)
    person, other = people[0], people[1]
    posts = sorted({r.path for r in app.routes if isinstance(r, Route) and "POST" in r.methods} - {"/api/query", "/api/compare"})
    assert len(posts) == 24  # POST /, POST /compare, nine corrections (forget among them) and two redactions, each with its /api twin
    token = client.get("/api/csrf").json()["token"]
    stranger = TestClient(app, base_url=own).get("/api/csrf").json()["token"]  # another session's token
    refused = [{CSRF_HEADER: token},  # names no origin (neither Origin nor Referer)
               {"origin": "null", CSRF_HEADER: token},  # a sandboxed frame, a data: or file: page
               {"origin": "http://evil.example", CSRF_HEADER: token},
               {"origin": "http://127.0.0.1:9999", CSRF_HEADER: token},  # another port is another origin
               {"referer": "http://evil.example/page.html", CSRF_HEADER: token},
               {"origin": own},  # no token
               {"origin": own, CSRF_HEADER: "0" * 64},
               {"origin": own, CSRF_HEADER: stranger}]
    form = {"name": "Mallory", "hidden": "1", "other": str(other["id"]), "tracks": str(person["tracks"][0]), "person": str(person["id"])}
    before = client.get("/api/people?all=1").json()
    for path in posts:
        url = re.sub(r"\{track_id[^}]*\}", str(person["tracks"][0]), re.sub(r"\{person_id[^}]*\}", str(person["id"]), path))
        url = re.sub(r"\{video_id[^}]*\}", str(video_id(library, HAMILTON.resolve())), url)
        for headers in refused:
            files = {"photo": ("two.jpg", TWO_PEOPLE.read_bytes(), "image/jpeg")} if path == "/" else None
            r = client.post(url, data=form, files=files, headers=headers, follow_redirects=False)
            assert r.status_code == 403, (url, headers, r.status_code)
            assert "refused" in r.text or "token" in r.text
    assert client.get("/api/people?all=1").json() == before  # nothing changed
    assert not list(tmp_path.rglob("jobs"))  # no redaction started
    # The page's own form, as a browser posts it: its hidden field, its Origin (or only a Referer).
    page = client.get(f"/people/{person['id']}").text
    field = re.search(r'name="csrf" value="([0-9a-f]{64})"', page).group(1)
    assert field == token and page.count('name="csrf"') == page.count('method="post"') >= 4
    r = client.post(f"/people/{person['id']}/name", data={"name": "Page Name", "csrf": field}, headers={"origin": own},
                    follow_redirects=False)
    assert r.status_code == 303
    r = client.post(f"/api/people/{person['id']}/hide", json={"hidden": False}, headers={"referer": own + "/people", CSRF_HEADER: token})
    assert r.status_code == 200
    assert any(p["name"] == "Page Name" for p in client.get("/api/people").json()["people"])
    # A restarted server (a new key) asks open pages to be reloaded.
    again = create_app(library, cache_dir=tmp_path)
    again_client = TestClient(again, base_url=own, cookies=client.cookies)
    r = again_client.post(f"/api/people/{person['id']}/name", json={"name": "x"}, headers={"origin": own, CSRF_HEADER: token})
    assert r.status_code == 403 and "reload the page" in r.text


def test_api_query_is_open_to_scripts_but_not_to_other_sites(client, library):
    """/api/query changes nothing: a script posts without a token; a browser page of another site cannot."""
    photo = {"photo": ("lmm.png", MIRANDA.read_bytes(), "image/png")}
    bare = TestClient(client.app)
    assert bare.post("/api/query", files=photo, data={"k": "1"}).status_code == 200
    assert bare.post("/api/query", files=photo, data={"k": "1"}, headers={"origin": "http://testserver"}).status_code == 200
    for headers in ({"origin": "null"}, {"origin": "http://evil.example"}, {"referer": "http://evil.example/"}):
        assert bare.post("/api/query", files=photo, data={"k": "1"}, headers=headers).status_code == 403, headers


# ----- uploads: MiB, bounded, streamed ----------------------------------------------------------------
def test_upload_cap_is_said_in_mib_and_holds_without_a_length(library, tmp_path):
    client = TestClient(create_app(library, cache_dir=tmp_path))  # the default cap, 20 MiB
    r = client.post("/api/query", content=b"\0" * (20 * 2**20 + 1), headers={"content-type": "image/png"})
    assert r.status_code == 413 and "at most 20 MiB" in r.json()["error"] and "MB" not in r.json()["error"]

    def chunks(head: bytes = b""):  # no Content-Length: the cap is counted as the body streams in ("more than")
        yield head
        for _ in range(40):
            yield b"\0" * 2**20

    boundary = b"--cap\r\nContent-Disposition: form-data; name=\"photo\"; filename=\"x.png\"\r\nContent-Type: image/png\r\n\r\n"
    for body, kind in ((chunks(), "image/png"), (chunks(boundary), "multipart/form-data; boundary=cap")):
        r = client.post("/api/query", content=body, headers={"content-type": kind})
        assert r.status_code == 413 and "more than 20 MiB" in r.json()["error"], (kind, r.status_code, r.text[:200])


def test_an_upload_past_the_slots_is_refused_at_once(library, tmp_path, monkeypatch):
    app = create_app(library, cache_dir=tmp_path, upload_slots=1)
    with serving(app) as port:
        with socket.create_connection(("127.0.0.1", port)) as first, socket.create_connection(("127.0.0.1", port)) as second:
            first.sendall(upload_head(port, 3_000_000) + b"\0" * 1_000_000)  # holds the one slot: two thirds still to come
            time.sleep(0.5)
            start = time.monotonic()
            second.sendall(upload_head(port, 3_000_000) + b"\0" * 65536)
            status, second_head = http_answer(second)
            assert status == 503 and "retry-after: 2" in second_head and time.monotonic() - start < 2.0
            first.sendall(b"\0" * 2_000_000)
            assert http_answer(first)[0] == 415  # the first one is read to its end and answered
        with socket.create_connection(("127.0.0.1", port)) as big:  # over the cap: refused before a byte of the body
            big.sendall(upload_head(port, 100 * 2**20))
            status, _ = http_answer(big)
            assert status == 413
        monkeypatch.setattr("serve.uploads.UPLOAD_SECONDS", 1.0)
        with socket.create_connection(("127.0.0.1", port)) as slow:  # too slow: refused, and its slot is free again
            slow.sendall(upload_head(port, 3_000_000) + b"\0" * 1000)
            assert http_answer(slow)[0] == 408
        with socket.create_connection(("127.0.0.1", port)) as after:
            after.sendall(upload_head(port, 1000) + b"\0" * 1000)
            assert http_answer(after)[0] == 415


def test_many_large_uploads_keep_the_server_small(library, tmp_path):
    """10 concurrent 19 MB uploads (raw bodies, then forms) to the real server (`headsearch serve`): every
    one is answered (415, or 503 past the slots), its memory grows by far less than the uploads, and no
    upload is left in the temporary folder. (tests/upload_memory.py runs the issue's 50.)"""
    spool = tmp_path / "tmp"
    spool.mkdir()
    port = upload_memory.free_port()
    server = upload_memory.start_server(library, port, env={"TMPDIR": str(spool)})
    try:
        for form in (False, True):
            memory, answers = upload_memory.measure(port, server.pid, 10, 19_000_000, timeout=60, form=form, settle=0.5)
            assert all(a.status in (415, 503) for a in answers), [(a.status, a.error) for a in answers]
            assert all(a.retry_after == "2" for a in answers if a.status == 503)
            assert sum(a.status == 415 for a in answers) >= 2  # one client (this one) holds at most half of the 4 slots
            assert memory.peak - memory.before < 150, (form, memory.before, memory.peak)  # 190 MB were sent
    finally:
        upload_memory.stop_server(server)
    assert not [p.name for p in spool.iterdir() if p.name.startswith("headsearch-upload")]


def compared(client, started) -> dict:
    """A compare job (POST /api/compare answers 202 with it) polled on its /api page to its end: its last answer."""
    assert started.status_code == 202, started.text
    while (job := client.get(started.json()["page"]).json())["running"]:
        time.sleep(0.25)
    return job


def test_compare_page_and_its_twin_answer_as_the_cli(client, library, tmp_path):
    """/api/compare with a library video starts a job whose result is the entry `compare --json` gives; an uploaded clip
    is compared too; a request without a photo, or with neither a video nor a clip, is one line."""
    from headsearch.basics.frames import frame_at
    from headsearch.basics.images import encode_jpeg

    aoc = RETALKING / "3.mp4"
    still = tmp_path / "aoc.jpg"
    still.write_bytes(encode_jpeg(frame_at(aoc, 0.5), 95))
    form = client.get("/api/compare").json()
    video = next(v for v in form["videos"] if v["path"] == str(aoc))
    assert video["name"].endswith("video-retalking/examples/face/3.mp4")  # its place under the folder the videos share
    assert "Compare" in client.get("/compare").text
    twin = compared(client, client.post("/api/compare", files={"photo": ("aoc.jpg", still.read_bytes(), "image/jpeg")},
                                        data={"video_id": str(video["id"])}))
    cli = json.loads(run("compare", aoc, "--ref", still, "--json").stdout)[0]
    got = twin["result"]
    assert got["verdict"] == cli["verdict"] == "same_look"
    assert got["segments"] == cli["segments"] and got["frames"] == cli["frames"] and got["summary"] == cli["summary"]
    clip = RETALKING / "1.mp4"
    other = compared(client, client.post("/api/compare", files={"photo": ("aoc.jpg", still.read_bytes(), "image/jpeg"),
                                                                 "clip": ("1.mp4", clip.read_bytes(), "video/mp4")}))["result"]
    assert other["verdict"] == "other_person" and other["video"] == "1.mp4"
    five = DATA / "face-api.js" / "test" / "media" / "video.mp4"  # 5 frames, heads by keypoints: numpy values in its JSON
    short = compared(client, client.post("/api/compare", files={"photo": ("aoc.jpg", still.read_bytes(), "image/jpeg"),
                                                                 "clip": ("video.mp4", five.read_bytes(), "video/mp4")}))
    assert short["state"] == "done" and short["result"]["frames"][0]["box"] is not None, short
    broken = compared(client, client.post("/api/compare", files={"photo": ("aoc.jpg", still.read_bytes(), "image/jpeg"),
                                                                  "clip": ("broken clip.mp4", b"\0" * 4096, "video/mp4")}))
    error = broken["error"]  # named as the user named it, not by the server's temporary file
    assert broken["state"] == "failed" and "broken clip.mp4" in error and "/tmp" not in error and "upload" not in error, error
    r = client.post("/api/compare", files={"clip": ("1.mp4", b"\0" * 100, "video/mp4")})
    assert r.status_code == 400 and "reference photo" in r.json()["error"]
    r = client.post("/api/compare", files={"photo": ("aoc.jpg", still.read_bytes(), "image/jpeg")})
    assert r.status_code == 400 and "pick a video" in r.json()["error"]


def test_serve_on_a_busy_port_is_one_line(library):
    """Said before any address is printed, in one line, without uvicorn's error."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = run("serve", "--library", library, "--port", str(port), ok=False)
    assert r.exit_code == 1 and r.stderr.strip().splitlines() == [r.stderr.strip()] and "cannot serve there" in r.stderr
    assert "headsearch: http" not in r.output and "Traceback" not in r.output
