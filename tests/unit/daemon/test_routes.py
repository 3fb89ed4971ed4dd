"""Every row and error of contract §7, in process (Starlette TestClient, lifespan run).

The chat loop, the database and the model are real: ChatSession over SQLite in the
temp home, talking HTTP to the fake OpenAI server.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from qwenmem_tui.daemon.openapi import document
from qwenmem_tui.daemon.server import api_routes, create_app, routes
from qwenmem_tui.features.assembly import SessionFeatures
from qwenmem_tui.features.recap.session_recap import RECAP_SYSTEM_PROMPT
from qwenmem_tui.testing.fake_openai import FakeOpenAI, HTTPError, Reply, ToolCallSpec

RECAP = "Wiring the daemon into qwenmem. Next: write the SDK tests."


def new_session(client: TestClient, **kwargs: object) -> str:
    response = client.post("/session", json=kwargs)
    assert response.status_code == 201, response.text
    return response.json()["sessionId"]


def sse_events(text: str) -> list[tuple[str, dict]]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def recap_requests(fake: FakeOpenAI) -> list[dict]:
    return [
        body
        for body in fake.chat_requests
        if body["messages"] and body["messages"][0]["content"] == RECAP_SYSTEM_PROMPT
    ]


# -- plain routes ------------------------------------------------------------------


def test_health_and_capabilities(client: TestClient) -> None:
    assert client.get("/health").json() == {"status": "ok"}
    capabilities = client.get("/capabilities")
    assert capabilities.status_code == 200
    body = capabilities.json()
    assert body["v"] == 1
    assert {"session_recap", "memory"} <= set(body["features"])


def test_created_session_is_listed_newest_first(client: TestClient) -> None:
    first = new_session(client, title="first")
    second = new_session(client)
    listed = client.get("/sessions")
    assert listed.status_code == 200
    sessions = listed.json()["sessions"]
    assert [s["sessionId"] for s in sessions][:2] == [second, first]
    assert sessions[1]["title"] == "first"
    assert sessions[0]["messageCount"] == 0


def test_create_session_rejects_bad_bodies(client: TestClient) -> None:
    invalid = client.post("/session", content=b"{nope", headers={"Content-Type": "application/json"})
    assert invalid.status_code == 400
    assert invalid.json() == {"error": "Invalid JSON in request body", "code": "invalid_json"}
    not_object = client.post("/session", json=["title"])
    assert (not_object.status_code, not_object.json()["code"]) == (400, "invalid_request")
    bad_title = client.post("/session", json={"title": 42})
    assert (bad_title.status_code, bad_title.json()["code"]) == (400, "invalid_request")
    assert client.post("/session").status_code == 201  # no body at all is fine


def test_unknown_route_and_method_get_the_envelope(client: TestClient) -> None:
    missing = client.get("/nope")
    assert (missing.status_code, missing.json()["code"]) == (404, "not_found")
    wrong_method = client.get("/session")
    assert (wrong_method.status_code, wrong_method.json()["code"]) == (405, "method_not_allowed")


def test_openapi_lists_every_route_and_method(client: TestClient) -> None:
    served = client.get("/openapi.json").json()
    assert served == document(api_routes())
    served_routes = routes()
    assert {"/memory", "/memory/search"} <= {r.path for r in served_routes}  # memory's own
    assert "/session/{session_id:path}/recap" in {r.path for r in served_routes}  # the recap's
    for route in served_routes:
        path = route.path.replace("{session_id:path}", "{session_id}")
        assert path in served["paths"], path
        methods = {m.lower() for m in route.methods or ()} - {"head"}
        assert methods == set(served["paths"][path]), path
    assert len(served["paths"]) == len(served_routes)


# -- prompt ------------------------------------------------------------------------


def test_prompt_runs_the_chat_loop_and_keeps_history(client: TestClient, fake: FakeOpenAI) -> None:
    session_id = new_session(client)
    fake.script(Reply("Hello **there**"), Reply("Second answer"))
    first = client.post(f"/session/{session_id}/prompt", json={"text": "hi"})
    assert first.status_code == 200
    assert first.json() == {
        "sessionId": session_id, "reply": "Hello **there**", "status": "ok", "memories": []
    }
    second = client.post(f"/session/{session_id}/prompt", json={"text": "and now?"})
    assert second.json()["reply"] == "Second answer"
    roles = [(m["role"], m.get("content")) for m in fake.chat_requests[-1]["messages"]]
    assert roles[1:] == [
        ("user", "hi"),
        ("assistant", "Hello **there**"),
        ("user", "and now?"),
    ]
    listed = client.get("/sessions").json()["sessions"][0]
    assert listed["messageCount"] == 4


def test_prompt_runs_tools_and_answers_with_the_whole_reply(
    client: TestClient, fake: FakeOpenAI, project: Path
) -> None:
    session_id = new_session(client)
    fake.script(
        Reply("Let me look.", tool_calls=[ToolCallSpec("read_file", {"path": "README.md"}, id="c1")]),
        Reply("The README says hello."),
    )
    response = client.post(f"/session/{session_id}/prompt", json={"text": "what is in README?"})
    # Every turn's words, not only the last turn's.
    assert response.json()["reply"] == "Let me look.\n\nThe README says hello."
    tool_message = fake.chat_requests[-1]["messages"][-1]
    assert tool_message["role"] == "tool"
    assert tool_message["content"] == (project / "README.md").read_text()


def test_prompt_streams_sse_events(client: TestClient, fake: FakeOpenAI) -> None:
    session_id = new_session(client)
    # The last turn's rest is sent once its first words have reached the client: what
    # the model sends apart is streamed apart (what arrives together is one delta).
    rest = threading.Event()
    fake.script(
        Reply("Looking.", tool_calls=[ToolCallSpec("list_directory", {"path": "."}, id="c1")]),
        Reply("Two files, chunked.", chunk_size=4, stall_after=1, stall_gate=rest),
    )
    lines: list[str] = []
    with client.stream(
        "POST",
        f"/session/{session_id}/prompt",
        json={"text": "list"},
        headers={"Accept": "text/event-stream"},
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            lines.append(line)
            if line == "event: delta" and "event: tool_result" in lines:
                rest.set()
    events = sse_events("\n".join(lines))
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "delta" and kinds[-1] == "done"
    calls = kinds.index("tool_call")
    assert kinds[calls : calls + 2] == ["tool_call", "tool_result"]
    assert set(kinds[calls + 2 : -1]) == {"delta"} and len(kinds[calls + 2 : -1]) > 1
    call, result = events[calls][1], events[calls + 1][1]
    assert (call["name"], json.loads(call["arguments"])) == ("list_directory", {"path": "."})
    assert result["isError"] is False and "README.md" in result["result"]
    deltas = "".join(data["text"] for kind, data in events if kind == "delta")
    assert deltas == "Looking.Two files, chunked."
    # The done event's reply is the whole reply, across the tool turn.
    assert events[-1][1] == {
        "sessionId": session_id,
        "reply": "Looking.\n\nTwo files, chunked.",
        "status": "ok",
        "memories": [],
    }


def test_prompt_model_failure_is_502_and_an_sse_error_event(
    client: TestClient, fake: FakeOpenAI
) -> None:
    session_id = new_session(client)
    fake.script(HTTPError(500, {"error": {"message": "upstream exploded"}}))
    failed = client.post(f"/session/{session_id}/prompt", json={"text": "hi"})
    assert failed.status_code == 502
    assert failed.json()["code"] == "llm_error" and failed.json()["sessionId"] == session_id
    fake.script(HTTPError(500, {"error": {"message": "upstream exploded"}}))
    streamed = client.post(
        f"/session/{session_id}/prompt", json={"text": "hi"}, headers={"Accept": "text/event-stream"}
    )
    assert sse_events(streamed.text)[-1][0] == "error"
    assert sse_events(streamed.text)[-1][1]["code"] == "llm_error"


def test_prompt_rejects_bad_bodies(client: TestClient, fake: FakeOpenAI) -> None:
    session_id = new_session(client)
    invalid = client.post(f"/session/{session_id}/prompt", content=b"text=hi")
    assert invalid.json() == {"error": "Invalid JSON in request body", "code": "invalid_json"}
    assert invalid.status_code == 400
    for body in ({}, {"text": ""}, {"text": 3}):
        response = client.post(f"/session/{session_id}/prompt", json=body)
        assert (response.status_code, response.json()["code"]) == (400, "invalid_request")
    assert fake.chat_requests == []


@pytest.mark.parametrize("route", ["prompt", "recap"])
@pytest.mark.parametrize("session_id", ["missing", "s%2F1", "..%2F..%2Fqwenmem.db", "a.b"])
def test_unknown_session_is_404_envelope(
    client: TestClient, fake: FakeOpenAI, route: str, session_id: str
) -> None:
    response = client.post(f"/session/{session_id}/{route}", json={"text": "hi"})
    shown = session_id.replace("%2F", "/")
    assert response.status_code == 404
    assert response.json() == {
        "error": f'No session with id "{shown}"',
        "sessionId": shown,
        "code": "session_not_found",
    }
    assert fake.requests == []


def test_sessions_of_other_projects_are_not_visible(
    make_daemon, settings, paths, tmp_path: Path
) -> None:
    other_project = tmp_path / "elsewhere"
    other_project.mkdir()
    with TestClient(create_app(settings, paths, project_root=other_project)) as other:
        foreign = new_session(other)
    with TestClient(make_daemon()) as client:
        assert foreign not in [s["sessionId"] for s in client.get("/sessions").json()["sessions"]]
        assert client.post(f"/session/{foreign}/recap").status_code == 404


# -- recap -------------------------------------------------------------------------


def test_recap_summarises_the_session(client: TestClient, fake: FakeOpenAI, caplog) -> None:
    caplog.set_level(logging.INFO, logger="qwenmem")
    session_id = new_session(client)
    fake.script(Reply("First."), Reply("Second."), Reply(f"thinking… <recap>{RECAP}</recap>"))
    client.post(f"/session/{session_id}/prompt", json={"text": "start the daemon work"})
    client.post(f"/session/{session_id}/prompt", json={"text": "what next?"})
    response = client.post(
        f"/session/{session_id}/recap",
        content=b"this body is {ignored",
        headers={"X-Qwenmem-Client-Id": "vscode:ext-1.2_a"},
    )
    assert response.status_code == 200
    assert response.json() == {"sessionId": session_id, "recap": RECAP}
    [request] = recap_requests(fake)
    assert [m["content"] for m in request["messages"][1:-1]] == [
        "start the daemon work",
        "First.",
        "what next?",
        "Second.",
    ]
    assert request["model"] == "test-fast"
    assert any(
        "[SESSION_RECAP]" in r.getMessage() and "client=vscode:ext-1.2_a" in r.getMessage()
        for r in caplog.records
    )


def test_recap_is_null_when_there_is_nothing_to_say(client: TestClient, fake: FakeOpenAI) -> None:
    session_id = new_session(client)
    response = client.post(f"/session/{session_id}/recap")
    assert response.status_code == 200
    assert response.json() == {"sessionId": session_id, "recap": None}
    assert fake.chat_requests == []  # too little dialog: the model is not even asked


def test_recap_is_null_when_the_model_gives_no_recap(client: TestClient, fake: FakeOpenAI) -> None:
    session_id = new_session(client)
    fake.script(Reply("One."), Reply("Two."), Reply("no tags here, just musing"))
    client.post(f"/session/{session_id}/prompt", json={"text": "a"})
    client.post(f"/session/{session_id}/prompt", json={"text": "b"})
    assert client.post(f"/session/{session_id}/recap").json()["recap"] is None
    assert len(recap_requests(fake)) == 1


def test_recap_backstop_timeout_answers_null(make_daemon, fake: FakeOpenAI) -> None:
    gate = threading.Event()
    with TestClient(make_daemon(side_call_timeout=0.2)) as client:
        session_id = new_session(client)
        fake.script(Reply("One."), Reply("Two."), Reply(f"<recap>{RECAP}</recap>", gate=gate))
        client.post(f"/session/{session_id}/prompt", json={"text": "a"})
        client.post(f"/session/{session_id}/prompt", json={"text": "b"})
        try:
            response = client.post(f"/session/{session_id}/recap")
        finally:
            gate.set()
        assert response.json() == {"sessionId": session_id, "recap": None}


@pytest.mark.parametrize("client_id", ["", "has space", "x" * 129, "émoji".encode(), "a/b"])
def test_invalid_client_id_never_reaches_the_recap(
    client: TestClient, fake: FakeOpenAI, client_id: str | bytes
) -> None:
    session_id = new_session(client)
    response = client.post(
        f"/session/{session_id}/recap", headers={"X-Qwenmem-Client-Id": client_id}
    )
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_client_id"
    assert fake.requests == []


def test_longest_valid_client_id_is_accepted(client: TestClient) -> None:
    session_id = new_session(client)
    response = client.post(
        f"/session/{session_id}/recap", headers={"X-Qwenmem-Client-Id": "A-z0._:" + "9" * 121}
    )
    assert response.status_code == 200


# -- security ----------------------------------------------------------------------


def test_token_guards_every_route_but_health(make_daemon, token: str) -> None:
    with TestClient(make_daemon(token=token)) as client:
        assert client.get("/health").status_code == 200
        for method, path in [
            ("GET", "/capabilities"),
            ("GET", "/sessions"),
            ("POST", "/session"),
            ("GET", "/openapi.json"),
            ("POST", "/session/abc/recap"),
            ("GET", "/nope"),
        ]:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token}):
                response = client.request(method, path, headers=headers)
                assert response.status_code == 401, (method, path, headers)
                assert response.json()["code"] == "unauthorized"
        good = {"Authorization": f"Bearer {token}"}
        assert client.get("/capabilities", headers=good).status_code == 200
        assert client.post("/session", headers=good).status_code == 201


def test_origin_is_refused_unless_allowed(make_daemon) -> None:
    allowed = "http://localhost:5173"
    with TestClient(make_daemon(allowed_origins=frozenset({allowed}))) as client:
        refused = client.get("/health", headers={"Origin": "https://evil.example"})
        assert refused.status_code == 403
        assert refused.json()["code"] == "origin_not_allowed"
        ok = client.get("/capabilities", headers={"Origin": allowed})
        assert ok.status_code == 200
        assert ok.headers["access-control-allow-origin"] == allowed
        preflight = client.options(
            "/session", headers={"Origin": allowed, "Access-Control-Request-Method": "POST"}
        )
        assert preflight.status_code == 204
        assert "X-Qwenmem-Client-Id" in preflight.headers["access-control-allow-headers"]
        assert client.get("/capabilities").status_code == 200  # no Origin: not a browser


def test_origin_refused_by_default(client: TestClient) -> None:
    response = client.post("/session", headers={"Origin": "http://localhost:5173"})
    assert response.status_code == 403


def test_body_size_limit(make_daemon, fake: FakeOpenAI) -> None:
    with TestClient(make_daemon(max_body_bytes=64)) as client:
        session_id = new_session(client)
        declared = client.post(f"/session/{session_id}/prompt", json={"text": "x" * 100})
        assert declared.status_code == 413
        assert declared.json()["code"] == "body_too_large"

        def chunks():
            yield b'{"text": "'
            yield b"y" * 100
            yield b'"}'

        streamed = client.post(f"/session/{session_id}/prompt", content=chunks())
        assert (streamed.status_code, streamed.json()["code"]) == (413, "body_too_large")
    assert fake.requests == []


def test_unexpected_errors_are_an_opaque_500(make_daemon, caplog) -> None:
    async def broken(backend, info) -> SessionFeatures:
        raise RuntimeError("secret internals /home/x")

    with TestClient(make_daemon(session_features=broken), raise_server_exceptions=False) as client:
        session_id = new_session(client)
        response = client.post(f"/session/{session_id}/prompt", json={"text": "hi"})
        assert response.status_code == 500
        assert response.json() == {"error": "Internal error", "code": "internal"}
        logged = [r for r in caplog.records if r.exc_info and "secret internals" in str(r.exc_info[1])]
        assert logged, "the traceback goes to the log"
        # the lock was released: the next prompt fails the same way, not with 409
        again = client.post(f"/session/{session_id}/prompt", json={"text": "hi"})
        assert again.status_code == 500


def test_unexpected_error_mid_stream_is_an_error_event(make_daemon) -> None:
    async def broken(backend, info) -> SessionFeatures:
        raise RuntimeError("secret internals")

    with TestClient(make_daemon(session_features=broken)) as client:
        session_id = new_session(client)
        response = client.post(
            f"/session/{session_id}/prompt",
            json={"text": "hi"},
            headers={"Accept": "text/event-stream"},
        )
        assert response.status_code == 200
        assert sse_events(response.text) == [
            ("error", {"error": "Internal error", "code": "internal", "sessionId": session_id})
        ]
        assert "secret" not in response.text


def test_a_prompt_holding_a_secret_is_cut_before_the_model_and_the_history(
    client: TestClient, fake: FakeOpenAI
) -> None:
    """No one to ask over HTTP: the secret never reaches the model, the stored history
    or a listing, and the answer (or the stream's first event) says what was cut."""
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    session_id = new_session(client)
    fake.script(Reply("Noted."), Reply("Streamed."))
    answer = client.post(f"/session/{session_id}/prompt", json={"text": f"deploy with {token} now"})
    assert answer.status_code == 200
    assert answer.json()["redactedSecrets"]
    streamed = client.post(
        f"/session/{session_id}/prompt",
        json={"text": f"and again {token}"},
        headers={"Accept": "text/event-stream"},
    )
    assert sse_events(streamed.text)[0][0] == "redacted"
    sent = json.dumps(fake.chat_requests)
    assert token not in sent and "[REDACTED]" in sent
    stored = client.get(f"/session/{session_id}/messages").text
    assert token not in stored and "deploy with [REDACTED] now" in stored
    assert token not in client.get("/sessions").text
