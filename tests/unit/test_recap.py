"""Session recap (contract §5): pure helpers, properties, and the real request."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from typing import Any

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from qwenmem_tui.features.recap.session_recap import (
    RECAP_SYSTEM_PROMPT,
    RECAP_USER_PROMPT,
    STARTUP_CONTEXT_NAME,
    extract_recap,
    filter_to_dialog,
    generate_session_recap,
    should_fire_recap,
    take_recent_dialog,
)
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.testing.fake_openai import FakeOpenAI, HTTPError, RawResponse, Reply


def reminder(body: str) -> str:
    return f"<system-reminder>\n{body}\n</system-reminder>"


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


# --- prompts -----------------------------------------------------------------


def test_system_prompt_asks_for_the_conversation_language() -> None:
    assert "same language as the conversation" in RECAP_SYSTEM_PROMPT
    assert "80 characters" in RECAP_SYSTEM_PROMPT  # the CJK budget


def test_prompts_ask_for_tags_and_nothing_outside() -> None:
    for prompt in (RECAP_SYSTEM_PROMPT, RECAP_USER_PROMPT):
        assert "<recap>...</recap>" in prompt
        assert "nothing outside" in prompt.lower()
    assert "40 words" in RECAP_SYSTEM_PROMPT


# --- extract_recap -----------------------------------------------------------


def test_extract_takes_the_first_tagged_block() -> None:
    raw = "Let me think about this...\n<recap> Fixing auth. Next: tests. </recap> bye"
    assert extract_recap(raw) == "Fixing auth. Next: tests."


def test_extract_is_case_insensitive() -> None:
    assert extract_recap("<RECAP>Hi.</Recap>") == "Hi."


def test_extract_takes_the_rest_after_a_lone_opening_tag() -> None:
    assert extract_recap("thinking\n<recap>Refactoring the loop. Next: opt") == (
        "Refactoring the loop. Next: opt"
    )


def test_extract_without_tags_is_empty() -> None:
    assert extract_recap("I think the user wants a summary. Fixing auth.") == ""
    assert extract_recap("") == ""
    assert extract_recap("Done.</recap>") == ""


def test_empty_block_yields_empty_not_a_stray_tag() -> None:
    assert extract_recap("<recap></recap>") == ""
    assert extract_recap("<recap>   </recap>") == ""


def test_nested_tags_are_removed_even_when_removal_forms_a_new_one() -> None:
    assert extract_recap("<recap>a <recap>b</recap>") == "a b"
    assert extract_recap("<recap><re<recap>cap>x") == "x"


_TAG = re.compile(r"</?recap>", re.IGNORECASE)
# Text biased towards the characters that make tags, so collisions actually happen.
tag_soup = st.lists(
    st.sampled_from(["<recap>", "</recap>", "<RECAP>", "</Recap>", "<", ">", "/",
                     "re", "cap", "<re", "cap>", " ", "\n", "word", "词"]) | st.text(max_size=5),
    max_size=20,
).map("".join)


@given(st.one_of(st.text(), tag_soup))
@example("<recap></recap>")
@example("<recap><re<recap>cap>")
def test_extract_never_returns_a_tag(raw: str) -> None:
    assert _TAG.search(extract_recap(raw)) is None


@given(st.one_of(st.text(), tag_soup))
def test_extract_result_is_stripped(raw: str) -> None:
    out = extract_recap(raw)
    assert out == out.strip()


@given(st.one_of(st.text(), tag_soup))
def test_extract_is_stable_under_rewrapping(raw: str) -> None:
    # The output is a finished recap: wrapping it again and re-extracting is a no-op.
    out = extract_recap(raw)
    assert extract_recap(f"<recap>{out}</recap>") == out
    assert extract_recap(f"<recap>{out}") == out


@given(st.text(), st.text(), st.text())
def test_extract_recovers_tagless_text(before: str, body: str, after: str) -> None:
    assume(_TAG.search(before) is None and _TAG.search(body) is None)
    assert extract_recap(f"{before}<recap>{body}</recap>{after}") == body.strip()
    assert extract_recap(f"{before}<recap>{body}") == body.strip()


@given(st.text())
def test_text_without_an_opening_tag_gives_nothing(raw: str) -> None:
    assume(re.search("<recap>", raw, re.IGNORECASE) is None)
    assert extract_recap(raw) == ""


# --- filter_to_dialog --------------------------------------------------------


def test_strips_startup_and_mid_session_reminders() -> None:
    history = [
        {"role": "system", "content": "You are qwenmem."},
        user(reminder("STARTUP_CONTEXT") + "\nfix session title pollution"),
        assistant("I found the title service."),
        user(reminder("RECALLED_MEMORY")),
        user(reminder("PLAN_REMINDER") + "\ncontinue with recap coverage\n"
             + reminder("IDE_CONTEXT")),
    ]
    dialog = filter_to_dialog(history)
    assert dialog == [
        user("fix session title pollution"),
        assistant("I found the title service."),
        user("continue with recap coverage"),
    ]


def test_reminder_only_startup_context_message_is_dropped() -> None:
    history = [user(reminder("project: qwenmem\nfiles: ...")), user("hello")]
    assert filter_to_dialog(history) == [user("hello")]


def test_startup_context_named_first_user_message_is_dropped() -> None:
    history = [
        {"role": "user", "name": STARTUP_CONTEXT_NAME, "content": "Project notes: ..."},
        assistant("Got it."),
        {"role": "user", "name": STARTUP_CONTEXT_NAME, "content": "real question"},
    ]
    # Only the *first* user message may be the startup context.
    assert filter_to_dialog(history) == [assistant("Got it."), user("real question")]


def test_reminder_in_the_middle_of_text_is_removed() -> None:
    text = "before " + reminder("secret memory") + " after"
    assert filter_to_dialog([user(text)]) == [user("before  after")]


def test_unclosed_reminder_removes_the_rest() -> None:
    text = "keep this <system-reminder> recalled: api key lives in vault ..."
    assert filter_to_dialog([user(text)]) == [user("keep this")]


def test_tool_messages_tool_calls_and_reasoning_are_dropped() -> None:
    call = {"id": "c1", "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
    history = [
        user("read a.py"),
        {"role": "assistant", "content": "", "tool_calls": [call],
         "reasoning_content": "I should read the file"},
        {"role": "tool", "tool_call_id": "c1", "content": "x = 1\n" * 5000},
        {"role": "assistant", "content": "a.py sets x.", "reasoning_content": "hmm",
         "tool_calls": [call]},
        {"role": "assistant", "content": None},
    ]
    dialog = filter_to_dialog(history)
    assert dialog == [user("read a.py"), assistant("a.py sets x.")]
    assert all(set(message) == {"role", "content"} for message in dialog)


def test_text_parts_are_joined_and_other_parts_ignored() -> None:
    message = {"role": "user", "content": [
        {"type": "text", "text": reminder("ctx")},
        {"type": "image_url", "image_url": {"url": "data:..."}},
        {"type": "text", "text": "what is in this picture?"},
    ]}
    assert filter_to_dialog([message]) == [user("what is in this picture?")]


# --- take_recent_dialog ------------------------------------------------------


def alternating(n: int) -> list[dict]:
    return [user(f"u{i}") if i % 2 == 0 else assistant(f"a{i}") for i in range(n)]


def test_short_dialog_is_unchanged() -> None:
    dialog = [assistant("a"), user("u")]
    assert take_recent_dialog(dialog, 30) == dialog
    assert take_recent_dialog(alternating(30)) == alternating(30)


def test_window_starts_at_a_user_message() -> None:
    dialog = alternating(31)  # the last 30 start on a1, an assistant reply
    recent = take_recent_dialog(dialog, 30)
    assert recent[0] == user("u2")
    assert recent == dialog[2:]


def test_window_without_any_user_message_is_empty() -> None:
    assert take_recent_dialog([user("u")] + [assistant("a")] * 5, 3) == []


@given(st.lists(st.sampled_from(["user", "assistant"]), max_size=60),
       st.integers(min_value=1, max_value=40))
def test_window_properties(roles: list[str], limit: int) -> None:
    dialog = [{"role": role, "content": str(i)} for i, role in enumerate(roles)]
    recent = take_recent_dialog(dialog, limit)
    if len(dialog) <= limit:
        assert recent == dialog
    else:
        assert len(recent) <= limit
        assert recent == dialog[len(dialog) - len(recent):]  # a suffix
        assert not recent or recent[0]["role"] == "user"


# --- should_fire_recap -------------------------------------------------------


def items(*types: str) -> list[dict]:
    return [{"type": kind} for kind in types]


def test_too_few_user_messages() -> None:
    assert not should_fire_recap(items("user", "assistant", "user", "assistant"))
    assert not should_fire_recap([])


def test_three_user_messages_are_enough() -> None:
    assert should_fire_recap(items("user", "assistant", "user", "info", "user"))


def test_dedupe_gate_skips_with_only_one_new_turn() -> None:
    seen = items("user", "assistant", "user", "assistant", "user", "assistant",
                 "away_recap", "user", "assistant")
    assert not should_fire_recap(seen)
    assert should_fire_recap(seen + items("user"))


def test_gate_counts_from_the_last_recap() -> None:
    seen = items("user", "user", "user", "away_recap", "user", "user", "away_recap")
    assert not should_fire_recap(seen)


def test_gate_reads_item_objects_too() -> None:
    class Item:
        def __init__(self, type: str) -> None:  # noqa: A002 - mirrors storage.Item
            self.type = type

    assert should_fire_recap([Item("user")] * 3)
    assert not should_fire_recap([Item("user")] * 3 + [Item("away_recap")])


# --- generate_session_recap against the real client and the fake server -----

CONVERSATION = [
    {"role": "system", "content": "You are qwenmem, a coding assistant."},
    user(reminder("startup context: project qwenmem") + "\nfix the flaky upload test"),
    {"role": "assistant", "content": "", "reasoning_content": "SECRET_THOUGHT",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "read_file", "arguments": '{"path": "up.py"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "TOOL_DUMP " * 200},
    assistant("The retry loop sleeps on the real clock."),
    user("ok, inject a fake clock"),
    assistant("Done; next I would add the 429 test."),
]


def client(fake: FakeOpenAI, *, fast_model: str | None = "test-fast") -> LLMClient:
    return LLMClient(base_url=fake.base_url, api_key="sk-test", model="test-model",
                     fast_model=fast_model, timeout=10.0)


async def test_request_uses_fast_model_small_budget_and_only_dialog(fake: FakeOpenAI) -> None:
    fake.script(Reply("<recap>Fixing the flaky upload test. Next: add the 429 test.</recap>"))
    llm = client(fake)
    try:
        recap = await generate_session_recap(CONVERSATION, llm)
    finally:
        await llm.aclose()
    assert recap == "Fixing the flaky upload test. Next: add the 429 test."
    [body] = fake.chat_requests
    assert body["model"] == "test-fast"
    assert body.get("max_tokens", body.get("max_completion_tokens")) == 300
    assert body["temperature"] == 0.3
    assert not body.get("tools")
    messages = body["messages"]
    assert messages[0] == {"role": "system", "content": RECAP_SYSTEM_PROMPT}
    assert [m["role"] for m in messages].count("system") == 1
    assert messages[-1] == {"role": "user", "content": RECAP_USER_PROMPT}
    assert messages[1] == user("fix the flaky upload test")
    assert all(set(m) == {"role", "content"} for m in messages)
    wire = json.dumps(messages)
    for leaked in ("SECRET_THOUGHT", "TOOL_DUMP", "read_file", "startup context",
                   "You are qwenmem"):
        assert leaked not in wire


async def test_falls_back_to_the_main_model(fake: FakeOpenAI) -> None:
    fake.script(Reply("<recap>Task. Next: step.</recap>"))
    llm = client(fake, fast_model=None)
    try:
        assert await generate_session_recap(CONVERSATION, llm) == "Task. Next: step."
    finally:
        await llm.aclose()
    assert fake.chat_requests[0]["model"] == "test-model"


async def test_explicit_model_wins(fake: FakeOpenAI) -> None:
    fake.script(Reply("<recap>Task.</recap>"))
    llm = client(fake)
    try:
        await generate_session_recap(CONVERSATION, llm, model="fake-echo")
    finally:
        await llm.aclose()
    assert fake.chat_requests[0]["model"] == "fake-echo"


async def test_answers_in_the_conversation_language(fake: FakeOpenAI) -> None:
    fake.script(Reply("<recap>Чиним гонку в retry. Далее: добавить тест.</recap>"))
    history = [user("Исправь гонку в retry-логике"), assistant("Смотрю на обработчик ретраев.")]
    llm = client(fake)
    try:
        recap = await generate_session_recap(history, llm)
    finally:
        await llm.aclose()
    assert recap == "Чиним гонку в retry. Далее: добавить тест."
    assert "same language as the conversation" in fake.chat_requests[0]["messages"][0]["content"]


async def test_reasoning_never_reaches_the_recap(fake: FakeOpenAI) -> None:
    fake.script(Reply("Let me think. The user is fixing tests.\n<recap>Fixing tests.</recap>",
                      reasoning="hidden chain of thought"))
    llm = client(fake)
    try:
        assert await generate_session_recap(CONVERSATION, llm) == "Fixing tests."
    finally:
        await llm.aclose()


@pytest.mark.parametrize("reply", [
    HTTPError(500, {"error": {"message": "boom", "type": "server_error"}}),
    Reply("The user wants a recap: fixing tests."),  # no tag: skip, never show reasoning
    Reply(""),
    Reply("<recap>  </recap>"),
    RawResponse(body=b"data: {not json\n\n"),
], ids=["http-500", "tagless", "empty", "empty-tags", "malformed"])
async def test_failures_give_none_in_a_single_attempt(
    fake: FakeOpenAI, reply: Any, caplog: pytest.LogCaptureFixture
) -> None:
    fake.script(reply)
    llm = client(fake)
    try:
        with caplog.at_level(logging.WARNING, logger="qwenmem.recap"):
            assert await generate_session_recap(CONVERSATION, llm) is None
    finally:
        await llm.aclose()
    assert len(fake.chat_requests) == 1  # no retries
    assert "sk-test" not in caplog.text


async def test_errors_are_logged_with_the_tag(
    fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    fake.script(HTTPError(500, {"error": {"message": "boom", "type": "server_error"}}))
    llm = client(fake)
    try:
        with caplog.at_level(logging.WARNING, logger="qwenmem.recap"):
            assert await generate_session_recap(CONVERSATION, llm) is None
    finally:
        await llm.aclose()
    [record] = [r for r in caplog.records if r.name == "qwenmem.recap"]
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith("[SESSION_RECAP]")


async def test_abort_cancels_the_request_and_gives_none(fake: FakeOpenAI) -> None:
    gate = threading.Event()
    fake.script(Reply("<recap>Too late.</recap>", gate=gate))
    abort = asyncio.Event()
    llm = client(fake)
    try:
        task = asyncio.create_task(generate_session_recap(CONVERSATION, llm, abort=abort))
        await asyncio.to_thread(fake.wait_for_requests, 1)
        abort.set()
        assert await task is None
    finally:
        gate.set()
        await llm.aclose()


async def test_abort_before_start_sends_nothing(fake: FakeOpenAI) -> None:
    abort = asyncio.Event()
    abort.set()
    llm = client(fake)
    try:
        assert await generate_session_recap(CONVERSATION, llm, abort=abort) is None
    finally:
        await llm.aclose()
    assert fake.chat_requests == []


@pytest.mark.parametrize("history", [
    [],
    [user("only one message")],
    [{"role": "system", "content": "sys"}, {"role": "tool", "tool_call_id": "c", "content": "x"}],
    [user(reminder("startup only")), assistant("")],
], ids=["empty", "one-message", "no-dialog", "reminders-only"])
async def test_nothing_to_recap_sends_nothing(fake: FakeOpenAI, history: list[dict]) -> None:
    llm = client(fake)
    try:
        assert await generate_session_recap(history, llm) is None
    finally:
        await llm.aclose()
    assert fake.chat_requests == []
