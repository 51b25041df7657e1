"""The files the web app sends, and only those: an indexed photo or video only while the file on disk
is the version the library indexed, and thumbnails, pictures and preview clips only as regular files
inside the folders that hold them. No symbolic link is ever followed on the way.

The indexer stores resolved paths (`indexer.pipeline.discover`), so an indexed path has no link in it:
each of its folders is opened in turn with O_NOFOLLOW, and a link met anywhere (the file itself
replaced by a link, or one of its folders) means the path now leads somewhere the library never
indexed. The file's size and content fingerprint must be those the library recorded (the
fingerprint is read once per version of the file on disk: device, inode, size, mtime, ctime). A
file touched since but with the same content counts as the indexed one, as it does for the indexer.
The response is sent from the very descriptor that was checked, so a file swapped after the check is
never the one sent.
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import anyio
from starlette.responses import FileResponse
from starlette.types import Receive, Scope, Send

from headsearch.basics.errors import HeadsearchError
from headsearch.basics.media import fingerprint_open

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # O_NONBLOCK: opening a FIFO must not wait for a writer
_LINK_ERRORS = {errno.ELOOP, errno.EMLINK}  # O_NOFOLLOW met a link (EMLINK on FreeBSD)
MAX_VERIFIED = 4096  # file versions whose fingerprint was checked, remembered


class FileNotServed(HeadsearchError):
    """The file is gone, or is not what may be sent (a link, not a regular file, outside its folder): 404."""


class NotFound(HeadsearchError):
    """No such video, track, sighting, person or redaction (by id): 404."""


class FileChanged(HeadsearchError):
    """The indexed file was changed since it was indexed: 409, re-index it."""


@dataclass
class OpenFile:
    """A file opened for sending and checked: its descriptor (owned: closed once sent) and its stat."""

    fd: int
    stat: os.stat_result
    path: str

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def open_without_links(base: str | Path, parts: tuple[str, ...]) -> int:
    """A descriptor of base/parts[0]/.../parts[-1], opened a component at a time without following any
    link below `base`; OSError (ELOOP, ENOTDIR, ENOENT...) when one is a link or missing."""
    if not parts or any(p in ("", ".", "..") or "/" in p for p in parts):
        raise OSError(errno.EINVAL, "not a plain relative path")
    folder = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the base itself may be reached by a link: it is trusted
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, _DIRECTORY, dir_fd=folder)
            except NotADirectoryError:  # a link, or a file where a folder was: Linux says ENOTDIR for both
                if stat.S_ISLNK(os.stat(part, dir_fd=folder, follow_symlinks=False).st_mode):
                    raise OSError(errno.ELOOP, "a symbolic link on the way") from None
                raise
            os.close(folder)
            folder = inner
        return os.open(parts[-1], _FILE, dir_fd=folder)
    finally:
        os.close(folder)


def _opened(fd: int, path: str, what: str) -> OpenFile:
    """The open file, when it is a regular file (not a FIFO, a device or a folder)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise FileNotServed(f"{what}: {path} is not a regular file; not served")
    os.set_blocking(fd, True)
    return OpenFile(fd, st, path)


def _open_error(e: OSError, path: str, what: str) -> FileNotServed:
    if e.errno == errno.ENOENT:
        return FileNotServed(f"{what}: {path} is no longer there")
    if e.errno in _LINK_ERRORS:
        return FileNotServed(f"{what}: {path} now leads through a symbolic link the library did not index; not served")
    if e.errno == errno.ENOTDIR:
        return FileNotServed(f"{what}: {path} is not there as indexed (a file stands where a folder was)")
    return _unreadable(e, path, what)


def _unreadable(e: OSError, path: str, what: str) -> FileNotServed:
    """A file the system would not open, for a reason without a line of its own."""
    return FileNotServed(f"{what}: cannot read {path} ({e.strerror or e})")


class IndexedFiles:
    """Opens indexed files for sending, only as the versions indexed (see the module's docstring)."""

    def __init__(self):
        self._verified: set[tuple] = set()
        self._guard = threading.Lock()

    def open(self, path: str, size: int, fingerprint: str, what: str) -> OpenFile:
        """The indexed file at `path` (recorded `size` and `fingerprint`), opened and checked; FileNotServed
        (404) when it is gone or reached through a link, FileChanged (409) when it is another version."""
        pure = PurePosixPath(path)
        if not pure.is_absolute() or ".." in pure.parts:
            raise FileNotServed(f"{what}: {path} is not an indexed path")
        try:
            fd = open_without_links("/", pure.parts[1:])
        except OSError as e:
            raise _open_error(e, path, what) from e
        opened = _opened(fd, path, what)
        try:
            self._check_version(opened, size, fingerprint, what)
        except BaseException:
            opened.close()
            raise
        return opened

    def _check_version(self, opened: OpenFile, size: int, fingerprint: str, what: str) -> None:
        st = opened.stat
        if st.st_size != size:
            raise FileChanged(f"{what}: {opened.path} changed since it was indexed ({size:,} bytes then, {st.st_size:,} now); "
                              "re-index it (headsearch index)")
        version = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, fingerprint)
        with self._guard:
            if version in self._verified:
                return
        with os.fdopen(os.dup(opened.fd), "rb") as f:
            same = fingerprint_open(f, st.st_size) == fingerprint
        if not same:
            raise FileChanged(f"{what}: {opened.path} changed since it was indexed (other content); re-index it (headsearch index)")
        with self._guard:
            if len(self._verified) >= MAX_VERIFIED:
                self._verified.clear()
            self._verified.add(version)


def open_in_folder(base: Path, relative: str, what: str) -> OpenFile:
    """A file the app keeps inside `base` (a thumbnail, a picture, a preview clip) at `relative`: a
    regular file reached without any link below `base`; FileNotServed otherwise."""
    parts = PurePosixPath(relative).parts
    shown = relative
    try:
        fd = open_without_links(base, parts)
    except OSError as e:
        if e.errno == errno.ENOENT:
            raise FileNotServed(f"{what}: {shown} is missing") from e
        if e.errno in _LINK_ERRORS:
            raise FileNotServed(f"{what}: {shown} is a symbolic link (or lies behind one); not served") from e
        if e.errno == errno.ENOTDIR:
            raise FileNotServed(f"{what}: {shown} is missing (a file stands where its folder was)") from e
        if e.errno == errno.EINVAL:
            raise FileNotServed(f"{what}: {shown} is not a file of the library folder") from e
        raise _unreadable(e, shown, what) from e
    return _opened(fd, shown, what)


class OpenFileResponse(FileResponse):
    """A FileResponse (Range requests and all) that sends the file it is given open, the one that was
    checked, whatever its path names by the time the body is sent; it closes the file when done."""

    def __init__(self, opened: OpenFile, media_type: str | None = None, headers: dict | None = None):
        super().__init__(opened.path, media_type=media_type, headers=headers, stat_result=opened.stat)
        self.opened = opened

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # "http.response.pathsend" would have the server open the path again: send the bytes ourselves.
        extensions = {k: v for k, v in scope.get("extensions", {}).items() if k != "http.response.pathsend"}
        try:
            await super().__call__({**scope, "extensions": extensions}, receive, send)
        finally:
            self.opened.close()

    @contextlib.asynccontextmanager
    async def _open_file(self) -> AsyncIterator[anyio.AsyncFile[bytes]]:  # Starlette's FileResponse opens its file here
        file = anyio.wrap_file(os.fdopen(os.dup(self.opened.fd), "rb"))
        try:
            await file.seek(0)
            yield file
        finally:
            with anyio.CancelScope(shield=True):
                await file.aclose()
