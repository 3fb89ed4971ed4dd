"""Live truth on PostgreSQL (issue 14): a running session's next request carries what
the shared database holds now, whichever machine changed it.

The laptop runs the session; the server (its own home and index, sharing only the
database) restates and then forgets the fact. Real chat loop, SDK and fake server.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from chat_support import CHAT_MODEL, TEST_API_KEY, chat_llm, collect
from pgtest_support import Backend

from qwenmem_tui.chat.session import ChatSession
from qwenmem_tui.chat.tools import builtin_tools
from qwenmem_tui.config import Settings
from qwenmem_tui.memory.model import RememberRequest, Status
from qwenmem_tui.features.memory.prefetch import MemoryPrefetchHook, ProjectRecall
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.paths import project_id
from qwenmem_tui.storage import Database, SessionStore
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply

pytestmark = pytest.mark.postgres


def blocks(body: dict) -> str:
    text = json.dumps(body["messages"], ensure_ascii=False)
    return "\n".join(re.findall(r"<system-reminder>.*?</system-reminder>", text))


async def test_another_machine_restating_and_forgetting_reaches_the_running_session(
    fake: FakeOpenAI, pg_dsn: str, tmp_path: Path
) -> None:
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    project = project_id(root)
    backend = Backend("postgres", tmp_path, pg_dsn)
    llm = LLMClient(base_url=fake.base_url, api_key=TEST_API_KEY, model=CHAT_MODEL)
    laptop = await backend.open(machine="laptop", min_score=-1.0)
    server = await backend.open(machine="server", min_score=-1.0)
    db = await Database.open(backend.paths("laptop").db_file)
    try:
        await laptop.remember(RememberRequest("the deploy target is staging", project=project))
        sessions = SessionStore(db)
        hook = MemoryPrefetchHook(
            (adapter := ProjectRecall.of(laptop, project)).recall,
            initial_wait_ms=10_000,
            live=adapter.live,
        )
        session = ChatSession(
            info=await sessions.create_session(project), store=sessions, llm=llm,
            tools=builtin_tools(root), settings=Settings(llm=chat_llm(fake.base_url)),
            project_root=root, hooks=[hook],
        )
        fake.script(Reply("noted"), Reply("noted"), Reply("noted"))
        await collect(session, "where do we deploy?")
        assert "staging" in blocks(fake.chat_requests[-1])

        restated = await server.remember(RememberRequest("deploy target: prod", project=project))
        assert [m.value for m in await server.list(statuses=[Status.ACTIVE])] == ["deploy target: prod"]
        await collect(session, "and now?")
        sent = blocks(fake.chat_requests[-1])
        assert "deploy target: prod" in sent and "staging" not in sent

        assert await server.forget(restated.memory.id) is not None
        await collect(session, "and after that?")
        assert "deploy target" not in blocks(fake.chat_requests[-1])
        assert hook.surfaced == set()
        await session.close()
    finally:
        await db.close()
        await laptop.close()
        await server.close()
        await llm.aclose()
