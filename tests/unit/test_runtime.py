"""The runtime (qwenmem_tui/runtime.py) on real parts: a temp home's SQLite database, the
real LLM client over HTTP to the fake server, the real memory service (SQLite, FAISS).

It is what every face opens; these tests drive it the way a face does, without one."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from chat_support import collect, outcome_of

from qwenmem_tui.chat.session import DEFAULT_SYSTEM_PROMPT
from qwenmem_tui.config import Settings
from qwenmem_tui.features.compaction.feature import COMPACTION
from qwenmem_tui.features.memory.feature import MEMORY, MEMORY_STATE
from qwenmem_tui.memory.model import Origin
from qwenmem_tui.features.memory.remote import Caller
from qwenmem_tui.features.memory.views import exchange_memory, project_memory
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.llm.local_server import LocalChatDefaults
from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.runtime import ModelStarter, Runtime, StartupError, check_resume
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply

LOCAL = LocalChatDefaults(
    system_prompt="Small local model.", max_tokens=256, context_window=4096, supports_tools=False
)


def tool_names(chat) -> set[str]:
    return {schema["function"]["name"] for schema in chat.tools.schemas()}


async def test_a_new_chat_is_ready_and_resumes_from_the_store(
    settings: Settings, paths: Paths, project: Path, fake: FakeOpenAI
) -> None:
    runtime = await Runtime.open(settings, paths, project, features={COMPACTION, MEMORY})
    try:
        chat = await runtime.open_chat()
        fake.script(Reply("hello there"))
        assert outcome_of(await collect(chat, "hi")).status == "ok"
        sent = fake.chat_requests[-1]
        assert sent["messages"][0] == {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}
        assert {"read_file", "list_directory", "save_memory"} <= tool_names(chat)
        # The assembly's hooks, in its order (compaction first).
        assert [type(h) for h in chat.hooks] == [type(h) for h in runtime.session_features().hooks]
        assert type(chat.hooks[0]).__name__ == "CompactionHook"
        await chat.close()
        # By id, by a unique prefix, by its info: the same stored conversation.
        found = await runtime.find_session(chat.info.id[:8])
        again = await runtime.open_chat(found)
        assert [i.content for i in again.items if i.type in ("user", "assistant")] == [
            "hi",
            "hello there",
        ]
        assert runtime.model_view(again.items) == again.history()
        # A fresh set of hooks per chat unless the face passes its own.
        assert not set(map(id, again.hooks)) & set(map(id, chat.hooks))
        await again.close()
    finally:
        await runtime.close()
    assert await check_resume(paths, project, chat.info.id[:8]) == chat.info.id


async def test_the_local_model_profile_decides_prompt_and_tools_in_one_place(
    settings: Settings, paths: Paths, project: Path, fake: FakeOpenAI
) -> None:
    runtime = await Runtime.open(settings, paths, project, features={MEMORY}, model_defaults=LOCAL)
    try:
        chat = await runtime.open_chat()
        assert chat.system_prompt == runtime.system_prompt == LOCAL.system_prompt
        assert runtime.model_view([])[0] == {"role": "system", "content": LOCAL.system_prompt}
        assert chat.tools.schemas() == []
        fake.script(Reply("ok"))
        await collect(chat, "hi")
        assert "tools" not in fake.chat_requests[-1]
        await chat.close()
    finally:
        await runtime.close()


async def test_a_starting_model_runs_while_the_database_opens_and_is_closed_with_it(
    settings: Settings, paths: Paths, project: Path, fake: FakeOpenAI
) -> None:
    gate = asyncio.Event()
    lines: list[str] = []
    started: list[LLMClient] = []

    async def start(progress) -> LLMClient:
        progress("loading…")
        await gate.wait()
        client = LLMClient(base_url=fake.base_url, api_key=None, model="local-model")
        started.append(client)
        return client

    opening = asyncio.create_task(
        Runtime.open(
            settings,
            paths,
            project,
            features=(),
            start_model=ModelStarter("local: test", start),
            model_progress=lines.append,
        )
    )
    # The database is created while the model is still starting.
    while not (paths.db_file.exists() and lines):
        await asyncio.sleep(0)
    assert not opening.done() and lines == ["loading…"]
    gate.set()
    runtime = await opening
    assert runtime.llm is started[0]
    await runtime.close()
    await runtime.close()  # twice is harmless
    assert started[0]._client.is_closed()  # the runtime owned the client it started


async def test_a_failing_start_is_one_line_and_leaves_nothing_open(
    settings: Settings, paths: Paths, project: Path
) -> None:
    async def fail(progress) -> LLMClient:
        raise StartupError("the local model crashed (SIGILL)")

    async def features() -> set[str]:
        return {MEMORY}

    with pytest.raises(StartupError, match="SIGILL"):
        await Runtime.open(
            settings, paths, project, start_model=ModelStarter("local", fail), features=features()
        )
    # The database it opened is closed again: another process can take it at once.
    sqlite3.connect(paths.db_file).execute("BEGIN EXCLUSIVE").close()

    paths.db_file.unlink()
    paths.db_file.write_bytes(b"not a database")
    with pytest.raises(StartupError, match=str(paths.db_file)):
        await Runtime.open(settings, paths, project, features=features())


async def test_open_memory_fails_the_opening_on_a_broken_store(
    settings: Settings, paths: Paths, project: Path, llm: LLMClient, monkeypatch
) -> None:
    from qwenmem_tui.memory.service import MemoryService

    async def broken(*args, **kwargs):
        raise OSError("disk on fire")

    monkeypatch.setattr(MemoryService, "open", broken)
    with pytest.raises(StartupError, match="Long-term memory is unavailable: disk on fire"):
        await Runtime.open(settings, paths, project, llm=llm, features={MEMORY}, wait_ready=True)
    # In the background (the TUI), the same failure leaves the runtime usable.
    runtime = await Runtime.open(settings, paths, project, llm=llm, features={MEMORY})
    try:
        chat = await runtime.open_chat()
        assert chat.info.project == runtime.project
        await chat.close()
    finally:
        await runtime.close()
    assert not llm._client.is_closed()  # an injected client stays the caller's


async def test_project_memory_is_the_one_write_path_scoped_to_its_project(
    settings: Settings, paths: Paths, project: Path, llm: LLMClient, tmp_path: Path
) -> None:
    """What the faces that are not a chat use: search, remember as a client, list, forget."""
    other_root = tmp_path / "other"
    other_root.mkdir()
    caller = Caller("MCP", "test-client")
    runtime = await Runtime.open(settings, paths, project, llm=llm, features={MEMORY})
    try:
        here, there = project_memory(runtime, caller), project_memory(runtime, caller, other_root)
        assert here.project == project_id(project) != there.project
        saved = await here.remember("The project builds with hatch.", "project", "build_tool")
        assert saved["action"] == "created"
        service = await runtime.state(MEMORY_STATE).service()
        stored = await service.get(saved["id"])
        assert stored is not None and stored.origin == Origin.AGENT
        audit = await service.audit(saved["id"])
        assert "MCP client test-client" in audit[0].reason
        # An order for every project, from a view qwenmem cannot see, is held.
        held = await here.remember("Always answer in French.", "feedback", "tone")
        assert held["action"] == "quarantined"

        found = await here.search("which build tool does the project use? hatch")
        assert [m["id"] for m in found["memories"]] == [saved["id"]]
        assert (await there.search("which build tool? hatch"))["memories"] == []
        assert await there.forget(saved["id"]) == {"forgotten": False}
        assert [m["id"] for m in (await here.list())["memories"]] == [saved["id"]]
        assert await here.forget(saved["id"]) == {"forgotten": True}
        assert (await here.search("hatch build tool"))["memories"] == []
    finally:
        await runtime.close()


async def test_project_memory_needs_memory_assembled(
    settings: Settings, paths: Paths, project: Path, llm: LLMClient
) -> None:
    runtime = await Runtime.open(settings, paths, project, llm=llm, features={COMPACTION})
    try:
        assert runtime.state(MEMORY_STATE) is None
        with pytest.raises(StartupError, match="memory is turned off"):
            project_memory(runtime, Caller("MCP"))
    finally:
        await runtime.close()


async def test_a_runtime_serving_no_chats_opens_memory_rows_first_and_no_model(
    settings: Settings, paths: Paths, project: Path, fake: FakeOpenAI
) -> None:
    """`qwenmem mcp`'s runtime: memory alone, counted open with its rows, no model
    client (a hash embedder needs none: no request reaches the endpoint), no chat."""
    settings.memory.embedding = "hash"
    runtime = await Runtime.open(settings, paths, project, chats=False)
    try:
        assert runtime.assembly.features == {MEMORY}
        assert runtime.state(MEMORY_STATE) is not None
        runtime.state(MEMORY_STATE).start()
        service = await runtime.state(MEMORY_STATE).service()
        assert not service.vectors.ready  # rows first: the vectors wait for a need
        here = project_memory(runtime, Caller("MCP", "test-client"))
        saved = await here.remember("The project builds with hatch.", "project", "build_tool")
        assert saved["action"] == "created"
        assert [m["id"] for m in (await here.list())["memories"]] == [saved["id"]]
        with pytest.raises(RuntimeError, match="serves no chats"):
            await runtime.open_chat()
        with pytest.raises(RuntimeError, match="serves no chats"):
            runtime.llm
        assert exchange_memory(runtime) is not None
    finally:
        await runtime.close()
    assert fake.requests == []  # no model judge, no embedding call, nothing
    with pytest.raises(ValueError, match="serving without them"):
        await Runtime.open(settings, paths, project, chats=False, features={COMPACTION})


async def test_the_bundled_model_starts_through_the_runtime_for_every_face(
    settings: Settings, paths: Paths, project: Path, tmp_path: Path
) -> None:
    """`local_model_starter`: the TUI and `qwenmem serve` hand the runtime the server,
    the runtime makes its client; a server that cannot start is one StartupError line."""
    from qwenmem_tui.llm.local_server import LocalModelServer
    from qwenmem_tui.runtime import local_model_starter

    missing = LocalModelServer(tmp_path / "no-such-model.gguf", log_dir=tmp_path / "debug")
    lines: list[str] = []
    with pytest.raises(StartupError, match="Local model file not found"):
        await Runtime.open(
            settings,
            paths,
            project,
            start_model=local_model_starter(missing, settings),
            model_progress=lines.append,
            features=set(),
        )
    assert lines == []  # it failed before loading anything
    sqlite3.connect(paths.db_file).execute("BEGIN EXCLUSIVE").close()  # nothing left open


async def test_the_chat_client_is_built_and_warmed_off_the_event_loop(
    settings: Settings, paths: Paths, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK imports its HTTP stack as a client is built and its chat resources on the
    # first request: ~60 + ~100 ms that held the loop (and the keys) at startup and at
    # the user's first message.
    import threading

    on_loop: dict[str, bool] = {}
    from_settings = LLMClient.from_settings.__func__  # type: ignore[attr-defined]
    warm = LLMClient.warm

    def built(cls: type[LLMClient], *args: object, **kwargs: object) -> LLMClient:
        on_loop["built"] = threading.current_thread() is threading.main_thread()
        return from_settings(cls, *args, **kwargs)

    def warmed(llm: LLMClient) -> None:
        on_loop["warmed"] = threading.current_thread() is threading.main_thread()
        warm(llm)

    monkeypatch.setattr(LLMClient, "from_settings", classmethod(built))
    monkeypatch.setattr(LLMClient, "warm", warmed)
    runtime = await Runtime.open(settings, paths, project, features={MEMORY})
    try:
        assert on_loop == {"built": False, "warmed": False}
        # Warm: the SDK's chat resource is built (a cached property of the client).
        assert "chat" in vars(runtime.llm._client)
    finally:
        await runtime.close()
