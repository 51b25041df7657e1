"""The web app in a real browser (Debian's Chromium driven by Playwright): upload a photo, see result
cards, open the player and find the video at the hit. Screenshots are kept as test artefacts in
$HEADSEARCH_ARTEFACTS (default: test-artefacts/ in the checkout)."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from browser import launch, needs_chromium, screenshot
from conftest import EXAMPLES, HAMILTON, needs_data, run, serving

pytestmark = [needs_data, pytest.mark.slow, needs_chromium]


@pytest.fixture(scope="module")
def server(hamilton_library, tmp_path_factory):
    """`headsearch serve`'s app under uvicorn on a free loopback port, in a thread."""
    from serve.app import create_app

    library = tmp_path_factory.mktemp("browser") / "library"
    shutil.copytree(hamilton_library, library)
    run("people", "--library", library)
    app = create_app(library, cache_dir=tmp_path_factory.mktemp("cache"), allowed_hosts={"127.0.0.1", "localhost"})
    with serving(app) as port:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def page():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch(p)
        try:
            # The app's CSP allows no eval; Playwright's waits evaluate strings: the test's page bypasses it
            # (`test_the_pages_keep_to_their_content_security_policy` checks the pages under it).
            yield browser.new_page(viewport={"width": 1280, "height": 900}, bypass_csp=True)
        finally:
            browser.close()


def _images_loaded(page) -> None:
    page.wait_for_function("Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)", timeout=60_000)


def test_search_cards_and_player_at_the_hit(server, page):
    page.goto(server + "/")
    page.set_input_files("#photo", str(EXAMPLES / "lin-manuel-miranda.png"))  # picking a photo submits the search
    page.wait_for_selector(".card", timeout=120_000)
    _images_loaded(page)
    screenshot(page, "search.png")
    cards = page.locator(".card")
    assert 1 <= cards.count() <= 5  # confident hits only (the default model ships thresholds); the rest are counted
    assert "below the identity threshold" in page.inner_text("body")
    first = page.locator(".card-main").first
    assert HAMILTON.name in first.inner_text()
    href = first.get_attribute("href")
    start = float(href.split("start=")[1].split("&")[0])
    first.click()
    page.wait_for_function("(() => { const v = document.getElementById('player'); return v && v.readyState >= 2; })()", timeout=60_000)
    time.sleep(0.5)
    state = page.evaluate("(() => { const v = document.getElementById('player'); return {t: v.currentTime, error: v.error && v.error.code,"
                          " paused: v.paused, duration: v.duration}; })()")
    screenshot(page, "player.png", full_page=False)
    assert state["error"] is None and state["duration"] > 9
    assert abs(state["t"] - start) < 0.1, (state, start)


def test_people_pages(server, page):
    page.goto(server + "/people")
    _images_loaded(page)
    screenshot(page, "people.png")
    tiles = page.locator(".person-tile")
    assert tiles.count() >= 1  # persons of two tracks or more; the rest wait in the inbox
    page.locator(".person-name").first.click()
    page.wait_for_selector("section.look")
    _images_loaded(page)
    screenshot(page, "person.png")
    assert page.locator("button.danger").count() >= 1  # "not this person" on every track
    assert page.locator("select[name=other] option").count() >= 1  # merge by picking the other person
    page.goto(server + "/inbox")
    page.wait_for_selector(".inbox-track")
    _images_loaded(page)
    screenshot(page, "inbox.png")
    assert page.locator(".inbox-track form[action$='/move']").count() >= 2
    page.goto(server + "/videos")
    page.locator("table.list a", has_text=HAMILTON.name).click()
    page.wait_for_selector(".tl-track")
    _images_loaded(page)
    screenshot(page, "video.png")


def _person(server: str, pid: int) -> dict:
    import json
    from urllib.request import urlopen

    with urlopen(f"{server}/api/people/{pid}", timeout=30) as r:
        return json.load(r)["person"]


