"""The fake server speaks the OpenAI wire format well enough for the real SDK."""

from __future__ import annotations

import ast
import base64
import json
import math
import struct
import threading
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest
from openai import OpenAI

import qwenmem_tui
from qwenmem_tui.testing.fake_openai import (
    EMBEDDING_DIM,
    FakeOpenAI,
    HTTPError,
    RawResponse,
    Reply,
    ToolCallSpec,
    echo_responder,
    hash_embedding,
)


@pytest.fixture
def client(fake: FakeOpenAI) -> OpenAI:
    return OpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0, timeout=10)


def _stream(client: OpenAI, **kwargs: object) -> list:
    stream = client.chat.completions.create(
        model="test-model",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
        **kwargs,
    )
    return list(stream)


def test_base_url_is_loopback_with_a_free_port(fake: FakeOpenAI) -> None:
    assert fake.base_url == f"http://127.0.0.1:{fake.port}/v1"
    assert fake.port > 0


def test_streams_text_reasoning_and_usage(fake: FakeOpenAI, client: OpenAI) -> None:
    fake.script(Reply("hello **world**", reasoning="let me think", chunk_size=4))
    chunks = _stream(client)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join(
        getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices
    )
    assert text == "hello **world**"
    assert reasoning == "let me think"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0
    # Text arrives in several pieces, not one blob.
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 4


def test_usage_chunk_only_when_requested(fake: FakeOpenAI, client: OpenAI) -> None:
    stream = client.chat.completions.create(
        model="test-model", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    assert all(c.usage is None for c in stream)


def test_usage_override(fake: FakeOpenAI, client: OpenAI) -> None:
    fake.script(Reply("x", prompt_tokens=30000, completion_tokens=7))
    usage = _stream(client)[-1].usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (30000, 7)


def test_tool_call_deltas_are_split_across_chunks(fake: FakeOpenAI, client: OpenAI) -> None:
    fake.script(
        Reply(
            tool_calls=[
                ToolCallSpec("read_file", {"path": "README.md"}, id="call_a"),
                ToolCallSpec("list_directory", '{"path": "."}'),
            ],
            chunk_size=5,
        )
    )
    chunks = _stream(client)
    calls: dict[int, dict[str, str]] = {}
    argument_pieces = 0
    for chunk in chunks:
        if not chunk.choices:
            continue
        for delta in chunk.choices[0].delta.tool_calls or []:
            entry = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] += delta.id or ""
            entry["name"] += (delta.function.name or "") if delta.function else ""
            if delta.function and delta.function.arguments:
                entry["arguments"] += delta.function.arguments
                argument_pieces += 1
    assert calls[0] == {"id": "call_a", "name": "read_file", "arguments": '{"path": "README.md"}'}
    assert calls[1]["name"] == "list_directory"
    assert json.loads(calls[1]["arguments"]) == {"path": "."}
    assert argument_pieces > 2
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


def test_non_streaming_json(fake: FakeOpenAI, client: OpenAI) -> None:
    fake.script(
        Reply("plain", reasoning="r", tool_calls=[ToolCallSpec("read_file", {"path": "a"})])
    )
    result = client.chat.completions.create(
        model="test-fast", messages=[{"role": "user", "content": "hi"}]
    )
    message = result.choices[0].message
    assert message.content == "plain"
    assert message.tool_calls[0].function.name == "read_file"
    assert result.model == "test-fast"
    assert result.usage.prompt_tokens > 0


def test_default_reply_is_ok_and_responder_is_used_when_queue_is_empty(
    fake: FakeOpenAI, client: OpenAI
) -> None:
    first = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    assert first.choices[0].message.content == "ok"
    fake.responder = echo_responder
    fake.script(Reply("scripted wins"))
    second = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "b"}])
    third = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "c"}])
    assert second.choices[0].message.content == "scripted wins"
    assert third.choices[0].message.content == "You said: c"
    assert fake.pending == 0


def test_request_log(fake: FakeOpenAI, client: OpenAI) -> None:
    client.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "q"}])
    client.models.list()
    assert fake.chat_requests[0]["messages"] == [{"role": "user", "content": "q"}]
    assert [(r.method, r.path) for r in fake.requests] == [
        ("POST", "/v1/chat/completions"),
        ("GET", "/v1/models"),
    ]
    assert fake.requests[0].headers["authorization"] == "Bearer sk-test"
    assert fake.wait_for_requests(1, timeout=1)[0]["model"] == "test-model"


