"""The `headsearch` command line.

Loading the command takes a second or two (numpy, OpenCV, scikit-learn...): a Ctrl-C meanwhile
ends the program with one line and exit status 130, like a Ctrl-C later on, never a traceback.
`cli.main.HeadsearchGroup.main` hands SIGINT back to Python (KeyboardInterrupt) once it runs.
"""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path


def _interrupted_while_loading(signum, frame) -> None:  # pragma: no cover - timing dependent
    os.write(2, b"interrupted\n")
    os._exit(130)


if sys.argv and Path(sys.argv[0]).name in ("headsearch", "main.py", "-m") and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted_while_loading)
