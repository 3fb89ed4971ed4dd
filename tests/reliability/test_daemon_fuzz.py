"""Property-based fuzzing of every daemon route (hypothesis + Starlette's TestClient).

Any method, path, Host, header and body (JSON with lone surrogates, nesting 100,000
deep, bytes that are not UTF-8): never a 5xx, never a traceback, a codec message or a
file path in a response, every error in the §7 envelope. Oversized bodies get 413 on every route,
and session ids that try to walk the file system get 404 without touching it.
"""

from __future__ import annotations

import json
import string
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from qwenmem_tui.config import Settings
from qwenmem_tui.daemon.server import ServerOptions, create_app
from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply

TOKEN = "fuzz-daemon-token-5f0e1c"
EXAMPLES = 800  # ~14 s on a loaded 2-core machine
SENT: list[int] = []  # statuses seen, for the report in docs/reliability.md

ROUTES = [
    ("GET", "/health"),
    ("GET", "/capabilities"),
    ("GET", "/openapi.json"),
    ("POST", "/session"),
    ("GET", "/sessions"),
    ("POST", "/session/{id}/prompt"),
    ("POST", "/session/{id}/recap"),
]
POST_ROUTES = ["/session", "/session/{id}/prompt", "/session/{id}/recap"]
TRAVERSALS = [
    "../../etc/passwd",
    "..%2F..%2Fetc%2Fpasswd",
    "%2e%2e%2f%2e%2e%2fconfig.toml",
    "....//....//qwenmem.db",
    "/etc/passwd",
    "a/../../b",
    "..\\..\\windows\\win.ini",
    "%00",
    "x%00.txt",
    "~root",
    "latest",
    "debug/latest.txt",
]

printable = st.text(alphabet=string.printable.strip("\r\n\x0b\x0c") , max_size=40)
header_text = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=60)
# Lone surrogates are valid in JSON text ("\ud800") but not in UTF-8: the database and
# the HTTP client to the model refuse them.
any_text = st.text(
    alphabet=st.characters() | st.characters(categories=["Cs"]), max_size=30
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | any_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(any_text, children, max_size=4),
    max_leaves=12,
)


@pytest.fixture
def daemon(fake: FakeOpenAI, settings: Settings, paths: Paths, project: Path) -> Iterator[TestClient]:
    settings.memory.extraction = False  # its side requests would only slow the fuzzing
    fake.responder = lambda body: Reply("fuzzed reply")
    app = create_app(settings, paths, project_root=project, options=ServerOptions(token=TOKEN))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


def assert_clean(response) -> None:  # type: ignore[no-untyped-def]
    SENT.append(response.status_code)
    assert response.status_code < 500, (response.status_code, response.text[:300])
    text = response.text
    assert "Traceback" not in text and 'File "/' not in text, text[:300]
    assert "codec" not in text and "Internal error" not in text, text[:300]
    assert TOKEN not in text
    if response.status_code >= 400 and response.request.method != "HEAD":
        body = response.json()
        assert isinstance(body.get("error"), str) and isinstance(body.get("code"), str), body


