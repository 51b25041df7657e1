"""The HTTP server `headsearch serve` runs: uvicorn, with a deadline on every request's header.

uvicorn bounds a kept-alive connection's silence (5 s) but not how long a request's header may take to arrive: a
client that sends one header byte every few seconds holds its connection for as long as it likes, and enough of them
hold every connection the process can keep (slowloris). Here a connection that has not sent a whole header within
`HEADER_DEADLINE_S` of opening, or of the end of its last response, is closed. Bodies have their own deadlines
(`serve.uploads`)."""
from __future__ import annotations

import asyncio
import logging

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

HEADER_DEADLINE_S = 10.0


class HeaderDeadlineProtocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, closing a connection whose request header is not whole in time."""

    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # a whole header arrived: its request runs, under the body's own deadlines
            self._disarm()

    def on_response_complete(self) -> None:
        self._arm()  # kept alive: the next request's header has its deadline too (a pipelined one, already here, disarms it)
        super().on_response_complete()
        if self.transport.is_closing():
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(HEADER_DEADLINE_S, self._late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _late(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            log.info("%s: no whole request header within %.0f s; connection closed",
                     f"{self.client[0]}:{self.client[1]}" if self.client else "a client", HEADER_DEADLINE_S)
            self.transport.close()


def server_config(app, host: str, port: int) -> uvicorn.Config:
    """How `serve` (and the tests, through the same function) run the app."""
    return uvicorn.Config(app, host=host, port=port, http=HeaderDeadlineProtocol, log_level="warning", access_log=False)
