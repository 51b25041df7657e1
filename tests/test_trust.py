"""Trust at the door and on the page (issue 30): strong tokens and a client that guesses slowed; slow uploads that
never starve a search; security headers on every response; names that cannot fake a listing; read-only libraries;
bad numbers; a private temporary folder; pickers that propose no stranger; boxes within the picture; one time
formatter; durations as the player shows them; a favicon; an access log."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import EXAMPLES, HAMILTON, http_answer, needs_data, pixel_copy, run, serving, upload_head
from starlette.testclient import TestClient

from serve.app import create_app
from serve.guard import SECURITY_HEADERS

pytestmark = [needs_data, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
MIRANDA = EXAMPLES / "lin-manuel-miranda.png"


@pytest.fixture(scope="module")
def library(hamilton_library, tmp_path_factory) -> Path:
    lib = tmp_path_factory.mktemp("trust") / "library"
    shutil.copytree(hamilton_library, lib)
    run("people", "--library", lib)
    return lib


# ----- at the door ---------------------------------------------------------------------------------
def test_a_guesser_is_slowed_and_logged(library, tmp_path, caplog):
    """Wrong tokens are counted by how they begin, from any address: a guesser spreading over addresses is slowed all
    the same, and never locks out a right token that begins otherwise (behind a proxy every client has one address)."""
    from serve.guard import Backoff

    secret = "a-strong-token-of-24-chars"
    app = create_app(library, token=secret, cache_dir=tmp_path)
    app.state.backoff = Backoff(free=3, first_wait_s=0.4)
    addresses = [TestClient(app, client=(f"10.0.0.{n}", 40000 + n)) for n in range(4)]
    with caplog.at_level(logging.WARNING, logger="serve.guard"):
        for n, client in enumerate(addresses[:3]):
            assert client.get(f"/api/videos?token=guess{n}").status_code == 401
    assert sum("wrong token from 10.0.0." in r.message for r in caplog.records) == 3
    r = addresses[3].get("/api/videos?token=guess9")  # a fourth address guessing alike waits out the back-off
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    for client in addresses:  # the right token, from the guessers' addresses too, is never kept out by them
        assert client.get(f"/api/videos?token={secret}").status_code == 200
    proxy = TestClient(app, client=("10.0.0.1", 40001))  # wrong tokens that begin as the right one (typos) slow it down
    for n in range(3):
        assert proxy.get(f"/api/videos?token={secret[:6]}typo{n}").status_code == 401
    assert proxy.get(f"/api/videos?token={secret}").status_code == 429
    time.sleep(0.45)
    assert proxy.get(f"/api/videos?token={secret}").status_code == 200  # after the wait it works, and clears the count
    assert proxy.get(f"/api/videos?token={secret[:6]}typo9").status_code == 401
    with pytest.raises(Exception, match="too short"):
        create_app(library, token="short", cache_dir=tmp_path)
    with pytest.raises(Exception, match="blanks"):
        create_app(library, token=" " * 20, cache_dir=tmp_path)
    for weak, why in (("a" * 16, "too easy"), ("abcdefgh" * 2, "too easy"), ("\u200b" * 16, "invisible"),
                      ("Ab3" + "\u200b" + "xY9kLm2Pq7Rt", "invisible"), ("Ab3\x1bxY9kLm2Pq7Rt", "invisible")):
        with pytest.raises(Exception, match=why):
            create_app(library, token=weak, cache_dir=tmp_path)
    create_app(library, token="Ab3xY9kLm2Pq7Rt5", cache_dir=tmp_path)  # 16 characters, 16 different ones, three kinds


def test_a_request_cannot_write_to_the_operators_terminal(library, tmp_path, caplog):
    """The log says what was asked with its control characters escaped: no colour, no bell, no fake line."""
    client = TestClient(create_app(library, token="a-strong-token-of-24-chars", cache_dir=tmp_path))
    with caplog.at_level(logging.INFO, logger="serve.guard"):
        client.get("/api/%1b%5b31mred%07%0afake?token=wrong-guess")  # ESC [31m, BEL, a newline
    messages = [r.getMessage() for r in caplog.records]
    assert messages and not any(c in m for m in messages for c in "\x1b\x07\n")
    assert any("\\x1b[31mred\\x07" in m for m in messages)


def test_serve_off_the_loopback_makes_a_strong_token(library, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    server = subprocess.Popen([sys.executable, "-c", "from cli.main import main; main()", "serve", "--library", str(library),
                               "--host", "0.0.0.0", "--port", str(port)], env=env, stderr=subprocess.PIPE, text=True)
    try:
        lines = [server.stderr.readline() for _ in range(2)]
    finally:
        server.terminate()
        server.wait(timeout=20)
    address = next(line for line in lines if line.startswith("headsearch: "))
    token = address.split("?token=")[1].split()[0]
    assert len(token) >= 32 and "a token was made for this run" in lines[0]


def _answer(s: socket.socket, timeout: float = 20.0) -> int:
    return http_answer(s, timeout)[0]


def test_slow_uploads_never_refuse_a_search(library, tmp_path, monkeypatch):
    """A client trickling large uploads holds at most its share of the slots, and is dropped for its rate; a search
    of an ordinary photo (declared small: no slot) is answered meanwhile."""
    monkeypatch.setattr("serve.uploads.GRACE_S", 1.0)
    app = create_app(library, cache_dir=tmp_path, upload_slots=2)
    with serving(app) as port, socket.create_connection(("127.0.0.1", port)) as slow, socket.create_connection(("127.0.0.1", port)) as second:
        slow.sendall(upload_head(port, 5_000_000) + b"\0" * 20_000)  # a large upload, then a trickle
        time.sleep(0.3)
        second.sendall(upload_head(port, 5_000_000) + b"\0" * 20_000)
        assert _answer(second) == 503  # one client's share of 2 slots is 1
        photo = MIRANDA.read_bytes()
        with socket.create_connection(("127.0.0.1", port)) as search:
            search.sendall(upload_head(port, len(photo)) + photo)
            assert _answer(search, timeout=60) == 200  # an ordinary photo takes no slot
        started = time.monotonic()
        for _ in range(3):
            slow.sendall(b"\0" * 1000)
            time.sleep(0.5)
        assert _answer(slow) == 408 and time.monotonic() - started < 10  # under the rate floor: dropped


def test_a_large_photo_is_searched_while_four_clients_dribble(library, tmp_path, monkeypatch):
    """Four clients, from four addresses, hold every upload slot with large bodies at 40 KiB/s (over the rate floor);
    a search of a 4 MB photo takes the slowest one's slot and is answered within 5 s; the dropped upload is told so."""
    import threading

    import cv2
    import numpy as np

    monkeypatch.setattr("serve.uploads.GRACE_S", 1.0)  # the trickles are past their grace sooner (5 s otherwise)
    rgb = cv2.resize(cv2.imread(str(MIRANDA)), (2800, 2436))
    noise = np.random.default_rng(0).integers(-16, 17, rgb.shape)
    photo = cv2.imencode(".jpg", np.clip(rgb + noise, 0, 255).astype(np.uint8), [cv2.IMWRITE_JPEG_QUALITY, 97])[1].tobytes()
    assert len(photo) > 4_000_000
    app = create_app(library, cache_dir=tmp_path)
    stop = threading.Event()
    answers: list[int] = []

    def dribble(address: str, port: int) -> None:
        with socket.create_connection(("127.0.0.1", port), source_address=(address, 0)) as s:
            s.sendall(upload_head(port, 4_000_000))
            with contextlib.suppress(OSError):
                for _ in range(400):  # 40 KiB/s, for at most 40 s
                    if stop.is_set():
                        break
                    s.sendall(b"\0" * 4096)
                    time.sleep(0.1)
                answers.append(_answer(s, timeout=5))

    with serving(app) as port:
        threads = [threading.Thread(target=dribble, args=(f"127.0.0.{n}", port)) for n in range(2, 6)]
        for t in threads:
            t.start()
        time.sleep(2.5)  # every slot held, each upload past its grace at about 40 KiB/s
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port)) as search:
            search.sendall(upload_head(port, len(photo)).replace(b"image/png", b"image/jpeg") + photo)
            status = _answer(search, timeout=30)
        elapsed = time.monotonic() - started
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join(timeout=20)
    assert status == 200 and elapsed < 5.0, (status, elapsed)
    assert 408 in answers  # the slowest upload was dropped, with its reason


