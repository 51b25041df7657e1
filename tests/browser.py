"""What the browser tests share: Debian's Chromium driven by Playwright, its flags, and the screenshots kept as test
artefacts in $HEADSEARCH_ARTEFACTS (default: test-artefacts/ in the checkout) to be looked at."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

CHROMIUM = Path(os.environ.get("HEADSEARCH_CHROMIUM", "/usr/bin/chromium"))
ARTEFACTS = Path(os.environ.get("HEADSEARCH_ARTEFACTS", Path(__file__).resolve().parents[1] / "test-artefacts"))
FLAGS = ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--no-first-run", "--disable-sync", "--disable-default-apps", "--mute-audio"]

# CI installs Chromium (.ci/run); elsewhere a machine without it skips the browser tests.
needs_chromium = pytest.mark.skipif(not CHROMIUM.is_file() and not os.environ.get("CI"),
                                    reason=f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)")


def launch(playwright):
    """Chromium under Playwright, with the flags a container without a GPU or a sandbox needs."""
    assert CHROMIUM.is_file(), f"CI needs Chromium at {CHROMIUM}"
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)


def screenshot(target, name: str, tries: int = 3, **options) -> Path:
    """Save a screenshot of a page (whole, unless told otherwise) or of a locator under ARTEFACTS.

    Headless Chromium now and then answers "Unable to capture screenshot" on a loaded machine (a CI run of 2026-12-04
    failed on one, the page 1,437 px tall): the picture is tried again after a pause before the error counts."""
    from playwright.sync_api import Error

    path = ARTEFACTS / name
    if hasattr(target, "goto"):  # a page; a locator has no full_page
        options.setdefault("full_page", True)
    for attempt in range(tries - 1):
        try:
            target.screenshot(path=str(path), **options)
            return path
        except Error as error:
            if "Unable to capture screenshot" not in str(error):
                raise
            time.sleep(1.0 + attempt)
    target.screenshot(path=str(path), **options)  # the last try: its error is the test's
    return path
