"""Memory receipts (contract §13): which memories reached the model for a reply.

Recall is silent by design — it never delays a reply — so without a receipt nothing
says which memories shaped an answer, and a wrong one can only be found by searching
/memory. After each query the receipt hook reads what the prefetch hook's requests
carried (recalled for this message, at the UserQuery send or after a tool result, and
those re-sent from earlier messages as they stand now) and what the model saved with
``save_memory`` meanwhile, and stores it as one display item of the session
(``memory_receipt``): never sent to the model, shown by the faces (a dim line under
the reply in the TUI, ``memories`` in the daemon's answer), back with /resume and in
exports. Corrections made from the receipt are recorded in the same item, so a
resumed session shows what was fixed.

Pure core: no Textual, no face; the chat core knows nothing of it (a QueryHook).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, TypeVar

from qwenmem_tui.chat.session import BaseQueryHook
from qwenmem_tui.chat.turns import QueryOutcome
from qwenmem_tui.llm.wire import JSONObject
from qwenmem_tui.memory.model import (
    FLAG_FROM_FILE,
    Memory,
    WriteAction,
    WriteResult,
)
from qwenmem_tui.features.memory.prefetch import (
    IN_VIEW,
    INITIAL,
    TOOL_RESULT,
    MemoryPrefetchHook,
    SentMemory,
)
from qwenmem_tui.features.memory.items import RECEIPT_ITEM as RECEIPT_ITEM  # the faces' name for it
from qwenmem_tui.memory.render import CLIP_MARK, age_phrase, render_block
from qwenmem_tui.text import estimate_text_tokens

if TYPE_CHECKING:
    from qwenmem_tui.chat.session import ChatSession
    from qwenmem_tui.storage.sessions import Item

log = logging.getLogger("qwenmem.memory")

MARK = "⌁"

# Corrections a person made from a receipt (or /memory), as recorded in the item.
FORGOT = "forgot"
EDITED = "edited"
NOT_RELEVANT = "not_relevant"

_POINTS = {
    INITIAL: "recalled for this message",
    TOOL_RESULT: "recalled for this message, sent after a tool result",
    IN_VIEW: "in view since an earlier message (re-sent as it stands now)",
}
_WRITE_NOTES = {
    WriteAction.SUPERSEDED.value: " (replaces the previous value)",
    WriteAction.REFRESHED.value: " (already saved: refreshed)",
    WriteAction.DEDUPLICATED.value: " (already saved under this key: refreshed)",
    WriteAction.QUARANTINED.value: " (held for review: approve it on /memory)",
}


@dataclass(frozen=True)
class ReceiptMemory:
    """One memory a reply's requests carried, as it stood when the reply ended."""

    id: int
    category: str
    key: str
    value: str
    origin: str
    created_at: float
    from_file: bool
    point: str  # INITIAL / TOOL_RESULT / IN_VIEW
    score: float | None = None
    lexical: float | None = None
    dense: float | None = None

    @property
    def name(self) -> str:
        return f"{self.category}/{self.key}"

    def why(self) -> str:
        """Why it reached the model: lexical / dense / both, with the scores."""
        if self.point == IN_VIEW and self.score is None:
            return _POINTS[IN_VIEW]
        found = [
            (channel, f"{measure} {value:.3g}")
            for channel, measure, value in (
                ("lexical", "text rank", self.lexical),
                ("dense", "cosine", self.dense),
            )
            if value is not None
        ]
        parts = [_POINTS.get(self.point, self.point)]
        if found:
            how = "both" if len(found) == 2 else found[0][0]
            parts.append(f"{how} — {', '.join(score for _, score in found)}")
        if self.score is not None:
            parts.append(f"score {self.score:.3g}")
        return " · ".join(parts)

    def age(self, now: float) -> str:
        return f"saved {age_phrase(now - self.created_at)}"


