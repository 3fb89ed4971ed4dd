"""``qwenmem mcp``: argument parsing; the server loads only when the command runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `register` runs for every `qwenmem` command: nothing heavy up here
    from qwenmem_tui.config import Settings
    from qwenmem_tui.paths import Paths


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "mcp",
        help="serve this project's memory to MCP clients over stdio (Claude Code, qwen-code)",
        description="A Model Context Protocol server on stdin/stdout with the tools "
        "search_memory, remember, forget_memory and list_memories (contract §8). "
        "Setup: claude mcp add qwenmem -- qwenmem mcp",
    )
    parser.add_argument(
        "--project",
        type=Path,
        default=None,
        metavar="DIR",
        help="whose memory (default: the client's first root, else the current directory)",
    )
    # Its start builds what lives until exit (the SDK's and the runtime's modules): it
    # releases the collector itself once its runtime is open (collector.py).
    parser.set_defaults(func=run_mcp, holds_collector=True)


def run_mcp(args: argparse.Namespace, settings: Settings, paths: Paths) -> int:
    """Serve until the client closes stdin; exit 2 for a --project that is no directory."""
    project_dir: Path | None = args.project
    if project_dir is not None and not project_dir.is_dir():
        print(f"qwenmem mcp: --project {project_dir} is not a directory", file=sys.stderr)
        return 2
    from qwenmem_tui import debuglog

    secret = settings.api_key_value()
    # The secret scanner loads at the first tool call (server.MemoryBackend), not
    # during the handshake.
    logged = debuglog.configure(
        paths, "mcp", secrets=[secret] if secret else [], preload_scanner=False
    )
    if logged is None:
        import logging

        # No debug file: logs go nowhere rather than to the SDK's stderr console.
        logging.getLogger().addHandler(logging.NullHandler())
    import anyio

    from qwenmem_tui.mcp_server.server import serve_stdio

    anyio.run(lambda: serve_stdio(settings, paths, project_dir=project_dir, cwd=Path.cwd()))
    return 0
