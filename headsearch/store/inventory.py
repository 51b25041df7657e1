"""What a library holds, file by file, and the state of each file on disk (`headsearch list`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from headsearch.basics.media import fingerprint
from headsearch.store.library import Library

INDEXED = "indexed"  # in the library, unchanged on disk
CHANGED = "changed"  # in the library, changed on disk since: the next `index` indexes it again
MISSING = "missing"  # in the library, gone from disk: the next `index` of its folder removes it
FAILED = "failed"  # could not be indexed; skipped until it changes (or --retry-failed)
FAILED_CHANGED = "failed, changed"  # failed, and changed since: the next `index` tries again


@dataclass(frozen=True)
class FileState:
    path: str
    state: str
    kind: str | None = None  # "video" or "image" (None for a file that failed)
    duration: float = 0.0  # as a player says it: to the file's end on its timeline
    tracks: int = 0
    error: str | None = None

    def to_dict(self) -> dict:
        return {"path": self.path, "state": self.state, "kind": self.kind, "duration": round(self.duration, 3),
                "tracks": self.tracks, "error": self.error}


def _on_disk(path: str, size: int, mtime: float, digest: str) -> str:
    """'same', 'changed' or 'missing'."""
    p = Path(path)
    try:
        stat = p.stat()
    except OSError:
        return "missing"
    if stat.st_size != size:
        return "changed"
    if stat.st_mtime == mtime:
        return "same"
    try:
        return "same" if fingerprint(p, stat.st_size) == digest else "changed"
    except OSError:
        return "missing"


def file_states(library: Library) -> list[FileState]:
    """Every indexed or failed file with its state, by path."""
    states = []
    for f in library.files.listing():
        disk = _on_disk(f.path, f.size, f.mtime, f.fingerprint)
        state = {"same": INDEXED, "changed": CHANGED, "missing": MISSING}[disk]
        states.append(FileState(f.path, state, f.kind, f.player_duration, f.tracks))
    for f in library.files.failed_files().values():
        disk = _on_disk(f.path, f.size, f.mtime, f.fingerprint)
        if disk == "missing":
            state = MISSING
        else:
            state = FAILED if disk == "same" else FAILED_CHANGED
        states.append(FileState(f.path, state, None, 0.0, 0, f.error))
    return sorted(states, key=lambda s: s.path)
