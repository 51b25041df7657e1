"""Optional parts of the install: what each command needs beyond the lean core, and the one line
that says how to get it. Indexing, querying, benchmarking and serving with the default model run on
ONNX Runtime alone; training and head-similarity checkpoints need PyTorch (`headsearch[train]`);
`index --engine ray` needs Ray (`headsearch[ray]`)."""
from __future__ import annotations

import importlib.util

from headsearch.basics.errors import HeadsearchError

TRAIN = ("torch", "torchvision", "timm", "safetensors")


def missing(modules: tuple[str, ...]) -> list[str]:
    """The modules of `modules` that cannot be imported here (without importing them)."""
    gone = []
    for name in modules:
        try:
            if importlib.util.find_spec(name) is None:
                gone.append(name)
        except (ImportError, ValueError):
            gone.append(name)
    return gone


def install_hint(extra: str) -> str:
    """The command that adds an extra to this install: where this code runs from a checkout (the README installs it so,
    `pip install -e .`), into that checkout's install (`pip install -e '/path/to/headsearch[export]'`), else from the
    package index (`pip install 'headsearch[export]'`)."""
    from pathlib import Path

    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "setup.cfg").is_file() and (checkout / "headsearch").is_dir():
        return f"pip install -e '{checkout}[{extra}]'"
    return f"pip install 'headsearch[{extra}]'"


def require_train(what: str, modules: tuple[str, ...] = TRAIN) -> None:
    """HeadsearchError in one line when PyTorch and its friends are not installed."""
    gone = missing(modules)
    if gone:
        raise HeadsearchError(f"{what} needs {', '.join(gone)}, which the lean install leaves out: {install_hint('train')}")
