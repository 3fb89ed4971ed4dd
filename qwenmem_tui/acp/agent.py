"""The ACP agent behind ``qwenmem acp`` (contract §16), on the official SDK.

An editor (Zed, a JetBrains IDE, a Neovim plugin, toad) spawns it and speaks the Agent
Client Protocol over stdio. Each ``session/new`` names the directory the user works
in: its project (git root, or the directory) is the session's, as ``qwenmem`` run
there would choose it, and the session is an ordinary qwenmem session: its ACP id is
the qwenmem session id, ``qwenmem sessions`` lists it, ``qwenmem --resume`` opens it,
``session/load`` brings any of the project's sessions back with its history replayed.

A thin face: the `Runtime` of each project (opened once, at its first session) hands
out ready chats; a prompt is one `ChatSession.run_query`, its events turned into
session updates by `updates.ReplyUpdates`. What the chat would ask the user (an
untrusted MCP tool) is asked with ``session/request_permission``; ``session/cancel``
is the TUI's Esc (the partial reply kept, marked interrupted). `/compact` and
`/recap` are offered as the session's commands. A failure is one line in a JSON-RPC
error, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from acp import PROTOCOL_VERSION, Client, RequestError
from acp.helpers import ContentBlock, SessionUpdate
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    McpCapabilities,
    NewSessionResponse,
    PermissionOption,
    PromptCapabilities,
    PromptResponse,
    SessionCapabilities,
    SessionInfo,
    SessionListCapabilities,
    ToolCallUpdate,
)

from qwenmem_tui import collector, secrets
from qwenmem_tui.acp.commands import COMMANDS, run_command, slash_command
from qwenmem_tui.acp.prompt import prompt_text
from qwenmem_tui.acp.updates import ReplyUpdates, Send, replay, tool_call_id
from qwenmem_tui.chat.events import QueryFinished
from qwenmem_tui.chat.session import ChatSession
from qwenmem_tui.features.mcp.feature import MCP_STATE
from qwenmem_tui.features.mcp.permissions import Decision, PermissionRequest
from qwenmem_tui.llm.wire import JSONObject
from qwenmem_tui.paths import project_root
from qwenmem_tui.runtime import Runtime, StartupError
from qwenmem_tui.storage.database import StorageError
from qwenmem_tui.text import one_line

if TYPE_CHECKING:
    from qwenmem_tui.features.assembly import SessionFeatures
    from qwenmem_tui.storage.sessions import SessionInfo as StoredSession

log = logging.getLogger("qwenmem.acp")

AGENT_NAME = "qwenmem"
SESSION_NOT_FOUND = -32002
"""ACP's "resource not found": a session id this project does not have."""
SHUTDOWN_DRAIN_SECONDS = 5.0
STOP_REASONS = {"ok": "end_turn", "cancelled": "cancelled", "turn_cap": "max_turn_requests"}
PERMISSION_OPTIONS = (
    PermissionOption(option_id=Decision.ONCE.value, name="Allow once", kind="allow_once"),
    PermissionOption(
        option_id=Decision.ALWAYS.value, name="Always allow in this project", kind="allow_always"
    ),
    PermissionOption(option_id=Decision.DENY.value, name="Deny", kind="reject_once"),
)

OpenRuntime = Callable[[Path, Path], Awaitable[Runtime]]
"""Opens the runtime of a project root for a session started in a directory of it."""
P = ParamSpec("P")
R = TypeVar("R")


