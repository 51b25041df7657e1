"""`headsearch people`: who is in the library, and the corrections a user makes to it."""
from __future__ import annotations

import json
from pathlib import Path

import click

from cli.options import library_option, library_path


def _open(library: Path | None):
    from headsearch.store.library import Library

    return Library.open(library_path(library))


def _echo_err(message: str) -> None:
    click.echo(message, err=True)


@click.group(invoke_without_command=True)
@library_option
@click.option("--json", "as_json", is_flag=True, help='A JSON list of {"id", "name", "tracks", "videos", "looks"} (looks: the tracks grouped by look).')
@click.option("--all", "include_hidden", is_flag=True, help="Hidden people too.")
@click.pass_context
def people(ctx: click.Context, library: Path | None, as_json: bool, include_hidden: bool) -> None:
    """Group every track of the library into persons (new tracks join known people) and list them.

    Corrections (name, merge, split, hide, not) are kept when files are re-indexed and respected by
    later grouping."""
    ctx.ensure_object(dict)
    ctx.obj["library"] = library
    if ctx.invoked_subcommand is not None:
        return
    from headsearch.people.persons import list_people, update_people

    lib = _open(library)
    summary = update_people(lib, report=_echo_err)
    _echo_err(summary.line())
    found = list_people(lib, include_hidden=include_hidden)
    if as_json:
        click.echo(json.dumps([p.to_dict() for p in found], indent=2))
        return
    if not found:
        click.echo("no people (the library has no tracks)")
    for p in found:
        hidden = "  (hidden)" if p.hidden else ""
        videos = ", ".join(Path(v).name for v in p.videos[:3]) + (f" +{len(p.videos) - 3}" if len(p.videos) > 3 else "")
        click.echo(f"{p.id:>5}  {p.label():<24} {len(p.tracks):>4} tracks  {len(p.videos):>3} files  {len(p.looks)} look{'s' if len(p.looks) != 1 else ''}  {videos}{hidden}")


def _library(ctx: click.Context, library: Path | None):
    return _open(library if library is not None else ctx.obj.get("library"))


@people.command("name")
@click.argument("person_id", type=int)
@click.argument("name")
@library_option
@click.pass_context
def name_command(ctx: click.Context, person_id: int, name: str, library: Path | None) -> None:
    """Name person PERSON_ID (an empty NAME clears it)."""
    from headsearch.people.persons import name_person

    name_person(_library(ctx, library), person_id, name)
    click.echo(f"person {person_id} is {name!r}" if name.strip() else f"person {person_id} has no name")


@people.command("merge")
@click.argument("into", type=int)
@click.argument("other", type=int)
@library_option
@click.pass_context
def merge_command(ctx: click.Context, into: int, other: int, library: Path | None) -> None:
    """Person OTHER is person INTO: merge OTHER into INTO."""
    from headsearch.people.persons import merge_people

    merge_people(_library(ctx, library), into, other)
    click.echo(f"person {other} merged into person {into}")


@people.command("split")
@click.argument("person_id", type=int)
@click.argument("tracks", nargs=-1, required=True, type=int)
@library_option
@click.pass_context
def split_command(ctx: click.Context, person_id: int, tracks: tuple[int, ...], library: Path | None) -> None:
    """TRACKS are not person PERSON_ID but someone else: they become a new person."""
    from headsearch.people.persons import split_person

    new = split_person(_library(ctx, library), person_id, list(tracks))
    click.echo(f"tracks {', '.join(map(str, tracks))} are now person {new}")


@people.command("hide")
@click.argument("person_id", type=int)
@click.option("--undo", is_flag=True, help="Show the person again.")
@library_option
@click.pass_context
def hide_command(ctx: click.Context, person_id: int, undo: bool, library: Path | None) -> None:
    """Leave person PERSON_ID out of lists (e.g. the audience); --undo shows them again."""
    from headsearch.people.persons import hide_person

    hide_person(_library(ctx, library), person_id, hidden=not undo)
    click.echo(f"person {person_id} {'shown' if undo else 'hidden'}")


@people.command("not")
@click.argument("tracks", nargs=-1, required=True, type=int)
@click.option("--person", "person_id", type=int, default=None, help="The person the tracks are not (default: the one they are in).")
@library_option
@click.pass_context
def not_command(ctx: click.Context, tracks: tuple[int, ...], person_id: int | None, library: Path | None) -> None:
    """"Not this person": TRACKS leave the person they were put in, for good."""
    from headsearch.people.persons import not_this_person, person_of_track

    lib = _library(ctx, library)
    for track in tracks:
        was = not_this_person(lib, track, person_id)
        click.echo(f"track {track} is not person {was}; now in person {person_of_track(lib, track)}")