def test_searches_run_at_once_and_answer_as_one_alone(library, tmp_path):
    """Searches at once (up to the usable cores; the vector indexes one at a time) give the answers of the same searches
    made one after another."""
    import http.client
    import threading

    photos = [MIRANDA.read_bytes(), (EXAMPLES / "alex-lacamoire.png").read_bytes()]
    app = create_app(library, cache_dir=tmp_path)

    def search(port: int, photo: bytes) -> list:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        c.request("POST", "/api/query?k=3&show_weak=1", body=photo, headers={"Content-Type": "image/png"})
        r = c.getresponse()
        assert r.status == 200
        return [(h["video"], h["track_id"], h["score"], h["tier"]) for h in json.loads(r.read())]

    with serving(app) as port:
        alone = [search(port, p) for p in photos]
        answers: dict[int, list] = {}
        threads = [threading.Thread(target=lambda i=i: answers.__setitem__(i, search(port, photos[i % 2]))) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert len(answers) == 6 and all(answers[i] == alone[i % 2] for i in range(6))


def test_a_header_that_never_ends_is_cut_off(library, tmp_path, monkeypatch):
    """Slowloris: a client sending its request header a byte at a time, forever, is disconnected at the header
    deadline, on a new connection and on a kept-alive one; a whole header in time is answered."""
    monkeypatch.setattr("serve.server.HEADER_DEADLINE_S", 1.5)
    app = create_app(library, cache_dir=tmp_path)
    with serving(app) as port:
        def dribble(conn: socket.socket, seconds: float) -> float:
            """Send a header that never ends, a byte each 0.2 s; the seconds until the server closed the connection."""
            started = time.monotonic()
            conn.settimeout(0.2)
            for byte in b"GET /people HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 1000:
                try:
                    conn.sendall(bytes([byte]))
                    if conn.recv(1) == b"":
                        break
                except TimeoutError:
                    pass
                except OSError:  # reset: closed
                    break
                if time.monotonic() - started > seconds:
                    break
            return time.monotonic() - started

        with socket.create_connection(("127.0.0.1", port)) as slow:
            assert 1.4 < dribble(slow, 8) < 4
        with socket.create_connection(("127.0.0.1", port)) as kept:
            kept.sendall(f"GET /favicon.ico HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            assert _answer(kept) == 200  # a whole header in time: answered, and the connection kept alive
            assert dribble(kept, 8) < 4


def test_every_response_carries_the_security_headers(library, tmp_path):
    client = TestClient(create_app(library, cache_dir=tmp_path))
    videos = client.get("/api/videos").json()["videos"]
    for path in ("/", "/people", "/api/videos", f"/media/{videos[0]['id']}", "/static/app.js", "/favicon.ico", "/no-such-page",
                 "/tracks/99999999"):
        r = client.get(path)
        for name, value in SECURITY_HEADERS.items():
            assert r.headers.get(name) == value, (path, name)
    assert "script-src 'self'" in SECURITY_HEADERS["Content-Security-Policy"] and "unsafe-inline" not in SECURITY_HEADERS[
        "Content-Security-Policy"].split("script-src")[1].split(";")[0]
    r = client.post("/api/people/update", headers={"origin": "http://evil.example"})
    assert r.status_code == 403 and r.headers["x-frame-options"] == "DENY"

    broken = create_app(library, cache_dir=tmp_path)

    def fails(*args):
        raise RuntimeError("a fault nobody foresaw")

    broken.state.site.videos_page = fails
    for path in ("/videos", "/api/videos"):  # an unexpected error: one line, no traceback, the headers all the same
        r = TestClient(broken, raise_server_exceptions=False).get(path)
        assert r.status_code == 500 and "unexpected error (RuntimeError)" in r.text and "Traceback" not in r.text, path
        for name, value in SECURITY_HEADERS.items():
            assert r.headers.get(name) == value, (path, name)
    assert client.get("/favicon.ico").headers["content-type"].startswith("image/svg")
    assert '<link rel="icon"' in client.get("/").text


def test_an_access_log_line_per_request_with_v(library, tmp_path, caplog):
    client = TestClient(create_app(library, cache_dir=tmp_path))
    with caplog.at_level(logging.INFO, logger="serve.guard"):
        client.get("/api/videos")
    assert any("GET /api/videos 200" in r.message for r in caplog.records)


# ----- on the command line ---------------------------------------------------------------------------
def test_names_cannot_fake_a_listing(tmp_path):
    """A file whose name holds a newline and an escape sequence is one line of every listing, its controls escaped."""
    folder = tmp_path / "media"
    folder.mkdir()
    odd = folder / "fake\nindexed           etc-passwd\x1b[2J.png"
    shutil.copyfile(MIRANDA, odd)
    library = tmp_path / "lib"
    run("index", folder, "--library", library, "-q")
    for args in (["list"], ["list", "--tracks"], ["people", "--unlisted"], ["people", "inbox"]):
        out = run(*args, "--library", library).stdout
        assert "\x1b" not in out and "\\x1b" in out, args
        assert not any(line.startswith("indexed           etc-passwd") for line in out.splitlines()), args
    photo = pixel_copy(MIRANDA, tmp_path / "q")  # the same pixels in another file: the query file itself is never a hit
    out = run("query", photo, "--library", library, "--no-pictures").stdout
    assert "fake\\nindexed" in out and "\x1b" not in out


def _read_only(folder: Path):
    """The folder made read-only even for root (a read-only bind mount, else the immutable attribute); None when
    neither is possible here."""
    mount = folder.parent / f"{folder.name}-ro"
    mount.mkdir()
    if subprocess.run(["mount", "--bind", str(folder), str(mount)], capture_output=True).returncode == 0:
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(mount)], capture_output=True).returncode == 0:
            return mount, lambda: subprocess.run(["umount", str(mount)], capture_output=True)
        subprocess.run(["umount", str(mount)], capture_output=True)
    mount.rmdir()
    if shutil.which("chattr") and subprocess.run(["chattr", "-R", "+i", str(folder)], capture_output=True).returncode == 0:
        return folder, lambda: subprocess.run(["chattr", "-R", "-i", str(folder)], capture_output=True)
    return None