def test_forms_work_and_other_pages_cannot_post(server, page):
    """The app's own forms (with their token) change things; a form another site's page posts (a real
    cross-site page, or a data: page whose Origin is `null`) is refused and changes nothing."""
    page.goto(server + "/people")
    page.locator(".person-name").first.click()
    page.wait_for_selector("section.look")
    pid = int(page.url.rstrip("/").split("/")[-1])
    page.fill("input[name=name]", "Browser Name")
    page.click("form[action$='/name'] button")
    page.wait_for_selector("h1:has-text('Browser Name')")
    assert _person(server, pid)["name"] == "Browser Name"
    attack = (f'<form id="f" method="post" action="{server}/people/{pid}/name"><input name="name" value="Mallory">'
              f'<input name="csrf" value="{"0" * 64}"></form><script>document.getElementById("f").submit()</script>')
    page.route("http://evil.test/**", lambda route: route.fulfill(status=200, content_type="text/html", body=attack))
    for start, why in (("http://evil.test/", "it comes from http://evil.test"), ("data:text/html," + attack, "a page without an origin")):
        with page.expect_navigation(url=f"{server}/people/{pid}/name"):
            page.goto(start)
        text = page.inner_text("body")
        assert "cross-site request refused" in text and why in text, (start[:20], text[:200])
    page.unroute("http://evil.test/**")
    assert _person(server, pid)["name"] == "Browser Name"


def _get_json(url: str) -> dict:
    import json
    from urllib.request import urlopen

    with urlopen(url, timeout=30) as r:
        return json.load(r)


def _frames_around(path: Path, time_s: float):
    """The decoded frame presented at `time_s` (the one indexed there) and the frame just before it, as RGB arrays."""
    from clips import timed_frames

    before = None
    for shown, rgb in timed_frames(path):
        if shown >= time_s - 1e-4:  # a frame without a time (nan) is never it
            return rgb, before
        before = rgb
    raise AssertionError(f"no frame at {time_s} in {path}")


def _difference(a, b) -> float:
    """Mean absolute difference of two pictures brought to 64x36 grey."""
    import cv2
    import numpy as np

    grey = [cv2.resize(cv2.cvtColor(x, cv2.COLOR_RGB2GRAY), (64, 36), interpolation=cv2.INTER_AREA).astype(np.float32) for x in (a, b)]
    return float(np.abs(grey[0] - grey[1]).mean())


def test_player_opens_on_the_shot_of_a_track_that_starts_at_a_cut(server, page):
    """The hamilton clip cuts at 1.51935 s from a wide stage shot to a close-up. A track starting at the cut, opened from
    its link, shows the close-up (the frame indexed), not the last frame of the stage shot (links that rounded the start
    down to 1.519 s showed that one)."""
    import cv2
    import numpy as np

    video = next(v for v in _get_json(server + "/api/videos")["videos"] if v["name"] == HAMILTON.name)
    data = _get_json(f"{server}/api/videos/{video['id']}")
    cuts = [s["start_time"] for s in data["shots"][1:]]
    at_cut = [t for p in data["people"] for t in p["tracks"] if any(abs(t["start"] - c) < 1e-6 for c in cuts)]
    assert at_cut, "no track starts at a cut in the hamilton clip"
    track = min(at_cut, key=lambda t: t["start"])
    assert 1.5 < track["start"] < 1.53, track
    start = float(track["watch"].split("start=")[1].split("&")[0])
    assert start >= track["start"], (start, track["start"])  # never before the frame
    page.goto(server + track["watch"])
    page.wait_for_function(f"(() => {{ const v = document.getElementById('player'); return v && v.readyState >= 2 && !v.seeking"
                           f" && Math.abs(v.currentTime - {start}) < 0.002; }})()", timeout=60_000)
    size = page.evaluate("(() => { const v = document.getElementById('player'); v.controls = false; v.style.objectFit = 'fill';"
                         " v.style.width = '640px'; v.style.height = Math.round(640 * v.videoHeight / v.videoWidth) + 'px';"
                         " return [v.videoWidth, v.videoHeight]; })()")
    page.wait_for_timeout(300)  # one repaint without the controls
    shot = screenshot(page.locator("#player"), "player-at-cut.png")
    shown = cv2.cvtColor(cv2.imread(str(shot)), cv2.COLOR_BGR2RGB)
    indexed, before = _frames_around(HAMILTON, track["start"])
    assert list(indexed.shape[1::-1]) == size
    assert before is not None and _difference(indexed, before) > 20, "the frames either side of the cut should differ"
    to_indexed, to_before = _difference(shown, indexed), _difference(shown, before)
    assert to_indexed < 8 and to_indexed < to_before / 3, (to_indexed, to_before, str(shot))
    assert np.asarray(shown).std() > 10  # a picture, not a black element


