"""Resident memory of `headsearch serve` under many large concurrent uploads (issue 19, item 5).

Starts the real server (`headsearch serve`, uvicorn) on 127.0.0.1 in a process of its own, fires N
concurrent uploads of about 19 MB each to /api/query (bytes that are no image: every one is refused,
as in the issue), samples the server's resident memory while they run and reports its peak (and
the kernel's high-water mark) and what is left a moment after the last answer.

    python tests/upload_memory.py                          # 50 uploads of 19 MB, this checkout
    python tests/upload_memory.py --uploads 10 --json      # one JSON line
    python tests/upload_memory.py --source /tmp/old        # another checkout (e.g. `git worktree add /tmp/old house`)

Without --library, one photo of the test data is indexed into a temporary library first. Every
upload is bounded in time (--timeout) and the server is stopped at the end, whatever happens.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
PHOTO = Path(os.environ.get("HEADSEARCH_TEST_DATA", HERE.parent / "shared" / "data")) / "face_recognition" / "examples" / "obama_small.jpg"
CHUNK = 64 * 1024


@dataclass
class Answer:
    """What one upload got back."""

    status: int | None  # None: no answer (the connection failed or timed out)
    seconds: float  # from the first byte sent to the whole answer read
    sent: int  # body bytes sent before the answer came (an early answer stops the upload)
    error: str = ""
    retry_after: str | None = None


@dataclass
class Memory:
    """The server's resident memory (MB): before, peak while sampled, the kernel's high-water mark, after."""

    before: float = 0.0
    peak: float = 0.0
    high_water: float = 0.0
    after: float = 0.0
    samples: list[float] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(library: Path, port: int, source: Path = HERE, env: dict | None = None) -> subprocess.Popen:
    """`headsearch serve` on 127.0.0.1:port, from the checkout `source`; returns once it answers."""
    code = "import sys; from cli.main import main; sys.argv[0] = 'headsearch'; main()"
    environment = {**os.environ, "PYTHONPATH": str(source), **(env or {})}
    proc = subprocess.Popen([sys.executable, "-c", code, "serve", "--library", str(library), "--port", str(port)],
                            env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server stopped: {proc.stderr.read().decode(errors='replace')[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"GET /api/videos HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                if s.recv(12).startswith(b"HTTP/1.1 200"):
                    return proc
        except OSError:
            pass
        time.sleep(0.2)
    stop_server(proc)
    raise RuntimeError("the server did not answer within 120 s")


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def rss_mb(pid: int, key: str = "VmRSS") -> float:
    """A process's resident memory (VmRSS) or its high-water mark (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024 / 1e6
    raise RuntimeError(f"no {key} for process {pid}")


