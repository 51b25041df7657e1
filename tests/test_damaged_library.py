"""A damaged library database (cut short, or a block that does not match its checksum): every command
says so in one line and exits non-zero, and nothing is written to the file."""
from __future__ import annotations

import hashlib
import os
import shutil

import pytest
from conftest import AMY_DIR, FACES, needs_data, run

pytestmark = [needs_data, pytest.mark.slow]
COMMANDS = [
    ("list",),
    ("stats",),
    ("index", FACES / "penny" / "penny1.png"),
    ("index", AMY_DIR / "amy1.png"),
    ("query", AMY_DIR / "amy2.png"),
    ("query", "--person", "1"),
    ("remove", AMY_DIR / "amy1.png"),
    ("people",),
    ("people", "name", "1", "Amy"),
]


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    lib = tmp_path_factory.mktemp("healthy") / "lib"
    run("index", AMY_DIR / "amy1.png", AMY_DIR / "amy3.png", FACES / "bbt1.jpg", "--library", lib, "-q")
    run("people", "--library", lib)
    return lib


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cut_to(size: int):
    def damage(db):
        os.truncate(db, size)
    return damage


def cut_by(fraction: float):
    def damage(db):
        os.truncate(db, int(db.stat().st_size * fraction))
    return damage


def scrambled_header(db):
    with open(db, "r+b") as f:
        f.seek(4096 + 8)  # inside the first database header: its checksum no longer matches
        f.write(os.urandom(64))


@pytest.mark.parametrize("damage", [cut_to(0), cut_to(100), cut_to(3 * 4096 + 262144), cut_by(0.5), scrambled_header],
                         ids=["empty", "100-bytes", "one-block", "half", "header-checksum"])
def test_every_command_says_the_database_is_damaged_in_one_line(healthy, tmp_path, damage):
    lib = tmp_path / "lib"
    shutil.copytree(healthy, lib)
    db = lib / "library.duckdb"
    damage(db)
    before = digest(db)
    for command in COMMANDS:
        result = run(command[0], *command[1:], "--library", lib, ok=False)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert "Traceback" not in result.output, (command, result.output)
        assert len(lines) == 1 and lines[0].startswith("error: ") and "is damaged" in lines[0], (command, result.output)
        assert digest(db) == before, command  # never a write into a damaged database
    assert not (lib / "library.duckdb.wal").exists()
