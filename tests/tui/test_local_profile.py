"""The bundled local model's profile: short system prompt, no tools, a memory wait.

The 135M model cannot call tools, so the app must not offer them, and with no tool
turns the first request of a question is the only point memory can reach it.
"""

from __future__ import annotations

from collections.abc import Callable

from qwenmem_tui.config import Settings
from qwenmem_tui.llm.local_server import LOCAL_SYSTEM_PROMPT, LocalChatDefaults
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply
from qwenmem_tui.tui.app import QwenmemApp

from .conftest import SIZE, send, settle

LOCAL = LocalChatDefaults(
    system_prompt=LOCAL_SYSTEM_PROMPT, max_tokens=256, context_window=4096, supports_tools=False
)


async def test_local_profile_sends_the_short_prompt_and_no_tools(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    fake.script(Reply("hi"))
    app = make_app(model_defaults=LOCAL)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "hello")
        await settle(pilot)
    body = fake.chat_requests[-1]
    assert body["messages"][0] == {"role": "system", "content": LOCAL_SYSTEM_PROMPT}
    assert "tools" not in body


async def test_default_profile_offers_the_builtin_tools(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    fake.script(Reply("hi"))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "hello")
        await settle(pilot)
    body = fake.chat_requests[-1]
    names = {tool["function"]["name"] for tool in body["tools"]}
    assert {"read_file", "list_directory"} <= names
    assert body["messages"][0]["content"] != LOCAL_SYSTEM_PROMPT


def test_apply_to_fits_the_window_and_waits_for_memory_only_without_tools() -> None:
    settings = Settings()
    LOCAL.apply_to(settings)
    assert settings.llm.context_window == 4096
    assert settings.memory.initial_wait_ms == LOCAL.prefetch_wait_ms > 0

    with_tools = Settings()
    LocalChatDefaults(LOCAL_SYSTEM_PROMPT, 256, 4096, supports_tools=True).apply_to(with_tools)
    assert with_tools.memory.initial_wait_ms == 0  # a ToolResult point exists: no wait