@dataclass(frozen=True)
class ReceiptWrite:
    """A memory the model saved while answering (save_memory)."""

    id: int
    category: str
    key: str
    value: str
    action: str  # WriteAction value

    def line(self) -> str:
        return f"{MARK} saved {self.category}/{self.key}{_WRITE_NOTES.get(self.action, '')}"


@dataclass
class Receipt:
    """What a reply used and wrote; stored as the meta of a ``memory_receipt`` item."""

    memories: list[ReceiptMemory] = field(default_factory=list)
    writes: list[ReceiptWrite] = field(default_factory=list)
    query: str = ""  # the user message: what "not relevant here" is judged against
    corrections: dict[int, JSONObject] = field(default_factory=dict)
    tokens: int = 0  # estimated size of the memory block those memories make

    def lines(self) -> list[str]:
        """The dim lines under the reply: ``⌁ 2 memories`` then one per write."""
        lines = [count_line(len(self.memories), self.tokens)] if self.memories else []
        return lines + [w.line() for w in self.writes]

    def to_meta(self) -> JSONObject:
        return {
            "memories": [asdict(m) for m in self.memories],
            "writes": [asdict(w) for w in self.writes],
            "query": self.query,
            "corrections": {str(k): v for k, v in self.corrections.items()},
            "tokens": self.tokens,
        }

    @classmethod
    def from_meta(cls, meta: JSONObject) -> Receipt:
        """The receipt an item holds; rows that do not read are skipped, never fatal
        (a receipt is a view, and an old or hand-edited database must still open)."""
        return cls(
            memories=_rows(ReceiptMemory, meta.get("memories")),
            writes=_rows(ReceiptWrite, meta.get("writes")),
            query=str(meta.get("query") or ""),
            corrections={
                int(k): dict(v)
                for k, v in (meta.get("corrections") or {}).items()
                if str(k).isdigit() and isinstance(v, dict)
            },
            tokens=int(meta.get("tokens") or 0) if str(meta.get("tokens") or 0).isdigit() else 0,
        )

    def correct(self, memory_id: int, action: str, at: float, value: str | None = None) -> None:
        """Record a correction of one of its memories (the item is then updated)."""
        entry: JSONObject = {"action": action, "at": at}
        if value is not None:
            entry["value"] = value
        self.corrections[memory_id] = entry


R = TypeVar("R")


def _rows(kind: Callable[..., R], rows: object) -> list[R]:
    found: list[R] = []
    for row in rows if isinstance(rows, list) else ():
        try:
            found.append(kind(**row))
        except TypeError:
            log.warning("[MEMORY_RECEIPT] unreadable receipt row skipped: %r", row)
    return found


def count_line(count: int, tokens: int = 0) -> str:
    """``⌁ 1 memory`` / ``⌁ 3 memories · 120 tokens`` (the block's estimated size)."""
    line = f"{MARK} {count} memor{'y' if count == 1 else 'ies'}"
    return f"{line} · {tokens} tokens" if tokens else line


def receipt_of(item: Item) -> Receipt:
    return Receipt.from_meta(item.meta)


def memories_json(item: Item) -> list[JSONObject]:
    """The daemon's ``memories`` field: ``[{"id", "key", "value"}]`` of a receipt item."""
    return [{"id": m.id, "key": m.key, "value": m.value} for m in receipt_of(item).memories]


def receipt_markdown(item: Item, now: float) -> str:
    """A receipt in a Markdown export: its lines, then one bullet per memory."""
    receipt = receipt_of(item)
    out = [f"*{line}*" for line in receipt.lines()]
    for m in receipt.memories:
        fix = receipt.corrections.get(m.id)
        note = f" — {fix['action'].replace('_', ' ')}" if fix else ""
        source = ", from a file" if m.from_file else ""
        out.append(
            f"- #{m.id} `{m.name}`: {m.value} ({m.age(now)}, origin {m.origin}{source}; "
            f"{m.why()}){note}"
        )
    return "\n".join(out)


