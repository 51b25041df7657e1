"""Options and output of exports (`query --export`, `people export`): thin, the work is `headsearch.exports`."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import click

from cli.options import FiniteFloat
from headsearch.exports.timelines import FORMATS_HELP


def export_options_no_file(f: Callable) -> Callable:
    """--markers, --handles, --order."""
    f = click.option("--order", type=click.Choice(["rank", "time"]), default="rank", show_default=True,
                     help="Order of the exported moments: as ranked, or by file and time.")(f)
    f = click.option("--handles", type=FiniteFloat(min=0.0, max=3600.0), default=0.0, show_default=True,
                     help="Seconds added before and after each exported moment (within its file).")(f)
    f = click.option("--markers", is_flag=True, help="Export markers on the whole source clips (named by person and tier, "
                     "coloured by tier) instead of a selects timeline.")(f)
    return f


def export_options(f: Callable) -> Callable:
    """--export FILE, --markers, --handles, --order."""
    f = export_options_no_file(f)
    return click.option("--export", "export_to", type=click.Path(path_type=Path, dir_okay=False), multiple=True,
                        help=f"Write the moments to this file for an editor (repeatable); its extension names the format: {FORMATS_HELP} "
                             "(the timelines need the `export` extra).")(f)


def check_export_path(path: Path) -> None:
    """One line, before any work, for a format that is not known or whose extra is not installed, or a missing folder."""
    from headsearch.exports.timelines import export_target

    export_target(path)


def export_answers(paths: Sequence[Path], results: Sequence, names: Sequence[str], markers: bool, handles: float, order: str,
                   shots: dict[str, list[tuple[float, float]]] | None = None, chapters: bool = False, hint: str = "") -> None:
    """The moments of search results (one result a name: a query head, a person) to each file; every file is checked
    before any is written; what was written said in a line a file."""
    from headsearch.basics.text import counted
    from headsearch.exports.timelines import ExportOptions, export_all
    from headsearch.search.hits import export_moments

    moments, photos = export_moments(results, names)
    options = ExportOptions(markers=markers, handles_s=handles, order=order, name=", ".join(names) or "headsearch")
    for done in export_all(paths, moments, options, shots, chapters, hint):
        if photos:
            done.notes.append(f"{counted(photos, 'moment')} in photos left out")
        click.echo(done.line(), err=True)
