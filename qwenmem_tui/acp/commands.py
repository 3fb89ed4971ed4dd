"""The session's commands over ACP: `/compact` and `/recap`, offered to the client as
its slash commands (``available_commands_update``), answered as plain lines.

Compaction also runs by itself when a conversation nears the context window; its
marker then reaches the client as a line of the reply (`updates.py`). A recap is
stored as the TUI's `/recap` stores it, so `--resume` shows it too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from acp.helpers import update_available_commands
from acp.schema import AvailableCommand

from qwenmem_tui.acp.updates import Lines, Send, item_line
from qwenmem_tui.chat.session import ChatSession
from qwenmem_tui.features.compaction.feature import COMPACTION_HOOK
from qwenmem_tui.features.recap.session_recap import filter_to_dialog, generate_session_recap

if TYPE_CHECKING:
    from qwenmem_tui.features.assembly import SessionFeatures
    from qwenmem_tui.llm.client import LLMClient

COMPACT = "compact"
RECAP = "recap"
COMMANDS = update_available_commands(
    [
        AvailableCommand(name=COMPACT, description="Summarise older messages now to free context"),
        AvailableCommand(name=RECAP, description="A short recap of this conversation"),
    ]
)
COMPACTION_OFF = "Compaction is turned off (compaction.enabled = false)."
RECAP_NOTHING = "Not enough conversation context for a recap yet."
RECAP_NONE = "No recap this time: the model could not be reached or gave no usable answer."


def slash_command(text: str) -> str | None:
    """The command a prompt runs (`/compact`, `/recap`), or None for a message."""
    words = text.strip().split(maxsplit=1)
    if len(words) == 1 and words[0].startswith("/") and words[0][1:] in (COMPACT, RECAP):
        return words[0][1:]
    return None


async def run_command(
    name: str, chat: ChatSession, features: SessionFeatures, llm: LLMClient, send: Send
) -> None:
    """Run `/name` in `chat`; its outcome is one line to the client."""
    lines = Lines(send)
    if name == COMPACT:
        hook = features.handle(COMPACTION_HOOK)
        if hook is None:
            await lines.line(COMPACTION_OFF)
            return
        result = await hook.compact_now(chat)
        marker = result.marker
        shown = item_line(marker) if marker is not None else result.notice
        await lines.line(shown or "")
        return
    history = chat.history()
    if not filter_to_dialog(history):
        await lines.line(RECAP_NOTHING)
        return
    text = await generate_session_recap(history, llm)
    if text is None:
        await lines.line(RECAP_NONE)
        return
    item = await chat.add_display_item("away_recap", text)
    await lines.line(item_line(item) or text)
