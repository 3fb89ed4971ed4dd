"""Prompt history: what the user sent, per project, for Up/Down at the prompt.

One JSON-lines file under the home (mode 0600): `{"project", "text", "at"}` per line,
appended on every send, so several qwenmem windows of one project share their history
without a lock (each line is one short `O_APPEND` write). Secrets are redacted before
a line is written: the history must not become the one file where a pasted key
survives. The file is rewritten to its newest `MAX_ENTRIES` lines when it has grown
to twice that, so it stays small. A prompt over `MAX_ENTRY_CHARS` (a pasted log, a
whole file) is not kept: nobody walks back to it with Up, and scanning and storing
megabytes on every send would stall the prompt and grow the file without bound.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from qwenmem_tui.paths import private_file
from qwenmem_tui.secrets import redact

log = logging.getLogger("qwenmem.history")

HISTORY_FILE_NAME = "prompt-history.jsonl"
MAX_ENTRIES = 1000
"""Lines kept over all projects; older ones go when the file is compacted."""
MAX_ENTRY_CHARS = 16_000
"""The longest prompt the history keeps (about four pages of text)."""


class PromptHistory:
    """The sent prompts of one project, oldest first, backed by the shared file."""

    def __init__(
        self,
        path: Path,
        project: str,
        *,
        redact: Callable[[str], str] = redact,  # the scanner memory uses
        clock: Callable[[], float] = time.time,
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        self.path = path
        self.project = project
        self._redact = redact
        self._clock = clock
        self._max = max_entries
        self._entries: list[str] | None = None  # read on first use: not on the startup path

    @property
    def entries(self) -> list[str]:
        """This project's prompts, oldest first, without consecutive repeats."""
        if self._entries is None:
            self._entries = self._read()
        return self._entries

    def add(self, text: str) -> str:
        """Remember a sent prompt (secrets redacted); returns what was stored ("" for
        a prompt over ``MAX_ENTRY_CHARS``, which is not kept).

        A failing disk never costs the message: the entry still counts in memory.
        """
        if len(text) > MAX_ENTRY_CHARS:
            return ""  # too big to keep (see the module docstring): nothing stored
        stored = self._redact(text)
        entries = self.entries
        if entries and entries[-1] == stored:
            return stored
        entries.append(stored)
        line = json.dumps(
            {"project": self.project, "text": stored, "at": self._clock()}, ensure_ascii=False
        )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            private_file(self.path)  # 0600, and an existing file's mode tightened
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, (line + "\n").encode("utf-8"))
            finally:
                os.close(fd)
            self._compact_if_large()
        except OSError as exc:
            log.warning("[HISTORY] could not save the prompt history: %s", exc)
        return stored

    def _lines(self) -> list[str]:
        try:
            return self.path.read_text(encoding="utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.warning("[HISTORY] could not read the prompt history: %s", exc)
            return []

    def _read(self) -> list[str]:
        entries: list[str] = []
        for line in self._lines():
            with suppress(ValueError, AttributeError):
                record = json.loads(line)
                text = record.get("text")
                if (
                    record.get("project") == self.project
                    and isinstance(text, str)
                    and 0 < len(text) <= MAX_ENTRY_CHARS  # lines written before the cap
                ):
                    if not entries or entries[-1] != text:
                        entries.append(text)
        return entries

    def _compact_if_large(self) -> None:
        if self.path.stat().st_size < self._max * 80:  # cheap check before counting lines
            return
        lines = self._lines()
        if len(lines) < 2 * self._max:
            return
        temp = self.path.with_suffix(".tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines[-self._max :]) + "\n")
        temp.replace(self.path)


class HistoryCursor:
    """Walking the history with Up/Down from the prompt, like a shell.

    The text being typed when the walk starts is kept as the newest entry, so Down
    past the end gives it back.
    """

    def __init__(self, history: PromptHistory) -> None:
        self._history = history
        self._index: int | None = None  # None: not walking, the prompt shows the draft
        self._draft = ""

    @property
    def walking(self) -> bool:
        """An entry (not the draft) is shown: Up/Down keep walking, even over a command."""
        return self._index is not None

    def reset(self) -> None:
        """The user typed or sent: the next Up starts from the newest entry again."""
        self._index = None

    def older(self, current: str) -> str | None:
        """The entry before the one shown (None at the oldest)."""
        entries = self._history.entries
        if self._index is None:
            if not entries:
                return None
            self._draft = current
            self._index = len(entries)
        if self._index == 0:
            return None
        self._index -= 1
        return entries[self._index]

    def newer(self) -> str | None:
        """The entry after the one shown, the draft after the newest, None when not walking."""
        if self._index is None:
            return None
        entries = self._history.entries
        self._index += 1
        if self._index >= len(entries):
            self._index = None
            return self._draft
        return entries[self._index]
