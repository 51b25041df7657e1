"""File names as the library's tables keep them: any name the filesystem allows, read back exactly."""
from __future__ import annotations

# File names are bytes on disk; Python names a byte that is not UTF-8 by a lone surrogate (U+DC80-U+DCFF, os.fsdecode's
# surrogateescape), which DuckDB's text cannot hold. The tables keep such a byte as a private-use code point of plane 16
# (U+10FC80-U+10FCFF), valid UTF-8, and give it back as the surrogate: every name the filesystem allows is stored and
# read back exactly (a name that really holds one of those 128 private-use characters would read back as bytes).
_SURROGATES, _STORED = 0xDC00, 0x10FC00


def stored_path(path: str) -> str:
    """A file name as the tables keep it (see above)."""
    if path.isascii() or not any("\udc80" <= c <= "\udcff" for c in path):
        return path
    return "".join(chr(ord(c) - _SURROGATES + _STORED) if "\udc80" <= c <= "\udcff" else c for c in path)


def disk_path(text: str) -> str:
    """A file name as the tables keep it, as the filesystem (and Python) names it."""
    if text.isascii() or not any("\U0010fc80" <= c <= "\U0010fcff" for c in text):
        return text
    return "".join(chr(ord(c) - _STORED + _SURROGATES) if "\U0010fc80" <= c <= "\U0010fcff" else c for c in text)
