"""The theme picked in the palette, kept for the next start.

Textual's palette changes the theme for the running app only: a user who picked one
met the default again at the next start. The pick is kept in a small private file in
the home (not written into config.toml, which is the user's own text); `ui.theme` in
the config, when set, still decides at start.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from qwenmem_tui.paths import Paths, private_dir

FILE_NAME = "tui-theme.json"


def _file(paths: Paths) -> Path:
    return paths.home / FILE_NAME


def remembered_theme(paths: Paths) -> str | None:
    """The theme picked last, if one was (a missing or damaged file: none)."""
    try:
        data = json.loads(_file(paths).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    name = data.get("theme") if isinstance(data, dict) else None
    return name if isinstance(name, str) and name else None


def remember_theme(paths: Paths, name: str) -> None:
    """Keep `name` for the next start: written beside and renamed over (a crash
    leaves the old choice, never half a file), 0600 like everything in the home."""
    private_dir(paths.home)
    target = _file(paths)
    temporary = target.with_suffix(".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "w", encoding="utf-8") as handle:
        json.dump({"theme": name}, handle)
    os.replace(temporary, target)