def test_reads_work_on_a_read_only_library(library, tmp_path):
    copy = shutil.copytree(library, tmp_path / "lib")
    made = _read_only(copy)
    if made is None:
        pytest.skip("cannot make a folder read-only here (no bind mount, no chattr)")
    ro, undo = made
    try:
        with contextlib.suppress(OSError):
            (ro / "probe").write_text("x")
        assert not (ro / "probe").exists()
        r = run("people", "--library", ro, ok=None)
        assert r.exit_code == 0 and "cannot be written here" in r.stderr and "person" in r.stdout, r.output
        for args in (["people", "inbox"], ["people", "suggestions"], ["people", "screen-time"], ["list"], ["stats"]):
            assert run(*args, "--library", ro, ok=None).exit_code == 0, args
        assert run("query", MIRANDA, "--library", ro, "--json").exit_code == 0  # its pictures go to the private temp folder
        client = TestClient(create_app(ro, cache_dir=tmp_path / "cache"), raise_server_exceptions=False)
        person = client.get("/api/people").json()["people"][0]["id"]
        csrf = client.get("/api/csrf").json()
        r = client.post(f"/api/people/{person}/name", data={"name": "Somebody", csrf["field"]: csrf["token"]},
                        headers={"origin": "http://testserver"})
        assert r.status_code == 503 and "the library is read-only here" in r.json()["error"], r.text  # one line, no traceback
    finally:
        undo()


