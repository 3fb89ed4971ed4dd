"""Issue #17, daemon: DNS rebinding, malformed bodies, slow clients, TCP_NODELAY.

In process (Starlette TestClient) for the guard and the bodies; a live uvicorn on
127.0.0.1 with the daemon's own connection settings for the socket-level findings.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from contextlib import closing, contextmanager

import httpx
import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from qwenmem_tui.daemon.cli import bind_socket
from qwenmem_tui.daemon.connections import ConnectionLimits
from qwenmem_tui.daemon.guard import host_name
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply

from .conftest import MakeApp, live_server

# -- Host allow-list (DNS rebinding) ---------------------------------------------------


def test_a_foreign_host_header_gets_403_without_the_session_list(client: TestClient) -> None:
    client.post("/session", json={"title": "secret plans"})
    response = client.get("/sessions", headers={"Host": "attacker.example"})
    assert response.status_code == 403
    assert response.json()["code"] == "host_not_allowed"
    assert "secret plans" not in response.text and "attacker.example" not in response.text
    # The same request by a local name still works.
    assert client.get("/sessions", headers={"Host": "localhost:8765"}).status_code == 200


@pytest.mark.parametrize(
    "host",
    ["localhost", "localhost:8765", "LOCALHOST.", "127.0.0.1", "127.0.0.1:1", "[::1]", "[::1]:8765"],
)
def test_localhost_names_are_accepted(client: TestClient, host: str) -> None:
    assert client.get("/sessions", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize(
    "host",
    ["attacker.example", "attacker.example:8765", "127.0.0.1.attacker.example", "localhost.evil",
     "[::2]:8765", "localhost:junk", "127.0.0.2"],
)
def test_other_hosts_are_refused_on_every_route(client: TestClient, host: str) -> None:
    for method, path in [("GET", "/health"), ("GET", "/sessions"), ("POST", "/session")]:
        response = client.request(method, path, headers={"Host": host})
        assert (response.status_code, response.json()["code"]) == (403, "host_not_allowed")


def test_allow_host_adds_a_name(make_daemon: MakeApp) -> None:
    with TestClient(make_daemon(allowed_hosts=frozenset({"Dev.Box.lan"}))) as client:
        assert client.get("/sessions", headers={"Host": "dev.box.lan:8765"}).status_code == 200
        assert client.get("/sessions", headers={"Host": "other.lan"}).status_code == 403


def test_host_names_are_normalised() -> None:
    assert host_name("[::1]:80") == "::1"
    assert host_name("::1") == "::1"
    assert host_name("Example.COM.:443") == "example.com"
    assert host_name("host:junk") == "host:junk"


# -- malformed bodies: always a 4xx envelope -------------------------------------------


DEEP_BODIES = [b"[" * 100_000, b'{"a":' * 50_000, b"[" * 5_000 + b"]" * 5_000]


def _assert_client_error(response: httpx.Response, code: str) -> None:
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:200])
    body = response.json()
    assert body["code"] == code, body
    assert isinstance(body["error"], str)
    # What an exception's own text says (a UnicodeEncodeError's "surrogates not
    # allowed", a RecursionError's "recursion"), never the message written for people.
    for leak in ("Internal", "codec", "Traceback", "recursion", "surrogates not allowed"):
        assert leak not in body["error"], body


@pytest.mark.parametrize("raw", DEEP_BODIES, ids=["brackets", "objects", "closed"])
def test_deeply_nested_bodies_are_400(client: TestClient, raw: bytes) -> None:
    session = client.post("/session", json={}).json()["sessionId"]
    for url in ("/session", f"/session/{session}/prompt"):
        response = client.post(url, content=raw, headers={"Content-Type": "application/json"})
        assert response.status_code == 400, (url, response.status_code, response.text[:200])
        assert response.json()["code"] in ("invalid_json", "invalid_request")


def test_a_lone_surrogate_title_is_400(client: TestClient) -> None:
    response = client.post("/session", content=b'{"title":"\\ud800"}')
    _assert_client_error(response, "invalid_request")
    assert client.get("/sessions").json()["sessions"] == []


def test_a_prompt_with_a_lone_surrogate_is_400_and_never_reaches_the_model(
    client: TestClient, fake: FakeOpenAI
) -> None:
    fake.responder = lambda body: Reply("should not be asked")
    session = client.post("/session", json={}).json()["sessionId"]
    for raw in (b'{"text":"hi \\udc80 there"}', b'{"text":"\\ud83d"}'):
        response = client.post(f"/session/{session}/prompt", content=raw)
        _assert_client_error(response, "invalid_request")
    assert fake.chat_requests == []


@pytest.mark.parametrize(
    "raw",
    [b"\xff\xfe\xfa", b'{"text": "\xc3\x28"}', "{\"text\": \"\u00e9\"}".encode("latin-1"), b"\x00" * 10],
)
def test_bodies_that_are_not_utf8_json_are_400(client: TestClient, raw: bytes) -> None:
    session = client.post("/session", json={}).json()["sessionId"]
    response = client.post(f"/session/{session}/prompt", content=raw)
    _assert_client_error(response, "invalid_json")


def test_a_huge_integer_is_400(client: TestClient) -> None:
    response = client.post("/session", content=b'{"title": ' + b"9" * 10_000 + b"}")
    _assert_client_error(response, "invalid_json")


# -- live: TCP_NODELAY, slow clients ---------------------------------------------------


@contextmanager
def serve_with(app: Starlette, limits: ConnectionLimits) -> Iterator[tuple[str, int]]:
    """The app on the daemon's own uvicorn settings on 127.0.0.1; yields its address."""
    with live_server(app, limits) as url:
        yield "127.0.0.1", int(url.rsplit(":", 1)[1])


