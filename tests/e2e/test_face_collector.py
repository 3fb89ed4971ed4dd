"""`qwenmem mcp` and `qwenmem acp` start without collecting (issue 40 §3: their first
answer beside `llm prompt`).

What their start builds — the SDK's modules (the ACP schema alone is ~400 pydantic
models), the runtime's, the openai SDK's — lives until exit; Python's defaults ran ~300
collections over it. As for `-p`, the collector is held from launch until the face's
runtime is open, then collects again with all that frozen out. Each face runs as its
client starts it (the official SDK's client over stdio), in a probe that reads the
collector when the runtime has opened.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, spawn_agent_process
from acp.schema import ClientCapabilities, Implementation
from mcp.client import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.process_support import checkout_env

_PROBE = """
import atexit, gc, json, os, sys
from qwenmem_tui import cli, collector
from qwenmem_tui.acp.agent import QwenmemAgent
from qwenmem_tui.mcp_server.server import MemoryBackend

seen = {}
hold, release = collector.hold, collector.release


def holding():  # the CLI's hold, at launch: what the probe itself did is not counted
    hold()
    seen["before"] = [g["collections"] for g in gc.get_stats()]


def releasing(*, freeze):  # read at the release itself: after it, the face collects
    if freeze and "released" not in seen:
        seen["released"] = dict(
            by=sys._getframe(1).f_code.co_name,
            collections=[g["collections"] for g in gc.get_stats()],
        )
    release(freeze=freeze)


def reading(opened):
    async def probe(*args, **kwargs):
        runtime = await opened(*args, **kwargs)
        seen.setdefault("opened", dict(enabled=gc.isenabled(), frozen=gc.get_freeze_count()))
        return runtime
    return probe


collector.hold = holding
collector.release = releasing
MemoryBackend._open = reading(MemoryBackend._open)
QwenmemAgent._open_project = reading(QwenmemAgent._open_project)
atexit.register(lambda: open(os.environ["PROBE_OUT"], "w").write(json.dumps(seen)))
sys.exit(cli.run(sys.argv[1:]))
"""


def _env(out: Path) -> dict[str, str]:
    return {**checkout_env(os.environ), "PROBE_OUT": str(out), "QWENMEM_DEBUG_LOG_FILE": "0"}


def _held_until_open(out: Path) -> None:
    seen = json.loads(out.read_text())
    # Not one collection during the start, up to the release by the face's opening (read
    # there: once released, what runs before the probe's next look may collect, and did
    # once under load: 243 young collections against 242).
    released, opened = seen["released"], seen["opened"]
    assert released["collections"] == seen["before"], seen
    assert released["by"] in ("_open", "_open_project"), released  # the runtime's opening
    assert opened["enabled"] and opened["frozen"] > 50_000  # then collecting, start frozen


def _hash_embedder(home: Path) -> None:
    with (home / "config.toml").open("a", encoding="utf-8") as config:
        config.write('\n[memory]\nembedding = "hash"\nextraction = false\n')


async def test_mcp_holds_the_collector_until_its_runtime_is_open(home: Path, project: Path) -> None:
    _hash_embedder(home)
    out = project.parent / "probe.json"
    params = StdioServerParameters(
        command=sys.executable, args=["-c", _PROBE, "mcp"], env=_env(out), cwd=project
    )
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=60) as session:
                await session.initialize()
                result = await session.call_tool("list_memories", {})
                assert not result.is_error, result.content
    _held_until_open(out)


class _Quiet:
    """An ACP client that is sent nothing it must answer here."""

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        return None

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no tool asks here")


async def test_acp_holds_the_collector_until_its_runtime_is_open(home: Path, project: Path) -> None:
    _hash_embedder(home)
    out = project.parent / "probe.json"
    with (project.parent / "stderr.txt").open("ab") as errors:
        async with spawn_agent_process(
            _Quiet(), sys.executable, "-c", _PROBE, "acp", env=_env(out), cwd=project,
            transport_kwargs={"stderr": errors, "shutdown_timeout": 60},
        ) as (conn, _):  # fmt: skip
            await conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(),
                client_info=Implementation(name="test-editor", version="1.0"),
            )
            session = await conn.new_session(cwd=str(project))
            assert session.session_id
    _held_until_open(out)
