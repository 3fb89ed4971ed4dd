"""An OpenAI-compatible fake server for tests and demos.

The suite never reaches the network, yet it must exercise the real `openai` SDK over
real HTTP: streaming, tool calls, timeouts, cut connections and error bodies behave
differently on the wire than in a mock. So this is a small stdlib HTTP server running
in a background thread on 127.0.0.1, scripted per request.

Timing is controlled with `threading.Event` gates instead of sleeps, so tests stay
deterministic: a reply can wait for a gate before its first byte, stall after N chunks
until another gate opens, or drop the connection after N chunks.

Run `python -m qwenmem_tui.testing.fake_openai --port 8000` for an echo model; the
app's demo model (which also answers recap and compaction requests) is
`python -m qwenmem_tui.testing.demo`. This module knows no product prompt: answers to
particular requests are injected as responders (`by_system_prompt`).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import logging
import math
import os
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeAlias

log = logging.getLogger("qwenmem.fake_openai")

JSONObject: TypeAlias = dict[str, Any]
"""A JSON object as `json.loads` returns it (as `llm.wire` names it: this module
imports no product module)."""

EMBEDDING_DIM = 64
DEFAULT_MODELS = ("test-model", "test-fast", "fake-echo")
CHAT_PATH = "/v1/chat/completions"
EMBEDDINGS_PATH = "/v1/embeddings"
MODELS_PATH = "/v1/models"
RESPONSES_PATH = "/v1/responses"


@dataclass(frozen=True)
class ToolCallSpec:
    """One tool call the fake model makes; `arguments` may be a dict or raw JSON text."""

    name: str
    arguments: JSONObject | str = field(default_factory=dict)
    id: str | None = None

    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


@dataclass
class Reply:
    """A successful completion, streamed in `chunk_size`-character pieces.

    Chunk counting for `stall_after` / `cut_after` covers every SSE event that carries
    a choice (reasoning, text, tool-call pieces and the finish chunk), in that order.
    """

    text: str = ""
    reasoning: str = ""
    tool_calls: Sequence[ToolCallSpec] = ()
    chunk_size: int = 8
    usage: bool = True
    gate: threading.Event | None = None
    stall_after: int | None = None
    stall_gate: threading.Event | None = None
    cut_after: int | None = None
    rate: float | None = None  # chunks a second (benchmarks); None: as fast as they go
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass
class HTTPError:
    """A non-2xx answer, e.g. 401, 404 model, 429 with Retry-After, 500."""

    status: int
    body: JSONObject | str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class RawResponse:
    """Bytes sent as they are, for malformed streams and odd provider answers."""

    status: int = 200
    body: bytes = b""
    content_type: str = "text/event-stream"
    headers: dict[str, str] = field(default_factory=dict)
    chunks: Sequence[bytes] = ()
    """Given: the body is these HTTP chunks (chunked encoding), all sent in one write,
    as a burst of a fast stream reaches a client (one chunk per event, as providers
    send them); `body` is then unused."""


Response = Reply | HTTPError | RawResponse
Responder = Callable[[JSONObject], Response | None]


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # keys lowercased
    body: Any  # parsed JSON, or the raw text when it was not JSON, or None


class _ServerClosing(Exception):
    """Raised inside a handler thread when the server stops while it waits on a gate."""


def hash_embedding(text: str, dim: int = EMBEDDING_DIM) -> list[float]:
    """Deterministic unit vector by signed feature hashing of lowercase words.

    Texts sharing words get a positive cosine, so recall tests behave like a (very)
    small semantic model without any weights.
    """
    vec = [0.0] * dim
    words = [w for w in "".join(c if c.isalnum() else " " for c in text.lower()).split()]
    for word in words or [""]:
        digest = hashlib.sha256(word.encode()).digest()
        index = int.from_bytes(digest[:4], "little") % dim
        vec[index] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


def estimate_tokens(text: str) -> int:
    """About four characters a token, like most BPE tokenizers on English text."""
    return max(1, math.ceil(len(text) / 4))


def echo_responder(body: JSONObject) -> Response:
    """The echo model: echoes the last user message, summarises tool results."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return Reply(f"The tool returned {len(str(last.get('content') or ''))} characters.")
    return Reply(f"You said: {_text(last)}")


