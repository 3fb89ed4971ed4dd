"""LLMClient through the real openai SDK against the fake server: streaming and every failure."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator

import httpx
import pytest

from qwenmem_tui.config import LLMSettings, Settings
from qwenmem_tui.llm.client import (
    Completion,
    LLMClient,
    ReasoningDelta,
    StreamFinished,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
    _ReplyAccumulator,
    _sse_batches,
)
from qwenmem_tui.llm.errors import LLMError, display_endpoint, map_error
from qwenmem_tui.testing.fake_openai import (
    FakeOpenAI,
    HTTPError,
    RawResponse,
    Reply,
    ToolCallSpec,
)

KEY = "sk-test-0123456789abcdef"
HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def llm(fake: FakeOpenAI) -> AsyncIterator[LLMClient]:
    client = LLMClient(
        base_url=fake.base_url, api_key=KEY, model="test-model", fast_model="test-fast", timeout=5
    )
    yield client
    await client.aclose()


async def _events(llm: LLMClient, **kwargs: object) -> list[object]:
    return [event async for event in llm.stream_chat(HELLO, **kwargs)]


async def _failure(llm: LLMClient) -> LLMError:
    with pytest.raises(LLMError) as info:
        await llm.complete(HELLO)
    error = info.value
    assert "\n" not in error.message and KEY not in error.message
    return error


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# streaming ------------------------------------------------------------------------------
async def test_streams_text_and_reasoning_then_finishes(fake: FakeOpenAI, llm: LLMClient) -> None:
    fake.script(Reply("hello **world**", reasoning="thinking hard", chunk_size=4))
    events = await _events(llm)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "hello **world**"
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "thinking hard"
    # Deltas that arrive in one read are joined (see test_a_burst_...): 1 to 4 events.
    assert 1 <= sum(isinstance(e, TextDelta) for e in events) <= 4
    finished = events[-1]
    assert isinstance(finished, StreamFinished)
    completion = finished.completion
    assert (completion.content, completion.reasoning) == ("hello **world**", "thinking hard")
    assert completion.finish_reason == "stop"
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    request = fake.chat_requests[0]
    assert request["stream"] is True and request["stream_options"] == {"include_usage": True}
    assert request["model"] == "test-model" and request["messages"] == HELLO


async def test_tool_call_deltas_are_assembled(fake: FakeOpenAI, llm: LLMClient) -> None:
    fake.script(
        Reply(
            "Let me look.",
            tool_calls=[
                ToolCallSpec("read_file", {"path": "README.md"}, id="call_readme"),
                ToolCallSpec("list_directory", {"path": "src"}),
            ],
            chunk_size=3,
        )
    )
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {}}}]
    events = await _events(llm, tools=tools)
    assert [e for e in events if isinstance(e, ToolCallDelta)] == [
        ToolCallDelta(0, "read_file"),
        ToolCallDelta(1, "list_directory"),
    ]
    completion = events[-1].completion
    assert completion.tool_calls == [
        ToolCall("call_readme", "read_file", '{"path": "README.md"}'),
        ToolCall("call_1", "list_directory", '{"path": "src"}'),
    ]
    assert completion.finish_reason == "tool_calls"
    assert fake.chat_requests[0]["tools"] == tools
    message = completion.to_message()
    assert message["role"] == "assistant" and message["content"] == "Let me look."
    assert message["tool_calls"][0] == {
        "id": "call_readme",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "README.md"}'},
    }


def test_completion_message_keeps_reasoning_only_when_present() -> None:
    assert Completion("a").to_message() == {"role": "assistant", "content": "a"}
    with_reasoning = Completion("a", reasoning="r", usage=Usage(1, 2)).to_message()
    assert with_reasoning["reasoning_content"] == "r" and "tool_calls" not in with_reasoning


async def test_complete_uses_overrides(fake: FakeOpenAI, llm: LLMClient) -> None:
    fake.script(Reply("short"))
    completion = await llm.complete(HELLO, model=llm.fast_model, max_tokens=32, temperature=0.2)
    assert completion.content == "short"
    request = fake.chat_requests[0]
    assert (request["model"], request["max_tokens"], request["temperature"]) == (
        "test-fast",
        32,
        0.2,
    )
    assert "tools" not in request


async def test_no_key_still_works_for_local_servers(fake: FakeOpenAI) -> None:
    client = LLMClient(base_url=fake.base_url, api_key=None, model="m")
    assert (await client.complete(HELLO)).content == "ok"
    await client.aclose()


async def test_from_settings(fake: FakeOpenAI) -> None:
    settings = Settings(
        llm=LLMSettings(base_url=fake.base_url, api_key=KEY, model="big", max_tokens=99, timeout=7)
    )
    client = LLMClient.from_settings(settings)
    assert (client.model, client.fast_model, client.timeout) == ("big", "big", 7)
    await client.complete(HELLO)
    assert fake.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert fake.chat_requests[0]["max_tokens"] == 99
    await client.aclose()
    local = LLMClient.from_settings(settings, base_url="http://127.0.0.1:1/v1", label="local")
    assert (local.base_url, local.label) == ("http://127.0.0.1:1/v1", "local")
    await local.aclose()


async def test_cancel_mid_stream_closes_the_request(fake: FakeOpenAI, llm: LLMClient) -> None:
    stall = threading.Event()
    fake.script(
        Reply("partial reply that never ends", chunk_size=7, stall_after=1, stall_gate=stall)
    )
    first = asyncio.Event()
    received: list[str] = []

    async def consume() -> None:
        async for event in llm.stream_chat(HELLO):
            if isinstance(event, TextDelta):
                received.append(event.text)
                first.set()

    task = asyncio.create_task(consume())
    await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert received == ["partial"]
    stall.set()
    # The client stays usable for the next message.
    fake.script(Reply("next"))
    assert (await llm.complete(HELLO)).content == "next"


def _sse_body(texts: list[str], newline: str = "\r\n") -> bytes:
    events = [
        json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}) for text in texts
    ]
    body = "".join(f"data: {event}{newline}{newline}" for event in events)
    return body.encode() + b"data: [DONE]\n\n"


async def _batches(pieces: list[bytes]) -> list[list[dict]]:
    async def body() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    response = httpx.Response(200, content=body())
    return [batch async for batch in _sse_batches(response)]


async def test_a_burst_read_at_once_is_one_event_not_one_per_chunk() -> None:
    """20k chunks buffered behind a fast stream must not cost 20k trips to the screen."""
    texts = [f"tok{n} é " for n in range(2_000)]
    batches = await _batches([_sse_body(texts)])
    assert [len(batch) for batch in batches] == [2_000]
    assert _ReplyAccumulator().feed(batches[0]) == [TextDelta("".join(texts))]


@pytest.mark.parametrize("newline", ["\r\n", "\n", "\r"])
async def test_events_split_anywhere_across_reads_parse_the_same(newline: str) -> None:
    # Cuts inside a UTF-8 character, between \r and \n, inside `data:`; each line end
    # SSE allows (a read without `\r` is split by the C split, others by the regex).
    body = _sse_body(["héllo", " wörld", "!"], newline)
    whole = await _batches([body])
    assert [payload["choices"][0]["delta"]["content"] for payload in whole[0]] == [
        "héllo",
        " wörld",
        "!",
    ]
    for size in (1, 2, 3, 7, 50):
        pieces = [body[index : index + size] for index in range(0, len(body), size)]
        split = await _batches(pieces)
        assert [payload for batch in split for payload in batch] == whole[0]


async def test_each_event_parses_as_json_loads_parses_it() -> None:
    """The JSON scanner taken straight (`_json_object`) must parse what `json.loads`
    parses and reject what it rejects: spaces around the value, an event of several
    `data:` lines, a value that is not an object (skipped), two values in one event."""
    events = [
        ' {"a": 1} ',
        '{"b":\ndata: [1, {"c": "\\u00e9"}]}',
        "[1, 2]",
        '{"d": "x"}\t',
    ]
    body = "".join(f"data: {event}\n\n" for event in events) + "data: [DONE]\n\n"
    batches = await _batches([body.encode()])
    assert [payload for batch in batches for payload in batch] == [
        {"a": 1},
        {"b": [1, {"c": "é"}]},
        {"d": "x"},
    ]
    for bad in ('{"a": 1} {"b": 2}', '{"a": 1}, 2', '{"a": ', "nope", "", '{"a": 1}}'):
        with pytest.raises(ValueError) as caught:
            await _batches([f"data: {{}}\n\ndata: {bad}\n\n".encode()])
        with pytest.raises(ValueError) as expected:
            json.loads(bad)
        assert str(caught.value) == str(expected.value)


async def test_chunks_that_arrive_together_are_a_few_events_not_one_each(
    fake: FakeOpenAI, llm: LLMClient
) -> None:
    """Providers send one HTTP chunk per token; a burst of them read together (behind a
    fast stream) must reach the session as a few events, not one per chunk: each event
    is a trip through every layer up to the screen. Fails without the read-ahead: 300."""
    texts = [f"tok{n} " for n in range(300)]
    finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    payloads = [{"choices": [{"index": 0, "delta": {"content": text}}]} for text in texts]
    chunks = [f"data: {json.dumps(payload)}\n\n".encode() for payload in [*payloads, finish]]
    fake.script(RawResponse(chunks=[*chunks, b"data: [DONE]\n\n"]))
    events = await _events(llm)
    deltas = [event for event in events if isinstance(event, TextDelta)]
    assert "".join(delta.text for delta in deltas) == "".join(texts)
    assert len(deltas) <= 30
    assert isinstance(events[-1], StreamFinished)
    assert events[-1].completion.content == "".join(texts)


def test_chunks_read_together_are_one_event_per_run_of_one_kind_in_order() -> None:
    def chunk(delta: dict) -> dict:
        return {"choices": [{"index": 0, "delta": delta}]}

    call = {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{}"}}]}
    payloads = [
        chunk({"reasoning_content": "a"}),
        chunk({"reasoning": "b"}),
        chunk({"content": "c"}),
        chunk({"content": "d", "reasoning_content": None}),
        chunk(call),
        chunk({"content": "e"}),
        chunk({"reasoning_content": "f", "content": "g"}),
    ]
    reply = _ReplyAccumulator()
    assert reply.feed(payloads) == [
        ReasoningDelta("ab"),
        TextDelta("cd"),
        ToolCallDelta(index=0, name="f"),
        TextDelta("e"),
        ReasoningDelta("f"),
        TextDelta("g"),
    ]
    assert reply.feed([chunk({"content": "h"})]) == [TextDelta("h")]
    completion = reply.completion()
    assert (completion.content, completion.reasoning) == ("cdegh", "abf")
    assert [(c.id, c.name, c.arguments) for c in completion.tool_calls] == [("c1", "f", "{}")]


# failures -------------------------------------------------------------------------------
async def test_connection_refused() -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"
    client = LLMClient(base_url=url, api_key=KEY, model="test-model")
    error = await _failure(client)
    assert error.kind == "connection"
    assert "refused" in error.message and url in error.message and "test-model" in error.message
    await client.aclose()


async def test_dns_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    real = socket.getaddrinfo

    def no_such_host(host: object, *args: object, **kwargs: object) -> object:
        if host == "llm.example.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", no_such_host)
    client = LLMClient(base_url="http://llm.example.invalid/v1", api_key=KEY, model="m")
    error = await _failure(client)
    assert error.kind == "connection" and "DNS" in error.message
    assert "llm.example.invalid" in error.message
    await client.aclose()


async def test_auth_error_never_echoes_the_key(fake: FakeOpenAI, llm: LLMClient) -> None:
    fake.script(HTTPError(401, {"error": {"message": f"Incorrect API key provided: {KEY}"}}))
    error = await _failure(llm)
    assert error.kind == "auth" and "401" in error.message
    assert fake.base_url in error.message and "test-model" in error.message


async def test_unknown_model(fake: FakeOpenAI, llm: LLMClient) -> None:
    fake.strict_models = True
    llm.model = "no-such-model"
    error = await _failure(llm)
    assert error.kind == "not_found"
    assert "Model not found" in error.message and "no-such-model" in error.message


async def test_wrong_path_is_not_found(fake: FakeOpenAI) -> None:
    client = LLMClient(
        base_url=fake.base_url.removesuffix("/v1") + "/wrong", api_key=KEY, model="m"
    )
    fake.script()
    error = await _failure(client)
    assert error.kind == "not_found" and "llm.base_url" in error.message
    await client.aclose()


@pytest.mark.parametrize(
    ("headers", "expected"),
    [({"Retry-After": "7"}, 7.0), ({"retry-after-ms": "1500"}, 1.5), ({}, None)],
)
async def test_rate_limit_with_retry_after(
    fake: FakeOpenAI, llm: LLMClient, headers: dict[str, str], expected: float | None
) -> None:
    fake.script(HTTPError(429, {"error": {"message": "Requests rate limit exceeded"}}, headers))
    error = await _failure(llm)
    assert error.kind == "rate_limit" and error.retry_after == expected
    assert "429" in error.message and "rate limit exceeded" in error.message


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_server_errors(fake: FakeOpenAI, llm: LLMClient, status: int) -> None:
    fake.script(HTTPError(status, {"error": {"message": "upstream overloaded"}}))
    error = await _failure(llm)
    assert error.kind == "server" and str(status) in error.message
    assert "upstream overloaded" in error.message


async def test_html_error_page_is_summarised(fake: FakeOpenAI, llm: LLMClient) -> None:
    page = "<html><body><h1>502 Bad Gateway</h1>" + "x" * 5000 + "</body></html>"
    fake.script(HTTPError(502, page, {"Content-Type": "text/html"}))
    error = await _failure(llm)
    assert error.kind == "server" and "<html>" not in error.message and len(error.message) < 300


async def test_timeout_before_first_byte(fake: FakeOpenAI) -> None:
    client = LLMClient(base_url=fake.base_url, api_key=KEY, model="test-model", timeout=0.3)
    fake.script(Reply("late", gate=threading.Event()))
    error = await _failure(client)
    assert error.kind == "timeout" and "0.3s" in error.message
    await client.aclose()


async def test_timeout_mid_stream(fake: FakeOpenAI) -> None:
    client = LLMClient(base_url=fake.base_url, api_key=KEY, model="test-model", timeout=0.3)
    fake.script(Reply("abcdefgh" * 4, stall_after=2))
    error = await _failure(client)
    assert error.kind == "timeout"
    await client.aclose()


async def test_connection_cut_mid_stream(fake: FakeOpenAI, llm: LLMClient) -> None:
    fake.script(Reply("abcdefgh" * 4, cut_after=2))
    received: list[str] = []
    with pytest.raises(LLMError) as info:
        async for event in llm.stream_chat(HELLO):
            if isinstance(event, TextDelta):
                received.append(event.text)
    assert "".join(received) == "abcdefgh" * 2
    assert info.value.kind == "bad_response" and "cut off" in info.value.message


async def test_stream_without_finish_reason_is_truncated(fake: FakeOpenAI, llm: LLMClient) -> None:
    chunk = (
        b'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
    )
    fake.script(RawResponse(body=chunk))
    error = await _failure(llm)
    assert error.kind == "bad_response" and "before it was complete" in error.message


async def test_malformed_stream(fake: FakeOpenAI, llm: LLMClient) -> None:
    fake.script(RawResponse(body=b"data: {not json\n\n"))
    error = await _failure(llm)
    assert error.kind == "bad_response" and "malformed" in error.message


async def test_empty_stream(fake: FakeOpenAI, llm: LLMClient) -> None:
    fake.script(RawResponse(body=b"data: [DONE]\n\n"))
    error = await _failure(llm)
    assert error.kind == "bad_response" and "empty" in error.message


async def test_error_event_inside_a_200_stream(fake: FakeOpenAI, llm: LLMClient) -> None:
    fake.script(RawResponse(body=b'data: {"error": {"message": "model overloaded"}}\n\n'))
    error = await _failure(llm)
    assert error.kind == "server" and "model overloaded" in error.message


async def test_200_with_json_error_body(fake: FakeOpenAI, llm: LLMClient) -> None:
    body = b'{"error": {"message": "quota exhausted", "code": "insufficient_quota"}}'
    fake.script(RawResponse(body=body, content_type="application/json"))
    error = await _failure(llm)
    assert error.kind == "server" and "quota exhausted" in error.message


async def test_200_with_non_json_body(fake: FakeOpenAI, llm: LLMClient) -> None:
    fake.script(RawResponse(body=b"<html>captive portal</html>", content_type="text/html"))
    error = await _failure(llm)
    assert error.kind == "bad_response" and "text/html" in error.message


@pytest.mark.parametrize(
    "answer",
    [
        HTTPError(400, {"error": {"message": "too long", "code": "context_length_exceeded"}}),
        HTTPError(
            400,
            {
                "error": {
                    "message": "This model's maximum context length is 32768 tokens. "
                    "However, your messages resulted in 40000 tokens."
                }
            },
        ),
        HTTPError(413, "Request Entity Too Large"),
    ],
)
async def test_context_length_exceeded(fake: FakeOpenAI, llm: LLMClient, answer: HTTPError) -> None:
    fake.script(answer)
    error = await _failure(llm)
    assert error.kind == "context_length" and "context window" in error.message


async def test_other_bad_request(fake: FakeOpenAI, llm: LLMClient) -> None:
    fake.script(HTTPError(400, {"error": {"message": "temperature must be <= 2"}}))
    error = await _failure(llm)
    assert error.kind == "bad_request" and "temperature must be <= 2" in error.message


# embeddings -----------------------------------------------------------------------------
async def test_embed_returns_vectors_in_order(fake: FakeOpenAI, llm: LLMClient) -> None:
    vectors = await llm.embed(["alpha", "beta", "alpha"], model="text-embedding-v4")
    assert len(vectors) == 3 and len(vectors[0]) == 64
    assert vectors[0] == vectors[2] != vectors[1]
    assert fake.embedding_requests[0]["input"] == ["alpha", "beta", "alpha"]
    assert await llm.embed([], model="e") == []


async def test_embed_on_another_endpoint_and_errors(fake: FakeOpenAI, llm: LLMClient) -> None:
    with FakeOpenAI() as other:
        await llm.embed(["x"], model="e", base_url=other.base_url)
        assert len(other.embedding_requests) == 1 and fake.embedding_requests == []
    fake.script_embeddings(HTTPError(401, {"error": {"message": "nope"}}))
    with pytest.raises(LLMError) as info:
        await llm.embed(["x"], model="emb-model")
    assert info.value.kind == "auth" and "emb-model" in info.value.message


# mapping details ------------------------------------------------------------------------
def test_display_endpoint_hides_credentials() -> None:
    assert display_endpoint("https://user:pw@host:8443/v1/?k=secret") == "https://host:8443/v1"


def test_map_error_scrubs_the_key_and_passes_llm_errors_through() -> None:
    error = map_error(ValueError(f"bad {KEY}"), base_url="http://h/v1", model="m", api_key=KEY)
    assert error.kind == "bad_response" and KEY not in error.message
    assert map_error(error, base_url="x", model="y") is error
    unexpected = map_error(RuntimeError("?"), base_url="http://h/v1", model="m")
    assert "RuntimeError" in unexpected.message and "http://h/v1" in unexpected.message
