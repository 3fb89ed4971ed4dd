"""``qwenmem acp``: argument parsing; the agent loads only when the command runs."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `register` runs for every `qwenmem` command: nothing heavy up here
    from qwenmem_tui.config import Settings
    from qwenmem_tui.paths import Paths


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "acp",
        help="an Agent Client Protocol agent on stdio (Zed, JetBrains, Neovim, toad)",
        description="Speak the Agent Client Protocol on stdin/stdout: editors start it "
        "and chat with qwenmem, memory and tools included, in the project of the "
        "directory they open (contract §16). Zed: add it to agent_servers in "
        "settings.json (see README).",
    )
    # Its start builds what lives until exit (the SDK's schema, the runtime's modules):
    # it releases the collector itself once its first runtime is open (collector.py).
    parser.set_defaults(func=run_acp, holds_collector=True)


def run_acp(args: argparse.Namespace, settings: Settings, paths: Paths) -> int:
    """Serve the client until it closes stdin; exit 1 with one line when the bundled
    model (no endpoint configured) cannot run."""
    import asyncio
    import logging
    from contextlib import ExitStack

    from qwenmem_tui import debuglog
    from qwenmem_tui.acp.server import serve_stdio
    from qwenmem_tui.runtime import StartupError, bundled_model

    secret = settings.api_key_value()
    # The secret scanner loads with the project's runtime, after the handshake.
    logged = debuglog.configure(
        paths, "acp", secrets=[secret] if secret else [], preload_scanner=False
    )
    if logged is None:
        # No debug file: logs go nowhere rather than to the client's stderr console.
        logging.getLogger().addHandler(logging.NullHandler())
    with ExitStack() as stack:
        try:
            defaults, starter = bundled_model(settings, paths, stack)
        except StartupError as exc:
            print(f"qwenmem acp: {exc}", file=sys.stderr)
            return 1
        asyncio.run(
            serve_stdio(settings, paths, start_model=starter, model_defaults=defaults, version=_version())
        )
    return 0


def _version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("qwenmem")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
