"""Memory recall that never delays a reply (issue 5).

Recall starts when a query starts and is never awaited. Its result is used at the first
safe point it is ready for: the UserQuery request (the block leads the new user
message's reminders) or, when it settles later, a ToolResult request of the same query
(appended after the tool messages, because OpenAI-compatible and Qwen APIs reject
anything between an assistant tool call and its tool results). A query that ends
before the result was delivered loses it; the next query starts a fresh recall.

Because the loop reaches the UserQuery point within a millisecond, a recall started on
Enter almost never makes the first request. So the TUI also *warms* recall while the
user is still typing (`warm`, as the prompt's text settles): when the text sent is the
text warmed, in the same session with the same surfaced set, the query adopts that
recall instead of starting one — usually already settled, so it makes the first request.
A face with no typing phase (`ChatSession.interactive` False: the daemon, headless,
ACP) has nothing warmed, and a reply without tool calls has no later point, so its
first request waits for recall up to `api_wait_ms`. A recall that was not ready when a
tool-less reply's only request left is counted `late` (log and `memory stats`).

What a query's requests carried counts for its receipt only once the model answered
the request: a failed or cancelled request reached no model that answered.

The hook holds the running session's set of surfaced memory ids and the reminders
already delivered, which stay in the model view until /clear; a query in another
session (the TUI keeps its hooks across /resume) starts that state afresh. Sessions
running queries concurrently (the daemon) each need their own hook.

Delivered reminders are rebuilt from the current state before every request (issue
14): with a `live` callable (`ProjectRecall.live`), a delivered memory that has
since been superseded, forgotten or has expired — in this process or another — leaves
the next request, replaced by its successor when there is one. When nothing changed
that costs one read of the store's generation.

What each request carried is kept for the query (`sent`): the memories recalled for it
and those re-sent from earlier deliveries, with the channels' scores, so the memory
feature can show the user a receipt of what shaped the reply. `hide` takes memories
the user called not relevant out of the delivered blocks from the next request on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from qwenmem_tui.chat.turns import QueryOutcome, TurnKind
from qwenmem_tui.chat.view import content_text
from qwenmem_tui.llm.wire import Message

if TYPE_CHECKING:
    from qwenmem_tui.chat.session import ChatSession
    from qwenmem_tui.memory.live import Freshness, LiveBlocks
    from qwenmem_tui.memory.recall import RecallResult
    from qwenmem_tui.memory.service import MemoryService

log = logging.getLogger("qwenmem.memory")

Recall = Callable[..., Awaitable["RecallResult | None"]]
"""`recall(text, excluded)`; with a `record_recall` also `recall(text, excluded,
record=False)`, which leaves the recall metrics alone (`ProjectRecall.recall`)."""

Live = Callable[[list[tuple[int, ...]], "Freshness | None"], Awaitable["LiveBlocks | None"]]
"""`live(groups, since)`: the delivered groups of ids as they stand now, or None when
nothing changed since the answer read at `since` (`ProjectRecall.live`)."""


@dataclass(frozen=True)
class ProjectRecall:
    """The one adapter from the memory service to the hook's `Recall` and `Live`: one
    project's recall (its memories and the global ones) and its live view of what
    was delivered. `service` is awaited at each call, so a service still opening
    (`MemoryAccess.service`) is waited for where the hook waits (never by the turn)."""

    service: Callable[[], Awaitable[MemoryService]]
    project: str

    @classmethod
    def of(cls, service: MemoryService, project: str) -> ProjectRecall:
        """The adapter over a service that is open already."""

        async def opened() -> MemoryService:
            return service

        return cls(opened, project)

    async def recall(
        self, text: str, excluded: frozenset[int], *, record: bool = True
    ) -> RecallResult:
        service = await self.service()
        return await service.recall(text, project=self.project, exclude=excluded, record=record)

    async def live(
        self, groups: list[tuple[int, ...]], since: Freshness | None
    ) -> LiveBlocks | None:
        service = await self.service()
        return await service.live(groups, since, project=self.project)


OPENING_WAIT_S = 2.5
"""The most a query's first request waits for its recall while memory is still opening
(launch): the first message after launch carries its memory, and a store or model that
takes longer than this to open cannot hold the reply back."""

LIVE_TIMEOUT_S = 2.0
"""The most a request waits for the freshness check; past it the request goes out with
the blocks as last checked (a store that slow is broken, and the turn must go on)."""

SMALL_TALK_WAIT_S = 0.5
"""The most a tool-less reply's end waits for its recall to say whether the message
was small talk (`_read_small_talk`); recall takes ~15-50 ms once memory is open."""

# Delivery points, as logged and counted.
INITIAL = "initial"
TOOL_RESULT = "tool_result"
DISCARDED = "discarded"  # settled, but no safe point was left to deliver it
MISSED = "missed"  # still running when its query ended or was aborted
LATE = "late"  # not ready when the only request of a tool-less reply left
IN_VIEW = "in_view"  # delivered for an earlier query and re-sent with this one's requests


@dataclass(frozen=True)
class SentMemory:
    """One memory a request of the running query carried, and how it came to be there."""

    id: int
    point: str
    """INITIAL / TOOL_RESULT: recalled for this query; IN_VIEW: re-sent from earlier."""
    score: float | None = None  # fused rank score when it was recalled
    lexical: float | None = None  # the lexical channel's rank score, None if unmatched
    dense: float | None = None  # cosine with the query, None without a vector
    # The value as the request carried it: cut to `memory.max_tokens` (recall's
    # `clipped`) it differs from the stored one, and the receipt says what was sent.
    value: str | None = None


@dataclass(eq=False)
class MemoryPrefetchHandle:
    """One in-flight recall; `settled_at` is set the moment it finishes, however it ends."""

    text: str
    started_at: float
    task: asyncio.Task[RecallResult | None] | None = None
    settled_at: float | None = None
    consumed: bool = False
    left_without: float | None = None
    """When the query's first request left without this recall (still running)."""
    # What a warm handle was started for; a query adopts it only if these still hold.
    session_id: str | None = None
    excluded: frozenset[int] = frozenset()
    warm: bool = False

    @property
    def settled(self) -> bool:
        return self.settled_at is not None

    @property
    def latency_ms(self) -> float:
        end = self.settled_at if self.settled_at is not None else self.started_at
        return (end - self.started_at) * 1000

    def cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def result(self) -> RecallResult | None:
        """The recall result of a settled handle (None when it failed or was cancelled)."""
        if self.task is None or not self.task.done() or self.task.cancelled():
            return None
        return self.task.result()


