"""Daemon fixtures: the app on the temp home and fake server, in-process or live."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.testclient import TestClient

from qwenmem_tui.config import Settings
from qwenmem_tui.daemon.cli import bind_socket
from qwenmem_tui.daemon.connections import ConnectionLimits, uvicorn_config
from qwenmem_tui.daemon.server import ServerOptions, create_app
from qwenmem_tui.paths import Paths

MakeApp = Callable[..., Starlette]
ServeLive = Callable[[Starlette], AbstractContextManager[str]]


@pytest.fixture
def token() -> str:
    return "daemon-test-token-1234"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """No background extraction: its model requests would take the replies tests script.
    test_memory.py turns it back on where it is the subject."""
    settings.memory.extraction = False
    return settings


@pytest.fixture
def make_daemon(settings: Settings, paths: Paths, project: Path) -> MakeApp:
    """`make_daemon(**options)` -> the daemon app for the temp home and project."""

    def make(*, session_features: Any = None, **options: object) -> Starlette:
        extra = {} if session_features is None else {"session_features": session_features}
        return create_app(
            settings,
            paths,
            project_root=project,
            options=ServerOptions(**options),  # type: ignore[arg-type]
            **extra,
        )

    return make


@pytest.fixture
def client(make_daemon: MakeApp) -> Iterator[TestClient]:
    """An in-process client (lifespan run) on a daemon without token or origins."""
    with TestClient(make_daemon(), raise_server_exceptions=False) as test_client:
        yield test_client


@contextmanager
def live_server(app: Starlette, limits: ConnectionLimits = ConnectionLimits()) -> Iterator[str]:
    """Serve `app` as `qwenmem serve` does (same uvicorn settings) on a free loopback
    port in a thread; yields the base URL.

    The socket is bound and listening before the thread starts, so a request sent at
    once waits in the backlog instead of racing the startup.
    """
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(app, limits))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture
def serve_live() -> ServeLive:
    """`with serve_live(app) as url:` runs `app` on a live uvicorn server."""
    return live_server


@pytest.fixture
def live_url(make_daemon: MakeApp) -> Iterator[str]:
    with live_server(make_daemon()) as url:
        yield url


@pytest.fixture
def stalled_url() -> Iterator[str]:
    """A port that accepts connections (kernel backlog) and never answers."""
    sock = bind_socket("127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()
