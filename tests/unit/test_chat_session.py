"""The chat loop through the real LLMClient and SDK against the fake server, real SQLite."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from chat_support import (
    CHAT_MODEL,
    TEST_API_KEY,
    SessionFactory,
    chat_llm,
    collect,
    outcome_of,
    session_parts,
)

from qwenmem_tui.chat.events import (
    AssistantDelta,
    ChatEvent,
    ItemAdded,
    Notice,
    QueryStarted,
    ReasoningDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnStarted,
)
from qwenmem_tui.chat.session import (
    CANCELLED_TOOL_RESULT,
    TOOL_RESULT_MAX_CHARS,
    BaseQueryHook,
    ChatSession,
)
from qwenmem_tui.chat.tools import Tool, ToolContext, ToolRegistry, builtin_tools
from qwenmem_tui.chat.turns import QueryOutcome, TurnKind
from qwenmem_tui.chat.view import complete_tool_exchanges
from qwenmem_tui.config import Settings
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.storage import Database, Item, SessionStore
from qwenmem_tui.testing.fake_openai import FakeOpenAI, HTTPError, Reply, ToolCallSpec


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "README.md").write_text("# Demo project\n")
    return root


@pytest.fixture
def settings(fake: FakeOpenAI) -> Settings:
    return Settings(llm=chat_llm(fake.base_url))


def roles(messages: list[dict]) -> list[str]:
    return [m["role"] for m in messages]


class RecordingHook(BaseQueryHook):
    def __init__(self, store: SessionStore | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.store = store

    async def on_query_start(self, session: ChatSession, text: str) -> None:
        stored = await self.store.load_items(session.info.id) if self.store else []
        self.calls.append(("start", text, [i.type for i in stored]))

    async def before_request(
        self, session: ChatSession, kind: TurnKind, messages: list[dict]
    ) -> list[dict]:
        self.calls.append(("before", kind, roles(messages)))
        return messages

    async def on_query_end(self, session: ChatSession, outcome: QueryOutcome) -> None:
        self.calls.append(("end", outcome.status))

    async def on_reset(self, session: ChatSession) -> None:
        self.calls.append(("reset",))

    async def on_close(self, session: ChatSession) -> None:
        self.calls.append(("close",))


# -- streaming and tools ---------------------------------------------------------------


async def test_streamed_reply_is_yielded_and_committed(
    fake: FakeOpenAI, make_session: SessionFactory, session_store: SessionStore
) -> None:
    # The rest of the reply is sent once the first text has reached us: what arrives
    # apart is yielded apart (what arrives together, together: test_llm_client).
    rest = threading.Event()
    fake.script(
        Reply(
            "hello **world**, how are you?",
            reasoning="think",
            chunk_size=4,
            stall_after=3,
            stall_gate=rest,
        )
    )
    session = await make_session()
    events: list[ChatEvent] = []
    async for event in session.run_query("Hi there\nsecond line"):
        events.append(event)
        if isinstance(event, AssistantDelta):
            rest.set()

    assert isinstance(events[0], QueryStarted)
    assert isinstance(events[1], ItemAdded) and events[1].item.type == "user"
    assert events[2] == TurnStarted(TurnKind.USER_QUERY, 0)
    deltas = [e.text for e in events if isinstance(e, AssistantDelta)]
    assert len(deltas) > 1 and "".join(deltas) == "hello **world**, how are you?"
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "think"
    assert outcome_of(events) == QueryOutcome("ok", None, False, [])
    assert not session.busy

    request = fake.chat_requests[0]
    assert roles(request["messages"]) == ["system", "user"]
    assert request["messages"][1]["content"] == "Hi there\nsecond line"
    assert {t["function"]["name"] for t in request["tools"]} == {"read_file", "list_directory"}

    stored = await session_store.load_items(session.info.id)
    assert [i.type for i in stored] == ["user", "assistant"]
    assert stored[1].message == {
        "role": "assistant",
        "content": "hello **world**, how are you?",
        "reasoning_content": "think",
    }
    assert stored == session.items
    # Stored, but never sent back to the model.
    assert session.history()[-1] == {"role": "assistant", "content": "hello **world**, how are you?"}
    info = await session_store.get_session(session.info.id)
    assert info.title == "Hi there" == session.info.title
    assert info.message_count == 2 == session.info.message_count
    assert session.last_usage is not None and session.last_usage.prompt_tokens > 0


async def test_tool_round_trip(
    fake: FakeOpenAI, make_session: SessionFactory, session_store: SessionStore
) -> None:
    fake.script(
        Reply(
            "Let me look.",
            tool_calls=[
                ToolCallSpec("read_file", {"path": "README.md"}, id="call_a"),
                ToolCallSpec("list_directory", {"path": "/etc"}, id="call_b"),
            ],
        ),
        Reply("It is a demo."),
    )
    hook = RecordingHook()
    session = await make_session(hooks=[hook])
    events = await collect(session, "What is this project?")

    started = [e.call.name for e in events if isinstance(e, ToolCallStarted)]
    finished = [(e.call.id, e.result, e.is_error) for e in events if isinstance(e, ToolCallFinished)]
    assert started == ["read_file", "list_directory"]
    assert finished[0] == ("call_a", "# Demo project\n", False)
    assert finished[1][0] == "call_b" and finished[1][2] and "outside" in finished[1][1]
    assert [e.kind for e in events if isinstance(e, TurnStarted)] == [
        TurnKind.USER_QUERY,
        TurnKind.TOOL_RESULT,
    ]
    assert outcome_of(events) == QueryOutcome("ok", None, True, ["read_file", "list_directory"])

    second = fake.chat_requests[1]["messages"]
    assert roles(second) == ["system", "user", "assistant", "tool", "tool"]
    assert [c["id"] for c in second[2]["tool_calls"]] == ["call_a", "call_b"]
    assert [m["tool_call_id"] for m in second[3:]] == ["call_a", "call_b"]
    assert second[3]["content"] == "# Demo project\n"

    stored = await session_store.load_items(session.info.id)
    assert [i.type for i in stored] == ["user", "assistant", "tool", "tool", "assistant"]
    assert stored[2].meta == {"tool_name": "read_file", "arguments": '{"path": "README.md"}', "is_error": False}
    assert stored[3].meta["is_error"] is True
    assert hook.calls == [
        ("start", "What is this project?", []),
        ("before", TurnKind.USER_QUERY, ["system", "user"]),
        ("before", TurnKind.TOOL_RESULT, ["system", "user", "assistant", "tool", "tool"]),
        ("end", "ok"),
    ]


async def test_hooks_start_before_the_user_message_is_committed_and_shape_the_request(
    fake: FakeOpenAI, make_session: SessionFactory, session_store: SessionStore
) -> None:
    class Reminder(RecordingHook):
        async def before_request(
            self, session: ChatSession, kind: TurnKind, messages: list[dict]
        ) -> list[dict]:
            await super().before_request(session, kind, messages)
            await session.notify("memory ready", "warning")
            last = messages[-1]
            messages[-1] = {**last, "content": f"<system-reminder>m</system-reminder>\n{last['content']}"}
            return messages

    hook = Reminder(session_store)
    session = await make_session(hooks=[hook])
    events = await collect(session, "question")
    # on_query_start runs before the commit so recall overlaps it (issue 5).
    assert hook.calls[0] == ("start", "question", [])
    assert Notice("memory ready", "warning") in events
    sent = fake.chat_requests[0]["messages"][-1]["content"]
    assert sent == "<system-reminder>m</system-reminder>\nquestion"
    # The hook changed the request, not the session's history.
    assert session.history()[1] == {"role": "user", "content": "question"}
    assert (await session_store.load_items(session.info.id))[0].content == "question"


async def test_turn_cap_stops_and_leaves_a_valid_history(
    fake: FakeOpenAI, make_session: SessionFactory, settings: Settings, session_store: SessionStore
) -> None:
    settings.llm.max_turns = 2
    fake.responder = lambda body: Reply(tool_calls=[ToolCallSpec("list_directory", {"path": "."})])
    hook = RecordingHook()
    session = await make_session(hooks=[hook])
    events = await collect(session, "loop forever")

    outcome = outcome_of(events)
    assert outcome.status == "turn_cap" and "2 model turns" in (outcome.error or "")
    assert len(fake.chat_requests) == 2
    assert [c for c in hook.calls if c[0] == "end"] == [("end", "turn_cap")]
    stored = await session_store.load_items(session.info.id)
    assert [i.type for i in stored] == ["user", "assistant", "tool", "assistant", "tool", "info"]
    assert "turn limit" in stored[4].content  # the last call was answered, not run
    assert stored[5].content == outcome.error

    fake.responder = None
    fake.script(Reply("fine"))
    assert outcome_of(await collect(session, "stop")).status == "ok"
    assert roles(fake.chat_requests[2]["messages"]) == [
        "system", "user", "assistant", "tool", "assistant", "tool", "user",
    ]


# -- cancellation ------------------------------------------------------------------------


async def test_cancel_mid_stream_keeps_the_partial_reply(
    fake: FakeOpenAI, make_session: SessionFactory, session_store: SessionStore
) -> None:
    stall = threading.Event()
    fake.script(Reply("0123456789" * 10, chunk_size=5, stall_after=3, stall_gate=stall))
    hook = RecordingHook()
    session = await make_session(hooks=[hook])
    events: list[ChatEvent] = []
    first_delta = asyncio.Event()

    async def consume() -> None:
        async for event in session.run_query("tell me a long story"):
            events.append(event)
            if isinstance(event, AssistantDelta):
                first_delta.set()

    task = asyncio.create_task(consume())
    await first_delta.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stall.set()

    assert outcome_of(events).status == "cancelled"
    assert hook.calls[-1] == ("end", "cancelled")
    assert not session.busy
    partial = "".join(e.text for e in events if isinstance(e, AssistantDelta))
    stored = await session_store.load_items(session.info.id)
    assert [i.type for i in stored] == ["user", "assistant"]
    assert stored[1].meta == {"interrupted": True}
    assert stored[1].content == partial and partial.startswith("01234")
    assert isinstance(events[-2], ItemAdded) and events[-2].item == stored[1]

    fake.script(Reply("ok then"))
    assert outcome_of(await collect(session, "shorter please")).status == "ok"
    assert fake.chat_requests[1]["messages"][1:] == [
        {"role": "user", "content": "tell me a long story"},
        {"role": "assistant", "content": partial},
        {"role": "user", "content": "shorter please"},
    ]


async def test_a_quit_cancelling_again_and_again_still_stores_the_partial_reply(
    fake: FakeOpenAI, make_session: SessionFactory, session_store: SessionStore
) -> None:
    # Quitting cancels the query more than once: the consumer's worker, the relay and
    # the session's close each do. The partial reply must be committed all the same.
    stall = threading.Event()
    fake.script(Reply("0123456789" * 10, chunk_size=5, stall_after=3, stall_gate=stall))
    session = await make_session()
    first_delta = asyncio.Event()
    texts: list[str] = []

    async def consume() -> None:
        async for event in session.run_query("tell me a long story"):
            if isinstance(event, AssistantDelta):
                texts.append(event.text)
                first_delta.set()

    task = asyncio.create_task(consume())
    await first_delta.wait()
    task.cancel()
    while session.cancel():  # every turn of the loop, while the cleanup runs
        await asyncio.sleep(0)
    await session.close()
    stall.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = await session_store.load_items(session.info.id)
    assert [(i.type, i.content, i.meta) for i in stored] == [
        ("user", "tell me a long story", {}),
        ("assistant", "".join(texts), {"interrupted": True}),
    ]
    assert [i.type for i in session.items] == ["user", "assistant"]


async def test_consumer_cancelled_while_busy_elsewhere_still_stops_the_query(
    fake: FakeOpenAI, make_session: SessionFactory, session_store: SessionStore
) -> None:
    """The TUI awaits its own rendering between events; a cancel can land there."""
    stall = threading.Event()
    fake.script(Reply("rendering " * 20, chunk_size=5, stall_after=2, stall_gate=stall))
    ended = asyncio.Event()

    class EndHook(RecordingHook):
        async def on_query_end(self, session: ChatSession, outcome: QueryOutcome) -> None:
            await super().on_query_end(session, outcome)
            ended.set()

    hook = EndHook()
    session = await make_session(hooks=[hook])
    rendering = asyncio.Event()

    async def consume() -> None:
        async for event in session.run_query("q"):
            if isinstance(event, AssistantDelta):
                rendering.set()
                await asyncio.Event().wait()  # stuck rendering, outside the iterator

    task = asyncio.create_task(consume())
    await rendering.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await ended.wait()
    stall.set()
    assert hook.calls[-1] == ("end", "cancelled")
    stored = await session_store.load_items(session.info.id)
    assert [i.type for i in stored] == ["user", "assistant"]
    assert stored[1].meta == {"interrupted": True} and stored[1].content.startswith("rende")


async def test_cancel_while_committing_a_reply_commits_it_exactly_once(
    fake: FakeOpenAI, make_session: SessionFactory, session_store: SessionStore
) -> None:
    class GatedStore(SessionStore):
        """Holds the commit of tool results until the test opens the gate."""

        def __init__(self) -> None:
            super().__init__(session_store.db)
            self.writing = asyncio.Event()
            self.gate = asyncio.Event()

        async def add_item(self, item: Item) -> Item:
            if item.type == "tool":
                self.writing.set()
                await self.gate.wait()
            return await super().add_item(item)

    gated = GatedStore()
    fake.script(Reply(tool_calls=[ToolCallSpec("read_file", {"path": "README.md"})]))
    session = await make_session(store=gated)
    events: list[ChatEvent] = []

    async def consume() -> None:
        async for event in session.run_query("q"):
            events.append(event)

    task = asyncio.create_task(consume())
    await gated.writing.wait()
    task.cancel()
    gated.gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = await session_store.load_items(session.info.id)
    assert [i.type for i in stored] == ["user", "assistant", "tool"]
    assert stored[2].content == "# Demo project\n"  # the real result, not "Cancelled"
    assert stored == session.items
    assert [e.item for e in events if isinstance(e, ItemAdded)] == stored
    assert outcome_of(events).status == "cancelled"


async def test_session_cancel_finishes_the_iteration_normally(
    fake: FakeOpenAI, make_session: SessionFactory, session_store: SessionStore
) -> None:
    stall = threading.Event()
    fake.script(Reply("abcdefghij" * 5, chunk_size=5, stall_after=2, stall_gate=stall))
    session = await make_session()
    events: list[ChatEvent] = []
    async for event in session.run_query("go"):
        events.append(event)
        if isinstance(event, AssistantDelta):
            assert session.cancel()
    stall.set()
    assert outcome_of(events).status == "cancelled"
    assert not session.cancel()
    stored = await session_store.load_items(session.info.id)
    assert stored[-1].meta == {"interrupted": True} and stored[-1].content.startswith("abcde")


async def test_cancel_mid_tool_cancels_the_tool_and_answers_every_call(
    fake: FakeOpenAI, make_session: SessionFactory, session_store: SessionStore, project: Path
) -> None:
    tool_started = asyncio.Event()
    tool_cancelled = asyncio.Event()

    async def slow(args: dict[str, Any], ctx: ToolContext) -> str:
        tool_started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            tool_cancelled.set()
            raise
        return "never"

    tools = builtin_tools(project)
    tools.register(Tool("slow", "Takes forever.", {"type": "object", "properties": {}}, slow))
    fake.script(
        Reply(tool_calls=[ToolCallSpec("slow", {}, id="c1"), ToolCallSpec("read_file", {"path": "README.md"}, id="c2")])
    )
    hook = RecordingHook()
    session = await make_session(tools=tools, hooks=[hook])
    events: list[ChatEvent] = []

    async def consume() -> None:
        async for event in session.run_query("run the slow tool"):
            events.append(event)

    task = asyncio.create_task(consume())
    await tool_started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert tool_cancelled.is_set()
    assert outcome_of(events) == QueryOutcome("cancelled", None, True, ["slow", "read_file"])
    finished = [(e.call.id, e.result, e.is_error) for e in events if isinstance(e, ToolCallFinished)]
    assert finished == [("c1", CANCELLED_TOOL_RESULT, True), ("c2", CANCELLED_TOOL_RESULT, True)]
    assert [e.call.id for e in events if isinstance(e, ToolCallStarted)] == ["c1", "c2"]
    stored = await session_store.load_items(session.info.id)
    assert [i.type for i in stored] == ["user", "assistant", "tool", "tool"]
    assert hook.calls[-1] == ("end", "cancelled")

    fake.script(Reply("sorry"))
    assert outcome_of(await collect(session, "never mind")).status == "ok"
    sent = fake.chat_requests[1]["messages"]
    assert roles(sent) == ["system", "user", "assistant", "tool", "tool", "user"]
    assert [m["content"] for m in sent[3:5]] == [CANCELLED_TOOL_RESULT] * 2


# -- failures ----------------------------------------------------------------------------


async def test_server_error_is_one_error_item_and_the_session_continues(
    fake: FakeOpenAI, make_session: SessionFactory, session_store: SessionStore
) -> None:
    fake.script(HTTPError(500, {"error": {"message": "kaboom", "type": "server_error"}}), Reply("back"))
    hook = RecordingHook()
    session = await make_session(hooks=[hook])
    events = await collect(session, "first")
    outcome = outcome_of(events)
    assert outcome.status == "error" and outcome.error
    assert "\n" not in outcome.error and TEST_API_KEY not in outcome.error
    assert CHAT_MODEL in outcome.error
    stored = await session_store.load_items(session.info.id)
    assert [i.type for i in stored] == ["user", "error"]
    assert stored[1].content == outcome.error and stored[1].message is None
    assert hook.calls[-1] == ("end", "error")

    assert outcome_of(await collect(session, "second")).status == "ok"
    assert roles(fake.chat_requests[1]["messages"]) == ["system", "user", "user"]


async def test_context_length_error_is_context_limit(
    fake: FakeOpenAI, make_session: SessionFactory
) -> None:
    fake.script(
        HTTPError(
            400,
            {
                "error": {
                    "message": "This model's maximum context length is 32768 tokens.",
                    "type": "invalid_request_error",
                    "code": "context_length_exceeded",
                }
            },
        )
    )
    session = await make_session()
    assert outcome_of(await collect(session, "huge")).status == "context_limit"


async def test_stream_cut_mid_reply_keeps_the_partial_and_reports(
    fake: FakeOpenAI, make_session: SessionFactory, session_store: SessionStore
) -> None:
    fake.script(Reply("partial answer that gets cut", chunk_size=4, cut_after=3))
    session = await make_session()
    events = await collect(session, "q")
    assert outcome_of(events).status == "error"
    stored = await session_store.load_items(session.info.id)
    assert [i.type for i in stored] == ["user", "assistant", "error"]
    assert stored[1].content == "partial answ" and stored[1].meta == {"interrupted": True}


# -- history, reset, resume -------------------------------------------------------------


async def test_history_never_holds_a_tool_call_without_its_results(
    fake: FakeOpenAI, make_session: SessionFactory, project: Path
) -> None:
    seen: list[list[str]] = []
    session: ChatSession

    async def peek(args: dict[str, Any], ctx: ToolContext) -> str:
        seen.append(roles(session.history()))
        return "peeked"

    tools = ToolRegistry([Tool("peek", "", {"type": "object"}, peek)])
    fake.script(Reply("checking", tool_calls=[ToolCallSpec("peek", {})]), Reply("done"))
    session = await make_session(tools=tools)
    await collect(session, "q")
    # While the tool ran, its call had no result yet: only the call's text was visible.
    assert seen == [["system", "user", "assistant"]]
    assert roles(session.history()) == ["system", "user", "assistant", "tool", "assistant"]
    assert session.history()[2]["tool_calls"][0]["function"]["name"] == "peek"


def test_complete_tool_exchanges_repairs_a_crashed_history() -> None:
    call = {"id": "x", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "", "tool_calls": [call]},  # crashed before the result
        {"role": "user", "content": "b"},
        {"role": "tool", "tool_call_id": "stray", "content": "?"},
        {"role": "assistant", "content": "thinking", "tool_calls": [call, {**call, "id": "y"}]},
        {"role": "tool", "tool_call_id": "x", "content": "only one"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "x", "content": "ok"},
    ]
    assert complete_tool_exchanges(messages) == [
        {"role": "user", "content": "a"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": "thinking"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "x", "content": "ok"},
    ]


async def test_long_tool_results_are_capped(
    fake: FakeOpenAI, make_session: SessionFactory, session_store: SessionStore
) -> None:
    outputs: list[list[str]] = []

    async def flood(args: dict[str, Any], ctx: ToolContext) -> str:
        outputs.append(ctx.turn_outputs)
        return "z" * (TOOL_RESULT_MAX_CHARS + 10)

    tools = ToolRegistry([Tool("flood", "", {"type": "object"}, flood)])
    fake.script(Reply(tool_calls=[ToolCallSpec("flood", {})]), Reply("ok"))
    session = await make_session(tools=tools)
    await collect(session, "q")
    tool = (await session_store.load_items(session.info.id))[2]
    assert tool.content.startswith("z" * TOOL_RESULT_MAX_CHARS)
    assert tool.content.endswith("[… truncated: 10 more characters]")
    assert fake.chat_requests[1]["messages"][-1]["content"] == tool.content
    assert outputs[0] == [tool.content]  # the context saw this query's outputs


async def test_reset_hides_older_messages_from_the_model_and_survives_resume(
    fake: FakeOpenAI,
    make_session: SessionFactory,
    session_store: SessionStore,
    llm: LLMClient,
    settings: Settings,
    project: Path,
) -> None:
    hook = RecordingHook()
    session = await make_session(hooks=[hook])
    await collect(session, "old topic")
    marker = await session.reset()
    assert hook.calls[-1] == ("reset",)
    assert marker.type == "info" and marker.meta == {"reset": True}
    assert roles(session.history()) == ["system"]
    await collect(session, "new topic")
    assert fake.chat_requests[-1]["messages"][1:] == [{"role": "user", "content": "new topic"}]

    resumed = await ChatSession.load(
        session_id=session.info.id,
        **session_parts(session_store, llm, settings, project),
    )
    assert [i.type for i in resumed.items] == ["user", "assistant", "info", "user", "assistant"]
    assert resumed.items == session.items
    assert resumed.history() == session.history()
    assert resumed.info == await session_store.get_session(session.info.id)


async def test_display_items_are_committed_but_not_in_history(
    make_session: SessionFactory, session_store: SessionStore
) -> None:
    session = await make_session()
    recap = await session.add_display_item("away_recap", "you were fixing a bug", {"k": 1})
    assert recap.id is not None and session.items == [recap]
    assert await session_store.load_items(session.info.id) == [recap]
    assert roles(session.history()) == ["system"]


async def test_one_query_at_a_time_and_close_calls_hooks(
    fake: FakeOpenAI, make_session: SessionFactory
) -> None:
    gate = threading.Event()
    fake.script(Reply("slow", gate=gate))
    hook = RecordingHook()
    session = await make_session(hooks=[hook])
    events: list[ChatEvent] = []
    started = asyncio.Event()

    async def consume() -> None:
        async for event in session.run_query("first"):
            events.append(event)
            started.set()

    task = asyncio.create_task(consume())
    await started.wait()
    assert session.busy
    with pytest.raises(RuntimeError, match="already running"):
        await anext(session.run_query("second"))
    await session.close()
    gate.set()
    await task  # session.cancel/close does not cancel the consumer
    assert outcome_of(events).status == "cancelled"
    assert hook.calls[-2:] == [("end", "cancelled"), ("close",)]


# -- crash safety ----------------------------------------------------------------------

CHAT_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from qwenmem_tui.chat.events import AssistantDelta, ItemAdded, TurnStarted
    from qwenmem_tui.chat.session import ChatSession
    from qwenmem_tui.chat.tools import builtin_tools
    from qwenmem_tui.config import LLMSettings, Settings
    from qwenmem_tui.llm.client import LLMClient
    from qwenmem_tui.storage import Database, SessionStore

    async def main() -> None:
        db_path, base_url, project = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
        store = SessionStore(await Database.open(db_path))
        info = await store.create_session(str(project))
        print("session", info.id, flush=True)
        session = ChatSession(
            info=info, store=store,
            llm=LLMClient(base_url=base_url, api_key="k", model="test-model"),
            tools=builtin_tools(project),
            settings=Settings(llm=LLMSettings(base_url=base_url, model="test-model")),
            project_root=project,
        )
        turn = 0
        async for event in session.run_query("read the readme"):
            if isinstance(event, TurnStarted):
                turn = event.index
            elif isinstance(event, ItemAdded):
                print("committed", event.item.id, event.item.type, flush=True)
            elif isinstance(event, AssistantDelta) and turn == 1:
                print("streaming", flush=True)

    asyncio.run(main())
    """
)


