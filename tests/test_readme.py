"""The README's command examples name real commands and options."""
from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from cli.main import main

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_commands() -> list[list[str]]:
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
    lines = [l.split("#")[0].strip() for b in blocks for l in b.splitlines()]
    cmds = []
    for line in lines:
        for part in line.split("&&"):
            words = part.split()
            if words and words[0].endswith("headsearch") and len(words) > 1:
                cmds.append(words[1:])
    return cmds


def test_readme_examples_match_the_cli():
    cmds = readme_commands()
    assert len(cmds) >= 10
    for words in cmds:
        name = words[0]
        assert name in main.commands, f"README uses unknown command {name!r}"
        help_text = CliRunner().invoke(main, [name, "--help"]).output
        for option in (w.split("=")[0] for w in words[1:] if w.startswith("-")):
            assert re.search(rf"(^|[\s,]){re.escape(option)}([\s,]|$)", help_text, flags=re.M), f"{name}: README option {option} not in --help"
