"""Writing files so that readers see the old version or the complete new one, never a part; a file's SHA-256; the model
cache folder."""
from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from headsearch.basics.json_text import json_text


def atomic_write(path: Path, write: Callable[[Path], None], fsync: bool = True) -> None:
    """Call `write(tmp)` on a temporary file beside `path`, then rename it over `path`.

    On any failure (a full disk included) the temporary file is removed and `path` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    # Made as a plain open() makes a file, its mode from the umask (mkstemp's would be 0600); never an existing one.
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        write(tmp)
        if fsync:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: Path, data: bytes, fsync: bool = True) -> None:
    """Write bytes atomically."""
    atomic_write(path, lambda tmp: tmp.write_bytes(data), fsync)


def write_json_atomic(path: Path, data: object, indent: int | None = 2) -> None:
    """Write JSON atomically."""
    atomic_write(path, lambda tmp: tmp.write_text(json_text(data, indent) + "\n", encoding="utf-8"))


_SHA256: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> SHA-256, for this process


def sha256_file(path: str | Path) -> str:
    """The SHA-256 of a file's content (64 hex digits), read in 1 MiB blocks, hashed once per version of the file in
    this process (its path, size and modification time)."""
    key = _version(path)
    if key not in _SHA256:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _SHA256[key] = h.hexdigest()
    return _SHA256[key]


def known_sha256(path: str | Path, digest: str) -> None:
    """Take `digest` as the SHA-256 of the file as it is now (from a record written when it was hashed, the file unchanged
    since): `sha256_file` then hashes nothing for this version."""
    _SHA256[_version(path)] = digest


def _version(path: str | Path) -> tuple[str, int, int]:
    st = os.stat(path)
    return str(path), st.st_size, st.st_mtime_ns


def model_cache_dir() -> Path:
    """Where converted model files live: $HEADSEARCH_CACHE/models, else $XDG_CACHE_HOME/headsearch/models,
    else ~/.cache/headsearch/models."""
    if os.environ.get("HEADSEARCH_CACHE"):
        return Path(os.environ["HEADSEARCH_CACHE"]).expanduser() / "models"
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return base / "headsearch" / "models"


def exchange_paths(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux `renameat2(RENAME_EXCHANGE)`), so that each name always names a
    complete folder: readers see the old one or the new one, never neither. False, with nothing changed,
    where the system or the file system cannot (the caller then renames twice)."""
    import ctypes
    import errno

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def fsync_folder(folder: Path) -> None:
    """Make the renames inside a folder durable (best effort: some file systems cannot)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def private_temp_folder(name: str) -> Path:
    """A folder of this user's own under the system's temporary folder (`headsearch-<uid>/<name>`, mode 0700), made
    when missing; refused (OSError) when another user made it first, it is a symbolic link, or others may write it:
    a fixed shared name in /tmp is one another local user can make first and read or replace what goes in."""
    base = Path(tempfile.gettempdir()) / f"headsearch-{os.getuid()}"
    for folder in (base, base / name):
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise PermissionError(f"{folder}: not a private folder of this user (owner {st.st_uid}, mode {oct(st.st_mode & 0o777)})")
    return base / name


def process_alive(pid: int) -> bool:
    """Whether a process of this id runs (one of another user's too): what a dead run's leftovers are told by."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it runs, as someone else
        return True
    return True
