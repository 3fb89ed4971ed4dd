"""Session titles a person can scan in /resume: a few words from the fast model.

Until the model answers, a session is titled by its first message (cut to its first
line, secrets redacted: `storage.sessions.make_title`). After the first exchange this
hook asks the fast model (`llm.fast_model`, else `llm.model`) for a short title, in the
background, as a side call: it never delays a reply, and gives way to the user's own
requests on a one-request-at-a-time endpoint. A failed call or an answer that is not a
short title keeps the first-message title; the model's title goes through the same
redaction (`SessionStore.set_title` uses `make_title`).
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import TYPE_CHECKING

from qwenmem_tui.chat.session import BaseQueryHook
from qwenmem_tui.chat.turns import QueryOutcome
from qwenmem_tui.text import one_line

if TYPE_CHECKING:
    from qwenmem_tui.chat.session import ChatSession

log = logging.getLogger("qwenmem.titles")

TITLE_SYSTEM_PROMPT = (
    "You name chat sessions. Reply with a title of 2 to 7 words for the conversation "
    "below, in the user's language: no quotes, no trailing punctuation, nothing else."
)
TITLE_MAX_TOKENS = 24
TITLE_MAX_WORDS = 10
TITLE_MAX_CHARS = 60
EXCERPT_CHARS = 1500
"""Of the first message and of the reply, what the model is shown (a title needs little)."""

_WRAPPERS = "\"'`*#“”‘’«»「」 "


def clean_title(answer: str) -> str | None:
    """The model's answer as a title, or None when it is not one (empty, a paragraph,
    markup, a refusal-length ramble): the first-message title stays then."""
    lines = [line for line in answer.strip().splitlines() if line.strip()]
    if len(lines) != 1:
        return None
    title = re.sub(r"^(title|titre|标题)\s*[:：]\s*", "", lines[0].strip(), flags=re.IGNORECASE)
    title = one_line(title).strip(_WRAPPERS).rstrip(".!。").strip(_WRAPPERS)
    if not title or len(title) > TITLE_MAX_CHARS or len(title.split()) > TITLE_MAX_WORDS:
        return None
    if any(mark in title for mark in ("<", ">", "{", "}", "http://", "https://")):
        return None
    return title


class SessionTitleHook(BaseQueryHook):
    """After a session's first exchange, titles it from the fast model in the background."""

    def __init__(self) -> None:
        self._asked: set[str] = set()  # sessions asked for already (once each)
        self._tasks: set[asyncio.Task[None]] = set()

    async def on_query_end(self, session: ChatSession, outcome: QueryOutcome) -> None:
        if outcome.status != "ok" or session.info.id in self._asked:
            return
        users = [item for item in session.items if item.type == "user"]
        replies = [item for item in session.items if item.type == "assistant" and item.content]
        # Not the first exchange (or a resumed session, or a window past its start).
        if len(users) != 1 or not replies or session.earlier:
            return
        self._asked.add(session.info.id)
        task = asyncio.create_task(
            self._title(session, users[0].content, replies[-1].content),
            name=f"title-{session.info.id}",
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _title(self, session: ChatSession, first: str, reply: str) -> None:
        messages = [
            {"role": "system", "content": TITLE_SYSTEM_PROMPT},
            {
                "role": "user",
                "content": f"User: {first[:EXCERPT_CHARS]}\n\nAssistant: {reply[:EXCERPT_CHARS]}",
            },
        ]
        try:
            completion = await session.llm.complete(
                messages, model=session.llm.fast_model, max_tokens=TITLE_MAX_TOKENS
            )
        except Exception as exc:  # best effort: the first-message title stays
            log.info("[TITLE] no title for session %s: %s", session.info.id, one_line(str(exc)))
            return
        title = clean_title(completion.content or "")
        if title is None:
            log.info("[TITLE] not a title, kept the first message: %r", (completion.content or "")[:80])
            return
        try:
            await session.store.set_title(session.info.id, title)
        except Exception:
            log.warning("[TITLE] could not store the title of %s", session.info.id, exc_info=True)
            return
        stored = await session.store.get_session(session.info.id)
        if stored is not None:
            session.info.title = stored.title
        log.info("[TITLE] session %s titled", session.info.id)

    async def drain(self) -> None:
        """Wait for the titles being made (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def on_close(self, session: ChatSession) -> None:
        for task in list(self._tasks):
            task.cancel()
