"""The stdio framing of ``qwenmem acp``: the SDK's newline-delimited JSON, with an
answer for every message a client can get wrong.

The SDK's `NdjsonTransport` skips a line that is not JSON without a word, and a line
that is JSON but not a JSON-RPC object (``[1]``, ``"x"``, a response whose id is an
object) reaches its dispatcher, which then fails inside its receive loop and ends the
connection: the agent exits. JSON-RPC 2.0 asks for an error with a null id instead
(parse error, invalid request), so this transport answers those itself and hands the
SDK only messages it can dispatch. Outgoing, an error whose data cannot be written as
JSON (a validation error carrying an exception object) goes out without its data
rather than not at all: every request gets its answer.
"""

from __future__ import annotations

import json
import logging
from typing import cast

from acp._transport import NdjsonTransport  # the SDK's stdio framing, extended here
from acp.exceptions import RequestError

from qwenmem_tui.llm.wire import JSONObject, Message

log = logging.getLogger("qwenmem.acp")

_ID_TYPES = (str, int)
RequestId = str | int | None
"""A JSON-RPC id as an answer carries it (null when the request's was unreadable)."""


def rejection(message: object) -> RequestError | None:
    """Why a decoded line is no JSON-RPC message the SDK can dispatch (None: it is)."""
    if not isinstance(message, dict):
        return RequestError.invalid_request({"reason": "a message is a JSON object"})
    method = message.get("method")
    request_id = message.get("id")
    if "method" in message:
        if not isinstance(method, str):
            return RequestError.invalid_request({"reason": "method must be a string"})
        if "id" in message and not (request_id is None or _valid_id(request_id)):
            return RequestError.invalid_request({"reason": "id must be a string, an integer or null"})
        return None
    if "id" in message and _valid_id(request_id) and ("result" in message or "error" in message):
        return None  # a response to one of our requests
    return RequestError.invalid_request({"reason": "neither a request nor a response"})


def _valid_id(value: object) -> bool:
    return isinstance(value, _ID_TYPES) and not isinstance(value, bool)


def error_payload(error: RequestError, request_id: RequestId = None) -> JSONObject:
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_error_obj()}


def writable(message: Message) -> Message:
    """`message` as it can be written: an error's data dropped when it is no JSON."""
    try:
        json.dumps(message)
        return message
    except (TypeError, ValueError):
        pass
    error = message.get("error")
    if isinstance(error, dict):
        return {**message, "error": {"code": error.get("code", -32603), "message": str(error.get("message", "Error"))}}
    log.warning("[ACP] an outgoing message was not JSON; answered with an internal error")
    return error_payload(RequestError.internal_error(), message.get("id") if _valid_id(message.get("id")) else None)


class GuardedTransport(NdjsonTransport):
    """`NdjsonTransport` answering what it cannot dispatch (see the module doc)."""

    async def receive(self) -> JSONObject | None:
        while True:
            line = await self._read_line()
            if not line:
                return None
            line = line.strip()
            if not line:
                continue
            try:
                message = json.loads(line)
            except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
                await self._answer(RequestError.parse_error(), None)
                continue
            reason = rejection(message)
            if reason is None:  # rejection() checked it is a JSON object
                return cast("Message", message)
            if isinstance(message, dict) and "method" in message and "id" not in message:
                continue  # a notification gets no answer, not even an error
            request_id = message.get("id") if isinstance(message, dict) else None
            await self._answer(reason, request_id if _valid_id(request_id) else None)

    async def send(self, message: Message) -> None:
        await super().send(writable(message))

    async def _answer(self, error: RequestError, request_id: RequestId) -> None:
        log.info("[ACP] rejected a message: %s %s", error, error.data)
        await super().send(error_payload(error, request_id))
