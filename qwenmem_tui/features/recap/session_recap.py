"""Session recap: a one- or two-sentence "where did I leave off" line.

The recap is a best-effort side query. It must never interrupt the user, never show
the model's reasoning and never raise into the UI, so every failure collapses to
``None`` and a ``[SESSION_RECAP]`` warning in the debug log (contract §5).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from qwenmem_tui.chat.view import content_text
from qwenmem_tui.features.instructions.files import instructions_in
from qwenmem_tui.features.recap.feature import RECAP_ITEM
from qwenmem_tui.llm.wire import Message
from qwenmem_tui.text import markdown_quote

if TYPE_CHECKING:
    from qwenmem_tui.llm.client import LLMClient
    from qwenmem_tui.storage.sessions import Item

log = logging.getLogger("qwenmem.recap")
T = TypeVar("T")
M = TypeVar("M", bound=Mapping[str, object])

RECAP_SYSTEM_PROMPT = """\
You write session recaps for a terminal chat assistant. The user stepped away and is \
coming back; tell them where they left off.

Rules:
- Under 40 words: 1-2 plain sentences. No markdown, no lists, no headings.
- First the overall task, then the one concrete next action.
- Never list what was done, never recite tool calls, never give a status report.
- Write in the same language as the conversation, whatever that language is. For \
Chinese, Japanese or Korean, keep it to about 80 characters in total.
- Wrap the recap in <recap>...</recap> and put nothing outside the tags: no preamble, \
no reasoning, no closing remarks.