def as_sent(memory: Memory, sent: SentMemory) -> Memory:
    """``memory`` with the value its request carried when recall cut it to the budget
    (``recall.clipped``): the receipt's value and tokens are what the model got (e2e10:
    a note cut to a budget of 300 was counted at its stored 400)."""
    cut = sent.value
    if cut is None or not cut.endswith(CLIP_MARK) or cut == memory.value:
        return memory
    if not memory.value.startswith(cut.removesuffix(CLIP_MARK)):
        return memory  # not a cut of this value: the row changed since
    return replace(memory, value=cut)


def receipt_memory(memory: Memory, sent: SentMemory) -> ReceiptMemory:
    return ReceiptMemory(
        id=memory.id,
        category=str(memory.category),
        key=memory.key,
        value=memory.value,
        origin=str(memory.origin),
        created_at=memory.created_at,
        from_file=FLAG_FROM_FILE in memory.flags,
        point=sent.point,
        score=sent.score,
        lexical=sent.lexical,
        dense=sent.dense,
    )


Fetch = Callable[[Sequence[int]], Awaitable[list[Memory]]]
UNFINISHED = frozenset({"error", "cancelled"})
"""Outcomes with no reply a receipt could list memories under (``QueryOutcome.status``)."""


class MemoryReceiptHook(BaseQueryHook):
    """Stores a receipt after every query whose requests carried memory or saved some.

    Runs after the prefetch hook (whose per-query record it reads); ``fetch`` reads the
    memories as they stand (MemoryAccess.fetch). ``record_write`` is what save_memory
    calls after each write, with the session it ran in.
    """

    def __init__(
        self,
        prefetch: MemoryPrefetchHook,
        fetch: Fetch,
        record_tokens: Callable[[int], Awaitable[None]] | None = None,
    ) -> None:
        self._prefetch = prefetch
        self._fetch = fetch
        self._record_tokens = record_tokens  # `memory stats`: tokens per reply
        self._writes: dict[str, list[ReceiptWrite]] = {}

    def record_write(self, session_id: str, result: WriteResult) -> None:
        m = result.memory
        write = ReceiptWrite(m.id, str(m.category), m.key, m.value, result.action.value)
        self._writes.setdefault(session_id, []).append(write)

    async def on_query_start(self, session: ChatSession, text: str) -> None:
        self._writes.pop(session.info.id, None)

    async def on_query_end(self, session: ChatSession, outcome: QueryOutcome) -> None:
        # A reply that failed or was cancelled used nothing: an earlier request of it
        # may have been answered (a tool call), but "✗ … failed" then "⌁ 5 memories"
        # reads as memory that served a reply (e2e9). What the model saved meanwhile
        # was saved, so those lines stay.
        sent = self._prefetch.sent_memories() if outcome.status not in UNFINISHED else []
        writes = self._writes.pop(session.info.id, [])
        if not sent and not writes:
            return
        fetched = {m.id: m for m in await self._fetch([s.id for s in sent])} if sent else {}
        rows = {s.id: as_sent(fetched[s.id], s) for s in sent if s.id in fetched}
        used = [rows[s.id] for s in sent if s.id in rows]
        receipt = Receipt(
            memories=[receipt_memory(rows[s.id], s) for s in sent if s.id in rows],
            writes=writes,
            query=_last_user_text(session),
            tokens=estimate_text_tokens(render_block(used, session.clock())),
        )
        if receipt.memories and self._record_tokens is not None:
            try:
                await self._record_tokens(receipt.tokens)
            except Exception as exc:  # metrics must never break a turn
                log.warning("[MEMORY_RECEIPT] could not record the tokens: %s", exc)
        lines = receipt.lines()
        if not lines:
            return
        item = await session.add_display_item(RECEIPT_ITEM, "\n".join(lines), receipt.to_meta())
        session.announce(item)
        log.info(
            "[MEMORY_RECEIPT] session=%s memories=%d writes=%d",
            session.info.id,
            len(receipt.memories),
            len(writes),
        )


def _last_user_text(session: ChatSession) -> str:
    item = session.latest("user")
    return item.content if item is not None else ""
