"""ChatSession: one conversation and its UserQuery / ToolResult loop.

A query commits the user message, then asks the model; while the model answers with
tool calls, the calls run and their results go back in a ToolResult turn, up to
`llm.max_turns` requests. Every finished message is committed as it completes, so
the database always holds a valid prefix of the conversation.

The loop runs in its own task; `run_query` relays its events. Cancelling the task
that iterates `run_query` (or calling `cancel()`) cancels the loop wherever it is —
stream or tool — and the loop then commits what it has (the partial reply marked
interrupted, "Cancelled by user" for tool calls that got no result), so the next
query starts from a consistent history. Relaying through a task also means a
consumer cancelled while busy elsewhere (e.g. rendering) still stops the loop.

The model view is derived from the items on every request (`chat/view.py`): the
items after the last /clear marker, folded by the last compaction marker, with any
tool call that lacks its results left out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, Protocol, TypedDict, TypeVar, Unpack

from qwenmem_tui.chat.events import (
    AssistantDelta,
    ChatEvent,
    ItemAdded,
    Notice,
    QueryFinished,
    QueryStarted,
    ReasoningDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnStarted,
)
from qwenmem_tui.chat.tools import ToolContext, ToolRegistry
from qwenmem_tui.chat.turns import QueryOutcome, TurnKind
from qwenmem_tui.chat.view import model_messages, view_items
from qwenmem_tui.chat.window import WINDOW_ITEMS, Window, load_window, trim
from qwenmem_tui.llm import client as llm_events
from qwenmem_tui.llm.client import Completion, LLMClient, ToolCall, Usage
from qwenmem_tui.llm.errors import LLMError
from qwenmem_tui.llm.wire import JSONObject, Message
from qwenmem_tui.storage.database import StorageError
from qwenmem_tui.storage.sessions import (
    Item,
    SessionInfo,
    SessionNotFoundError,
    SessionStore,
    make_title,
)
from qwenmem_tui.text import one_line

if TYPE_CHECKING:
    from qwenmem_tui.config import Settings

log = logging.getLogger("qwenmem.chat")

DEFAULT_SYSTEM_PROMPT = (
    "You are qwenmem, a helpful assistant in the user's terminal. Answer clearly and "
    "concisely in Markdown, with fenced code blocks for code.\n"
    "Call the tools you are given when they help. read_file and list_directory see the "
    "user's project (paths are relative to its root): look at the files instead of "
    "guessing what they contain, and say so when a tool fails."
)
TOOL_RESULT_MAX_CHARS = 64 * 1024
"""Cap on one tool result as stored and sent; the model's context is the limit."""
RESET_NOTICE = "Context cleared: the model no longer sees the messages above."
CANCELLED_TOOL_RESULT = "Cancelled by user."
# A streaming reply is checkpointed to the database once it has grown by this many
# characters or this many seconds passed, whichever comes first (see _checkpoint).
DRAFT_EVERY_CHARS = 512
DRAFT_EVERY_SECONDS = 2.0
TURN_CAP_TOOL_RESULT = "Not run: the turn limit for this message was reached."

Emit = Callable[[ChatEvent], None]
T = TypeVar("T")


class QueryHook(Protocol):
    """What a feature (memory prefetch, extraction, compaction, ...) plugs into the
    loop, at fixed points of every query:

    1. `on_query_start` — the user message is committed, before any request.
    2. `before_request` — before every request (once per turn) with the turn's kind;
       returns the messages actually sent. Must not block on slow work.
    3. `on_query_end` — exactly once per started query, whatever the outcome
       (also after a cancellation, with the partial reply already committed).
    4. `on_reset` — /clear, before the reset point is recorded.
    5. `on_close` — the session is closing.
    """

    async def on_query_start(self, session: ChatSession, text: str) -> None: ...

    async def before_request(
        self, session: ChatSession, kind: TurnKind, messages: list[Message]
    ) -> list[Message]: ...

    async def on_query_end(self, session: ChatSession, outcome: QueryOutcome) -> None: ...

    async def on_reset(self, session: ChatSession) -> None: ...

    async def on_close(self, session: ChatSession) -> None: ...