@st.composite
def requests(draw: st.DrawFn, real_id: str) -> dict:
    method, template = draw(st.sampled_from(ROUTES))
    method = draw(st.sampled_from([method] * 6 + ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]))
    session_id = draw(st.sampled_from([real_id] * 4 + TRAVERSALS) | printable)
    path = template.replace("{id}", quote(session_id, safe="%/") if session_id else "")
    if draw(st.sampled_from([False] * 9 + [True])):
        path = "/" + quote(draw(printable), safe="/")
    headers: dict[str, str] = {}
    token = draw(st.sampled_from(["good"] * 8 + ["none", "bad", "scheme"]))
    if token == "good":
        headers.update(auth())
    elif token == "bad":
        headers["Authorization"] = "Bearer " + draw(header_text)
    elif token == "scheme":
        headers["Authorization"] = draw(header_text)
    if draw(st.booleans()):
        headers["X-Qwenmem-Client-Id"] = draw(header_text | st.sampled_from(["tui-1", "ide:vscode.2"]))
    if draw(st.sampled_from([False] * 15 + [True])):
        headers["Origin"] = draw(header_text)
    if draw(st.sampled_from([False] * 7 + [True])):
        headers["Host"] = draw(
            st.sampled_from(["127.0.0.1:8765", "localhost", "[::1]", "attacker.example"])
            | header_text.filter(str.strip)
        )
    if draw(st.sampled_from([False] * 3 + [True])):
        headers["Accept"] = "text/event-stream"
    kind = draw(st.sampled_from(["none", "json", "text", "title", "bytes", "deep"]))
    content: bytes | None = None
    if kind == "json":
        content = json.dumps(draw(json_values)).encode()
    elif kind == "text":
        content = json.dumps({"text": draw(any_text | st.text(max_size=80))}).encode()
    elif kind == "title":
        content = json.dumps({"title": draw(json_values)}).encode()
    elif kind == "bytes":
        content = draw(st.binary(max_size=200))
    elif kind == "deep":
        opener = draw(st.sampled_from([b"[", b'{"a":', b'{"text":[', b'{"title":{"x":']))
        content = opener * draw(st.sampled_from([2, 999, 1001, 20_000, 100_000]))
    return {"method": method, "url": path, "headers": headers, "content": content}


def test_fuzz_every_route(daemon: TestClient) -> None:
    real_id = daemon.post("/session", json={"title": "fuzz"}, headers=auth()).json()["sessionId"]

    prompt = f"/session/{real_id}/prompt"
    known = [  # the shapes that gave 5xx before (issue #17), always tried first
        {"method": "POST", "url": "/session", "content": b"[" * 100_000},
        {"method": "POST", "url": "/session", "content": b'{"a":' * 50_000},
        {"method": "POST", "url": "/session", "content": b'{"title":"\\ud800"}'},
        {"method": "POST", "url": prompt, "content": b'{"text":"hi \\udc80"}'},
    ]

    def one(request: dict) -> None:
        assert_clean(daemon.request(**request))

    for shape in known:
        one = example(request={**shape, "headers": auth()})(one)
    fuzz = hsettings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )(given(request=requests(real_id))(one))
    fuzz()
    assert len(SENT) >= EXAMPLES


@pytest.mark.parametrize("route", POST_ROUTES)
def test_oversized_bodies_are_refused(daemon: TestClient, route: str) -> None:
    real_id = daemon.post("/session", json={}, headers=auth()).json()["sessionId"]
    url = route.replace("{id}", real_id)
    big = b'{"text": "' + b"x" * (2 << 20) + b'"}'
    declared = daemon.post(url, content=big, headers={**auth(), "Content-Type": "application/json"})
    assert (declared.status_code, declared.json()["code"]) == (413, "body_too_large")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit must count bytes
        yield b'{"text": "'
        for _ in range(40):
            yield b"y" * 65536
        yield b'"}'

    streamed = daemon.post(url, content=chunks(), headers=auth())
    if route.endswith("/recap"):
        # Contract §7: the recap body is ignored — never read, so never buffered.
        assert streamed.status_code == 200 and "recap" in streamed.json()
    else:
        assert (streamed.status_code, streamed.json()["code"]) == (413, "body_too_large")
    SENT.extend([declared.status_code, streamed.status_code])


@pytest.mark.parametrize("session_id", TRAVERSALS)
def test_path_traversal_in_session_ids_is_refused(
    daemon: TestClient, paths: Paths, session_id: str
) -> None:
    before = sorted(p.name for p in paths.home.rglob("*"))
    for route in ("/session/{id}/prompt", "/session/{id}/recap"):
        response = daemon.post(
            route.replace("{id}", session_id), json={"text": "hi"}, headers=auth()
        )
        assert_clean(response)
        assert response.status_code == 404, (session_id, response.text)
        assert response.json()["code"] in ("session_not_found", "not_found")
    assert sorted(p.name for p in paths.home.rglob("*")) == before
