"""Async memory prefetch (issue 5) through the real chat loop, SDK and fake server.

Recall is a controllable coroutine gated by asyncio events, and model replies are gated
by threading events, so "recall settles between the UserQuery and the first ToolResult"
is an ordering the test imposes, never a timing it hopes for.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from chat_support import chat_llm, collect, outcome_of
from memtest_support import Clock, make_settings

from qwenmem_tui.chat.session import BaseQueryHook, ChatSession
from qwenmem_tui.chat.view import COMPACTION_ITEM
from qwenmem_tui.chat.turns import QueryOutcome, TurnKind
from qwenmem_tui.config import LLMSettings, Settings
from qwenmem_tui.memory.settings import MemorySettings
from qwenmem_tui.features.memory.prefetch import (
    IN_VIEW,
    INITIAL,
    LATE,
    TOOL_RESULT,
    MemoryPrefetchHook,
    ProjectRecall,
)
from qwenmem_tui.memory.model import Category, Memory, Origin, Status, WriteRequest
from qwenmem_tui.memory.recall import RecallResult
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, HTTPError, Reply, ToolCallSpec

REMINDER = "<system-reminder>"


@dataclass
class RecallCall:
    text: str
    excluded: frozenset[int]
    record: bool = True
    release: asyncio.Event = field(default_factory=asyncio.Event)
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: bool = False


def note(memory_id: int) -> Memory:
    """A stored memory as recall returns it (for a block rendered again)."""
    return Memory(
        memory_id, "ana", "global", Category.USER, f"note_{memory_id}", f"note {memory_id}",
        Origin.USER, Status.ACTIVE, [], 0.0, 0.0, None,
    )


class ControlledRecall:
    """recall(text, excluded, *, record=True): waits for its call's `release` when gated,
    then answers."""

    def __init__(self, *, gated: bool = True, error: Exception | None = None) -> None:
        self.gated = gated
        self.error = error
        self.calls: list[RecallCall] = []
        self.called = asyncio.Condition()
        self.ids: list[list[int]] = [[1, 2], [3], [4]]

    async def __call__(
        self, text: str, excluded: frozenset[int], *, record: bool = True
    ) -> RecallResult:
        call = RecallCall(text, excluded, record)
        self.calls.append(call)
        async with self.called:
            self.called.notify_all()
        try:
            if self.gated:
                await call.release.wait()
            if self.error is not None:
                raise self.error
            ids = self.ids[len(self.calls) - 1]
            return RecallResult(
                block=f"{REMINDER}\nmemory {ids} for {text}\n</system-reminder>",
                ids=ids,
                memories=[note(i) for i in ids],
                scores=[],
            )
        except asyncio.CancelledError:
            call.cancelled = True
            raise
        finally:
            call.finished.set()

    async def call_number(self, n: int) -> RecallCall:
        """The n-th call (1-based), once it has started."""
        async with self.called:
            await self.called.wait_for(lambda: len(self.calls) >= n)
        return self.calls[n - 1]


class RecallFirst(BaseQueryHook):
    """Stands for request preparation slower than recall: the UserQuery waits for it."""

    def __init__(self, recall: ControlledRecall) -> None:
        self.recall = recall
        self.queries = 0

    async def on_query_start(self, session: ChatSession, text: str) -> None:
        self.queries += 1

    async def before_request(
        self, session: ChatSession, kind: TurnKind, messages: list[dict]
    ) -> list[dict]:
        if kind is TurnKind.USER_QUERY:
            call = await self.recall.call_number(self.queries)
            await call.finished.wait()
        return messages


@pytest.fixture
def settings(fake: FakeOpenAI) -> Settings:
    return Settings(llm=chat_llm(fake.base_url))


async def ask(session: ChatSession, text: str) -> QueryOutcome:
    return outcome_of(await collect(session, text))


def read_readme(gate: threading.Event | None = None) -> Reply:
    return Reply(tool_calls=[ToolCallSpec("read_file", {"path": "README.md"})], gate=gate)


def reminder_indexes(messages: list[dict]) -> list[int]:
    return [i for i, m in enumerate(messages) if REMINDER in str(m.get("content"))]


async def test_settled_recall_leads_the_new_user_message(make_session, fake: FakeOpenAI) -> None:
    recall = ControlledRecall(gated=False)
    hook = MemoryPrefetchHook(recall)
    session = await make_session(RecallFirst(recall), hook)
    fake.script(Reply("hi"))

    assert (await ask(session, "what is my editor?")).status == "ok"

    sent = fake.chat_requests[0]["messages"]
    assert reminder_indexes(sent) == [len(sent) - 1]
    user = sent[-1]["content"]
    assert user.startswith(f"{REMINDER}\nmemory [1, 2] for what is my editor?")
    assert user.endswith("</system-reminder>\n\nwhat is my editor?")
    # The request carries the block; the stored history keeps what the user typed.
    assert session.history()[-2] == {"role": "user", "content": "what is my editor?"}
    assert hook.surfaced == {1, 2}
    assert hook.stats.deliveries[INITIAL] == 1


async def test_surfaced_ids_are_excluded_on_the_next_query(make_session, fake: FakeOpenAI) -> None:
    recall = ControlledRecall(gated=False)
    hook = MemoryPrefetchHook(recall)
    session = await make_session(RecallFirst(recall), hook)
    fake.script(Reply("vim"), Reply("ok"))

    await ask(session, "what is my editor?")
    await ask(session, "and my shell?")

    assert recall.calls[0].excluded == frozenset()
    assert recall.calls[1].excluded == frozenset({1, 2})
    # Excluded because the model still sees them: the first block stays in view.
    second = fake.chat_requests[1]["messages"]
    assert "memory [1, 2]" in second[1]["content"]
    assert "memory [3] for and my shell?" in second[-1]["content"]
    assert hook.surfaced == {1, 2, 3}


async def test_a_block_compacted_out_of_view_leaves_nothing_behind(make_session, fake: FakeOpenAI) -> None:
    """Issue 41's soak: once compaction takes a block's message out of the model view,
    recall may find its memories again and the hook keeps no reason for them (it kept
    one for every memory ever recalled in the session)."""
    recall = ControlledRecall(gated=False)
    hook = MemoryPrefetchHook(recall)
    session = await make_session(RecallFirst(recall), hook)
    fake.script(Reply("vim"), Reply("ok"))
    await ask(session, "what is my editor?")
    assert hook.surfaced == {1, 2} and set(hook._why) == {1, 2}
    last = session.items[-1].id
    await session.add_display_item(COMPACTION_ITEM, "summarized", {"cut_item_id": last, "summary": "s"})

    await ask(session, "and my shell?")

    assert "memory [1, 2]" not in json.dumps(fake.chat_requests[1]["messages"])
    assert hook.surfaced == {3} and set(hook._why) == {3}  # 1 and 2: free to come back


async def test_unsettled_recall_never_blocks_and_sends_no_memory(
    make_session, fake: FakeOpenAI
) -> None:
    recall = ControlledRecall()  # never released
    hook = MemoryPrefetchHook(recall)
    session = await make_session(hook)
    fake.script(Reply("hi"))

    assert (await ask(session, "hello")).status == "ok"

    assert reminder_indexes(fake.chat_requests[0]["messages"]) == []
    await recall.calls[0].finished.wait()
    assert recall.calls[0].cancelled  # the query ended: no safe point left for it
    assert hook.handle is None


async def test_recall_settling_after_the_user_query_lands_after_the_tool_results(
    make_session, fake: FakeOpenAI
) -> None:
    recall = ControlledRecall()
    hook = MemoryPrefetchHook(recall)
    session = await make_session(hook)
    tool_reply = threading.Event()
    fake.script(read_readme(gate=tool_reply), Reply("done"))

    query = asyncio.create_task(ask(session, "summarise the readme"))
    await asyncio.to_thread(fake.wait_for_requests, 1)
    recall.calls[0].release.set()
    await recall.calls[0].finished.wait()
    tool_reply.set()
    assert (await query).status == "ok"

    first, second = (r["messages"] for r in fake.chat_requests)
    assert reminder_indexes(first) == []
    roles = [m["role"] for m in second]
    assert roles == ["system", "user", "assistant", "tool", "user"]
    assert second[2]["tool_calls"] and second[3]["tool_call_id"] == second[2]["tool_calls"][0]["id"]
    assert reminder_indexes(second) == [4]
    assert second[4]["content"].startswith(REMINDER)
    assert hook.stats.deliveries[TOOL_RESULT] == 1
    assert hook.surfaced == {1, 2}


async def test_recall_is_kept_across_the_tool_result_turns_of_one_query(
    make_session, fake: FakeOpenAI
) -> None:
    recall = ControlledRecall()
    hook = MemoryPrefetchHook(recall)
    session = await make_session(hook)
    second_tool = threading.Event()
    fake.script(read_readme(), read_readme(gate=second_tool), Reply("done"))

    query = asyncio.create_task(ask(session, "read it twice"))
    await asyncio.to_thread(fake.wait_for_requests, 2)
    assert not recall.calls[0].finished.is_set()  # still running after one ToolResult turn
    recall.calls[0].release.set()
    await recall.calls[0].finished.wait()
    second_tool.set()
    await query

    requests = [r["messages"] for r in fake.chat_requests]
    assert [reminder_indexes(r) for r in requests] == [[], [], [6]]
    assert [m["role"] for m in requests[2]] == [
        "system", "user", "assistant", "tool", "assistant", "tool", "user"
    ]
    assert not recall.calls[0].cancelled


async def test_a_delivered_tool_result_block_stays_after_its_tool_results(
    make_session, fake: FakeOpenAI
) -> None:
    recall = ControlledRecall()
    hook = MemoryPrefetchHook(recall)
    session = await make_session(hook)
    tool_reply = threading.Event()
    fake.script(read_readme(gate=tool_reply), read_readme(), Reply("done"))

    query = asyncio.create_task(ask(session, "read it twice"))
    await asyncio.to_thread(fake.wait_for_requests, 1)
    recall.calls[0].release.set()
    await recall.calls[0].finished.wait()
    tool_reply.set()
    await query

    third = fake.chat_requests[2]["messages"]
    assert [m["role"] for m in third] == [
        "system", "user", "assistant", "tool", "user", "assistant", "tool"
    ]
    assert reminder_indexes(third) == [4]


async def test_cancelling_the_query_cancels_the_recall(make_session, fake: FakeOpenAI) -> None:
    recall = ControlledRecall()
    hook = MemoryPrefetchHook(recall)
    session = await make_session(hook)
    fake.script(Reply("never sent", gate=threading.Event()))

    query = asyncio.create_task(ask(session, "hello"))
    await asyncio.to_thread(fake.wait_for_requests, 1)
    query.cancel()
    with pytest.raises(asyncio.CancelledError):
        await query

    await recall.calls[0].finished.wait()
    assert recall.calls[0].cancelled
    assert hook.handle is None


async def test_a_new_query_aborts_the_previous_recall(make_session, fake: FakeOpenAI) -> None:
    recall = ControlledRecall()
    hook = MemoryPrefetchHook(recall)
    session = await make_session(hook)

    await hook.on_query_start(session, "first")
    first = hook.handle
    await recall.call_number(1)
    await hook.on_query_start(session, "second")
    await recall.calls[0].finished.wait()

    assert recall.calls[0].cancelled
    assert first is not hook.handle and hook.handle is not None
    assert hook.handle.text == "second"
    await hook.on_close(session)
    await recall.calls[1].finished.wait()
    assert recall.calls[1].cancelled

    fake.script(Reply("a"), Reply("b"))
    await ask(session, "third")
    await ask(session, "fourth")
    assert [c.text for c in recall.calls[2:]] == ["third", "fourth"]
    assert recall.calls[2].cancelled


async def test_clear_aborts_the_recall_and_forgets_what_surfaced(
    make_session, fake: FakeOpenAI
) -> None:
    recall = ControlledRecall(gated=False)
    hook = MemoryPrefetchHook(recall)
    recall_first = RecallFirst(recall)
    session = await make_session(recall_first, hook)
    fake.script(Reply("vim"), Reply("ok"))
    await ask(session, "what is my editor?")
    assert hook.surfaced == {1, 2}

    recall.gated = True
    for started in (recall_first, hook):  # a query starting, as the loop would
        await started.on_query_start(session, "pending")
    await recall.call_number(2)
    await session.reset()
    await recall.calls[1].finished.wait()
    assert recall.calls[1].cancelled
    assert hook.surfaced == set()

    recall.gated = False
    await ask(session, "after clear")
    assert recall.calls[2].excluded == frozenset()
    after = fake.chat_requests[1]["messages"]
    assert [m["role"] for m in after] == ["system", "user"]
    assert "memory [4] for after clear" in after[1]["content"]


async def test_turn_cap_aborts_the_recall(make_session, fake: FakeOpenAI, settings) -> None:
    capped = settings.model_copy(update={"llm": settings.llm.model_copy(update={"max_turns": 1})})
    recall = ControlledRecall()
    hook = MemoryPrefetchHook(recall)
    session = await make_session(hook, settings=capped)
    fake.script(read_readme())

    assert (await ask(session, "loop")).status == "turn_cap"
    await recall.calls[0].finished.wait()
    assert recall.calls[0].cancelled


async def test_context_limit_error_aborts_the_recall(make_session, fake: FakeOpenAI) -> None:
    recall = ControlledRecall()
    hook = MemoryPrefetchHook(recall)
    session = await make_session(hook)
    fake.script(
        HTTPError(
            400,
            {"error": {"message": "maximum context length exceeded", "code": "context_length_exceeded"}},
        )
    )

    assert (await ask(session, "huge")).status == "context_limit"
    await recall.calls[0].finished.wait()
    assert recall.calls[0].cancelled


async def test_disabled_recall_is_never_called_and_the_request_is_unchanged(
    make_session, fake: FakeOpenAI
) -> None:
    recall = ControlledRecall(gated=False)
    session = await make_session(MemoryPrefetchHook(recall, enabled=False))
    fake.script(Reply("hi"))

    await ask(session, "hello")

    assert recall.calls == []
    assert fake.chat_requests[0]["messages"][1:] == [{"role": "user", "content": "hello"}]


async def test_a_failing_recall_leaves_the_request_unchanged(
    make_session, fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    recall = ControlledRecall(gated=False, error=RuntimeError("index on fire"))
    hook = MemoryPrefetchHook(recall)
    session = await make_session(RecallFirst(recall), hook)
    fake.script(Reply("hi"))

    with caplog.at_level(logging.WARNING, logger="qwenmem.memory"):
        assert (await ask(session, "hello")).status == "ok"

    assert fake.chat_requests[0]["messages"][1:] == [{"role": "user", "content": "hello"}]
    assert hook.stats.failed == 1
    assert any("index on fire" in r.getMessage() for r in caplog.records)


async def test_a_recall_settling_after_a_tool_less_request_left_is_counted_late(
    make_session, fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 39: the message went without its memory; the log and the stats say so."""
    recall = ControlledRecall()
    deliveries: list[str] = []

    async def record_delivery(point: str) -> None:
        deliveries.append(point)

    hook = MemoryPrefetchHook(recall, record_delivery=record_delivery)
    session = await make_session(hook)
    reply = threading.Event()
    fake.script(Reply("no tools needed", gate=reply))

    with caplog.at_level(logging.INFO, logger="qwenmem.memory"):
        query = asyncio.create_task(ask(session, "hello"))
        await asyncio.to_thread(fake.wait_for_requests, 1)
        recall.calls[0].release.set()
        await recall.calls[0].finished.wait()
        reply.set()
        await query
        await hook.on_close(session)

    assert hook.stats.late == 1
    assert deliveries == [LATE]
    assert any(
        "late: recall settled" in r.getMessage() and "reason=no_tool_call" in r.getMessage()
        for r in caplog.records
    )


