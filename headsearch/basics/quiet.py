"""Silencing native libraries (FFmpeg, decord, faiss) that print straight to file descriptors 1 and 2."""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def _native_output_silenced(fd: int) -> Iterator[None]:
    stream = sys.stdout if fd == 1 else sys.stderr
    with contextlib.suppress(Exception):
        stream.flush()
    try:
        saved = os.dup(fd)
    except OSError:
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)
        os.close(devnull)


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """Hide what C/C++ code writes to fd 2 meanwhile: the user gets one clear line from us instead."""
    with _native_output_silenced(2):
        yield


@contextlib.contextmanager
def native_stdout_silenced() -> Iterator[None]:
    """Hide what C/C++ code writes to fd 1 meanwhile (faiss's on-disk lists print there), so stdout
    carries only our own output (e.g. --json)."""
    with _native_output_silenced(1):
        yield
