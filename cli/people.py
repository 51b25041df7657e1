"""`headsearch people`: who is in the library, and the corrections a user makes to it."""
from __future__ import annotations

from pathlib import Path

import click

from cli.exporting import export_options_no_file
from cli.options import library_option, library_path
from headsearch.basics.json_text import json_text
from headsearch.basics.text import counted, printable


def _open(library: Path | None):
    from headsearch.store.library import Library

    return Library.open(library_path(library))


def _echo_err(message: str) -> None:
    click.echo(message, err=True)


@click.group(invoke_without_command=True)
@library_option
@click.option("--json", "as_json", is_flag=True,
              help='A JSON list of {"id", "name", "hidden", "listed", "tracks", "videos", "photos", "looks", "references"} '
                   "(videos and photos: the files it is seen in; looks: the tracks grouped by look).")
@click.option("--all", "include_hidden", is_flag=True, help="Hidden people too.")
@click.option("--unlisted", is_flag=True, help="People with fewer than two tracks too (their tracks are in the inbox).")
@click.pass_context
def people(ctx: click.Context, library: Path | None, as_json: bool, include_hidden: bool, unlisted: bool) -> None:
    """Group every track good enough (face size, sharpness, detector score, length) into persons (new tracks join
    known people) and list those with at least two tracks, a name or reference photos.

    The other tracks wait in the inbox (`headsearch people inbox`). Corrections (name, merge, split, move, hide,
    not, same, different) are kept when files are re-indexed and respected by later grouping."""
    ctx.ensure_object(dict)
    ctx.obj["library"] = library
    if ctx.invoked_subcommand is not None:
        return
    from headsearch.basics.errors import LibraryDamaged, LibraryError
    from headsearch.people.listing import inbox, list_people, merge_suggestions
    from headsearch.people.persons import update_people

    lib = _open(library)
    try:
        _echo_err(update_people(lib, report=_echo_err).line())
    except LibraryDamaged:
        raise
    except (OSError, LibraryError) as e:  # a read-only library (a mount, an archive): list the people as they were grouped
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        _echo_err(f"note: {lib.root} cannot be written here ({reason}): the people as last grouped, new tracks not grouped")
    from headsearch.people.forgetting import returned_notes

    for line in returned_notes(lib):  # a file that held a forgotten person was analysed again: they are back
        _echo_err(line)
    found = list_people(lib, include_hidden=include_hidden, include_unlisted=unlisted)
    if as_json:
        click.echo(json_text([p.to_dict() for p in found]))
        return
    if not found:
        click.echo("no people listed yet (a person is listed from two good tracks; `headsearch people inbox` shows the rest)")
    for p in found:
        flags = ("  (hidden)" if p.hidden else "") + ("" if p.listed else "  (unlisted)")
        files = p.videos + p.photos
        names = ", ".join(printable(Path(v).name) for v in files[:3]) + (f" +{len(files) - 3}" if len(files) > 3 else "")
        click.echo(f"{p.id:>5}  {printable(p.label()):<24} {counted(len(p.tracks), 'track'):>10}  {counted(len(p.videos), 'video'):>10}  "
                   f"{counted(len(p.photos), 'photo'):>10}  {counted(len(p.looks), 'look')}  {names}{flags}")
    waiting, asked = len(inbox(lib)), len(merge_suggestions(lib))
    if waiting or asked:
        _echo_err(f"{counted(waiting, 'track')} in the inbox (`headsearch people inbox`)"
                  + (f"; {counted(asked, 'pair')} of people may be one person (`headsearch people suggestions`)" if asked else ""))


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
    click.echo(f"person {person_id} is {printable(repr(name))}" if name.strip() else f"person {person_id} has no name")


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


@people.command("move")
@click.argument("tracks", nargs=-1, required=True, type=int)
@click.option("--to", "person_id", type=int, required=True, help="The person the tracks are.")
@library_option
@click.pass_context
def move_command(ctx: click.Context, tracks: tuple[int, ...], person_id: int, library: Path | None) -> None:
    """TRACKS are person --to: in one step they leave the person they were in (for good) and join this one, even
    tracks the quality gates held back (from the inbox)."""
    from headsearch.people.persons import move_track

    lib = _library(ctx, library)
    for track in tracks:
        was = move_track(lib, track, person_id)
        click.echo(f"track {track} moved to person {person_id}" + (f" (from person {was})" if was not in (None, person_id) else ""))


