"""Issue 16: first-run rough edges outside the chat screen — config and CLI checks,
the local model's profile, side calls giving way to the user, compaction backing off.
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from chat_support import chat_llm

from qwenmem_tui import cli
from qwenmem_tui.chat.tools import ToolContext, builtin_tools
from qwenmem_tui.config import Settings, load_settings
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.llm.errors import LLMError
from qwenmem_tui.llm.local_server import (
    _LOG_ROTATE_BYTES,
    LocalChatDefaults,
    _rotate,
)
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply

# -- [keys] -----------------------------------------------------------------------------


def _with_keys(home: Path, keys: str) -> None:
    config = home / "config.toml"
    config.write_text(config.read_text() + "\n[keys]\n" + keys)


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ('"app.quit" = "ctrl+nonsense"\n', "keys.app.quit: expected key names"),
        ('"app.qiut" = "ctrl+q"\n', 'unknown key "keys.app.qiut"'),
        ('"prompt.newline" = "ctrl+j,hyperspace+x"\n', "'hyperspace+x'"),
    ],
    ids=["bad-key-name", "unknown-binding-id", "bad-alternative"],
)
def test_bad_keys_stop_with_one_line_and_exit_2(
    home: Path,
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    keys: str,
    expected: str,
) -> None:
    _with_keys(home, keys)
    monkeypatch.chdir(project)
    assert cli.run([]) == 2
    out, err = capfd.readouterr()
    assert out == ""  # nothing drawn: the check runs before the full-screen view
    lines = err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0]
    assert str(home / "config.toml") in lines[0]


def test_valid_keys_are_accepted(home: Path) -> None:
    from qwenmem_tui.tui.app import QwenmemApp
    from qwenmem_tui.tui.keymap import checked_keymap

    _with_keys(home, '"app.quit" = "ctrl+x"\n"compaction.pin" = "f2"\n"memory.filter" = "slash"\n')
    settings = load_settings(home / "config.toml")
    assert checked_keymap(settings, QwenmemApp.BINDINGS) == {
        "app.quit": "ctrl+x",
        "compaction.pin": "f2",
        "memory.filter": "slash",
    }


# -- --resume with a wrong id -----------------------------------------------------------


def test_resume_with_a_wrong_id_is_one_line_before_the_screen_starts(
    home: Path, project: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(project)
    assert cli.run(["--resume", "badid"]) == 1
    out, err = capfd.readouterr()
    assert out == ""  # no alternate screen was entered and left
    assert err.strip() == f'qwenmem: No session with id "badid" in this project ({project}).'


# -- memory search on a terminal --------------------------------------------------------


def test_memory_search_without_a_query_on_a_terminal_prints_usage(home: Path, project: Path) -> None:
    controller, terminal = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "qwenmem_tui", "memory", "search"],
            stdin=terminal,
            capture_output=True,
            text=True,
            env={**os.environ, "QWENMEM_HOME": str(home)},
            cwd=project,
            timeout=60,
        )
    finally:
        os.close(controller)
        os.close(terminal)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("usage: qwenmem memory search TEXT")


# -- list_directory -----------------------------------------------------------------------


async def test_list_directory_hides_the_git_store(project: Path) -> None:
    (project / ".git" / "objects").mkdir(parents=True)
    (project / ".gitignore").write_text("*.pyc\n")
    result = await builtin_tools(project).call(
        "list_directory", json.dumps({"path": "."}), ToolContext(project_root=project, session_id="s")
    )
    assert result.content.splitlines() == [".gitignore", "README.md"]


# -- the local model's log and profile ------------------------------------------------


def test_the_local_model_log_is_rotated_past_a_bound(tmp_path: Path) -> None:
    log = tmp_path / "local-model.txt"
    log.write_bytes(b"x" * (_LOG_ROTATE_BYTES + 1))
    _rotate(log)
    assert not log.exists()
    assert (tmp_path / "local-model.txt.1").stat().st_size == _LOG_ROTATE_BYTES + 1
    assert _LOG_ROTATE_BYTES <= 1024 * 1024  # ~5 starts of llama.cpp output, not 25


def test_the_local_profile_turns_extraction_off_unless_configured(tmp_path: Path) -> None:
    defaults = LocalChatDefaults("short", 256, 4096, supports_tools=False)
    settings = Settings()
    defaults.apply_to(settings)
    assert settings.memory.extraction is False
    config = tmp_path / "config.toml"
    config.write_text("[memory]\nextraction = true\n")
    chosen = load_settings(config)
    defaults.apply_to(chosen)
    assert chosen.memory.extraction is True


async def test_temperature_is_sent_only_when_configured(fake: FakeOpenAI, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'[llm]\nbase_url = "{fake.base_url}"\ntemperature = 0.2\n')
    fake.script(Reply("with"), Reply("without"), Reply("side"))
    with_t = LLMClient.from_settings(load_settings(config, {}))
    without = LLMClient.from_settings(Settings(llm=chat_llm(fake.base_url)))
    try:
        await with_t.complete([{"role": "user", "content": "hi"}], temperature=None)
        await without.complete([{"role": "user", "content": "hi"}])
        await with_t.complete([{"role": "user", "content": "hi"}], temperature=0.0)
    finally:
        await with_t.aclose()
        await without.aclose()
    sent = [request.get("temperature", "absent") for request in fake.chat_requests]
    assert sent == [0.2, "absent", 0.0]  # a side query's own temperature wins


# -- side calls give way ----------------------------------------------------------------


class SideCallServer:
    """Answers "extract" (a side call) only when `free_side_calls` is set, like a busy
    single-slot server; every other request at once."""

    def __init__(self, fake: FakeOpenAI, free_side_calls: int) -> None:
        self.never = threading.Event()
        self.side_calls = 0
        self.free = free_side_calls
        fake.responder = self.respond

    def respond(self, body: dict) -> Reply:
        if body["messages"][-1]["content"] != "extract":
            return Reply("the reply")
        self.side_calls += 1
        if self.side_calls > self.free:
            return Reply("side call, again")
        return Reply("stuck", gate=self.never)


async def reply(llm: LLMClient) -> str:
    events = [e async for e in llm.stream_chat([{"role": "user", "content": "question"}])]
    return events[-1].completion.content  # type: ignore[union-attr]


async def test_a_users_request_cancels_a_side_call_which_runs_again_after_it(
    fake: FakeOpenAI,
) -> None:
    """The single-slot local server: the reply must not queue behind extraction."""
    server = SideCallServer(fake, free_side_calls=1)
    llm = LLMClient(base_url=fake.base_url, api_key="k", model="m", yield_side_calls=True)
    try:
        side = asyncio.create_task(llm.complete([{"role": "user", "content": "extract"}]))
        await asyncio.to_thread(fake.wait_for_requests, 1)
        assert await reply(llm) == "the reply"  # not stuck behind the side call
        assert (await side).content == "side call, again"  # retried once the reply ended
        assert llm.side_calls.deferrals == 1 and server.side_calls == 2
    finally:
        server.never.set()
        await llm.aclose()


async def test_a_side_call_gives_up_after_yielding_too_often(fake: FakeOpenAI) -> None:
    server = SideCallServer(fake, free_side_calls=99)
    llm = LLMClient(base_url=fake.base_url, api_key="k", model="m", yield_side_calls=True)
    try:
        side = asyncio.create_task(llm.complete([{"role": "user", "content": "extract"}]))
        for attempt in range(1, 5):
            await asyncio.to_thread(fake.wait_for_requests, 2 * attempt - 1)
            assert await reply(llm) == "the reply"
        with pytest.raises(LLMError) as raised:
            await side
        assert raised.value.kind == "yielded"
    finally:
        server.never.set()
        await llm.aclose()


async def test_side_calls_run_alongside_on_an_endpoint_that_serves_many(
    fake: FakeOpenAI,
) -> None:
    server = SideCallServer(fake, free_side_calls=1)
    llm = LLMClient(base_url=fake.base_url, api_key="k", model="m")  # the default: no gate
    try:
        side = asyncio.create_task(llm.complete([{"role": "user", "content": "extract"}]))
        await asyncio.to_thread(fake.wait_for_requests, 1)
        assert await reply(llm) == "the reply"
        assert not side.done() and server.side_calls == 1  # untouched, still running
        side.cancel()
    finally:
        server.never.set()
        await llm.aclose()
