"""Issue 41: the daemon and its proxy fuzzed from their own OpenAPI document.

A short, seeded, bounded schemathesis run against a real `qwenmem serve` (the long
one, over 2,000 requests, is bench/bench_schema_fuzz.py): no 5xx, no response outside
the document, no traceback in the daemon's output or log. Then one regression test per
finding of the long runs, in process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import jsonschema_rs
import pytest
from starlette.testclient import TestClient

from qwenmem_tui.config import Settings
from qwenmem_tui.daemon.server import ServerOptions, create_app
from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply

from .schema_fuzz import run_fuzz

TOKEN = "schema-regression-token"


def test_the_daemon_fuzzed_from_its_document_stays_inside_it(tmp_path: Path) -> None:
    report = run_fuzz(tmp_path, max_examples=6, seed=41, phases="fuzzing,stateful")
    assert report.requests >= 80, report.output
    assert report.server_errors == 0, report.output
    assert report.failures == [], report.output
    assert report.tracebacks == [], report.tracebacks[:3]
    assert report.exit_code == 0, report.output


def test_stateful_sequences_follow_the_documents_links_on_real_sessions(tmp_path: Path) -> None:
    """The document links create -> prompt -> messages -> delete (operationId links);
    schemathesis' stateful phase follows them on sessions the daemon really created, and
    after a delete the same id is gone (its use_after_free check)."""
    report = run_fuzz(tmp_path, max_examples=8, seed=41, phases="stateful", mode="positive")
    assert report.chains >= 3, report.output
    for operation in [("POST", "/session", 201), ("POST", "/session/{session_id}/prompt", 200),
                      ("GET", "/session/{session_id}/messages", 200), ("DELETE", "/session/{session_id}", 200)]:
        assert report.operations[operation] > 0, (operation, report.operations)
    assert report.server_errors == 0 and report.failures == [], report.failures
    assert report.tracebacks == [], report.tracebacks[:3]


@pytest.fixture
def daemon(fake: FakeOpenAI, settings: Settings, paths: Paths, project: Path) -> Iterator[TestClient]:
    fake.responder = lambda body: Reply("ok")
    app = create_app(settings, paths, project_root=project, options=ServerOptions(token=TOKEN))
    with TestClient(app, raise_server_exceptions=False, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        yield client


def _admits(schema: dict, value: object) -> bool:
    return jsonschema_rs.validator_for(schema).is_valid(value)


def test_a_null_title_is_accepted_and_documented(daemon: TestClient) -> None:
    # Found by schemathesis (negative_data_rejection): the daemon took {"title": null}
    # as untitled, the document said a title is a string.
    document = daemon.get("/openapi.json").json()
    body = document["paths"]["/session"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert _admits(body, {"title": None}) and not _admits(body, {"title": 5})
    response = daemon.post("/session", json={"title": None})
    assert response.status_code == 201 and response.json()["title"] == ""
    assert daemon.post("/session", json={"title": 5}).status_code == 400


def test_an_empty_category_lists_every_memory_and_is_documented(daemon: TestClient) -> None:
    # Found by schemathesis: GET /memory?category= answered 200 (every category), the
    # document allowed only the four names.
    document = daemon.get("/openapi.json").json()
    [category] = document["paths"]["/memory"]["get"]["parameters"][-1:]
    assert category["name"] == "category"
    assert _admits(category["schema"], "") and not _admits(category["schema"], "users")
    assert daemon.get("/memory", params={"category": ""}).status_code == 200
    assert daemon.get("/memory", params={"category": "users"}).status_code == 400


def test_a_body_of_form_feeds_is_not_an_empty_body(daemon: TestClient) -> None:
    # Found by the stateful run (negative_data_rejection): POST /session with the body
    # "\x0c" made a session: bytes.strip() took the form feed for whitespace, JSON does not.
    for raw in (b"\x0c", b" \x0b ", b"\x1c"):
        response = daemon.post("/session", content=raw, headers={"Content-Type": "application/json"})
        assert response.status_code == 400 and response.json()["code"] == "invalid_json", raw
    assert daemon.post("/session", content=b" \r\n\t").status_code == 201  # JSON's own whitespace
    assert daemon.get("/sessions").json()["sessions"].__len__() == 1


def _events(stream: str) -> list[dict[str, str]]:
    """A server-sent event stream as its readers see it: one object per event."""
    events = []
    for block in stream.strip().split("\n\n"):
        event: dict[str, str] = {}
        for line in block.splitlines():
            field, _, value = line.partition(":")
            event[field] = value.removeprefix(" ")
        events.append(event)
    return events


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/responses", {"model": "m", "input": "hi", "stream": True}),
    ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}),
])  # fmt: skip
def test_every_streamed_event_is_inside_the_document(daemon: TestClient, path: str, body: dict) -> None:
    # Found by the long run on this round's final build (schemathesis's SSE check,
    # ST108): before OpenAPI 3.2 an event stream's schema describes each event, and
    # ours said a string where every reader sees an object (event, data).
    document = daemon.get("/openapi.json").json()
    documented = document["paths"][path]["post"]["responses"]["200"]["content"]["text/event-stream"]["schema"]
    response = daemon.post(path, json=body)
    assert response.status_code == 200 and "text/event-stream" in response.headers["content-type"]
    events = _events(response.text)
    assert events and all(_admits(documented, event) for event in events), events[:2]
