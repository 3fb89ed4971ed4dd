"""The per-session debug file: `QWENMEM_HOME/debug/<session_id>.txt` plus `latest.txt`.

Users never see tracebacks; they land here instead, so this file must be safe to paste
into a bug report: every line passes through a redactor that removes the configured
secrets and whatever the shared secret scanner (``qwenmem_tui/secrets.py``, the one memory
writes use) finds: provider keys, bearer tokens, passwords, private keys.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from qwenmem_tui import secrets as scanner
from qwenmem_tui.paths import Paths, private_file

DISABLE_ENV = "QWENMEM_DEBUG_LOG_FILE"
LOG_FORMAT = "%(asctime)s %(levelname)s [%(name)s] %(message)s"
REDACTED = scanner.REDACTED

_handler: logging.Handler | None = None


class Redactor:
    """Removes known secrets and key-shaped strings from text."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first, so a secret containing another is removed whole.
        self.secrets = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        # Log lines are written on the event loop: never wait for the plugins to load.
        return scanner.redact(text, complete=False)


class RedactingFormatter(logging.Formatter):
    """Redacts the whole formatted record, tracebacks included."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__(LOG_FORMAT)
        self.redactor = redactor

    def format(self, record: logging.LogRecord) -> str:
        return self.redactor(super().format(record))


class RedactingFilter(logging.Filter):
    """For other handlers (e.g. a test's caplog): redacts the message before any formatting."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = self.redactor(record.getMessage())
        record.args = None
        return True


class QuietFileHandler(logging.FileHandler):
    """A file handler that stays silent when its file cannot be written.

    logging's default answer to a failed write (a full disk) is a ``--- Logging error
    ---`` traceback on stderr, over the one line the user is being told; a lost debug
    line is the lesser harm. ``failed`` says the file is missing lines, so nobody is
    pointed at it for details.
    """

    failed = False

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        self.failed = True

    def flush(self) -> None:
        try:
            super().flush()
        except OSError:
            self.failed = True

    def close(self) -> None:
        # A new session or the end of a run: the file's buffer is flushed once more,
        # outside logging's error handling.
        try:
            super().close()
        except OSError:
            self.failed = True


def enabled(env: Mapping[str, str] = os.environ) -> bool:
    return env.get(DISABLE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def configure(
    paths: Paths,
    session_id: str,
    secrets: Iterable[str] = (),
    env: Mapping[str, str] = os.environ,
    *,
    preload_scanner: bool = True,
) -> Path | None:
    """Send `qwenmem.*` debug logs (and everyone's warnings) to this session's file.

    Calling it again (a resumed or new session) moves logging to the new file. Returns
    the file, or None when `QWENMEM_DEBUG_LOG_FILE=0`. `preload_scanner=False`: the
    caller starts the scanner's loading itself, later (`qwenmem mcp` answers its
    handshake first: the load would hold the GIL for ~0.4 s of it).
    """
    reset()
    # A session opens here (TUI or daemon): the secret scanner's plugins load off the
    # event loop now, so neither log lines nor the prompt history wait for them later.
    if preload_scanner:
        scanner.preload()
    if not enabled(env):
        return None
    safe_id = re.sub(r"[^A-Za-z0-9._-]", "_", session_id) or "session"
    path = paths.debug_dir / f"{safe_id}.txt"
    try:
        paths.ensure()  # private (0700) directories whatever the umask
        private_file(path)
        handler = QuietFileHandler(path, encoding="utf-8")
    except OSError:
        return None  # a full disk or a read-only home: run without the file, say nothing
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(RedactingFormatter(Redactor(secrets)))
    _point_latest(paths.debug_dir / "latest.txt", path.name)
    # On the root logger so library warnings land here too; only our loggers go to DEBUG.
    logging.getLogger().addHandler(handler)
    logging.getLogger("qwenmem").setLevel(logging.DEBUG)
    global _handler
    _handler = handler
    return path


def current_path() -> Path | None:
    """The file logs go to now, if any, and only while it holds every line: a file a
    write failed on (a full disk) is no place to send anyone for details."""
    if isinstance(_handler, logging.FileHandler) and not getattr(_handler, "failed", False):
        return Path(_handler.baseFilename)
    return None


def reset() -> None:
    """Detach and close the current file handler, if any."""
    global _handler
    if _handler is not None:
        logging.getLogger().removeHandler(_handler)
        _handler.close()
        _handler = None


def _point_latest(link: Path, target_name: str) -> None:
    """Swap the symlink atomically so a reader never sees it missing."""
    tmp = link.with_name(f".latest.{os.getpid()}.tmp")
    try:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target_name)
        os.replace(tmp, link)
    except OSError:
        tmp.unlink(missing_ok=True)  # e.g. no symlinks on this filesystem: the file still works
