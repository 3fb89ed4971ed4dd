"""The SDK against a live uvicorn daemon on a free loopback port."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from qwenmem_tui.daemon import (
    Capabilities,
    DaemonClient,
    DaemonError,
    DaemonSessionClient,
    PromptResult,
    SessionRecap,
)
from qwenmem_tui.daemon.cli import bind_socket
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec

RECAP = "Testing the qwenmem SDK. Next: ship it."


def test_typed_results_for_a_whole_script(live_url: str, fake: FakeOpenAI) -> None:
    fake.script(Reply("One."), Reply("Two."), Reply(f"<recap>{RECAP}</recap>"))
    with DaemonClient(live_url) as client:
        assert client.health() is True
        capabilities = client.capabilities()
        assert isinstance(capabilities, Capabilities) and capabilities.v == 1
        assert "session_recap" in capabilities.features
        session_id = client.create_session("sdk script")
        assert client.prompt(session_id, "first") == PromptResult(session_id, "One.", "ok")
        assert client.prompt(session_id, "second").reply == "Two."
        recap = client.recap_session(session_id)
        assert recap == SessionRecap(session_id=session_id, recap=RECAP)
        [summary] = client.list_sessions()
        assert (summary.session_id, summary.title, summary.message_count) == (
            session_id,
            "sdk script",
            4,
        )


def test_null_recap_is_none(live_url: str, fake: FakeOpenAI) -> None:
    with DaemonClient(live_url) as client:
        session_id = client.create_session()
        assert client.recap_session(session_id) == SessionRecap(session_id, None)
    assert fake.chat_requests == []


def test_session_id_is_url_encoded(live_url: str) -> None:
    with DaemonClient(live_url) as client, pytest.raises(DaemonError) as caught:
        client.recap_session("s/1")
    error = caught.value
    assert (error.status, error.code) == (404, "session_not_found")
    assert error.message == 'No session with id "s/1"'
    assert error.body["sessionId"] == "s/1"


def test_unknown_session_prompt_is_a_404_error(live_url: str) -> None:
    with DaemonClient(live_url) as client, pytest.raises(DaemonError) as caught:
        client.prompt("0123abcd", "hi")
    assert (caught.value.status, caught.value.code) == (404, "session_not_found")
    assert "0123abcd" in str(caught.value)


def test_session_client_sends_its_client_id(live_url: str, fake: FakeOpenAI, caplog) -> None:
    caplog.set_level(logging.INFO, logger="qwenmem")
    fake.script(Reply("One."), Reply("Two."), Reply(f"<recap>{RECAP}</recap>"))
    with DaemonClient(live_url) as client:
        session = client.session(client.create_session(), client_id="nvim-plugin:42")
        assert isinstance(session, DaemonSessionClient)
        session.prompt("a")
        session.prompt("b")
        assert session.recap().recap == RECAP
    recap_logs = [r.getMessage() for r in caplog.records if "[SESSION_RECAP] daemon recap" in r.getMessage()]
    assert recap_logs and "client=nvim-plugin:42" in recap_logs[0]


def test_invalid_client_id_is_a_typed_error(live_url: str, fake: FakeOpenAI) -> None:
    with DaemonClient(live_url) as client:
        session_id = client.create_session()
        with pytest.raises(DaemonError) as caught:
            client.recap_session(session_id, client_id="not valid")
    assert (caught.value.status, caught.value.code) == (400, "invalid_client_id")
    assert fake.requests == []


def test_stream_prompt_yields_events(live_url: str, fake: FakeOpenAI) -> None:
    fake.script(
        Reply(tool_calls=[ToolCallSpec("read_file", {"path": "README.md"}, id="c1")]),
        Reply("It is a demo."),
    )
    with DaemonClient(live_url) as client:
        session = client.session(client.create_session())
        events = list(session.stream_prompt("what is this?"))
    kinds = [e.event for e in events]
    assert kinds[:2] == ["tool_call", "tool_result"] and kinds[-1] == "done"
    assert "Demo project" in events[1].data["result"]
    assert "".join(e.data["text"] for e in events if e.event == "delta") == "It is a demo."


def test_token(make_daemon, serve_live, token: str) -> None:
    with serve_live(make_daemon(token=token)) as url:
        with DaemonClient(url) as anonymous:
            assert anonymous.health() is True
            with pytest.raises(DaemonError) as caught:
                anonymous.list_sessions()
            assert (caught.value.status, caught.value.code) == (401, "unauthorized")
        with DaemonClient(url, token="wrong") as wrong, pytest.raises(DaemonError):
            wrong.capabilities()
        with DaemonClient(url, token=token) as right:
            assert right.list_sessions() == []


def test_second_concurrent_prompt_is_busy(live_url: str, fake: FakeOpenAI) -> None:
    gate = threading.Event()
    fake.script(Reply("slow answer", gate=gate))
    with DaemonClient(live_url) as client, ThreadPoolExecutor(1) as pool:
        session_id = client.create_session()
        first = pool.submit(client.prompt, session_id, "slow one")
        try:
            fake.wait_for_requests(1)  # the first prompt holds the session now
            with pytest.raises(DaemonError) as caught:
                client.prompt(session_id, "impatient")
            assert (caught.value.status, caught.value.code) == (409, "session_busy")
            other = client.create_session()
            assert client.recap_session(session_id).recap is None  # recap takes no lock
        finally:
            gate.set()
        assert first.result(timeout=10).reply == "slow answer"
        fake.script(Reply("free again"))
        assert client.prompt(session_id, "now").reply == "free again"
        assert client.prompt(other, "elsewhere").reply == "ok"


def test_timeout_against_a_stalled_server(stalled_url: str) -> None:
    with DaemonClient(stalled_url, timeout=0.2) as client, pytest.raises(DaemonError) as caught:
        client.capabilities()
    assert caught.value.status is None and caught.value.code == "timeout"
    with DaemonClient(stalled_url, timeout=0.2) as client, pytest.raises(DaemonError) as caught:
        list(client.stream_prompt("abc", "hi"))
    assert caught.value.code == "timeout"


def test_a_default_timeout_always_applies() -> None:
    for timeout in (None, 30.0):
        with DaemonClient("http://127.0.0.1:1", timeout=timeout) as client:
            assert client.timeout == 30.0


def test_connection_refused_is_a_typed_error() -> None:
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()  # nobody listens there now
    with DaemonClient(f"http://127.0.0.1:{port}", timeout=5.0) as client:
        with pytest.raises(DaemonError) as caught:
            client.health()
    assert caught.value.status is None and caught.value.code == "connection"