@people.command("inbox")
@click.option("--json", "as_json", is_flag=True, help='A JSON list of {"track_id", "video", "kind", "start", "end", "reason", "why", '
                                                      '"person_id", "nearest", "likely"}.')
@library_option
@click.pass_context
def inbox_command(ctx: click.Context, as_json: bool, library: Path | None) -> None:
    """Tracks in no listed person: held back by a quality gate (small, blurred or unsure face, a glimpse, no face) or
    in a person with too few tracks; each with the listed person it is most like (`people move TRACK --to ID`)."""
    from headsearch.basics.timeline import format_time
    from headsearch.people.listing import inbox

    waiting = inbox(_library(ctx, library))
    if as_json:
        click.echo(json_text([t.to_dict() for t in waiting]))
        return
    if not waiting:
        click.echo("the inbox is empty")
    for t in waiting:
        when = "photo" if t.kind == "image" else f"{format_time(t.start)}-{format_time(t.end)}"
        near = (f"  most like {t.nearest['label']} ({t.nearest['score']:.3f}{', likely' if t.likely else ''})" if t.nearest else "")
        click.echo(f"{t.track_id:>6}  {printable(Path(t.video).name)}  {when}  {t.why}{printable(near)}")


@people.command("suggestions")
@click.option("--json", "as_json", is_flag=True, help='A JSON list of {"a", "b", "score"}.')
@library_option
@click.pass_context
def suggestions_command(ctx: click.Context, as_json: bool, library: Path | None) -> None:
    """Pairs of people who may be one person ("are these the same person?"), most alike first; answer with
    `people same A B` (merge) or `people different A B` (never asked again)."""
    from headsearch.people.listing import find_person, merge_suggestions

    lib = _library(ctx, library)
    found = merge_suggestions(lib)
    if as_json:
        click.echo(json_text([s.to_dict() for s in found]))
        return
    if not found:
        click.echo("no suggestions")
    for s in found:
        a, b = find_person(lib, s.a), find_person(lib, s.b)
        click.echo(f"{s.score:.3f}  {printable(a.label())} ({counted(len(a.tracks), 'track')})  ~  {printable(b.label())} ({counted(len(b.tracks), 'track')})"
                   f"   headsearch people same {s.a} {s.b} | different {s.a} {s.b}")


@people.command("same")
@click.argument("a", type=int)
@click.argument("b", type=int)
@library_option
@click.pass_context
def same_command(ctx: click.Context, a: int, b: int, library: Path | None) -> None:
    """Yes, A and B are the same person: B is merged into A for good."""
    from headsearch.people.persons import merge_people

    merge_people(_library(ctx, library), a, b)
    click.echo(f"person {b} merged into person {a}")


@people.command("different")
@click.argument("a", type=int)
@click.argument("b", type=int)
@library_option
@click.pass_context
def different_command(ctx: click.Context, a: int, b: int, library: Path | None) -> None:
    """No, A and B are not the same person: they are never suggested together again (kept across re-grouping)."""
    from headsearch.people.persons import keep_apart

    keep_apart(_library(ctx, library), a, b)
    click.echo(f"persons {a} and {b} are kept apart")


@people.command("add-photo")
@click.argument("person_id", type=int)
@click.argument("photos", nargs=-1, required=True, type=click.Path(path_type=Path))
@library_option
@click.pass_context
def add_photo_command(ctx: click.Context, person_id: int, photos: tuple[Path, ...], library: Path | None) -> None:
    """Keep PHOTOS (their largest head) as reference photos of person PERSON_ID: the person is listed, and its moments
    (`query --person`, the person page) are scored against them too."""
    from headsearch.people.photos import add_photo_file

    lib = _library(ctx, library)
    for photo in photos:
        row = add_photo_file(lib, person_id, Path(photo).expanduser())
        click.echo(f"reference photo {row.id} of person {person_id}: {printable(photo)}" + ("" if row.face_visible else " (no face)"))


@people.command("photos")
@click.argument("person_id", type=int)
@click.option("--json", "as_json", is_flag=True, help='A JSON list of {"id", "path", "crop", "face_visible", "model", "added_at"}.')
@library_option
@click.pass_context
def photos_command(ctx: click.Context, person_id: int, as_json: bool, library: Path | None) -> None:
    """The reference photos of person PERSON_ID."""
    from headsearch.people.listing import find_person
    from headsearch.people.photos import model_key, reference_photos

    lib = _library(ctx, library)
    find_person(lib, person_id)
    rows = reference_photos(lib, person_id)
    if as_json:
        click.echo(json_text([{"id": r.id, "path": r.path, "crop": str(lib.root / r.crop), "face_visible": r.face_visible,
                               "model": r.model, "added_at": r.added_at} for r in rows]))
        return
    if not rows:
        click.echo(f"person {person_id} has no reference photos (`headsearch people add-photo {person_id} PHOTO`)")
    key = model_key(lib)
    for r in rows:
        click.echo(f"{r.id:>5}  {printable(r.path)}" + ("" if r.model == key else f"  (made by {r.model}: give it again)"))


