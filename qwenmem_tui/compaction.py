"""History compaction: a rolling summary with pinning and a visible marker (issue 6).

When the next request would pass `compaction.threshold` of the context window (or on
/compact), the older turns are summarised by the fast model, block by block, folding
the previous rolling summary in. The last `keep_recent_turns` turns stay verbatim, and
so do pinned messages: the system prompt, what the user pinned (`item.meta["pinned"]`)
and turns where the user decided or corrected something. Nothing is deleted: the
originals stay in the database and scrollback; a `compaction` display item records
the summary and the cut point, and the model view (`chat/view.compacted_view`) folds
the items at it on every request and on resume. A summary of untrusted content (a
file read, a tool's output, a recalled file note) stays untrusted: the marker names
those sources and the summary message says so, for the model and the memory guard.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from qwenmem_tui.chat.turns import QueryOutcome, TurnKind
from qwenmem_tui.chat.view import (
    COMPACTION_ITEM,
    compacted_view,
    content_text,
    last_marker,
    untrusted_content,
)
from qwenmem_tui.instructions import instructions_in
from qwenmem_tui.llm.errors import LLMError

if TYPE_CHECKING:
    from qwenmem_tui.chat.session import ChatSession
    from qwenmem_tui.config import Settings
    from qwenmem_tui.llm.client import LLMClient, Usage
    from qwenmem_tui.storage.sessions import Item

log = logging.getLogger("qwenmem.compaction")

DROPPED_ITEM = "context_dropped"
"""The dim line where the oldest messages stopped reaching the model (no summary)."""
MAX_BACKOFF_QUERIES = 32
"""After n failed summaries in a row, the next 2**n - 1 queries (up to 31) try no
summary: a fast model that does not answer JSON will not start to on the next turn,
and each try costs a request the reply waits behind."""
SUMMARY_MAX_TOKENS = 800
# One summariser call sees at most this much of the old history; a bigger backlog is
# folded in several calls, oldest first, so the chronology survives.
BLOCK_TOKENS = 6000
# Each message is cut to this many characters in the summariser's transcript: a 20k
# tool output says little that its first lines do not.
TRANSCRIPT_MESSAGE_CHARS = 2000
# Auto-detected decisions may not take more of the window than this; user pins may.
AUTO_PIN_SHARE = 0.2
# The summary lists at most this many decisions, the newest; older ones live on in
# the summary text and, within the pin budget, as verbatim messages.
MAX_DECISIONS = 40

#: A message sent by an extraction callback before its block is summarised away.
Extract = Callable[[list[dict]], Awaitable[None]]

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

# Phrases with which people decide or correct, in the languages our users write in.
# Deliberately specific: every hit is carried verbatim and costs window forever.
_CUE_PHRASES = (
    # English
    "actually,", "i decided", "we decided", "let's go with", "lets go with",
    "we'll use", "we will use", "don't use", "do not use", "instead of",
    "correction:", "i meant", "that's wrong", "that is wrong", "from now on",
    "not what i asked", "stick with",
    # Portuguese
    "na verdade", "decidi ", "decidimos", "vamos usar", "em vez de", "não use",
    "nao use", "correção", "quis dizer", "a partir de agora", "está errado",
    # Spanish
    "en realidad", "decidí", "vamos a usar", "en lugar de", "no uses",
    "corrección", "quise decir", "a partir de ahora", "está mal",
    # French
    "en fait", "j'ai décidé", "on va utiliser", "au lieu de", "n'utilise pas",
    "désormais", "à partir de maintenant", "je voulais dire",
    # German
    "eigentlich", "ich habe entschieden", "wir nehmen", "stattdessen",
    "nicht verwenden", "ab jetzt", "korrektur", "ich meinte",
    # Chinese, Japanese
    "其实", "决定", "改成", "不要用", "以后都", "更正", "我的意思是",
    "実は", "決めた", "代わりに", "今後は", "訂正",
)
_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)
_WIDE = re.compile(r"[\u3000-\u9fff\uac00-\ud7af\uff00-\uffef]")


class CompactionError(Exception):
    """The summariser failed; str(e) is one line for the notice."""


# token estimate ----------------------------------------------------------------------
def estimate_text_tokens(text: str) -> int:
    """About four characters a token, but one per CJK character (BPE splits those)."""
    wide = len(_WIDE.findall(text))
    return wide + math.ceil((len(text) - wide) / 4)


def estimate_tokens(messages: Sequence[dict]) -> int:
    """Local prompt-size estimate: content, tool calls and a few tokens per message."""
    total = 0
    for message in messages:
        total += 4 + estimate_text_tokens(content_text(message.get("content")))
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            total += 8 + estimate_text_tokens(
                str(function.get("name", "")) + str(function.get("arguments", ""))
            )
    return total


@dataclass
class TokenGauge:
    """The local estimate, scaled by what the provider reported for an earlier request.

    Providers count with their own tokenizer and the template around each message; one
    observed (estimate, prompt_tokens) pair corrects most of the difference. Some
    streaming providers send no usage: then the raw estimate stands.
    """

    ratio: float = 1.0

    def observe(self, estimate: int, prompt_tokens: int) -> None:
        if estimate > 0 and prompt_tokens > 0:
            self.ratio = min(3.0, max(0.5, prompt_tokens / estimate))

    def count(self, messages: Sequence[dict]) -> int:
        return math.ceil(estimate_tokens(messages) * self.ratio)


# decisions ---------------------------------------------------------------------------
def has_decision_cue(text: str) -> bool:
    """True when a user message reads like a decision or a correction."""
    folded = text.casefold()
    return any(cue in folded for cue in _CUE_PHRASES)


# segmentation ------------------------------------------------------------------------
@dataclass
class Turn:
    """A user message with everything that answered it: never split, never reordered."""

    items: list[Item] = field(default_factory=list)

    @property
    def messages(self) -> list[dict]:
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


def _clip(message: dict) -> dict:
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


# compaction --------------------------------------------------------------------------
@dataclass(frozen=True)
class CompactionResult:
    """What one compaction did; `notice` is the one line shown to the user."""

    status: str  # "compacted" | "nothing" | "failed"
    count: int = 0
    marker: Item | None = None
    seconds: float = 0.0
    error: str | None = None

    @property
    def notice(self) -> str:
        if self.status == "compacted":
            return f"Compacted {self.count} older messages into a summary."
        if self.status == "nothing":
            return "Nothing to compact yet."
        return f"Compaction failed, history left as is: {self.error}"


class CompactionHook:
    """The QueryHook compacting before a request would pass the threshold.

    Put it first among the hooks: it rebuilds the request from the session's model
    view, and reminders other hooks add must land in the rebuilt request.
    """

    def __init__(
        self,
        llm: LLMClient,
        settings: Settings,
        *,
        extract: Extract | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._llm = llm
        self._settings = settings
        self._extract = extract
        self._clock = clock
        self.gauge = TokenGauge()
        self.last: CompactionResult | None = None
        self._last_estimate: int | None = None
        self._failed_at: int | None = None
        self._failures = 0  # summaries failed in a row (automatic ones)
        self._queries = 0  # queries started, to count the backoff in
        self._next_try = 0  # the query from which an automatic summary is tried again
        self._dropping = False  # the oldest messages are being left out of requests
        self._seen_usage: Usage | None = None
        self._force = False

    @property
    def window(self) -> int:
        return self._settings.llm.context_window

    @property
    def threshold_tokens(self) -> int:
        return int(self.window * self._settings.compaction.threshold)

    @property
    def limit_tokens(self) -> int:
        """Past this a request overflows: the window minus room for the answer."""
        reserve = min(self._settings.llm.max_tokens or 1024, self.window // 4)
        return self.window - reserve

    # QueryHook ------------------------------------------------------------------------
    async def on_query_start(self, session: ChatSession, text: str) -> None:
        self._queries += 1

    async def before_request(
        self, session: ChatSession, kind: TurnKind, messages: list[dict]
    ) -> list[dict]:
        self._observe_usage(session)
        tokens = self.gauge.count(messages)
        if self._should_compact(session, tokens):
            result = await self.compact(session, reason=f"{tokens} tokens")
            self._force = False
            if result.status == "compacted":
                messages = session.history()
                tokens = self.gauge.count(messages)
            elif result.status == "failed":
                # One warning and one attempt per user message, not one per request,
                # and fewer attempts the more of them fail in a row.
                self._failed_at = _latest_user_id(session)
                self._failures += 1
                wait = min(MAX_BACKOFF_QUERIES, 2**self._failures)
                self._next_try = self._queries + wait
                log.info("[COMPACTION] next summary tried in %d queries", wait)
                await session.notify(result.notice, "warning")
            if result.status == "compacted":
                self._failures = 0
                self._dropping = False
        if tokens > self.limit_tokens:
            messages = await self._drop_oldest(session, messages)
        self._last_estimate = estimate_tokens(messages)
        return messages

    async def on_query_end(self, session: ChatSession, outcome: QueryOutcome) -> None:
        if outcome.status == "context_limit":
            # The provider counts more than we estimated: compact before the next
            # request whatever the estimate says, and trust the estimate less.
            self._force = True
            self.gauge.ratio = min(3.0, self.gauge.ratio * 1.25)

    async def on_reset(self, session: ChatSession) -> None:
        self._last_estimate = None
        self._force = False
        self._dropping = False

    async def on_close(self, session: ChatSession) -> None:
        return None

    def _should_compact(self, session: ChatSession, tokens: int) -> bool:
        return (
            self._settings.compaction.enabled
            and (tokens > self.threshold_tokens or self._force)
            and (self._failed_at is None or self._failed_at != _latest_user_id(session))
            and (self._queries >= self._next_try or self._force)
        )

    # /compact -------------------------------------------------------------------------
    async def compact_now(self, session: ChatSession) -> CompactionResult:
        """/compact: compact whatever is older than the kept turns, threshold or not."""
        return await self.compact(session, reason="/compact")

    async def compact(self, session: ChatSession, *, reason: str) -> CompactionResult:
        started = self._clock()
        items = session.view_items()
        previous_marker = last_marker(items)
        cut = int(previous_marker.meta["cut_item_id"]) if previous_marker else -1
        turns = split_turns([i for i in items if i.id is not None and i.id > cut])
        keep = max(1, self._settings.compaction.keep_recent_turns)
        older = turns[:-keep]
        if not older:
            self.last = CompactionResult("nothing")
            return self.last
        summary = str(previous_marker.meta.get("summary", "")) if previous_marker else ""
        decisions = list(previous_marker.meta.get("decisions", ())) if previous_marker else []
        pinned = list(previous_marker.meta.get("pinned_ids", ())) if previous_marker else []
        # The summary says what those messages said: it carries their taint (files read,
        # tool output, recalled file notes), kept in the marker so resume keeps it too.
        tainted = [str(x) for x in previous_marker.meta.get("untrusted_sources", ())] if previous_marker else []
        trusted = session.tools.trusted_outputs()
        tainted += [
            source
            for turn in older
            for source, _ in untrusted_content(turn.messages, trusted)
        ]
        try:
            for block in pack_blocks(older):
                await self._hand_to_extraction(block)
                folded = await summarise_block(
                    self._llm, summary, block, instructions=instructions_in(session.system_prompt)
                )
                summary = folded.summary
                decisions.extend(d for d in folded.decisions if d not in decisions)
                del decisions[:-MAX_DECISIONS]
                pinned.extend(self._decision_ids(block, folded.pinned_turns))
        except CompactionError as exc:
            log.warning("[COMPACTION] summariser failed, history untouched: %s", exc)
            self.last = CompactionResult("failed", error=str(exc), seconds=self._clock() - started)
            return self.last
        count = sum(len(t.messages) for t in older)
        total = count + (int(previous_marker.meta.get("total", 0)) if previous_marker else 0)
        marker = await session.add_display_item(
            COMPACTION_ITEM,
            f"⋯ {count} older messages summarized",
            {
                "summary": summary,
                "decisions": decisions,
                "count": count,
                "total": total,
                "cut_item_id": older[-1].items[-1].id,
                "pinned_ids": self._budget_pins(items, pinned),
                "untrusted_sources": list(dict.fromkeys(tainted)),
            },
        )
        session.announce(marker)
        self.last = CompactionResult("compacted", count, marker, self._clock() - started)
        log.info(
            "[COMPACTION] compacted %d messages (%s) in %.2fs, %d pinned",
            count,
            reason,
            self.last.seconds,
            len(marker.meta["pinned_ids"]),
        )
        return self.last

    # helpers --------------------------------------------------------------------------
    def _observe_usage(self, session: ChatSession) -> None:
        """Calibrate with the provider's count for the previous request, when it sent one."""
        usage = session.last_usage
        # A failed request leaves the previous usage in place: only a new one counts.
        if usage is not None and usage is not self._seen_usage and self._last_estimate is not None:
            self.gauge.observe(self._last_estimate, usage.prompt_tokens)
        self._seen_usage = usage
        self._last_estimate = None

    async def _hand_to_extraction(self, block: Sequence[Turn]) -> None:
        if self._extract is None:
            return
        try:
            await self._extract([m for turn in block for m in turn.messages])
        except Exception as exc:  # extraction is best effort; the summary still helps
            log.warning("[COMPACTION] memory extraction before compaction failed: %s", exc)

    @staticmethod
    def _decision_ids(block: Sequence[Turn], numbered: Sequence[int]) -> list[int]:
        ids: list[int] = []
        for number, turn in enumerate(block, start=1):
            user = turn.user_item
            if user is None or user.id is None:
                continue
            if number in numbered or has_decision_cue(content_text(user.message.get("content"))):
                ids.append(user.id)
        return ids

    def _budget_pins(self, items: Sequence[Item], pinned: list[int]) -> list[int]:
        """Auto pins within AUTO_PIN_SHARE of the window, newest kept first."""
        by_id = {item.id: item for item in items}
        budget = int(self.window * AUTO_PIN_SHARE)
        kept: list[int] = []
        for item_id in reversed(list(dict.fromkeys(pinned))):
            item = by_id.get(item_id)
            if item is None or item.message is None:
                continue
            cost = estimate_tokens([item.message])
            if cost > budget:
                break
            budget -= cost
            kept.append(item_id)
        return sorted(kept)

    async def _drop_oldest(self, session: ChatSession, messages: list[dict]) -> list[dict]:
        """Last resort for this request only: drop the oldest non-pinned turns until it fits."""
        summary, _ = compacted_view(session.view_items())
        pinned = [
            item.message
            for item in session.view_items()
            if item.message is not None and item.meta.get("pinned")
        ] + [summary]
        head = [m for m in messages[:1] if m.get("role") == "system"]
        groups: list[list[dict]] = []
        for message in messages[len(head) :]:
            if message.get("role") == "user" or not groups:
                groups.append([])
            groups[-1].append(message)
        dropped = 0
        index = 0
        while (
            self.gauge.count(head + [m for g in groups for m in g]) > self.limit_tokens
            and index < len(groups) - 1
        ):
            if any(m in pinned for m in groups[index]):
                index += 1
                continue
            dropped += len(groups.pop(index))
        if dropped:
            log.warning("[COMPACTION] dropped %d oldest messages to fit the window", dropped)
            if not self._dropping:
                # Once, where it starts: from here on the oldest messages fall out
                # of every request until a summary replaces them.
                self._dropping = True
                await session.notify(
                    f"Context window nearly full: left out the {dropped} oldest messages "
                    "from this request.",
                    "warning",
                )
                marker = await session.add_display_item(
                    DROPPED_ITEM,
                    f"⋯ context full: older messages no longer reach the model ({dropped} "
                    "left out so far"
                    + ("; the summariser failed)" if self._failures else ")"),
                    {"dropped": dropped},
                )
                session.announce(marker)
        return head + [m for g in groups for m in g]


def _latest_user_id(session: ChatSession) -> int | None:
    return next((i.id for i in reversed(session.items) if i.type == "user"), None)

