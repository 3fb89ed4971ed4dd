"""`qwenmem -p QUESTION`: one answer, with memory and tools, printed, then exit (§15).

The habit people bring from `claude -p` and `qwen -p`: a script, an editor command or
a pipe asks once and reads the answer. A thin face on the runtime: it opens the
project's runtime, takes a ready chat (new, `--resume ID` or `--continue`), runs the
question through it exactly as the chat would (memory recalled, tools: the built-in
file tools and trusted MCP servers' only — nobody is there to be asked), and prints
the answer in the asked format. The session is an ordinary one (`qwenmem sessions`,
`qwenmem --resume`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TextIO

from qwenmem_tui import collector
from qwenmem_tui.chat.events import (
    AssistantDelta,
    Notice,
    QueryStarted,
    ToolCallFinished,
    ToolCallStarted,
)
from qwenmem_tui.config import Settings
from qwenmem_tui.llm.wire import JSONObject
from qwenmem_tui.paths import Paths, project_root
from qwenmem_tui.reply import ReplyCollector
from qwenmem_tui.runtime import Runtime, StartupError, bundled_model, check_resume
from qwenmem_tui.text import one_line, terminal_safe, terminal_safe_json, valid_text

FORMATS = ("text", "json", "stream-json")
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class QuestionError(Exception):
    """No question to answer; ``str(e)`` is the one line to show."""


def read_question(given: str, stdin: TextIO) -> str:
    """The question: `given`, or stdin when it is `-` (`-p` without text reads stdin
    when stdin is not a terminal: `echo hi | qwenmem -p`)."""
    if given == "-":
        if stdin.isatty():
            raise QuestionError("-p: give the question as an argument, or pipe it in on stdin")
        given = stdin.read()
    given = valid_text(given)
    if not given.strip():
        raise QuestionError("-p: the question is empty")
    return given


async def run_headless(args: argparse.Namespace, settings: Settings, paths: Paths) -> int:
    """The `-p` command: answer once, print it in `args.output_format`, exit."""
    try:
        question = await asyncio.to_thread(read_question, args.print, sys.stdin)
    except QuestionError as exc:
        print(f"qwenmem: {exc}", file=sys.stderr)
        return EXIT_USAGE
    with ExitStack() as stack:
        try:
            if isinstance(args.resume, str) and args.resume:
                # A wrong id is its one line before anything opens (a local model starts).
                args.resume = await check_resume(paths, Path.cwd(), args.resume)
            defaults, starter = bundled_model(settings, paths, stack)
            runtime = await Runtime.open(
                settings,  # its chat is not interactive: it waits for recall (api_wait_ms)
                paths,
                project_root(Path.cwd()),
                cwd=Path.cwd(),
                start_model=starter,
                model_defaults=defaults,
                wait_ready=True,
            )
        except StartupError as exc:
            print(f"qwenmem: {exc}", file=sys.stderr)
            return EXIT_FAILED
        try:
            return await _answer(runtime, args, question)
        finally:
            await runtime.close()


async def _answer(runtime: Runtime, args: argparse.Namespace, question: str) -> int:
    """Run the question in the chosen session and report it."""
    from qwenmem_tui import debuglog, secrets

    try:
        session = await _session_to_resume(runtime, args.resume)
    except StartupError as exc:
        print(f"qwenmem: {exc}", file=sys.stderr)
        return EXIT_FAILED
    await runtime.tools_settled()  # one request: a slow MCP server cannot join later
    chat = await runtime.open_chat(session)
    # What opening built (the SDK's and pydantic's classes, the features) lives until
    # exit: the collector was held for it, as for the chat's first frame, and leaves it
    # out of every later collection (the collections over `import openai` alone cost
    # a fifth of it).
    collector.release(freeze=True)
    secret = runtime.settings.api_key_value()
    debuglog.configure(runtime.paths, chat.info.id, secrets=[secret] if secret else [])
    # Nobody to ask, as the daemon: a secret is cut before the model, the session or
    # the log sees it, and stderr says what was cut.
    text, redacted = await asyncio.to_thread(secrets.redact_message, question)
    if redacted:
        print(f"qwenmem: cut from the question before sending: {', '.join(redacted)}", file=sys.stderr)
    report = _Report(args.output_format, chat.info.id, _stdout_line)
    try:
        async for event in chat.run_query(text):
            await report.handle(event)
    finally:
        await chat.close()
    return report.finish()


async def _session_to_resume(runtime: Runtime, resume: str | bool | None) -> str | None:
    """The session `--resume ID` or `--continue` names (None: a new one)."""
    if isinstance(resume, str) and resume:
        return (await runtime.find_session(resume)).id
    if resume:
        sessions = await runtime.store.list_sessions(runtime.project)
        if not sessions:
            raise StartupError(f"No session to continue in this project ({runtime.project}).")
        return sessions[0].id
    return None


def _stdout_line(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


class _Report(ReplyCollector):
    """The answer in one of FORMATS: `text` the reply alone, `json` one object,
    `stream-json` one event a line as the query runs, the last the `result`."""

    def __init__(self, output_format: str, session_id: str, write: Callable[[str], None]) -> None:
        super().__init__()
        self._streaming = output_format == "stream-json"
        self._format = output_format
        self._session_id = session_id
        self._write = write

    def _json(self, value: JSONObject) -> None:
        # The model's text is untrusted: an ESC (or a C1 control) reaching a terminal
        # acts on it; as a \u escape it is the same JSON value for a script.
        self._write(terminal_safe_json(json.dumps(value, ensure_ascii=False)))

    def _event(self, kind: str, **fields: object) -> None:
        if self._streaming:
            self._json({"type": kind, **fields})

    async def query_started(self, event: QueryStarted) -> None:
        self._event("start", sessionId=self._session_id)

    async def assistant_delta(self, event: AssistantDelta) -> None:
        await super().assistant_delta(event)
        if event.text:
            self._event("delta", text=event.text)

    async def tool_call_started(self, event: ToolCallStarted) -> None:
        call = event.call
        self._event("tool_call", id=call.id, name=call.name, arguments=call.arguments)

    async def tool_call_finished(self, event: ToolCallFinished) -> None:
        call = event.call
        self._event(
            "tool_result", id=call.id, name=call.name, result=event.result, isError=event.is_error
        )

    async def notice(self, event: Notice) -> None:
        self._event("notice", text=event.text, level=event.level)
        if not self._streaming and event.level in ("warning", "error"):
            print(f"qwenmem: {one_line(event.text)}", file=sys.stderr)

    def result(self) -> JSONObject:
        """The `json` answer (and the `stream-json` result's fields)."""
        return {
            "reply": self.text,
            "sessionId": self._session_id,
            "memories": self.memories,
            "usage": self.usage,
        }

    def finish(self) -> int:
        """Print the answer (a failure: its one line on stderr); the exit status."""
        if self.status in ("error", "context_limit"):
            print(f"qwenmem: {one_line(self.error or 'the model request failed')}", file=sys.stderr)
            return EXIT_FAILED
        if self.status == "cancelled":
            return EXIT_INTERRUPTED
        if self._streaming:
            self._event("result", **self.result())
        elif self._format == "json":
            self._json(self.result())
        else:  # to a terminal made harmless; to a pipe as the model wrote it
            self._write(terminal_safe(self.text) if _stdout_is_terminal() else self.text)
        return 0