def test_wait_for_requests_times_out(fake: FakeOpenAI) -> None:
    with pytest.raises(TimeoutError):
        fake.wait_for_requests(1, timeout=0.01)


def test_gate_holds_the_reply_until_set(fake: FakeOpenAI, client: OpenAI) -> None:
    gate = threading.Event()
    fake.script(Reply("late", gate=gate))
    result: list[str] = []
    worker = threading.Thread(
        target=lambda: result.append(
            client.chat.completions.create(model="m", messages=[]).choices[0].message.content
        )
    )
    worker.start()
    fake.wait_for_requests(1)
    assert result == []
    gate.set()
    worker.join(timeout=10)
    assert result == ["late"]


def test_stall_after_chunks_until_gate(fake: FakeOpenAI, client: OpenAI) -> None:
    stall = threading.Event()
    first_chunks = threading.Event()
    fake.script(Reply("abcdefgh" * 3, chunk_size=8, stall_after=2, stall_gate=stall))
    texts: list[str] = []

    def consume() -> None:
        stream = client.chat.completions.create(model="m", messages=[], stream=True)
        for chunk in stream:
            texts.append(chunk.choices[0].delta.content or "")
            if len(texts) == 2:
                first_chunks.set()

    worker = threading.Thread(target=consume)
    worker.start()
    assert first_chunks.wait(10)
    assert len(texts) == 2
    stall.set()
    worker.join(timeout=10)
    assert "".join(texts) == "abcdefgh" * 3


def test_stall_without_gate_times_the_client_out(fake: FakeOpenAI) -> None:
    fake.script(Reply("abcdefgh" * 2, stall_after=1))
    impatient = OpenAI(base_url=fake.base_url, api_key="k", max_retries=0, timeout=0.3)
    with pytest.raises(openai.APITimeoutError):
        list(impatient.chat.completions.create(model="m", messages=[], stream=True))


def test_cut_drops_the_connection_mid_stream(fake: FakeOpenAI, client: OpenAI) -> None:
    fake.script(Reply("abcdefgh" * 4, cut_after=2))
    received: list[str] = []
    with pytest.raises(openai.APIConnectionError):
        for chunk in client.chat.completions.create(model="m", messages=[], stream=True):
            received.append(chunk.choices[0].delta.content)
    assert received == ["abcdefgh", "abcdefgh"]


def test_http_error_with_headers(fake: FakeOpenAI, client: OpenAI) -> None:
    fake.script(
        HTTPError(429, {"error": {"message": "slow down"}}, {"Retry-After": "7"}),
        HTTPError(401, {"error": {"message": "bad key"}}),
    )
    with pytest.raises(openai.RateLimitError) as rate:
        client.chat.completions.create(model="m", messages=[])
    assert rate.value.response.headers["retry-after"] == "7"
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="m", messages=[])


def test_raw_response_is_sent_verbatim(fake: FakeOpenAI) -> None:
    fake.script(RawResponse(status=200, body=b"<html>gateway</html>", content_type="text/html"))
    request = urllib.request.Request(fake.base_url + "/chat/completions", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.read() == b"<html>gateway</html>"
        assert response.headers["Content-Type"] == "text/html"


def test_strict_models_and_api_key(fake: FakeOpenAI, client: OpenAI) -> None:
    fake.strict_models = True
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[])
    fake.api_key = "sk-right"
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="test-model", messages=[])


def test_unknown_route_is_404(fake: FakeOpenAI) -> None:
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(fake.base_url + "/nothing", timeout=10)
    assert err.value.code == 404


def test_embeddings_are_deterministic_unit_vectors(fake: FakeOpenAI, client: OpenAI) -> None:
    result = client.embeddings.create(model="emb", input=["red apple", "red apple", "blue sky"])
    vectors = [d.embedding for d in result.data]
    assert all(len(v) == EMBEDDING_DIM for v in vectors)
    assert vectors[0] == vectors[1]
    assert math.isclose(sum(x * x for x in vectors[0]), 1.0, rel_tol=1e-5)
    assert vectors[0] == pytest.approx(hash_embedding("red apple"), abs=1e-6)
    assert fake.embedding_requests[0]["model"] == "emb"


