"""A day in one session (issue 41): one real chat, on the runtime every face opens,
against the loopback FakeOpenAI, for thousands of turns.

Every turn is a real query through ChatSession (recall, the memory tool, compaction
hooks): two turns in five the model saves a memory with the save_memory tool, every
tenth the soak forgets what was saved, the small context window makes compaction fire
again and again, a recap is asked for every 100 turns, and the chat is closed and
resumed from the database every 500 (both intervals are parameters). Every `every` turns a checkpoint records RSS,
open fds, threads, asyncio tasks, database and index size and the turn times. At the
end every user message and every memory is accounted for.

Used by tests/reliability/test_soak.py (short) and bench/bench_soak.py (5,000 turns).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import re
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qwenmem_tui.chat.events import QueryFinished
from qwenmem_tui.chat.session import ChatSession
from qwenmem_tui.chat.view import COMPACTION_ITEM
from qwenmem_tui.chat.window import view_start
from qwenmem_tui.config import load_settings
from qwenmem_tui.features import registry  # noqa: F401  (the features' settings sections)
from qwenmem_tui.features.compaction.summariser import SUMMARY_SYSTEM_PROMPT
from qwenmem_tui.features.memory.feature import MEMORY_STATE
from qwenmem_tui.memory.model import Status
from qwenmem_tui.features.recap.session_recap import RECAP_SYSTEM_PROMPT, generate_session_recap
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.paths import Paths
from qwenmem_tui.runtime import Runtime
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec, by_system_prompt

API_KEY = "sk-soak-0000"
TURN = re.compile(r"Turn (\d+):")
SUMMARY = json.dumps({"summary": "The user is configuring services and their ports.", "decisions": [],
                      "pinned_turns": []})
# The loop's default executor (asyncio.to_thread), installed by the soak with the bound
# the stdlib's default has and a name of its own: its threads start lazily, one more
# whenever work arrives while none is idle, so how many there are at a checkpoint
# follows the machine's load; what cannot vary is that they stay within the bound.
POOL = "soak-pool"
POOL_MAX = min(32, (os.cpu_count() or 1) + 4)
ANSWER = "Noted. " + " ".join(f"Point {k}: the handler keeps its state between calls." for k in range(12))


@dataclass
class Checkpoint:
    turn: int
    rss_mb: float
    fds: int
    threads: int  # outside the default executor's pool: each one a connection, a server, a loop
    tasks: int
    db_kb: float
    index_kb: float
    turn_ms_p50: float
    turn_ms_p95: float
    turn_cpu_ms_p50: float = 0.0  # the process's CPU per turn: what load on the machine does not change
    held: int = 0  # the chat's items in memory (window and carried pins)
    view: int = 0  # of them, those the model view reads (after the cut, and the pins)
    stored: int = 0  # the session's items in the database
    pool_threads: int = 0  # the default executor's, at most POOL_MAX
    thread_names: tuple[str, ...] = ()  # of `threads`, to name the one that grew
    fd_names: tuple[str, ...] = ()  # what each of `fds` is open on, likewise


@dataclass
class SoakReport:
    checkpoints: list[Checkpoint] = field(default_factory=list)
    turns: int = 0
    writes: int = 0
    forgets: int = 0
    compactions: int = 0  # markers stored: summaries that replaced older turns
    recaps: int = 0
    resumes: int = 0
    user_items: int = 0  # stored at the end
    memories_active: int = 0
    memories_deleted: int = 0


def _respond(body: dict[str, Any]) -> Reply:
    """The chat model: on a turn whose number says so, a save_memory call first."""
    messages = body["messages"]
    last = messages[-1]
    if last.get("role") == "tool":
        return Reply(ANSWER)
    found = TURN.search(str(last.get("content", "")))
    turn = int(found.group(1)) if found else 0
    if turn % 5 in (1, 3) and any(t["function"]["name"] == "save_memory" for t in body.get("tools", [])):
        args = {"category": "project", "key": f"service_{turn}_port",
                "value": f"Service {turn} listens on port {10000 + turn}"}
        return Reply(tool_calls=[ToolCallSpec("save_memory", args, id=f"call_{turn}")])
    return Reply(ANSWER)


def write_home(home: Path, base_url: str) -> None:
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    config = home / "config.toml"
    config.write_text(
        "[llm]\n"
        f'base_url = "{base_url}"\n'
        f'api_key = "{API_KEY}"\n'
        'model = "soak-model"\n'
        'fast_model = "soak-fast"\n'
        "context_window = 4096\n"  # compaction every few dozen turns
        "session_titles = false\n"
        "[memory]\n"
        'embedding = "hash"\n'
        "extraction = false\n"
        "[compaction]\n"
        "keep_recent_turns = 3\n",
        encoding="utf-8",
    )
    config.chmod(0o600)


def _size_kb(*paths: Path) -> float:
    total = 0
    for path in paths:
        files = path.rglob("*") if path.is_dir() else [path]
        total += sum(f.stat().st_size for f in files if f.is_file())
    return total / 1024


def _links() -> dict[str, str]:
    links = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            links[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed since it was listed (the listing's own fd, or a thread's)
            pass
    return links


def _app_fds(fake: FakeOpenAI | None) -> tuple[str, ...]:
    """Open fds, less the fake server's side of its connections (FakeOpenAI.served_sockets
    says why). The reads repeat until none changed between them."""

    def served() -> set[str]:
        return {f"socket:[{inode}]" for inode in fake.served_sockets()} if fake is not None else set()

    while True:
        before, links = served(), _links()
        if _links() == links and served() == before:
            return tuple(sorted(link for link in links.values() if link not in before))


def checkpoint(
    turn: int, paths: Paths, times: list[float], chat: Any = None, cpu: list[float] | None = None,
    fake: FakeOpenAI | None = None,
) -> Checkpoint:
    gc.collect()
    with open("/proc/self/statm") as statm:
        rss_pages = int(statm.read().split()[1])
    db = paths.db_file
    fds = _app_fds(fake)
    names = [t.name for t in threading.enumerate()]
    # The fake server's handler threads (one a connection, named by their target) end when
    # they notice the client's close: theirs, like their sockets, are not the app's.
    others = tuple(sorted(n for n in names if not n.startswith(POOL + "_") and "(process_request_thread)" not in n))
    pool = sum(1 for n in names if n.startswith(POOL + "_"))
    return Checkpoint(
        turn=turn,
        rss_mb=rss_pages * os.sysconf("SC_PAGE_SIZE") / 2**20,
        fds=len(fds),
        fd_names=fds,
        threads=len(others),
        pool_threads=pool,
        thread_names=others,
        tasks=len(asyncio.all_tasks()),
        db_kb=_size_kb(*(p for p in (db, db.with_name(db.name + "-wal")) if p.exists())),
        index_kb=_size_kb(paths.index_dir) if paths.index_dir.exists() else 0.0,
        turn_ms_p50=statistics.median(times) * 1000 if times else 0.0,
        turn_ms_p95=(statistics.quantiles(times, n=20)[-1] if len(times) >= 20 else max(times or [0])) * 1000,
        turn_cpu_ms_p50=statistics.median(cpu) * 1000 if cpu else 0.0,
        held=len(chat.items) + len(chat.carried) if chat is not None else 0,
        view=len(chat.items) - view_start(chat.items) + len(chat.carried) if chat is not None else 0,
        stored=chat.item_count if chat is not None else 0,
    )


async def soak(
    workdir: Path, *, turns: int, every: int, recap_every: int = 100, resume_every: int = 500,
    on_checkpoint: Any = None, window_items: int | None = None,
) -> SoakReport:
    """Run the soak in `workdir`; `on_checkpoint(Checkpoint)` hears each as it is taken.
    `window_items`: the chat's window in memory, when not the product's default."""
    home, project = workdir / "home", workdir / "project"
    (project / ".git").mkdir(parents=True, exist_ok=True)
    report = SoakReport()
    pool = ThreadPoolExecutor(POOL_MAX, thread_name_prefix=POOL)
    asyncio.get_running_loop().set_default_executor(pool)
    with FakeOpenAI() as fake:
        fake.responder = by_system_prompt(
            {SUMMARY_SYSTEM_PROMPT: lambda body: Reply(SUMMARY),
             RECAP_SYSTEM_PROMPT: lambda body: Reply("<recap>The user set up service ports.</recap>")},
            fallback=_respond,
        )
        write_home(home, fake.base_url)
        paths = Paths(home)
        settings = load_settings(paths.config_file)
        runtime = await Runtime.open(settings, paths, project, wait_ready=True)
        try:
            await _drive(runtime, fake, paths, report, turns=turns, every=every, recap_every=recap_every,
                         resume_every=resume_every, on_checkpoint=on_checkpoint, window_items=window_items)
        finally:
            await runtime.close()
    await _account(settings, paths, report)
    return report


async def _drive(runtime: Runtime, fake: FakeOpenAI, paths: Paths, report: SoakReport, *,
                 turns: int, every: int, recap_every: int, resume_every: int, on_checkpoint: Any,
                 window_items: int | None) -> None:
    access = runtime.state(MEMORY_STATE)
    assert access is not None
    service = await access.service()

    async def open_chat(session_id: str | None = None) -> ChatSession:
        chat = await runtime.open_chat(session_id)
        if window_items is not None:
            chat.window_items = window_items
            if session_id is not None:
                await chat.reload()  # read again with this window
        return chat

    chat = await open_chat()
    times: list[float] = []
    cpu: list[float] = []
    for turn in range(1, turns + 1):
        started, started_cpu = time.perf_counter(), time.process_time()
        events = [event async for event in chat.run_query(f"Turn {turn}: which port does service {turn} use?")]
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
        assert isinstance(events[-1], QueryFinished), events[-1]
        report.turns += 1
        if turn % 10 == 0:  # forget what the last ten turns saved
            for memory in await service.list(statuses=[Status.ACTIVE]):
                await service.forget(memory.id, reason="soak")
                report.forgets += 1
        if turn % recap_every == 0:
            history = runtime.model_view(chat.items)
            if await generate_session_recap(history, runtime.llm) is not None:
                report.recaps += 1
        if turn % resume_every == 0:  # resumed from the database, as after a restart
            session_id = chat.info.id
            await chat.close()
            chat = await open_chat(session_id)
            report.resumes += 1
        if turn % every == 0 or turn == turns:
            fake.clear()  # the fake's own record of requests is not the app's memory
            point = checkpoint(turn, paths, times, chat, cpu, fake=fake)
            times, cpu = [], []
            report.checkpoints.append(point)
            if on_checkpoint is not None:
                on_checkpoint(point)
    await chat.close()


async def _account(settings: Any, paths: Paths, report: SoakReport) -> None:
    """What the database holds at the end: every user message, every memory."""
    from qwenmem_tui.memory.service import MemoryService
    from qwenmem_tui.storage import Database, SessionStore

    db = await Database.open(paths.db_file)
    try:
        store = SessionStore(db)
        [info] = await store.list_sessions()
        items = await store.load_items(info.id)
        report.user_items = sum(1 for item in items if item.type == "user")
        report.compactions = sum(1 for item in items if item.type == COMPACTION_ITEM)
    finally:
        await db.close()
    service = await MemoryService.open(settings, paths)
    try:
        memories = await service.list()
        report.writes = len(memories)
        report.memories_active = sum(m.status is Status.ACTIVE for m in memories)
        report.memories_deleted = sum(m.status is Status.DELETED for m in memories)
    finally:
        await service.close()
