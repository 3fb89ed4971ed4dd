"""Session titles from the fast model: made in the background after the first exchange,
kept to the first message on a failure or a garbage answer, redacted like it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from chat_support import collect

from qwenmem_tui.features.titles.hook import (
    TITLE_SYSTEM_PROMPT,
    SessionTitleHook,
    clean_title,
)
from qwenmem_tui.storage.sessions import SessionStore
from qwenmem_tui.testing.fake_openai import (
    FakeOpenAI,
    HTTPError,
    Reply,
    Response,
    by_system_prompt,
)

FIRST = "my parser crashes on empty input\nhere is the stack trace"
TOKEN = "ghp_R2d4F6h8J0k2L4m6N8p0Q2r4S6t8V0w2X4y6"


def title_requests(fake: FakeOpenAI) -> list[dict[str, Any]]:
    return [b for b in fake.chat_requests if b["messages"][0]["content"] == TITLE_SYSTEM_PROMPT]


def answer_titles(fake: FakeOpenAI, answer: Callable[[dict[str, Any]], Response]) -> None:
    fake.responder = by_system_prompt({TITLE_SYSTEM_PROMPT: answer})


async def test_first_exchange_titles_the_session_in_the_background(
    fake: FakeOpenAI, make_session: Any, session_store: SessionStore
) -> None:
    release = threading.Event()
    answer_titles(fake, lambda body: Reply('"Parser crash on empty input."', gate=release))
    hook = SessionTitleHook()
    session = await make_session(hook)
    fake.script(Reply("Show me the parser."))
    await collect(session, FIRST)  # the reply is done while the title still waits
    listed = await session_store.get_session(session.info.id)
    assert listed is not None and listed.title == "my parser crashes on empty input"
    release.set()
    await hook.drain()
    listed = await session_store.get_session(session.info.id)
    assert listed is not None and listed.title == "Parser crash on empty input"
    assert session.info.title == "Parser crash on empty input"
    (request,) = title_requests(fake)
    assert request["model"] == "test-fast"  # llm.fast_model
    assert "my parser crashes" in request["messages"][1]["content"]
    # Once per session: the next exchange asks for no other title.
    fake.script(Reply("Thanks."))
    await collect(session, "it works now")
    await hook.drain()
    assert len(title_requests(fake)) == 1


@pytest.mark.parametrize(
    "answer",
    [
        Reply("Sure! Here is a title for this conversation:\n\n**Parser crash**"),
        Reply(""),
        Reply("<think>the user wants a title</think>"),
        Reply(" ".join(["word"] * 30)),
        HTTPError(500, "down"),
    ],
)
async def test_a_failure_or_garbage_keeps_the_first_message_title(
    fake: FakeOpenAI, make_session: Any, session_store: SessionStore, answer: Response
) -> None:
    answer_titles(fake, lambda body: answer)
    hook = SessionTitleHook()
    session = await make_session(hook)
    fake.script(Reply("Show me the parser."))
    await collect(session, FIRST)
    await hook.drain()
    assert len(title_requests(fake)) >= 1
    listed = await session_store.get_session(session.info.id)
    assert listed is not None and listed.title == "my parser crashes on empty input"


async def test_the_models_title_is_redacted_like_the_first_message(
    fake: FakeOpenAI, make_session: Any, session_store: SessionStore
) -> None:
    answer_titles(fake, lambda body: Reply(f"Push with {TOKEN}"))
    hook = SessionTitleHook()
    session = await make_session(hook)
    fake.script(Reply("Done."))
    await collect(session, "how do I push")
    await hook.drain()
    listed = await session_store.get_session(session.info.id)
    assert listed is not None and listed.title.startswith("Push with")
    assert TOKEN not in listed.title and TOKEN not in session.info.title


def test_clean_title() -> None:
    assert clean_title("Title: Fix the parser.") == "Fix the parser"
    assert clean_title("  `Débogage du parseur`  ") == "Débogage du parseur"
    assert clean_title("a\nb") is None
    assert clean_title("see https://example.com") is None