def answers(method: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """A request handler whose every failure is a JSON-RPC error of one line: a
    protocol error as raised, a known one (storage, startup) as its own line, anything
    else as an internal error naming the exception (its traceback in the debug log)."""

    @functools.wraps(method)
    async def handler(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await method(*args, **kwargs)
        except RequestError:
            raise
        except (StartupError, StorageError) as exc:
            raise RequestError(-32603, one_line(str(exc))) from None
        except Exception as exc:
            log.exception("[ACP] %s failed", method.__name__)
            raise RequestError(-32603, one_line(f"Internal error: {type(exc).__name__}: {exc}")) from None

    return handler


@dataclass
class AcpSession:
    """One ACP session: a qwenmem chat of a project's runtime, and its running prompt."""

    runtime: Runtime
    chat: ChatSession
    features: SessionFeatures
    prompting: bool = False
    cancelled: bool = False  # session/cancel came before the query started
    updates: ReplyUpdates | None = None
    tasks: set[asyncio.Future[None]] = field(default_factory=set)

    @property
    def id(self) -> str:
        return self.chat.info.id


_asking: contextvars.ContextVar[AcpSession | None] = contextvars.ContextVar("acp_session", default=None)
"""The session whose query runs in this context: the one a permission request is for
(a runtime's MCP servers ask through one approver for all its sessions)."""


def _directory(cwd: str) -> Path:
    """A session's `cwd`: an absolute path to a directory, else invalid params."""
    path = Path(cwd) if isinstance(cwd, str) and "\x00" not in cwd else None
    if path is None or not path.is_absolute():
        raise RequestError.invalid_params({"cwd": "an absolute path is expected"})
    if not path.is_dir():
        raise RequestError.invalid_params({"cwd": f"{cwd} is not a directory"})
    return path


class QwenmemAgent:
    """The `acp.Agent`: sessions of every project the client opens, on their runtimes."""

    def __init__(self, open_runtime: OpenRuntime, *, version: str = "unknown") -> None:
        self._open_runtime = open_runtime
        self._version = version
        self._client: Client | None = None
        self._runtimes: dict[Path, asyncio.Task[Runtime]] = {}
        self._sessions: dict[str, AcpSession] = {}

    def on_connect(self, conn: Client) -> None:
        self._client = conn

    @property
    def client(self) -> Client:
        assert self._client is not None, "the SDK connects the client first"
        return self._client

    # -- the handshake -------------------------------------------------------------------

    @answers
    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=True,
                # Attachments arrive as references the model can read_file: their
                # content is not the user's own words (see prompt.py).
                prompt_capabilities=PromptCapabilities(image=False, audio=False, embedded_context=False),
                mcp_capabilities=McpCapabilities(http=False, sse=False),
                session_capabilities=SessionCapabilities(list=SessionListCapabilities()),
            ),
            agent_info=Implementation(name=AGENT_NAME, title="qwenmem", version=self._version),
            auth_methods=[],
        )

    @answers
    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        raise RequestError.invalid_params({"methodId": "qwenmem needs no authentication"})

    async def ext_method(self, method: str, params: JSONObject) -> JSONObject:
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: JSONObject) -> None:
        return None

    # -- sessions ------------------------------------------------------------------------

    async def _runtime_for(self, cwd: str) -> Runtime:
        """The runtime of `cwd`'s project, opened at its first session (a failed
        opening is tried again by the next session)."""
        where = _directory(cwd)
        root = project_root(where)
        task = self._runtimes.get(root)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = asyncio.create_task(self._open_project(root, where), name=f"acp-runtime-{root}")
            self._runtimes[root] = task
        return await asyncio.shield(task)

    async def _open_project(self, root: Path, cwd: Path) -> Runtime:
        try:
            runtime = await self._open_runtime(root, cwd)
        finally:
            # Held by the CLI since launch: what the SDK's schema and the runtime built
            # lives until exit, and is left out of every later collection.
            collector.release(freeze=True)
        servers = runtime.assembly.state(MCP_STATE)
        if servers:
            servers.approver = self._approve
            # The first prompt's tools include the configured servers' (each bounded
            # by its own timeout; one that fails is retried at its first call).
            opening = [s.opening for s in servers.servers.values() if s.opening is not None]
            if opening:
                await asyncio.wait(opening, timeout=max(s.timeout for s in servers.servers.values()))
        return runtime

    async def _open(self, runtime: Runtime, session: StoredSession | None) -> AcpSession:
        features = runtime.session_features()
        chat = await runtime.open_chat(session, features=features)
        acp_session = AcpSession(runtime, chat, features)
        previous = self._sessions.get(chat.info.id)
        if previous is not None:
            if previous.prompting:
                await chat.close()
                raise RequestError.invalid_request({"reason": "a prompt is running in this session"})
            await previous.chat.close()
        self._sessions[chat.info.id] = acp_session
        return acp_session

    @answers
    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        runtime = await self._runtime_for(cwd)
        session = await self._open(runtime, None)
        log.info("[ACP] new session %s in %s", session.id, runtime.project)
        self._later(session, self._offer_commands(session))
        return NewSessionResponse(session_id=session.id)

    @answers
    async def load_session(self, cwd: str, session_id: str, **kwargs: Any) -> LoadSessionResponse:
        runtime = await self._runtime_for(cwd)
        info = await runtime.store.get_session(session_id)
        if info is None or info.project != runtime.project:
            raise RequestError(
                SESSION_NOT_FOUND,
                f'No session with id "{session_id}" in this project ({runtime.project}).',
                {"sessionId": session_id},
            )
        session = await self._open(runtime, info)
        # Every update of the history goes out before the answer (the protocol's order).
        await replay(await session.chat.stored_items(), self._sender(session), runtime.project_root)
        log.info("[ACP] loaded session %s (%d items)", session.id, session.chat.item_count)
        self._later(session, self._offer_commands(session))
        return LoadSessionResponse()

    @answers
    async def list_sessions(self, cwd: str | None = None, **kwargs: Any) -> ListSessionsResponse:
        runtime = await self._runtime_for(cwd if cwd is not None else str(Path.cwd()))
        stored = await runtime.store.list_sessions(runtime.project)
        return ListSessionsResponse(
            sessions=[
                SessionInfo(
                    session_id=info.id,
                    cwd=str(runtime.project_root),
                    title=info.title or None,
                    updated_at=_iso(info.updated_at),
                )
                for info in stored
            ]
        )

    def _session(self, session_id: str) -> AcpSession:
        session = self._sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None:
            raise RequestError(
                SESSION_NOT_FOUND,
                f'No open session with id "{session_id}" (session/new or session/load first).',
                {"sessionId": session_id},
            )
        return session

    def _sender(self, session: AcpSession) -> Send:
        async def send(update: SessionUpdate) -> None:
            await self.client.session_update(session_id=session.id, update=update)

        return send

    def _later(self, session: AcpSession, work: Awaitable[None]) -> None:
        """Send after the answer that is being returned (the client knows the id then)."""
        task = asyncio.ensure_future(work)
        session.tasks.add(task)
        task.add_done_callback(session.tasks.discard)

    async def _offer_commands(self, session: AcpSession) -> None:
        try:
            await self._sender(session)(COMMANDS)
        except Exception:  # the client left meanwhile: nothing to offer it
            log.info("[ACP] could not offer the commands of session %s", session.id, exc_info=True)

    # -- prompts -------------------------------------------------------------------------

    @answers
    async def prompt(self, session_id: str, prompt: Sequence[ContentBlock], **kwargs: Any) -> PromptResponse:
        session = self._session(session_id)
        if session.prompting:
            raise RequestError.invalid_request({"reason": "a prompt is already running in this session"})
        text = prompt_text(prompt)
        if not text.strip():
            raise RequestError.invalid_params({"prompt": "nothing to send: the prompt has no text"})
        session.prompting, session.cancelled = True, False
        try:
            return await self._prompt(session, text)
        finally:
            session.prompting = False
            session.updates = None

    async def _prompt(self, session: AcpSession, text: str) -> PromptResponse:
        send = self._sender(session)
        command = slash_command(text)
        if command is not None:
            await run_command(command, session.chat, session.features, session.runtime.llm, send)
            return PromptResponse(stop_reason="end_turn")
        text, redacted = await asyncio.to_thread(secrets.redact_message, text)
        updates = session.updates = ReplyUpdates(send, session.runtime.project_root)
        if redacted:
            await updates.lines.line(
                f"⚠ Cut from your message before it was sent: {', '.join(redacted)}."
            )
        if session.cancelled:
            return PromptResponse(stop_reason="cancelled")
        outcome = None
        token = _asking.set(session)
        try:
            async for event in session.chat.run_query(text):
                await updates.handle(event)
                if isinstance(event, QueryFinished):
                    outcome = event.outcome
        finally:
            _asking.reset(token)
        assert outcome is not None  # run_query always ends with QueryFinished
        if outcome.status in STOP_REASONS:
            return PromptResponse(stop_reason=STOP_REASONS[outcome.status])
        raise RequestError(-32603, outcome.error or "The model request failed.", {"status": outcome.status})

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self._sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None or not session.prompting:
            return
        session.cancelled = True
        if session.chat.cancel():
            log.info("[ACP] cancelled the prompt of session %s", session_id)

    # -- permission ----------------------------------------------------------------------

    async def _approve(self, request: PermissionRequest) -> Decision:
        """Ask the client whether an MCP tool may run (the chat's approver)."""
        session = _asking.get()
        if session is None or session.updates is None:
            return Decision.DENY  # no prompt of ours is asking: nobody can allow it
        acp_id = running_call_id(session.chat, request.name)
        await session.updates.sent(acp_id)  # the tool call is on screen first
        try:
            answer = await self.client.request_permission(
                session_id=session.id,
                tool_call=ToolCallUpdate(
                    tool_call_id=acp_id, title=request.name, status="pending", raw_input=request.arguments
                ),
                options=list(PERMISSION_OPTIONS),
            )
        except RequestError as exc:
            log.warning("[ACP] the client could not ask for %s: %s", request.name, exc)
            return Decision.DENY
        except ConnectionError:
            answer = None
        if answer is not None and isinstance(answer.outcome, AllowedOutcome):
            try:
                return Decision(answer.outcome.option_id)
            except ValueError:
                return Decision.DENY
        # The client cancelled the prompt (or left): the turn ends, as Esc ends it.
        session.chat.cancel()
        await asyncio.Event().wait()  # the cancellation arrives here
        raise AssertionError("unreachable")

    # -- the end -------------------------------------------------------------------------

    async def close(self) -> None:
        """The client left: every chat closed (a running reply kept as interrupted),
        extraction of the last turns drained (bounded), every runtime closed."""
        sessions = list(self._sessions.values())
        self._sessions.clear()
        for session in sessions:
            for later in session.tasks:
                later.cancel()
            await session.chat.close()
        drains = [session.features.drain() for session in sessions]
        if drains:
            try:
                async with asyncio.timeout(SHUTDOWN_DRAIN_SECONDS):
                    await asyncio.gather(*drains)
            except TimeoutError:
                log.warning("[ACP] memory extraction still running at exit; dropped")
        for task in self._runtimes.values():
            if not task.done():
                task.cancel()
                await asyncio.wait({task})
            elif not task.cancelled() and task.exception() is None:
                await task.result().close()


def running_call_id(chat: ChatSession, name: str) -> str:
    """The ACP id of the call of `name` running now: the latest reply's first call of
    it that has no result yet (calls run one after the other)."""
    reply = next((item for item in reversed(chat.items) if item.type == "assistant"), None)
    if reply is None:
        return tool_call_id(None, "")
    answered = {
        str((item.message or {}).get("tool_call_id"))
        for item in chat.items
        if item.type == "tool" and item.id is not None and reply.id is not None and item.id > reply.id
    }
    for call in (reply.message or {}).get("tool_calls") or ():
        call_id = str(call.get("id", ""))
        if (call.get("function") or {}).get("name") == name and call_id not in answered:
            return tool_call_id(reply, call_id)
    return tool_call_id(reply, "")


def _iso(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).isoformat()
