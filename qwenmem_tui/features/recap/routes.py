"""The recap in the daemon: ``POST /session/{id}/recap``, the session's 'where was I'
in a sentence or two (contract §7; the SDK's `recap_session`)."""

from __future__ import annotations

import asyncio
import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from qwenmem_tui.daemon import openapi as api
from qwenmem_tui.daemon.guard import CLIENT_ID_HEADER
from qwenmem_tui.features.recap.session_recap import generate_session_recap

log = logging.getLogger("qwenmem.daemon")


async def recap(request: Request) -> Response:
    backend = request.app.state.backend
    info = await backend.require_session(request.path_params["session_id"])
    client_id = request.headers.get(CLIENT_ID_HEADER)
    log.info("[SESSION_RECAP] daemon recap session=%s client=%s", info.id, client_id)
    history = await backend.history(info)
    text: str | None
    try:
        async with asyncio.timeout(request.app.state.options.side_call_timeout):
            text = await generate_session_recap(history, backend.llm)
    except TimeoutError:
        log.warning("[SESSION_RECAP] daemon recap timed out session=%s client=%s", info.id, client_id)
        text = None
    return JSONResponse({"sessionId": info.id, "recap": text})


RECAP_ROUTES = [
    api.ApiRoute(
        "/session/{session_id:path}/recap",
        "POST",
        recap,
        {
            "summary": "A 1-2 sentence 'where was I' recap; body ignored; 60 s backstop",
            "parameters": [api.SESSION_ID, api.CLIENT_ID],
            "responses": {
                "200": api.json_response(
                    {
                        "type": "object",
                        "required": ["sessionId", "recap"],
                        "properties": {
                            "sessionId": {"type": "string"},
                            "recap": {"type": ["string", "null"]},
                        },
                    },
                    "recap is null when there is nothing to say",
                ),
                **api.COMMON_ERRORS,
                "404": api.error("session_not_found"),
            },
        },
        capabilities=("session_recap",),
    ),
]