def test_compare_report_and_page(server, page, miranda_compared):
    """The HTML report of `compare --report` and the web app's Compare page, in Chromium: the plot drawn with its tier
    bands and drift marker, the frames least like the reference shown; on the page, a drift event opens the player there."""
    _, report = miranda_compared
    miranda = EXAMPLES / "lin-manuel-miranda.png"
    page.goto((report / f"{HAMILTON.stem}--lin-manuel-miranda.html").as_uri())
    _images_loaded(page)
    screenshot(page, "compare-report.png")
    box = page.locator("svg.compare-plot").bounding_box()
    assert box["width"] > 600 and box["height"] > 150
    assert page.locator("svg.compare-plot .drift").count() == 2  # Miranda's shots give way to Alex and to the audience
    assert page.locator("figure img").count() >= 3 and "drift" in page.inner_text(".verdict")
    page.goto(server + "/compare")
    page.set_input_files("input[name=photo]", str(miranda))
    label = next(v["name"] for v in _get_json(server + "/api/compare")["videos"] if v["path"] == str(HAMILTON))
    assert label.endswith("/" + HAMILTON.name)  # its place under the folder the library's videos share, not a bare name
    page.select_option("select[name=video_id]", label=label)
    page.click("form.compare-form button")
    page.wait_for_selector("svg.compare-plot", timeout=120_000)
    _images_loaded(page)
    screenshot(page, "compare-page.png")
    links = page.locator("svg.compare-plot a.drift")
    assert links.count() == 2
    href = links.nth(1).get_attribute("href")
    assert href.startswith("/watch/") and "start=7.89" in href
    page.goto(server + href)
    page.wait_for_function("(() => { const v = document.getElementById('player'); return v && v.readyState >= 2; })()", timeout=60_000)
    # the player carries who is on screen (subtitles) and the shots (chapters); shown, the cues load
    page.evaluate("(() => { for (const t of document.getElementById('player').textTracks) t.mode = 'showing'; })()")
    page.wait_for_function("(() => { const ts = document.getElementById('player').textTracks;"
                           " return ts.length === 2 && Array.from(ts).every(t => t.cues && t.cues.length > 0); })()", timeout=30_000)
    kinds = page.evaluate("Array.from(document.getElementById('player').textTracks).map(t => [t.kind, t.cues.length])")
    assert kinds == [["subtitles", kinds[0][1]], ["chapters", 4]] and kinds[0][1] >= 1
    screenshot(page, "player-who-is-on-screen.png", full_page=False)


