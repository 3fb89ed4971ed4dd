"""Recall for proxied requests (memory/exchange.py): where the block goes and when, with
a recall the test settles itself (an asyncio.Event), so every case is deterministic."""

from __future__ import annotations

import asyncio
from typing import Any

from qwenmem_tui.features.memory.exchange import ExchangeMemory
from qwenmem_tui.memory.recall import RecallResult

BLOCK = "<system-reminder>\nmemo\n</system-reminder>"
QUESTION = {"role": "user", "content": "Weather in Oslo?"}
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}],
}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "sunny"}


class GatedRecall:
    """A memory service whose recall answers once the test opens the gate."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.queries: list[tuple[str, str]] = []

    async def recall(self, query: str, *, project: str) -> RecallResult:
        self.queries.append((project, query))
        await self.gate.wait()
        return RecallResult(block=BLOCK, ids=[7], memories=[], scores=[1.0])


def memory(recall: GatedRecall, wait_ms: int = 0) -> ExchangeMemory:
    async def service() -> Any:
        return recall

    return ExchangeMemory(service, api_wait_ms=wait_ms)


async def settle(recall: GatedRecall, exchange: ExchangeMemory) -> None:
    recall.gate.set()
    await asyncio.gather(*(e.recall for e in exchange._exchanges.values()))


async def test_late_recall_follows_the_tool_results_and_stays_there() -> None:
    recall = GatedRecall()
    exchange = memory(recall)
    first = await exchange.shape("p", [QUESTION])
    assert first.messages == [QUESTION] and first.ids == ()  # never waited for
    await settle(recall, exchange)
    second = await exchange.shape("p", [QUESTION, CALL, RESULT])
    assert second.messages == [QUESTION, CALL, RESULT, {"role": "user", "content": BLOCK}]
    assert second.ids == (7,)
    # The next request of the exchange re-sends the history with the answer: the block
    # is at the same place, the tool call and its result still adjacent.
    follow = {"role": "tool", "tool_call_id": "c2", "content": "x"}
    call2 = {**CALL, "tool_calls": [{**CALL["tool_calls"][0], "id": "c2"}]}
    third = await exchange.shape("p", [QUESTION, CALL, RESULT, call2, follow])
    assert third.messages == [QUESTION, CALL, RESULT, {"role": "user", "content": BLOCK}, call2, follow]
    assert recall.queries == [("p", "Weather in Oslo?")]  # one recall for the exchange


async def test_ready_recall_leads_the_user_message_in_every_request() -> None:
    recall = GatedRecall()
    recall.gate.set()
    exchange = memory(recall, wait_ms=5000)
    first = await exchange.shape("p", [QUESTION])
    assert first.messages == [{"role": "user", "content": f"{BLOCK}\n\n{QUESTION['content']}"}]
    second = await exchange.shape("p", [QUESTION, CALL, RESULT])
    assert second.messages == [first.messages[0], CALL, RESULT]


async def test_a_new_user_message_is_a_new_exchange_and_projects_are_apart() -> None:
    recall = GatedRecall()
    recall.gate.set()
    exchange = memory(recall, wait_ms=5000)
    await exchange.shape("p", [QUESTION])
    await exchange.shape("q", [QUESTION])
    later = [QUESTION, {"role": "assistant", "content": "Sunny."}, {"role": "user", "content": "And Bergen?"}]
    shaped = await exchange.shape("p", later)
    assert shaped.messages[0] == QUESTION  # the earlier exchange's block is not re-sent
    assert shaped.messages[2]["content"].startswith(BLOCK)
    assert recall.queries == [("p", "Weather in Oslo?"), ("q", "Weather in Oslo?"), ("p", "And Bergen?")]


async def test_client_reminders_are_not_the_query_and_no_user_message_is_no_recall() -> None:
    recall = GatedRecall()
    exchange = memory(recall)
    system_only = [{"role": "system", "content": "hi"}]
    assert (await exchange.shape("p", system_only)).messages == system_only
    await exchange.shape(
        "p", [{"role": "user", "content": "<system-reminder>today is Monday</system-reminder>\nplan my week"}]
    )
    await asyncio.sleep(0)  # let the recall task start
    assert recall.queries == [("p", "plan my week")]
    await exchange.close()


async def test_the_first_request_waits_for_its_recall_up_to_api_wait_ms() -> None:
    """A proxy has no typing phase in which recall could be warmed, and a reply without
    tool calls has no later point: the first request waits (bounded, `api_wait_ms`)."""
    recall = GatedRecall()
    exchange = memory(recall, wait_ms=60_000)
    shaping = asyncio.create_task(exchange.shape("p", [QUESTION]))
    while not recall.queries:
        await asyncio.sleep(0)
    assert not shaping.done()  # waiting for the recall, not forwarding without it
    recall.gate.set()
    shaped = await shaping
    assert shaped.messages == [{"role": "user", "content": f"{BLOCK}\n\n{QUESTION['content']}"}]
    assert shaped.ids == (7,)
