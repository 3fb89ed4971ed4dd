"""stdin for ``qwenmem mcp``: every malformed request gets an error answer.

The SDK's stdio transport hands a line it cannot parse to the server as an exception,
which the server logs and never answers: a client that sent a lone surrogate, bytes
that are not UTF-8 or a line cut short waits for an answer until its timeout. Here
each line is checked first, with the SDK's own validator; a malformed one is answered
at once — JSON-RPC's parse error or invalid-request error, with the request's id
whenever one can be read from it (even from a line cut short), so the client's
pending call ends — and never reaches the server. Good lines pass through unchanged.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

log = logging.getLogger("qwenmem.mcp")

_ID_KEY = re.compile(rb'"id"\s*:\s*')
_ID_VALUE = re.compile(rb'-?\d{1,18}(?![\d.eE])|"(?:[^"\\]|\\.){0,200}"')
_STRUCTURE = re.compile(rb'["\\{}\[\]]')


def _top_level_id(raw: bytes) -> bytes | None:
    """The text of the request's own id in a line that does not parse: the first "id"
    key of the outer object, never one nested in its params (a tool's arguments may
    carry an "id"), and nothing when its value is not one we can answer with."""
    depth = 0
    in_string = False
    escaped_at = -1  # the byte after a backslash in a string: not structure
    for mark in _STRUCTURE.finditer(raw):
        if mark.start() == escaped_at:
            continue
        char = mark.group()
        if in_string:
            if char == b"\\":
                escaped_at = mark.end()
            elif char == b'"':
                in_string = False
            continue
        if char == b'"':
            key = _ID_KEY.match(raw, mark.start()) if depth == 1 else None
            if key is not None:
                value = _ID_VALUE.match(raw, key.end())
                return value.group() if value is not None else None
            in_string = True
        elif char in (b"{", b"["):
            depth += 1
        elif char in (b"}", b"]"):
            depth -= 1
    return None


_UNPARSED = object()


def _request_id(raw: bytes, parsed: object = _UNPARSED) -> int | str | None:
    """The id a client gave its request, read from the parsed object or, for a line
    that does not parse, from its text; None when there is none to read (a batch
    array has no one id)."""
    if isinstance(parsed, dict):
        value = parsed.get("id")
    elif parsed is not _UNPARSED:
        return None
    else:
        found = _top_level_id(raw)
        if found is None:
            return None
        try:
            value = json.loads(found)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return None
    return value


def _error(code: int, message: str, request_id: int | str | None) -> types.JSONRPCError:
    return types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message)
    )


def malformed_answer(raw: bytes) -> types.JSONRPCError | None:
    """The error answer for one stdin line, None when the line is a well-formed
    message (or a notification: those are never answered)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return _error(types.PARSE_ERROR, "Parse error: the request is not UTF-8 text", _request_id(raw))
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        return _error(types.PARSE_ERROR, "Parse error: the request is not complete JSON", _request_id(raw))
    request_id = _request_id(raw, parsed)
    try:
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return _error(
            types.INVALID_REQUEST, "Invalid request: it holds a lone surrogate (\\ud800-\\udfff)", request_id
        )
    except (ValueError, RecursionError):
        return _error(types.INVALID_REQUEST, "Invalid request: nested too deep", request_id)
    if isinstance(parsed, dict) and "method" in parsed and "id" in parsed and request_id is None:
        # null, a bool, a float, an array: MCP's ids are strings or integers, and the
        # SDK's lax validation took such a request for a notification (never answered)
        # or read true as the id 1.
        return _error(types.INVALID_REQUEST, "Invalid request: the id must be a string or an integer", None)
    try:
        types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except Exception as exc:  # noqa: BLE001 - pydantic's errors, any of them
        if isinstance(parsed, dict) and "method" in parsed and "id" not in parsed:
            log.info("[MCP] malformed notification dropped: %s", str(exc).splitlines()[0])
            return None
        return _error(types.INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 message", request_id)
    return None


class CheckedStdin:
    """The lines of stdin the SDK may read; malformed ones answered on ``write``."""

    def __init__(self) -> None:
        self._write: anyio.abc.ObjectSendStream[SessionMessage] | None = None
        self._ready = anyio.Event()

    def answer_on(self, write: anyio.abc.ObjectSendStream[SessionMessage]) -> None:
        self._write = write
        self._ready.set()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        async for raw in anyio.wrap_file(sys.stdin.buffer):
            if not raw.strip():
                continue  # not a request: nothing to answer
            answer = malformed_answer(raw)
            if answer is None:
                yield raw.decode("utf-8")
                continue
            log.info("[MCP] malformed request answered: %s", answer.error.message)
            await self._ready.wait()  # the transport is up before the first line is read
            assert self._write is not None
            await self._write.send(SessionMessage(answer))


async def serve(server: Server[None]) -> None:
    """Run the SDK's low-level ``server`` on stdio with checked stdin (stdout stays
    the SDK's: only protocol on it)."""
    stdin = CheckedStdin()
    async with stdio_server(stdin=stdin) as (read_stream, write_stream):  # type: ignore[arg-type]
        stdin.answer_on(write_stream)
        await server.run(read_stream, write_stream, server.create_initialization_options())