async def test_a_recall_still_running_when_a_tool_less_reply_ends_is_counted_late(
    make_session, fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    recall = ControlledRecall()  # never released
    deliveries: list[str] = []

    async def record_delivery(point: str) -> None:
        deliveries.append(point)

    hook = MemoryPrefetchHook(recall, record_delivery=record_delivery)
    session = await make_session(hook)
    fake.script(Reply("no tools needed"))
    with caplog.at_level(logging.INFO, logger="qwenmem.memory"):
        await ask(session, "hello")
        await hook.on_close(session)
    assert recall.calls[0].cancelled
    assert (hook.stats.late, deliveries) == (1, [LATE])
    assert any("late: recall still running" in r.getMessage() for r in caplog.records)


async def test_a_session_of_an_api_face_waits_for_recall_up_to_api_wait_ms(
    make_session, fake: FakeOpenAI
) -> None:
    """Issue 39: a face with no typing phase (`interactive` False) waits; the TUI's
    (`interactive` True) never does, whatever `api_wait_ms` says."""
    recall = ControlledRecall()
    hook = MemoryPrefetchHook(recall, api_wait_ms=60_000)
    api = await make_session(hook)
    fake.script(Reply("hi"), Reply("hi"))
    query = asyncio.create_task(ask(api, "what is my editor?"))
    call = await recall.call_number(1)
    call.release.set()  # released only now: a request that did not wait went without it
    await query
    assert reminder_indexes(fake.chat_requests[0]["messages"]) == [1]
    assert hook.stats.deliveries[INITIAL] == 1

    typed = ControlledRecall()
    tui_hook = MemoryPrefetchHook(typed, api_wait_ms=60_000)
    tui = await make_session(tui_hook, interactive=True)
    await ask(tui, "what is my editor?")  # never released: it must not wait
    assert reminder_indexes(fake.chat_requests[1]["messages"]) == []


async def test_a_failed_request_delivered_nothing_a_receipt_may_claim(
    make_session, fake: FakeOpenAI
) -> None:
    """Issue 39: the memories were in the request, but no model answered it."""
    recall = ControlledRecall(gated=False)
    hook = MemoryPrefetchHook(recall, initial_wait_ms=60_000)
    session = await make_session(hook)
    fake.script(HTTPError(500, {"error": {"message": "down", "type": "server_error"}}))
    assert (await ask(session, "what is my editor?")).status == "error"
    assert REMINDER in json.dumps(fake.chat_requests[0]["messages"])
    assert hook.sent_memories() == []


async def test_a_query_cancelled_mid_reply_claims_only_what_answered_requests_carried(
    make_session, fake: FakeOpenAI
) -> None:
    recall = ControlledRecall()
    hook = MemoryPrefetchHook(recall)
    session = await make_session(hook)
    tool_reply, hang = threading.Event(), threading.Event()
    fake.script(read_readme(gate=tool_reply), Reply("never", gate=hang))
    query = asyncio.create_task(ask(session, "summarise the readme"))
    await asyncio.to_thread(fake.wait_for_requests, 1)
    recall.calls[0].release.set()
    await recall.calls[0].finished.wait()
    tool_reply.set()
    await asyncio.to_thread(fake.wait_for_requests, 2)  # carries [1, 2] after the tool result
    assert reminder_indexes(fake.chat_requests[1]["messages"]) == [4]
    session.cancel()
    try:
        assert (await query).status == "cancelled"
    finally:
        hang.set()
    assert hook.sent_memories() == []


async def test_initial_wait_lets_a_recall_about_to_settle_reach_the_user_query(
    make_session, fake: FakeOpenAI
) -> None:
    recall = ControlledRecall(gated=False)
    hook = MemoryPrefetchHook(recall, initial_wait_ms=60_000)
    session = await make_session(hook)
    fake.script(Reply("hi"))

    await ask(session, "what is my editor?")

    assert reminder_indexes(fake.chat_requests[0]["messages"]) == [1]
    assert hook.stats.deliveries[INITIAL] == 1


async def test_slow_embeddings_endpoint_memory_arrives_with_the_tool_result(
    make_session, fake: FakeOpenAI, llm: LLMClient, tmp_path: Path
) -> None:
    """Issue 5's "done when", with a gate standing in for a 3 s embeddings endpoint."""
    memory_settings = Settings(
        llm=LLMSettings(base_url=fake.base_url, model="test-model"),
        memory=MemorySettings(
            embedding="openai", embedding_base_url=fake.base_url, min_score=-1.0
        ),
    )
    paths = Paths(tmp_path / "home")
    paths.ensure()
    service = await MemoryService.open(memory_settings, paths, llm=llm)
    try:
        await service.save(
            WriteRequest(
                "project", "api_port", "The API listens on port 8443.", origin="user", project="p"
            )
        )
        hook = MemoryPrefetchHook(
            ProjectRecall.of(service, "p").recall, record_delivery=service.record_delivery
        )
        session = await make_session(hook)
        embeddings, tool_reply = threading.Event(), threading.Event()
        fake.embedding_gate = embeddings
        fake.script(read_readme(gate=tool_reply), Reply("port 8443"))

        query = asyncio.create_task(ask(session, "which port does the API use?"))
        await asyncio.to_thread(fake.wait_for_requests, 1)
        assert reminder_indexes(fake.chat_requests[0]["messages"]) == []
        embeddings.set()
        assert hook.handle is not None and hook.handle.task is not None
        await asyncio.wait({hook.handle.task})
        tool_reply.set()
        await query
        await hook.on_close(session)

        second = fake.chat_requests[1]["messages"]
        assert [m["role"] for m in second] == ["system", "user", "assistant", "tool", "user"]
        assert "The API listens on port 8443." in second[4]["content"]
        assert (await service.stats()).deliveries == {TOOL_RESULT: 1}
    finally:
        await service.close()


async def test_a_query_in_another_session_starts_with_nothing_surfaced(
    make_session, fake: FakeOpenAI
) -> None:
    recall = ControlledRecall(gated=False)
    hook = MemoryPrefetchHook(recall)
    recall_first = RecallFirst(recall)
    first = await make_session(recall_first, hook)
    second = await make_session(recall_first, hook)  # what /resume does with the hooks
    fake.script(Reply("vim"), Reply("ok"))

    await ask(first, "what is my editor?")
    await ask(second, "what is my editor?")

    assert [c.excluded for c in recall.calls] == [frozenset(), frozenset()]
    assert reminder_indexes(fake.chat_requests[1]["messages"]) == [1]


# --- warming while the user types ------------------------------------------------------


class Recorded:
    """MemoryPrefetchHook's record_recall: the recalls counted as chat-turn recalls."""

    def __init__(self) -> None:
        self.results: list[RecallResult] = []

    async def __call__(self, result: RecallResult) -> None:
        self.results.append(result)


async def test_a_recall_warmed_while_typing_reaches_the_first_request(
    make_session, fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    recall, recorded = ControlledRecall(gated=False), Recorded()
    hook = MemoryPrefetchHook(recall, record_recall=recorded)  # initial_wait_ms=0
    session = await make_session(hook)
    fake.script(Reply("vim"))

    hook.warm(session, "what is my editor?  ")
    await (await recall.call_number(1)).finished.wait()
    assert recorded.results == []  # typed, not sent: not a chat-turn recall yet
    with caplog.at_level(logging.INFO, logger="qwenmem.memory"):
        assert (await ask(session, "what is my editor?\n")).status == "ok"
    await hook.on_close(session)

    assert [(c.text, c.record) for c in recall.calls] == [("what is my editor?", False)]
    sent = fake.chat_requests[0]["messages"]
    assert reminder_indexes(sent) == [len(sent) - 1]
    assert sent[-1]["content"].endswith("</system-reminder>\n\nwhat is my editor?\n")
    assert hook.stats.deliveries[INITIAL] == 1
    assert (hook.stats.warm_adopted, hook.stats.warm_missed) == (1, 0)
    assert [r.ids for r in recorded.results] == [[1, 2]]  # counted once, when adopted
    assert any("point=initial strategy=warm" in r.getMessage() for r in caplog.records)


async def test_an_adopted_recall_still_running_is_the_query_s_recall(
    make_session, fake: FakeOpenAI
) -> None:
    recall, recorded = ControlledRecall(), Recorded()
    hook = MemoryPrefetchHook(recall, record_recall=recorded)
    session = await make_session(hook)
    tool_reply = threading.Event()
    fake.script(read_readme(gate=tool_reply), Reply("done"))

    hook.warm(session, "summarise the readme")
    await recall.call_number(1)
    query = asyncio.create_task(ask(session, "summarise the readme"))
    await asyncio.to_thread(fake.wait_for_requests, 1)
    recall.calls[0].release.set()
    await recall.calls[0].finished.wait()
    tool_reply.set()
    await query
    await hook.on_close(session)

    assert len(recall.calls) == 1
    first, second = (r["messages"] for r in fake.chat_requests)
    assert reminder_indexes(first) == []
    assert reminder_indexes(second) == [4]
    assert hook.stats.deliveries[TOOL_RESULT] == 1
    assert len(recorded.results) == 1


async def test_cancelling_the_query_cancels_an_adopted_warm_recall(
    make_session, fake: FakeOpenAI
) -> None:
    recall = ControlledRecall()
    hook = MemoryPrefetchHook(recall)
    session = await make_session(hook)
    fake.script(Reply("never sent", gate=threading.Event()))

    hook.warm(session, "hello")
    await recall.call_number(1)
    query = asyncio.create_task(ask(session, "hello"))
    await asyncio.to_thread(fake.wait_for_requests, 1)
    query.cancel()
    with pytest.raises(asyncio.CancelledError):
        await query

    await recall.calls[0].finished.wait()
    assert recall.calls[0].cancelled and len(recall.calls) == 1


async def test_sending_other_text_cancels_the_warm_recall(make_session, fake: FakeOpenAI) -> None:
    recall, recorded = ControlledRecall(), Recorded()
    hook = MemoryPrefetchHook(recall, record_recall=recorded)
    session = await make_session(hook)
    fake.script(Reply("vim"))

    hook.warm(session, "what is my")
    await recall.call_number(1)
    await ask(session, "what is my editor?")
    await hook.on_close(session)

    assert recall.calls[0].cancelled
    assert [(c.text, c.record) for c in recall.calls] == [
        ("what is my", False),
        ("what is my editor?", True),  # a fresh recall, counted as it runs
    ]
    assert (hook.stats.warm_adopted, hook.stats.warm_missed) == (0, 1)
    assert recorded.results == []


async def test_a_new_warm_recall_replaces_the_previous_one(make_session) -> None:
    recall = ControlledRecall()
    hook = MemoryPrefetchHook(recall)
    session = await make_session(hook)

    hook.warm(session, "what is")
    await recall.call_number(1)
    hook.warm(session, "what is my editor?")
    await recall.calls[0].finished.wait()

    assert recall.calls[0].cancelled
    assert hook.warm_handle is not None and hook.warm_handle.text == "what is my editor?"
    await hook.on_close(session)
    await recall.calls[1].finished.wait()
    assert recall.calls[1].cancelled and hook.warm_handle is None


async def test_clear_cancels_the_warm_recall(make_session) -> None:
    recall = ControlledRecall()
    hook = MemoryPrefetchHook(recall)
    session = await make_session(hook)

    hook.warm(session, "what is my editor?")
    await recall.call_number(1)
    await session.reset()
    await recall.calls[0].finished.wait()

    assert recall.calls[0].cancelled
    assert hook.warm_handle is None


async def test_a_recall_warmed_in_another_session_is_not_adopted(
    make_session, fake: FakeOpenAI
) -> None:
    recall = ControlledRecall()
    hook = MemoryPrefetchHook(recall)
    first = await make_session(hook)
    second = await make_session(hook)  # what /resume does with the hooks
    fake.script(Reply("hi"))

    hook.warm(first, "hello")
    (await recall.call_number(1)).release.set()
    await recall.calls[0].finished.wait()
    await ask(second, "hello")

    assert [c.text for c in recall.calls] == ["hello", "hello"]
    assert reminder_indexes(fake.chat_requests[0]["messages"]) == []  # the fresh one is gated
    assert (hook.stats.warm_adopted, hook.stats.warm_missed) == (0, 1)


async def test_a_recall_warmed_before_a_memory_came_into_view_is_adopted_without_it(
    make_session, fake: FakeOpenAI
) -> None:
    """Typed as a reply ends: warmed before that reply's memories were in view. The
    query adopts it (no second recall) and leaves out what is in view by now."""
    recall = ControlledRecall()
    recall.ids = [[1, 2], [3, 4], [5]]
    hook = MemoryPrefetchHook(recall)
    session = await make_session(hook)
    fake.script(Reply("vim"), Reply("zsh"))
    await ask(session, "what is my editor?")  # its recall never settles: nothing surfaced

    hook.warm(session, "and my shell?")
    (await recall.call_number(2)).release.set()
    await recall.calls[1].finished.wait()
    hook.surfaced.add(3)  # came into view since the warm recall ran
    await ask(session, "and my shell?")

    assert len(recall.calls) == 2
    assert (hook.stats.warm_adopted, hook.stats.warm_missed) == (1, 0)
    assert [s.id for s in hook.sent_memories()] == [4]
    sent = json.dumps(fake.chat_requests[1]["messages"])
    assert "note_4" in sent and "note_3" not in sent  # its block rendered without 3


async def test_a_recall_warmed_before_a_memory_left_the_view_is_not_adopted(
    make_session, fake: FakeOpenAI
) -> None:
    """It excluded a memory the query may find again: recall runs afresh."""
    recall = ControlledRecall()
    hook = MemoryPrefetchHook(recall)
    session = await make_session(hook)
    fake.script(Reply("vim"), Reply("zsh"))
    await ask(session, "what is my editor?")
    hook.surfaced.add(9)
    hook.warm(session, "and my shell?")
    (await recall.call_number(2)).release.set()
    await recall.calls[1].finished.wait()
    hook.surfaced.discard(9)  # left the view (superseded, compacted away)
    await ask(session, "and my shell?")

    assert [(c.text, c.excluded) for c in recall.calls[1:]] == [
        ("and my shell?", frozenset({9})),
        ("and my shell?", frozenset()),
    ]
    assert (hook.stats.warm_adopted, hook.stats.warm_missed) == (0, 1)


# --- live truth: every request from the current state (issue 14) ------------------------

PROJECT = "/work/live-project"
WRITER = """
import asyncio, sys
from pathlib import Path
from qwenmem_tui.config import Settings
from qwenmem_tui.memory.model import WriteRequest
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths

async def main(home, action, arg):
    settings = Settings.model_validate({"general": {"user": "ana"}})
    svc = await MemoryService.open(settings, Paths(Path(home)))
    if action == "save":
        await svc.save(WriteRequest("project", "deploy_target", arg, origin="user", project=sys.argv[4]))
    else:
        assert await svc.forget(int(arg)) is not None
    await svc.close()

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
"""


@pytest.fixture
def live_clock() -> Clock:
    return Clock()


@pytest.fixture
async def live_service(tmp_path: Path, live_clock: Clock) -> AsyncIterator[MemoryService]:
    paths = Paths(tmp_path / "home")
    paths.ensure()
    svc = await MemoryService.open(make_settings(min_score=-1.0), paths, clock=live_clock)
    yield svc
    await svc.close()


class LiveSpy:
    """ProjectRecall.live, recording each answer (None: nothing changed)."""

    def __init__(self, service: MemoryService) -> None:
        self.service = service
        self.answers: list[object] = []

    async def __call__(self, groups: list[tuple[int, ...]], since: object) -> object:
        answer = await self.service.live(groups, since, project=PROJECT)  # type: ignore[arg-type]
        self.answers.append(answer)
        return answer


def live_hook(service: MemoryService) -> tuple[MemoryPrefetchHook, LiveSpy]:
    spy = LiveSpy(service)
    recall = ProjectRecall.of(service, PROJECT).recall
    hook = MemoryPrefetchHook(recall, live=spy, initial_wait_ms=10_000)
    return hook, spy


async def live_session(
    make_session, fake: FakeOpenAI, service: MemoryService, replies: int
) -> tuple[MemoryPrefetchHook, LiveSpy, ChatSession]:
    """A session with the live prefetch hook, and `replies` plain answers scripted."""
    hook, spy = live_hook(service)
    fake.script(*[Reply("noted")] * replies)
    return hook, spy, await make_session(hook)


def sent(fake: FakeOpenAI, n: int = -1) -> str:
    return json.dumps(fake.chat_requests[n]["messages"], ensure_ascii=False)


async def deploy(service: MemoryService, where: str) -> int:
    result = await service.save(
        WriteRequest(
            "project", "deploy_target", f"Deploys go to {where}", origin="user", project=PROJECT
        )
    )
    return result.memory.id


async def test_a_memory_superseded_in_this_process_is_replaced_in_the_next_request(
    make_session, fake: FakeOpenAI, live_service: MemoryService
) -> None:
    staging = await deploy(live_service, "staging")
    hook, spy, session = await live_session(make_session, fake, live_service, 3)

    await ask(session, "where do we deploy?")
    assert "Deploys go to staging" in sent(fake) and hook.surfaced == {staging}
    await ask(session, "and the region?")
    first_block = fake.chat_requests[0]["messages"][1]["content"]
    # Nothing changed: the block goes out byte for byte, after one generation read.
    assert fake.chat_requests[1]["messages"][1]["content"] == first_block
    assert spy.answers[-1] is None

    prod = await deploy(live_service, "prod")
    await ask(session, "ok, thanks")
    assert "staging" not in sent(fake)
    assert sent(fake).count("Deploys go to prod") == 1  # in view once, where staging was
    assert REMINDER in fake.chat_requests[2]["messages"][1]["content"]
    assert hook.surfaced == {prod}


async def test_a_forgotten_memory_leaves_the_next_request(
    make_session, fake: FakeOpenAI, live_service: MemoryService
) -> None:
    staging = await deploy(live_service, "staging")
    hook, _, session = await live_session(make_session, fake, live_service, 2)

    await ask(session, "where do we deploy?")
    assert "staging" in sent(fake)
    await live_service.forget(staging)
    await ask(session, "and the region?")

    assert "staging" not in sent(fake) and REMINDER not in sent(fake)
    assert hook.surfaced == set()
    assert hook._why == {}  # issue 41's soak: no reason kept for what left the view


async def test_a_delivered_memory_that_expires_leaves_without_any_write(
    make_session, fake: FakeOpenAI, live_service: MemoryService, live_clock: Clock
) -> None:
    await live_service.save(
        WriteRequest(
            "reference", "dashboard", "Grafana board at grafana.example/d/1", origin="user",
            project=PROJECT, ttl_days=1,
        )
    )
    hook, _, session = await live_session(make_session, fake, live_service, 2)

    await ask(session, "where is the grafana dashboard?")
    assert "grafana.example" in sent(fake)
    live_clock.advance(2 * 86400)  # no sweep, no generation bump: the expiry itself counts
    await ask(session, "thanks")
    assert "grafana.example" not in sent(fake) and hook.surfaced == set()


async def test_another_service_on_the_same_database_changes_the_running_session(
    make_session, fake: FakeOpenAI, live_service: MemoryService, tmp_path: Path, live_clock: Clock
) -> None:
    await deploy(live_service, "staging")
    hook, _, session = await live_session(make_session, fake, live_service, 2)
    await ask(session, "where do we deploy?")

    other = await MemoryService.open(
        make_settings(min_score=-1.0), Paths(tmp_path / "home"), clock=live_clock
    )
    try:
        prod = await deploy(other, "prod")
    finally:
        await other.close()
    await ask(session, "and now?")
    assert "staging" not in sent(fake) and "Deploys go to prod" in sent(fake)
    assert hook.surfaced == {prod}


async def test_another_process_superseding_then_forgetting_reaches_the_running_session(
    make_session, fake: FakeOpenAI, live_service: MemoryService, tmp_path: Path
) -> None:
    await deploy(live_service, "staging")
    hook, _, session = await live_session(make_session, fake, live_service, 3)
    await ask(session, "where do we deploy?")

    def other_process(*args: str) -> None:
        done = subprocess.run(
            [sys.executable, "-c", WRITER, str(tmp_path / "home"), *args],
            capture_output=True, text=True, timeout=120, check=False,
        )
        assert done.returncode == 0, done.stderr

    await asyncio.to_thread(other_process, "save", "Deploys go to prod", PROJECT)
    await ask(session, "and now?")
    assert "staging" not in sent(fake) and "Deploys go to prod" in sent(fake)
    [prod] = hook.surfaced

    await asyncio.to_thread(other_process, "forget", str(prod), PROJECT)
    await ask(session, "and after that?")
    assert "Deploys go to" not in sent(fake) and hook.surfaced == set()


async def test_a_successor_recalled_again_is_shown_once(
    make_session, fake: FakeOpenAI, live_service: MemoryService
) -> None:
    """The next query's recall ran before the refresh and found the successor too."""
    await deploy(live_service, "staging")
    hook, _, session = await live_session(make_session, fake, live_service, 2)
    await ask(session, "where do we deploy?")
    await deploy(live_service, "prod")
    await ask(session, "where do we deploy now?")  # recall excludes staging, finds prod
    assert sent(fake).count("Deploys go to prod") == 1 and "staging" not in sent(fake)


async def test_what_each_query_carried_is_kept_for_its_receipt(
    make_session, fake: FakeOpenAI
) -> None:
    """Issue 29: `sent_memories` names every memory a query's requests carried — here
    recalled late, so sent after the tool result — and the next query lists them as
    re-sent (in view)."""
    recall = ControlledRecall()
    hook = MemoryPrefetchHook(recall)
    session = await make_session(hook)
    tool_reply = threading.Event()
    fake.script(read_readme(gate=tool_reply), Reply("done"), Reply("again"), Reply("third"))

    query = asyncio.create_task(ask(session, "summarise the readme"))
    await asyncio.to_thread(fake.wait_for_requests, 1)
    recall.calls[0].release.set()
    await recall.calls[0].finished.wait()
    tool_reply.set()
    assert (await query).status == "ok"
    assert [(s.id, s.point) for s in hook.sent_memories()] == [(1, TOOL_RESULT), (2, TOOL_RESULT)]

    second = asyncio.create_task(ask(session, "and the tests?"))
    await asyncio.sleep(0)
    for call in recall.calls[1:]:
        call.release.set()
    assert (await second).status == "ok"
    assert [(s.id, s.point) for s in hook.sent_memories()] == [(1, IN_VIEW), (2, IN_VIEW)]


class SmallTalkAfterAQuestion:
    """Recall answering the first message with memories 1 and 2, the second — once
    released — as small talk (nothing for it)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.first = asyncio.Event()
        self.settled = asyncio.Event()
        self.calls = 0

    async def __call__(self, text: str, excluded: frozenset[int], *, record: bool = True) -> RecallResult:
        self.calls += 1
        if self.calls == 1:
            self.first.set()
            return RecallResult(block=f"{REMINDER}\nmemory [1, 2]\n</system-reminder>", ids=[1, 2],
                                memories=[note(1), note(2)], scores=[])  # fmt: skip
        await self.release.wait()
        self.settled.set()
        return replace(RecallResult.empty(), small_talk=True)


class FirstRecallFirst(BaseQueryHook):
    """The first message's request waits for its recall (delivered with it)."""

    def __init__(self, recall: SmallTalkAfterAQuestion) -> None:
        self.recall = recall

    async def before_request(self, session: ChatSession, kind: TurnKind, messages: list[dict]) -> list[dict]:
        if self.recall.calls == 1:
            await self.recall.first.wait()
        return messages


@pytest.mark.parametrize("settles", ["after the request left", "after the reply"])
async def test_small_talk_whose_recall_settles_late_claims_nothing_in_view(
    settles: str, make_session, fake: FakeOpenAI
) -> None:
    """Issue 39 in a real terminal: "thanks!" sent at once after its last key leaves
    before its recall has read it as small talk; the reply (no tools) ends with the
    question's memories in view. The receipt waits for that reading — briefly, the
    reply is already shown — and lists nothing; it listed memories 1 and 2 again."""
    recall = SmallTalkAfterAQuestion()
    hook = MemoryPrefetchHook(recall)
    session = await make_session(FirstRecallFirst(recall), hook)
    reply = threading.Event()
    fake.script(Reply("Lisbon."), Reply("You're welcome!", gate=reply))
    await ask(session, "where do I live?")
    assert [s.id for s in hook.sent_memories()] == [1, 2]

    thanks = asyncio.create_task(ask(session, "thanks!"))
    await asyncio.to_thread(fake.wait_for_requests, 2)
    if settles == "after the request left":
        recall.release.set()
        await recall.settled.wait()
        reply.set()
    else:
        reply.set()
        await asyncio.sleep(0)  # the reply ends while its recall still runs
        recall.release.set()
    assert (await thanks).status == "ok"
    assert hook.sent_memories() == []
