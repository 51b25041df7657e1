"""One input's unexpected failure as one line, with its traceback kept in a log file.

Errors a user can act on are `HeadsearchError`s and carry their own line. Anything else raised while
one input file is analysed (a decoder's assertion, a shape nobody expected, running out of memory) is
a bug or a file nobody foresaw: the run reports that file in one line naming the log that holds the
traceback, and goes on with the next file.
"""
from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

from headsearch.basics.errors import HeadsearchError, MediaError
from headsearch.basics.files import private_temp_folder

ERROR_LOG = "errors.log"


def short_reason(error: BaseException, limit: int = 160) -> str:
    """`Type: first line of the message`, at most `limit` characters."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    reason = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return reason if len(reason) <= limit else reason[:limit - 3] + "..."


def write_traceback(subject: str | Path, error: BaseException, log_dir: Path | None) -> Path | None:
    """Append the error's traceback to `log_dir/errors.log` (the temporary folder when `log_dir` is
    missing or not writable); the log's path, or None when no log could be written."""
    entry = (f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {subject}\n"
             + "".join(traceback.format_exception(type(error), error, error.__traceback__)))
    logs = [Path(log_dir) / ERROR_LOG] if log_dir is not None and Path(log_dir).is_dir() else []
    with contextlib.suppress(OSError):
        logs.append(private_temp_folder("logs") / ERROR_LOG)  # this user's own, never a shared name in /tmp
    for log in logs:
        try:
            with open(log, "a", encoding="utf-8") as f:
                f.write(entry)
            return log
        except OSError:
            continue
    return None


def unexpected_error_line(subject: str | Path, error: BaseException, log_dir: Path | None) -> str:
    """`subject: unexpected error (Type: message); traceback in LOG`, the traceback written to LOG."""
    log = write_traceback(subject, error, log_dir)
    return f"{subject}: unexpected error ({short_reason(error)})" + (f"; traceback in {log}" if log else "")


class UnexpectedFileError(MediaError):
    """An input file failed in a way nobody foresaw; the message names the log with its traceback."""


@contextlib.contextmanager
def file_failures(subject: str | Path, log_dir: Path | None) -> Iterator[None]:
    """Turn any exception raised inside into an `UnexpectedFileError` with one line, its traceback in
    the log; except a `HeadsearchError` (already one line) and an `OSError` (a missing file, a full
    disk: the caller decides), which pass unchanged, as do KeyboardInterrupt and SystemExit."""
    try:
        yield
    except (HeadsearchError, OSError):
        raise
    except Exception as e:  # noqa: BLE001 - the point: whatever one file does, it is one line
        raise UnexpectedFileError(unexpected_error_line(subject, e, log_dir)) from e