@dataclass(frozen=True)
class _Delivery:
    """A block that reached the model, re-applied to every later request of the session.

    The surfaced set excludes these memories from later recalls because the model still
    has them in view; so the block must stay in view, anchored to the message it was
    delivered with: the user message (by text and occurrence) or the tool results of
    one assistant turn (by the last tool_call_id).
    """

    block: str
    ids: tuple[int, ...]
    user_text: str | None = None
    tool_call_id: str | None = None
    # Which of the messages matching the anchor: texts repeat, and some servers reuse
    # tool call ids ("call_0") in every turn.
    occurrence: int = 0


@dataclass
class PrefetchStats:
    """Counters the memory metrics read: how often recall reached the model, and where."""

    started: int = 0
    failed: int = 0
    empty: int = 0
    cancelled: int = 0  # MISSED: still running when its query ended or was aborted
    warm_adopted: int = 0  # queries that used the recall warmed while typing
    warm_missed: int = 0  # queries that found a warm recall for other text/state
    deliveries: Counter[str] = field(default_factory=Counter)  # INITIAL / TOOL_RESULT
    discarded: Counter[str] = field(default_factory=Counter)  # by reason
    late: int = 0  # LATE: not ready when a tool-less reply's only request left

    @property
    def delivered(self) -> int:
        return self.deliveries[INITIAL] + self.deliveries[TOOL_RESULT]

    def delivery_rate(self) -> float:
        """Delivered / recalls that produced memories; 0.0 before any."""
        produced = self.delivered + sum(self.discarded.values())
        return self.delivered / produced if produced else 0.0


