"""Streaming chat completions and embeddings over `openai.AsyncOpenAI`.

Always streams, even for side queries, so there is one code path for assembling
text, `reasoning_content` and tool-call deltas, and one place where a truncated or
malformed stream is noticed. Retries are off for chat: a failure is shown to the user
as one line (see `errors.py`) rather than hidden behind minutes of silent backoff.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from json.scanner import make_scanner
from typing import TYPE_CHECKING, Any

from qwenmem_tui.llm.errors import LLMError, StreamProblem, display_endpoint, map_error
from qwenmem_tui.llm.read_ahead import read_ahead
from qwenmem_tui.llm.side_calls import SideCallGate
from qwenmem_tui.llm.wire import JSONObject, Message

if TYPE_CHECKING:
    import openai

    from qwenmem_tui.config import Settings

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"
EMBEDDING_RETRIES = 2  # embeddings run in the background; a blip should not drop a memory


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text, exactly as the model produced it

    def to_message_dict(self) -> Message:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass
class Usage:
    prompt_tokens: int
    completion_tokens: int


@dataclass
class Completion:
    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage | None = None

    def to_message(self) -> Message:
        """The assistant message for history; reasoning is kept for providers that want it."""
        message: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [call.to_message_dict() for call in self.tool_calls]
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        return message


@dataclass
class TextDelta:
    text: str


@dataclass
class ReasoningDelta:
    text: str


@dataclass
class ToolCallDelta:
    """A tool call started streaming (or its name arrived): enough for a "running tool…" hint."""

    index: int
    name: str | None


@dataclass
class StreamFinished:
    completion: Completion


LLMEvent = TextDelta | ReasoningDelta | ToolCallDelta | StreamFinished


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class _ReplyAccumulator:
    """One streamed reply as its chunks arrive: the events each yields, the whole."""

    def __init__(self) -> None:
        self._completion = Completion()
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, _PartialCall] = {}
        self._chunks = 0

    def feed(self, payloads: list[JSONObject]) -> list[LLMEvent]:
        """The events of decoded chunks read together, each run of text (or reasoning)
        deltas as one event (usage and finish reason are kept)."""
        events = _Events()
        for payload in payloads:
            self._chunks += 1
            usage = payload.get("usage")
            if isinstance(usage, dict):
                self._completion.usage = Usage(
                    prompt_tokens=usage.get("prompt_tokens") or 0,
                    completion_tokens=usage.get("completion_tokens") or 0,
                )
            for choice in payload.get("choices") or ():
                if choice.get("index") not in (0, None):
                    continue  # n > 1 is never requested; ignore stray choices
                delta = choice.get("delta")
                if isinstance(delta, dict):
                    _delta_events(delta, self._text, self._reasoning, self._calls, events)
                if choice.get("finish_reason"):
                    self._completion.finish_reason = choice["finish_reason"]
        return events.done()

    def check_complete(self) -> None:
        """Raise StreamProblem for a stream that ended empty or before its finish."""
        if self._chunks == 0:
            raise StreamProblem("bad_response", "The endpoint sent an empty stream")
        if self._completion.finish_reason is None:
            raise StreamProblem("bad_response", "The reply ended before it was complete")

    def completion(self) -> Completion:
        completion = self._completion
        completion.content = "".join(self._text)
        completion.reasoning = "".join(self._reasoning)
        completion.tool_calls = [
            ToolCall(
                id=call.id or f"call_{index}",
                name=call.name,
                arguments="".join(call.arguments) or "{}",
            )
            for index, call in sorted(self._calls.items())
        ]
        return completion


class LLMClient:
    """One endpoint, a main model and a fast model for side queries."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        model: str,
        fast_model: str | None = None,
        timeout: float = 60.0,
        max_tokens: int | None = None,
        label: str | None = None,
        temperature: float | None = None,
        yield_side_calls: bool = False,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.fast_model = fast_model or model
        self.timeout = timeout
        self.max_tokens = max_tokens
        # Sent with chat requests that set none themselves; None sends nothing, so
        # the endpoint's own default applies (side queries pass their own).
        self.temperature = temperature
        # On an endpoint that serves one request at a time (the bundled model), side
        # queries (`complete`) give way to the user's (`stream_chat`): see side_calls.py.
        self.side_calls = SideCallGate(enabled=yield_side_calls)
        self.label = label or display_endpoint(base_url)
        # What the status line names: the provider's own label ("local: SmolLM2-135M")
        # when one was given, else the model, which is what a user picked.
        self.status_label = label or model
        self._api_key = api_key
        # Local servers accept any key, but the SDK refuses to start without one.
        self._client = self._make_client(base_url, max_retries=0)
        self._embed_clients: dict[str, openai.AsyncOpenAI] = {}

    @property
    def api_key(self) -> str | None:
        """The endpoint's key: the proxy of ``qwenmem serve`` forwards with it (it never
        leaves qwenmem otherwise)."""
        return self._api_key

    @classmethod
    def from_settings(
        cls, settings: Settings, *, base_url: str | None = None, label: str | None = None
    ) -> LLMClient:
        """`base_url` overrides the configured one (the local model server passes its own)."""
        llm = settings.llm
        return cls(
            base_url=base_url or llm.base_url or DEFAULT_BASE_URL,
            api_key=settings.api_key_value(),
            model=llm.model,
            fast_model=llm.fast_model,
            timeout=llm.timeout,
            max_tokens=llm.max_tokens,
            label=label,
            temperature=llm.temperature,
        )

    def warm(self) -> None:
        """Build what the SDK builds on a client's first request: its chat resources,
        whose modules it imports then (~60-100 ms here). A face calls this in a thread
        while it starts, so the user's first message does not import them on the event
        loop (a reply's first step held the loop and the keys for 100-175 ms)."""
        self._client.chat.completions.with_streaming_response  # noqa: B018 (cached)

    def _make_client(self, base_url: str, *, max_retries: int) -> openai.AsyncOpenAI:
        # The SDK loads with the first client (~0.4 s), not with this module: the TUI
        # draws and takes keys before it builds one (see `tui.app`).
        import openai

        return openai.AsyncOpenAI(
            base_url=base_url,
            api_key=self._api_key or "no-key",
            timeout=self.timeout,
            max_retries=max_retries,
        )

    def _error(self, exc: BaseException, *, model: str, base_url: str | None = None) -> LLMError:
        return map_error(
            exc,
            base_url=base_url or self.base_url,
            model=model,
            timeout=self.timeout,
            api_key=self._api_key,
        )

    async def stream_chat(
        self,
        messages: list[Message],
        *,
        tools: list[JSONObject] | None = None,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> AsyncGenerator[LLMEvent, None]:
        """The user's request: stream one completion, side calls giving way meanwhile."""
        async with self.side_calls.foreground():
            stream = self._stream_chat(
                messages, tools=tools, model=model, max_tokens=max_tokens, temperature=temperature
            )
            async with aclosing(stream) as events:
                async for event in events:
                    yield event

    async def _stream_chat(
        self,
        messages: list[Message],
        *,
        tools: list[JSONObject] | None = None,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> AsyncGenerator[LLMEvent, None]:
        """Stream one completion; ends with `StreamFinished` or raises `LLMError`.

        Cancelling the task that iterates this closes the HTTP response, so the
        server sees the disconnect and stops generating.
        """
        model = model or self.model
        params = self._params(messages, tools, model, max_tokens, temperature)
        reply = _ReplyAccumulator()
        try:
            # The SDK builds, sends and checks the request (status errors, timeouts), but
            # the body is decoded here: its per-chunk pydantic models cost ~0.3 ms each,
            # 6 s of a 20k-chunk reply on the UI's event loop; a dict costs a tenth of that.
            create = self._client.chat.completions.with_streaming_response.create
            async with create(**params) as response:
                http = response.http_response
                await _reject_non_sse(http)
                # Whatever arrived together is yielded together: 20k chunks buffered
                # behind a fast stream are a few hundred events, not 20k trips through
                # every consumer up to the screen (the body is read ahead, in a task
                # of its own: see read_ahead.py).
                async for batch in read_ahead(_sse_batches(http)):
                    for event in reply.feed(batch):
                        yield event
            reply.check_complete()
        except Exception as exc:
            raise self._error(exc, model=model) from exc
        yield StreamFinished(reply.completion())

    def _params(
        self,
        messages: list[Message],
        tools: list[JSONObject] | None,
        model: str,
        max_tokens: int | None,
        temperature: float | None,
    ) -> JSONObject:
        """The request's parameters: the call's own, else the client's defaults."""
        params: JSONObject = {
            "model": model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            params["tools"] = tools
        if (limit := max_tokens or self.max_tokens) is not None:
            params["max_tokens"] = limit
        if (temperature := temperature if temperature is not None else self.temperature) is not None:
            params["temperature"] = temperature
        return params

    async def complete(
        self,
        messages: list[Message],
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        tools: list[JSONObject] | None = None,
    ) -> Completion:
        """The whole completion at once (side queries: titles, recaps, extraction).

        A side query: it gives way to the user's requests when the gate is on.
        """

        async def call() -> Completion:
            stream = self._stream_chat(
                messages, tools=tools, model=model, max_tokens=max_tokens, temperature=temperature
            )
            async with aclosing(stream) as events:
                async for event in events:
                    if isinstance(event, StreamFinished):
                        return event.completion
            raise AssertionError("stream_chat always ends with StreamFinished or raises")

        return await self.side_calls.side(call)

    async def list_models(self) -> list[str]:
        """The model ids the endpoint serves (`GET /models`), sorted; LLMError else."""
        try:
            page = await self._client.models.list()
            return sorted({str(model.id) for model in page.data})
        except Exception as exc:
            raise self._error(exc, model=self.model) from exc

    def use_model(self, model: str) -> None:
        """Chat with `model` from the next request on (/model); the fast model for side
        queries stays as configured."""
        if self.status_label == self.model:  # a provider's own label stays as it is
            self.status_label = model
        self.model = model

    async def embed(
        self, texts: list[str], *, model: str, base_url: str | None = None
    ) -> list[list[float]]:
        """Embeddings in input order, from `base_url` (default: the chat endpoint)."""
        if not texts:
            return []
        url = base_url or self.base_url
        client = self._embed_clients.get(url)
        if client is None:
            client = self._make_client(url, max_retries=EMBEDDING_RETRIES)
            self._embed_clients[url] = client
        try:
            result = await client.embeddings.create(
                model=model, input=texts, encoding_format="float"
            )
            rows = sorted(result.data, key=lambda row: row.index)
            vectors = [list(row.embedding) for row in rows]
            if len(vectors) != len(texts):
                raise StreamProblem(
                    "bad_response",
                    f"The endpoint returned {len(vectors)} embeddings for {len(texts)} texts",
                )
        except Exception as exc:
            raise self._error(exc, model=model, base_url=url) from exc
        return vectors

    async def aclose(self) -> None:
        await self._client.close()
        for client in self._embed_clients.values():
            await client.close()
        self._embed_clients.clear()


def _delta_events(
    delta: JSONObject,
    text: list[str],
    reasoning: list[str],
    calls: dict[int, _PartialCall],
    events: _Events,
) -> None:
    """Add the events of one delta to `events`, its pieces to the reply's."""
    # Providers name the thinking stream differently.
    thought = delta.get("reasoning_content") or delta.get("reasoning")
    if isinstance(thought, str) and thought:
        reasoning.append(thought)
        events.piece(ReasoningDelta, thought)
    content = delta.get("content")
    if isinstance(content, str) and content:
        text.append(content)
        events.piece(TextDelta, content)
    for call_delta in delta.get("tool_calls") or ():
        if not isinstance(call_delta, dict):
            continue
        index = call_delta.get("index")
        if not isinstance(index, int):
            index = len(calls)
        partial = calls.get(index)
        is_new = partial is None
        if partial is None:
            partial = calls[index] = _PartialCall()
        had_name = bool(partial.name)
        if call_delta.get("id"):
            partial.id = str(call_delta["id"])
        function = call_delta.get("function")
        if isinstance(function, dict):
            if function.get("name"):
                partial.name += str(function["name"])
            if function.get("arguments"):
                partial.arguments.append(str(function["arguments"]))
        if is_new or (partial.name and not had_name):
            events.add(ToolCallDelta(index=index, name=partial.name or None))


class _Events:
    """Events in order, each run of text (or of reasoning) pieces joined into one event
    at its end: a burst's thousands of one-token deltas become one event, built once
    (no event per piece, no joining two at a time)."""

    __slots__ = ("_events", "_kind", "_run")

    def __init__(self) -> None:
        self._events: list[LLMEvent] = []
        self._kind: type[TextDelta] | type[ReasoningDelta] | None = None
        self._run: list[str] = []

    def piece(self, kind: type[TextDelta] | type[ReasoningDelta], text: str) -> None:
        if kind is not self._kind:
            self._close()
            self._kind = kind
        self._run.append(text)

    def add(self, event: LLMEvent) -> None:
        self._close()
        self._events.append(event)

    def done(self) -> list[LLMEvent]:
        self._close()
        return self._events

    def _close(self) -> None:
        if self._run and self._kind is not None:
            self._events.append(self._kind("".join(self._run)))
            self._run = []
        self._kind = None


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


async def _sse_batches(response: Any) -> AsyncGenerator[list[JSONObject], None]:
    """The JSON objects of an SSE body up to `[DONE]`, read as the SDK's own stream reads
    them, one list per read of the body (all the events that read completed).

    An event is its `data:` lines joined (a last one without its blank line counts too);
    `{"error": ...}` raises `APIError` like the SDK, a body that is not JSON `ValueError`.
    Lines are split here, a whole read at a time: httpx's `aiter_lines` costs four
    generator steps per line, most of the client's time on a fast stream. Per event,
    what runs is kept to a few operations (a provider sends one per token): one `data:`
    line is the event as it is, and an object is taken by the JSON scanner itself
    (`_json_object`).
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    data: list[str] = []
    rest = ""
    chunks = response.aiter_bytes()
    while True:
        chunk = await anext(chunks, None)
        final = chunk is None
        buffer = rest + decoder.decode(chunk or b"", final=final)
        if "\r" in buffer:
            # A `\r` at the end may be the first half of `\r\n`: wait for the next read.
            cut = len(buffer) - 1 if buffer.endswith("\r") and not final else len(buffer)
            lines = _LINE_BREAK.split(buffer[:cut])
            rest = lines.pop() + buffer[cut:]  # the unfinished last line
        else:  # what providers send: the C split, a fifth of the regex's time a read
            lines = buffer.split("\n")
            rest = lines.pop()
        if final and rest:
            lines.append(rest)
        if final:
            lines.append("")  # the end of the body ends a last event without its blank line
        batch: list[JSONObject] = []
        for line in lines:
            if line:
                if line.startswith("data:"):
                    data.append(line[6:] if line.startswith("data: ") else line[5:])
                continue  # `event:`, `id:`, `retry:` and `:` comments carry nothing we use
            if not data:
                continue
            raw = data[0] if len(data) == 1 else "\n".join(data)
            data.clear()
            if raw.startswith("[DONE]"):
                if batch:
                    yield batch
                return
            try:
                payload = _json_object(raw)
                if isinstance(payload, dict):
                    if "error" in payload:
                        _raise_error_event(payload, response)
                    batch.append(payload)
            except Exception:
                if batch:  # what came before the bad event is the partial reply
                    yield batch
                raise
        if batch:
            yield batch
        if final:
            return


# What `json.loads` runs on a str (typeshed types its argument as the C scanner itself).
_decoder = json.JSONDecoder()
_scan_json: Callable[[str, int], tuple[Any, int]] = make_scanner(_decoder)  # type: ignore[arg-type]


def _json_object(raw: str) -> Any:
    """`json.loads(raw)`. A text that is one JSON value and nothing else is taken
    straight by the scanner `json.loads` runs (its own steps around it were a fifth of
    the time this module's SSE reading took an event); anything else (spaces around
    it, bad JSON) goes through `json.loads`, which parses or rejects it as ever."""
    try:
        value, end = _scan_json(raw, 0)
    except (StopIteration, ValueError):
        return json.loads(raw)
    return value if end == len(raw) else json.loads(raw)


def _raise_error_event(payload: JSONObject, response: Any) -> None:
    """An error event inside a 200 stream: the provider failed after it started."""
    error = payload.get("error")
    if not error:
        return
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(message, str) or not message:
        message = "An error occurred during streaming"
    import openai  # loaded by the client already; not at the top (see _make_client)

    raise openai.APIError(message, request=response.request, body=error)


async def _reject_non_sse(response: Any) -> None:
    """A 200 that is not an event stream (a proxy page, a JSON error) would parse as empty."""
    content_type = response.headers.get("content-type", "")
    if not content_type or "event-stream" in content_type:
        return
    body = (await response.aread()).decode("utf-8", "replace")
    try:
        payload = json.loads(body)
    except ValueError:
        raise StreamProblem(
            "bad_response", f"The endpoint answered with {content_type.split(';')[0]}, not a stream"
        ) from None
    if isinstance(payload, dict) and payload.get("error"):
        import openai

        raise openai.APIError(
            "error in a 200 response", request=response.request, body=payload["error"]
        )
    raise StreamProblem("bad_response", "The endpoint answered with JSON, not a stream")
