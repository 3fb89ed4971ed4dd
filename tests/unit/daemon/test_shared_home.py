"""The TUI core (ChatSession in this process) and a live daemon on one QWENMEM_HOME.

Both hold the SQLite database open at the same time, as a user running `qwenmem` and
`qwenmem serve` side by side would.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from chat_support import collect, session_parts

from qwenmem_tui.chat.session import ChatSession
from qwenmem_tui.config import Settings
from qwenmem_tui.daemon import DaemonClient
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.storage.database import Database
from qwenmem_tui.storage.sessions import SessionStore
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply


async def test_sessions_cross_between_tui_core_and_daemon(
    live_url: str, fake: FakeOpenAI, settings: Settings, paths: Paths, project: Path
) -> None:
    client = DaemonClient(live_url, timeout=10.0)
    db = await Database.open(paths.db_file)
    llm = LLMClient.from_settings(settings)
    try:
        store = SessionStore(db)
        # daemon -> TUI core
        fake.script(Reply("Answer from the daemon."))
        daemon_session = await asyncio.to_thread(client.create_session, "made by the daemon")
        await asyncio.to_thread(client.prompt, daemon_session, "hello daemon")
        listed = {s.id: s for s in await store.list_sessions(project_id(project))}
        assert listed[daemon_session].title == "made by the daemon"
        assert listed[daemon_session].message_count == 2

        # TUI core -> daemon: a session the core creates and chats in
        info = await store.create_session(project_id(project))
        chat = ChatSession(info=info, **session_parts(store, llm, settings, project))
        fake.script(Reply("Answer from the TUI."))
        [finished] = (await collect(chat, "hello tui"))[-1:]
        assert finished.outcome.status == "ok"
        await chat.close()

        summaries = await asyncio.to_thread(client.list_sessions)
        assert [s.session_id for s in summaries] == [info.id, daemon_session]

        # the daemon continues the core's session with its history
        fake.script(Reply("Continued by the daemon."))
        result = await asyncio.to_thread(client.prompt, info.id, "and from the daemon?")
        assert result.reply == "Continued by the daemon."
        sent = [(m["role"], m["content"]) for m in fake.chat_requests[-1]["messages"][1:]]
        assert sent == [
            ("user", "hello tui"),
            ("assistant", "Answer from the TUI."),
            ("user", "and from the daemon?"),
        ]
        # ...and the core sees what the daemon added
        resumed = await ChatSession.load(
            session_id=info.id,
            **session_parts(store, llm, settings, project),
        )
        assert [m["content"] for m in resumed.history()[1:]][-1] == "Continued by the daemon."

        # the core adds to a session the daemon already has open: the daemon's next
        # query sees it (its chat is reloaded, not served from a stale copy)
        daemon_chat = await ChatSession.load(
            session_id=daemon_session,
            **session_parts(store, llm, settings, project),
        )
        fake.script(Reply("Core reply."), Reply("Daemon again."))
        await collect(daemon_chat, "core interjects")
        await asyncio.to_thread(client.prompt, daemon_session, "daemon again")
        sent = [m["content"] for m in fake.chat_requests[-1]["messages"][1:]]
        assert sent == [
            "hello daemon",
            "Answer from the daemon.",
            "core interjects",
            "Core reply.",
            "daemon again",
        ]
    finally:
        client.close()
        await llm.aclose()
        await db.close()
