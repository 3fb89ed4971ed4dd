"""Where qwenmem keeps its files, and which project a directory belongs to."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

HOME_ENV = "QWENMEM_HOME"


@dataclass(frozen=True)
class Paths:
    """Every file lives under one home so a test (or a user) can move it all with one env var."""

    home: Path

    @property
    def config_file(self) -> Path:
        return self.home / "config.toml"

    @property
    def db_file(self) -> Path:
        return self.home / "qwenmem.db"

    @property
    def index_dir(self) -> Path:
        return self.home / "index"

    @property
    def debug_dir(self) -> Path:
        return self.home / "debug"

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Paths:
        """`QWENMEM_HOME`, else `~/.qwenmem`."""
        raw = env.get(HOME_ENV, "").strip()
        home = Path(raw).expanduser() if raw else Path.home() / ".qwenmem"
        return cls(home.absolute())

    def ensure(self) -> None:
        """Create the directories lazily: a read-only command should not need a writable home."""
        for directory in (self.home, self.index_dir, self.debug_dir, self.run_dir):
            directory.mkdir(parents=True, exist_ok=True)


def project_root(cwd: Path) -> Path:
    """The git root above `cwd` (a `.git` dir or file, as in worktrees), else `cwd` itself."""
    start = cwd.resolve()
    for candidate in (start, *start.parents):
        if (candidate / ".git").exists():
            return candidate
    return start


def project_id(root: Path) -> str:
    """Sessions and memories are keyed by the resolved root path: stable and readable."""
    return str(root.resolve())
