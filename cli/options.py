"""Options shared by several commands."""
from __future__ import annotations

from pathlib import Path

import click

from headsearch.settings import default_library_path

library_option = click.option(
    "--library", "-l", type=click.Path(path_type=Path), default=None, envvar="HEADSEARCH_LIBRARY",
    help="Library folder (default: $HEADSEARCH_LIBRARY or ./headsearch-library).",
)


def library_path(library: Path | None) -> Path:
    """The library folder a command works on."""
    return library if library is not None else default_library_path()
