"""The OpenAI-compatible proxy of ``qwenmem serve`` (contract §9).

Any OpenAI client gets what qwenmem adds by pointing its base URL at the daemon:
``POST /v1/chat/completions`` (streamed or not) and ``GET /v1/models`` are forwarded to
the configured ``[llm]`` endpoint with the upstream key, which never leaves qwenmem
(the client's bearer is the daemon's token). What the proxy changes is the request's
messages, and only by the §6 block the running feature's exchange adds
(``exchange.Exchange``, offered by a registration's ``exchange``); the upstream's
answer comes back as its bytes — ids, usage, tool_calls, finish_reason unchanged.
Tools the client defines are the client's: the proxy adds none and executes none.

Errors speak OpenAI's shape (``{"error": {"message", "type", "param", "code"}}``): a
client's mistake is a 4xx, an upstream error keeps its status and body, an upstream
that cannot be reached is a 502 (504 on a timeout). No traceback reaches the client.
"""

from __future__ import annotations

import json
import logging
import os
from collections import OrderedDict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from qwenmem_tui.exchange import Exchange, Shaped
from qwenmem_tui.llm.wire import JSONObject, Message, wire_json
from qwenmem_tui.paths import project_id, project_root

log = logging.getLogger("qwenmem.daemon")

PROJECT_HEADER = "x-qwenmem-project"
_PATH_MAX = 4096  # Linux PATH_MAX; longer is refused before the file system sees it
MEMORIES_HEADER = "X-Qwenmem-Memories"
# Upstream answer headers worth passing on (ids for support tickets, rate limits).
_PASSED_HEADERS = ("x-request-id", "retry-after", "openai-processing-ms", "openai-version")
_PASSED_PREFIXES = ("x-ratelimit-",)


