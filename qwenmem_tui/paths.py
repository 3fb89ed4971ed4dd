"""Where qwenmem keeps its files, and which project a directory belongs to."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

HOME_ENV = "QWENMEM_HOME"
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
# Group and other bits: any of them on a file under the home exposes chat history,
# memories or keys to other local users.
_SHARED_BITS = 0o077


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

    @property
    def exports_dir(self) -> Path:
        """Where /export writes without a file name: outside the project's work tree,
        where a session (the user's words, tool output) would be one `git add .` away
        from a commit."""
        return self.home / "exports"

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Paths:
        """`QWENMEM_HOME`, else `~/.qwenmem`."""
        raw = env.get(HOME_ENV, "").strip()
        home = Path(raw).expanduser() if raw else Path.home() / ".qwenmem"
        return cls(home.absolute())

    def ensure(self) -> None:
        """Create the directories lazily (a read-only command should not need a writable
        home), private to the user (0700) whatever the umask."""
        for directory in (self.home, self.index_dir, self.debug_dir, self.run_dir):
            private_dir(directory)


def private_dir(directory: Path) -> None:
    """``mkdir -p`` whose last directory is 0700 whatever the umask (an existing one is
    tightened); parents are left as the system makes them: they may not be ours."""
    directory.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    if stat.S_IMODE(directory.stat().st_mode) & _SHARED_BITS:
        directory.chmod(PRIVATE_DIR_MODE)


def private_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600 if missing, else drop its group/other bits.

    Done before a library (SQLite, FAISS, logging) opens it: SQLite then gives the
    ``-wal`` and ``-shm`` files the database file's mode. An existing file's content is
    never touched.
    """
    try:
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            PRIVATE_FILE_MODE,
        )
    except FileExistsError:
        tighten_file(path)
    else:
        os.close(fd)


def tighten_file(path: Path) -> bool:
    """Drop group/other bits of an existing regular file; True when it had some."""
    try:
        info = path.lstat()
        mode = stat.S_IMODE(info.st_mode)
        if not stat.S_ISREG(info.st_mode) or not mode & _SHARED_BITS:
            return False
        path.chmod(mode & ~_SHARED_BITS)
    except OSError:
        return False  # missing, or not ours to change: the open that follows will tell
    return True


def private_umask() -> None:
    """Make every file and directory this process creates private to its user.

    Called once at the CLI's start, before any thread: it covers what libraries create
    on their own (SQLite's ``-wal``/``-shm``, FAISS index files, the local model's log,
    exports) under a umask of 022, and keeps a stricter umask as it is.
    """
    os.umask(os.umask(_SHARED_BITS) | _SHARED_BITS)


def tighten_home(paths: Paths) -> str | None:
    """Drop group/other bits from the home and everything in it; a one-line notice
    when the home itself was open to others (made by an older qwenmem, or by hand).

    Loose entries inside a private home were never reachable by others: they are
    fixed without a word. ``config.toml`` is left alone: it is the user's file, and a
    loose one holding a key gets its own warning (``config.permission_warning``).
    Symlinks are not followed.
    """
    home = paths.home
    if not home.is_dir() or home.is_symlink():
        return None
    exposed = bool(stat.S_IMODE(home.stat().st_mode) & _SHARED_BITS)
    loose = 0
    for root, _dirs, files in os.walk(home):  # symlinked directories are not entered
        for path in (Path(root), *(Path(root, name) for name in files)):
            if path == paths.config_file:
                continue
            try:
                info = path.lstat()
            except OSError:
                continue
            mode = stat.S_IMODE(info.st_mode)
            if stat.S_ISLNK(info.st_mode) or not mode & _SHARED_BITS:
                continue
            try:
                path.chmod(mode & ~_SHARED_BITS)
            except OSError:
                continue  # e.g. another user's file in a shared home: nothing to do
            loose += 1
    if not exposed:
        return None
    entries = "entry" if loose == 1 else "entries"
    return (
        f"{home} was readable by other users; made it private "
        f"({loose} {entries} now 700/600, owner only)"
    )


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