async def test_sigkill_mid_reply_keeps_every_committed_message(
    fake: FakeOpenAI,
    tmp_path: Path,
    project: Path,
    llm: LLMClient,
    settings: Settings,
) -> None:
    stall = threading.Event()
    fake.script(
        Reply("Reading.", tool_calls=[ToolCallSpec("read_file", {"path": "README.md"})]),
        Reply("The readme says " * 20, chunk_size=6, stall_after=2, stall_gate=stall),
    )
    path = tmp_path / "crash.db"
    child = subprocess.Popen(
        [sys.executable, "-c", CHAT_WRITER, str(path), fake.base_url, str(project)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    committed: list[tuple[int, str]] = []
    try:
        session_id = (await asyncio.to_thread(child.stdout.readline)).split()[1]
        while True:
            line = await asyncio.to_thread(child.stdout.readline)
            assert line, "writer died early"
            if line.startswith("streaming"):
                break
            _, item_id, kind = line.split()
            committed.append((int(item_id), kind))
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
        stall.set()
    assert [kind for _, kind in committed] == ["user", "assistant", "tool"]

    db = await Database.open(path)
    try:
        assert (await db.fetchone("PRAGMA integrity_check"))[0] == "ok"
        store = SessionStore(db)
        resumed = await ChatSession.load(
            session_id=session_id,
            **session_parts(store, llm, settings, project),
        )
        assert [(i.id, i.type) for i in resumed.items] == committed
        assert roles(resumed.history()) == ["system", "user", "assistant", "tool"]
        fake.script(Reply("resumed fine"))
        assert outcome_of(await collect(resumed, "continue")).status == "ok"
        assert roles(fake.chat_requests[-1]["messages"]) == ["system", "user", "assistant", "tool", "user"]
    finally:
        await db.close()
