"""Streaming replies are checkpointed, and the final commit replaces the checkpoint."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from qwenmem_tui.chat.events import AssistantDelta, ItemAdded
from qwenmem_tui.chat.session import DRAFT_EVERY_CHARS, ChatSession
from qwenmem_tui.chat.tools import ToolRegistry
from qwenmem_tui.config import LLMSettings, Settings
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.storage.database import Database
from qwenmem_tui.storage.sessions import SessionStore
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply

LONG = "".join(f"token{i} " for i in range(600))  # ~4,500 characters


async def open_chat(fake: FakeOpenAI, tmp_path: Path) -> tuple[ChatSession, Database, LLMClient]:
    db = await Database.open(tmp_path / "qwenmem.db")
    store = SessionStore(db)
    llm = LLMClient(base_url=fake.base_url, api_key="sk-test", model="test-model")
    chat = ChatSession(
        info=await store.create_session("p"),
        store=store,
        llm=llm,
        tools=ToolRegistry(),
        settings=Settings(llm=LLMSettings(base_url=fake.base_url, model="test-model")),
        project_root=tmp_path,
    )
    return chat, db, llm


async def test_a_finished_long_reply_is_one_item_without_the_interrupted_mark(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.script(Reply(LONG, chunk_size=16))
    chat, db, llm = await open_chat(fake, tmp_path)
    try:
        added = [e.item for e in [e async for e in chat.run_query("go")] if isinstance(e, ItemAdded)]
        stored = await chat.store.load_items(chat.info.id)
    finally:
        await llm.aclose()
        await db.close()
    assert [i.type for i in stored] == ["user", "assistant"]
    assert stored[1].content == LONG and "interrupted" not in stored[1].meta
    assert set(stored[1].meta) <= {"usage"}  # the endpoint's token counts, nothing else
    assert [i.id for i in added] == [i.id for i in stored]  # the checkpoint row, finished
    assert chat.info.message_count == 2


async def test_a_cancelled_reply_updates_its_checkpoint_in_place(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    never = threading.Event()
    fake.script(Reply(LONG, chunk_size=16, stall_after=DRAFT_EVERY_CHARS // 16 + 8, stall_gate=never))
    chat, db, llm = await open_chat(fake, tmp_path)
    seen = 0
    try:
        async def consume() -> None:
            nonlocal seen
            async for event in chat.run_query("go"):
                if isinstance(event, AssistantDelta):
                    seen += len(event.text)
                    if seen >= DRAFT_EVERY_CHARS + 64:
                        chat.cancel()

        await asyncio.wait_for(consume(), 30)
        stored = await chat.store.load_items(chat.info.id)
    finally:
        never.set()
        await llm.aclose()
        await db.close()
    assert [i.type for i in stored] == ["user", "assistant"]
    assert stored[1].meta == {"interrupted": True}
    assert LONG.startswith(stored[1].content) and len(stored[1].content) >= DRAFT_EVERY_CHARS + 64
