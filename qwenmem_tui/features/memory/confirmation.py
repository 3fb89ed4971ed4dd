"""The one line a person's own note is answered with: where it went, or why it is
held. /remember in the chat and `qwenmem memory add` in the shell say the same."""

from __future__ import annotations

from qwenmem_tui.memory.model import (
    FLAG_POSSIBLE_DUPLICATE,
    Memory,
    WriteAction,
    WriteResult,
)
from qwenmem_tui.text import one_line

CONFIRM_VALUE_CHARS = 80

ACTION_NAMES = {
    WriteAction.CREATED: "created",
    WriteAction.SUPERSEDED: "superseded",
    WriteAction.REFRESHED: "deduplicated",
    WriteAction.DEDUPLICATED: "deduplicated",
    WriteAction.QUARANTINED: "quarantined",
}
"""A write's action as the MCP `remember` tool and `memory add --json` name it: the
contract's five (a refreshed row is the same fact said again)."""


def memory_name(memory: Memory) -> str:
    """`category/key`, as the confirmations and the memory screen name a memory."""
    return f"{memory.category}/{memory.key}"


def clip_value(value: str) -> str:
    """A value on one line, cut to CONFIRM_VALUE_CHARS."""
    value = one_line(value)
    return value if len(value) <= CONFIRM_VALUE_CHARS else value[: CONFIRM_VALUE_CHARS - 1] + "…"


def remember_confirmation(result: WriteResult) -> str:
    """The one line /remember answers with: where the note went, or why it is held."""
    memory = result.memory
    if result.action is WriteAction.QUARANTINED:
        return (
            f"Quarantined: {', '.join(memory.flags)} — #{memory.id} {memory_name(memory)} is held "
            "for review; approve it on /memory to use it."
        )
    # The id is what /forget takes: shown so undoing a note needs no trip to /memory.
    line = f"Remembered #{memory.id} {memory_name(memory)}: {clip_value(memory.value)}"
    if result.action is WriteAction.SUPERSEDED:
        return f"{line} (replaces the previous value)"
    if result.action is WriteAction.DEDUPLICATED:
        return f"{line} (already saved as #{memory.id})"
    if memory.restates is not None:
        return f"{line} (may replace #{memory.restates}: both kept until decided, see /memory)"
    if FLAG_POSSIBLE_DUPLICATE in memory.flags:
        return f"{line} (kept beside a similar memory: see /memory)"
    return line
