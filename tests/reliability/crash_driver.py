"""A child process for the crash tests: one query of a real ChatSession on a real home.

`python crash_driver.py HOME PROJECT BASE_URL SESSION_ID|new TEXT` prints one line per
thing that happened, flushed at once, so the parent knows exactly what was committed
when it sends SIGKILL: `SESSION <id>`, `ITEM <id> <type>` (after the commit),
`DELTA`, `TOOL_RUNNING`, `FINISHED <status>`.

The `wait_forever` tool blocks until the process dies: the parent kills mid-tool.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from qwenmem_tui.chat.events import (
    AssistantDelta,
    ItemAdded,
    QueryFinished,
    ToolCallStarted,
)
from qwenmem_tui.chat.session import ChatSession
from qwenmem_tui.chat.tools import Tool, ToolContext, builtin_tools
from qwenmem_tui.config import LLMSettings, Settings
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.storage.database import Database
from qwenmem_tui.storage.sessions import SessionStore


def say(line: str) -> None:
    print(line, flush=True)


async def wait_forever(args: dict[str, Any], ctx: ToolContext) -> str:
    say("TOOL_RUNNING")
    await asyncio.Event().wait()
    return "never"


async def main(home: str, project: str, base_url: str, session_id: str, text: str) -> None:
    paths = Paths(Path(home))
    root = Path(project)
    settings = Settings(llm=LLMSettings(base_url=base_url, model="test-model", max_turns=4))
    db = await Database.open(paths.db_file)
    store = SessionStore(db)
    llm = LLMClient(base_url=base_url, api_key="sk-crash-test", model="test-model")
    tools = builtin_tools(root)
    tools.register(Tool("wait_forever", "Blocks.", {"type": "object", "properties": {}}, wait_forever))
    common: dict[str, Any] = dict(
        store=store, llm=llm, tools=tools, settings=settings, project_root=root
    )
    if session_id == "new":
        chat = ChatSession(info=await store.create_session(project_id(root)), **common)
    else:
        chat = await ChatSession.load(session_id=session_id, **common)
    say(f"SESSION {chat.info.id}")
    async for event in chat.run_query(text):
        if isinstance(event, ItemAdded):
            say(f"ITEM {event.item.id} {event.item.type}")
        elif isinstance(event, AssistantDelta):
            say("DELTA")
        elif isinstance(event, ToolCallStarted):
            say("TOOL_STARTED")
        elif isinstance(event, QueryFinished):
            say(f"FINISHED {event.outcome.status}")
    await llm.aclose()
    await db.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