def test_accepted_connections_have_tcp_nodelay() -> None:
    """asyncio (as uvicorn runs it) sets TCP_NODELAY only on sockets whose protocol is
    TCP: a listener made with protocol 0 leaves Nagle on for every connection."""

    async def accepted_nodelay() -> int:
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                sock = transport.get_extra_info("socket")
                seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        listener = bind_socket("127.0.0.1", 0)
        server = await asyncio.get_running_loop().create_server(Probe, sock=listener)
        async with server:
            _, writer = await asyncio.open_connection(*listener.getsockname()[:2])
            value = await asyncio.wait_for(seen, timeout=10)
            writer.close()
        return value

    assert asyncio.run(accepted_nodelay()) != 0


def _half_open(address: tuple[str, int]) -> socket.socket:
    """A connection that starts a request head and never finishes it."""
    assert address[0] == "127.0.0.1"  # never aimed anywhere else
    conn = socket.create_connection(address, timeout=10)
    conn.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    return conn


def _closed_by_server(conn: socket.socket) -> bool:
    try:
        return conn.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_half_open_connection_is_closed_after_the_head_timeout(make_daemon: MakeApp) -> None:
    limits = ConnectionLimits(head_timeout=0.3, max_connections=16)
    with serve_with(make_daemon(), limits) as address:
        conn = _half_open(address)
        with closing(conn):
            conn.sendall(b"a")  # trickling bytes does not buy time
            assert _closed_by_server(conn)  # recv times out after 10 s if it never closes


def test_health_answers_while_half_open_connections_fill_the_limit(make_daemon: MakeApp) -> None:
    """3x the connection limit of half-open connections (aimed at 127.0.0.1, 48 in all):
    the oldest idle ones are closed to make room, /health still answers 200."""
    limits = ConnectionLimits(head_timeout=60, max_connections=16)
    with serve_with(make_daemon(), limits) as address:
        flood = [_half_open(address) for _ in range(3 * limits.max_connections)]
        try:
            response = httpx.get(f"http://127.0.0.1:{address[1]}/health", timeout=10)
            assert response.status_code == 200, response.text
            closed = sum(_closed_by_server(conn) for conn in flood[: 2 * limits.max_connections])
            assert closed == 2 * limits.max_connections
        finally:
            for conn in flood:
                conn.close()


def test_a_live_daemon_refuses_a_rebinding_host(make_daemon: MakeApp) -> None:
    with serve_with(make_daemon(), ConnectionLimits()) as (host, port):
        url = f"http://127.0.0.1:{port}/sessions"
        assert httpx.get(url, timeout=10).status_code == 200  # Host: 127.0.0.1:port
        refused = httpx.get(url, headers={"Host": f"attacker.example:{port}"}, timeout=10)
        assert (refused.status_code, refused.json()["code"]) == (403, "host_not_allowed")


def test_raw_malformed_requests_on_a_live_daemon_never_get_a_5xx(make_daemon: MakeApp) -> None:
    """Bytes straight onto a socket to 127.0.0.1 (bad request lines, headers over the
    limit, bodies shorter or longer than declared, junk): h11 and the guarded protocol
    answer 4xx or close, never 5xx, and the daemon keeps answering."""
    import random

    rng = random.Random(17)  # deterministic
    shapes = [
        b"GARBAGE\r\n\r\n",
        b"GET / HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n",
        b"POST /session HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\n{}",
        b"POST /session HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}extra junk",
        b"POST /session HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n",
        b"POST /session HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"GET /%ff%fe HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: \xff\xfe\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS hello
    ]
    shapes += [bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 300))) for _ in range(20)]
    with serve_with(make_daemon(), ConnectionLimits(head_timeout=0.5)) as address:
        for raw in shapes:
            with closing(socket.create_connection(address, timeout=10)) as conn:
                conn.sendall(raw)
                conn.shutdown(socket.SHUT_WR)
                answer = b""
                try:
                    while chunk := conn.recv(65536):
                        answer += chunk
                except (ConnectionResetError, TimeoutError):
                    pass
            status = answer.split(b" ", 2)[1:2]
            assert not status or not status[0].startswith(b"5"), (raw[:60], answer[:200])
        health = httpx.get(f"http://127.0.0.1:{address[1]}/health", timeout=10)
        assert health.json() == {"status": "ok"}