def by_system_prompt(
    routes: Mapping[str, Responder], fallback: Responder = echo_responder
) -> Responder:
    """A responder that hands a request whose first message is one of `routes`' system
    prompts to that route (None from it falls back), and every other one to `fallback`.

    The caller injects the prompts, so the fake server never imports the product's.
    """

    def respond(body: JSONObject) -> Response | None:
        messages = body.get("messages") or []
        first = messages[0].get("content") if messages else None
        route = routes.get(first) if isinstance(first, str) else None
        answer = route(body) if route is not None else None
        return answer if answer is not None else fallback(body)

    return respond


def recap_answer(body: JSONObject) -> Response | None:
    """A recap naming the first and the latest things the user said (None: nothing said)."""
    messages = body.get("messages") or []
    said = [_text(m) for m in messages[1:-1] if m.get("role") == "user"]
    if not said:
        return None
    return Reply(f"<recap>You started with: {said[0]} Latest: {said[-1]}</recap>")


def summary_answer(body: JSONObject) -> Response:
    """A compaction summary (JSON) listing the `user: ` lines of the block to summarise."""
    messages = body.get("messages") or []
    lines = _text(messages[-1]).splitlines() if messages else []
    said = [line.removeprefix("user: ") for line in lines if line.startswith("user: ")]
    summary = "The user said: " + " / ".join(said) if said else "Earlier turns, no user text."
    return Reply(json.dumps({"summary": summary, "decisions": [], "pinned_turns": []}))


def _text(message: JSONObject) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


