"""Endpoint fault matrix: every way a provider fails, through the real SDK over HTTP.

Each fault: the query ends with one error line (no traceback, no key), the user's
message is committed, the app (core or TUI) keeps running and the next message works
with the failed one still in the history.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from app_support import send, settle, started
from chat_support import TEST_API_KEY

from qwenmem_tui.config import Settings
from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, HTTPError, RawResponse, Reply
from qwenmem_tui.tui.app import create_app
from qwenmem_tui.tui.widgets.plain_items import ErrorItem

from .conftest import SIZE, outcome, stored_items

LONG_REPLY = "This reply is long enough to be cut in the middle of streaming. " * 4


@dataclass
class Fault:
    name: str
    arm: Callable[[FakeOpenAI], Any]  # scripts the fault; may return a cleanup
    kind_words: tuple[str, ...]  # words the one-line message must contain
    partial: bool = False  # some reply text arrived before the failure


def _error(status: int, message: str, code: str, headers: dict[str, str] | None = None) -> HTTPError:
    return HTTPError(
        status, {"error": {"message": message, "type": "error", "code": code}}, headers or {}
    )


def _unknown_model(fake: FakeOpenAI) -> None:
    """The endpoint does not serve the configured model (a typo, a retired model)."""
    fake.models = ["some-other-model"]
    fake.strict_models = True


def _stall(fake: FakeOpenAI) -> Callable[[], None]:
    gate = threading.Event()
    fake.script(Reply(LONG_REPLY, chunk_size=8, stall_after=2, stall_gate=gate))
    return gate.set


FAULTS = [
    # The provider echoes the key in its 401 message, as some do: it must not reach anyone.
    Fault("401", lambda f: f.script(_error(401, f"Incorrect API key provided: {TEST_API_KEY}", "invalid_api_key")),
          ("Authentication", "401")),
    Fault("404 model", lambda f: _unknown_model(f), ("Model not found", "404")),
    Fault("429 Retry-After", lambda f: f.script(_error(429, "slow down", "rate_limit", {"Retry-After": "7"})),
          ("Rate limited", "retry in 7s")),
    Fault("500", lambda f: f.script(_error(500, "upstream exploded", "server_error")), ("HTTP 500",)),
    Fault("read timeout", _stall, ("did not answer",), partial=True),
    Fault("malformed SSE", lambda f: f.script(RawResponse(body=b'data: {"id": "x", "choices": [\n\n')),
          ("malformed",)),
    Fault("stream cut", lambda f: f.script(Reply(LONG_REPLY, chunk_size=8, cut_after=3)),
          ("cut off",), partial=True),
    Fault("200 error body", lambda f: f.script(RawResponse(
        body=json.dumps({"error": {"message": "model overloaded", "code": "overloaded"}}).encode(),
        content_type="application/json")), ("overloaded",)),
    Fault("200 error event in stream", lambda f: f.script(RawResponse(
        body=b'data: {"error": {"message": "internal provider failure"}}\n\n')), ("provider failure",)),
    Fault("non-JSON body", lambda f: f.script(RawResponse(
        body=b"<html><body>502 Bad Gateway</body></html>", content_type="text/html")), ("not a stream",)),
]


def _assert_one_line(message: str, words: tuple[str, ...]) -> None:
    assert "\n" not in message and "Traceback" not in message, message
    assert TEST_API_KEY not in message, message
    for word in words:
        assert word.lower() in message.lower(), (word, message)


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
async def test_core_survives_fault(
    fault: Fault, fake: FakeOpenAI, paths: Paths, make_core: Callable[..., Any]
) -> None:
    release = None
    async with make_core(timeout=1.0 if fault.name == "read timeout" else 30.0) as core:
        release = fault.arm(fake)
        try:
            events = await core.ask("first question")
        finally:
            if callable(release):
                release()
        finished = outcome(events)
        assert finished.outcome.status == "error"
        _assert_one_line(finished.outcome.error or "", fault.kind_words)
        fake.strict_models = False

        fake.script(Reply("recovered"))
        assert outcome(await core.ask("second question")).outcome.status == "ok"
        # The failed question is still part of what the model sees.
        last = fake.chat_requests[-1]["messages"]
        assert [m["content"] for m in last if m["role"] == "user"] == ["first question", "second question"]
        session_id = core.session.info.id

    items = await stored_items(paths, session_id)
    kinds = [i.type for i in items]
    assert kinds[0] == "user" and items[0].content == "first question"
    errors = [i for i in items if i.type == "error"]
    assert len(errors) == 1
    _assert_one_line(errors[0].content, fault.kind_words)
    partials = [i for i in items if i.type == "assistant" and i.meta.get("interrupted")]
    if fault.partial:
        assert len(partials) == 1 and LONG_REPLY.startswith(partials[0].content)
    assert kinds[-2:] == ["user", "assistant"] and items[-1].content == "recovered"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_core_survives_connection_refused_then_server_comes_back(
    paths: Paths, make_core: Callable[..., Any]
) -> None:
    port = _free_port()  # nothing listens here yet
    async with make_core(base_url=f"http://127.0.0.1:{port}/v1") as core:
        finished = outcome(await core.ask("anyone there?"))
        assert finished.outcome.status == "error"
        _assert_one_line(finished.outcome.error or "", ("Connection refused", f"127.0.0.1:{port}"))
        with FakeOpenAI(port=port) as late:
            late.script(Reply("yes, now"))
            assert outcome(await core.ask("and now?")).outcome.status == "ok"
        session_id = core.session.info.id
    items = await stored_items(paths, session_id)
    assert [i.type for i in items] == ["user", "error", "user", "assistant"]


# -- the same faults through the real app -------------------------------------------------

TUI_FAULTS = [f for f in FAULTS if f.name in ("401", "429 Retry-After", "read timeout", "stream cut", "non-JSON body")]


@pytest.fixture
def tui_settings(settings: Settings) -> Iterator[Settings]:
    settings.llm.timeout = 1.0  # only the stalled reply ever waits this long
    yield settings


@pytest.mark.parametrize("fault", TUI_FAULTS, ids=[f.name for f in TUI_FAULTS])
async def test_tui_survives_fault(
    fault: Fault, fake: FakeOpenAI, tui_settings: Settings, paths: Paths, project: Path
) -> None:
    app = create_app(tui_settings, paths, cwd=project, extensions=())
    release = fault.arm(fake)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)  # the session opens behind the drawn prompt
            await send(pilot, "first question")
            await settle(pilot)
            errors = [str(w.render()) for w in app.screen.query(ErrorItem)]
            assert len(errors) == 1, errors
            _assert_one_line(errors[0], fault.kind_words)
            assert app.state == "idle" and app.is_running

            fake.script(Reply("recovered fine"))
            await send(pilot, "second question")
            await settle(pilot)
            assert app.session.items[-1].content == "recovered fine"
            assert TEST_API_KEY not in app.export_screenshot()
            session_id = app.session.info.id
    finally:
        if callable(release):
            release()
    items = await stored_items(paths, session_id)
    assert items[0].content == "first question"
    assert [i.content for i in items if i.type == "user"] == ["first question", "second question"]
