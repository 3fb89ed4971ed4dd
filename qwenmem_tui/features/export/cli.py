"""Export on the command line: `qwenmem sessions export ID [--format md|json] [-o FILE]`
(contract §12), the same file /export writes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from qwenmem_tui.paths import Paths, project_id, project_root

if TYPE_CHECKING:  # `register` runs for every `qwenmem` command: nothing heavy up here
    from qwenmem_tui.config import Settings
    from qwenmem_tui.features.feature import Commands


def register(commands: Commands) -> None:
    export = commands.sessions.add_parser(
        "export",
        help="write one session as Markdown or JSON",
        description="Write a session of this project as Markdown (tool calls folded, "
        "the features' asides marked) or JSON; secrets are redacted.",
    )
    export.add_argument("id", metavar="ID", help="the session id, or any unique prefix of it")
    export.add_argument("--format", choices=("md", "json"), default="md", help="default: md")
    export.add_argument("-o", "--output", type=Path, metavar="FILE", help="default: stdout")
    export.add_argument(
        "--force", action="store_true", help="replace FILE if it exists (never through a link)"
    )
    export.set_defaults(func=export_session_command)


async def export_session_command(args: argparse.Namespace, settings: Settings, paths: Paths) -> int:
    """`qwenmem sessions export ID`: read through the runtime's light read path (the
    database alone, never created)."""
    from qwenmem_tui.features.export.files import ExportRefused, write_export
    from qwenmem_tui.features.export.formats import export_session
    from qwenmem_tui.reads import StartupError, find_session, session_reader

    project = project_id(project_root(Path.cwd()))
    async with session_reader(paths) as store:
        try:
            info = await find_session(store, project, args.id)
        except StartupError as exc:
            print(f"qwenmem: {exc}", file=sys.stderr)
            return 1
        assert store is not None  # a session was found in it
        text = export_session(info, await store.load_items(info.id), args.format)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        write_export(args.output, text, force=args.force)
    except ExportRefused as exc:
        print(f"qwenmem: {exc}", file=sys.stderr)
        return 1
    print(f"Exported session {info.id} to {args.output}", file=sys.stderr)
    return 0
