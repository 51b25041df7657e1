"""The command line behaves: bars only on a terminal, quiet broken pipes, Ctrl-C as exit 130 with
one line, -v anywhere showing the pipeline's decisions, nothing created when nothing was indexed,
short media errors, failed files remembered until they change, `list`, and `demo`'s next steps."""
from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import AMY_DIR, DATA, library_db, needs_data, run
from test_index_query import assert_consistent, table_counts

from cli.main import INTERRUPTED
from cli.options import command_name

pytestmark = [needs_data, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "cli.main"]
RETALKING = DATA / "video-retalking" / "examples" / "face"


def test_progress_bars_only_on_a_terminal(tmp_path):
    quiet = run("index", AMY_DIR / "amy1.png", "--library", tmp_path / "a")  # stderr is not a terminal here
    assert "file/s" not in quiet.stderr and "files:" not in quiet.stderr and quiet.stderr == ""
    shown = run("index", AMY_DIR / "amy2.png", "--library", tmp_path / "a", "--progress")
    assert "files:" in shown.stderr


def test_broken_pipe_ends_quietly(tmp_path):
    lib = tmp_path / "lib"
    run("index", AMY_DIR, "--library", lib, "-q")
    cmd = shlex.join([*CLI, "stats", "--library", str(lib)])
    head = subprocess.run(f"{cmd} 2>{tmp_path / 'err1'} | head -3", shell=True, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert len(head.stdout.splitlines()) == 3 and (tmp_path / "err1").read_text() == ""
    # Readers that are gone before we write anything: every write meets a broken pipe.
    for command in ("stats", "list"):
        line = shlex.join([*CLI, command, "--library", str(lib)])
        err = tmp_path / f"{command}.err"
        subprocess.run(f"{line} 2>{err} | true", shell=True, cwd=REPO, timeout=120)
        assert err.read_text() == "", command


def _interrupt(cmd: list[str], wait_for, timeout: float = 120, again_after: float | None = None,
               sig: int = signal.SIGINT) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while not wait_for() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(sig)
    if again_after is not None:  # Ctrl-C pressed twice
        time.sleep(again_after)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _clips_and_a_library(tmp_path: Path, clips: int) -> tuple[Path, Path, int]:
    """A folder of the first `clips` video-retalking clips, a library of the first already, and its thumbnails' count."""
    media = tmp_path / "media"
    media.mkdir()
    for i in range(1, clips + 1):
        os.symlink(RETALKING / f"{i}.mp4", media / f"clip{i}.mp4")
    lib = tmp_path / "lib"
    run("index", media / "clip1.mp4", "--library", lib, "-q")
    return media, lib, len(list((lib / "thumbnails").iterdir()))


def test_ctrl_c_is_exit_130_with_one_line(tmp_path):
    media, lib, thumbs = _clips_and_a_library(tmp_path, 5)
    cmd = [*CLI, "index", str(media), "--library", str(lib), "-q"]
    # While indexing (the next file's thumbnails are written: a commit is under way or just done).
    result = _interrupt(cmd, lambda: len(list((lib / "thumbnails").iterdir())) > thumbs)
    assert result.returncode == 130, result.stderr
    assert result.stderr.strip().splitlines() == [INTERRUPTED]
    assert_consistent(lib)
    # While the command is still loading.
    started = time.monotonic()
    early = _interrupt([*CLI, "stats", "--library", str(lib)], lambda: time.monotonic() - started > 0.3)
    assert early.returncode == 130 and len(early.stderr.strip().splitlines()) == 1 and "Traceback" not in early.stderr
    # Pressed twice: still one line and 130 (not killed by the second signal while tearing down).
    thumbs = len(list((lib / "thumbnails").iterdir()))
    twice = _interrupt(cmd, lambda: len(list((lib / "thumbnails").iterdir())) > thumbs, again_after=0.05)
    assert twice.returncode == 130 and twice.stderr.strip().splitlines() == [INTERRUPTED], (twice.returncode, twice.stderr)
    assert_consistent(lib)
    # The next run finishes the work.
    assert "0 failed" in run("index", media, "--library", lib, "-q").stdout
    assert table_counts(lib)["videos"] == 5


def test_sigterm_stops_index_as_ctrl_c_does_and_says_so(tmp_path):
    """A service manager's SIGTERM: the run stops where it is safe to, one line, exit 143; the next run finishes."""
    media, lib, thumbs = _clips_and_a_library(tmp_path, 3)
    result = _interrupt([*CLI, "index", str(media), "--library", str(lib), "-q"],
                        lambda: len(list((lib / "thumbnails").iterdir())) > thumbs, sig=signal.SIGTERM)
    assert result.returncode == 143, result.stderr
    assert result.stderr.strip().splitlines() == [INTERRUPTED.replace("interrupted", "terminated", 1)]
    assert_consistent(lib)
    assert "0 failed" in run("index", media, "--library", lib, "-q").stdout and table_counts(lib)["videos"] == 3


def test_ctrl_c_inside_a_database_query_is_an_interruption(tmp_path, monkeypatch):
    """DuckDB stops a query on SIGINT with its own error ("Query interrupted"); inside a library
    transaction that is a Ctrl-C (exit 130), rolled back, never a failed file."""
    import threading

    import sqlalchemy as sa

    from headsearch.store.library import Library

    lib = tmp_path / "lib"
    run("index", AMY_DIR / "amy1.png", "--library", lib, "-q")
    library = Library.open(lib, read_only=False)
    # A Ctrl-C while DuckDB reads the Arrow rows of a bulk insert comes back inside its error text (seen once in a full
    # run: the file was said to have failed): an interruption too.
    import types

    import pyarrow

    from headsearch.store import table_rows
    from schemas import tables

    class Interrupted:  # rows whose schema DuckDB reads when Ctrl-C arrives
        def __arrow_c_stream__(self, requested_schema=None):
            raise KeyboardInterrupt

    monkeypatch.setattr(pyarrow, "table", lambda *a, **k: Interrupted())
    row = types.SimpleNamespace(**{c.name: 0 for c in tables.shots.columns})
    try:
        with library.transaction() as conn:
            conn.execute(sa.delete(tables.failed_files).where(tables.failed_files.c.path == "-"))  # as `Library.files.store` does first
            table_rows.bulk_insert(conn, tables.shots, [row])
    except KeyboardInterrupt as e:
        assert "failed: KeyboardInterrupt" in str(e.__cause__)
    else:
        raise AssertionError("the interrupted insert ended normally")
    monkeypatch.undo()
    assert_consistent(lib)
    try:
        with library.transaction() as conn:
            conn.execute(sa.text("create table scratch (n bigint)"))
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()  # Ctrl-C
            conn.execute(sa.text("select count(*) from range(100000000000) a"))  # minutes, unless interrupted
    except KeyboardInterrupt as e:
        assert "interrupt" in str(e.__cause__).lower()
    else:
        raise AssertionError("the interrupted query ended normally")
    with library_db(lib) as con:
        assert "scratch" not in {r[0] for r in con.execute("select table_name from information_schema.tables").fetchall()}
    assert_consistent(lib)


def test_verbose_anywhere_shows_decisions_not_noise(tmp_path):
    lib = tmp_path / "lib"
    after = run("index", AMY_DIR / "amy1.png", "--library", lib, "-q", "-v")
    before = run("-v", "index", AMY_DIR / "amy1.png", "--library", lib, "-q")
    assert "new, indexing" in after.stderr and "1 track kept" in after.stderr
    assert "unchanged (same size and modification time), skipped" in before.stderr
    query = run("query", AMY_DIR / "amy3.png", "--library", lib, "--verbose")
    assert "tracks looked at" in query.stderr
    for noise in ("faiss", "Loading", "sqlalchemy", "DEBUG"):
        assert noise not in after.stderr + before.stderr + query.stderr
    assert "new, indexing" not in run("index", AMY_DIR / "amy2.png", "--library", lib, "-q").stderr


def test_nothing_created_when_nothing_indexed(tmp_path):
    lib = tmp_path / "lib"
    result = run("index", tmp_path / "no-such-folder", "--library", lib, ok=False)
    assert result.exit_code == 1 and "no-such-folder: no such file or folder" in result.stderr and not lib.exists()
    assert len(result.stderr.strip().splitlines()) == 1  # one mistake, one line
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(np.random.default_rng(1).bytes(20_000))
    result = run("index", bad, "--library", lib, ok=False)
    assert result.exit_code == 1 and not lib.exists()
    assert "real time" not in result.output  # no video was indexed: no "0.00x real time"
    empty = tmp_path / "empty-folder"
    empty.mkdir()
    assert run("index", empty, "--library", lib, ok=False).exit_code == 1 and not lib.exists()
    lib.mkdir()  # an existing empty folder stays, empty
    run("index", bad, "--library", lib, ok=False)
    assert lib.is_dir() and not any(lib.iterdir())


def test_media_errors_are_short_and_failed_files_remembered(tmp_path):
    media = tmp_path / "media"
    media.mkdir()
    shutil.copy(AMY_DIR / "amy1.png", media / "amy1.png")
    bad = media / "broken.mp4"
    bad.write_bytes(np.random.default_rng(0).bytes(50_000))
    lib = tmp_path / "lib"
    first = run("index", media, "--library", lib, "-q", ok=False)
    assert first.exit_code == 2
    errors = [l for l in first.stderr.splitlines() if l.startswith("error:")]
    assert errors == [f"error: {bad.resolve()}: not a readable video"]  # one short line; the decoders' words with -v
    # Unchanged: skipped with a count, exit 0, no error line.
    second = run("index", media, "--library", lib, "-q")
    assert "1 failed before and unchanged" in second.stdout and "error" not in second.stderr
    listing = run("list", "--library", lib).stdout
    assert f"failed           {bad.resolve()}  {bad.resolve()}: not a readable video" in listing
    assert f"indexed          {(media / 'amy1.png').resolve()}  photo  1 track" in listing
    # Asked to retry, or changed: tried again.
    retried = run("index", media, "--library", lib, "-q", "-v", "--retry-failed", ok=False)
    assert retried.exit_code == 2 and "decord:" in retried.stderr  # with -v, what the decoders said
    bad.write_bytes(np.random.default_rng(2).bytes(60_000))
    assert "failed, changed" in run("list", "--library", lib).stdout
    assert run("index", media, "--library", lib, "-q", ok=False).exit_code == 2
    # A fixed file is indexed and forgotten as failed.
    shutil.copy(AMY_DIR / "amy2.png", media / "broken.png")
    bad.unlink()
    third = run("index", media, "--library", lib, "-q")
    assert "0 failed" in third.stdout
    states = run("list", "--library", lib, "--json").stdout
    assert "broken.mp4" not in states and states.count('"indexed"') == 2


def test_list_states(tmp_path):
    media = tmp_path / "media"
    media.mkdir()
    for name in ("amy1.png", "amy2.png", "amy3.png"):
        shutil.copy(AMY_DIR / name, media / name)
    lib = tmp_path / "lib"
    run("index", media, "--library", lib, "-q")
    (media / "amy1.png").unlink()
    shutil.copy(AMY_DIR / "amy4.png", media / "amy2.png")
    lines = run("list", "--library", lib).stdout.splitlines()
    assert [l.split()[0] for l in lines] == ["missing", "changed", "indexed"]
    assert run("list", "--library", lib, "--state", "changed").stdout.count("\n") == 1


def test_demo_ends_with_what_to_try_next(tmp_path):
    out = run("demo", "--out", tmp_path / "demo").stdout
    tail = out.strip().splitlines()
    assert "what to try next:" in out and tail[-1].strip().startswith(f"{command_name()} list --library")
    assert any("--export-clips" in l for l in tail[-5:])


def test_hints_name_the_command_as_the_user_can_run_it(tmp_path, monkeypatch):
    script = tmp_path / "venv" / "bin" / "headsearch"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "argv", [str(script), "demo"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # installed in a venv that is not activated
    assert command_name() == str(script)
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin:/bin")  # activated
    assert command_name() == "headsearch"
    monkeypatch.setattr(sys, "argv", ["/x/cli/main.py", "demo"])  # python -m cli.main, nothing on the PATH
    monkeypatch.setenv("PATH", "/nowhere")
    assert command_name().endswith(" -m cli.main")


def test_a_query_loads_no_training_or_cluster_stack(tmp_path):
    """A cold `query` pays only for what it needs: no scikit-learn, SciPy, torch, Ray, matplotlib or
    training code is imported, no SQLAlchemy (the library is read in DuckDB's own SQL), and no OpenVINO (a photo's
    few faces run on ONNX Runtime)."""
    lib = tmp_path / "lib"
    run("index", AMY_DIR / "amy1.png", "--library", lib, "-q")
    heavy = ("sklearn", "scipy", "torch", "timm", "ray", "matplotlib", "trainer", "bench", "serve", "sqlalchemy", "duckdb_engine",
             "openvino")
    code = ("import atexit, sys\n"
            f"atexit.register(lambda: print('imported:', *sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r})), file=sys.stderr))\n"
            f"sys.argv = ['headsearch', 'query', {str(AMY_DIR / 'amy2.png')!r}, '--library', {str(lib)!r}, '--json']\n"
            "from cli.main import main\nmain()\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines()[-1] == "imported:", result.stderr
