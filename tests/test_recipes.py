"""The small recipes written once (issue 42): a file that cannot be read, a file's SHA-256, h:mm:ss.mmm, the web app's
numeric parameters and the search's fetch of distinct tracks. Fast: no media, no model."""
from __future__ import annotations

import errno
import hashlib
import os
from types import SimpleNamespace

import numpy as np
import pytest
from starlette.exceptions import HTTPException

from headsearch.basics import files as files_module
from headsearch.basics.errors import MediaError, cannot_read, unreadable
from headsearch.basics.files import known_sha256, sha256_file
from headsearch.basics.images import read_image_rgb
from headsearch.basics.media import file_stamp
from headsearch.basics.timeline import format_time
from headsearch.exports.timelines import Moment, vtt, vtt_time
from headsearch.search.engine import nearest_tracks
from serve.app import MAX_SECONDS, _moment, _number


# ----- a file that cannot be read ------------------------------------------------------------------
def test_cannot_read_says_the_path_and_what_the_system_said():
    e = OSError(errno.EACCES, os.strerror(errno.EACCES), "/x/a.mp4")
    assert cannot_read("/x/a.mp4", e) == "/x/a.mp4: cannot read file (Permission denied)"
    assert cannot_read("/x", e, "folder") == "/x: cannot read folder (Permission denied)"
    assert cannot_read("/x/a.mp4") == "/x/a.mp4: cannot read file"  # no error: no why
    assert cannot_read("/x/a.mp4", OSError("odd")) == "/x/a.mp4: cannot read file (odd)"  # no strerror: the error itself


def test_unreadable_is_the_media_error_of_that_line():
    e = OSError(errno.EIO, os.strerror(errno.EIO))
    error = unreadable("a.jpg", e)
    assert type(error) is MediaError and str(error) == "a.jpg: cannot read file (Input/output error)"


def test_readers_say_it_for_a_missing_file(tmp_path):
    missing = tmp_path / "gone.jpg"
    for read in (read_image_rgb, file_stamp):
        with pytest.raises(MediaError) as raised:
            read(missing)
        assert str(raised.value) == f"{missing}: cannot read file (No such file or directory)"


# ----- a file's SHA-256 ----------------------------------------------------------------------------
def test_sha256_file_is_the_content_s_digest_across_blocks(tmp_path):
    path = tmp_path / "model.onnx"
    data = np.random.default_rng(0).bytes((1 << 20) * 2 + 12345)  # past two 1 MiB blocks
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()
    assert sha256_file(str(path)) == hashlib.sha256(data).hexdigest()
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert sha256_file(empty) == hashlib.sha256(b"").hexdigest()


def test_sha256_file_hashes_a_version_once_and_a_new_version_again(tmp_path, monkeypatch):
    monkeypatch.setattr(files_module, "_SHA256", {})
    path = tmp_path / "weights"
    path.write_bytes(b"first")
    assert sha256_file(path) == hashlib.sha256(b"first").hexdigest()
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda *a, **k: opened.append(a[0]) or real_open(*a, **k))
    assert sha256_file(path) == hashlib.sha256(b"first").hexdigest() and opened == []  # the same version: not read again
    path.write_bytes(b"second, longer")
    assert sha256_file(path) == hashlib.sha256(b"second, longer").hexdigest() and opened == [path]


def test_a_known_digest_is_taken_for_the_file_as_it_is(tmp_path, monkeypatch):
    monkeypatch.setattr(files_module, "_SHA256", {})
    path = tmp_path / "converted.onnx"
    path.write_bytes(b"content")
    known_sha256(path, "f" * 64)  # from a record written when the file was hashed
    assert sha256_file(path) == "f" * 64
    os.utime(path, ns=(0, path.stat().st_mtime_ns + 1_000_000))  # touched since: hashed again
    assert sha256_file(path) == hashlib.sha256(b"content").hexdigest()


def test_the_models_hash_with_it(tmp_path):
    from headsearch.detection import keypoints
    from headsearch.models import base, sface, whole_head

    assert sface.sha256_file is sha256_file and whole_head.sha256_file is sha256_file and keypoints.sha256_file is sha256_file
    path = tmp_path / "user-model.onnx"
    path.write_bytes(b"weights")
    assert base.file_digest(path) == hashlib.sha256(b"weights").hexdigest()[:16]  # a model file's version


# ----- h:mm:ss.mmm ---------------------------------------------------------------------------------
@pytest.mark.parametrize("seconds, text, cue", [
    (0, "0:00:00.000", "00:00:00.000"),
    (-2.5, "0:00:00.000", "00:00:00.000"),  # before the start: the start
    (3.5881, "0:00:03.588", "00:00:03.588"),
    (59.9996, "0:01:00.000", "00:01:00.000"),  # rounded to the millisecond, carried into the minutes
    (3725.0004, "1:02:05.000", "01:02:05.000"),
    (36000.5, "10:00:00.500", "10:00:00.500"),
    (np.float32(1.25), "0:00:01.250", "00:00:01.250"),
])
def test_format_time_and_the_cues_two_digit_hours(seconds, text, cue):
    assert format_time(seconds) == text
    assert format_time(seconds, hour_digits=2) == cue == vtt_time(seconds)


