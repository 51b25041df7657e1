"""Exports of moments whose person and file names are hostile (quotes, markup, newlines, escape sequences, formula
prefixes, bidirectional overrides, bytes that are not UTF-8): property-based (hypothesis, bounded and derandomised), every format, on a real
(generated) video file under each name. Each format stays well-formed and holds the moments it was given, no more."""
from __future__ import annotations

import csv
import io
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from hostile_media import write_video
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headsearch.basics.text import printable, shown_bytes
from headsearch.exports.timelines import FORMATS, Moment, export_bytes

pytestmark = pytest.mark.slow
otio = pytest.importorskip("opentimelineio", reason="needs the export extra: pip install 'headsearch[export]'")

HOSTILE = st.text(alphabet=st.sampled_from(list("ab Z'\"<>&;=+-@\\:,.#*|\n\r\t\x1b\x07\u202e\u00e9\u4e2d\udce9")), min_size=1, max_size=24)
NAMES = settings(max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    """A 2-second 25 fps clip."""
    path = tmp_path_factory.mktemp("clip") / "clip.mp4"
    write_video(path, (np.full((48, 64, 3), i * 4, np.uint8) for i in range(50)), fps=25, options={"preset": "ultrafast"})
    return path


def named_copy(clip: Path, folder: Path, name: str) -> Path:
    """The clip under a file name made of `name` (a file name cannot hold '/' or NUL)."""
    safe = name.replace("/", "_").replace("\0", "_").strip(".") or "x"
    path = folder / f"{safe}.mp4"
    if not path.exists():
        os.link(clip, path)
    return path


@given(person=HOSTILE, file=HOSTILE, other=HOSTILE)
@NAMES
def test_every_format_stays_well_formed_under_hostile_names(clip, tmp_path_factory, person, file, other):
    folder = tmp_path_factory.mktemp("names")
    video = named_copy(clip, folder, file)
    moments = [Moment(str(video), 0.2, 0.8, person, "same_look", 0.91, 1, 1), Moment(str(video), 1.0, 1.6, other, None, 0.2, 2, 1)]
    for suffix in FORMATS:
        data, done = export_bytes(suffix, moments)
        text = data.decode("utf-8")
        assert done.moments == 2
        if suffix in (".xml", ".fcpxml", ".mlt"):
            ET.fromstring(text)  # well-formed XML
        if suffix == ".fcpxml":
            names = {e.get("name") for e in ET.fromstring(text).iter("asset-clip")}
            assert any(n is not None and n.startswith(f"{printable(person)} 1: ") for n in names)  # the name itself, escaped
        if suffix == ".otio":
            tl = otio.adapters.read_from_string(text, "otio_json")
            assert sorted(t.name for t in tl.tracks) == sorted({shown_bytes(person), shown_bytes(other)})  # exact but for bytes
        if suffix == ".edl":
            events = [line for line in text.splitlines() if line[:3].isdigit()]
            assert len(events) == 2
            assert all(line == "" or line[:3].isdigit() or line.startswith(("TITLE:", "FCM:", "*")) for line in text.splitlines())
        if suffix == ".vtt":
            cues = text.split("\n\n")[1:]
            assert sum("-->" in c for c in cues) == 2 and all(len([x for x in c.split("\n") if x]) <= 3 for c in cues)
        if suffix == ".csv":
            rows = list(csv.DictReader(io.StringIO(text)))
            assert len(rows) == 2
            assert not any(r[k].startswith(("=", "+", "-", "@", "\t", "\r")) for r in rows for k in ("person", "video"))
            shown = {printable(n) for n in (person, other)}
            assert {r["person"] for r in rows} == {"'" + n if n.startswith(("=", "+", "-", "@")) else n for n in shown}