class ProxyError(Exception):
    """A failure answered in OpenAI's error shape."""

    def __init__(self, status: int, message: str, *, kind: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.code = code

    def response(self) -> JSONResponse:
        return openai_error(self.status, self.message, kind=self.kind, code=self.code)


class WireJSONResponse(JSONResponse):
    """A JSON answer whose text may carry what a client or the endpoint sent: a lone
    surrogate in it is written as its escape (``wire_json``), never a 500 (e2e10: a
    translated Responses answer echoing ``"\\ud800"``)."""

    def render(self, content: object) -> bytes:
        return wire_json(content).encode("utf-8")


def openai_error(status: int, message: str, *, kind: str, code: str | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return JSONResponse(body, status_code=status)


def invalid_request(message: str, code: str = "invalid_request") -> ProxyError:
    return ProxyError(400, message, kind="invalid_request_error", code=code)


class Upstream:
    """The configured endpoint with its key, the proxy's exchange, the daemon's project."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        model: str,
        project: str,
        timeout: float,
        exchange: Exchange | None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.project = project
        self.exchange = exchange
        self.serves_responses: bool | None = None
        """Whether the endpoint has the Responses API (None: not asked yet); without
        it `/v1/responses` is translated onto its chat completions (`responses.py`)."""
        self.kept_responses: OrderedDict[str, list[Message]] = OrderedDict()
        """The conversation of each response the proxy translated, by its id, for a
        later request's `previous_response_id` (the endpoint kept none of it)."""
        self._client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            # Redirects would carry the key elsewhere; the upstream's own answer is final.
            follow_redirects=False,
        )

    async def aclose(self) -> None:
        if self.exchange is not None:
            await self.exchange.close()
        await self._client.aclose()

    async def send(self, method: str, path: str, body: JSONObject | None) -> httpx.Response:
        """The upstream's response, its body not read yet; ProxyError when unreachable."""
        request = self._client.build_request(
            method,
            f"{self.base_url}{path}",
            # ASCII escapes: a lone surrogate the client sent (valid JSON) goes on as sent.
            content=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"} if body is not None else None,
        )
        try:
            return await self._client.send(request, stream=True)
        except httpx.TimeoutException:
            raise ProxyError(504, "The model endpoint did not answer in time", kind="upstream_timeout") from None
        except httpx.HTTPError as exc:
            log.warning("[PROXY] upstream %s unreachable: %s", self.base_url, exc)
            raise ProxyError(
                502, "The model endpoint configured in qwenmem cannot be reached", kind="upstream_unavailable"
            ) from None


def passed_headers(response: httpx.Response) -> dict[str, str]:
    return {
        name: value
        for name, value in response.headers.items()
        if name.lower() in _PASSED_HEADERS or name.lower().startswith(_PASSED_PREFIXES)
    }


async def upstream_error(response: httpx.Response) -> Response:
    """An upstream error with its status; its body kept when it is OpenAI's shape."""
    try:
        raw = await response.aread()
    finally:
        await response.aclose()
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    headers = passed_headers(response)
    if isinstance(body, dict) and isinstance(body.get("error"), (dict, str)):
        error = body["error"]
        if isinstance(error, str):  # some servers say {"error": "text"}: OpenAI's shape
            body = {"error": {"message": error, "type": "upstream_error", "param": None, "code": None}}
        return WireJSONResponse(body, status_code=response.status_code, headers=headers)
    text = raw.decode("utf-8", "replace").strip()[:500] or response.reason_phrase
    answer = openai_error(response.status_code, f"The model endpoint answered: {text}", kind="upstream_error")
    answer.headers.update(headers)
    return answer


def upstream_of(request: Request) -> Upstream:
    upstream: Upstream = request.app.state.upstream  # Starlette's state is untyped
    return upstream


def request_project(request: Request, upstream: Upstream) -> str:
    """X-Qwenmem-Project's directory, as the chat names a project; else the daemon's."""
    raw = request.headers.get(PROJECT_HEADER)
    if raw is None or not raw.strip():
        return upstream.project
    try:
        text = raw.encode("latin-1").decode("utf-8")  # headers arrive as latin-1
    except UnicodeError:
        text = raw
    refusal = invalid_request(
        "X-Qwenmem-Project must be the absolute path of a directory", code="invalid_project"
    )
    text = text.strip()
    # The header is whatever the client sent: a NUL, a name longer than the system
    # takes, a loop of links — each makes the file system raise, and each is the
    # client's mistake (400), never the daemon's (500).
    if "\x00" in text or len(os.fsencode(text)) > _PATH_MAX:
        raise refusal
    path = Path(text)
    try:
        if not path.is_absolute() or not path.is_dir():
            raise refusal
        return project_id(project_root(path.resolve()))
    except (OSError, ValueError, RuntimeError):  # RuntimeError: a symlink loop on 3.11
        raise refusal from None


async def json_body(request: Request) -> JSONObject:
    """The body as a JSON object whose `stream`, if given, is a boolean; else a 400."""
    raw = await request.body()
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise invalid_request("The request body is not valid JSON", code="invalid_json") from None
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise invalid_request("'stream' must be true or false")
    return body


async def _request_body(request: Request) -> JSONObject:
    body = await json_body(request)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid_request("'messages' must be a non-empty array")
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        raise invalid_request("Every message must be an object with a 'role'")
    return body


async def chat_completions(request: Request) -> Response:
    """POST /v1/chat/completions: the exchange's block added, the rest forwarded as it came."""
    try:
        upstream = upstream_of(request)
        project = request_project(request, upstream)
        body = await _request_body(request)
        shaped = Shaped(body["messages"])
        if upstream.exchange is not None:
            shaped = await upstream.exchange.shape(project, body["messages"])
        streaming = body.get("stream") is True
        log.info(
            "[PROXY] chat model=%s stream=%s messages=%d memories=%d",
            body.get("model"),
            streaming,
            len(shaped.messages),
            len(shaped.ids),
        )
        response = await upstream.send("POST", "/chat/completions", {**body, "messages": shaped.messages})
    except ProxyError as exc:
        return exc.response()
    if response.status_code >= 400:
        return await upstream_error(response)
    headers = {**passed_headers(response), MEMORIES_HEADER: ",".join(map(str, shaped.ids))}
    media_type = response.headers.get("content-type", "application/json")
    if not streaming or "text/event-stream" not in media_type:
        try:
            raw = await response.aread()
        except httpx.HTTPError as exc:
            log.warning("[PROXY] upstream answer cut: %s", exc)
            await response.aclose()
            return ProxyError(502, "The model endpoint's answer was cut off", kind="upstream_error").response()
        await response.aclose()
        await after_reply(upstream, project, shaped, _reply_text(raw))
        return Response(raw, status_code=response.status_code, headers=headers, media_type=media_type)
    headers.update({"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
    return RelayedStream(
        relay(upstream, project, shaped, response),
        upstream=response,
        status_code=response.status_code,
        headers=headers,
        media_type=media_type,
    )


class RelayedStream(StreamingResponse):
    """A relayed stream that closes the upstream response however it ends: a client
    that leaves before the first chunk leaves the generator (and its ``finally``)
    unstarted, and the upstream connection would stay open."""

    def __init__(self, content: AsyncIterator[bytes], *, upstream: httpx.Response, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._upstream = upstream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._upstream.aclose()


async def relay(
    upstream: Upstream, project: str, shaped: Shaped, response: httpx.Response
) -> AsyncIterator[bytes]:
    """The upstream's SSE bytes as they arrive; a cut stream ends with an error event
    (the SDKs raise on it) instead of silently stopping short."""
    collect = upstream.exchange is not None and upstream.exchange.extract
    seen = bytearray()
    complete = False
    try:
        async for chunk in response.aiter_raw():
            if collect:
                seen.extend(chunk)
            yield chunk
        complete = True
    except httpx.HTTPError as exc:
        log.warning("[PROXY] upstream stream cut: %s", exc)
        error = {"error": {"message": "The model endpoint's stream was cut off", "type": "upstream_error"}}
        yield f"data: {json.dumps(error)}\n\n".encode()
    finally:
        await response.aclose()
    if complete and collect:
        await after_reply(upstream, project, shaped, _streamed_text(bytes(seen)))


async def after_reply(upstream: Upstream, project: str, shaped: Shaped, reply: str) -> None:
    if upstream.exchange is None or not reply:
        return
    try:
        await upstream.exchange.after_reply(project, shaped.messages, reply)
    except Exception as exc:  # extraction is best effort: the client has its answer
        log.warning("[PROXY] extraction not started: %s", exc)


def _reply_text(raw: bytes) -> str:
    """The first choice's text of a JSON completion ("" when it has none)."""
    try:
        message = json.loads(raw)["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return ""
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else ""


def _streamed_text(raw: bytes) -> str:
    """The first choice's text of an SSE completion, deltas joined."""
    parts: list[str] = []
    for line in raw.decode("utf-8", "replace").splitlines():
        if not line.startswith("data:"):
            continue
        try:
            delta = json.loads(line[5:])["choices"][0]["delta"]
        except (ValueError, KeyError, IndexError, TypeError):
            continue
        content = delta.get("content") if isinstance(delta, dict) else None
        if isinstance(content, str):
            parts.append(content)
    return "".join(parts)


async def list_models(request: Request) -> Response:
    """GET /v1/models: the upstream's list; an endpoint without one lists the configured
    model, so clients that ask before chatting still work."""
    upstream = upstream_of(request)
    try:
        response = await upstream.send("GET", "/models", None)
    except ProxyError as exc:
        return exc.response()
    if response.status_code == 404:
        await response.aclose()
        listed = {"id": upstream.model, "object": "model", "created": 0, "owned_by": "qwenmem"}
        return JSONResponse({"object": "list", "data": [listed]})
    if response.status_code >= 400:
        return await upstream_error(response)
    try:
        raw = await response.aread()
    except httpx.HTTPError:
        return ProxyError(502, "The model endpoint's answer was cut off", kind="upstream_error").response()
    finally:
        await response.aclose()
    media_type = response.headers.get("content-type", "application/json")
    return Response(raw, status_code=response.status_code, headers=passed_headers(response), media_type=media_type)
