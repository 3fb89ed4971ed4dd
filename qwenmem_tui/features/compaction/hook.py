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

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from qwenmem_tui.chat.turns import QueryOutcome, TurnKind
from qwenmem_tui.chat.view import (
    COMPACTION_ITEM,
    compacted_view,
    last_marker,
    untrusted_content,
)
from qwenmem_tui.features.compaction.gauge import TokenGauge, estimate_tokens
from qwenmem_tui.features.compaction.pins import budget_pins, decision_ids
from qwenmem_tui.features.compaction.summariser import (
    CompactionError,
    Turn,
    pack_blocks,
    split_turns,
    summarise_block,
)
from qwenmem_tui.features.instructions.files import instructions_in
from qwenmem_tui.features.compaction.settings import COMPACTION_SETTINGS
from qwenmem_tui.llm.wire import Message

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
# The summary lists at most this many decisions, the newest; older ones live on in
# the summary text and, within the pin budget, as verbatim messages.
MAX_DECISIONS = 40

#: A message sent by an extraction callback before its block is summarised away.
Extract = Callable[[list[Message]], Awaitable[None]]


# compaction --------------------------------------------------------------------------
@dataclass(frozen=True)
class CompactionResult:
    """What one compaction did; `notice` is the one line shown to the user."""

    status: str  # "compacted" | "nothing" | "failed"
    count: int = 0
    marker: Item | None = None
    seconds: float = 0.0
    error: str | None = None
    turns: int = 0
    """"nothing": the turns since the last summary, all of them kept verbatim."""
    keep: int = 0
    """"nothing": how many of the latest turns compaction always keeps verbatim."""

    @property
    def notice(self) -> str:
        if self.status == "compacted":
            return f"Compacted {self.count} older messages into a summary."
        if self.status == "nothing":
            # Said with its reason: "nothing yet" after a long chat reads as broken.
            so_far = f"{self.turns} so far" if self.turns else "none so far"
            return (
                f"Nothing to compact yet: the latest {self.keep} turns always stay word for "
                f"word (compaction.keep_recent_turns), and there are {so_far}."
            )
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
        return int(self.window * COMPACTION_SETTINGS.of(self._settings).threshold)

    @property
    def limit_tokens(self) -> int:
        """Past this a request overflows: the window minus room for the answer."""
        reserve = min(self._settings.llm.max_tokens or 1024, self.window // 4)
        return self.window - reserve

    # QueryHook ------------------------------------------------------------------------
    async def on_query_start(self, session: ChatSession, text: str) -> None:
        self._queries += 1

    async def before_request(
        self, session: ChatSession, kind: TurnKind, messages: list[Message]
    ) -> list[Message]:
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
            COMPACTION_SETTINGS.of(self._settings).enabled
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
        keep = max(1, COMPACTION_SETTINGS.of(self._settings).keep_recent_turns)
        older = turns[:-keep]
        if not older:
            self.last = CompactionResult("nothing", turns=len(turns), keep=keep)
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
                await self._hand_to_extraction(block, session.system_prompt)
                folded = await summarise_block(
                    self._llm, summary, block, instructions=instructions_in(session.system_prompt)
                )
                summary = folded.summary
                decisions.extend(d for d in folded.decisions if d not in decisions)
                del decisions[:-MAX_DECISIONS]
                pinned.extend(decision_ids(block, folded.pinned_turns))
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
                "pinned_ids": budget_pins(items, pinned, self.window),
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

    async def _hand_to_extraction(self, block: Sequence[Turn], system_prompt: str) -> None:
        if self._extract is None:
            return
        try:
            # The system prompt first: the memory guard reads the instruction files in it
            # as content in view (a fact they planted is not the user's word).
            system = {"role": "system", "content": system_prompt}
            await self._extract([system, *(m for turn in block for m in turn.messages)])
        except Exception as exc:  # extraction is best effort; the summary still helps
            log.warning("[COMPACTION] memory extraction before compaction failed: %s", exc)

    async def _drop_oldest(self, session: ChatSession, messages: list[Message]) -> list[Message]:
        """Last resort for this request only: drop the oldest non-pinned turns until it fits."""
        summary, _ = compacted_view(session.view_items())
        pinned = [
            item.message
            for item in session.view_items()
            if item.message is not None and item.meta.get("pinned")
        ] + [summary]
        head = [m for m in messages[:1] if m.get("role") == "system"]
        groups: list[list[Message]] = []
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
    item = session.latest("user")
    return item.id if item is not None else None

