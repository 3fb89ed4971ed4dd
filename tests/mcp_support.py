"""MCP servers for the tests: a small one on the SDK (MCPServer, FastMCP's 2.x name)
and a misbehaving one of our own (dies, hangs, answers garbage), both real processes
spoken to over stdio like any server from PyPI."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

PYTHON = sys.executable
MCP_SERVER_TIME = str(Path(sys.executable).with_name("mcp-server-time"))
"""The real `mcp-server-time` from PyPI (installed in the test venv)."""

NOTES_SERVER = textwrap.dedent(
    '''
    """A notes server on the official SDK: a read-only tool and a writing one."""
    import sys
    from pathlib import Path

    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    NOTES = Path(sys.argv[1])
    server = MCPServer("notes")


    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def read_notes() -> str:
        """Read every note."""
        return NOTES.read_text() if NOTES.exists() else "(no notes)"


    @server.tool()
    def add_note(text: str) -> str:
        """Append a note to the notes file."""
        with NOTES.open("a") as handle:
            handle.write(text + "\\n")
        return f"added: {text}"


    @server.tool()
    def fail(reason: str) -> str:
        """Always fails."""
        raise ValueError(reason)


    server.run()
    '''
)

BROKEN_SERVER = textwrap.dedent(
    '''
    """A hand-written stdio MCP server that misbehaves as argv[1] says when called:
    "die" exits, "segv" and "kill" kill themselves with that signal, "hang" never
    answers, "garbage" prints a non-JSON line;
    "garbage-init" and "hang-init" misbehave already at initialize."""
    import json
    import os
    import signal
    import sys
    import time

    mode = sys.argv[1]


    def send(message):
        sys.stdout.write(json.dumps(message) + "\\n")
        sys.stdout.flush()


    TOOL = {"name": "poke", "description": "Misbehaves.",
            "inputSchema": {"type": "object", "properties": {}}}
    for line in sys.stdin:
        request = json.loads(line)
        method = request.get("method")
        if "id" not in request:
            continue  # a notification
        if method == "initialize":
            if mode == "hang-init":
                time.sleep(3600)
            if mode == "garbage-init":
                sys.stdout.write("this is not JSON-RPC\\n")
                sys.stdout.flush()
                continue
            send({"jsonrpc": "2.0", "id": request["id"], "result": {
                "protocolVersion": request["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "broken", "version": "1"}}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request["id"], "result": {"tools": [TOOL]}})
        elif method == "tools/call":
            if mode == "die":
                sys.exit(3)
            if mode in ("segv", "kill"):
                os.kill(os.getpid(), signal.SIGSEGV if mode == "segv" else signal.SIGKILL)
            if mode == "hang":
                time.sleep(3600)
            if mode == "garbage":
                sys.stdout.write("{not json at all\\n")
                sys.stdout.flush()
                continue
            send({"jsonrpc": "2.0", "id": request["id"], "result": {
                "content": [{"type": "text", "text": "poked"}]}})
        else:
            send({"jsonrpc": "2.0", "id": request["id"],
                  "error": {"code": -32601, "message": "no such method"}})
    '''
)


def write_servers(directory: Path) -> tuple[Path, Path]:
    """The two server scripts written into `directory`: (notes, broken)."""
    notes = directory / "notes_server.py"
    notes.write_text(NOTES_SERVER)
    broken = directory / "broken_server.py"
    broken.write_text(BROKEN_SERVER)
    return notes, broken