class MemoryPrefetchHook:
    """The QueryHook running recall in the background of each query.

    `initial_wait_ms` (`memory.initial_wait_ms`, default 0) is the most the UserQuery
    point waits for a recall still running. With 0 the first request never waits, but
    the chat loop reaches that point within a millisecond of starting recall, so only
    a ToolResult turn can carry memory; bench/bench_prefetch.py measured, for a mix of
    fast and slow recalls and tool/no-tool turns, 40 % delivered at 0, 60 % at 25 ms
    and 70 % at 100 ms — and a recall slower than the wait costs the whole wait.
    `warm` (the TUI calls it while the user types) is how the first request gets
    memory without any wait.

    `opening` says memory is still opening (the embedder and the index load behind the
    first frame, ~0.5-2 s): a query sent then — typed during startup, queued at
    launch — has no recall that could have settled, however long the user paused, so
    its first request waits for it up to OPENING_WAIT_S. Once memory is open no
    request waits beyond `initial_wait_ms`.

    `record_recall` (MemoryService.record_recall) makes warm recalls run unrecorded
    and counts one only when a query adopts it, so the recall metrics see one recall
    per query however often the user paused while typing. Without it warm recalls
    are counted as they run.
    """

    def __init__(
        self,
        recall: Recall,
        *,
        enabled: bool = True,
        initial_wait_ms: int = 0,
        api_wait_ms: int = 0,
        clock: Callable[[], float] = time.monotonic,
        stats: PrefetchStats | None = None,
        record_delivery: Callable[[str], Awaitable[None]] | None = None,
        record_recall: Callable[[RecallResult], Awaitable[None]] | None = None,
        live: Live | None = None,
        opening: Callable[[], bool] | None = None,
    ) -> None:
        self._recall = recall
        self._opening = opening
        # Without it delivered blocks are re-sent as they were (tests of the anchoring).
        self._live = live
        self._freshness: Freshness | None = None
        self.enabled = enabled
        self.initial_wait_ms = initial_wait_ms
        self.api_wait_ms = api_wait_ms
        self._clock = clock
        self.stats = stats if stats is not None else PrefetchStats()
        self.handle: MemoryPrefetchHandle | None = None
        self.warm_handle: MemoryPrefetchHandle | None = None
        self.surfaced: set[int] = set()
        self._delivered: list[_Delivery] = []
        self._session_id: str | None = None
        # MemoryService.record_delivery: a DB write, so it runs beside the request.
        self._record_delivery = record_delivery
        self._record_recall = record_recall
        self._recording: set[asyncio.Task[None]] = set()
        # Why each delivered memory was recalled (its scores), for the receipt.
        self._why: dict[int, SentMemory] = {}
        # What this query's answered requests carried, in the order first sent, and
        # what the request in flight carries (it joins `sent` once that one is answered).
        self.sent: dict[int, SentMemory] = {}
        self._in_flight: dict[int, SentMemory] = {}
        self._recalled_now: set[int] = set()  # recalled for the running query
        # Recall judged the running query's message small talk (abstain.py).
        self._small_talk = False
        self._query_text = ""
        self._hidden: set[int] = set()

    @property
    def memory_opening(self) -> bool:
        """Memory is still opening: a query's first request would wait for its recall."""
        return self._opening is not None and self._opening()

    def sent_memories(self) -> list[SentMemory]:
        """Every memory that reached the model in a request it answered, for the running
        (or last) query, first sent first: a request that failed or was cancelled
        delivered nothing a receipt may claim. Small talk claims only what was
        recalled for it: memories still in view from an earlier message are that
        message's receipt, and listing them again under "thanks!" reads as memory
        given to small talk (issue 39)."""
        if self._small_talk:
            return [s for s in self.sent.values() if s.point != IN_VIEW]
        return list(self.sent.values())

    def hide(self, ids: set[int]) -> None:
        """The user called these memories not relevant: the next request goes without
        them (the blocks holding them are rebuilt) and recall may not bring them back
        while they stay hidden."""
        self._hidden.update(ids)
        self._freshness = None  # the blocks must be rebuilt even if the store is unchanged

    def _excluded(self) -> frozenset[int]:
        """What recall must not return: memories in view, and those the user hid."""
        return frozenset(self.surfaced | self._hidden)

    def warm(self, session: ChatSession, text: str) -> None:
        """Start recall for `text` the user has typed but not sent, replacing any earlier
        warm recall; the query sending that text adopts it (see `on_query_start`)."""
        text = text.strip()
        # This session's surfaced set, as on_query_start will see it.
        excluded = self._excluded() if session.info.id == self._session_id else frozenset()
        current = self.warm_handle
        if self.enabled and current is not None and _same_recall(current, session, text, excluded):
            return  # warmed already for this very text (e.g. again on the return to idle)
        self._drop_warm()
        if not self.enabled or not text:
            return
        handle = MemoryPrefetchHandle(
            text=text,
            started_at=self._clock(),
            session_id=session.info.id,
            excluded=excluded,
            warm=True,
        )
        handle.task = asyncio.get_running_loop().create_task(
            self._run(handle, excluded), name="memory-warm"
        )
        self.warm_handle = handle
        log.debug("[MEMORY_PREFETCH] warming recall for %d characters", len(text))

    # QueryHook ------------------------------------------------------------------------
    async def on_query_start(self, session: ChatSession, text: str) -> None:
        self._abort("new_query")
        self.sent = {}
        self._in_flight = {}
        self._recalled_now = set()
        self._small_talk = False
        self._query_text = text
        if session.info.id != self._session_id:
            # The TUI keeps its hooks across /resume: nothing surfaced in that session.
            self._session_id = session.info.id
            self._forget()
        warm, self.warm_handle = self.warm_handle, None
        if not self.enabled:
            if warm is not None:
                warm.cancel()
            return
        if warm is not None and self._adoptable(warm, session, text):
            handle = warm
            handle.text = text  # the block anchors to the user message as sent
            self.stats.warm_adopted += 1
            if self._record_recall is not None:
                self._spawn(self._record_adopted(handle))
        else:
            if warm is not None:
                warm.cancel()
                self.stats.warm_missed += 1
                log.debug(
                    "[MEMORY_PREFETCH] warm recall not adopted: warmed %d characters, sent %d",
                    len(warm.text),
                    len(text),
                )
            handle = MemoryPrefetchHandle(text=text, started_at=self._clock())
            handle.task = asyncio.get_running_loop().create_task(
                self._run(handle, self._excluded()), name="memory-prefetch"
            )
        self._link_to_parent(handle)
        self.handle = handle
        self.stats.started += 1

    def _adoptable(self, warm: MemoryPrefetchHandle, session: ChatSession, text: str) -> bool:
        """The warm recall serves this query: same text and session, nothing excluded
        that the query would not exclude."""
        return _same_recall(warm, session, text, self._excluded())

    async def before_request(
        self, session: ChatSession, kind: TurnKind, messages: list[Message]
    ) -> list[Message]:
        handle = self.handle
        # The loop builds a request only once the one before it was answered.
        self._answered()
        if kind is TurnKind.USER_QUERY and handle is not None and not handle.settled:
            await self._wait_briefly(handle, session)
            if not handle.settled:
                handle.left_without = self._clock()
        delivered = self._deliver(kind, messages)
        # A new block was read at some earlier moment: check it with the others.
        await self._refresh(force=delivered)
        shaped = self._reapply(messages)
        self._note_sent()
        return shaped

    def _answered(self) -> None:
        """The request in flight was answered: what it carried reached the model."""
        for memory_id, why in self._in_flight.items():
            self.sent.setdefault(memory_id, why)
        self._in_flight = {}

    def _note_sent(self) -> None:
        """Record what this request carries (the deliveries left after re-applying)."""
        for delivery in self._delivered:
            for memory_id in delivery.ids:
                if memory_id in self.sent or memory_id in self._in_flight:
                    continue
                why = self._why.get(memory_id)
                if why is None:  # a successor, re-sent in place of what was recalled
                    why = SentMemory(memory_id, IN_VIEW)
                elif memory_id not in self._recalled_now:
                    why = replace(why, point=IN_VIEW)
                self._in_flight[memory_id] = why

    def _forget_reasons(self) -> None:
        """Drop the reasons of memories no longer in view (compacted away, forgotten,
        superseded): kept, they grew with every memory ever recalled in a long session
        (issue 41's soak)."""
        for memory_id in [i for i in self._why if i not in self.surfaced]:
            del self._why[memory_id]

    def _remember_why(self, point: str, result: RecallResult) -> None:
        """Keep the scores each delivered memory was recalled with; this query's own."""
        for i, memory_id in enumerate(result.ids):
            why = SentMemory(
                memory_id,
                point,
                score=_at(result.scores, i),
                lexical=_at(result.lexical_scores, i),
                dense=_at(result.vector_scores, i),
                value=result.memories[i].value if i < len(result.memories) else None,
            )
            self._why[memory_id] = why
            self._recalled_now.add(memory_id)
            # Recalled anew: this query's reason wins.
            self.sent.pop(memory_id, None)
            self._in_flight.pop(memory_id, None)

    def _deliver(self, kind: TurnKind, messages: list[Message]) -> bool:
        """Take a settled recall as a new delivery; whether one was added."""
        handle = self.handle
        if handle is None or not handle.settled or handle.consumed:
            return False
        handle.consumed = True
        self.handle = None
        result = handle.result()
        if result is not None:
            self._small_talk = result.small_talk
            result = result.without(self._excluded())  # came into view since it started
        if result is None or not result.block:
            self.stats.empty += 1
            return False
        if kind is TurnKind.USER_QUERY:
            delivery = self._anchor_to_user(messages, handle.text, result)
        else:
            delivery = self._anchor_to_tools(messages, result)
        if delivery is None:
            # Nothing to anchor to (a hook dropped the message): count it lost, not sent.
            self._discard_result(handle, result, "no_anchor")
            return False
        self._delivered.append(delivery)
        self.surfaced.update(delivery.ids)
        point = INITIAL if kind is TurnKind.USER_QUERY else TOOL_RESULT
        self._remember_why(point, result)
        self.stats.deliveries[point] += 1
        self._record(point)
        log.info(
            "[MEMORY_PREFETCH] delivered point=%s strategy=%s count=%d latency_ms=%.0f",
            point,
            "warm" if handle.warm else result.strategy,
            len(delivery.ids),
            handle.latency_ms,
        )
        return True

    async def _refresh(self, *, force: bool) -> None:
        """Bring every delivered block to the current state of its memories.

        Superseded memories give way to their successors, forgotten and expired ones
        leave; a block left empty is dropped, and the surfaced set follows, so recall
        may find a memory again only once it is out of view. Unchanged blocks keep
        their exact text (a stable prefix for the provider's cache).
        """
        if self._live is None or not self._delivered:
            return
        deliveries = list(self._delivered)
        hidden = self._hidden
        try:
            answer = await asyncio.wait_for(
                self._live(
                    [tuple(i for i in d.ids if i not in hidden) for d in deliveries],
                    None if force else self._freshness,
                ),
                LIVE_TIMEOUT_S,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failed check must not fail the turn
            log.warning("[MEMORY_PREFETCH] could not check delivered memories: %s", exc)
            return
        if answer is None or self._delivered != deliveries:
            return  # unchanged, or /clear or a new session while it was read
        self._freshness = answer.freshness
        current: list[_Delivery] = []
        for delivery, group in zip(deliveries, answer.groups, strict=True):
            if not group.ids:
                log.info("[MEMORY_PREFETCH] delivered memories %s left the view", delivery.ids)
                continue
            if group.ids != delivery.ids:
                log.info(
                    "[MEMORY_PREFETCH] delivered memories %s now stand as %s",
                    delivery.ids,
                    group.ids,
                )
                delivery = replace(delivery, ids=group.ids, block=group.block)
            current.append(delivery)
        self._delivered = current
        self.surfaced.clear()
        for delivery in current:
            self.surfaced.update(delivery.ids)
        self._forget_reasons()

    async def on_query_end(self, session: ChatSession, outcome: QueryOutcome) -> None:
        if outcome.status in ("ok", "turn_cap"):
            self._answered()  # the last request got its reply
        else:
            self._in_flight = {}  # failed or cancelled: it reached no model that answered
        if outcome.status == "ok" and not outcome.used_tools:
            await self._read_small_talk()
        if outcome.status != "ok":
            self._abort(outcome.status)
        elif not outcome.used_tools:
            self._abort("no_tool_call")
        else:
            self._abort("query_ended")

    async def _read_small_talk(self) -> None:
        """Whether a tool-less reply's message was small talk, when its receipt depends
        on it: all it would list is memories in view from earlier messages. Read from
        its recall once settled (waited for briefly: the reply is already shown); a
        recall that found nothing beside what is in view never read it (recall reads
        it among candidates), so it is asked once more, nothing excluded, for that
        alone. Still unknown after, the memories are listed."""
        if self._small_talk or not self.sent or any(s.point != IN_VIEW for s in self.sent.values()):
            return
        handle = self.handle
        if handle is not None and not handle.consumed:
            if not handle.settled and handle.task is not None:
                await asyncio.wait({handle.task}, timeout=SMALL_TALK_WAIT_S)
            result = handle.result() if handle.settled else None
            if result is None or result.small_talk or result.ids:
                self._small_talk = result is not None and result.small_talk
                return
        try:
            again = await asyncio.wait_for(
                self._recall(self._query_text, frozenset(), record=False), SMALL_TALK_WAIT_S
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a receipt's detail: the turn stands
            log.debug("[MEMORY_PREFETCH] small talk not read: %s", exc)
            return
        self._small_talk = again is not None and again.small_talk

    async def on_reset(self, session: ChatSession) -> None:
        self._abort("reset")
        self._drop_warm()
        self._forget()

    async def on_close(self, session: ChatSession) -> None:
        self._abort("close")
        self._drop_warm()
        if self._recording:
            await asyncio.wait(set(self._recording))

    def _forget(self) -> None:
        self.surfaced.clear()
        self._delivered = []
        self._freshness = None
        self._why.clear()
        self._hidden.clear()

    def _drop_warm(self) -> None:
        warm, self.warm_handle = self.warm_handle, None
        if warm is not None:
            warm.cancel()

    # recall ---------------------------------------------------------------------------
    async def _run(self, handle: MemoryPrefetchHandle, excluded: frozenset[int]) -> RecallResult | None:
        try:
            if handle.warm and self._record_recall is not None:
                # Counted by _record_adopted only if a query uses it.
                return await self._recall(handle.text, excluded, record=False)
            return await self._recall(handle.text, excluded)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a recall failure means "no memory", never a failed turn
            self.stats.failed += 1
            log.warning("[MEMORY_PREFETCH] recall failed, continuing without memory: %s", exc)
            return None
        finally:
            # Set here rather than in a done-callback so a recall that returned is
            # visible as settled to the very next check, like `promise.finally`.
            handle.settled_at = self._clock()

    def _link_to_parent(self, handle: MemoryPrefetchHandle) -> None:
        """The query task ending (user cancel included) cancels a recall still running."""
        parent = asyncio.current_task()
        task = handle.task
        if parent is None or task is None:
            return

        def on_parent_done(_: asyncio.Task[object]) -> None:
            handle.cancel()

        parent.add_done_callback(on_parent_done)
        task.add_done_callback(lambda _: parent.remove_done_callback(on_parent_done))

    async def _wait_briefly(self, handle: MemoryPrefetchHandle, session: ChatSession) -> None:
        """`memory.initial_wait_ms`: a bounded wait for a recall about to settle; longer
        (OPENING_WAIT_S) while memory itself is still opening, and `api_wait_ms` in a
        face that warms nothing while a person types (`ChatSession.interactive`)."""
        timeout = self.initial_wait_ms / 1000
        if not session.interactive:
            timeout = max(timeout, self.api_wait_ms / 1000)
        if self.memory_opening:
            timeout = max(timeout, OPENING_WAIT_S)
        if timeout <= 0 or handle.task is None:
            return
        await asyncio.wait({handle.task}, timeout=timeout)

    def _abort(self, reason: str) -> None:
        handle, self.handle = self.handle, None
        if handle is None:
            return
        if reason == "no_tool_call" and handle.left_without is not None:
            self._late(handle)
            return
        if not handle.settled:
            handle.cancel()
            self.stats.cancelled += 1
            self._record(MISSED)
            log.info("[MEMORY_PREFETCH] recall still running, cancelled reason=%s", reason)
            return
        result = handle.result()
        if result is not None and result.block:
            self._discard_result(handle, result, reason)

    def _late(self, handle: MemoryPrefetchHandle) -> None:
        """The reply had no tool call, so its one request was the only point, and it
        left before this recall was ready: the message went without its memory. Counted
        (debug log, `memory stats`), however the recall ends."""
        assert handle.left_without is not None
        left_after_ms = (handle.left_without - handle.started_at) * 1000
        if handle.settled:
            result = handle.result()
            if result is None or not result.block:
                return  # it found nothing: nothing was lost
            state = f"settled {handle.latency_ms - left_after_ms:.0f} ms after it"
        else:
            handle.cancel()
            state = f"still running {(self._clock() - handle.left_without) * 1000:.0f} ms after it"
        self.stats.late += 1
        self._record(LATE)
        log.info(
            "[MEMORY_PREFETCH] late: recall %s; the only request left %.0f ms after recall "
            "started (reason=no_tool_call warm=%s)",
            state,
            left_after_ms,
            handle.warm,
        )

    def _discard_result(
        self, handle: MemoryPrefetchHandle, result: RecallResult, reason: str
    ) -> None:
        self.stats.discarded[reason] += 1
        self._record(DISCARDED)
        log.info(
            "[MEMORY_PREFETCH] discarded reason=%s strategy=%s count=%d latency_ms=%.0f",
            reason,
            result.strategy,
            len(result.ids),
            handle.latency_ms,
        )

    def _record(self, point: str) -> None:
        record = self._record_delivery
        if record is None:
            return

        async def run() -> None:
            try:
                await record(point)
            except Exception as exc:  # metrics must never break a turn
                log.warning("[MEMORY_PREFETCH] could not record delivery %s: %s", point, exc)

        self._spawn(run())

    async def _record_adopted(self, handle: MemoryPrefetchHandle) -> None:
        """Count an adopted warm recall once it has settled, as a query's own would be."""
        assert self._record_recall is not None and handle.task is not None
        await asyncio.wait({handle.task})
        result = handle.result()
        if result is None:
            return  # cancelled or failed: an unrecorded recall never counts either
        try:
            await self._record_recall(result)
        except Exception as exc:  # metrics must never break a turn
            log.warning("[MEMORY_PREFETCH] could not record a warm recall: %s", exc)

    def _spawn(self, work: Coroutine[object, object, None]) -> None:
        """Metrics writes run beside the request; on_close waits for them."""
        task = asyncio.get_running_loop().create_task(work)
        self._recording.add(task)
        task.add_done_callback(self._recording.discard)

    # request shaping ------------------------------------------------------------------
    def _anchor_to_user(
        self, messages: list[Message], text: str, result: RecallResult
    ) -> _Delivery | None:
        positions = _user_positions(messages, text)
        if not positions:
            return None
        return _Delivery(
            block=result.block,
            ids=tuple(result.ids),
            user_text=text,
            occurrence=len(positions) - 1,
        )

    def _anchor_to_tools(self, messages: list[Message], result: RecallResult) -> _Delivery | None:
        if not messages or messages[-1].get("role") != "tool":
            return None
        call_id = str(messages[-1].get("tool_call_id"))
        return _Delivery(
            block=result.block,
            ids=tuple(result.ids),
            tool_call_id=call_id,
            occurrence=len(_tool_positions(messages, call_id)) - 1,
        )

    def _reapply(self, messages: list[Message]) -> list[Message]:
        """Earlier deliveries back into this request; a lost anchor frees its ids."""
        for delivery in list(self._delivered):
            shaped = self._reapply_one(messages, delivery)
            if shaped is messages:
                # Its message left the model view (compaction): let recall find it again.
                self._delivered.remove(delivery)
                self.surfaced.difference_update(delivery.ids)
                self._forget_reasons()
            messages = shaped
        return messages

    def _reapply_one(self, messages: list[Message], delivery: _Delivery) -> list[Message]:
        if delivery.user_text is not None:
            positions = _user_positions(messages, delivery.user_text)
        else:
            positions = _tool_positions(messages, str(delivery.tool_call_id))
        if len(positions) <= delivery.occurrence:
            return messages
        index = positions[delivery.occurrence]
        if delivery.user_text is not None:
            shaped = list(messages)
            shaped[index] = prepend_reminder(messages[index], delivery.block)
            return shaped
        return insert_after_tool_results(messages, index, delivery.block)


def _at(values: list[float | None] | list[float], index: int) -> float | None:
    return values[index] if index < len(values) else None


def _same_recall(
    warm: MemoryPrefetchHandle, session: ChatSession, text: str, excluded: frozenset[int]
) -> bool:
    """``warm`` serves a query for ``text`` in ``session``, and did not fail (a failed
    one is no reason to go without memory: run it again). It may have been started
    while a reply was still running, before that reply's memories came into view: what
    it excluded is then a subset of what the query excludes, and the memories in view
    since are taken out when it is delivered (`RecallResult.without`)."""
    return (
        warm.text == text.strip()
        and warm.session_id == session.info.id
        and warm.excluded <= excluded
        and not (warm.settled and warm.result() is None)
    )


def _user_positions(messages: list[Message], text: str) -> list[int]:
    """User messages that are `text`, possibly behind reminders other hooks put first."""
    return [
        i
        for i, m in enumerate(messages)
        if m.get("role") == "user" and _is_text(content_text(m.get("content")), text)
    ]


def _is_text(body: str, text: str) -> bool:
    return body == text or body.endswith(f"\n\n{text}")


def prepend_reminder(message: Message, block: str) -> Message:
    """A copy of the user message with the block in front of its reminders (§6)."""
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": [{"type": "text", "text": block}, *content]}
    return {**message, "content": f"{block}\n\n{content or ''}"}


def insert_after_tool_results(messages: list[Message], index: int, block: str) -> list[Message]:
    """A copy of ``messages`` with the block as a user message after the run of tool
    results that ``index`` is in: never between a tool call and its results (§6)."""
    end = index + 1
    while end < len(messages) and messages[end].get("role") == "tool":
        end += 1
    return [*messages[:end], {"role": "user", "content": block}, *messages[end:]]


def _tool_positions(messages: list[Message], tool_call_id: str) -> list[int]:
    return [
        i
        for i, m in enumerate(messages)
        if m.get("role") == "tool" and str(m.get("tool_call_id")) == tool_call_id
    ]
