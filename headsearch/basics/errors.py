"""Domain errors: each carries one line a user can act on. The CLI turns them into exit codes."""
from __future__ import annotations

import errno


def first_line(e: BaseException) -> str:
    """The first line of what an exception says, else its type's name: how a foreign error is quoted in one line."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class HeadsearchError(Exception):
    """Base of every error a user should see as one clear line."""

    exit_code = 1


class MediaError(HeadsearchError):
    """A file cannot be read as an image or video (corrupt, truncated, not media, unreadable).

    The message is one short line; `detail` keeps what the decoders said (shown with -v)."""

    def __init__(self, message: str, detail: str | None = None):
        super().__init__(message)
        self.detail = detail


def cannot_read(path: object, error: OSError | None = None, what: str = "file") -> str:
    """The one line for a file (or folder: `what`) that cannot be read: "<path>: cannot read file (<why>)", the why being
    what the system said (`strerror`, else the whole error); without an error, no why."""
    why = "" if error is None else f" ({error.strerror or error})"
    return f"{path}: cannot read {what}{why}"


def unreadable(path: object, error: OSError | None = None, what: str = "file") -> MediaError:
    """`cannot_read`'s line as the MediaError a reader raises (`raise unreadable(path, e) from e`)."""
    return MediaError(cannot_read(path, error, what))


class NoHeadFound(HeadsearchError):
    """A photo in which no head was detected."""


class ModelError(HeadsearchError):
    """A model cannot be loaded: missing file, wrong format, unexpected weights."""


class LibraryError(HeadsearchError):
    """The library folder is missing, locked, damaged, or made by another model."""


class LibraryDamaged(LibraryError):
    """The library's database file is damaged (cut short, checksums that do not match): nothing more
    is read from or written to it."""


class ModelMismatch(LibraryError):
    """The library's vectors were made by another model than the one asked for."""


def is_disk_full(e: BaseException) -> bool:
    """Whether an error means the disk (or quota) is full, whichever library raised it."""
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return "No space left on device" in str(e) or "disk is full" in str(e).lower()


def is_interruption(e: BaseException) -> bool:
    """Whether an error is a Ctrl-C in disguise: DuckDB stops a running query on SIGINT and raises its
    own error ("Query interrupted"; duckdb_engine re-raises it as a RuntimeError); a Ctrl-C while DuckDB reads
    a registered Python object (the Arrow rows of a bulk insert) comes back inside its error text ("reading the
    schema of the object registered as ... failed: KeyboardInterrupt")."""
    for _ in range(20):  # the error and what caused it
        if e is None:
            return False
        said = str(e)
        if (isinstance(e, KeyboardInterrupt) or type(e).__name__ == "InterruptException" or said.startswith("Query interrupted")
                or "failed: KeyboardInterrupt" in said):
            return True
        e = e.__cause__ or e.__context__
    return False
