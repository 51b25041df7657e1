"""The command examples of the README and of the guides it sends readers to name real commands and options."""
from __future__ import annotations

import re
from pathlib import Path

import click
from click.testing import CliRunner

from cli.main import main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GUIDES = [README, ROOT / "docs" / "guide.md", ROOT / "docs" / "benchmarks.md"]


def readme_commands() -> list[list[str]]:
    blocks = [b for doc in GUIDES for b in re.findall(r"```bash\n(.*?)```", doc.read_text(), flags=re.S)]
    lines = [l.split("#")[0].strip() for b in blocks for l in b.splitlines()]
    cmds = []
    for line in lines:
        for part in line.split("&&"):
            words = part.split()
            if words and words[0].endswith("headsearch") and len(words) > 1:
                cmds.append(words[1:])
    return cmds


def command_path(words: list[str]) -> list[str]:
    """The leading words that name a command and its subcommands (`bench speed`), checked against the CLI."""
    ctx = click.Context(main)
    command, path = main.get_command(ctx, words[0]), [words[0]]
    assert command is not None, f"a guide uses unknown command {words[0]!r}"
    for word in words[1:]:
        sub = command.get_command(ctx, word) if isinstance(command, click.Group) else None
        if sub is None:
            break
        command, path = sub, path + [word]
    return path


def test_readme_examples_match_the_cli():
    cmds = readme_commands()
    assert len(cmds) >= 10
    for words in cmds:
        path = command_path(words)
        name = " ".join(path)
        help_text = CliRunner().invoke(main, [*path, "--help"]).output
        for option in (w.split("=")[0] for w in words[len(path):] if w.startswith("-")):
            assert re.search(rf"(^|[\s,]){re.escape(option)}([\s,]|$)", help_text, flags=re.M), f"{name}: documented option {option} not in --help"


def test_readme_runs_headsearch_bare_only_once_the_venv_is_activated():
    """`pip install` into a virtualenv does not put `headsearch` on the PATH: the README calls it (and
    pip) bare only after `. .venv/bin/activate`, or by its path."""
    activated = False
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S):
        for line in block.splitlines():
            for part in line.split("#")[0].split("&&"):
                words = part.split()
                if words[:2] in ([".", ".venv/bin/activate"], ["source", ".venv/bin/activate"]):
                    activated = True
                elif words and words[0] in ("headsearch", "pip"):
                    assert activated, f"README runs {words[0]} before activating the virtualenv: {line.strip()}"
                elif words and words[0].endswith("/headsearch"):
                    assert words[0] == ".venv/bin/headsearch", line
    assert activated