def upload(port: int, body_size: int, timeout: float, form: bool = False, path: str = "/api/query") -> Answer:
    """One upload of `body_size` bytes that are no image (the raw body, or a file in a multipart form
    as a browser sends it), sent in chunks; stops sending as soon as an answer arrives (as browsers
    and curl do) and reads it whole."""
    boundary = "headsearchuploadmemory"
    before = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"photo\"; filename=\"big.png\"\r\n"
              "Content-Type: image/png\r\n\r\n").encode() if form else b""
    after = f"\r\n--{boundary}--\r\n".encode() if form else b""
    kind = f"multipart/form-data; boundary={boundary}" if form else "image/png"
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {kind}\r\n"
            f"Content-Length: {len(before) + body_size + len(after)}\r\n\r\n").encode() + before
    chunk = (b"\x00not an image" * (CHUNK // 13 + 1))[:CHUNK]
    start, sent = time.monotonic(), 0
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(head)
            while sent <= body_size:
                if sent == body_size:
                    s.sendall(after)
                    break
                if time.monotonic() - start > timeout:
                    return Answer(None, time.monotonic() - start, sent, "timed out while sending")
                if select.select([s], [], [], 0)[0]:
                    break  # an early answer: stop sending
                n = min(CHUNK, body_size - sent)
                s.sendall(chunk[:n])
                sent += n
            return _read_answer(s, start, sent, timeout)
    except OSError as e:
        return Answer(None, time.monotonic() - start, sent, f"{type(e).__name__}: {e}")


def _read_answer(s: socket.socket, start: float, sent: int, timeout: float) -> Answer:
    data = b""
    while b"\r\n\r\n" not in data:
        if time.monotonic() - start > timeout:
            return Answer(None, time.monotonic() - start, sent, "timed out waiting for the answer")
        part = s.recv(65536)
        if not part:
            return Answer(None, time.monotonic() - start, sent, "connection closed without an answer")
        data += part
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length and time.monotonic() - start < timeout:
        part = s.recv(65536)
        if not part:
            break
        rest += part
    return Answer(int(lines[0].split()[1]), time.monotonic() - start, sent, retry_after=headers.get("retry-after"))


def measure(port: int, pid: int, uploads: int, size: int, timeout: float, form: bool = False,
            settle: float = 2.0) -> tuple[Memory, list[Answer]]:
    """Fire `uploads` concurrent uploads and sample the server's memory every 20 ms meanwhile."""
    memory = Memory(before=rss_mb(pid))
    answers: list[Answer | None] = [None] * uploads
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            memory.samples.append(rss_mb(pid))
            time.sleep(0.02)

    def one(i: int) -> None:
        answers[i] = upload(port, size, timeout, form)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(uploads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5)
    done.set()
    sampler.join()
    time.sleep(settle)
    memory.peak = max(memory.samples + [memory.before])
    memory.high_water = rss_mb(pid, "VmHWM")
    memory.after = rss_mb(pid)
    return memory, [a or Answer(None, timeout, 0, "no answer") for a in answers]


def small_library(folder: Path, source: Path = HERE) -> Path:
    """A library of one photo (the server needs one to start)."""
    library = folder / "library"
    code = "import sys; from cli.main import main; sys.argv[0] = 'headsearch'; main()"
    subprocess.run([sys.executable, "-c", code, "index", str(PHOTO), "--library", str(library), "-q"],
                   env={**os.environ, "PYTHONPATH": str(source)}, check=True, timeout=600, stdout=subprocess.DEVNULL)
    return library


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uploads", type=int, default=50)
    parser.add_argument("--size-mb", type=float, default=19.0, help="size of each upload in MB (10^6 bytes)")
    parser.add_argument("--library", type=Path, default=None, help="a library to serve (default: one photo, indexed now)")
    parser.add_argument("--source", type=Path, default=HERE, help="the checkout whose server runs (default: this one)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds each upload may take")
    parser.add_argument("--form", action="store_true", help="send multipart forms (as the search page does), not raw bodies")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="upload-memory-") as tmp:
        library = args.library or small_library(Path(tmp), args.source)
        port = free_port()
        server = start_server(library, port, args.source)
        try:
            memory, answers = measure(port, server.pid, args.uploads, int(args.size_mb * 1e6), args.timeout, args.form)
        finally:
            stop_server(server)
    statuses: dict[str, int] = {}
    for a in answers:
        key = str(a.status) if a.status is not None else f"none ({a.error})"
        statuses[key] = statuses.get(key, 0) + 1
    slowest = max(a.seconds for a in answers)
    report = {"uploads": args.uploads, "size_mb": args.size_mb, "form": args.form, "rss_before_mb": round(memory.before), "rss_peak_mb": round(memory.peak),
              "rss_high_water_mb": round(memory.high_water), "rss_after_mb": round(memory.after), "statuses": statuses,
              "slowest_answer_s": round(slowest, 2), "mb_sent": round(sum(a.sent for a in answers) / 1e6)}
    if args.json:
        print(json.dumps(report))
        return
    print(f"{args.uploads} concurrent uploads of {args.size_mb:g} MB to /api/query{' (multipart forms)' if args.form else ''} ({report['mb_sent']} MB sent before the answers)")
    print(f"server resident memory: {report['rss_before_mb']} MB before, peak {report['rss_peak_mb']} MB "
          f"(high-water mark {report['rss_high_water_mb']} MB), {report['rss_after_mb']} MB after")
    print(f"answers: {', '.join(f'{n} x {s}' for s, n in sorted(statuses.items()))}; slowest {slowest:.2f} s")
    if any(a.status is None for a in answers):
        print("first failure: " + next(a.error for a in answers if a.status is None))


if __name__ == "__main__":
    sys.exit(main())
