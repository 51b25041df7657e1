"""Options shared by several commands."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from headsearch.basics.settings import default_library_path

library_option = click.option(
    "--library", "-l", type=click.Path(path_type=Path), default=None, envvar="HEADSEARCH_LIBRARY",
    help="Library folder (default: $HEADSEARCH_LIBRARY or ./headsearch-library).",
)

progress_option = click.option(
    "--progress/--no-progress", default=None,
    help="Progress bars on stderr (default: only when stderr is a terminal).",
)


def library_path(library: Path | None) -> Path:
    """The library folder a command works on."""
    return library if library is not None else default_library_path()


def show_progress(progress: bool | None = None, quiet: bool = False) -> bool:
    """Whether to draw progress bars: as asked, else only on a terminal (never into a redirected log)."""
    if quiet:
        return False
    if progress is not None:
        return progress
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False
