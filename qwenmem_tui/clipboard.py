"""The system clipboard, where this machine has one (beside OSC 52, which the TUI
sends itself: it reaches the terminal's clipboard over SSH and through tmux).

Tried in order: pbcopy (macOS), wl-copy (Wayland), xclip and xsel (X11), clip.exe
(WSL); a display-server tool only when its display is set. Never raises.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys

log = logging.getLogger("qwenmem.clipboard")

COPY_TIMEOUT = 2.0
_TOOLS: tuple[tuple[str, tuple[str, ...], str | None], ...] = (
    ("pbcopy", (), None),
    ("wl-copy", (), "WAYLAND_DISPLAY"),
    ("xclip", ("-selection", "clipboard"), "DISPLAY"),
    ("xsel", ("--clipboard", "--input"), "DISPLAY"),
    ("clip.exe", (), None),
)


def system_copy(text: str) -> str | None:
    """Copy `text` with the first clipboard tool that works; its name, else None.
    Blocking (a subprocess): call it in a thread."""
    for name, args, display in _TOOLS:
        if name == "pbcopy" and sys.platform != "darwin":
            continue
        if display is not None and not os.environ.get(display):
            continue
        path = shutil.which(name)
        if path is None:
            continue
        try:
            subprocess.run(
                [path, *args],
                input=text.encode("utf-8"),
                check=True,
                timeout=COPY_TIMEOUT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            log.info("[CLIPBOARD] %s failed: %s", name, exc)
            continue
        return name
    return None
