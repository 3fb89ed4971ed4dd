"""The summariser: old turns in blocks, each folded into the rolling summary by the fast model.

A turn (a user message and everything that answered it) is never split; blocks of about
`BLOCK_TOKENS` go to the fast model oldest first, so the chronology survives. The
answer is JSON: the new summary, the decisions the user made and the turns holding them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from qwenmem_tui.chat.view import content_text
from qwenmem_tui.features.compaction.gauge import estimate_tokens
from qwenmem_tui.llm.errors import LLMError
from qwenmem_tui.llm.wire import Message

if TYPE_CHECKING:
    from qwenmem_tui.llm.client import LLMClient
    from qwenmem_tui.storage.sessions import Item

SUMMARY_MAX_TOKENS = 800
# One summariser call sees at most this much of the old history; a bigger backlog is
# folded in several calls, oldest first, so the chronology survives.
BLOCK_TOKENS = 6000
# Each message is cut to this many characters in the summariser's transcript: a 20k
# tool output says little that its first lines do not.
TRANSCRIPT_MESSAGE_CHARS = 2000

SUMMARY_SYSTEM_PROMPT = """\
You compress the older part of a chat between a user and a coding assistant into a \
rolling summary that replaces it in the assistant's context.

You get the previous summary (maybe empty) and the next block of the conversation, \
with numbered turns. Write one new summary that folds the previous summary and the \
block together, oldest first: the task, what was found, what was done, open questions. \
Keep names, paths, numbers and error messages exact. Be brief: at most 250 words.

List separately every decision the user made and every correction the user gave \
(e.g. "use X, not Y", "actually it is Z"), each in one sentence in the user's language, \
and the numbers of the turns that hold them.

Answer with JSON only, no prose and no code fence:
{"summary": "...", "decisions": ["..."], "pinned_turns": [1, 3]}"""
_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


class CompactionError(Exception):
    """The summariser failed; str(e) is one line for the notice."""

# segmentation ------------------------------------------------------------------------
@dataclass
class Turn:
    """A user message with everything that answered it: never split, never reordered."""

    items: list[Item] = field(default_factory=list)

    @property
    def messages(self) -> list[Message]:
        return [item.message for item in self.items if item.message is not None]

    @property
    def user_item(self) -> Item | None:
        first = self.items[0] if self.items else None
        return first if first is not None and first.type == "user" else None


def split_turns(items: Sequence[Item]) -> list[Turn]:
    """History items in turns; a turn starts at each user message."""
    turns: list[Turn] = []
    for item in items:
        if item.message is None:
            continue
        if item.message.get("role") == "user" or not turns:
            turns.append(Turn())
        turns[-1].items.append(item)
    return turns


def pack_blocks(turns: Sequence[Turn], budget: int = BLOCK_TOKENS) -> list[list[Turn]]:
    """Consecutive turns in blocks of about `budget` tokens; a big turn is its own block."""
    blocks: list[list[Turn]] = []
    size = 0
    for turn in turns:
        tokens = estimate_tokens([_clip(m) for m in turn.messages])
        if blocks and size + tokens <= budget:
            blocks[-1].append(turn)
            size += tokens
        else:
            blocks.append([turn])
            size = tokens
    return blocks


def _clip(message: Message) -> Message:
    text = content_text(message.get("content"))
    if len(text) <= TRANSCRIPT_MESSAGE_CHARS:
        return message
    clipped = text[:TRANSCRIPT_MESSAGE_CHARS] + f" […{len(text) - TRANSCRIPT_MESSAGE_CHARS} chars cut]"
    return {**message, "content": clipped}


def transcript(block: Sequence[Turn]) -> str:
    """The block as the summariser reads it: numbered turns, tool output clipped."""
    lines: list[str] = []
    for number, turn in enumerate(block, start=1):
        lines.append(f"[turn {number}]")
        for message in turn.messages:
            message = _clip(message)
            role = message.get("role", "?")
            text = content_text(message.get("content"))
            if role == "tool":
                lines.append(f"tool result: {text}")
                continue
            if text:
                lines.append(f"{role}: {text}")
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                lines.append(f"{role} calls {function.get('name')}({function.get('arguments')})")
    return "\n".join(lines)


# summariser --------------------------------------------------------------------------
@dataclass(frozen=True)
class BlockSummary:
    summary: str
    decisions: list[str]
    pinned_turns: list[int]


def parse_summary(raw: str) -> BlockSummary:
    """The summariser's JSON; anything without a usable summary is a failure."""
    match = _JSON_OBJECT.search(raw)
    if match is None:
        raise CompactionError("the summariser answered without JSON")
    try:
        data = json.loads(match.group(0))
    except json.JSONDecodeError as exc:
        raise CompactionError(f"the summariser's JSON is invalid: {exc.msg}") from None
    summary = data.get("summary") if isinstance(data, dict) else None
    if not isinstance(summary, str) or not summary.strip():
        raise CompactionError("the summariser's JSON has no summary")
    decisions = [str(d).strip() for d in data.get("decisions") or () if str(d).strip()]
    pinned = [int(n) for n in data.get("pinned_turns") or () if isinstance(n, int)]
    return BlockSummary(summary.strip(), decisions, pinned)


async def summarise_block(
    llm: LLMClient, previous: str, block: Sequence[Turn], *, instructions: str = ""
) -> BlockSummary:
    """One fast-model call folding `block` into the previous rolling summary.

    `instructions`: the session's project instruction block (`instructions_in`), so
    the summary keeps what the user's AGENTS.md / QWEN.md say matters."""
    prompt = (
        f"Previous summary:\n{previous or '(none)'}\n\n"
        f"Next block of the conversation:\n{transcript(block)}"
    )
    try:
        completion = await llm.complete(
            [
                {
                    "role": "system",
                    "content": f"{SUMMARY_SYSTEM_PROMPT}\n\n{instructions}"
                    if instructions
                    else SUMMARY_SYSTEM_PROMPT,
                },
                {"role": "user", "content": prompt},
            ],
            model=llm.fast_model,
            max_tokens=SUMMARY_MAX_TOKENS,
            temperature=0.0,
        )
    except LLMError as exc:
        raise CompactionError(exc.message) from None
    return parse_summary(completion.content)
