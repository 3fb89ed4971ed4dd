"""/copy and /export: take a reply or the whole session out of qwenmem.

/copy [N] puts the last (or N-th last) reply's Markdown on the clipboard through
OSC 52 (Textual's `copy_to_clipboard`: works over SSH and inside tmux) and the
system clipboard where one exists. /export [FILE] writes the session as Markdown
(`qwenmem_tui.features.export.formats`, the same text as `qwenmem sessions export`), JSON when FILE
ends in .json; it never overwrites a file. Without FILE it writes into
$QWENMEM_HOME/exports/ (private, like everything under the home), not the current
directory: that is usually a git work tree, and an export there is one `git add .` from
being committed.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING

from qwenmem_tui.chat.view import content_text
from qwenmem_tui.clipboard import system_copy
from qwenmem_tui.features.export.formats import ExportFormat, default_name, export_session
from qwenmem_tui.paths import private_dir
from qwenmem_tui.tui.extensions import AppContext, Extension, ExtensionFactory
from qwenmem_tui.tui.host import SlashCommand

if TYPE_CHECKING:
    from qwenmem_tui.storage.sessions import Item
    from qwenmem_tui.tui.host import Host


def replies(items: list[Item]) -> list[str]:
    """The text of every assistant reply that has some, oldest first."""
    texts = []
    for item in items:
        if item.type == "assistant":
            text = content_text((item.message or {}).get("content", item.content)).strip()
            if text:
                texts.append(text)
    return texts


async def _copy(app: Host, args: str) -> None:
    try:
        n = int(args) if args else 1
    except ValueError:
        app.show_error(f"/copy takes a number (1 = the last reply), not {args!r}.")
        return
    texts = replies(app.session.items)
    if n > len(texts) and app.session.earlier:  # further back than the window in memory
        texts = replies(await app.session.stored_items())
    if not texts:
        app.show_info("No reply to copy yet.")
        return
    if not 1 <= n <= len(texts):
        app.show_error(f"/copy {n}: this session has {len(texts)} repl{'y' if len(texts) == 1 else 'ies'}.")
        return
    text = texts[-n]
    app.copy_to_clipboard(text)  # OSC 52
    tool = await asyncio.to_thread(system_copy, text)
    which = "last reply" if n == 1 else f"reply {n} from the end"
    via = f"OSC 52 and {tool}" if tool else "OSC 52"
    app.show_info(f"Copied the {which} ({len(text)} characters, Markdown) to the clipboard ({via}).")


def _free_name(directory: Path, name: str) -> Path:
    path = directory / name
    stem, suffix = path.stem, path.suffix
    counter = 2
    while path.exists():
        path = directory / f"{stem}-{counter}{suffix}"
        counter += 1
    return path


async def _export(app: Host, args: str) -> None:
    session = app.session
    if args:
        path = Path(args).expanduser()
        if path.exists():
            app.show_error(f"{path} exists: qwenmem does not overwrite it; give another name.")
            return
    else:
        path = app.paths.exports_dir / default_name(session.info)
    fmt: ExportFormat = "json" if path.suffix.lower() == ".json" else "md"
    text = export_session(session.info, await session.stored_items(), fmt, now=app.clock())

    def write() -> None:
        nonlocal path
        if not args:
            private_dir(app.paths.exports_dir)
            path = _free_name(app.paths.exports_dir, path.name)
        # O_EXCL: never over a file; 0600: the session is the user's private text.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with open(fd, "w", encoding="utf-8") as handle:
            handle.write(text)

    try:
        await asyncio.to_thread(write)
    except OSError as exc:
        app.show_error(f"Could not write {path}: {exc.strerror or exc}")
        return
    app.show_info(f"Exported this session to {path} ({'JSON' if fmt == 'json' else 'Markdown'}).")


async def _build(context: AppContext) -> Extension:
    return Extension(
        name="export",
        commands=(
            SlashCommand("copy", "Copy the last (or N-th last) reply as Markdown", _copy, "[N]"),
            SlashCommand(
                "export",
                "Write this session to a Markdown (or .json) file (default: in $QWENMEM_HOME/exports)",
                _export,
                "[file]",
            ),
        ),
    )


export_extension = ExtensionFactory("export", _build)
