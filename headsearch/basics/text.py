"""Names and paths as a terminal shows them: one line each, with control characters escaped, so a file named with a
newline cannot span two entries of a listing (and fake one), nor an escape sequence repaint the terminal."""
from __future__ import annotations


def printable(text: object) -> str:
    """`text` with every character that is not printable shown escaped: a newline as \\n, ESC as \\x1b, a bidirectional
    override as \\u202e; printable text (accents and other scripts included) unchanged."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in s)


def shown_bytes(text: str) -> str:
    """`text` with each byte of a file name that is not UTF-8 (Python's lone surrogate, "\udce9") written as that escape,
    so that a page can be sent as UTF-8; other text unchanged."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8") if not text.isascii() else text


IRREGULAR = {"person": "people", "match": "matches"}


def counted(n: int, words: str) -> str:
    """`n` and the words, their last one singular or plural as English says it: "1 track", "2 tracks", "1 new person",
    "3 new people", "1,200 frames"."""
    if n == 1:
        return f"{n:,} {words}"
    head, _, last = words.rpartition(" ")
    return f"{n:,} {head + ' ' if head else ''}{IRREGULAR.get(last, last + 's')}"
