"""The feature assembly (qwenmem_tui/features/assembly.py) on real parts: settings from a temp
home, the real LLM client over HTTP to the fake server, a real memory service (SQLite
and FAISS) opened by `MemoryAccess`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chat_support import collect

from qwenmem_tui.chat.tools import Tool, ToolContext
from qwenmem_tui.config import Settings
from qwenmem_tui.features.assembly import Assembly, enabled_features
from qwenmem_tui.features.compaction.feature import COMPACTION, COMPACTION_HOOK
from qwenmem_tui.features.compaction.hook import CompactionHook
from qwenmem_tui.features.feature import offers_tools
from qwenmem_tui.features.memory.access import MemoryUnavailable
from qwenmem_tui.features.memory.extract import (
    EXTRACTION_SYSTEM_PROMPT,
    MemoryExtractionHook,
)
from qwenmem_tui.features.memory.feature import MEMORY, MEMORY_SESSION, MEMORY_STATE
from qwenmem_tui.features.memory.prefetch import MemoryPrefetchHook
from qwenmem_tui.features.memory.receipts import MemoryReceiptHook
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.llm.local_server import LocalChatDefaults
from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply

LOCAL = LocalChatDefaults(
    system_prompt="Small local model.", max_tokens=256, context_window=4096, supports_tools=False
)


async def _echo(args: dict, ctx: ToolContext) -> str:
    return "echo"


ECHO = Tool("echo", "Echo", {"type": "object", "properties": {}}, _echo)


def assembly(
    settings: Settings, paths: Paths, llm: LLMClient, project: Path, **options: object
) -> Assembly:
    return Assembly.create(
        settings, paths, llm=llm, project_root=project, project=project_id(project), **options
    )  # type: ignore[arg-type]


def tool_names(features) -> set[str]:
    return {schema["function"]["name"] for schema in features.tools.schemas()}


ALWAYS = {"recap", "instructions", "model", "export"}
"""The features with no settings of their own (they add nothing to a session)."""


def test_settings_decide_the_features(settings: Settings) -> None:
    settings.compaction.enabled = True
    settings.memory.enabled = True
    assert enabled_features(settings) == {COMPACTION, MEMORY, *ALWAYS}
    settings.compaction.enabled = False
    settings.memory.enabled = False
    assert enabled_features(settings) == ALWAYS
    assert offers_tools(None) and not offers_tools(LOCAL)


async def test_hooks_come_in_the_one_order_fresh_per_session(
    settings: Settings, paths: Paths, llm: LLMClient, project: Path
) -> None:
    built = assembly(settings, paths, llm, project, features={MEMORY, COMPACTION}, extra_tools=[ECHO])
    try:
        one, two = built.session(), built.session()
        memory, compaction = one.handle(MEMORY_SESSION), one.handle(COMPACTION_HOOK)
        assert [type(h) for h in one.hooks] == [
            CompactionHook,
            MemoryPrefetchHook,
            MemoryReceiptHook,
            MemoryExtractionHook,
        ]
        assert one.hooks == (compaction, memory.prefetch, memory.receipts, memory.extraction)
        # Per-session state (token gauge, surfaced memories) is never shared ...
        assert not set(map(id, one.hooks)) & set(map(id, two.hooks))
        # ... and compaction hands its blocks to its own session's extractor.
        assert compaction._extract == memory.extraction.extract_block
        assert tool_names(one) == {"read_file", "list_directory", "echo", "save_memory"}
    finally:
        await built.close()


async def test_a_model_that_cannot_call_tools_is_offered_none(
    settings: Settings, paths: Paths, llm: LLMClient, project: Path
) -> None:
    built = assembly(
        settings, paths, llm, project, features={MEMORY}, model_defaults=LOCAL, extra_tools=[ECHO]
    )
    try:
        features = built.session()
        assert features.tools.schemas() == []
        assert features.handle(MEMORY_SESSION).prefetch is not None  # memory still reaches it, by prefetch
    finally:
        await built.close()


def test_only_known_features_are_assembled(
    settings: Settings, paths: Paths, project: Path, fake: FakeOpenAI
) -> None:
    llm = LLMClient(base_url=fake.base_url, api_key=None, model="m")
    with pytest.raises(ValueError, match="unknown features: memroy"):
        assembly(settings, paths, llm, project, features={"memroy"})
    nothing = assembly(settings, paths, llm, project, features=())
    features = nothing.session()
    assert features.hooks == () and nothing.state(MEMORY_STATE) is None
    assert tool_names(features) == {"read_file", "list_directory"}


async def test_extraction_skips_turns_until_memory_is_open_then_writes(
    settings: Settings, paths: Paths, llm: LLMClient, project: Path, fake: FakeOpenAI, make_session
) -> None:
    settings.memory.extraction = True
    built = assembly(settings, paths, llm, project, features={MEMORY})
    features = built.session()
    # Extraction alone: prefetch's recall would start the opening (and race this test).
    session = await make_session(features.handle(MEMORY_SESSION).extraction, tools=features.tools)
    fake.script(Reply("Noted."))
    await collect(session, "I am Ada and I always deploy on Fridays.")
    # The service was never asked for: extraction skipped the turn instead of waiting.
    assert built.state(MEMORY_STATE) is not None and built.state(MEMORY_STATE).opened is None
    assert all(b["messages"][0]["content"] != EXTRACTION_SYSTEM_PROMPT for b in fake.chat_requests)

    service = await built.state(MEMORY_STATE).service()
    proposal = {"memories": [{"category": "user", "key": "name", "value": "The user is Ada."}]}
    fake.script(Reply("Hello Ada."), Reply(json.dumps(proposal)))
    await collect(session, "Remember that my name is Ada.")
    await features.drain()
    saved = await service.list(project=project_id(project))
    assert [(m.key, m.value) for m in saved] == [("name", "The user is Ada.")]
    await session.close()
    await built.close()


async def test_an_unopenable_memory_is_one_clear_line(
    settings: Settings, paths: Paths, llm: LLMClient, project: Path
) -> None:
    paths.ensure()
    paths.db_file.write_bytes(b"this is not a database")  # the service cannot open it
    built = assembly(settings, paths, llm, project, features={MEMORY})
    features = built.session()
    with pytest.raises(MemoryUnavailable, match="^Long-term memory is unavailable: "):
        await built.state(MEMORY_STATE).service()  # type: ignore[union-attr]
    arguments = json.dumps({"category": "user", "key": "k", "value": "v"})
    result = await features.tools.call("save_memory", arguments, ToolContext(project, "s"))
    assert result.is_error and result.content.startswith("Long-term memory is unavailable: ")
    await built.close()


async def test_a_new_feature_is_one_registration(
    settings: Settings, paths: Paths, llm: LLMClient, project: Path, monkeypatch
) -> None:
    """The docs' worked example: a feature is a `Feature` and one line in FEATURES."""
    from qwenmem_tui.chat.session import BaseQueryHook
    from qwenmem_tui.features import registry
    from qwenmem_tui.features.feature import Feature, SessionPart

    class Stamp(BaseQueryHook):
        pass

    stamp = Feature(
        "stamp",
        hook_rank=5,  # after compaction (0), before memory (10)
        enabled=lambda settings: True,
        session=lambda state, context, wiring: SessionPart(hooks=(Stamp(),), tools=(ECHO,)),
    )
    monkeypatch.setattr(registry, "FEATURES", (*registry.FEATURES, stamp))
    assert "stamp" in enabled_features(settings)
    built = assembly(settings, paths, llm, project, features={COMPACTION, MEMORY, "stamp"})
    try:
        one = built.session()
        assert [type(h).__name__ for h in one.hooks][:3] == ["CompactionHook", "Stamp", "MemoryPrefetchHook"]
        assert "echo" in tool_names(one)
    finally:
        await built.close()
