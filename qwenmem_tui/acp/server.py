"""``qwenmem acp``'s process: the protocol on stdio, the agent on the runtime.

Nothing but protocol goes to stdout: the SDK writes to a copy of the original stdout,
and file descriptor 1 then points at stderr, so a library (or the bundled model's
C code) printing something lands in the client's log instead of breaking the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from acp.agent.connection import AgentSideConnection
from acp.core import DEFAULT_STDIO_BUFFER_LIMIT_BYTES
from acp.stdio import stdio_streams
from acp.task import MessageSender, TaskSupervisor

from qwenmem_tui.acp.agent import QwenmemAgent
from qwenmem_tui.acp.transport import GuardedTransport
from qwenmem_tui.config import Settings
from qwenmem_tui.paths import Paths
from qwenmem_tui.runtime import ModelStarter, Runtime

if TYPE_CHECKING:
    from qwenmem_tui.llm.local_server import LocalChatDefaults


@contextlib.asynccontextmanager
async def protocol_streams() -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """stdin and (a copy of) stdout as the SDK's streams; fd 1 is stderr meanwhile."""
    protocol_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    shown, sys.stdout = sys.stdout, protocol_out
    try:
        reader, writer = await stdio_streams(limit=DEFAULT_STDIO_BUFFER_LIMIT_BYTES)
    finally:
        sys.stdout = shown
    try:
        yield reader, writer
    finally:
        writer.close()


async def serve_stdio(
    settings: Settings,
    paths: Paths,
    *,
    start_model: ModelStarter | None = None,
    model_defaults: LocalChatDefaults | None = None,
    version: str = "unknown",
) -> None:
    """Serve one client on stdio until it closes stdin (or SIGTERM/SIGINT)."""

    async def open_runtime(root: Path, cwd: Path) -> Runtime:
        return await Runtime.open(
            settings,
            paths,
            root,
            start_model=start_model,
            model_defaults=model_defaults,
            cwd=cwd,
            # The first prompt's recall needs memory open: a session waits for it.
            wait_ready=True,
        )

    agent = QwenmemAgent(open_runtime, version=version)
    supervisor = TaskSupervisor(source="qwenmem.acp")
    async with protocol_streams() as (reader, writer):
        transport = GuardedTransport(reader, MessageSender(writer, supervisor))
        conn = AgentSideConnection(agent, transport, listening=False)  # type: ignore[arg-type]  # acp's Agent protocol lists methods the agent leaves to defaults
        serving = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, serving.cancel)  # type: ignore[union-attr]
        try:
            await conn.listen()
        except asyncio.CancelledError:
            pass  # a signal: close as at the end of input
        finally:
            await agent.close()
            await conn.close()
            await supervisor.shutdown()
