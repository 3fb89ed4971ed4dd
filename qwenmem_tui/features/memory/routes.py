"""The daemon's memory routes: list, search and forget the daemon project's memory.

The same operations, JSON and validation as the MCP tools (``memory/remote.py``), for
the same project the session routes serve (plus the user's global memories); an id of
another user's or project's memory reads as not found, as it does everywhere.

| route | answer |
|---|---|
| ``GET /memory[?category=C]`` | ``{"memories": [...]}`` active, newest first |
| ``POST /memory/search`` ``{"query", "k"?}`` | ``{"memories": [... "score"]}`` the chat's recall |
| ``DELETE /memory/{id}`` | ``{"id", "forgotten": true}`` (audited), else 404 ``memory_not_found`` |
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping

from pydantic import TypeAdapter
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from qwenmem_tui.daemon import openapi as api
from qwenmem_tui.daemon.guard import CLIENT_ID_HEADER, error_response
from qwenmem_tui.features.memory.remote import Caller, MemoryRequestError, MemoryRow, ProjectMemory
from qwenmem_tui.features.memory.views import project_memory
from qwenmem_tui.llm.wire import JSONObject
from qwenmem_tui.memory.render import VersionMarks
from qwenmem_tui.reads import StartupError


def _memory(request: Request) -> ProjectMemory | None:
    client = request.headers.get(CLIENT_ID_HEADER) or ""
    try:
        return project_memory(request.app.state.backend.runtime, Caller("HTTP", client))
    except StartupError:
        return None


def _disabled() -> Response:
    return error_response(404, "memory_disabled", "Long-term memory is turned off (memory.enabled = false)")


async def _json_object(request: Request) -> JSONObject | Response:
    raw = await request.body()
    try:
        body = json.loads(raw) if raw.strip() else None
    except (ValueError, RecursionError):
        return error_response(400, "invalid_json", "Invalid JSON in request body")
    if not isinstance(body, dict):
        return error_response(400, "invalid_request", "Request body must be a JSON object")
    return body


async def _answer(
    request: Request, ask: Callable[[ProjectMemory], Awaitable[Mapping[str, object]]]
) -> Response:
    """The operation's JSON; memory off is a 404, the caller's mistake a 400."""
    memory = _memory(request)
    if memory is None:
        return _disabled()
    try:
        return JSONResponse(await ask(memory))
    except MemoryRequestError as exc:
        return error_response(400, "invalid_request", str(exc))


async def list_memories(request: Request) -> Response:
    return await _answer(request, lambda memory: memory.list(request.query_params.get("category")))


async def search_memory(request: Request) -> Response:
    body = await _json_object(request)
    if isinstance(body, Response):
        return body
    return await _answer(request, lambda memory: memory.search(body.get("query"), body.get("k", 5)))


async def forget_memory(request: Request) -> Response:
    memory = _memory(request)
    if memory is None:
        return _disabled()
    raw = request.path_params["memory_id"]
    not_found = error_response(404, "memory_not_found", f"No memory with id {raw[:30]!r}")
    if not (raw.isascii() and raw.isdigit()):
        return not_found
    answer = await memory.forget(raw)
    if not answer["forgotten"]:
        return not_found
    return JSONResponse({"id": int(raw), "forgotten": True})


_REFS = "#/components/schemas/{model}"
_ROW = TypeAdapter(MemoryRow).json_schema(ref_template=_REFS)
_MARKS = TypeAdapter(VersionMarks).json_schema(ref_template=_REFS)
"""A memory as the MCP tools' output schema has it too (`remote.MemoryRow`), and a
search hit's version marks (`render.VersionMarks`); what they refer to (`Origin`,
`NewerVersion`) joins the document's schemas."""
_MEMORY_SCHEMA = {
    "type": "object",
    "required": _ROW["required"],
    "properties": {
        **_ROW["properties"],
        "score": {"type": "number", "description": "search only"},
        **_MARKS["properties"],
    },
}
_SCHEMAS = {
    "Memories": {
        "type": "object",
        "required": ["memories"],
        "properties": {"memories": {"type": "array", "items": _MEMORY_SCHEMA}},
    },
    **_ROW.get("$defs", {}),
    **_MARKS["$defs"],
}
_DISABLED = api.error("memory_disabled")

MEMORY_ROUTES = [
    api.ApiRoute(
        "/memory",
        "GET",
        list_memories,
        {
            "summary": "Active memories of the daemon's project and the user's global "
            "ones, newest first",
            "parameters": [
                {
                    "name": "category",
                    "in": "query",
                    "required": False,
                    "schema": {"enum": ["", "user", "feedback", "project", "reference"]},
                    "description": "Only this category; empty or absent: every category",
                }
            ],
            "responses": {
                "200": api.json_response(api.ref("Memories"), "Memories"),
                **api.COMMON_ERRORS,
                "400": api.error("invalid_request (unknown category) | invalid_client_id"),
                "404": _DISABLED,
            },
        },
        schemas=_SCHEMAS,
        capabilities=("memory",),
    ),
    api.ApiRoute(
        "/memory/search",
        "POST",
        search_memory,
        {
            "summary": "The chat's recall for a query (filters, both channels, threshold)",
            "requestBody": api.json_body(
                {
                    "type": "object",
                    "required": ["query"],
                    "properties": {
                        "query": {"type": "string", "minLength": 1},
                        "k": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5},
                    },
                }
            ),
            "responses": {
                "200": api.json_response(api.ref("Memories"), "Best first, each with its score"),
                **api.COMMON_ERRORS,
                "400": api.error("invalid_json | invalid_request | invalid_client_id"),
                "404": _DISABLED,
            },
        },
        schemas=_SCHEMAS,
    ),
    api.ApiRoute(
        "/memory/{memory_id}",
        "DELETE",
        forget_memory,
        {
            "summary": "Forget one memory (audited)",
            "parameters": [
                {"name": "memory_id", "in": "path", "required": True, "schema": {"type": "integer"}},
                api.CLIENT_ID,
            ],
            "responses": {
                "200": api.json_response(
                    {
                        "type": "object",
                        "required": ["id", "forgotten"],
                        "properties": {"id": {"type": "integer"}, "forgotten": {"const": True}},
                    },
                    "Forgotten",
                ),
                **api.COMMON_ERRORS,
                "404": api.error(
                    "memory_not_found (also another user's or project's id) | memory_disabled"
                ),
            },
        },
    ),
]
