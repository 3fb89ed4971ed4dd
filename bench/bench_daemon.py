"""Daemon latency on a reused connection: GET /health, one keep-alive connection.

A listening socket made with protocol 0 (as `bind_socket` did) makes asyncio skip
TCP_NODELAY on accepted connections; uvicorn writes a response head and body in two
sends, so Nagle holds the body until the client's delayed ACK (~40 ms). The bench
serves the real daemon app on 127.0.0.1 twice — that old socket with plain uvicorn
settings, then `qwenmem serve`'s own socket and settings — and prints the median and
p90 of sequential requests on one connection. Asserts nothing.

    .venv/bin/python bench/bench_daemon.py [--requests 50]
"""

from __future__ import annotations

import argparse
import http.client
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn

from qwenmem_tui.config import Settings
from qwenmem_tui.daemon.cli import bind_socket
from qwenmem_tui.daemon.connections import uvicorn_config
from qwenmem_tui.daemon.server import create_app
from qwenmem_tui.paths import Paths


def old_socket() -> socket.socket:
    """The listener as it was before issue #17: protocol 0, no TCP_NODELAY."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


@contextmanager
def serving(sock: socket.socket, config: uvicorn.Config) -> Iterator[int]:
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def timings(port: int, count: int) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    seconds = []
    try:
        for _ in range(count + 1):
            start = time.perf_counter()
            conn.request("GET", "/health")
            response = conn.getresponse()
            response.read()
            seconds.append(time.perf_counter() - start)
    finally:
        conn.close()
    return seconds[1:]  # the first request also opens the connection


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        settings = Settings()
        settings.memory.enabled = False
        setups = {
            "before (proto 0, plain uvicorn)": lambda app: (
                old_socket(),
                uvicorn.Config(app, log_config=None, access_log=False, lifespan="on"),
            ),
            "now (bind_socket, uvicorn_config)": lambda app: (
                bind_socket("127.0.0.1", 0),
                uvicorn_config(app),
            ),
        }
        print(f"GET /health x {args.requests} on one keep-alive connection, 127.0.0.1")
        print(f"{'setup':<36} {'median ms':>10} {'p90 ms':>8}")
        for name, setup in setups.items():
            app = create_app(settings, Paths(home), project_root=home)
            sock, config = setup(app)
            with serving(sock, config) as port:
                seconds = sorted(timings(port, args.requests))
            median = statistics.median(seconds) * 1000
            p90 = seconds[int(len(seconds) * 0.9) - 1] * 1000
            print(f"{name:<36} {median:>10.2f} {p90:>8.2f}")


if __name__ == "__main__":
    main()