class BaseQueryHook:
    """Does nothing at every point; subclass and override only what you need."""

    async def on_query_start(self, session: ChatSession, text: str) -> None:
        return None

    async def before_request(
        self, session: ChatSession, kind: TurnKind, messages: list[Message]
    ) -> list[Message]:
        return messages

    async def on_query_end(self, session: ChatSession, outcome: QueryOutcome) -> None:
        return None

    async def on_reset(self, session: ChatSession) -> None:
        return None

    async def on_close(self, session: ChatSession) -> None:
        return None


async def _to_the_end(work: Awaitable[T]) -> T:
    """Await `work` to its end even if the caller is cancelled meanwhile, any number
    of times; the cancellation is raised once `work` is done (its result kept)."""
    task = asyncio.ensure_future(work)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError as exc:
            if task.cancelled():
                raise
            cancelled = exc
    result = task.result()
    if cancelled is not None:
        raise cancelled
    return result


def _cap_tool_result(text: str) -> str:
    if len(text) <= TOOL_RESULT_MAX_CHARS:
        return text
    hidden = len(text) - TOOL_RESULT_MAX_CHARS
    return f"{text[:TOOL_RESULT_MAX_CHARS]}\n[… truncated: {hidden} more characters]"


@dataclass
class _Progress:
    """What the running query has done, so a cancellation can commit the rest."""

    replying: bool = False  # a model reply is being received and is not committed yet
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    completion: Completion | None = None
    unanswered: list[ToolCall] = field(default_factory=list)  # committed calls, no result yet
    running: ToolCall | None = None
    tool_names: list[str] = field(default_factory=list)
    # The reply so far, checkpointed while it streams (see ChatSession._checkpoint).
    draft: Item | None = None
    draft_write: asyncio.Task[None] | None = None
    draft_chars: int = 0
    draft_at: float = 0.0
    text_chars: int = 0

    def begin_reply(self) -> None:
        self.replying = True
        self.text.clear()
        self.reasoning.clear()
        self.completion = None
        self.draft = None
        self.draft_write = None
        self.draft_chars = self.text_chars = 0
        self.draft_at = time.monotonic()

    def outcome(self, status: str, error: str | None = None) -> QueryOutcome:
        return QueryOutcome(status, error, bool(self.tool_names), list(self.tool_names))


def _usage_of(items: Sequence[Item]) -> Usage:
    prompt = completion = 0
    for item in items:
        usage = item.meta.get("usage") if item.type == "assistant" else None
        if isinstance(usage, dict):
            prompt += int(usage.get("prompt_tokens") or 0)
            completion += int(usage.get("completion_tokens") or 0)
    return Usage(prompt, completion)


class ChatOptions(TypedDict):
    """The keywords of ``ChatSession(...)`` besides its session and store: what
    ``ChatSession.load`` passes through, so the two entry points cannot drift apart."""

    llm: LLMClient
    tools: ToolRegistry
    settings: Settings
    project_root: Path
    hooks: NotRequired[Sequence[QueryHook]]
    clock: NotRequired[Callable[[], float]]
    system_prompt: NotRequired[str | None]
    interactive: NotRequired[bool]
    window_items: NotRequired[int]


