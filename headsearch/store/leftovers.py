"""The search after a forgetting (`headsearch people forget`, every run; `--verify` adds the web app's cache): every file
under the library folder (and the cache folder) is read whole and searched for what the person was: each of their
vectors as stored (float32) and as float16 (a viewer or an export that halves them), the digests of their pictures
(thumbnails, photo crops, cached frames) and their name. What was searched and what was found are kept in the library's
record (`forget_checks`).

A vector is looked for by its first `PREFIX_FLOATS` values (32 bytes as float32; the whole vector where one of them is
0): a copy of a vector, or of any run of it that starts at its beginning, is found, and 8 non-zero floats of a unit
vector do not occur by chance. A name shorter than
`MIN_NAME_BYTES` is not looked for (three letters occur by chance in a few megabytes of binary data): the summary says so.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

PREFIX_FLOATS = 8
MIN_NAME_BYTES = 5
_READ_BYTES = 1 << 26  # files larger than this are read in pieces, overlapping by the longest needle


@dataclass
class Needles:
    """What is looked for: byte strings by what they are, and the digests of whole files."""

    strings: dict[bytes, str] = field(default_factory=dict)  # needle -> what it is ("a vector (float16)", "their name")
    digests: dict[str, str] = field(default_factory=dict)  # sha256 hex -> what it is ("a thumbnail")
    skipped: list[str] = field(default_factory=list)  # what was not looked for, and why

    def add_vector(self, raw: bytes) -> None:
        values = np.frombuffer(bytes(raw), dtype="<f4")
        if values.size < PREFIX_FLOATS or not np.any(values):
            return  # an empty vector (a head seen without a face has no identity vector) is no one's
        # its first values, or the whole vector where they hold a zero (zeros occur everywhere: a sparse vector's run)
        head = values[:PREFIX_FLOATS] if np.all(values[:PREFIX_FLOATS]) else values
        self.strings[head.tobytes()] = "a vector of theirs (float32)"
        self.strings[head.astype("<f2").tobytes()] = "a vector of theirs (float16)"

    def add_picture(self, path: Path, what: str) -> None:
        with contextlib.suppress(OSError):  # gone already: nothing to look for
            self.digests[hashlib.sha256(path.read_bytes()).hexdigest()] = what

    def add_name(self, name: str | None) -> None:
        if not name:
            return
        raw = name.encode()
        if len(raw) < MIN_NAME_BYTES:
            self.skipped.append(f"their name ({len(raw)} bytes: too short to tell from chance)")
            return
        self.strings[raw] = "their name"

    @property
    def count(self) -> int:
        return len(self.strings) + len(self.digests)


@dataclass(frozen=True)
class Check:
    """What a search read and found."""

    folders: tuple[str, ...]
    files: int
    bytes: int
    needles: int
    found: tuple[str, ...]  # "FILE: what", one per file and kind of thing found
    skipped: tuple[str, ...]
    checked_at: float

    def line(self) -> str:
        where = " and ".join(self.folders)
        said = (f"searched {self.files:,} files ({self.bytes / 1e6:,.1f} MB) under {where} for {self.needles:,} traces of them "
                f"(vectors as float32 and float16, picture digests, name)")
        if self.skipped:
            said += f"; not looked for: {'; '.join(self.skipped)}"
        if not self.found:
            return said + ": nothing found"
        return said + f": FOUND in {len(self.found)}: " + "; ".join(self.found[:5]) + (" ..." if len(self.found) > 5 else "")


def _files(folders: Iterable[Path]) -> Iterable[Path]:
    for folder in folders:
        for base, _, names in os.walk(folder):
            for name in sorted(names):
                path = Path(base) / name
                if path.is_file() and not path.is_symlink():
                    yield path


def search(folders: list[Path], needles: Needles) -> Check:
    """Read every file under `folders` (those that exist) and look for `needles` in each."""
    there = [f for f in folders if f.is_dir()]
    longest = max((len(s) for s in needles.strings), default=0)
    files = size = 0
    found: list[str] = []
    for path in _files(there):
        hits: set[str] = set()
        digest = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                tail = b""
                while chunk := f.read(_READ_BYTES):
                    digest.update(chunk)
                    size += len(chunk)
                    window = tail + chunk
                    hits.update(what for s, what in needles.strings.items() if s in window)
                    tail = window[-longest:] if longest else b""
        except OSError:
            continue  # gone meanwhile (a cache file), or unreadable: not this person's
        files += 1
        if digest.hexdigest() in needles.digests:
            hits.add(needles.digests[digest.hexdigest()])
        found.extend(f"{path}: {what}" for what in sorted(hits))
    return Check(tuple(str(f) for f in there), files, size, needles.count, tuple(found), tuple(needles.skipped), time.time())