class FakeOpenAI:
    """The fake server; use as a context manager or call `start()` / `stop()`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._queue: deque[Response] = deque()
        self._embedding_queue: deque[HTTPError | RawResponse | None] = deque()
        self._closing = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.responder: Responder | None = None
        self.requests: list[RecordedRequest] = []
        self.chat_requests: list[JSONObject] = []
        self.embedding_requests: list[JSONObject] = []
        self.embedding_gate: threading.Event | None = None
        self.models: list[str] = list(DEFAULT_MODELS)
        # When set, a chat request for a model not in `models` gets a 404 like a real API.
        self.strict_models = False
        # When set, requests must carry `Authorization: Bearer <api_key>` or get a 401.
        self.api_key: str | None = None
        # When set, POST /v1/responses answers (the Responses API) from the same script
        # as chat completions; unset it is a 404, as on most OpenAI-compatible servers.
        self.serves_responses = False
        self.responses_requests: list[JSONObject] = []

    # lifecycle -------------------------------------------------------------------------
    def start(self) -> FakeOpenAI:
        fake = self

        class Handler(_Handler):
            server_fake = fake

        self._closing.clear()
        self._server = _Server((self._host, self._port), Handler)
        # stop() waits for the serve loop's next poll: at 50 ms every test's fake server
        # took ~35 ms to stop (over a thousand a suite run); 10 ms polls cost ~0.5 % of
        # a core while it runs.
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="fake-openai",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def served_sockets(self) -> set[int]:
        """Inodes of the sockets its handlers hold open (its side of each connection).

        It runs in the test's process, and a handler closes its socket when it notices the
        client's close, later on a loaded machine: a test counting the process's fds
        leaves these out, the client's side (the app's) is counted."""
        server = self._server
        if server is None:
            return set()
        with server.live_lock:
            sockets = list(server.live)
        inodes = set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                inodes.add(os.fstat(sock.fileno()).st_ino)
        return inodes

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FakeOpenAI is not running")
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self.port}/v1"

    # scripting -------------------------------------------------------------------------
    def script(self, *responses: Response) -> None:
        """Queue answers, one per /chat/completions request, in order."""
        with self._lock:
            self._queue.extend(responses)

    def script_embeddings(self, *responses: HTTPError | RawResponse | None) -> None:
        """Queue answers for /embeddings requests; None means a normal answer."""
        with self._lock:
            self._embedding_queue.extend(responses)

    @property
    def pending(self) -> int:
        """Scripted chat answers not consumed yet."""
        with self._lock:
            return len(self._queue)

    def clear(self) -> None:
        with self._lock:
            self._queue.clear()
            self._embedding_queue.clear()
            self.requests.clear()
            self.chat_requests.clear()
            self.embedding_requests.clear()
            self.responses_requests.clear()

    def wait_for_requests(self, n: int, timeout: float = 60.0) -> list[JSONObject]:
        """Block until at least `n` chat requests arrived; returns their bodies. `timeout`
        is a bound for a failing test, wide for a loaded machine, never a wait."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self.chat_requests) < n:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"expected {n} chat requests, got {len(self.chat_requests)}")
                self._changed.wait(remaining)
            return list(self.chat_requests)

    # used by the handler ---------------------------------------------------------------
    def _record(self, request: RecordedRequest) -> None:
        with self._changed:
            self.requests.append(request)
            if request.path == CHAT_PATH and isinstance(request.body, dict):
                self.chat_requests.append(request.body)
            elif request.path == EMBEDDINGS_PATH and isinstance(request.body, dict):
                self.embedding_requests.append(request.body)
            elif request.path == RESPONSES_PATH and isinstance(request.body, dict):
                self.responses_requests.append(request.body)
            self._changed.notify_all()

    def _next_chat(self, body: JSONObject) -> Response:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        if self.responder is not None:
            try:
                answer = self.responder(body)
            except Exception as exc:  # surface a broken test responder as a visible 500
                log.exception("[FAKE_OPENAI] responder failed")
                return HTTPError(500, _error_body(f"fake responder failed: {exc!r}", "responder"))
            if answer is not None:
                return answer
        return Reply("ok")

    def _next_embedding(self) -> HTTPError | RawResponse | None:
        with self._lock:
            return self._embedding_queue.popleft() if self._embedding_queue else None

    def _wait(self, gate: threading.Event) -> None:
        """Wait for a gate, but give up when the server stops so threads never leak."""
        while not gate.wait(0.05):
            if self._closing.is_set():
                raise _ServerClosing


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.live: set[socket.socket] = set()  # accepted and not closed yet
        self.live_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def get_request(self) -> tuple[socket.socket, Any]:
        request, address = super().get_request()
        with self.live_lock:
            self.live.add(request)
        return request, address

    def shutdown_request(self, request: Any) -> None:
        try:
            super().shutdown_request(request)
        finally:
            with self.live_lock:
                self.live.discard(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients hanging up (timeouts, cancelled streams, idle keep-alive) are normal here."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, _ServerClosing)):
            return
        log.exception("[FAKE_OPENAI] request from %s failed", client_address)


class _Handler(BaseHTTPRequestHandler):
    server_fake: FakeOpenAI
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        """Silence the stderr access log; tests read `fake.requests` instead."""

    # dispatch --------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _handle(self, method: str) -> None:
        fake = self.server_fake
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        path = self.path.split("?", 1)[0].rstrip("/")
        headers = {key.lower(): value for key, value in self.headers.items()}
        fake._record(RecordedRequest(method, path, headers, body))
        try:
            if fake.api_key is not None and (
                self.headers.get("Authorization") != f"Bearer {fake.api_key}"
            ):
                self._send_error(
                    HTTPError(401, _error_body("Incorrect API key provided.", "invalid_api_key"))
                )
            elif (method, path) == ("POST", CHAT_PATH):
                self._chat(body if isinstance(body, dict) else {})
            elif (method, path) == ("POST", RESPONSES_PATH) and fake.serves_responses:
                self._responses(body if isinstance(body, dict) else {})
            elif (method, path) == ("POST", EMBEDDINGS_PATH):
                self._embeddings(body if isinstance(body, dict) else {})
            elif (method, path) == ("GET", MODELS_PATH):
                data = [
                    {"id": m, "object": "model", "created": 0, "owned_by": "fake"}
                    for m in fake.models
                ]
                self._send_json(200, {"object": "list", "data": data})
            else:
                self._send_error(
                    HTTPError(404, _error_body(f"No route {method} {path}", "not_found"))
                )
        except (_ServerClosing, BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # chat ------------------------------------------------------------------------------
    def _chat(self, body: JSONObject) -> None:
        fake = self.server_fake
        model = str(body.get("model") or "")
        if fake.strict_models and model not in fake.models:
            self._send_error(
                HTTPError(
                    404,
                    _error_body(f"The model `{model}` does not exist.", "model_not_found"),
                )
            )
            return
        answer = fake._next_chat(body)
        if isinstance(answer, HTTPError):
            self._send_error(answer)
        elif isinstance(answer, RawResponse):
            self._send_raw(answer)
        elif body.get("stream"):
            self._stream_reply(answer, body)
        else:
            self._json_reply(answer, body)

    def _usage(self, reply: Reply, body: JSONObject) -> dict[str, int]:
        prompt = reply.prompt_tokens
        if prompt is None:
            prompt = estimate_tokens(json.dumps(body.get("messages") or []))
        completion = reply.completion_tokens
        if completion is None:
            produced = reply.text + reply.reasoning
            produced += "".join(c.name + c.arguments_text() for c in reply.tool_calls)
            completion = estimate_tokens(produced)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def _stream_reply(self, reply: Reply, body: JSONObject) -> None:
        fake = self.server_fake
        if reply.gate is not None:
            fake._wait(reply.gate)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        created = int(time.time())
        completion_id = f"chatcmpl-fake-{len(fake.chat_requests)}"
        model = str(body.get("model") or "fake")

        def event(choices: list[JSONObject], **extra: object) -> JSONObject:
            return {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": choices,
                **extra,
            }

        sent = 0
        started = time.monotonic()
        for delta, finish in _deltas(reply):
            if reply.cut_after is not None and sent >= reply.cut_after:
                self._cut()
                return
            if reply.stall_after is not None and sent == reply.stall_after:
                fake._wait(reply.stall_gate or threading.Event())
            if reply.rate:  # on a fixed schedule, so a slow write does not slow the rate
                time.sleep(max(0.0, started + sent / reply.rate - time.monotonic()))
            choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            self._write_sse(event([choice]))
            sent += 1
        if reply.cut_after is not None and sent >= reply.cut_after:
            self._cut()
            return
        options = body.get("stream_options") or {}
        if reply.usage and options.get("include_usage"):
            self._write_sse(event([], usage=self._usage(reply, body)))
        self._write_chunk(b"data: [DONE]\n\n")
        self._write_chunk(b"")

    def _json_reply(self, reply: Reply, body: JSONObject) -> None:
        fake = self.server_fake
        if reply.gate is not None:
            fake._wait(reply.gate)
        if reply.cut_after is not None:
            self._cut()
            return
        if reply.stall_after is not None:
            fake._wait(reply.stall_gate or threading.Event())
        message: JSONObject = {"role": "assistant", "content": reply.text}
        if reply.reasoning:
            message["reasoning_content"] = reply.reasoning
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": spec.id or f"call_{i}",
                    "type": "function",
                    "function": {"name": spec.name, "arguments": spec.arguments_text()},
                }
                for i, spec in enumerate(reply.tool_calls)
            ]
        payload: JSONObject = {
            "id": f"chatcmpl-fake-{len(fake.chat_requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model") or "fake"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": _finish_reason(reply),
                    "logprobs": None,
                }
            ],
        }
        if reply.usage:
            payload["usage"] = self._usage(reply, body)
        self._send_json(200, payload)

    # responses -------------------------------------------------------------------------
    def _responses(self, body: JSONObject) -> None:
        """The Responses API: the scripted reply as a `response` object, or (stream)
        as created / output_text.delta events / completed."""
        fake = self.server_fake
        answer = fake._next_chat(body)
        if isinstance(answer, HTTPError):
            self._send_error(answer)
            return
        if isinstance(answer, RawResponse):
            self._send_raw(answer)
            return
        response_id = f"resp_fake_{len(fake.responses_requests)}"
        output: list[JSONObject] = []
        if answer.text:
            part = {"type": "output_text", "text": answer.text, "annotations": []}
            output.append(
                {"type": "message", "id": "msg_fake", "status": "completed", "role": "assistant", "content": [part]}
            )
        for i, spec in enumerate(answer.tool_calls):
            output.append(
                {
                    "type": "function_call", "id": f"fc_fake_{i}", "call_id": spec.id or f"call_{i}",
                    "name": spec.name, "arguments": spec.arguments_text(), "status": "completed",
                }
            )
        usage = self._usage(answer, {"messages": body.get("input")})
        response = {
            "id": response_id, "object": "response", "created_at": int(time.time()),
            "status": "completed", "model": str(body.get("model") or "fake"), "output": output,
            "usage": {
                "input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
                "total_tokens": usage["total_tokens"],
                "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0},
            },
        }
        if not body.get("stream"):
            self._send_json(200, response)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        events: list[JSONObject] = [
            {"type": "response.created", "response": {**response, "status": "in_progress", "output": []}}
        ]
        events += [
            {"type": "response.output_text.delta", "item_id": "msg_fake", "output_index": 0,
             "content_index": 0, "delta": piece}
            for piece in _pieces(answer.text, answer.chunk_size)
        ]
        events.append({"type": "response.completed", "response": response})
        for number, event in enumerate(events):
            self._write_sse({**event, "sequence_number": number})
        self._write_chunk(b"")

    # embeddings ------------------------------------------------------------------------
    def _embeddings(self, body: JSONObject) -> None:
        fake = self.server_fake
        if fake.embedding_gate is not None:
            fake._wait(fake.embedding_gate)
        scripted = fake._next_embedding()
        if isinstance(scripted, HTTPError):
            self._send_error(scripted)
            return
        if isinstance(scripted, RawResponse):
            self._send_raw(scripted)
            return
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else [str(t) for t in inputs or []]
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for i, text in enumerate(texts):
            vec = hash_embedding(text)
            embedding: list[float] | str = vec
            if as_base64:
                embedding = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
            data.append({"object": "embedding", "index": i, "embedding": embedding})
        tokens = sum(estimate_tokens(t) for t in texts)
        self._send_json(
            200,
            {
                "object": "list",
                "data": data,
                "model": str(body.get("model") or "fake-embedding"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    # wire helpers ----------------------------------------------------------------------
    def _send_json(self, status: int, payload: object, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _send_error(self, error: HTTPError) -> None:
        if isinstance(error.body, str):
            data = error.body.encode()
            self.send_response(error.status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            for key, value in error.headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        else:
            self._send_json(error.status, error.body, error.headers)

    def _send_raw(self, raw: RawResponse) -> None:
        self.send_response(raw.status)
        self.send_header("Content-Type", raw.content_type)
        if raw.chunks:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(len(raw.body)))
        for key, value in raw.headers.items():
            self.send_header(key, value)
        self.end_headers()
        if raw.chunks:
            self.wfile.write(
                b"".join(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" for chunk in raw.chunks)
                + b"0\r\n\r\n"
            )
        else:
            self.wfile.write(raw.body)
        self.wfile.flush()

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _write_sse(self, payload: JSONObject) -> None:
        self._write_chunk(f"data: {json.dumps(payload)}\n\n".encode())

    def _cut(self) -> None:
        """Drop the connection mid-body, as a crashed proxy or server would."""
        self.close_connection = True
        self.wfile.flush()
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _error_body(message: str, code: str) -> JSONObject:
    return {"error": {"message": message, "type": "invalid_request_error", "code": code}}


def _finish_reason(reply: Reply) -> str:
    if reply.finish_reason is not None:
        return reply.finish_reason
    return "tool_calls" if reply.tool_calls else "stop"


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _deltas(reply: Reply) -> Iterator[tuple[JSONObject, str | None]]:
    """The choice deltas of a streamed reply; the first carries the role."""
    deltas: list[JSONObject] = []
    deltas += [{"reasoning_content": p} for p in _pieces(reply.reasoning, reply.chunk_size)]
    deltas += [{"content": p} for p in _pieces(reply.text, reply.chunk_size)]
    for i, spec in enumerate(reply.tool_calls):
        deltas.append(
            {
                "tool_calls": [
                    {
                        "index": i,
                        "id": spec.id or f"call_{i}",
                        "type": "function",
                        "function": {"name": spec.name, "arguments": ""},
                    }
                ]
            }
        )
        for piece in _pieces(spec.arguments_text(), reply.chunk_size):
            deltas.append({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    if not deltas:
        deltas.append({"content": ""})
    deltas[0] = {"role": "assistant", **deltas[0]}
    for delta in deltas:
        yield delta, None
    yield {}, _finish_reason(reply)


def main(
    argv: Sequence[str] | None = None,
    *,
    responder: Responder = echo_responder,
    prog: str = "python -m qwenmem_tui.testing.fake_openai",
) -> None:
    """Serve `responder` on 127.0.0.1 until Ctrl+C (the demo injects its own)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Serve a demo echo model over the OpenAI API on 127.0.0.1.",
    )
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    fake = FakeOpenAI(port=args.port)
    fake.responder = responder
    with fake:
        print(f"fake OpenAI server on {fake.base_url} (Ctrl+C stops)", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
