"""Memory's face in `qwenmem mcp`, offered by its registration (`Feature.mcp`) and
registered on the server `mcp_server/server.py` builds: the tools of contract §8
(search_memory, remember, forget_memory, list_memories), each active memory as a
resource (`memory://12`, listed and read), and the `recall` prompt (what the chat would
put in front of the model for a question).

Each tool reads the project's memory from the server's backend (the runtime, the
project resolved once) and answers JSON; a caller's mistake is a one-line tool error,
and so is anything unexpected (its traceback goes to the debug log, never the client).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Annotated, TypeVar

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp_types import Resource, ToolAnnotations
from pydantic import Field

from qwenmem_tui.features.memory.access import MemoryUnavailable
from qwenmem_tui.features.memory.remote import (
    MAX_K,
    ForgetAnswer,
    ListAnswer,
    MemoryRequestError,
    RememberAnswer,
    SearchAnswer,
)

if TYPE_CHECKING:
    from qwenmem_tui.mcp_server.server import MemoryBackend, QwenmemServer

log = logging.getLogger("qwenmem.mcp")
T = TypeVar("T")


Category = Annotated[
    str | None,
    Field(description="user, feedback, project or reference (default: chosen from the text)"),
]


async def _answer(call: Awaitable[T], backend: MemoryBackend) -> T:
    """A tool's answer; a caller's mistake becomes a one-line tool error, and so does
    anything unexpected (its traceback goes to the debug log, never to the client)."""
    try:
        return await call
    except ToolError:
        raise
    except MemoryRequestError as exc:
        raise ToolError(str(exc)) from None
    except MemoryUnavailable as exc:
        log.warning("[MCP] %s", exc)
        raise ToolError(str(exc)) from None
    except Exception as exc:
        log.exception("[MCP] tool failed")
        raise ToolError(f"qwenmem could not answer: {type(exc).__name__}") from None
    finally:
        backend.warm()


def register_tools(server: QwenmemServer, backend: MemoryBackend) -> None:
    """Add memory's tools, resources and prompt to `server`, reading memory through
    `backend`."""
    _register_resources(server, backend)
    _register_prompt(server, backend)
    read_only = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True)

    @server.tool(
        title="Search memory",
        description="Memories relevant to a query, best first: the same recall the "
        "qwenmem chat uses (this project's memories and the user's global ones).",
        annotations=read_only,
    )
    async def search_memory(
        query: Annotated[str, Field(description="what to look for, in any language")],
        ctx: Context,
        k: Annotated[int, Field(ge=1, le=MAX_K, description="how many memories at most")] = 5,
    ) -> SearchAnswer:
        memory = await backend.memory(ctx)
        return await _answer(memory.search(query, k), backend)

    @server.tool(
        title="Remember",
        description="Save a durable fact for future conversations (a preference, a "
        "correction, a fact about the user or this project). The same fact said again "
        "is deduplicated; a new value for the same subject supersedes the old one. "
        "Never save secrets. Instruction-like or every-project facts, and notes naming a "
        "link or address, are held for the user's review in qwenmem (action "
        "'quarantined'); the user approves them there (/memory).",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False),
    )
    async def remember(
        text: Annotated[str, Field(description="the fact, one or two sentences")],
        ctx: Context,
        category: Category = None,
        key: Annotated[
            str | None, Field(description="short snake_case subject, e.g. preferred_editor")
        ] = None,
    ) -> RememberAnswer:
        # No elicitation: a client's "accept" is the client's answer (it can give it
        # itself), not the user's words. A held note waits for the user in qwenmem.
        memory = await backend.memory(ctx)
        return await _answer(memory.remember(text, category, key), backend)

    @server.tool(
        title="Forget memory",
        description="Delete one memory by id (from search_memory or list_memories). "
        "The deletion is audited; forgotten is false for an unknown id.",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True),
    )
    async def forget_memory(
        id: Annotated[int, Field(description="the memory's id")],  # noqa: A002 - contract name
        ctx: Context,
    ) -> ForgetAnswer:
        memory = await backend.memory(ctx)
        return await _answer(memory.forget(id), backend)

    @server.tool(
        title="List memories",
        description="Every active memory of this project and the user's global ones, "
        "newest first, optionally of one category.",
        annotations=read_only,
    )
    async def list_memories(ctx: Context, category: Category = None) -> ListAnswer:
        memory = await backend.memory(ctx)
        return await _answer(memory.list(category), backend)


RESOURCE_SCHEME = "memory"
MIME_TYPE = "application/json"


def _register_resources(server: QwenmemServer, backend: MemoryBackend) -> None:
    """Each active memory of the project (and the global ones) as `memory://ID`."""

    async def listed(ctx: Context) -> list[Resource]:
        memory = await backend.memory(ctx)
        rows = (await _answer(memory.list(), backend))["memories"]
        return [
            Resource(
                uri=f"{RESOURCE_SCHEME}://{row['id']}",
                name=f"{row['category']}/{row['key']}",
                title=f"{row['category']}/{row['key']} ({row['date']})",
                description=row["value"],
                mime_type=MIME_TYPE,
            )
            for row in rows
        ]

    server.resource_listers.append(listed)

    @server.resource(
        f"{RESOURCE_SCHEME}://{{id}}",
        name="memory",
        title="A memory",
        description="One memory by id: category, key, value, origin, date, scope (JSON).",
        mime_type=MIME_TYPE,
    )
    async def read_memory(id: str, ctx: Context) -> str:  # noqa: A002 - the URI's name
        memory = await backend.memory(ctx)
        found = None
        if id.isascii() and id.isdigit() and len(id) <= 20:
            found = await _answer(memory.read(int(id)), backend)
        if found is None:
            raise ResourceError(f"No memory {RESOURCE_SCHEME}://{id[:40]} in this project")
        return json.dumps(found, ensure_ascii=False)


def _register_prompt(server: QwenmemServer, backend: MemoryBackend) -> None:
    @server.prompt(
        title="Recall",
        description="What qwenmem remembers about a question, as the qwenmem chat puts it "
        "in front of the model, followed by the question.",
    )
    async def recall(
        question: Annotated[str, Field(description="what you are about to ask or work on")],
        ctx: Context,
    ) -> str:
        memory = await backend.memory(ctx)
        block = await _answer(memory.recall_block(question), backend)
        if not block:
            return f"(qwenmem remembers nothing relevant to this.)\n\n{question}"
        return f"{block}\n\n{question}"