@people.command("remove-photo")
@click.argument("person_id", type=int)
@click.argument("photo_id", type=int)
@library_option
@click.pass_context
def remove_photo_command(ctx: click.Context, person_id: int, photo_id: int, library: Path | None) -> None:
    """Remove reference photo PHOTO_ID of person PERSON_ID."""
    from headsearch.people.photos import remove_reference_photo

    remove_reference_photo(_library(ctx, library), person_id, photo_id)
    click.echo(f"reference photo {photo_id} of person {person_id} removed")


@people.command("export")
@click.argument("args", nargs=-1, required=True, metavar="[PERSON]... FILE")
@click.option("--video", "video", type=click.Path(path_type=Path), default=None,
              help="The moments in this video only; without PERSON, every listed person seen in it (a .vtt file: who is on screen).")
@click.option("--chapters", is_flag=True, help="With --video and a .vtt FILE: one chapter a shot instead.")
@export_options_no_file
@library_option
@click.pass_context
def export_command(ctx: click.Context, args: tuple[str, ...], video: Path | None, chapters: bool, markers: bool, handles: float,
                   order: str, library: Path | None) -> None:
    """Write persons' moments to FILE for an editor: one track a person (its format from the extension: .otio, .edl,
    .xml for Premiere and Final Cut 7, .fcpxml, .mlt, .vtt, .csv). PERSON is a name or an id."""
    from cli.exporting import check_export_path, export_answers
    from headsearch.search.service import SearchService

    *persons, target = args
    check_export_path(Path(target))
    if not persons and video is None:
        raise click.UsageError("name a PERSON (or give --video VIDEO for everyone seen in it)")
    if chapters and (video is None or Path(target).suffix.lower() != ".vtt"):
        raise click.UsageError("--chapters makes a .vtt FILE of one --video")
    answers, shots = SearchService(_library(ctx, library)).people_moments(persons, video)
    export_answers([Path(target)], [r for a in answers for r in a.results], [a.person.label() for a in answers], markers, handles,
                   order, shots, chapters, hint=": give --video VIDEO")


@people.command("screen-time")
@click.argument("person", required=False)
@click.option("--json", "as_json", is_flag=True, help='A JSON list of {"person_id", "person", "video", "seconds", "share", '
              '"appearances", "first", "last", "ranges", "tracks"}.')
@click.option("--csv", "as_csv", is_flag=True, help="The same as CSV rows.")
@click.option("--sheet", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="With PERSON: a contact sheet PNG of its appearances.")
@library_option
@click.pass_context
def screen_time_command(ctx: click.Context, person: str | None, as_json: bool, as_csv: bool, sheet: Path | None, library: Path | None) -> None:
    """Seconds on screen per person and video (every listed person, or PERSON): share of the video, appearances, first
    and last moment; a person's tracks that overlap are counted once."""
    import csv
    import io

    from headsearch.basics.timeline import format_time
    from headsearch.people.screen_time import contact_sheet, screen_time

    if as_json and as_csv:
        raise click.UsageError("--json and --csv exclude each other")
    if sheet is not None and person is None:
        raise click.UsageError("--sheet needs a PERSON")
    lib = _library(ctx, library)
    times = screen_time(lib, person)
    if sheet is not None:
        _echo_err(f"contact sheet: {contact_sheet(lib, times, sheet)}")
    rows = [t.to_dict() for t in times]
    if as_json:
        click.echo(json_text(rows))
    elif as_csv:
        buf = io.StringIO()
        fields = ["person_id", "person", "video", "seconds", "share", "appearances", "first", "last"]
        w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        click.echo(buf.getvalue(), nl=False)
    else:
        for t in times:
            n = len(t.appearances)
            click.echo(f"{printable(t.person):<24} {format_time(t.seconds)} on screen ({100 * t.share:.1f}%), {n} appearance{'s' if n != 1 else ''}, "
                       f"{format_time(t.first)}-{format_time(t.last)}  {printable(t.video)}")
        if not times:
            click.echo("no one on screen (no listed person has tracks in videos)")