def test_bad_numbers_are_refused_with_one_line(library, tmp_path):
    for args, word in ((["query", MIRANDA, "--min-score", "nan"], "not a number"), (["query", MIRANDA, "--min-score", "inf"], "not a number"),
                       (["query", MIRANDA, "--under", tmp_path / "missing"], "does not exist"),
                       (["index", MIRANDA, "--workers", "100000"], "not in the range"),
                       (["compare", HAMILTON, "--ref", MIRANDA, "--fps", "inf"], "not a number"),
                       (["query", MIRANDA, "--export", tmp_path / "x.otio", "--handles", "nan"], "not a number")):
        r = run(*args, "--library", library, ok=False)
        assert r.exit_code == 2 and word in r.stderr and "Traceback" not in r.output, (args, r.output)


def test_the_temporary_folder_is_this_users_own(tmp_path, monkeypatch):
    import tempfile

    from headsearch.basics.files import private_temp_folder

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = private_temp_folder("pictures")
    assert folder.is_dir() and (folder.stat().st_mode & 0o777) == 0o700 and folder.parent.name == f"headsearch-{os.getuid()}"
    folder.parent.chmod(0o777)  # made open to everyone (or by someone else first): refused
    with pytest.raises(PermissionError):
        private_temp_folder("pictures")
    folder.parent.chmod(0o700)
    shutil.rmtree(folder.parent)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    os.symlink(tmp_path / "elsewhere", folder.parent)
    with pytest.raises(PermissionError):
        private_temp_folder("pictures")


