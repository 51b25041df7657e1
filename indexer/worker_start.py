"""The first thing a worker process runs: tie its life to the indexing process, then start up.

A worker killed with its parent at any moment must not live on (a model load costs hundreds of MB).
Linux's PR_SET_PDEATHSIG has the kernel kill this process when its parent dies; it is asked for
here, before anything heavy is imported or loaded (the initializer and its arguments travel
pickled, and are unpickled only after it), and then the parent is checked to be still there: a
parent that died before the request was made leaves this process to a new parent, and it leaves.
This module imports nothing but the standard library.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent() -> bool:
    """Ask the kernel to kill this process when its parent dies (Linux); False where that cannot be asked."""
    if not sys.platform.startswith("linux"):
        return False
    with contextlib.suppress(Exception):
        import ctypes

        return ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL) == 0
    return False


def boot(parent_pid: int, start: bytes) -> None:
    """A process pool's initializer: die with `parent_pid`, then run `start` (a pickled (function, args))."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the writer's to handle
    die_with_parent()
    if os.getppid() != parent_pid:  # the parent died before the kernel was asked to tell us
        os._exit(0)
    function, args = pickle.loads(start)
    function(*args)