class ChatSession:
    def __init__(
        self,
        *,
        info: SessionInfo,
        store: SessionStore,
        llm: LLMClient,
        tools: ToolRegistry,
        settings: Settings,
        project_root: Path,
        hooks: Sequence[QueryHook] = (),
        clock: Callable[[], float] = time.time,
        system_prompt: str | None = None,
        items: Sequence[Item] = (),
        interactive: bool = False,
        window_items: int = WINDOW_ITEMS,
    ) -> None:
        self.info = info
        self.store = store
        self.llm = llm
        self.tools = tools
        self.settings = settings
        self.project_root = Path(project_root)
        self.hooks = list(hooks)
        self.clock = clock
        self.system_prompt = system_prompt if system_prompt is not None else DEFAULT_SYSTEM_PROMPT
        self.window_items = window_items
        """The newest items held in memory beyond what the model view reads."""
        held = Window(list(items))
        self.items: list[Item] = held.items
        """The session's newest items in order, display items included: the window held in
        memory (`chat/window.py`). The `earlier` ones before them are in the database."""
        self.carried: list[Item] = held.carried
        """Pinned messages from before `items` that the model view still carries."""
        self.earlier = held.earlier
        self._latest: dict[str, Item] = {item.type: item for item in held.items}
        self._usage = _usage_of(held.items)
        self.interactive = interactive
        """A person types in this face and it prepares while they type (the TUI warms
        memory recall). False for faces handed a whole message at once (the daemon,
        headless, ACP): a feature that would have prepared during typing waits for its
        work instead (`memory.api_wait_ms`)."""
        self.last_usage: Usage | None = None
        """Token usage the provider reported for the latest request, if it did."""
        self._task: asyncio.Task[None] | None = None
        self._busy = False
        self._emit: Emit | None = None

    @classmethod
    async def load(
        cls, *, session_id: str, store: SessionStore, **options: Unpack[ChatOptions]
    ) -> ChatSession:
        """Resume a stored session: its items, and the model view rebuilt from them.

        ``options`` are the other keywords of ``ChatSession(...)`` (ChatOptions),
        passed through so the two entry points cannot drift apart.
        """
        info = await store.get_session(session_id)
        if info is None:
            raise SessionNotFoundError(session_id)
        chat = cls(info=info, store=store, **options)
        await chat.reload()
        return chat

    async def reload(self) -> None:
        """Read the window again from the database (another process may have written)."""
        session_id = self.info.id
        held = await load_window(self.store, session_id, self.window_items)
        self.items, self.carried, self.earlier = held.items, held.carried, held.earlier
        self._latest = await self.store.latest_by_type(session_id)
        self._usage = Usage(*await self.store.usage_total(session_id))

    # -- what is not held in memory --------------------------------------------------------

    def latest(self, type: str) -> Item | None:  # noqa: A002 - the Item field
        """The session's newest item of `type`, held or not (the last model switch)."""
        return self._latest.get(type)

    @property
    def item_count(self) -> int:
        """Stored items of the session: the window and the earlier ones."""
        return self.earlier + len(self.items)

    async def page(self, start: int, end: int) -> list[Item]:
        """The session's items `start:end` by position, from memory when held."""
        if start >= self.earlier:
            return self.items[start - self.earlier : end - self.earlier]
        stored = await self.store.load_items(self.info.id, offset=start, limit=max(0, end - start))
        return stored

    async def view_item(self, item_id: int) -> Item | None:
        """The item `item_id` if the model view reads it (after the last /clear), held in
        memory or not: a message scrolled back to can still be pinned."""
        held = next((item for item in self.view_items() if item.id == item_id), None)
        first = self.items[0].id if self.items else None
        if held is not None or first is None or item_id >= first:
            return held
        if any(item.meta.get("reset") for item in self.items):
            return None  # before a /clear held in memory
        reset = await self.store.last_item(self.info.id, meta_key="reset")
        if reset is not None and reset.id is not None and reset.id >= item_id:
            return None
        return await self.store.get_item(self.info.id, item_id)

    async def set_meta(self, item: Item, meta: JSONObject) -> Item:
        """Store an item's new meta (a pin); the copy held in memory follows, and a message
        pinned from before the window is carried into the model view."""
        updated = replace(item, meta=meta)
        await self.store.update_item(updated)  # first: memory changes once the database agrees
        held = [i for i in (*self.items, *self.carried) if i.id == item.id]
        for copy in held:
            copy.meta = meta
        first = self.items[0].id if self.items else None
        if not held and meta.get("pinned") and first is not None and item.id is not None and item.id < first:
            self.carried = sorted([*self.carried, updated], key=lambda i: i.id or 0)
        return held[0] if held else updated

    async def position(self, item_id: int) -> int:
        """Where the stored item `item_id` stands among the session's items (0-based)."""
        for index, item in enumerate(self.items):
            if item.id == item_id:
                return self.earlier + index
        return await self.store.count_items(self.info.id, through=item_id - 1)

    async def stored_items(self) -> list[Item]:
        """Every item of the session, read from the database (export, replay)."""
        return await self.store.load_items(self.info.id)

    # -- the model view ------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """A query is running (False again by the time its QueryFinished is seen)."""
        return self._busy

    def view_items(self) -> list[Item]:
        """The items the model view is built from: after the last /clear, with the
        pinned messages carried from before the window."""
        return view_items([*self.carried, *self.items])

    def usage_total(self) -> Usage:
        """Tokens the endpoint counted for this session's chat requests (side calls —
        recaps, extraction, summaries — are not in it)."""
        return self._usage

    def history(self) -> list[Message]:
        """The messages the model sees next, system prompt first; fresh copies."""
        return model_messages([*self.carried, *self.items], self.system_prompt)

    # -- queries -------------------------------------------------------------------------

    async def run_query(self, text: str) -> AsyncIterator[ChatEvent]:
        """Answer `text`, yielding events; `QueryFinished` is always the last one.

        When the iterating task is cancelled, the events of the loop's cleanup
        (through `QueryFinished("cancelled")`) are still yielded, then the
        cancellation propagates.
        """
        if self._busy:
            raise RuntimeError("a query is already running in this session")
        self._busy = True
        queue: asyncio.Queue[ChatEvent | None] = asyncio.Queue()
        task = asyncio.create_task(self._run(text, queue.put_nowait), name=f"query-{self.info.id}")
        self._task = task

        def loop_done(done: asyncio.Task[None]) -> None:
            if self._task is done:
                self._task = None
                self._busy = False
            queue.put_nowait(None)

        task.add_done_callback(loop_done)
        consumer = asyncio.current_task()

        def consumer_done(_: object) -> None:
            task.cancel()

        if consumer is not None:
            consumer.add_done_callback(consumer_done)
        try:
            while (event := await queue.get()) is not None:
                yield event
        except asyncio.CancelledError:
            task.cancel()
            await asyncio.wait({task})
            while not queue.empty():
                if (event := queue.get_nowait()) is not None:
                    yield event
            raise
        finally:
            if consumer is not None:
                consumer.remove_done_callback(consumer_done)
            if not task.done():  # the consumer stopped iterating early
                task.cancel()
                await asyncio.wait({task})
        if task.cancelled():  # cancelled before it ran: nothing was committed or sent
            yield QueryFinished(QueryOutcome("cancelled"))

    def cancel(self) -> bool:
        """Cancel the running query (Esc); False when there is none."""
        if self._task is None or self._task.done():
            return False
        self._task.cancel()
        return True

    async def _stop_query(self) -> None:
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task})

    async def _run(self, text: str, emit: Emit) -> None:
        progress = _Progress()
        self._emit = emit
        try:
            emit(QueryStarted(text))
            try:
                outcome = await self._loop(text, emit, progress)
            except asyncio.CancelledError:
                # This task is ours and ends normally after the cleanup below; the
                # consumer's own cancellation, if any, propagates in `run_query`.
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()
                log.info("[CHAT] query cancelled session=%s", self.info.id)
                # A quit cancels this task more than once (the consumer's end, the
                # relay, the session's close): the partial reply is committed whole
                # whatever arrives meanwhile, and only then does the task end.
                try:
                    await _to_the_end(
                        self._commit_leftovers(progress, emit, CANCELLED_TOOL_RESULT)
                    )
                except asyncio.CancelledError:
                    # The later cancellations asked for what is done now: a stop.
                    while current is not None and current.cancelling():
                        current.uncancel()
                outcome = progress.outcome("cancelled")
            except LLMError as exc:
                log.warning("[CHAT] request failed (%s): %s", exc.kind, exc.message)
                await self._commit_leftovers(progress, emit, f"Not run: {exc.message}")
                status = "context_limit" if exc.kind == "context_length" else "error"
                message = one_line(exc.message)
                await self._persist(self._item("error", message), emit)
                outcome = progress.outcome(status, message)
            except Exception as exc:
                log.exception("[CHAT] query failed session=%s", self.info.id)
                # A full disk or a damaged database is the user's to fix, and its line
                # names the file: no "internal error" about it.
                known = isinstance(exc, StorageError)
                message = one_line(str(exc) if known else f"Internal error: {exc}")
                try:
                    await self._commit_leftovers(progress, emit, f"Not run: {message}")
                    await self._persist(self._item("error", message), emit)
                except Exception:
                    log.exception("[CHAT] could not record the failure")
                outcome = progress.outcome("error", message)
            for hook in self.hooks:
                try:
                    await hook.on_query_end(self, outcome)
                except Exception:
                    log.exception("[CHAT] hook %s failed in on_query_end", type(hook).__name__)
        finally:
            self._emit = None
            self._busy = False
        emit(QueryFinished(outcome))

    async def _loop(self, text: str, emit: Emit, progress: _Progress) -> QueryOutcome:
        # Hooks start first so side work (memory recall) overlaps the commit below
        # instead of queueing behind it: the prefetch never waits, so every
        # millisecond it gets before the request is built is a chance to land.
        for hook in self.hooks:
            try:
                await hook.on_query_start(self, text)
            except Exception:
                log.exception("[CHAT] hook %s failed in on_query_start", type(hook).__name__)
        await self._persist(self._item("user", text, {"role": "user", "content": text}), emit)
        ctx = ToolContext(
            project_root=self.project_root,
            session_id=self.info.id,
            view=self.history,
            trusted_tools=self.tools.trusted_outputs(),
        )
        schemas = self.tools.schemas() or None
        max_turns = max(1, self.settings.llm.max_turns)
        kind = TurnKind.USER_QUERY
        for index in range(max_turns):
            emit(TurnStarted(kind, index))
            messages = await self._before_request(kind, self.history())
            ctx.request = messages
            completion = await self._stream(messages, schemas, emit, progress)
            await self._commit_reply(completion, emit, progress)
            if not completion.tool_calls:
                return progress.outcome("ok")
            for call in completion.tool_calls:
                if call.name not in progress.tool_names:
                    progress.tool_names.append(call.name)
            if index == max_turns - 1:
                break
            for call in completion.tool_calls:
                await self._run_tool(call, ctx, emit, progress)
            kind = TurnKind.TOOL_RESULT
        await self._answer_unanswered(progress, emit, TURN_CAP_TOOL_RESULT)
        notice = f"Stopped after {max_turns} model turns (llm.max_turns); send a message to continue."
        log.warning("[CHAT] turn cap reached session=%s turns=%d", self.info.id, max_turns)
        await self._persist(self._item("info", notice), emit)
        return progress.outcome("turn_cap", notice)

    async def _before_request(self, kind: TurnKind, messages: list[Message]) -> list[Message]:
        for hook in self.hooks:
            try:
                messages = await hook.before_request(self, kind, messages)
            except Exception:
                log.exception("[CHAT] hook %s failed in before_request", type(hook).__name__)
        return messages

    async def _stream(
        self, messages: list[Message], schemas: list[Message] | None, emit: Emit, progress: _Progress
    ) -> Completion:
        progress.begin_reply()
        async with aclosing(self.llm.stream_chat(messages, tools=schemas)) as stream:
            async for event in stream:
                if isinstance(event, llm_events.TextDelta):
                    progress.text.append(event.text)
                    progress.text_chars += len(event.text)
                    emit(AssistantDelta(event.text))
                    self._checkpoint(progress)
                elif isinstance(event, llm_events.ReasoningDelta):
                    progress.reasoning.append(event.text)
                    emit(ReasoningDelta(event.text))
                elif isinstance(event, llm_events.StreamFinished):
                    progress.completion = event.completion
        completion = progress.completion
        if completion is None:  # the client promises StreamFinished or an LLMError
            raise LLMError("bad_response", f"{self.llm.label}: the reply stream ended early")
        self.last_usage = completion.usage
        return completion

    async def _commit_reply(self, completion: Completion, emit: Emit, progress: _Progress) -> None:
        # Progress first: `_persist` completes even when cancelled meanwhile.
        progress.replying = False
        progress.unanswered = list(completion.tool_calls)
        # The endpoint's count of this request, kept with the reply: the session's
        # total survives a resume (`usage_total`).
        usage = completion.usage
        meta = (
            {"usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens}}
            if usage is not None
            else {}
        )
        item = self._item("assistant", completion.content, completion.to_message(), meta)
        await self._persist_reply(item, emit, progress)

    async def _run_tool(
        self, call: ToolCall, ctx: ToolContext, emit: Emit, progress: _Progress
    ) -> None:
        progress.running = call
        emit(ToolCallStarted(call))
        result = await self.tools.call(call.name, call.arguments, ctx)
        content = _cap_tool_result(result.content)
        if self.tools.untrusted_output(call.name):
            ctx.turn_outputs.append(content)
        await self._commit_tool_result(call, content, result.is_error, emit, progress)
        progress.running = None

    async def _commit_tool_result(
        self,
        call: ToolCall,
        content: str,
        is_error: bool,
        emit: Emit,
        progress: _Progress,
    ) -> None:
        message = {"role": "tool", "tool_call_id": call.id, "content": content}
        meta = {"tool_name": call.name, "arguments": call.arguments, "is_error": is_error}
        # Progress first: `_persist` completes even when cancelled meanwhile.
        progress.unanswered.remove(call)
        emit(ToolCallFinished(call, content, is_error))
        await self._persist(self._item("tool", content, message, meta), emit)

    async def _answer_unanswered(self, progress: _Progress, emit: Emit, answer: str) -> None:
        """Give every committed tool call a result, so the history stays valid."""
        for call in list(progress.unanswered):
            if call is not progress.running:
                emit(ToolCallStarted(call))
            progress.running = None
            await self._commit_tool_result(call, answer, True, emit, progress)

    async def _commit_leftovers(self, progress: _Progress, emit: Emit, answer: str) -> None:
        """After a cancellation or failure: commit the reply so far, answer open calls."""
        if progress.replying:
            progress.replying = False  # first: `_persist` completes even when cancelled
            if progress.completion is not None:
                await self._commit_reply(progress.completion, emit, progress)
            elif progress.text or progress.reasoning:
                message: Message = {"role": "assistant", "content": "".join(progress.text)}
                if progress.reasoning:
                    message["reasoning_content"] = "".join(progress.reasoning)
                item = self._item("assistant", message["content"], message, {"interrupted": True})
                await self._persist_reply(item, emit, progress)
        await self._answer_unanswered(progress, emit, answer)

    # -- items -----------------------------------------------------------------------------

    def _item(
        self,
        type: str,  # noqa: A002 - the Item field
        content: str,
        message: Message | None = None,
        meta: JSONObject | None = None,
    ) -> Item:
        return Item(
            id=None,
            session_id=self.info.id,
            type=type,
            content=content,
            message=message,
            meta=dict(meta or {}),
            created_at=self.clock(),
        )

    async def _persist(
        self, item: Item, emit: Emit | None = None, *, replacing: Item | None = None
    ) -> Item:
        """Commit `item`, add it to `items` and announce it, even if cancelled meanwhile.

        `replacing`: a stored row (a reply's checkpoint) that `item` overwrites in place.
        The write runs to its end however often the caller is cancelled meanwhile, so
        the in-memory items (and the UI) never disagree with the database; the
        cancellation is raised after the item is remembered.
        """
        if replacing is None:
            write = asyncio.ensure_future(self.store.add_item(item))
        else:
            item = replace(item, id=replacing.id, created_at=replacing.created_at)
            write = asyncio.ensure_future(self._update(item))
        try:
            saved = await _to_the_end(write)
        except asyncio.CancelledError:
            self._remember(write.result(), emit)  # done by now: _to_the_end waited
            raise
        self._remember(saved, emit)
        return saved

    def _checkpoint(self, progress: _Progress) -> None:
        """Save the reply so far, now and then, without holding up the stream.

        A crash or kill -9 mid-reply then leaves the partial text in the database,
        already marked interrupted, instead of nothing. At most one write is in
        flight; short replies finish before the first checkpoint and cost nothing.
        """
        if progress.draft_write is not None and not progress.draft_write.done():
            return
        grown = progress.text_chars - progress.draft_chars
        if grown <= 0 or (
            grown < DRAFT_EVERY_CHARS and time.monotonic() - progress.draft_at < DRAFT_EVERY_SECONDS
        ):
            return
        progress.draft_chars = progress.text_chars
        progress.draft_at = time.monotonic()
        message: Message = {"role": "assistant", "content": "".join(progress.text)}
        if progress.reasoning:
            message["reasoning_content"] = "".join(progress.reasoning)
        progress.draft_write = asyncio.ensure_future(self._save_draft(progress, message))

    async def _save_draft(self, progress: _Progress, message: Message) -> None:
        try:
            if progress.draft is None:
                draft = self._item("assistant", message["content"], message, {"interrupted": True})
                progress.draft = await self.store.add_item(draft)
            else:
                progress.draft = replace(progress.draft, content=message["content"], message=message)
                await self.store.update_item(progress.draft)
        except Exception:
            # Only a checkpoint: the reply is still committed whole when it ends.
            log.warning("[CHAT] could not checkpoint the streaming reply", exc_info=True)

    async def _persist_reply(self, item: Item, emit: Emit, progress: _Progress) -> Item:
        """Commit a reply: in place of its checkpoint when one was saved, else anew."""
        if progress.draft_write is not None:
            await asyncio.wait({progress.draft_write})  # never two writers on one draft
        draft, progress.draft, progress.draft_write = progress.draft, None, None
        return await self._persist(item, emit, replacing=draft)

    async def _update(self, item: Item) -> Item:
        await self.store.update_item(item)
        return item

    def _remember(self, item: Item, emit: Emit | None) -> None:
        self.items.append(item)
        self._latest[item.type] = item
        added = _usage_of([item])
        self._usage = Usage(
            self._usage.prompt_tokens + added.prompt_tokens,
            self._usage.completion_tokens + added.completion_tokens,
        )
        held = trim(Window(self.items, self.carried, self.earlier), self.window_items)
        self.items, self.carried, self.earlier = held.items, held.carried, held.earlier
        if emit is not None:
            emit(ItemAdded(item))
        self.info.updated_at = max(self.info.updated_at, item.created_at)
        if item.message is not None:
            self.info.message_count += 1
        if item.type == "user" and not self.info.title:
            self.info.title = make_title(item.content)

    async def add_display_item(
        self,
        type: str,  # noqa: A002 - the Item field
        content: str,
        meta: JSONObject | None = None,
    ) -> Item:
        """Commit a display-only item (info, error, away_recap, compaction, ...)."""
        return await self._persist(self._item(type, content, None, meta))

    def announce(self, item: Item) -> None:
        """Show an item a hook stored during a query (the compaction marker) as ItemAdded."""
        if self._emit is not None:
            self._emit(ItemAdded(item))

    async def notify(self, text: str, level: str = "info") -> None:
        """A transient one-liner for the UI: a `Notice` event of the running query."""
        if self._emit is not None:
            self._emit(Notice(text, level))
        else:
            log.info("[CHAT] notice outside a query (%s): %s", level, text)

    # -- lifecycle -------------------------------------------------------------------------

    async def reset(self) -> Item:
        """/clear: stop any query; the model no longer sees anything before this point.

        The items stay in the database and in `items`; a display item with
        meta {"reset": true} marks the point, so a resumed session keeps it too.
        """
        await self._stop_query()
        for hook in self.hooks:
            try:
                await hook.on_reset(self)
            except Exception:
                log.exception("[CHAT] hook %s failed in on_reset", type(hook).__name__)
        return await self.add_display_item("info", RESET_NOTICE, {"reset": True})

    async def close(self) -> None:
        """Stop any query and tell the hooks; the store and the client stay open."""
        await self._stop_query()
        for hook in self.hooks:
            try:
                await hook.on_close(self)
            except Exception:
                log.exception("[CHAT] hook %s failed in on_close", type(hook).__name__)