def test_embeddings_float_format_and_shared_words(fake: FakeOpenAI) -> None:
    body = json.dumps({"model": "e", "input": "apple pie", "encoding_format": "float"}).encode()
    request = urllib.request.Request(fake.base_url + "/embeddings", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        vector = json.loads(response.read())["data"][0]["embedding"]
    assert vector == pytest.approx(hash_embedding("apple pie"))
    related = sum(
        a * b for a, b in zip(hash_embedding("apple pie"), hash_embedding("apple"), strict=True)
    )
    assert related > 0.5


def test_embeddings_base64_round_trip(fake: FakeOpenAI) -> None:
    body = json.dumps({"model": "e", "input": ["x"], "encoding_format": "base64"}).encode()
    request = urllib.request.Request(fake.base_url + "/embeddings", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        encoded = json.loads(response.read())["data"][0]["embedding"]
    decoded = struct.unpack(f"<{EMBEDDING_DIM}f", base64.b64decode(encoded))
    assert list(decoded) == pytest.approx(hash_embedding("x"), abs=1e-6)


def test_embedding_gate_and_scripted_failure(fake: FakeOpenAI, client: OpenAI) -> None:
    fake.script_embeddings(HTTPError(500, {"error": {"message": "embedder down"}}))
    with pytest.raises(openai.InternalServerError):
        client.embeddings.create(model="e", input=["a"])
    gate = threading.Event()
    fake.embedding_gate = gate
    done = threading.Event()
    worker = threading.Thread(
        target=lambda: (client.embeddings.create(model="e", input=["a"]), done.set())
    )
    worker.start()
    assert not done.wait(0.05)
    gate.set()
    worker.join(timeout=10)
    assert done.is_set()


def test_stop_releases_threads_waiting_on_gates() -> None:
    fake = FakeOpenAI().start()
    fake.script(Reply("never", gate=threading.Event()))
    impatient = OpenAI(base_url=fake.base_url, api_key="k", max_retries=0, timeout=0.2)
    with pytest.raises(openai.APITimeoutError):
        impatient.chat.completions.create(model="m", messages=[])
    fake.stop()
    with pytest.raises(RuntimeError):
        _ = fake.base_url


def test_demo_echo_responder() -> None:
    assert (
        echo_responder({"messages": [{"role": "user", "content": "hey"}]}).text == "You said: hey"
    )
    tool = echo_responder({"messages": [{"role": "tool", "content": "12345"}]})
    assert tool.text == "The tool returned 5 characters."


def test_a_failing_responder_is_a_visible_500(fake: FakeOpenAI, client: OpenAI) -> None:
    def broken(body: dict) -> Reply:
        raise KeyError("oops")

    fake.responder = broken
    with pytest.raises(openai.InternalServerError, match="fake responder failed"):
        client.chat.completions.create(model="m", messages=[])


def test_clear_forgets_scripts_and_the_request_log(fake: FakeOpenAI, client: OpenAI) -> None:
    fake.script(Reply("first"), Reply("second"))
    client.chat.completions.create(model="m", messages=[])
    fake.clear()
    assert (fake.pending, fake.requests, fake.chat_requests) == (0, [], [])
    assert client.chat.completions.create(model="m", messages=[]).choices[0].message.content == "ok"


def test_demo_model_answers_a_recap_request_with_a_tagged_recap() -> None:
    from qwenmem_tui.features.recap.session_recap import (
        RECAP_SYSTEM_PROMPT,
        RECAP_USER_PROMPT,
        extract_recap,
    )
    from qwenmem_tui.testing.demo import demo_responder

    reply = demo_responder()(
        {
            "messages": [
                {"role": "system", "content": RECAP_SYSTEM_PROMPT},
                {"role": "user", "content": "fix the upload test"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "now the 429 case"},
                {"role": "user", "content": RECAP_USER_PROMPT},
            ]
        }
    )
    assert extract_recap(reply.text) == "You started with: fix the upload test Latest: now the 429 case"


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, function-local imports included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_fake_server_is_test_support_not_part_of_the_app() -> None:
    """No app module imports `qwenmem_tui.testing`, and the fake server imports no product
    module: the demo's recap/compaction answers are injected (testing/demo.py)."""
    package = Path(qwenmem_tui.__file__).parent
    for path in package.rglob("*.py"):
        imported = _imports(path)
        if path.parent.name == "testing":
            if path.name == "fake_openai.py":
                assert not [m for m in imported if m.startswith("qwenmem_tui")], imported
            continue
        assert not [m for m in imported if m.startswith("qwenmem_tui.testing")], path

