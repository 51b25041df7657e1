"""Seconds per stage of a run: what indexing prints in its summary and what `query -v` shows."""
from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class StageClock:
    """Busy seconds per stage. Stages may run in two threads at once (decoding and shots ahead of detection
    and embedding), so their sum can exceed the wall time."""

    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, stage: str, since: float) -> float:
        """Counts the time since `since` (a `time.perf_counter()`) to `stage`; returns now."""
        now = time.perf_counter()
        with self._lock:
            self.seconds[stage] += now - since
        return now

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, t0)

    def summary(self) -> str:
        """"imports 0.52 s, model 0.31 s, ..." in the order the stages first ran."""
        return ", ".join(f"{name} {seconds:.2f} s" for name, seconds in self.seconds.items())
