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


class ModelOption(click.Option):
    """`--model`, whose help lists the models the registry knows, read from their specs when help is shown
    (not when the command line is parsed: loading the registry costs time a query does not need to spend)."""

    def __init__(self, *args, help_prefix: str = "Model", help_suffix: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self.help_prefix, self.help_suffix = help_prefix, help_suffix

    def get_help_record(self, ctx: click.Context):
        from headsearch.models.registry import choices_line

        self.help = f"{self.help_prefix}: {choices_line()} (`headsearch models` lists them){self.help_suffix}"
        return super().get_help_record(ctx)


def model_option(*names: str, prefix: str = "Model", suffix: str = "", **kwargs):
    """A `--model`-like option whose help lists the registered models."""
    return click.option(*names, cls=ModelOption, default=None, help_prefix=prefix, help_suffix=suffix, **kwargs)