Example:
<recap>Adding retry with backoff to the upload client. Next: write the test for the \
429 case.</recap>"""

RECAP_USER_PROMPT = (
    "Write the recap now, inside <recap>...</recap>, with nothing outside the tags."
)

#: How many dialog messages the recap model sees; older context rarely changes
#: "what am I doing and what is next" and only costs tokens.
RECENT_MESSAGE_WINDOW = 30
RECAP_MAX_TOKENS = 300
RECAP_TEMPERATURE = 0.3

#: A user message carrying this OpenAI ``name`` is the startup context block the
#: chat loop may send before the first real question; it is never dialog.
STARTUP_CONTEXT_NAME = "startup_context"

_RECAP_BLOCK = re.compile(r"<recap>(.*?)</recap>", re.IGNORECASE | re.DOTALL)
_RECAP_OPEN = re.compile(r"<recap>", re.IGNORECASE)
_RECAP_TAG = re.compile(r"</?recap>", re.IGNORECASE)
# An unclosed reminder swallows the rest of the text: half a reminder is still not
# something the user said.
_REMINDER = re.compile(
    r"<system-reminder>.*?(?:</system-reminder>|\Z)", re.IGNORECASE | re.DOTALL
)


def extract_recap(raw: str) -> str:
    """Pull the recap out of a model answer.

    Reasoning models often think aloud before answering, so only tagged text counts:
    the first ``<recap>…</recap>`` block; failing that (output cut by max_tokens)
    everything after a lone opening tag; failing that ``""`` — skipping is better
    than showing the model's preamble. Stray tags inside are removed, so the result
    never contains one (``<recap></recap>`` gives ``""``).
    """
    block = _RECAP_BLOCK.search(raw)
    if block is not None:
        text = block.group(1)
    else:
        opening = _RECAP_OPEN.search(raw)
        if opening is None:
            return ""
        text = raw[opening.end() :]
    # Removing one tag can join its neighbours into a new one ("<re<recap>cap>").
    while _RECAP_TAG.search(text):
        text = _RECAP_TAG.sub("", text)
    return text.strip()


def _strip_reminders(text: str) -> str:
    return _REMINDER.sub("", text).strip()


def filter_to_dialog(messages: Sequence[Mapping[str, object]]) -> list[dict[str, str]]:
    """Reduce a chat history to what the user and the assistant said to each other.

    Tool messages and tool calls go (one tool result can be 10k+ tokens and would
    pull the recap towards "called X to read Y"), reasoning goes (it must never
    surface in the recap), and ``<system-reminder>`` blocks go (recalled memories,
    startup context). The startup context message is dropped either because nothing
    is left of it once its reminders are removed, or, for a first user message
    named ``STARTUP_CONTEXT_NAME``, because it says so.
    """
    dialog: list[dict[str, str]] = []
    seen_user = False
    for message in messages:
        role = message.get("role")
        if not isinstance(role, str) or role not in ("user", "assistant"):
            continue
        if role == "user" and not seen_user:
            seen_user = True
            if message.get("name") == STARTUP_CONTEXT_NAME:
                continue
        text = _strip_reminders(content_text(message.get("content")))
        if text:
            dialog.append({"role": role, "content": text})
    return dialog


def take_recent_dialog(
    messages: Sequence[M], limit: int = RECENT_MESSAGE_WINDOW
) -> list[M]:
    """The last ``limit`` messages, moved forward so they start at a user message.

    A window opening on an assistant reply would show the model an answer without
    its question.
    """
    if len(messages) <= limit:
        return list(messages)
    start = len(messages) - limit
    while start < len(messages) and messages[start].get("role") != "user":
        start += 1
    return list(messages[start:])


def item_type(item: object) -> object:
    """The ``type`` of a display item.

    Display items are storage ``Item`` objects in the app; plain dicts are accepted
    too because the contract only promises "items with a type".
    """
    if isinstance(item, Mapping):
        return item.get("type")
    return getattr(item, "type", None)


def should_fire_recap(items: Sequence[object]) -> bool:
    """The dedupe gate for automatic recaps.

    A recap needs something to summarise (at least 3 user items) and must not repeat
    itself: after an ``away_recap`` item at least 2 new user items are required.
    """
    types = [item_type(item) for item in items]
    if types.count("user") < 3:
        return False
    last_recap = max(
        (index for index, kind in enumerate(types) if kind == RECAP_ITEM), default=-1
    )
    return types[last_recap + 1 :].count("user") >= 2


async def generate_session_recap(
    history: list[Message],
    llm: LLMClient,
    *,
    model: str | None = None,
    abort: asyncio.Event | None = None,
) -> str | None:
    """Ask the model for a recap of ``history``; ``None`` whenever there is none.

    Uses ``model``, else the fast model, else the main model; one attempt, no tools,
    ``max_tokens=300``, ``temperature=0.3``, and :data:`RECAP_SYSTEM_PROMPT` instead of
    the chat's system prompt so the model acts as a recap writer, not an assistant.
    Setting ``abort`` cancels the request and yields ``None``. Failures are logged and
    swallowed; cancelling the awaiting task itself still propagates, as usual.
    """
    try:
        if len(history) < 2:
            return None
        dialog = take_recent_dialog(filter_to_dialog(history), RECENT_MESSAGE_WINDOW)
        if not dialog:
            return None
        if abort is not None and abort.is_set():
            return None
        # The user's instruction files (QWEN.md, AGENTS.md) shape the recap too: the
        # block comes from the chat's own system prompt at the head of the history.
        instructions = instructions_in(history)
        system = f"{RECAP_SYSTEM_PROMPT}\n\n{instructions}" if instructions else RECAP_SYSTEM_PROMPT
        messages = [
            {"role": "system", "content": system},
            *dialog,
            {"role": "user", "content": RECAP_USER_PROMPT},
        ]
        request = llm.complete(
            messages,
            model=model or llm.fast_model or llm.model,
            max_tokens=RECAP_MAX_TOKENS,
            temperature=RECAP_TEMPERATURE,
        )
        completion = await _unless_aborted(request, abort)
        if completion is None:
            return None
        return extract_recap(completion.content) or None
    except Exception as exc:  # best effort: a recap failure is never the user's problem
        log.warning("[SESSION_RECAP] recap failed: %s", exc)
        return None


async def _unless_aborted(request: Awaitable[T], abort: asyncio.Event | None) -> T | None:
    """Await ``request``, or cancel it and return ``None`` once ``abort`` is set."""
    if abort is None:
        return await request
    task = asyncio.ensure_future(request)
    waiter = asyncio.ensure_future(abort.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not task.done():
            task.cancel()
    if abort.is_set() or task.cancelled():
        # Let the cancelled request unwind so its HTTP stream is closed now.
        await asyncio.gather(task, return_exceptions=True)
        return None
    return task.result()


def recap_markdown(item: Item, now: float) -> str:
    """A recap in a Markdown export: its line, quoted."""
    return markdown_quote(f"※ recap: {item.content}")