# ----- on the page ---------------------------------------------------------------------------------
def _selected(html: str, name: str) -> list[str]:
    """The values of the selected options of the first <select name=NAME> on a page."""
    start = html.index(f'<select name="{name}"')
    select = html[start:html.index("</select>", start)]
    return [part.split('value="')[1].split('"')[0] for part in select.split("<option")[1:] if " selected" in part.split(">")[0]]


def test_pickers_pre_select_no_stranger(library, tmp_path):
    from headsearch.people.listing import person_choices
    from headsearch.people.persons import people_thresholds
    from headsearch.store.library import Library

    client = TestClient(create_app(library, cache_dir=tmp_path))
    lib = Library.open(library)
    bar = people_thresholds(lib).identity
    for p in client.get("/api/people").json()["people"]:
        choices = person_choices(lib, person_id=p["id"], min_tracks=1)
        above = [c for c in choices if c["score"] is not None and c["score"] > bar]
        picked = _selected(client.get(f"/people/{p['id']}").text, "other") if choices else []
        assert picked == ([str(choices[0]["id"])] if above and choices[0] is above[0] else [""]), (p["id"], choices[:2])
    checked = 0
    for t in client.get("/api/inbox").json()["tracks"][:6]:
        html = client.get(f"/tracks/{t['track_id']}").text
        if '<select name="person"' not in html:
            continue
        checked += 1
        picked = _selected(html, "person")
        if t["nearest"] and t["likely"]:
            assert picked == [str(t["nearest"]["id"])], t  # the inbox's own suggestion
        else:
            own = (client.get(f"/api/tracks/{t['track_id']}").json()["person"] or {}).get("id")
            first = person_choices(lib, track_id=t["track_id"], min_tracks=1, exclude=own)[0]
            assert picked == ([str(first["id"])] if first["score"] is not None and first["score"] > bar else [""]), (t, first)
    assert checked


def test_merge_suggestions_expect_few_wrong_ones(library):
    from headsearch.people.listing import SUGGESTION_BUDGET, suggestion_bar
    from headsearch.store.library import Library

    lib = Library.open(library)
    bars = [suggestion_bar(lib, n) for n in (2, 10, 40, 200)]
    assert bars == sorted(bars) and bars[0] < bars[-1]  # more persons, more pairs: a stricter bar
    assert 0 < SUGGESTION_BUDGET <= 1


def test_boxes_within_the_picture_times_and_durations_as_players_show_them(library, tmp_path):
    import cv2

    edge = tmp_path / "edge.png"  # Miranda's face at the photo's top edge: his head's box reaches above it
    image = cv2.imread(str(MIRANDA))
    cv2.imwrite(str(edge), image[int(image.shape[0] * 0.18):, :])
    out = json.loads(run("query", edge, "--library", library, "--all", "--json", "--no-pictures").stdout)
    head = out[0]
    h, w = image.shape[0] - int(image.shape[0] * 0.18), image.shape[1]
    assert head["box"][1] >= 0 and head["box"][3] <= h and head["box"][2] <= w
    assert head["box_unclipped"][1] < 0  # the whole head's box is kept under its own name
    text = run("query", edge, "--library", library, "--all", "--no-pictures").stdout
    assert ", y 0-" in text and "-y" not in text
    client = TestClient(create_app(library, cache_dir=tmp_path / "cache"))
    video = next(v for v in client.get("/api/videos").json()["videos"] if v["name"] == HAMILTON.name)
    assert abs(video["duration"] - 10.028) < 0.01  # as a player says: to the end of the file's timeline
    assert "0:00:10.028" in client.get(f"/videos/{video['id']}").text
    hits = json.loads(run("query", MIRANDA, "--library", library, "--json").stdout)
    page = client.get(f"/api/videos/{video['id']}").json()
    track = next(t for p in page["people"] for t in p["tracks"] if abs(t["start"] - 3.588) < 0.01)
    watch = client.get(track["watch"]).text
    hit = next(h for h in hits if abs(h["start"] - 3.588) < 0.01)
    from headsearch.basics.timeline import format_time

    assert f"{format_time(hit['start'])}–{format_time(hit['end'])}" in watch  # the player's page says what the CLI says
