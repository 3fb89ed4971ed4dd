"""The OpenAI-compatible proxy (contract §9) driven by clients written by others: the
official `openai` SDK and simonw's `llm` CLI, over real HTTP to a live daemon whose
upstream is the fake server."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from qwenmem_tui.config import Settings
from qwenmem_tui.features.memory.extract import EXTRACTION_SYSTEM_PROMPT
from qwenmem_tui.memory.model import Origin, WriteRequest
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.testing.fake_openai import FakeOpenAI, HTTPError, Reply, ToolCallSpec

FACT = "The deploy script lives in tools/ship.sh"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def seed(settings: Settings, paths: Paths, project: Path, value: str = FACT) -> int:
    async def save() -> int:
        service = await MemoryService.open(settings, paths)
        try:
            result = await service.save(
                WriteRequest(
                    "project", "deploy_script", value, origin=Origin.USER, project=project_id(project)
                )
            )
        finally:
            await service.close()
        return result.memory.id

    return asyncio.run(save())


@pytest.fixture
def proxy_url(make_daemon, serve_live, settings: Settings) -> Iterator[str]:
    settings.memory.initial_wait_ms = 5000  # deterministic: recall settles in time
    with serve_live(make_daemon()) as url:
        yield url


def sdk(url: str, **options: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="any", max_retries=0, **options)


def user_text(body: dict) -> str:
    return next(m for m in reversed(body["messages"]) if m["role"] == "user")["content"]


def test_non_streamed_reply_is_the_upstreams_with_memory_injected(
    proxy_url: str, fake: FakeOpenAI, settings: Settings, paths: Paths, project: Path
) -> None:
    memory_id = seed(settings, paths, project)
    fake.script(Reply("It is tools/ship.sh.", prompt_tokens=42, completion_tokens=7))
    raw = sdk(proxy_url).chat.completions.with_raw_response.create(
        model="test-model",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Where is the deploy script?"},
        ],
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "It is tools/ship.sh."
    assert completion.choices[0].finish_reason == "stop"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (42, 7)
    assert raw.headers["x-qwenmem-memories"] == str(memory_id)
    sent = fake.chat_requests[-1]
    text = user_text(sent)
    assert text.startswith("<system-reminder>") and FACT in text
    assert text.endswith("Where is the deploy script?")
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    # The upstream key, never the client's bearer, reaches the endpoint.
    upstream_auth = fake.requests[-1].headers["authorization"]
    assert upstream_auth != "Bearer any" and upstream_auth.startswith("Bearer ")


def test_streamed_reply_passes_through(
    proxy_url: str, fake: FakeOpenAI, settings: Settings, paths: Paths, project: Path
) -> None:
    seed(settings, paths, project)
    fake.script(Reply("The script is tools/ship.sh, run it from the root.", chunk_size=5))
    stream = sdk(proxy_url).chat.completions.create(
        model="test-model",
        messages=[{"role": "user", "content": "Where is the deploy script?"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "The script is tools/ship.sh, run it from the root."
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert len({c.id for c in chunks}) == 1
    assert FACT in user_text(fake.chat_requests[-1])


def test_client_tools_pass_through_and_memory_follows_tool_results(
    proxy_url: str, fake: FakeOpenAI, settings: Settings, paths: Paths, project: Path
) -> None:
    seed(settings, paths, project)
    call = ToolCallSpec("get_weather", {"city": "Oslo"}, id="call_w1")
    fake.script(Reply(tool_calls=[call]), Reply("Sunny; and the deploy script is tools/ship.sh."))
    client = sdk(proxy_url)
    question = {"role": "user", "content": "Weather in Oslo, and where is the deploy script?"}
    first = client.chat.completions.create(model="test-model", messages=[question], tools=TOOLS)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (tool_call,) = choice.message.tool_calls
    assert (tool_call.id, tool_call.function.name) == ("call_w1", "get_weather")
    assert json.loads(tool_call.function.arguments) == {"city": "Oslo"}
    assert len(fake.chat_requests) == 1  # the proxy ran no tool of its own
    assert fake.chat_requests[0]["tools"] == TOOLS
    history = [
        question,
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": "call_w1", "content": "sunny, 21 C"},
    ]
    second = client.chat.completions.create(model="test-model", messages=history, tools=TOOLS)
    assert second.choices[0].message.content.startswith("Sunny")
    sent = fake.chat_requests[1]["messages"]
    # The block stays where it was delivered (with the user message), the tool call and
    # its result stay adjacent, and nothing was added after the tool result.
    assert FACT in sent[0]["content"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]


def test_upstream_errors_keep_their_shape_and_status(
    proxy_url: str, fake: FakeOpenAI
) -> None:
    client = sdk(proxy_url)
    messages = [{"role": "user", "content": "hi"}]
    fake.script(HTTPError(429, {"error": {"message": "Slow down", "type": "rate_limit", "code": "rate"}}))
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(model="test-model", messages=messages)
    assert limited.value.body["message"] == "Slow down"
    fake.script(HTTPError(500, "upstream exploded"))
    with pytest.raises(openai.InternalServerError) as broken:
        client.chat.completions.create(model="test-model", messages=messages, stream=True)
    assert "upstream exploded" in broken.value.message
    fake.script(HTTPError(404, {"error": {"message": "The model `nope` does not exist."}}))
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=messages)


def test_clients_mistakes_are_4xx_in_openais_shape(proxy_url: str) -> None:
    url = f"{proxy_url}/v1/chat/completions"
    for body, headers in (
        (b"{not json", {}),
        (b"[1, 2]", {}),
        (b'{"model": "m"}', {}),
        (b'{"model": "m", "messages": ["hi"]}', {}),
        (b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}', {}),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}',
            {"X-Qwenmem-Project": "relative/dir"},
        ),
        (b"[" * 100_000, {}),
    ):
        response = httpx.post(url, content=body, headers={"Content-Type": "application/json", **headers})
        assert response.status_code == 400, body
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and error["message"]


def test_unreachable_upstream_is_a_502(make_daemon, serve_live, settings: Settings, stalled_url: str) -> None:
    settings.llm.base_url = "http://127.0.0.1:9/v1"  # the discard port: nothing listens
    with serve_live(make_daemon()) as url:
        with pytest.raises(openai.APIStatusError) as failed:
            sdk(url).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert failed.value.status_code == 502
    assert "cannot be reached" in failed.value.message


def test_token_guards_the_proxy(make_daemon, serve_live, token: str, fake: FakeOpenAI) -> None:
    with serve_live(make_daemon(token=token)) as url:
        with pytest.raises(openai.AuthenticationError):
            sdk(url).models.list()
        models = openai.OpenAI(base_url=f"{url}/v1", api_key=token, max_retries=0).models.list()
    assert "test-model" in [m.id for m in models.data]
    assert fake.requests[-1].headers["authorization"] != f"Bearer {token}"


def test_project_header_selects_the_memory(
    proxy_url: str, fake: FakeOpenAI, settings: Settings, paths: Paths, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    (other / ".git").mkdir(parents=True)
    seed(settings, paths, other, "The other project deploys with fly launch")
    question = [{"role": "user", "content": "How does this project deploy?"}]
    sdk(proxy_url).chat.completions.create(model="test-model", messages=question)
    assert "fly launch" not in user_text(fake.chat_requests[-1])
    raw = sdk(proxy_url, default_headers={"X-Qwenmem-Project": str(other / "src")}).chat.completions
    (other / "src").mkdir()
    raw.create(model="test-model", messages=question)
    assert "fly launch" in user_text(fake.chat_requests[-1])


def test_llm_cli_works_through_the_proxy_by_base_url_alone(
    proxy_url: str, fake: FakeOpenAI, settings: Settings, paths: Paths, project: Path, tmp_path: Path
) -> None:
    """simonw's `llm`, configured only by an extra-openai-models.yaml with api_base."""
    seed(settings, paths, project)
    user_dir = tmp_path / "llm-home"
    user_dir.mkdir()
    (user_dir / "extra-openai-models.yaml").write_text(
        f'- model_id: qwenmem\n  model_name: test-model\n  api_base: "{proxy_url}/v1"\n',
        encoding="utf-8",
    )
    fake.script(Reply("tools/ship.sh", chunk_size=4))
    env = {**os.environ, "LLM_USER_PATH": str(user_dir), "OPENAI_API_KEY": ""}
    done = subprocess.run(
        [str(Path(sys.executable).with_name("llm")), "-m", "qwenmem", "--no-log", "Where is the deploy script?"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "tools/ship.sh"
    assert FACT in user_text(fake.chat_requests[-1])


def test_extraction_is_off_unless_the_daemon_turns_it_on(
    make_daemon, serve_live, fake: FakeOpenAI, settings: Settings
) -> None:
    settings.memory.extraction = True
    said = [{"role": "user", "content": "I deploy with make ship, remember that."}]

    def extraction_requests() -> list[dict]:
        return [b for b in fake.chat_requests if b["messages"][0].get("content") == EXTRACTION_SYSTEM_PROMPT]

    with serve_live(make_daemon()) as url:
        sdk(url).chat.completions.create(model="test-model", messages=said)
        sdk(url).chat.completions.create(model="test-model", messages=said)
    assert extraction_requests() == []
    fake.clear()
    fake.script(Reply("Noted: make ship."), Reply('{"memories": []}'))
    with serve_live(make_daemon(proxy_extract=True)) as url:
        sdk(url).chat.completions.create(model="test-model", messages=said)
        fake.wait_for_requests(2)
    (job,) = extraction_requests()
    transcript = job["messages"][1]["content"]
    assert "I deploy with make ship" in transcript and "Noted: make ship." in transcript


def test_odd_but_valid_json_is_forwarded_as_sent(proxy_url: str, fake: FakeOpenAI) -> None:
    """A lone surrogate escape is valid JSON: no 5xx, and the upstream gets it as sent."""
    body = b'{"model": "test-model", "messages": [{"role": "user", "content": "odd \\ud800 text"}]}'
    response = httpx.post(f"{proxy_url}/v1/chat/completions", content=body)
    assert response.status_code == 200, response.text
    assert "odd \ud800 text" in user_text(fake.chat_requests[-1])