def test_results_at_first_paint_and_the_person_page_at_390px(server, page):
    """Result cards show their thumbnails from the first paint (inside the page), before the boxed frames arrive; on a
    390 px wide phone the nav keeps every item and the person page holds its width."""
    page.goto(server + "/")
    page.set_input_files("#photo", str(EXAMPLES / "lin-manuel-miranda.png"))
    page.wait_for_selector(".card img", timeout=120_000, state="attached")
    screenshot(page, "results-first-paint.png")  # no wait for the frames
    backgrounds = page.evaluate("Array.from(document.querySelectorAll('.card img')).map(i => getComputedStyle(i).backgroundImage)")
    assert backgrounds and all(b.startswith('url("data:image/jpeg;base64,') for b in backgrounds), backgrounds[:1]
    phone = page.context.browser.new_page(viewport={"width": 390, "height": 844}, bypass_csp=True)
    try:
        phone.goto(server + "/people")
        phone.locator(".person-name").first.click()
        phone.wait_for_selector("section.look")
        _images_loaded(phone)
        screenshot(phone, "person-390.png")
        width = phone.evaluate("document.documentElement.scrollWidth")
        assert width <= 392, width  # nothing wider than the phone
        nav = phone.evaluate("Array.from(document.querySelectorAll('header nav a')).map(a => { const r = a.getBoundingClientRect();"
                             " return [a.textContent, r.right, r.bottom]; })")
        assert [n[0] for n in nav] == ["Search", "Videos", "People", "Inbox", "Compare"] and all(right <= 390 for _, right, _ in nav), nav
    finally:
        phone.close()
    page.goto(server + "/videos")
    photo = page.locator("table.list a", has_text="two_people").first
    if photo.count():
        photo.click()
        page.locator("a", has_text="watch").first.click()
        size = page.evaluate("(() => { const i = document.querySelector('img.still'); return i && [i.naturalWidth / i.naturalHeight,"
                             " i.clientWidth / i.clientHeight]; })()")
        assert size is None or abs(size[0] - size[1]) < 0.02, size  # a photo keeps its aspect ratio


def test_the_pages_keep_to_their_content_security_policy(server, page):
    """Under the app's own CSP (no inline script, no eval), its pages run their one script and break no rule."""
    strict = page.context.browser.new_page()
    violations = []
    strict.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    try:
        for path in ("/", "/people", "/videos", "/inbox", "/compare"):
            strict.goto(server + path)
            strict.wait_for_load_state("load")
        strict.locator(".person-name").first.click() if strict.url.endswith("/people") else None
        strict.goto(server + "/people")
        strict.locator(".person-name").first.click()
        strict.wait_for_load_state("load")
    finally:
        strict.close()
    assert not violations, violations


def test_the_pages_keep_to_a_390px_phone(server, page):
    """Inbox, videos, a video, a track and a compare result on a 390 px wide phone: nothing wider than the screen (wide
    tables and the compare plot scroll in their own boxes); a screenshot of each in the test artefacts."""
    videos = page.context.request.get(server + "/api/videos").json()["videos"]
    video = next(v for v in videos if v["kind"] == "video")
    track = page.context.request.get(server + f"/api/videos/{video['id']}").json()["people"][0]["tracks"][0]
    track_id = track["id"] if isinstance(track, dict) else track
    phone = page.context.browser.new_page(viewport={"width": 390, "height": 844}, bypass_csp=True)
    try:
        for name, path in (("inbox", "/inbox"), ("videos", "/videos"), ("video", f"/videos/{video['id']}"),
                           ("track", f"/tracks/{track_id}"), ("compare-form", "/compare")):
            phone.goto(server + path)
            phone.wait_for_load_state("networkidle")
            screenshot(phone, f"{name}-390.png")
            assert phone.evaluate("document.documentElement.scrollWidth") <= 392, name
        phone.set_input_files("input[name=photo]", str(EXAMPLES / "lin-manuel-miranda.png"))
        phone.select_option("select[name=video_id]", str(video["id"]))
        phone.click("form button[type=submit]")
        phone.wait_for_selector(".plot svg", timeout=120_000)
        screenshot(phone, "compare-result-390.png")
        assert phone.evaluate("document.documentElement.scrollWidth") <= 392
        assert phone.evaluate("document.querySelector('.plot svg').getBoundingClientRect().width") >= 600  # readable, scrolls in its box
    finally:
        phone.close()