def test_vtt_cues_are_written_with_two_digit_hours():
    moments = [Moment("a.mp4", 3725.0004, 3726.5, "Ada", tier="same_look"), Moment("a.mp4", 1.0, 1.0, "Bo")]
    assert vtt(moments, {}).decode() == ("WEBVTT\n\n1\n00:00:01.000 --> 00:00:01.001\nBo\n\n"
                                         "2\n01:02:05.000 --> 01:02:06.500\nAda (same look)\n")
    shots = vtt([], {"a.mp4": [(0.0, 2.5), (2.5, 61.0)]}, chapters=True).decode()
    assert shots == "WEBVTT\n\nshot-1\n00:00:00.000 --> 00:00:02.500\nShot 1\n\nshot-2\n00:00:02.500 --> 00:01:01.000\nShot 2\n"


# ----- the web app's numeric parameters ------------------------------------------------------------
def _refused(values: dict, *args) -> tuple[int, str]:
    with pytest.raises(HTTPException) as raised:
        _number(values, *args)
    return raised.value.status_code, raised.value.detail


def test_a_whole_number_within_its_bounds():
    assert _number({}, "k", 5, 1, 100) == 5  # absent: the default
    assert _number({"k": "1"}, "k", 5, 1, 100) == 1 and _number({"k": "100"}, "k", 5, 1, 100) == 100  # bounds included
    assert type(_number({"page": "7"}, "page", 1, 1, 1_000_000)) is int
    assert _refused({"k": "0"}, "k", 5, 1, 100) == (400, "k must be between 1 and 100")
    assert _refused({"k": "101"}, "k", 5, 1, 100) == (400, "k must be between 1 and 100")
    for raw in ("2.5", "five", "", "1e3"):
        assert _refused({"k": raw}, "k", 5, 1, 100) == (400, "k must be a whole number")


def test_a_number_of_seconds_from_low_up_to_high():
    assert _number({}, "start", 0.0, 0.0, MAX_SECONDS, float) == 0.0
    assert _number({"start": "12.25"}, "start", 0.0, 0.0, MAX_SECONDS, float) == 12.25
    assert _number({"start": "0"}, "start", 0.0, 0.0, MAX_SECONDS, float) == 0.0
    for raw in ("-0.5", "1e7", "inf", "nan"):  # the top is not included; NaN is no time
        assert _refused({"start": raw}, "start", 0.0, 0.0, MAX_SECONDS, float) == (400, "start out of range")
    assert _refused({"end": "soon"}, "end", 0.0, 0.0, MAX_SECONDS, float) == (400, "end must be a number of seconds")


def test_a_moment_ends_where_it_starts_without_an_end():
    def moment(**query):
        return _moment(SimpleNamespace(query_params=query))

    assert moment() == (0.0, 0.0)
    assert moment(start="4.5") == (4.5, 4.5)
    assert moment(start="4.5", end="6") == (4.5, 6.0)
    with pytest.raises(HTTPException, match="end out of range"):
        moment(start="1", end="-1")


# ----- the search's fetch of distinct tracks -------------------------------------------------------
class _Index:
    """Vectors in score order (id i scores 1 - i/n), several to a track; records how many each search asked for."""

    def __init__(self, n: int):
        self.n, self.asked = n, []

    def __len__(self) -> int:
        return self.n

    def search(self, vector: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        self.asked.append(k)
        ids = np.arange(min(k, self.n))
        return (1.0 - ids / self.n)[None, :].astype(np.float32), ids[None, :]


class _Reader:
    def __init__(self, per_track: int, unknown: set[int] = frozenset()):
        self.per_track, self.unknown = per_track, unknown

    def locate(self, ids: np.ndarray) -> dict[int, tuple[int, int]]:  # vector id -> (track id, sighting id)
        return {int(i): (int(i) // self.per_track, 1000 + int(i)) for i in ids if int(i) not in self.unknown}


def test_nearest_tracks_asks_for_more_until_enough_distinct_tracks():
    index = _Index(10_000)
    found = nearest_tracks(_Reader(per_track=100), index, np.zeros((1, 4), np.float32), wanted=10)
    assert index.asked == [320, 1280]  # 32 a track wanted: 4 tracks of 100 vectors; four times as many: 13 tracks
    assert [track for track, _ in found] == list(range(10))  # nearest first, cut to `wanted`
    assert found[0] == (0, (1.0, 1000)) and found[3] == (3, (pytest.approx(1 - 300 / 10_000), 1300))  # a track's best vector


def test_nearest_tracks_asks_for_64_at_least_and_stops_at_the_whole_index():
    index = _Index(100)
    found = nearest_tracks(_Reader(per_track=50), index, np.zeros((1, 4), np.float32), wanted=1)
    assert index.asked == [64] and [t for t, _ in found] == [0]
    index = _Index(300)
    found = nearest_tracks(_Reader(per_track=100), index, np.zeros((1, 4), np.float32), wanted=5)
    assert index.asked == [160, 300]  # all of it, then no more: three tracks are all there is
    assert [t for t, _ in found] == [0, 1, 2]
    assert nearest_tracks(_Reader(per_track=1), _Index(0), np.zeros((1, 4), np.float32), wanted=3) == []


def test_nearest_tracks_skips_vectors_of_no_track():
    index = _Index(64)
    found = nearest_tracks(_Reader(per_track=1, unknown={0, 2}), index, np.zeros((1, 4), np.float32), wanted=3)
    assert [t for t, _ in found] == [1, 3, 4]
