"""A redaction's output files: what is refused before any analysis (the kind of file, the folder, an output already
there), where the output is written until it is complete, and how it is put in place or cleared away.

The output is written beside its name, hidden and named by this process, with its audit trail beside that; at the end
the source is checked against the content fingerprint it was analysed with (a file moved over it meanwhile is refused),
then the video is renamed into place before its trail (a run killed between the two renames leaves a video without a
trail, never a trail that describes a video that is not there: an older trail of the same name is removed first).
Whatever fails on the way, a full disk among it, deletes what this run wrote, and its message names the output, never a
temporary file, and no library.
"""
from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from actions.redact_frames import AuditTrail
from headsearch.basics.errors import HeadsearchError, MediaError, is_disk_full
from headsearch.basics.files import process_alive
from headsearch.basics.media import VIDEO_EXTENSIONS, file_stamp, media_kind
from headsearch.basics.settings import MediaLimits
from indexer.decode import probe_source
from schemas.records import MediaKind, SourceProbe

AUDIT_SUFFIX = ".redactions.json"  # the audit trail: OUT + this
PREVIEW_SUFFIX = ".redactions.png"  # the contact sheet: DIR / (OUT's name + this)
# The kinds of file whose output keeps the source's frame times, rate and duration with the encoders PyAV always has
# (H.264, else MPEG-4 Part 2). Measured on a 25 fps clip with AAC audio and the 29.97 fps hamilton clip: .webm, .ts and
# .mpg take neither encoder here (they failed after the whole analysis); .avi counts frames, so the source's time base made
# it claim 5,977 frames at 600 fps, and a stream that starts late (hamilton's, at 0.852 s) gains frames it never had;
# .flv moved a stream starting at 0 to 80 ms.
OUTPUT_SUFFIXES = (".mp4", ".m4v", ".mov", ".mkv")
DEFAULT_MARGIN = 0.2  # the head box grows by a fifth of its size (a tenth on each side): room for a head that moves between frames


class OutputExists(HeadsearchError):
    """The output (or its audit trail) is there already and --force was not given."""


class SourceChanged(HeadsearchError):
    """The source's content is not the one analysed (a file moved over it during the run)."""


def audit_path(out: Path) -> Path:
    """The audit trail of an output: OUT.redactions.json beside it."""
    return Path(out).with_name(Path(out).name + AUDIT_SUFFIX)


def partial_path(out: Path) -> Path:
    """Where an output is written until it is complete: beside it, hidden, named by this process (same suffix, which
    says the kind of file)."""
    return Path(out).with_name(f".{Path(out).stem}.redacting-{os.getpid()}{Path(out).suffix}")


def write_check_path(out: Path) -> Path:
    """The empty file that tries the output's folder before the analysis: named apart from the partial output, so a
    partial output only ever means a video being written."""
    return Path(out).with_name(f".{Path(out).stem}.write-check-{os.getpid()}")


def remove_stale(out: Path) -> None:
    """Partial outputs (and audit trails, and folder checks) of runs killed before they finished: their process is gone."""
    patterns = (re.compile(re.escape(f".{out.stem}.redacting-") + r"(\d+)" + re.escape(out.suffix) + "$"),
                re.compile(re.escape(f".{audit_path(out).name}.") + r"(\d+)\.tmp$"),
                re.compile(re.escape(f".{out.stem}.write-check-") + r"(\d+)$"))
    with contextlib.suppress(OSError):
        for p in out.parent.iterdir():
            m = next((m for pattern in patterns if (m := pattern.match(p.name))), None)
            if m and int(m.group(1)) != os.getpid() and not process_alive(int(m.group(1))):
                p.unlink(missing_ok=True)


