"""Helpers the chat tests share (a module, so tests can import it; fixtures are in conftest)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from qwenmem_tui.chat.events import ChatEvent, QueryFinished
from qwenmem_tui.chat.session import ChatSession
from qwenmem_tui.chat.tools import builtin_tools
from qwenmem_tui.chat.turns import QueryOutcome
from qwenmem_tui.config import LLMSettings, Settings
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.storage import SessionStore

TEST_API_KEY = "sk-test-qwenmem-0000"
CHAT_MODEL = "test-model"

SessionFactory = Callable[..., Awaitable[ChatSession]]
"""The ``make_session`` fixture: ``await make_session(*hooks, **overrides)``."""


def chat_llm(base_url: str, **overrides: Any) -> LLMSettings:
    """The chat tests' model settings: the fake server's test model, five turns a query
    (small enough that the turn cap is reachable in a test)."""
    return LLMSettings(**{"base_url": base_url, "model": CHAT_MODEL, "max_turns": 5, **overrides})


def session_parts(
    store: SessionStore, llm: LLMClient, settings: Settings, project: Path
) -> dict[str, Any]:
    """The keywords ``ChatSession(info=...)`` and ``ChatSession.load(session_id=...)``
    take besides those: a session in ``project`` with the builtin tools (a fresh registry)."""
    return {
        "store": store,
        "llm": llm,
        "tools": builtin_tools(project),
        "settings": settings,
        "project_root": project,
    }


async def collect(session: ChatSession, text: str) -> list[ChatEvent]:
    """Run one query to its end; every event it yielded."""
    return [event async for event in session.run_query(text)]


def outcome_of(events: list[ChatEvent]) -> QueryOutcome:
    last = events[-1]
    assert isinstance(last, QueryFinished), events
    return last.outcome
