"""Options and exit statuses shared by several commands."""
from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

import click

from headsearch.basics.settings import default_library_path

EXIT_PARTIAL = 2  # some inputs failed, the others were done (indexed, measured, built into the dataset)
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT
EXIT_TERMINATED = 143  # SIGTERM: stopped as by Ctrl-C (128 + 15, as shells report a program ended by SIGTERM)
EXIT_FACES_LEFT = 5  # redact --verify: the output was written, and faces were still found in it
EXIT_BROKEN_PIPE = 141  # the reader of our output went away (`| head`), as shells report SIGPIPE

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


def command_name() -> str:
    """How the user runs this program again, for hints they copy: `headsearch` when that name on the
    PATH is this program, else the path it was started by (`.venv/bin/headsearch` before the venv is
    activated), or `python -m cli.main` when it was started that way."""
    started = sys.argv[0] if sys.argv else ""
    on_path = shutil.which("headsearch")
    if Path(started).name == "headsearch":
        if on_path and os.path.samefile(on_path, started):
            return "headsearch"
        return shlex.quote(started)
    if on_path:
        return "headsearch"
    return f"{shlex.quote(sys.executable)} -m cli.main"


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


class FiniteFloat(click.FloatRange):
    """A float option within its range, and a number: `nan` and `inf` are refused with one line."""

    name = "number"

    def convert(self, value, param, ctx):
        import math

        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a number that can be used here", param, ctx)
        return super().convert(number, param, ctx)


class Share(FiniteFloat):
    """A share of frames: 0 to 1 (0.95), or a percentage (95 or 95%)."""

    name = "share"

    def __init__(self):
        super().__init__(0.0, 1.0)

    def convert(self, value, param, ctx):
        text = str(value).strip()
        try:
            number = float(text.removesuffix("%"))
        except ValueError:
            self.fail(f"{value!r} is not a share (0.95, or 95%)", param, ctx)
        if text.endswith("%") or 1.0 < number <= 100.0:
            number /= 100.0
        return super().convert(number, param, ctx)


MAX_WORKERS = 256  # processes or actors for one run: far past any machine's cores, short of a typo's 100000
