"""Labelled sets: CSV files of `path,identity[,appearance_state]` naming one person per file, or of labelled heads in
video frames (`file,time,x1,y1,x2,y2,identity`: the head box at a presentation time, e.g. bench/sets/profiles.csv).

Read by `headsearch bench` (verification accuracy), the dataset builder (labelled photos add
identities and looks) and scripts. Rows naming several people or nobody in particular are
skipped and counted, never guessed.
"""
from __future__ import annotations

import csv
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from headsearch.basics.errors import HeadsearchError
from headsearch.basics.media import media_kind
from schemas.records import Box, MediaKind

# Identity labels made of these words name several people or nobody in particular (LABELS.csv:
# bbt_cast_group, friends_cast_6, crowd_unknown, goldeneye_actors, none_clear, "audience").
MULTI_PERSON_WORDS = frozenset({"group", "crowd", "unknown", "audience", "cast", "actors", "people", "none"})
# A note saying the file shows several faces: "2 faces", "group photo, 2-7 faces", "many small faces".
_SEVERAL_FACES = re.compile(r"\b(?:([2-9]|\d{2,})(?:\s*-\s*\d+)?|many)\b[^,;]*?\bfaces\b", re.IGNORECASE)
COLUMNS = ("path", "identity", "appearance_state")


@dataclass(frozen=True)
class LabeledFile:
    """One usable row of a labelled set."""

    path: Path
    identity: str
    state: str | None
    line: int
    time: float | None = None  # a head in a video frame: its presentation time (seconds)...
    box: Box | None = None  # ...and its head box in the file's pixels

    @property
    def kind(self) -> MediaKind:
        return media_kind(self.path)


@dataclass
class LabelSet:
    """The usable rows of a labelled set, and why the others were left out."""

    csv_path: Path
    rows: int
    files: list[LabeledFile]
    skipped: Counter = field(default_factory=Counter)  # reason -> rows

    def skipped_line(self) -> str | None:
        """One line counting the rows that do not name one person (None when all were usable)."""
        if not self.skipped:
            return None
        parts = ", ".join(f"{n} {reason}" for reason, n in self.skipped.most_common())
        return f"{self.csv_path}: skipped {sum(self.skipped.values())} of {self.rows} rows that do not name one person ({parts})"

    def to_dict(self) -> dict:
        return {"csv": str(self.csv_path), "rows": self.rows, "usable": len(self.files),
                "photos": sum(f.kind == MediaKind.IMAGE for f in self.files),
                "videos": sum(f.kind == MediaKind.VIDEO and f.time is None for f in self.files),
                "frames": sum(f.time is not None for f in self.files),
                "identities": len({f.identity for f in self.files}), "skipped": dict(self.skipped)}


def row_skip_reason(identity: str, note: str = "") -> str | None:
    """Why a row cannot be used as one person's sample, or None when it names exactly one identity."""
    identity = identity.strip()
    if not identity:
        return "without identity"
    if ";" in identity:
        return "with several identities"
    words = set(re.split(r"[^a-z0-9]+", identity.lower()))
    if words & MULTI_PERSON_WORDS or _SEVERAL_FACES.search(note or ""):
        return "group/crowd/unknown"
    return None


def read_label_set(csv_path: Path, root: Path | None = None) -> LabelSet:
    """Usable rows of a labelled CSV.

    Relative paths are resolved against ``root`` (default: the CSV's folder), under the row's
    ``source`` folder when the CSV has a ``source`` column (the layout of shared/data/LABELS.csv).
    """
    csv_path = Path(csv_path)
    try:
        text = csv_path.read_text(encoding="utf-8-sig")
    except OSError as e:
        raise HeadsearchError(f"{csv_path}: cannot read the labelled set ({e.strerror or e})") from e
    except UnicodeDecodeError as e:
        raise HeadsearchError(f"{csv_path}: not a labelled set (not UTF-8 text)") from e
    reader = csv.DictReader(text.splitlines())
    columns = {c.strip().lower(): c for c in (reader.fieldnames or []) if c}
    if "path" not in columns and "file" in columns:  # a set of heads in video frames names its files `file`
        columns["path"] = columns["file"]
    missing = [c for c in COLUMNS[:2] if c not in columns]
    if missing:
        raise HeadsearchError(f"{csv_path}: not a labelled set (columns path,identity[,appearance_state] expected; "
                              f"missing {', '.join(missing)})")
    base = Path(root).expanduser() if root is not None else csv_path.parent

    def get(row: dict, name: str) -> str:
        return (row.get(columns[name]) or "").strip() if name in columns else ""

    files, skipped, rows = [], Counter(), 0
    for row in reader:
        rel = get(row, "path")
        if not rel and not get(row, "identity"):
            continue  # blank line
        rows += 1
        reason = row_skip_reason(get(row, "identity"), get(row, "note"))
        if reason is None and not rel:
            reason = "without path"
        if reason is not None:
            skipped[reason] += 1
            continue
        path = Path(rel).expanduser()
        if not path.is_absolute():
            source = get(row, "source")
            path = (base / source / path) if source else (base / path)
        state = get(row, "appearance_state") or None
        try:
            at = float(get(row, "time")) if get(row, "time") else None
            box = Box(*(float(get(row, k)) for k in ("x1", "y1", "x2", "y2"))) if at is not None else None
        except ValueError:
            skipped["with an unreadable time or box"] += 1
            continue
        files.append(LabeledFile(path, get(row, "identity"), state, reader.line_num, at, box))
    return LabelSet(csv_path, rows, files, skipped)


def write_label_set(path: Path, rows: list[tuple[str, str, str | None]]) -> Path:
    """Write (path, identity, appearance_state) rows as a labelled set CSV."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerows((p, i, s or "") for p, i, s in rows)
    return Path(path)
