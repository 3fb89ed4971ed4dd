"""Two writers on one home: the core and a real `qwenmem serve` process at the same time,
and a third process that holds SQLite's write lock until the test lets go of it.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from app_support import started

from qwenmem_tui.chat.session import ChatSession
from qwenmem_tui.config import Settings
from qwenmem_tui.paths import Paths
from qwenmem_tui.storage.database import Database
from qwenmem_tui.storage.sessions import Item, SessionStore
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, echo_responder
from qwenmem_tui.tui.app import create_app
from qwenmem_tui.tui.widgets.prompt import PromptInput

from .conftest import (
    SIZE,
    child_env,
    integrity,
    outcome,
    serve_url,
    stored_items,
    wait_for,
)

ROUNDS = 12

LOCK_HOLDER = textwrap.dedent(
    """
    import sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    print("LOCKED", flush=True)
    sys.stdin.readline()          # the test says when
    conn.execute("COMMIT")
    print("RELEASED", flush=True)
    """
)


@contextmanager
def lock_holder(db_file: Path) -> Iterator[Callable[[], None]]:
    """Another process in `BEGIN IMMEDIATE` on the database; call the yielded function
    to let it commit. Killed at the end whatever happened."""
    proc = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(db_file)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "LOCKED"

    def release() -> None:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "RELEASED"

    try:
        yield release
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.slow
async def test_core_and_serve_write_the_same_home_at_once(
    fake: FakeOpenAI, home: Path, paths: Paths, project: Path, make_core: Callable[..., Any]
) -> None:
    fake.responder = echo_responder
    paths.ensure()
    async with make_core() as core:  # the database exists before the daemon starts
        proc = subprocess.Popen(
            [sys.executable, "-m", "qwenmem_tui", "serve", "--port", "0"],
            cwd=project, env=child_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            base = await asyncio.to_thread(serve_url, proc)

            def daemon_side(index: int) -> tuple[str, list[str]]:
                with httpx.Client(base_url=base, timeout=60) as client:
                    sid = client.post("/session", json={"title": f"daemon {index}"}).json()["sessionId"]
                    replies = []
                    for n in range(ROUNDS):
                        response = client.post(f"/session/{sid}/prompt", json={"text": f"d{index}-{n}"})
                        assert response.status_code == 200, response.text
                        replies.append(response.json()["reply"])
                    return sid, replies

            other = ChatSession(
                info=await core.store.create_session(core.session.info.project),
                store=core.store, llm=core.llm, tools=core.session.tools,
                settings=core.session.settings, project_root=project,
            )

            async def core_side(chat: ChatSession, name: str) -> None:
                for n in range(ROUNDS):
                    events = [e async for e in chat.run_query(f"{name}-{n}")]
                    assert outcome(events).outcome.status == "ok"

            results = await asyncio.gather(
                asyncio.to_thread(daemon_side, 0),
                asyncio.to_thread(daemon_side, 1),
                core_side(core.session, "c0"),
                core_side(other, "c1"),
            )
        finally:
            proc.terminate()
            _, stderr = await asyncio.to_thread(proc.communicate, timeout=30)
        assert "Traceback" not in stderr
        sessions = {sid: f"d{i}" for i, (sid, _) in enumerate(results[:2])}
        sessions[core.session.info.id] = "c0"
        sessions[other.info.id] = "c1"
        for _, replies in results[:2]:
            assert len(replies) == ROUNDS and all(r.startswith("You said: d") for r in replies)

    assert integrity(paths.db_file) == "ok"
    for sid, name in sessions.items():
        items = await stored_items(paths, sid)
        assert [i.content for i in items if i.type == "user"] == [f"{name}-{n}" for n in range(ROUNDS)]
        assert [i.content for i in items if i.type == "assistant"] == [
            f"You said: {name}-{n}" for n in range(ROUNDS)
        ]


async def test_write_waits_out_another_process_lock_with_retry_notices(paths: Paths) -> None:
    paths.ensure()
    notices: list[tuple[int, float]] = []
    enough = asyncio.Event()

    def on_retry(attempt: int, delay: float) -> None:
        notices.append((attempt, delay))
        if attempt >= 4:  # the lock has now been held through four backoffs
            enough.set()

    db = await Database.open(paths.db_file, on_retry=on_retry, busy_timeout_ms=100)
    try:
        store = SessionStore(db)
        info = await store.create_session("/p")
        with lock_holder(paths.db_file) as release:
            write = asyncio.create_task(store.add_item(Item(None, info.id, "user", "kept", {"role": "user", "content": "kept"})))
            await asyncio.wait_for(enough.wait(), 30)
            assert not write.done()
            await asyncio.to_thread(release)
            saved = await asyncio.wait_for(write, 30)
        assert [a for a, _ in notices] == list(range(1, len(notices) + 1))
        assert saved.id is not None
        assert [i.content for i in await store.load_items(info.id)] == ["kept"]
    finally:
        await db.close()


@pytest.mark.slow
async def test_tui_shows_the_busy_notice_and_loses_nothing(
    fake: FakeOpenAI, settings: Settings, paths: Paths, project: Path
) -> None:
    fake.script(Reply("answered after the lock"))
    app = create_app(settings, paths, cwd=project, extensions=())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)  # the session opens behind the drawn prompt
        session_id = app.session.info.id
        with lock_holder(paths.db_file) as release:
            app.screen.query_one(PromptInput).insert("typed while another process writes")
            await pilot.press("enter")
            await wait_for(
                lambda: any("Database busy" in n.message for n in app._notifications), timeout=30
            )
            assert app.is_running
            await asyncio.to_thread(release)
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.session.items[-1].content == "answered after the lock"
    items = await stored_items(paths, session_id)
    assert [i.content for i in items] == ["typed while another process writes", "answered after the lock"]
