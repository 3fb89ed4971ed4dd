"""The HTTP daemon behind ``qwenmem serve`` (contract §7).

Starlette, not FastAPI: the daemon has six routes and hand-written validation, so a
small ASGI toolkit without pydantic request models keeps the error envelope entirely
ours (FastAPI's 422 shape would have to be undone route by route).

Security lives in one ASGI guard in front of every route (:mod:`.guard`); the routes
here read bodies through :func:`read_json_object` and :func:`text_field`, so a
malformed body of any kind is a 4xx envelope, never a 5xx.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute
from starlette.types import Receive, Scope, Send

from qwenmem_tui import secrets
from qwenmem_tui.chat.events import (
    AssistantDelta,
    ToolCallFinished,
    ToolCallStarted,
)
from qwenmem_tui.chat.session import ChatSession
from qwenmem_tui.chat.window import load_window
from qwenmem_tui.config import Settings
from qwenmem_tui.daemon.guard import (
    CLIENT_ID_HEADER,
    MAX_BODY_BYTES,
    Guard,
    GuardPolicy,
    allowed_host_names,
    error_response,
)
from qwenmem_tui.daemon import openapi as api
from qwenmem_tui.daemon.openapi import ApiRoute
from qwenmem_tui.daemon.peer import owner_only
from qwenmem_tui.daemon.proxy import Upstream, chat_completions, list_models
from qwenmem_tui.daemon.responses import responses
from qwenmem_tui.exchange import Exchange
from qwenmem_tui.features import registry
from qwenmem_tui.features.assembly import Assembly, SessionFeatures
from qwenmem_tui.features.feature import load_faces, load_function
from qwenmem_tui.llm.client import LLMClient, ToolCall
from qwenmem_tui.llm.local_server import LocalChatDefaults
from qwenmem_tui.llm.wire import JSONObject, Message
from qwenmem_tui.paths import Paths, private_dir, private_file, project_id
from qwenmem_tui.reply import ReplyCollector
from qwenmem_tui.runtime import ModelStarter, Runtime
from qwenmem_tui.storage.sessions import SessionInfo, SessionStore

log = logging.getLogger("qwenmem.daemon")

# Session ids end up in file names (debug/<id>.txt): no dots, no slashes.
SESSION_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")
SIDE_CALL_TIMEOUT_SECONDS = 60.0
SHUTDOWN_DRAIN_SECONDS = 5.0
# Open chats kept between prompts; the least recently used idle one is closed beyond
# this, so a long-running daemon serving many sessions does not grow without bound.
MAX_OPEN_CHATS = 32
MAX_TITLE_CHARS = 200
API_VERSION = 1


# Called once per session the daemon opens: hooks keep per-session state (surfaced
# memories, token gauge), and the daemon serves many sessions at once. The default
# asks the runtime for a fresh set, as the TUI does once; tests inject their own (e.g.
# one that fails).
FeatureFactory = Callable[["DaemonBackend", SessionInfo], Awaitable[SessionFeatures]]


async def assembled_features(backend: DaemonBackend, info: SessionInfo) -> SessionFeatures:
    """A session's features from the daemon's runtime: fresh hooks, the shared states."""
    return backend.runtime.session_features()


class ApiError(Exception):
    """An expected failure, answered with the §7 envelope ``{"error", "code", ...}``."""

    def __init__(self, status: int, code: str, message: str, **extra: object) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra

    def response(self) -> JSONResponse:
        return error_response(self.status, self.code, self.message, **self.extra)


def session_not_found(session_id: str) -> ApiError:
    return ApiError(
        404, "session_not_found", f'No session with id "{session_id}"', sessionId=session_id
    )


@dataclass(frozen=True)
class ServerOptions:
    """What ``qwenmem serve`` flags decide; defaults are the safe ones."""

    token: str | None = None
    allowed_origins: frozenset[str] = frozenset()
    allowed_hosts: frozenset[str] = frozenset()
    """Host names accepted besides the bound address and the localhost names."""
    max_body_bytes: int = MAX_BODY_BYTES
    side_call_timeout: float = SIDE_CALL_TIMEOUT_SECONDS
    """The backstop of a feature's route that asks the model aside: no answer by then
    is answered as nothing to say."""
    owner_uid: int | None = None
    """Without a token: the uid whose loopback connections are served (`daemon/peer.py`)."""
    proxy_extract: bool = False
    """Extract memories from replies the OpenAI-compatible proxy relays (off: a proxy's
    clients did not ask qwenmem to learn from their conversations)."""

    def guard_policy(self) -> GuardPolicy:
        """What the guard enforces: these options, the host names with the localhost
        ones added and normalised as a Host header is."""
        return GuardPolicy(
            token=self.token,
            allowed_origins=self.allowed_origins,
            allowed_hosts=allowed_host_names(self.allowed_hosts),
            max_body_bytes=self.max_body_bytes,
        )


class DaemonBackend:
    """The state routes share: the runtime (database, LLM client, features) and one
    chat per session.

    A session's ``ChatSession`` (and its hooks' state) lives as long as the daemon,
    as in the TUI; its items are reloaded from the database before every query, so
    turns the TUI added in between are part of the history.
    """

    def __init__(
        self,
        *,
        settings: Settings,
        paths: Paths,
        project_root: Path,
        llm: LLMClient | None = None,
        start_model: ModelStarter | None = None,
        features: Collection[str] | None = None,
        session_features: FeatureFactory = assembled_features,
        model_defaults: LocalChatDefaults | None = None,
        proxy_extract: bool = False,
    ) -> None:
        self.settings = settings
        self._proxy_extract = proxy_extract
        self._upstream: Upstream | None = None
        # The bundled local model: its short system prompt, and no tools it cannot call.
        self.model_defaults = model_defaults
        self.paths = paths
        self.project_root = project_root
        self.project = project_id(project_root)
        self._llm = llm
        self._start_model = start_model
        self._feature_names = features  # None: what the settings turn on
        self._session_features = session_features
        self._runtime: Runtime | None = None
        self._chats: OrderedDict[str, ChatSession] = OrderedDict()
        self._features: dict[str, SessionFeatures] = {}  # of the open chats
        self._locks: dict[str, asyncio.Lock] = {}
        self._started = False
        self._closed = False

    @property
    def started(self) -> bool:
        """``start`` went through (a failed one leaves this False)."""
        return self._started

    async def start(self) -> None:
        """Open everything a request needs; raises StartupError (one line naming the
        file) instead of serving errors. ``qwenmem serve`` awaits it before it says it
        is listening."""
        self._runtime = await Runtime.open(
            self.settings,
            self.paths,
            self.project_root,
            llm=self._llm,
            start_model=self._start_model,
            features=self._feature_names,
            model_defaults=self.model_defaults,
            # Open before serving: a broken store fails the start, and so does a page
            # damaged deep in the file (else a failed request, days later).
            wait_ready=True,
            check_integrity=True,
            notice=lambda text: log.warning("[DAEMON] %s", text),
        )
        llm = self._runtime.llm
        self._upstream = Upstream(
            llm.base_url,
            llm.api_key,
            model=llm.model,
            project=self.project,
            timeout=self.settings.llm.timeout,
            exchange=self._exchange(),
        )
        self._started = True

    def _exchange(self) -> Exchange | None:
        """What the proxy adds to the conversations it relays: the exchange the running
        features offer (`Feature.exchange`), None when none runs."""
        runtime = self.runtime
        for feature in runtime.assembly.registered:
            if feature.exchange is not None and runtime.assembly.runs(feature.name):
                exchange = load_function(feature.exchange)(runtime, extract=self._proxy_extract)
                if exchange is not None and not isinstance(exchange, Exchange):
                    raise TypeError(f"{feature.exchange} made a {type(exchange).__name__}, not an Exchange")
                return exchange
        return None

    async def close(self) -> None:
        """Release what ``start`` opened, even a part of it; a second call does nothing
        (and does not suspend: it may run in a task being cancelled by Ctrl+C)."""
        if self._closed:
            return
        self._closed = True
        # Let extraction of the last turns finish (bounded) before the service closes.
        extractions = [features.drain() for features in self._features.values()]
        if extractions:
            try:
                async with asyncio.timeout(SHUTDOWN_DRAIN_SECONDS):
                    await asyncio.gather(*extractions)
            except TimeoutError:
                log.warning("[DAEMON] background work still running at shutdown; dropped")
        for chat in self._chats.values():
            await chat.close()
        self._chats.clear()
        self._features.clear()
        if self._upstream is not None:
            await self._upstream.aclose()
        if self._runtime is not None:
            await self._runtime.close()

    @property
    def runtime(self) -> Runtime:
        """What the daemon opened: database, LLM client, features (as the TUI's)."""
        assert self._runtime is not None, "DaemonBackend.start() was not awaited"
        return self._runtime

    @property
    def store(self) -> SessionStore:
        return self.runtime.store

    @property
    def upstream(self) -> Upstream:
        """The OpenAI-compatible proxy's endpoint and exchange."""
        assert self._upstream is not None, "DaemonBackend.start() was not awaited"
        return self._upstream

    @property
    def assembly(self) -> Assembly:
        """What builds each session's features (the same assembly the TUI uses)."""
        return self.runtime.assembly

    @property
    def llm(self) -> LLMClient:
        return self.runtime.llm

    def chat(self, session_id: str) -> ChatSession | None:
        """The session's open chat, if a query opened it."""
        return self._chats.get(session_id)

    def lock_for(self, session_id: str) -> asyncio.Lock:
        return self._locks.setdefault(session_id, asyncio.Lock())

    async def require_session(self, session_id: str) -> SessionInfo:
        """The session, or the 404 envelope; ids of other projects are not visible."""
        if not SESSION_ID_PATTERN.fullmatch(session_id):
            raise session_not_found(session_id)
        info = await self.store.get_session(session_id)
        if info is None or info.project != self.project:
            raise session_not_found(session_id)
        return info

    async def chat_for_query(self, info: SessionInfo) -> ChatSession:
        """The session's chat, with tools and feature hooks, its items as stored now:
        read again when another process wrote to the session since (its stored count
        or time moved past the chat's own), kept as held otherwise — re-reading a long
        session before every prompt cost O(items).

        Call with the session's lock held.
        """
        chat = self._chats.get(info.id)
        if chat is None:
            features = await self._session_features(self, info)
            chat = await self.runtime.open_chat(info, features=features)
            self._chats[info.id] = chat
            self._features[info.id] = features
            await self._close_idle_chats()
        else:
            self._chats.move_to_end(info.id)
            written = (info.message_count, info.updated_at) != (chat.info.message_count, chat.info.updated_at)
            chat.info = info
            if written:
                await chat.reload()
        return chat

    async def _close_idle_chats(self) -> None:
        """Close the least recently used chats beyond MAX_OPEN_CHATS, never a busy one."""
        for session_id in list(self._chats):
            if len(self._chats) <= MAX_OPEN_CHATS:
                return
            if self.lock_for(session_id).locked():
                continue
            # The lock stays: a request may hold a reference to it already.
            await self._chats.pop(session_id).close()
            self._features.pop(session_id, None)

    async def delete_session(self, info: SessionInfo) -> Path:
        """Close the session's chat, keep a JSON copy in the trash, delete it; the copy's
        path. Call with the session's lock held."""
        chat = self._chats.pop(info.id, None)
        self._features.pop(info.id, None)
        if chat is not None:
            await chat.close()
        items = await self.store.load_items(info.id)
        trash = self.paths.home / "trash"
        private_dir(trash)
        copy = trash / f"session-{info.id}.json"
        payload = {
            "session": dataclasses.asdict(info),
            "items": [dataclasses.asdict(item) for item in items],
        }
        await asyncio.to_thread(_write_private, copy, json.dumps(payload, ensure_ascii=False))
        await self.store.delete_session(info.id)
        return copy

    async def history(self, info: SessionInfo) -> list[Message]:
        """The model view (after the last /clear, summaries folded), as the TUI sees it:
        read from the stored items, no chat opened."""
        held = await load_window(self.store, info.id)
        return self.runtime.model_view(held.view_source())


def _write_private(path: Path, text: str) -> None:
    private_file(path)
    path.write_text(text, encoding="utf-8")


# -- request helpers ---------------------------------------------------------------


def backend_of(request: Request) -> DaemonBackend:
    backend: DaemonBackend = request.app.state.backend  # Starlette's state is untyped
    return backend


JSON_WHITESPACE = b" \t\r\n"
"""The only whitespace JSON allows (RFC 8259 §2)."""


async def read_json_object(request: Request, *, required: bool) -> JSONObject:
    """The body as a JSON object; an empty body is ``{}`` unless ``required``."""
    raw = await request.body()
    if not raw.strip(JSON_WHITESPACE):  # bytes.strip() would also take \f and \v: not JSON
        if required:
            raise ApiError(400, "invalid_json", "Invalid JSON in request body")
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        # ValueError covers bytes that are not UTF-8/16/32 and over-long integers;
        # RecursionError is the C parser refusing to nest deeper than the stack allows
        # (`[` x 100,000): a client's mistake like any other, not a server fault.
        raise ApiError(400, "invalid_json", "Invalid JSON in request body") from None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_request", "Request body must be a JSON object")
    return body


def text_field(
    body: JSONObject, name: str, *, required: bool, max_chars: int | None = None
) -> str:
    """``body[name]`` as text the database and the model can take, else a 400.

    JSON's ``\\ud800`` escapes decode to lone surrogates, which no UTF-8 encoder (SQLite,
    the HTTP client to the model) accepts: they are refused here, not deep inside.
    """
    value = body.get(name)
    if value is None and not required:
        return ""
    limit = f" of at most {max_chars} characters" if max_chars is not None else ""
    problem = f'"{name}" must be a {"non-empty " if required else ""}string{limit}'
    if not isinstance(value, str) or (required and not value.strip()):
        raise ApiError(400, "invalid_request", problem)
    if max_chars is not None and len(value) > max_chars:
        raise ApiError(400, "invalid_request", problem)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(
            400, "invalid_request", f'"{name}" is not valid Unicode text (a lone surrogate)'
        ) from None
    return value


def session_json(info: SessionInfo) -> JSONObject:
    return {
        "sessionId": info.id,
        "title": info.title,
        "createdAt": info.created_at,
        "updatedAt": info.updated_at,
        "messageCount": info.message_count,
    }


def client_id_of(request: Request) -> str | None:
    # Already validated by the guard; absent means "anonymous".
    return request.headers.get(CLIENT_ID_HEADER)


# -- routes ------------------------------------------------------------------------


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def capabilities(request: Request) -> Response:
    return JSONResponse({"v": API_VERSION, "features": request.app.state.capabilities})


async def openapi(request: Request) -> Response:
    return JSONResponse(request.app.state.openapi)


async def create_session(request: Request) -> Response:
    body = await read_json_object(request, required=False)
    title = text_field(body, "title", required=False, max_chars=MAX_TITLE_CHARS)
    backend = backend_of(request)
    info = await backend.store.create_session(backend.project, title)
    log.info("[DAEMON] created session %s client=%s", info.id, client_id_of(request))
    return JSONResponse(session_json(info), status_code=201)


async def list_sessions(request: Request) -> Response:
    backend = backend_of(request)
    sessions = await backend.store.list_sessions(backend.project)
    return JSONResponse({"sessions": [session_json(info) for info in sessions]})


async def prompt(request: Request) -> Response:
    backend = backend_of(request)
    session_id = request.path_params["session_id"]
    info = await backend.require_session(session_id)
    body = await read_json_object(request, required=True)
    # No one to ask, as the TUI does: a secret is cut before the model, the session
    # history or the log can see it, and the answer says what was cut.
    raw = text_field(body, "text", required=True)
    text, redacted = await asyncio.to_thread(secrets.redact_message, raw)

    lock = backend.lock_for(info.id)
    if lock.locked():
        raise ApiError(
            409, "session_busy", "A prompt is already running in this session", sessionId=info.id
        )
    streaming = "text/event-stream" in request.headers.get("accept", "")
    log.info(
        "[DAEMON] prompt session=%s client=%s stream=%s",
        info.id,
        client_id_of(request),
        streaming,
    )
    if streaming:
        await lock.acquire()
        return _LockedStream(
            _sse_events(backend, info, text, redacted),
            lock=lock,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
    async with lock:
        reply = ReplyCollector()
        chat = await backend.chat_for_query(info)
        async for event in chat.run_query(text):
            await reply.handle(event)
    if reply.status == "error":
        raise ApiError(
            502, "llm_error", reply.error or "The model request failed", sessionId=info.id
        )
    answer = {"sessionId": info.id, "reply": reply.text, "status": reply.status, "memories": reply.memories}
    if redacted:
        answer["redactedSecrets"] = redacted
    return JSONResponse(answer)


async def session_messages(request: Request) -> Response:
    """GET /session/{id}/messages: the stored transcript, every chat message in order
    (OpenAI dicts, /clear and summaries do not hide earlier ones)."""
    backend = backend_of(request)
    info = await backend.require_session(request.path_params["session_id"])
    items = await backend.store.load_items(info.id)
    messages = [
        {**item.message, "createdAt": item.created_at} for item in items if item.message is not None
    ]
    return JSONResponse({"sessionId": info.id, "messages": messages})


async def delete_session(request: Request) -> Response:
    """DELETE /session/{id}: gone from the store, a JSON copy kept in the trash folder
    ($QWENMEM_HOME/trash) so a mistaken delete can be recovered."""
    backend = backend_of(request)
    info = await backend.require_session(request.path_params["session_id"])
    lock = backend.lock_for(info.id)
    if lock.locked():
        raise ApiError(409, "session_busy", "A prompt is running in this session", sessionId=info.id)
    async with lock:
        kept = await backend.delete_session(info)
    log.info("[DAEMON] deleted session %s client=%s copy=%s", info.id, client_id_of(request), kept)
    return JSONResponse({"sessionId": info.id, "deleted": True, "copy": str(kept)})


# -- prompt plumbing ---------------------------------------------------------------


class _StreamedReply(ReplyCollector):
    """The reply, and the SSE events a streaming client sees on the way (contract §7)."""

    def __init__(self) -> None:
        super().__init__()
        self._frames: list[bytes] = []

    def frames(self) -> list[bytes]:
        """The events to send since the last call."""
        frames, self._frames = self._frames, []
        return frames

    async def assistant_delta(self, event: AssistantDelta) -> None:
        await super().assistant_delta(event)
        if event.text:
            self._frames.append(_sse("delta", {"text": event.text}))

    async def tool_call_started(self, event: ToolCallStarted) -> None:
        self._frames.append(_sse("tool_call", _tool_call_json(event.call)))

    async def tool_call_finished(self, event: ToolCallFinished) -> None:
        result = {"result": event.result, "isError": event.is_error}
        self._frames.append(_sse("tool_result", {**_tool_call_json(event.call), **result}))


def _sse(event: str, data: JSONObject) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


async def _sse_events(
    backend: DaemonBackend, info: SessionInfo, text: str, redacted: list[str]
) -> AsyncIterator[bytes]:
    reply = _StreamedReply()
    if redacted:
        yield _sse("redacted", {"sessionId": info.id, "redactedSecrets": redacted})
    try:
        chat = await backend.chat_for_query(info)
        async for event in chat.run_query(text):
            await reply.handle(event)
            for frame in reply.frames():
                yield frame
    except Exception:
        # The status line is sent already: the failure travels as an event, the
        # traceback to the log.
        log.exception("[DAEMON] streamed prompt failed session=%s", info.id)
        yield _sse("error", {"error": "Internal error", "code": "internal", "sessionId": info.id})
        return
    if reply.status == "error":
        error = reply.error or "The model request failed"
        yield _sse("error", {"error": error, "code": "llm_error", "sessionId": info.id})
        return
    done = {"sessionId": info.id, "reply": reply.text, "status": reply.status}
    yield _sse("done", {**done, "memories": reply.memories})


def _tool_call_json(call: ToolCall) -> JSONObject:
    return {"id": call.id, "name": call.name, "arguments": call.arguments}


class _LockedStream(StreamingResponse):
    """A stream that releases the session lock however it ends.

    The release cannot live in the generator's ``finally``: a client that disconnects
    before the first chunk leaves the generator unstarted, so that block never runs.
    """

    def __init__(
        self, content: AsyncIterator[bytes], *, lock: asyncio.Lock, **kwargs: Any
    ) -> None:
        super().__init__(content, **kwargs)
        self._lock = lock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._lock.release()


# -- the app -----------------------------------------------------------------------


def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return error_response(exc.status_code, code, str(exc.detail))


def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


_SESSION_SCHEMA: JSONObject = {
    "type": "object",
    "required": ["sessionId", "title", "createdAt", "updatedAt", "messageCount"],
    "properties": {
        "sessionId": {"type": "string"},
        "title": {"type": "string"},
        "createdAt": {"type": "number", "description": "unix seconds"},
        "updatedAt": {"type": "number", "description": "unix seconds"},
        "messageCount": {"type": "integer"},
    },
}
_OPENAI_ERROR_SCHEMA: JSONObject = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}
_PROJECT = {
    "name": "X-Qwenmem-Project",
    "in": "header",
    "required": False,
    "schema": {"type": "string"},
    "description": "Absolute path of the project whose records are recalled (its git root "
    "counts); default: the daemon's project.",
}
_BAD_BODY = api.error("invalid_json | invalid_request | invalid_client_id")
_NOT_FOUND = api.error("session_not_found")
SSE_EVENT: JSONObject = {
    "type": "object",
    "description": "One server-sent event (before OpenAPI 3.2, an event stream's schema "
    "describes each event, as its readers validate it): its data, and its name if any",
    "properties": {
        "event": {"type": "string"},
        "data": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
}


def _openai_error(description: str) -> JSONObject:
    return api.json_response(api.ref("OpenAIError"), description)


def _object(required: list[str], properties: JSONObject) -> JSONObject:
    return {"type": "object", "required": required, "properties": properties}


def _proxied(answer: str) -> JSONObject:
    """The answers of a route of the OpenAI-compatible proxy: `answer` with the
    X-Qwenmem-Memories header, or an error in OpenAI's shape."""
    return {
        "200": {
            "description": f"{answer}; the header X-Qwenmem-Memories lists the ids of the "
            "memories added (comma-separated)",
            "headers": {"X-Qwenmem-Memories": {"schema": {"type": "string"}}},
            "content": {
                "application/json": {"schema": {"type": "object"}},
                "text/event-stream": {"schema": SSE_EVENT},
            },
        },
        "400": _openai_error("invalid_request_error: the client's mistake"),
        "401": _openai_error("authentication_error: the daemon's token"),
        "4XX": _openai_error("the upstream's own error, status kept"),
        "502": _openai_error("upstream_unavailable"),
        "504": _openai_error("upstream_timeout"),
        "5XX": _openai_error("the upstream's own error, status kept"),
    }


_SESSIONS = {"Session": _SESSION_SCHEMA}
_PROXY = {"OpenAIError": _OPENAI_ERROR_SCHEMA}
_PROMPT_ANSWER = _object(
    ["sessionId", "reply"],
    {
        "sessionId": {"type": "string"},
        "reply": {"type": "string"},
        "status": {"enum": ["ok", "turn_cap", "context_limit", "cancelled"]},
        "memories": {
            "description": "The memories the reply's requests carried (its receipt)",
            "type": "array",
            "items": _object(
                ["id", "key", "value"],
                {"id": {"type": "integer"}, "key": {"type": "string"}, "value": {"type": "string"}},
            ),
        },
    },
)


def _session_links(*operations: str, source: str = "$request.path.session_id") -> JSONObject:
    """OpenAPI links to the session routes that take the session id from `source`: a
    client (and schemathesis' stateful phase) can follow create -> prompt -> messages ->
    delete on one real session."""
    return {op: {"operationId": op, "parameters": {"session_id": source}} for op in operations}


ROUTES: list[ApiRoute] = [
    ApiRoute(
        "/health",
        "GET",
        health,
        {
            "summary": "Liveness; never needs a token",
            "security": [],
            "responses": {
                "200": api.json_response(
                    {"type": "object", "properties": {"status": {"const": "ok"}}}, "Alive"
                )
            },
        },
    ),
    ApiRoute(
        "/capabilities",
        "GET",
        capabilities,
        {
            "summary": "Protocol version and feature tags",
            "responses": {
                "200": api.json_response(
                    _object(
                        ["v", "features"],
                        {"v": {"const": 1}, "features": {"type": "array", "items": {"type": "string"}}},
                    ),
                    "The tags of the routes served (a feature's routes bring its own)",
                ),
                **api.COMMON_ERRORS,
            },
        },
    ),
    ApiRoute(
        "/openapi.json",
        "GET",
        openapi,
        {
            "summary": "This document",
            "responses": {"200": {"description": "OpenAPI 3.1 document"}, **api.COMMON_ERRORS},
        },
    ),
    ApiRoute(
        "/session",
        "POST",
        create_session,
        {
            "summary": "Create a session in the daemon's project",
            "operationId": "createSession",
            "parameters": [api.CLIENT_ID],
            "requestBody": api.json_body(
                {"type": "object", "properties": {"title": {"type": ["string", "null"], "maxLength": 200, "description": "null or absent: untitled"}}},
                required=False,
            ),
            "responses": {
                "201": {
                    **api.json_response(api.ref("Session"), "Created"),
                    "links": _session_links(
                        "promptSession", "sessionMessages", "deleteSession", source="$response.body#/sessionId"
                    ),
                },
                "413": api.error("body_too_large"),
                **api.COMMON_ERRORS,
                "400": _BAD_BODY,
            },
        },
        schemas=_SESSIONS,
        capabilities=("sessions",),
    ),
    ApiRoute(
        "/sessions",
        "GET",
        list_sessions,
        {
            "summary": "Sessions of the daemon's project, newest first",
            "responses": {
                "200": {
                    **api.json_response(
                        _object(["sessions"], {"sessions": {"type": "array", "items": api.ref("Session")}}),
                        "Sessions",
                    ),
                    # No parameter to carry: a session list leads to a new session.
                    "links": {"createSession": {"operationId": "createSession"}},
                },
                **api.COMMON_ERRORS,
            },
        },
        schemas=_SESSIONS,
    ),
    # ":path" so an encoded slash ("s%2F1") still reaches the handler and gets the
    # session_not_found envelope instead of the router's bare 404.
    ApiRoute(
        "/session/{session_id:path}/prompt",
        "POST",
        prompt,
        {
            "summary": "Run one query through the chat loop (tools, the features' hooks); SSE with "
            "Accept: text/event-stream (events delta, tool_call, tool_result, done, error)",
            "operationId": "promptSession",
            "parameters": [api.SESSION_ID, api.CLIENT_ID],
            "requestBody": api.json_body(
                _object(["text"], {"text": {"type": "string", "minLength": 1}})
            ),
            "responses": {
                "200": {
                    "description": "The final reply (JSON) or an event stream",
                    "links": _session_links("promptSession", "sessionMessages", "deleteSession"),
                    "content": {
                        "application/json": {"schema": _PROMPT_ANSWER},
                        "text/event-stream": {"schema": SSE_EVENT},
                    },
                },
                **api.COMMON_ERRORS,
                "400": _BAD_BODY,
                "404": _NOT_FOUND,
                "409": api.error("session_busy: another prompt is running in this session"),
                "413": api.error("body_too_large"),
                "502": api.error("llm_error: the model request failed"),
            },
        },
        capabilities=("prompt", "prompt_stream"),
    ),
    ApiRoute(
        "/session/{session_id:path}/messages",
        "GET",
        session_messages,
        {
            "summary": "The session's stored chat messages, in order (OpenAI dicts plus "
            "createdAt); /clear and summaries hide none",
            "operationId": "sessionMessages",
            "parameters": [api.SESSION_ID],
            "responses": {
                "200": {
                    **api.json_response(
                        _object(
                            ["sessionId", "messages"],
                            {
                                "sessionId": {"type": "string"},
                                "messages": {"type": "array", "items": {"type": "object"}},
                            },
                        ),
                        "Messages",
                    ),
                    "links": _session_links("promptSession", "deleteSession"),
                },
                **api.COMMON_ERRORS,
                "404": _NOT_FOUND,
            },
        },
    ),
    ApiRoute(
        "/session/{session_id:path}",
        "DELETE",
        delete_session,
        {
            "summary": "Delete a session of the daemon's project; a JSON copy is kept in "
            "$QWENMEM_HOME/trash for recovery",
            "operationId": "deleteSession",
            "parameters": [api.SESSION_ID, api.CLIENT_ID],
            "responses": {
                "200": {
                    **api.json_response(
                        _object(
                            ["sessionId", "deleted"],
                            {
                                "sessionId": {"type": "string"},
                                "deleted": {"const": True},
                                "copy": {"type": "string", "description": "the kept copy"},
                            },
                        ),
                        "Deleted",
                    ),
                    "links": _session_links("sessionMessages", "promptSession", "deleteSession"),
                },
                **api.COMMON_ERRORS,
                "404": _NOT_FOUND,
                "409": api.error("session_busy: a prompt is running in this session"),
            },
        },
    ),
    ApiRoute(
        "/v1/chat/completions",
        "POST",
        chat_completions,
        {
            "summary": "OpenAI-compatible chat completions, forwarded to the configured "
            "[llm] endpoint with the §6 block recalled for the last user message added "
            "(contract §9); stream: true answers with the upstream's SSE",
            "parameters": [_PROJECT],
            "requestBody": api.json_body(
                _object(
                    ["messages"],
                    {
                        "model": {"type": "string"},
                        "messages": {"type": "array", "minItems": 1},
                        "stream": {"type": "boolean"},
                        "tools": {"type": "array"},
                    },
                )
            ),
            "responses": _proxied("The upstream's completion, unchanged"),
        },
        schemas=_PROXY,
        capabilities=("openai_proxy",),
    ),
    ApiRoute(
        "/v1/models",
        "GET",
        list_models,
        {
            "summary": "The upstream's models (the configured model when it lists none)",
            "responses": {
                "200": api.json_response({"type": "object"}, "OpenAI's model list"),
                "401": _openai_error("authentication_error: the daemon's token"),
                "502": _openai_error("upstream_unavailable"),
            },
        },
        schemas=_PROXY,
    ),
    ApiRoute(
        "/v1/responses",
        "POST",
        responses,
        {
            "summary": "The OpenAI Responses API with the §6 block recalled for the latest user "
            "message added (contract §16): forwarded when the [llm] endpoint serves it, else "
            "translated onto its chat completions (text, function calls, usage; "
            "previous_response_id kept by the proxy); stream: true answers with SSE events",
            "parameters": [_PROJECT],
            "requestBody": api.json_body(
                _object(
                    ["input"],
                    {
                        "model": {"type": "string"},
                        "input": {"type": ["string", "array"]},
                        "instructions": {"type": "string"},
                        "previous_response_id": {"type": "string"},
                        "stream": {"type": "boolean"},
                        "tools": {"type": "array"},
                    },
                )
            ),
            "responses": {
                **_proxied("A response object (or its stream of events)"),
                "400": _openai_error(
                    "invalid_request_error: the client's mistake, or what the translation cannot carry"
                ),
                "404": _openai_error("previous_response_not_found"),
            },
        },
        schemas=_PROXY,
        capabilities=("openai_responses",),
    ),
]
"""The daemon's own routes; the features' come from their registrations (`routes`)."""


def api_routes() -> list[ApiRoute]:
    """Every route served, with its operation: the daemon's, then each feature's
    (`Feature.routes`, read from the registry at call time: a feature with routes is
    one line there)."""
    offered = (load_faces(f.routes, ApiRoute) for f in registry.FEATURES if f.routes is not None)
    return [*ROUTES, *(route for feature_routes in offered for route in feature_routes)]


def routes() -> list[BaseRoute]:
    """The Starlette routes of `api_routes()`."""
    return [route.route() for route in api_routes()]


def capability_tags(declared: Sequence[ApiRoute]) -> list[str]:
    """What `/capabilities` lists: the routes' tags, each once, in route order."""
    return list(dict.fromkeys(tag for route in declared for tag in route.capabilities))


def create_app(
    settings: Settings,
    paths: Paths,
    *,
    project_root: Path,
    options: ServerOptions = ServerOptions(),
    llm: LLMClient | None = None,
    start_model: ModelStarter | None = None,
    features: Collection[str] | None = None,
    session_features: FeatureFactory = assembled_features,
    model_defaults: LocalChatDefaults | None = None,
) -> Starlette:
    """The daemon app; ``llm`` is injected by tests, ``start_model`` starts the bundled
    model (`runtime.local_model_starter`), otherwise the client is built from settings.

    ``features``: the names to assemble (`qwenmem_tui.features`); None, the ones the
    settings turn on. ``session_features`` builds one session's (tests inject a failing one).
    """
    backend = DaemonBackend(
        settings=settings,
        paths=paths,
        project_root=project_root,
        llm=llm,
        start_model=start_model,
        features=features,
        session_features=session_features,
        model_defaults=model_defaults,
        proxy_extract=options.proxy_extract,
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # `qwenmem serve` starts the backend itself, before it says it is listening;
        # an app run by anything else (tests, another ASGI server) starts it here.
        if not backend.started:
            await backend.start()
        app.state.upstream = backend.upstream
        try:
            yield
        finally:
            await backend.close()

    declared = api_routes()
    app = Starlette(
        routes=[route.route() for route in declared],
        middleware=[Middleware(Guard, policy=options.guard_policy()), *owner_only(options.owner_uid)],
        exception_handlers={HTTPException: _http_error, ApiError: _api_error},
        lifespan=lifespan,
    )
    app.state.backend = backend
    app.state.options = options
    app.state.capabilities = capability_tags(declared)
    app.state.openapi = api.document(declared)
    return app