def _removed(row) -> str:
    """What one forgetting removed, counted."""
    return ", ".join(counted(n, word) for n, word in (
        (row.tracks, "track"), (row.sightings, "sighting"), (row.vectors, "vector"), (row.thumbnails, "thumbnail"),
        (row.pictures, "picture"), (row.reference_photos, "reference photo"), (row.corrections, "correction")))


@people.command("forget")
@click.argument("person")
@click.option("--yes", is_flag=True, help="Do not ask first (needed when the input is not a terminal).")
@click.option("--keep-name", is_flag=True, help="Keep their name in the library's record of the forgetting (by default the "
                                                 "record keeps their id and counts only).")
@click.option("--verify", is_flag=True, help="Search the web app's cache folder too. Every forget searches the library folder "
                                             "and exits with status 1 when anything of them is left.")
@click.option("--json", "as_json", is_flag=True, help='What was forgotten and found, as JSON (as the web app answers it): {"forgotten": '
              'the record kept, "likely_theirs", "note", "searched", "found"}.')
@library_option
@click.pass_context
def forget_command(ctx: click.Context, person: str, yes: bool, keep_name: bool, verify: bool, library: Path | None,
                   as_json: bool = False) -> None:
    """Forget PERSON (a name or an id) for good: their tracks, sightings, vectors (every vector index), thumbnails,
    pictures, reference photos, name, verdicts and suggestions leave the library in one step that a kill cannot leave
    half done; then every file of the library folder is read and searched for their vectors, pictures and name.

    "For good" means the library holds nothing of them; it keeps a record: when, their id, how much was removed
    (`headsearch people forgotten`; their name only with --keep-name), and which files they were in (by content, not
    by name), so that a redaction hiding everyone analyses those files again and a file indexed again that brings them
    back says so. The videos themselves are not changed: indexing one again finds them again, as someone new."""
    import sys

    from actions.forget import forget
    from actions.requests import ForgetRequest
    from headsearch.basics.errors import HeadsearchError
    from headsearch.basics.json_text import json_text
    from headsearch.people.forgetting import likely_line, likely_theirs, person_to_forget

    if not yes and not sys.stdin.isatty():
        raise HeadsearchError("people forget asks first, and the input is not a terminal: give --yes to forget without asking")
    lib = _library(ctx, library)
    found = person_to_forget(lib, person)
    files = found.videos + found.photos
    what = (f"{printable(found.label())} (person {found.id}: {counted(len(found.tracks), 'track')} in {counted(len(files), 'file')}, "
            f"{counted(found.references, 'reference photo')})")
    waiting = likely_theirs(lib, found)
    if waiting:
        _echo_err(likely_line(waiting, found.id))
    if not yes and not click.confirm(f"Forget {what} for good? Their tracks, vectors, pictures and photos are deleted", default=False,
                                     err=True):
        raise HeadsearchError(f"nothing forgotten: {printable(found.label())} stays")
    also = ()
    if verify:
        from serve.media import cache_folder

        also = (cache_folder(lib.root, lib.manifest.get("created_at", "")),)
    done = forget(ForgetRequest(found.id, keep_name, also), lib, likely=waiting, person=found)
    check = done.check
    if as_json:
        click.echo(json_text(done.to_dict()))
    else:
        click.echo(f"forgot {what}: removed {_removed(done.row)}")
        click.echo(check.line())
    if check.found:
        raise HeadsearchError(f"something of person {found.id} is still there after the forgetting (above): remove those files")


@people.command("forgotten")
@click.option("--json", "as_json", is_flag=True, help='A JSON list of {"id", "person_id", "name", "forgotten_at", "tracks", "sightings", '
                                                      '"vectors", "thumbnails", "pictures", "reference_photos", "corrections"}.')
@library_option
@click.pass_context
def forgotten_command(ctx: click.Context, as_json: bool, library: Path | None) -> None:
    """The persons forgotten (`headsearch people forget`), oldest first: when, who, and how much was removed."""
    import time
    from dataclasses import asdict

    from headsearch.people.forgetting import forgotten

    rows = forgotten(_library(ctx, library))
    if as_json:
        click.echo(json_text([asdict(r) for r in rows]))
        return
    if not rows:
        click.echo("nobody has been forgotten in this library")
    for r in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.forgotten_at))
        click.echo(f"{when}  person {r.person_id}" + (f" ({printable(r.name)})" if r.name else "") + f": removed {_removed(r)}")
