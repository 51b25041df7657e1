"""An iterator run ahead in a background thread through a bounded queue.

Indexing decodes and cuts shots in one thread while detection and embedding run in the caller's:
PyAV, OpenCV and ONNX Runtime release the GIL while they work, so on two cores the stages
overlap. The queue bounds memory (at most `depth` items wait), an exception in the producer is
raised in the consumer, and closing the consumer early stops the producer.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")
_DONE = object()


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


class Prefetched(Generic[T]):
    """Iterate `source` in a daemon thread, at most `depth` items ahead of the consumer."""

    def __init__(self, source: Iterable[T], depth: int = 8, name: str = "headsearch-decode"):
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._source = source
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            for item in self._source:
                if not self._put(item):
                    break
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, which raises it
            self._put(_Failed(e))
            return
        finally:
            close = getattr(self._source, "close", None)
            if close is not None and self._stop.is_set():
                close()
        self._put(_DONE)

    def __iter__(self) -> Iterator[T]:
        try:
            while True:
                item = self._queue.get()
                if item is _DONE:
                    return
                if isinstance(item, _Failed):
                    raise item.error
                yield item
        finally:
            self.close()

    def close(self) -> None:
        """Stop the producer (it ends at its next item) and wait for it."""
        self._stop.set()
        while self._thread.is_alive():
            try:  # unblock a producer waiting on a full queue
                while True:
                    self._queue.get_nowait()
            except queue.Empty:
                pass
            self._thread.join(timeout=0.05)
