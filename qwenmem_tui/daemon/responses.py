"""`POST /v1/responses`: the OpenAI Responses API through the proxy (contract §16).

Clients that speak only the Responses API (the `openai` SDK's `client.responses`,
Codex-style agents) get what qwenmem adds as chat-completions clients do (§9): the
recalled block of the latest user message goes where §6 puts it. An endpoint that
serves `/responses` gets the request forwarded, its answer relayed as it came. One
that answers 404 (most OpenAI-compatible servers: vLLM, llama.cpp, DashScope's
compatible mode) gets it translated onto its chat completions, and the answer
translated back — text, function calls, usage, streamed as Responses events or not.
The endpoint keeps no state of a translated response, so the proxy keeps each one's
conversation for a later `previous_response_id` (the newest MAX_KEPT_RESPONSES, in
the process only: a restarted daemon answers such an id with OpenAI's not-found error).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

import httpx
from starlette.requests import Request
from starlette.responses import Response

from qwenmem_tui.daemon.proxy import (
    MEMORIES_HEADER,
    ProxyError,
    RelayedStream,
    Upstream,
    WireJSONResponse,
    after_reply,
    invalid_request,
    json_body,
    passed_headers,
    relay,
    request_project,
    upstream_error,
    upstream_of,
)
from qwenmem_tui.daemon.translate import (
    StreamTranslation,
    Unsupported,
    assistant_message,
    chat_messages,
    chat_request,
    incomplete_reason,
    input_items,
    new_id,
    output_of,
    response_object,
)
from qwenmem_tui.exchange import Shaped
from qwenmem_tui.llm.wire import JSONObject, Message

log = logging.getLogger("qwenmem.daemon")

MAX_KEPT_RESPONSES = 1000


async def _request_body(request: Request) -> JSONObject:
    body = await json_body(request)
    given = body.get("input")
    if not (isinstance(given, str) and given) and not (isinstance(given, list) and given):
        raise invalid_request("'input' must be a non-empty string or array")
    if isinstance(given, list) and not all(isinstance(item, dict) for item in given):
        raise invalid_request("Every input item must be an object")
    if body.get("tools") is not None and not isinstance(body["tools"], list):
        raise invalid_request("'tools' must be an array")
    previous = body.get("previous_response_id")
    if previous is not None and not isinstance(previous, str):
        raise invalid_request("'previous_response_id' must be a string")
    return body


# -- the route -------------------------------------------------------------------------


async def responses(request: Request) -> Response:
    """POST /v1/responses: forwarded with the exchange's block where the endpoint has the route,
    else translated onto its chat completions."""
    try:
        upstream = upstream_of(request)
        project = request_project(request, upstream)
        body = await _request_body(request)
        previous = body.get("previous_response_id")
        if previous in upstream.kept_responses or upstream.serves_responses is False:
            return await _translated(upstream, project, body)
        answer = await _forwarded(upstream, project, body)
        if answer is not None:
            return answer
        return await _translated(upstream, project, body)
    except ProxyError as exc:
        return exc.response()


async def _shape(upstream: Upstream, project: str, messages: list[Message]) -> Shaped:
    if upstream.exchange is None:
        return Shaped(messages)
    return await upstream.exchange.shape(project, messages)


async def _forwarded(upstream: Upstream, project: str, body: JSONObject) -> Response | None:
    """The endpoint's own answer, or None when it has no Responses API (a 404 that is
    not about the model)."""
    items = input_items(body)
    messages = chat_messages(items, strict=False)
    shaped = await _shape(upstream, project, messages)
    sent = {**body, "input": with_block(items, messages, shaped)} if shaped.block else body
    response = await upstream.send("POST", "/responses", sent)
    if response.status_code == 404:
        raw = await _read(response)
        if not _about_the_model(raw):
            log.info("[PROXY] the endpoint has no /responses: translating onto chat completions")
            upstream.serves_responses = False
            return None
        return await upstream_error(_replayed(response, raw))
    if response.status_code >= 400:
        return await upstream_error(response)
    upstream.serves_responses = True
    headers = {**passed_headers(response), MEMORIES_HEADER: ",".join(map(str, shaped.ids))}
    media_type = response.headers.get("content-type", "application/json")
    log.info("[PROXY] responses forwarded stream=%s memories=%d", body.get("stream") is True, len(shaped.ids))
    if "text/event-stream" in media_type:
        headers.update({"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
        return RelayedStream(
            relay(upstream, project, shaped, response), upstream=response,
            status_code=response.status_code, headers=headers, media_type=media_type,
        )
    raw = await _read(response)
    return Response(raw, status_code=response.status_code, headers=headers, media_type=media_type)


def with_block(items: list[Message], messages: list[Message], shaped: Shaped) -> list[Message]:
    """The input items with the §6 block where `shaped` put it in the messages:
    leading the latest user message, or as a user message after the run of tool
    results it follows (§6)."""
    items = list(items)
    if len(shaped.messages) == len(messages):
        index = max(i for i, item in enumerate(items) if item.get("type", "message") == "message" and item.get("role") == "user")
        item = items[index]
        content = item.get("content")
        if isinstance(content, str):
            items[index] = {**item, "content": f"{shaped.block}\n\n{content}"}
        else:
            items[index] = {**item, "content": [{"type": "input_text", "text": shaped.block}, *(content or [])]}
        return items
    # The block is the one message `shaped` added: where the two lists first differ
    # (at the end when the tool results close the request).
    at = next(
        (i for i, (a, b) in enumerate(zip(shaped.messages, messages, strict=False)) if a is not b),
        len(messages),
    )
    call_id = str(shaped.messages[at - 1].get("tool_call_id"))
    end = next(
        i for i, item in enumerate(items) if item.get("type") == "function_call_output" and str(item.get("call_id")) == call_id
    )
    while end + 1 < len(items) and items[end + 1].get("type") == "function_call_output":
        end += 1
    return [*items[: end + 1], {"role": "user", "content": shaped.block}, *items[end + 1 :]]


async def _read(response: httpx.Response) -> bytes:
    try:
        return await response.aread()
    except httpx.HTTPError as exc:
        log.warning("[PROXY] upstream answer cut: %s", exc)
        raise ProxyError(502, "The model endpoint's answer was cut off", kind="upstream_error") from None
    finally:
        await response.aclose()


def _about_the_model(raw: bytes) -> bool:
    """A 404 naming the model (OpenAI's `model_not_found`), not a missing route."""
    try:
        error = json.loads(raw).get("error")
    except (ValueError, AttributeError):
        return False
    return isinstance(error, dict) and error.get("code") == "model_not_found"


def _replayed(response: httpx.Response, raw: bytes) -> httpx.Response:
    """A read response again, for `upstream_error` (which reads it)."""
    return httpx.Response(response.status_code, headers=response.headers, content=raw)


async def _translated(upstream: Upstream, project: str, body: JSONObject) -> Response:
    """The request onto the endpoint's chat completions, the answer back as Responses."""
    previous = body.get("previous_response_id")
    earlier: list[Message] = []
    if previous is not None:
        if previous not in upstream.kept_responses:
            raise ProxyError(
                404, f"Previous response with id '{previous}' not found.",
                kind="invalid_request_error", code="previous_response_not_found",
            )
        earlier = upstream.kept_responses[previous]
    try:
        conversation = [*earlier, *chat_messages(input_items(body), strict=True)]
        instructions = body.get("instructions")
        system = [{"role": "system", "content": instructions}] if isinstance(instructions, str) and instructions else []
        shaped = await _shape(upstream, project, [*system, *conversation])
        chat = chat_request(body, shaped.messages, upstream.model)
    except Unsupported as exc:
        raise invalid_request(
            f"This endpoint has no Responses API, and qwenmem's translation onto chat completions "
            f"does not carry {exc}", code="unsupported_by_translation",
        ) from None
    response = await upstream.send("POST", "/chat/completions", chat)
    if response.status_code >= 400:
        return await upstream_error(response)
    response_id = new_id("resp")
    headers = {**passed_headers(response), MEMORIES_HEADER: ",".join(map(str, shaped.ids))}
    log.info("[PROXY] responses translated stream=%s memories=%d", chat.get("stream", False), len(shaped.ids))
    turn = _Turn(upstream, project, shaped, conversation, response_id)
    if chat.get("stream") and "text/event-stream" in response.headers.get("content-type", ""):
        translation = StreamTranslation(body, response_id, str(chat["model"]))
        headers.update({"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
        return RelayedStream(
            _translated_stream(translation, response, turn),
            upstream=response, headers=headers, media_type="text/event-stream",
        )
    try:
        completion = json.loads(await _read(response))
        choice = completion["choices"][0]
        output = output_of(choice["message"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise ProxyError(502, "The model endpoint's answer is not a chat completion", kind="upstream_error") from None
    await turn.done(output)
    answer = response_object(
        body, response_id, model=str(completion.get("model") or chat["model"]), output=output,
        usage=completion.get("usage"), incomplete=incomplete_reason(choice.get("finish_reason")),
        status="incomplete" if incomplete_reason(choice.get("finish_reason")) else "completed",
    )
    return WireJSONResponse(answer, headers=headers)


class _Turn:
    """What a translated answer leaves behind: its conversation kept for a later
    `previous_response_id`, and extraction (when on)."""

    def __init__(
        self, upstream: Upstream, project: str, shaped: Shaped, conversation: list[Message], response_id: str
    ) -> None:
        self._upstream = upstream
        self._project = project
        self._shaped = shaped
        self._conversation = conversation
        self._id = response_id

    async def done(self, output: list[JSONObject]) -> None:
        message = assistant_message(output)
        kept = self._upstream.kept_responses
        kept[self._id] = [*self._conversation, message]
        while len(kept) > MAX_KEPT_RESPONSES:
            kept.popitem(last=False)
        await after_reply(self._upstream, self._project, self._shaped, message.get("content") or "")


async def _translated_stream(
    translation: StreamTranslation, response: httpx.Response, turn: _Turn
) -> AsyncIterator[bytes]:
    """The endpoint's chat chunks as Responses events; a cut stream ends `failed`."""
    try:
        for frame in translation.start():
            yield frame
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            try:
                chunk = json.loads(data)
            except ValueError:
                continue
            if isinstance(chunk, dict):
                for frame in translation.chunk(chunk):
                    yield frame
    except httpx.HTTPError as exc:
        log.warning("[PROXY] upstream stream cut: %s", exc)
        yield translation.failed("The model endpoint's stream was cut off")
        return
    finally:
        await response.aclose()
    frames, output = translation.finish()
    for frame in frames:
        yield frame
    await turn.done(output)
