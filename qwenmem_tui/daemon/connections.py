"""How the daemon treats connections: listening socket, uvicorn limits, slow clients.

uvicorn alone leaves three gaps a local attacker (or a stuck client) can use:

- a connection that never finishes its request head has no deadline, so a few hundred
  half-open connections ("slowloris") exhaust the file descriptors and ``/health``
  stops answering;
- ``limit_concurrency`` counts those idle connections too, so a flood of them turns
  every real request into a 503;
- Nagle meets delayed ACK on a reused connection (~40 ms a request) unless
  ``TCP_NODELAY`` is set; ``daemon.cli.bind_socket`` and every accepted connection here
  set it.

:class:`GuardedH11Protocol` gives every connection waiting for a request head a
deadline and, at the connection limit, closes the oldest such idle connection to make
room, so a new request always gets through while real work is bounded.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

if TYPE_CHECKING:
    from starlette.types import ASGIApp

log = logging.getLogger("qwenmem.daemon")

HEAD_TIMEOUT_SECONDS = 10.0
KEEP_ALIVE_SECONDS = 5
MAX_CONNECTIONS = 64
ACCEPT_BATCH = 128


@dataclass(frozen=True)
class ConnectionLimits:
    """Bounds on what clients can hold; tests shrink them to stay fast."""

    head_timeout: float = HEAD_TIMEOUT_SECONDS
    """Seconds a connection may take to send a complete request head."""
    keep_alive: int = KEEP_ALIVE_SECONDS
    """Seconds an idle keep-alive connection stays open."""
    max_connections: int = MAX_CONNECTIONS
    """Open connections at most; beyond it idle ones are closed, then requests get 503."""


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a request-head deadline and idle-connection eviction.

    A connection is *idle* while it waits for a request head: just accepted, or after
    a response on a keep-alive connection. Trickling bytes does not reset the
    deadline (uvicorn's keep-alive timer is cancelled by any data).
    """

    limits = ConnectionLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_deadline: asyncio.TimerHandle | None = None
        self._idle_since = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass  # not fatal: only latency
        self._wait_for_head()
        self._evict_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self._is_idle():
            self._cancel_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._is_idle() and not self.transport.is_closing():
            self._wait_for_head()

    def _is_idle(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _wait_for_head(self) -> None:
        self._cancel_deadline()
        self._idle_since = self.loop.time()
        self._head_deadline = self.loop.call_later(self.limits.head_timeout, self._head_timed_out)

    def _cancel_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_timed_out(self) -> None:
        self._head_deadline = None
        if self._is_idle() and not self.transport.is_closing():
            log.info("[DAEMON] closing a connection that sent no request head in time")
            self.transport.close()

    def _evict_idle(self) -> None:
        """Over the limit, close the longest-idle other connection still without a request.

        Closing ones are not counted: their ``connection_lost`` only runs on a later
        loop turn, and counting them would evict a second connection for the same one.
        """
        live = [
            conn
            for conn in self.connections
            if isinstance(conn, GuardedH11Protocol) and not conn.transport.is_closing()
        ]
        if len(live) <= self.limits.max_connections:
            return
        idle = [conn for conn in live if conn is not self and conn._is_idle()]
        if idle:
            oldest = min(idle, key=lambda conn: conn._idle_since)
            oldest._cancel_deadline()
            oldest.transport.close()


def uvicorn_config(app: ASGIApp, limits: ConnectionLimits = ConnectionLimits()) -> uvicorn.Config:
    """The daemon's uvicorn settings, shared by ``qwenmem serve`` and the tests.

    ``limit_concurrency`` sits one above the connection bound: the eviction above keeps
    idle connections from using it up, so a 503 means real work is at the limit.
    """

    class Protocol(GuardedH11Protocol):
        pass

    Protocol.limits = limits
    return uvicorn.Config(
        app,
        http=Protocol,
        # log_config=None: uvicorn must not reconfigure logging; its errors reach the
        # debug log.
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_keep_alive=limits.keep_alive,
        limit_concurrency=limits.max_connections + 1,
        # Also how many connections asyncio accepts in one go before evicted ones are
        # closed (uvicorn's 2048 default would take 2048 descriptors in a burst).
        backlog=ACCEPT_BATCH,
    )
