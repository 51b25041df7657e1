"""Every command and every option of the command line says what it does in `--help`, and counts are said in the right
number ("1 track", "2 tracks") (issue 29)."""
from __future__ import annotations

import click

from cli.main import main


def _commands(group: click.Group, ctx: click.Context, path: tuple[str, ...] = ("headsearch",)):
    yield path, group
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            yield from _commands(command, ctx, (*path, name))
        else:
            yield (*path, name), command


def test_every_command_and_option_has_help():
    ctx = click.Context(main)
    silent = []
    for path, command in _commands(main, ctx):
        if not (command.help or command.short_help):
            silent.append(" ".join(path))
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                record = param.get_help_record(click.Context(command, parent=ctx))
                if record is None or not record[1].strip() or record[1].strip().startswith("["):  # only "[default: ...]"
                    silent.append(f"{' '.join(path)} {param.opts[0]}")
    assert silent == []


def test_counts_are_said_in_the_right_number():
    from headsearch.basics.text import counted

    assert [counted(n, "track") for n in (0, 1, 2, 1200)] == ["0 tracks", "1 track", "2 tracks", "1,200 tracks"]
    assert counted(1, "new person") == "1 new person" and counted(3, "new person") == "3 new people"
    assert counted(1, "person") == "1 person" and counted(2, "person") == "2 people"
