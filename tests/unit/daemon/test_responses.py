"""`POST /v1/responses` through the proxy (issue 38, §16), driven by the official
`openai` SDK's `client.responses.create` over real HTTP to a live daemon whose upstream
is the fake server: translated onto chat completions when the fake has no Responses
API (its default 404), forwarded when it has one."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai
import pytest

from qwenmem_tui.config import Settings
from qwenmem_tui.daemon.responses import with_block
from qwenmem_tui.daemon.translate import chat_messages
from qwenmem_tui.exchange import Shaped
from qwenmem_tui.features.memory.prefetch import insert_after_tool_results
from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec
from tests.unit.daemon.test_proxy import FACT, proxy_url, sdk, seed, user_text

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
__all__ = ["proxy_url"]  # the fixture: a live daemon whose memory waits for recall


def test_translated_reply_carries_memory_usage_and_a_previous_response(
    proxy_url: str, fake: FakeOpenAI, settings: Settings, paths: Paths, project: Path
) -> None:
    memory_id = seed(settings, paths, project)
    fake.script(Reply("It is tools/ship.sh.", prompt_tokens=42, completion_tokens=7), Reply("Ana wrote it."))
    client = sdk(proxy_url)
    raw = client.responses.with_raw_response.create(
        model="test-model", input="Where is the deploy script?", instructions="Be brief."
    )
    first = raw.parse()
    assert first.output_text == "It is tools/ship.sh."
    assert first.status == "completed" and first.id.startswith("resp_")
    assert (first.usage.input_tokens, first.usage.output_tokens, first.usage.total_tokens) == (42, 7, 49)
    assert raw.headers["x-qwenmem-memories"] == str(memory_id)
    sent = fake.chat_requests[-1]
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert FACT in user_text(sent) and user_text(sent).endswith("Where is the deploy script?")
    second = client.responses.create(model="test-model", input="Who wrote it?", previous_response_id=first.id)
    assert second.output_text == "Ana wrote it."
    history = fake.chat_requests[-1]["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "user"]  # instructions not carried
    assert history[1]["content"] == "It is tools/ship.sh." and history[2]["content"].endswith("Who wrote it?")
    with pytest.raises(openai.NotFoundError, match="previous_response_not_found|not found"):
        client.responses.create(model="test-model", input="again", previous_response_id="resp_nosuch")


def test_translated_stream_tells_text_and_a_function_call_as_events(
    proxy_url: str, fake: FakeOpenAI
) -> None:
    fake.script(
        Reply("Let me look.", tool_calls=[ToolCallSpec("get_weather", {"city": "Lisbon"}, id="call_7")], chunk_size=4),
        Reply("Sunny in Lisbon.", chunk_size=5),
    )
    client = sdk(proxy_url)
    events = list(
        client.responses.create(model="test-model", input="Weather in Lisbon?", tools=[WEATHER], stream=True)
    )
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Let me look."
    arguments = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(arguments) == {"city": "Lisbon"}
    done = events[-1].response
    assert [item.type for item in done.output] == ["message", "function_call"]
    call = done.output[1]
    assert (call.call_id, call.name, json.loads(call.arguments)) == ("call_7", "get_weather", {"city": "Lisbon"})
    assert done.usage is not None and done.usage.output_tokens > 0
    assert fake.chat_requests[0]["tools"][0]["function"]["name"] == "get_weather"
    # The client runs the tool and answers with its output, going on from that response.
    follow = client.responses.create(
        model="test-model",
        previous_response_id=done.id,
        input=[{"type": "function_call_output", "call_id": "call_7", "output": "sunny, 24 C"}],
        tools=[WEATHER],
    )
    assert follow.output_text == "Sunny in Lisbon."
    messages = fake.chat_requests[1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[1]["tool_calls"][0]["id"] == "call_7" and messages[1]["content"] == "Let me look."
    assert messages[2] == {"role": "tool", "tool_call_id": "call_7", "content": "sunny, 24 C"}


def test_what_the_translation_cannot_carry_is_a_400(proxy_url: str, fake: FakeOpenAI) -> None:
    client = sdk(proxy_url)
    with pytest.raises(openai.BadRequestError, match="web_search"):
        client.responses.create(model="test-model", input="news?", tools=[{"type": "web_search"}])
    assert fake.chat_requests == []


def test_an_endpoint_with_the_responses_api_gets_the_request_forwarded(
    proxy_url: str, fake: FakeOpenAI, settings: Settings, paths: Paths, project: Path
) -> None:
    seed(settings, paths, project)
    fake.serves_responses = True
    fake.script(Reply("Forwarded: tools/ship.sh."), Reply("Streamed: tools/ship.sh.", chunk_size=6))
    client = sdk(proxy_url)
    plain = client.responses.create(model="test-model", input="Where is the deploy script?")
    assert plain.output_text == "Forwarded: tools/ship.sh." and plain.id == "resp_fake_1"
    [item] = fake.responses_requests[0]["input"]
    assert item["role"] == "user" and FACT in item["content"]
    assert item["content"].endswith("Where is the deploy script?")
    events = list(
        client.responses.create(
            model="test-model",
            input=[{"role": "user", "content": [{"type": "input_text", "text": "Where is the deploy script?"}]}],
            stream=True,
        )
    )
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Streamed: tools/ship.sh."
    content = fake.responses_requests[1]["input"][0]["content"]
    assert FACT in content[0]["text"] and content[1]["text"] == "Where is the deploy script?"
    assert fake.chat_requests == []  # nothing was translated


def test_a_forwarded_block_after_tool_outputs_follows_their_whole_run() -> None:
    """§6 in Responses items: after the run of function-call outputs, never inside it."""
    items = [
        {"role": "user", "content": "weather in Oslo and Bergen?"},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "c2", "output": "rain"},
    ]
    messages = chat_messages(items, strict=True)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    block = "<system-reminder>memory</system-reminder>"
    after = Shaped(insert_after_tool_results(messages, 2, block), (1,), block)
    placed = with_block(items, messages, after)
    assert placed == [*items, {"role": "user", "content": block}]
    leading = Shaped([messages[0] | {"content": f"{block}\n\nq"}, *messages[1:]], (1,), block)
    assert with_block(items, messages, leading)[0]["content"] == f"{block}\n\nweather in Oslo and Bergen?"


@pytest.mark.parametrize("stream", [False, True])
def test_a_lone_surrogate_echoed_back_is_an_answer_not_a_500(
    proxy_url: str, fake: FakeOpenAI, stream: bool
) -> None:
    """e2e10: `"input": "odd \\ud800"` (valid JSON) went to the endpoint as sent, and its
    echo made the translated answer a 500 (no UTF-8 encoder takes a lone surrogate):
    the answer carries it as its escape, as the endpoint wrote it."""
    fake.script(Reply("You said: odd \ud800 text"))
    body = json.dumps({"model": "test-model", "input": "odd \ud800 text", "stream": stream})
    response = httpx.post(f"{proxy_url}/v1/responses", content=body, timeout=60)
    assert response.status_code == 200, response.text
    assert "odd \ud800 text" in user_text(fake.chat_requests[-1])
    if stream:
        events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
        assert events[-1]["type"] == "response.completed"
        text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    else:
        text = response.json()["output"][0]["content"][0]["text"]
    assert text == "You said: odd \ud800 text"
