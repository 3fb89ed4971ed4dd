"""History compaction (issue 6) through the real chat loop, SDK, fake server and SQLite.

The fake server plays both models: the chat model answers with long replies (and a
tool call when asked to read), the fast model is a small deterministic summariser that
returns the JSON compaction expects and reports the "Decision:" turns it saw.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from chat_support import SessionFactory, chat_llm, collect, session_parts

from qwenmem_tui.chat.events import ChatEvent, ItemAdded, Notice, QueryFinished
from qwenmem_tui.chat.session import ChatSession
from qwenmem_tui.chat.view import COMPACTION_ITEM, model_messages
from qwenmem_tui.config import Settings
from qwenmem_tui.features.compaction.settings import CompactionSettings
from qwenmem_tui.features.compaction.gauge import estimate_tokens
from qwenmem_tui.features.compaction.hook import DROPPED_ITEM, CompactionHook
from qwenmem_tui.features.compaction.pins import has_decision_cue
from qwenmem_tui.features.compaction.summariser import parse_summary, split_turns
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.storage import Item, SessionStore
from qwenmem_tui.testing.fake_openai import FakeOpenAI, HTTPError, Reply, ToolCallSpec

FAST = "test-fast"
DECISIONS = [
    "Decision: the database is PostgreSQL 16.",
    "Decision: all timestamps are stored in UTC.",
    "Decision: the public API stays on version 2.",
]
CORRECTION = "Actually, the service listens on port 8443, not 8080."
PINNED = "Remember the deploy window: Tuesdays 14:00-16:00 only."


def filler(n: int) -> str:
    return f"Question {n}: " + " ".join(f"detail{n}-{k}" for k in range(25))


class FakeModels:
    """Chat replies of ~100 tokens; a summariser folding turns and spotting decisions."""

    def __init__(self, fake: FakeOpenAI) -> None:
        self.summaries: list[dict] = []
        self.fail_summaries = False
        fake.responder = self.respond

    def respond(self, body: dict[str, Any]) -> Any:
        messages = body["messages"]
        if body["model"] == FAST:
            self.summaries.append(body)
            if self.fail_summaries:
                return HTTPError(500, {"error": {"message": "summariser down"}})
            return Reply(json.dumps(self.summarise(messages[-1]["content"])))
        last = messages[-1]
        if last["role"] == "user" and "read the readme" in last["content"]:
            return Reply(tool_calls=[ToolCallSpec("read_file", {"path": "README.md"})])
        return Reply("Answer: " + " ".join(f"word{k}" for k in range(70)))

    def summarise(self, prompt: str) -> dict[str, Any]:
        previous = prompt.split("\n\nNext block", 1)[0].removeprefix("Previous summary:\n")
        turns = re.findall(r"\[turn (\d+)\]\nuser: ([^\n]*)", prompt)
        decided = [(int(n), text) for n, text in turns if text.startswith("Decision:")]
        rolled = "" if previous == "(none)" else previous + " "
        return {
            "summary": f"{rolled}[{len(turns)} turns folded]",
            "decisions": [text for _, text in decided],
            "pinned_turns": [n for n, _ in decided],
        }


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "README.md").write_text("# Demo project\n" + "readme line\n" * 40)
    return root


@pytest.fixture
def settings(fake: FakeOpenAI) -> Settings:
    return Settings(
        llm=chat_llm(fake.base_url, fast_model=FAST, context_window=3000),
        compaction=CompactionSettings(threshold=0.7, keep_recent_turns=2),
    )


@pytest.fixture
def models(fake: FakeOpenAI) -> FakeModels:
    return FakeModels(fake)


@pytest.fixture
def make_session(
    make_session: SessionFactory, llm: LLMClient, settings: Settings
) -> SessionFactory:
    """Every session here compacts: with the hook given, or one on ``settings``."""

    async def make(hook: CompactionHook | None = None) -> ChatSession:
        return await make_session(hook or CompactionHook(llm, settings))

    return make


async def ask(session: ChatSession, text: str) -> list[ChatEvent]:
    events = await collect(session, text)
    assert isinstance(events[-1], QueryFinished)
    return events


def chat_requests(fake: FakeOpenAI) -> list[list[dict]]:
    return [r["messages"] for r in fake.chat_requests if r["model"] != FAST]


def texts(messages: list[dict]) -> list[str]:
    return [m["content"] for m in messages if isinstance(m.get("content"), str)]


def assert_tool_pairs(messages: list[dict]) -> None:
    """Every tool call directly followed by all its results; no stray results."""
    index = 0
    while index < len(messages):
        message = messages[index]
        assert message["role"] != "tool", f"stray tool result at {index}"
        index += 1
        calls = message.get("tool_calls") or []
        ids = [c["id"] for c in calls]
        results = []
        while index < len(messages) and messages[index]["role"] == "tool":
            results.append(messages[index]["tool_call_id"])
            index += 1
        assert sorted(results) == sorted(ids)


async def long_session(
    session: ChatSession, turns: int, special: dict[int, str], start: int = 0
) -> list[ChatEvent]:
    events: list[ChatEvent] = []
    for n in range(start, start + turns):
        events += await ask(session, special.get(n, filler(n)))
    return events


def markers(session: ChatSession) -> list[Item]:
    return [item for item in session.items if item.type == COMPACTION_ITEM]


async def test_a_long_session_compacts_and_keeps_what_matters(
    make_session, models: FakeModels, fake: FakeOpenAI, settings: Settings, session_store: SessionStore
) -> None:
    session = await make_session()
    special = {1: DECISIONS[0], 2: CORRECTION, 3: PINNED, 4: "please read the readme"}
    special |= {5: DECISIONS[1], 8: DECISIONS[2]}
    await long_session(session, 4, special)
    pinned = next(i for i in session.items if i.content == PINNED)
    pinned.meta["pinned"] = True  # what /pin does
    await session_store.update_item(pinned)
    await long_session(session, 26, special, start=4)

    assert markers(session), "the session never compacted"
    assert models.summaries and all(r["model"] == FAST for r in models.summaries)
    requests = chat_requests(fake)
    limit = settings.llm.context_window
    for messages in requests:
        assert estimate_tokens(messages) < limit
        assert_tool_pairs(messages)
    after = requests[-1]
    assert after[0]["role"] == "system"
    assert after[1]["content"].startswith("<system-reminder>\nSummary of the earlier conversation")
    # Pinned by the user, a correction (cue phrase) and decisions (summariser JSON):
    # verbatim, as messages of their own, in every request after compaction.
    for text in [PINNED, CORRECTION, *DECISIONS]:
        assert text in texts(after), text
    assert after[-1] == {"role": "user", "content": filler(29)}


async def test_pinned_decisions_are_in_the_prompt_before_and_after_compaction(
    make_session, models: FakeModels, fake: FakeOpenAI
) -> None:
    """Regression: the fixed list of decisions survives every compaction."""
    session = await make_session()
    await long_session(session, 40, {2: DECISIONS[0], 5: DECISIONS[1], 9: DECISIONS[2]})

    requests = chat_requests(fake)
    compacted_from = next(i for i, r in enumerate(requests) if "Summary of the earlier" in str(r[1]))
    before = requests[compacted_from - 1]
    assert "Summary of the earlier" not in str(before)
    for decision in DECISIONS:
        assert decision in texts(before)
    for messages in requests[compacted_from:]:
        present = [d for d in DECISIONS if d in texts(messages)]
        assert present == DECISIONS
    assert len(markers(session)) >= 2  # several compactions, the decisions stayed


async def test_tool_calls_are_never_split_from_their_results(
    make_session, models: FakeModels, fake: FakeOpenAI
) -> None:
    session = await make_session()
    await long_session(session, 24, {n: "please read the readme" for n in range(0, 24, 3)})

    assert markers(session)
    for messages in chat_requests(fake):
        assert_tool_pairs(messages)
        assert messages[-1]["role"] in ("user", "tool")
    # The cut falls between turns: the first kept message is a user message.
    marker = markers(session)[-1]
    first_kept = next(i for i in session.items if i.id > marker.meta["cut_item_id"] and i.message)
    assert first_kept.type == "user"


async def test_the_latest_user_message_is_always_sent(
    make_session, models: FakeModels, fake: FakeOpenAI, settings: Settings, llm: LLMClient
) -> None:
    keep_none = settings.model_copy(
        update={"compaction": CompactionSettings(threshold=0.7, keep_recent_turns=0)}
    )
    session = await make_session(CompactionHook(llm, keep_none))
    for n in range(20):
        await ask(session, filler(n))
        assert chat_requests(fake)[-1][-1] == {"role": "user", "content": filler(n)}
    assert markers(session)


async def test_the_marker_counts_the_messages_and_survives_resume(
    make_session, models: FakeModels, llm: LLMClient, settings: Settings,
    session_store: SessionStore, project: Path,
) -> None:
    session = await make_session()
    events = await long_session(session, 20, {3: "please read the readme"})

    marker = markers(session)[0]
    shown = [e.item for e in events if isinstance(e, ItemAdded) and e.item.type == COMPACTION_ITEM]
    assert shown == markers(session)  # the UI hears of each marker as it happens
    folded = [
        i for i in session.items if i.message is not None and i.id <= marker.meta["cut_item_id"]
    ]
    assert marker.content == f"⋯ {len(folded)} older messages summarized"
    assert marker.meta["count"] == len(folded)
    assert marker.meta["summary"]

    resumed = await ChatSession.load(
        session_id=session.info.id,
        **session_parts(session_store, llm, settings, project),
    )
    assert [i.content for i in markers(resumed)] == [i.content for i in markers(session)]
    assert resumed.history() == session.history()
    assert len(resumed.history()) < len([i for i in session.items if i.message])


async def test_compact_now_compacts_below_the_threshold(
    make_session, models: FakeModels, settings: Settings, llm: LLMClient
) -> None:
    hook = CompactionHook(llm, settings)
    session = await make_session(hook)
    for n in range(2):
        await ask(session, filler(n))
    nothing = await hook.compact_now(session)
    keep = settings.compaction.keep_recent_turns
    assert (nothing.status, nothing.turns, nothing.keep) == ("nothing", 2, keep)
    assert nothing.notice == (
        f"Nothing to compact yet: the latest {keep} turns always stay word for word "
        "(compaction.keep_recent_turns), and there are 2 so far."
    )

    for n in range(2, 5):
        await ask(session, filler(n))
    assert not markers(session)
    result = await hook.compact_now(session)

    assert result.status == "compacted" and result.count == 6
    assert result.notice == "Compacted 6 older messages into a summary."
    assert len(session.history()) == 1 + 1 + 4  # system, summary, two kept turns


async def test_summariser_failure_leaves_history_untouched_and_warns_once(
    make_session, models: FakeModels, fake: FakeOpenAI
) -> None:
    session = await make_session()
    models.fail_summaries = True
    notices: list[Notice] = []
    for n in range(14):
        events = await ask(session, filler(n))
        notices += [e for e in events if isinstance(e, Notice)]

    assert not markers(session)
    failures = [n for n in notices if n.text.startswith("Compaction failed")]
    assert failures and all(n.level == "warning" for n in failures)
    asked = len(models.summaries)
    assert len(failures) == asked  # one attempt and one warning per user message
    # Nothing was summarised, yet no request overflowed: the oldest turns were left out.
    dropped = [n for n in notices if "left out the" in n.text]
    assert dropped
    for messages in chat_requests(fake):
        assert estimate_tokens(messages) < 3000
    assert len(session.history()) == 1 + 2 * 14  # the stored model view is untouched


def test_decision_cues_in_several_languages() -> None:
    for text in [
        CORRECTION,
        "Na verdade, o servidor é o beta.",
        "En realidad prefiero tabs.",
        "En fait, on garde Django.",
        "Ab jetzt bitte immer pytest.",
        "其实我们用 PostgreSQL。",
        "実はポートは 8443 です。",
    ]:
        assert has_decision_cue(text), text
    assert not has_decision_cue("What does this function return?")


def test_parse_summary_accepts_fenced_json_and_rejects_prose() -> None:
    parsed = parse_summary('```json\n{"summary": "s", "decisions": ["d"], "pinned_turns": [2]}\n```')
    assert (parsed.summary, parsed.decisions, parsed.pinned_turns) == ("s", ["d"], [2])
    with pytest.raises(Exception, match="without JSON"):
        parse_summary("Sure! Here is a summary of the conversation.")


def test_turns_start_at_user_messages() -> None:
    def item(i: int, role: str) -> Item:
        return Item(i, "s", role, "", {"role": role, "content": "x"}, {}, 0.0)

    turns = split_turns([item(1, "user"), item(2, "assistant"), item(3, "tool"), item(4, "user")])
    assert [[i.id for i in t.items] for t in turns] == [[1, 2, 3], [4]]


async def test_each_block_goes_to_memory_extraction_before_it_is_summarised(
    make_session, models: FakeModels, settings: Settings, llm: LLMClient
) -> None:
    handed: list[tuple[int, list[dict]]] = []

    async def extract(messages: list[dict]) -> None:
        handed.append((len(models.summaries), messages))

    hook = CompactionHook(llm, settings, extract=extract)
    session = await make_session(hook)
    for n in range(5):
        await ask(session, filler(n))
    result = await hook.compact_now(session)

    assert result.status == "compacted"
    assert [before for before, _ in handed] == list(range(len(handed)))
    # Each block comes with the system prompt (instruction files are content in view).
    assert all(block[0] == {"role": "system", "content": session.system_prompt} for _, block in handed)
    folded = [m for _, block in handed for m in block[1:]]
    assert len(folded) == result.count
    assert folded[0] == {"role": "user", "content": filler(0)}


async def test_a_context_length_error_compacts_before_the_next_request(
    make_session, models: FakeModels, fake: FakeOpenAI
) -> None:
    session = await make_session()
    for n in range(4):  # far below the threshold by our estimate
        await ask(session, filler(n))
    fake.script(
        HTTPError(400, {"error": {"message": "maximum context length exceeded",
                                  "code": "context_length_exceeded"}})
    )
    failed = await ask(session, filler(4))
    assert failed[-1].outcome.status == "context_limit"
    assert not markers(session)

    await ask(session, filler(5))

    assert len(markers(session)) == 1
    assert "Summary of the earlier" in chat_requests(fake)[-1][1]["content"]


async def test_a_failing_summariser_backs_off_and_the_drop_is_marked(
    make_session, models: FakeModels, fake: FakeOpenAI
) -> None:
    """Issue 16: a fast model that never answers JSON was asked again on every turn
    (7 calls in 7 turns), and the conversation never showed where messages went."""
    session = await make_session()

    def never_json(body: dict[str, Any]) -> Any:
        if body["model"] == FAST:
            return Reply("I am a small model and I like to chat.")
        return models.respond(body)

    fake.responder = never_json
    asked_at: list[int] = []
    announced = []
    for n in range(22):
        before = len([r for r in fake.chat_requests if r["model"] == FAST])
        events = await ask(session, filler(n))
        if len([r for r in fake.chat_requests if r["model"] == FAST]) > before:
            asked_at.append(n)
        announced += [e.item for e in events if isinstance(e, ItemAdded)]
    first = asked_at[0]
    assert first < 14, "the session never reached the threshold"
    # Tried on the first turn over the threshold, then after 2, 4, 8 more queries.
    assert asked_at == [n for n in (first, first + 2, first + 6, first + 14) if n < 22]
    dropped = [item for item in session.items if item.type == DROPPED_ITEM]
    assert len(dropped) == 1  # one dim marker where dropping began, not one per turn
    assert dropped[0].content.startswith("⋯ context full: older messages no longer reach")
    assert "summariser failed" in dropped[0].content
    assert dropped[0] in announced  # shown as it happened
    for messages in chat_requests(fake):
        assert estimate_tokens(messages) < 3000


async def test_a_long_session_holds_a_window_and_reads_the_rest_from_the_database(
    make_session, models: FakeModels, llm: LLMClient, settings: Settings,
    session_store: SessionStore, project: Path,
) -> None:
    """Issue 41: a long session keeps the model view and the newest items in memory, not
    its whole transcript; what it let go of is still in the database, page by page, and
    the model sees exactly what it would have seen with everything held."""
    session = await make_session()
    session.window_items = 8
    special = {1: DECISIONS[0], 3: PINNED, 4: "please read the readme", 9: DECISIONS[1]}
    for n in range(40):
        await ask(session, special.get(n, filler(n)))
        if n == 3:  # /pin on the message before it is summarised and let go of
            pinned = next(i for i in session.items if i.content == PINNED)
            await session.set_meta(pinned, {**pinned.meta, "pinned": True})
        stored = await session_store.load_items(session.info.id)
        assert session.history() == model_messages(stored, session.system_prompt)
        assert session.earlier + len(session.items) == len(stored)
        assert session.items == stored[session.earlier :]
    assert sum(i.type == COMPACTION_ITEM for i in stored) >= 2 and len(markers(session)) == 1
    assert len(session.items) + len(session.carried) < len(stored) // 4  # not the whole transcript
    assert PINNED in texts(session.history())  # carried from before the window
    assert await session.page(0, 3) == stored[:3]  # scrolled back to: read from the database

    resumed = await ChatSession.load(
        session_id=session.info.id, window_items=8, **session_parts(session_store, llm, settings, project)
    )
    assert resumed.history() == session.history()
    assert resumed.items == session.items and resumed.earlier == session.earlier
    assert resumed.usage_total() == session.usage_total() and resumed.usage_total().prompt_tokens > 0
    assert resumed.latest("user") == stored[max(i for i, item in enumerate(stored) if item.type == "user")]