def check_paths(video: Path, out: Path, margin: float = DEFAULT_MARGIN, force: bool = True) -> None:
    """Refuse, in one line, what cannot be done: a missing video, an output that is the source (it is never
    overwritten), in a missing or unwritable folder, not named as a kind of video redact writes, or (unless `force`)
    there already with or without its audit trail; a margin out of range."""
    if not (0.0 <= margin <= 4.0):
        raise HeadsearchError(f"--margin {margin}: a share of the head box from 0 to 4 (0.2: a fifth of its size)")
    if not video.exists():
        raise MediaError(f"{video}: no such file")
    if not video.is_file():
        raise MediaError(f"{video}: not a file")
    if media_kind(video) != MediaKind.VIDEO:
        raise MediaError(f"{video}: a photo, not a video")
    if out.resolve() == video.resolve() or (out.exists() and os.path.samefile(out, video)):
        raise HeadsearchError(f"--out {out}: that is the source video; redact never overwrites its source (give another file)")
    if not out.parent.is_dir():
        raise HeadsearchError(f"--out {out}: no folder {out.parent} (redact makes no folders for its output)")
    if out.is_dir():
        raise HeadsearchError(f"--out {out}: a folder; give a file name")
    if out.suffix.lower() not in OUTPUT_SUFFIXES:
        said = f"redact does not write {out.suffix} files" if out.suffix.lower() in VIDEO_EXTENSIONS else "name it as a video"
        raise HeadsearchError(f"--out {out}: {said} ({', '.join(OUTPUT_SUFFIXES)}: they keep the source's frame times)")
    if not force:
        there = [p for p in (out, audit_path(out)) if p.exists()]
        if there:
            raise OutputExists(f"--out {out}: {'it' if there[0] == out else 'its audit trail ' + there[0].name} is there already; "
                               "redact replaces it only with --force")
    check_writable(out)


def check_writable(out: Path) -> None:
    """Refuse an output whose folder cannot be written, by writing there (permissions do not say it for root, nor for a
    read-only mount)."""
    probe = write_check_path(out)
    try:
        with open(probe, "w"):
            pass
        probe.unlink()
    except OSError as e:
        why = "the disk is full" if is_disk_full(e) else (e.strerror or str(e)).lower()
        raise HeadsearchError(f"--out {out}: cannot write in {out.parent} ({why})") from e


def check_readable(video: Path) -> SourceProbe:
    """Refuse, before any model loads, a video whose header is damaged or that PyAV (which writes the output) cannot
    open; else its look (`SourceProbe`: one open of the file), which the later steps read instead of opening it again."""
    return probe_source(video, MediaLimits.from_env())


def check_source_unchanged(video: Path, fingerprint: str, out: Path) -> None:
    """Refuse to put an output in place when its source is no longer the content it was analysed as."""
    try:
        now = file_stamp(video).fingerprint
    except HeadsearchError:
        now = None
    if now != fingerprint:
        said = "is gone" if now is None else "changed"
        raise SourceChanged(f"{video}: {said} while it was being redacted (not the content analysed); nothing written to {out}; "
                            "run again")


def put_in_place(tmp: Path, out: Path, trail: AuditTrail, force: bool = True) -> None:
    """The video renamed into place, then its trail: an older trail of the output's name goes first, so that no trail
    ever describes a video that is not the one under its name. Without `force`, an output that appeared meanwhile is
    refused."""
    audit = audit_path(out)
    if not force and (out.exists() or audit.exists()):
        raise OutputExists(f"--out {out}: appeared while it was being redacted; redact replaces it only with --force")
    audit.unlink(missing_ok=True)
    os.replace(tmp, out)
    trail.commit()


def clear_after_failure(error: BaseException, out: Path, written: list[Path], trail: AuditTrail | None) -> BaseException | None:
    """Delete what a failed run wrote (each delete tried, whatever the others do) and the error to raise instead, in
    words that name the output, not a temporary file (None: raise `error` as it is)."""
    if trail is not None:
        with contextlib.suppress(OSError):
            trail.discard()
    for path in written:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
    if isinstance(error, (KeyboardInterrupt, SystemExit, SourceChanged, OutputExists)):
        return None
    if is_disk_full(error) or (error.__cause__ is not None and is_disk_full(error.__cause__)):
        return HeadsearchError(f"--out {out}: the disk is full; nothing was written under its name (free some space and run again)")
    text = str(error)
    temporary = [str(p) for p in written] + [p.name for p in written] + ([str(trail.tmp), trail.tmp.name] if trail is not None else [])
    if isinstance(error, HeadsearchError | OSError) and any(t in text for t in temporary):
        for t in sorted(temporary, key=len, reverse=True):
            text = text.replace(t, str(out))
        return HeadsearchError(f"{text}; nothing was written under its name")
    return None
