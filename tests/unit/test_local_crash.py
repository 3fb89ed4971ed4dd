"""Issue 23 item 2: a local model server that dies is named as a crash, with the
signal in words and the log path, and started again for the next message (once).

The stand-in for llama_cpp.server is a real child process serving a real streaming
HTTP reply, which kills itself with SIGILL in the middle of it, as a llama.cpp built
for another CPU does on its first completion.
"""

from __future__ import annotations

import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from chat_support import SessionFactory, collect, outcome_of

from qwenmem_tui.chat.tools import ToolRegistry
from qwenmem_tui.config import Settings
from qwenmem_tui.llm.client import LLMClient, StreamFinished, TextDelta
from qwenmem_tui.llm.errors import LLMError
from qwenmem_tui.llm.local_client import LocalModelClient
from qwenmem_tui.llm.local_server import LocalModelServer
from qwenmem_tui.storage.sessions import SessionStore

CRASHING_LLAMA_SERVER = textwrap.dedent(
    """
    import argparse, http.server, json, os, pathlib, signal, threading

    parser = argparse.ArgumentParser()
    for flag in ("--model", "--model_alias", "--host", "--n_ctx"):
        parser.add_argument(flag)
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    flag = pathlib.Path(os.environ["FAKE_LLAMA_FLAG"])
    crash = os.environ["FAKE_LLAMA_CRASH"] == "always" or not flag.exists()

    def chunk(delta, finish=None):
        body = {"object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return ("data: " + json.dumps(body) + "\\n\\n").encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            body = json.dumps({"data": [{"id": args.model_alias}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def send(data):
                self.wfile.write(b"%x\\r\\n%s\\r\\n" % (len(data), data))
                self.wfile.flush()

            send(chunk({"content": "The first words"}))
            if crash:
                flag.touch()
                os.kill(os.getpid(), signal.SIGILL)  # mid-stream, as a bad build dies
                threading.Event().wait()  # another thread may take the signal: wait for it
            send(chunk({"content": " of a whole answer."}, "stop"))
            send(b"data: [DONE]\\n\\n")
            self.wfile.write(b"0\\r\\n\\r\\n")

        def log_message(self, *a):
            pass

    http.server.ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()
    """
)


@pytest.fixture
async def local(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[LocalModelServer, LLMClient]]:
    script = tmp_path / "crashing_llama_server.py"
    script.write_text(CRASHING_LLAMA_SERVER)
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.setenv("FAKE_LLAMA_FLAG", str(tmp_path / "crashed-once"))
    monkeypatch.setenv("FAKE_LLAMA_CRASH", "once")
    server = LocalModelServer(
        model, log_dir=tmp_path / "debug", label="Tiny", server_target=str(script)
    )
    await server.astart()
    client = LocalModelClient.for_server(server, settings)
    try:
        yield server, client
    finally:
        await client.aclose()
        await server.astop()


async def reply(client: LLMClient) -> str:
    text = []
    async for event in client.stream_chat([{"role": "user", "content": "hi"}]):
        if isinstance(event, TextDelta):
            text.append(event.text)
        assert not isinstance(event, StreamFinished) or event.completion.content
    return "".join(text)


async def test_a_crash_mid_stream_is_named_and_the_next_message_restarts_it(
    local: tuple[LocalModelServer, LLMClient],
) -> None:
    server, client = local
    first_pid = server.pid
    with pytest.raises(LLMError) as crash:
        await reply(client)
    message = crash.value.message
    assert crash.value.kind == "crashed"
    assert "The local model crashed (SIGILL: illegal instruction" in message
    assert "built for another CPU" in message
    assert str(server.log_path) in message
    assert "restarts with your next message" in message
    assert "connection dropped" not in message
    # The next message starts the server again and is answered.
    assert await reply(client) == "The first words of a whole answer."
    assert server.running and server.pid != first_pid


async def test_a_server_that_crashes_again_is_not_restarted_in_a_loop(
    local: tuple[LocalModelServer, LLMClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, client = local
    monkeypatch.setenv("FAKE_LLAMA_CRASH", "always")  # the restarted child inherits it
    with pytest.raises(LLMError):
        await reply(client)
    with pytest.raises(LLMError) as again:
        await reply(client)  # restarted, and dies again
    assert "crashed again, so it is not restarted" in again.value.message
    pid = server.pid
    with pytest.raises(LLMError) as down:
        await reply(client)
    assert "restart qwenmem to try again" in down.value.message
    assert "built for another CPU" in down.value.message
    assert server.pid == pid and not server.running  # no third start


async def test_the_chat_says_the_local_model_crashed_and_keeps_what_it_said(
    local: tuple[LocalModelServer, LLMClient],
    make_session: SessionFactory,
    session_store: SessionStore,
) -> None:
    server, client = local
    session = await make_session(llm=client, tools=ToolRegistry())
    events = await collect(session, "hi")
    outcome = outcome_of(events)
    assert outcome.status == "error" and outcome.error is not None
    assert outcome.error.startswith("The local model crashed (SIGILL")
    stored = await session_store.load_items(session.info.id)
    assert [(i.type, i.content) for i in stored] == [
        ("user", "hi"),
        ("assistant", "The first words"),
        ("error", outcome.error),
    ]
    assert stored[1].meta.get("interrupted") is True
    # The next message restarts the model and gets its answer.
    assert outcome_of(await collect(session, "again")).status == "ok"
    assert session.items[-1].content == "The first words of a whole answer."
