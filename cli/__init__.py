"""The `headsearch` command line.

Loading the command takes up to a second (numpy, OpenCV, ONNX Runtime, SQLAlchemy...): a Ctrl-C meanwhile
ends the program with one line and exit status 130, like a Ctrl-C later on, never a traceback.
`cli.main.HeadsearchGroup.main` hands SIGINT back to Python (KeyboardInterrupt) once it runs.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

STARTED = time.perf_counter()  # the first command's clock starts as its code loads (`query -v` shows the stages)
_started_once = False


def command_started() -> float:
    """When this command started: as its code loaded for the process's first, at its call for each later one (a
    test's or a caller's CliRunner runs several in one process)."""
    global _started_once
    first, _started_once = not _started_once, True
    return STARTED if first else time.perf_counter()


def _interrupted_while_loading(signum, frame) -> None:  # pragma: no cover - timing dependent
    os.write(2, b"interrupted\n")
    os._exit(130)


def is_the_program() -> bool:
    """Whether this process is the `headsearch` program (its console script, `python -m cli.main`), not a test's
    CliRunner or a caller's import."""
    return bool(sys.argv) and Path(sys.argv[0]).name in ("headsearch", "main.py", "-m")


if is_the_program() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted_while_loading)
